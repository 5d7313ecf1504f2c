/**
 * The hot path's hand-written input check (src/api/quick-input.ts) against the schema it stands in
 * for: whatever it accepts, the schema accepts with the same output, byte for byte as JSON (the
 * event is built from it); whatever is unusual it leaves to the schema.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { operations, runOperation } from '../src/api/operations.js';
import { quickSendMessageInput } from '../src/api/quick-input.js';
import { ApiSchemas } from '../src/api/schemas.js';

const ID = '0192f0a1-7b2c-7d3e-8f40-123456789abc';

const usual: unknown[] = [
  { conversation_id: ID, message: { role: 'user', content: [{ type: 'text', text: 'hello' }], run: false } },
  { conversation_id: ID, message: { content: [{ text: 'no type, no role, no run' }] } },
  { conversation_id: ID, message: {} },
  { conversation_id: ID, message: { role: 'assistant', content: [], run: true } },
  {
    conversation_id: ID,
    message: {
      role: 'tool',
      content: [
        { text: 'a', cache_prompt: true },
        { text: '', type: 'text', cache_prompt: false },
      ],
    },
  },
  { conversation_id: ID, message: { role: 'system', content: [{ cache_prompt: true, type: 'text', text: 'keys in another order' }], run: true } },
];

const unusual: unknown[] = [
  null,
  [],
  'text',
  {},
  { conversation_id: ID },
  { conversation_id: ID.toUpperCase(), message: {} }, // normalised by the schema
  { conversation_id: ID.replace(/-/g, ''), message: {} },
  { conversation_id: 'not-an-id', message: {} },
  { conversation_id: ID, message: { role: 'admin' } },
  { conversation_id: ID, message: { run: 'yes' } },
  { conversation_id: ID, message: { content: 'text' } },
  { conversation_id: ID, message: { content: [{ text: 1 }] } },
  { conversation_id: ID, message: { content: [{ text: 'x', type: 'image' }] } },
  { conversation_id: ID, message: { content: [{ text: 'x', extra: 1 }] } },
  { conversation_id: ID, message: { content: [{ type: 'image', image_urls: ['https://example.com/a.png'] }] } },
  { conversation_id: ID, message: { content: [{ text: 'x', cache_prompt: 'no' }] } },
  { conversation_id: ID, message: { content: [null] } },
  { conversation_id: ID, message: { content: [[]] } },
  { conversation_id: ID, message: { extra: true } },
  { conversation_id: ID, message: [] },
  { conversation_id: ID, message: null },
  { conversation_id: ID, message: {}, extra: 1 },
  JSON.parse(`{"conversation_id":"${ID}","message":{"__proto__":{"run":true}}}`),
  JSON.parse(`{"conversation_id":"${ID}","message":{"content":[{"text":"x","__proto__":{"a":1}}]}}`),
];

test('the usual inputs take the quick path and give exactly what the schema gives', () => {
  for (const raw of usual) {
    const quick = quickSendMessageInput(raw);
    assert.notEqual(quick, undefined, JSON.stringify(raw));
    assert.equal(JSON.stringify(quick), JSON.stringify(ApiSchemas.SendMessageInput.parse(raw)), JSON.stringify(raw));
  }
});

test('anything unusual is left to the schema', () => {
  for (const raw of unusual) assert.equal(quickSendMessageInput(raw), undefined, JSON.stringify(raw));
});

test('random variations: the quick path never accepts what the schema refuses, nor answers differently', () => {
  const values: unknown[] = [undefined, null, 0, 1, true, false, '', 'text', 'user', 'assistant', 'image', [], {}, [{}], [{ text: 'x' }], ID, ID.toUpperCase()];
  const keys = ['conversation_id', 'message', 'role', 'content', 'run', 'text', 'type', 'cache_prompt', 'image_urls', 'other'];
  let seed = 12345;
  const rnd = (n: number) => ((seed = (seed * 1103515245 + 12345) & 0x7fffffff), seed % n);
  const pick = <T>(a: T[]) => a[rnd(a.length)]!;
  let quickTaken = 0;
  for (let i = 0; i < 5000; i++) {
    const base = structuredClone(pick(usual)) as { message: Record<string, unknown> & { content?: Record<string, unknown>[] } } & Record<string, unknown>;
    const where = rnd(3) === 0 ? base : rnd(2) === 0 ? base.message : (base.message.content?.[0] ?? base.message);
    const k = pick(keys);
    const v = pick(values);
    if (v === undefined) delete (where as Record<string, unknown>)[k];
    else (where as Record<string, unknown>)[k] = v;
    const quick = quickSendMessageInput(base);
    if (quick === undefined) continue;
    quickTaken += 1;
    const schema = ApiSchemas.SendMessageInput.safeParse(base);
    assert.ok(schema.success, `quick accepted what the schema refuses: ${JSON.stringify(base)}`);
    assert.equal(JSON.stringify(quick), JSON.stringify(schema.data), JSON.stringify(base));
  }
  assert.ok(quickTaken > 200, `the quick path was taken ${quickTaken} times`);
});

test('REST goes through the quick path for sendMessage, and through the schema otherwise', async () => {
  const seen: unknown[] = [];
  const core = { service: { sendMessage: async (id: string, msg: unknown) => (seen.push([id, msg]), { success: true }) } } as never;
  assert.equal(typeof operations.sendMessage.quick, 'function');
  await runOperation(core, 'sendMessage', usual[1]);
  await runOperation(core, 'sendMessage', { conversation_id: ID.toUpperCase(), message: {} });
  assert.deepEqual(seen, [
    [ID, { role: 'user', content: [{ text: 'no type, no role, no run', type: 'text', cache_prompt: false }], run: false }],
    [ID, { role: 'user', content: [], run: false }],
  ]);
  await assert.rejects(runOperation(core, 'sendMessage', { conversation_id: ID, message: { role: 'admin' } }), (e: Error) => e.name === 'ZodError');
});
