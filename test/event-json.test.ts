/**
 * src/events/event-json.ts: the store's serialisation of events is exactly `JSON.stringify`, for the
 * hot path's own shape (written directly) and for every shape near it (which must fall back).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { serializeEvent } from '../src/events/event-json.js';

const message = (content: unknown[], extra: Record<string, unknown> = {}) => ({
  kind: 'MessageEvent',
  source: 'user',
  llm_message: { role: 'user', content },
  id: '0193a000-0000-7000-8000-000000000001',
  seq: 7,
  timestamp: '2026-11-26T10:00:00.000Z',
  ...extra,
});
const text = (t: string, cache = false) => ({ text: t, type: 'text', cache_prompt: cache });

const same = (value: object, why: string) => assert.equal(serializeEvent(value), JSON.stringify(value), why);

test('the hot path’s message, with texts that need escaping, is exactly JSON.stringify', () => {
  for (const t of [
    'hello',
    '',
    'quote " backslash \\ slash /',
    'tab\tnewline\n\r\u0000\u001f',
    'ü € 😀',
    'lone \ud800 surrogate \udfff',
    '\u2028\u2029',
    '<script>',
  ]) {
    same(message([text(t)]), JSON.stringify(t));
    same(message([text(t, true), text(t)]), `two items: ${JSON.stringify(t)}`);
  }
  same(message([]), 'no items');
  for (const seq of [0, 1, 2 ** 53, 1.5, -0, NaN, Infinity]) same(message([text('x')], { seq }), `seq ${seq}`);
  same(message([text('x')], { source: 'agent' }), 'another source');
  same({ ...message([text('x')]), llm_message: { role: 'assistant', content: [text('y')] } }, 'another role');
});

test('every shape near it falls back to JSON.stringify and gives the same text', () => {
  const base = message([text('x')]);
  const { seq, ...noSeq } = base;
  const variants: [object, string][] = [
    [noSeq, 'a missing key'],
    [{ ...noSeq, seq }, 'the same keys in order (seq last)'],
    [{ seq, ...noSeq }, 'another order'],
    [{ ...base, extra: 1 }, 'an extra key'],
    [{ ...base, kind: 'ActionEvent' }, 'another kind'],
    [{ ...base, id: undefined }, 'an undefined value'],
    [{ ...base, source: null }, 'a null source'],
    [{ ...base, timestamp: 5 }, 'a number timestamp'],
    [{ ...base, llm_message: null }, 'no message'],
    [{ ...base, llm_message: { content: [text('x')], role: 'user' } }, 'message keys in another order'],
    [{ ...base, llm_message: { role: 'user', content: 'x' } }, 'content not an array'],
    [{ ...base, llm_message: { role: 'user', content: [text('x')], name: 'n' } }, 'an extra message key'],
    [message([{ type: 'image', image_urls: ['data:,x'] }]), 'an image item'],
    [message([{ type: 'text', text: 'x', cache_prompt: false }]), 'item keys in another order'],
    [message([{ text: 'x', type: 'text' }]), 'an item without cache_prompt'],
    [message([{ ...text('x'), toJSON: () => 'replaced' }]), 'an item with toJSON'],
    [message([Object.assign(Object.create(null), text('x'))]), 'a null-prototype item'],
    [
      message([
        new (class T {
          text = 'x';
          type = 'text';
          cache_prompt = false;
        })(),
      ]),
      'a class instance',
    ],
    [message([text('x'), null]), 'a null item'],
    // biome-ignore lint/suspicious/noSparseArray: the hole is what is tested
    [message([, text('x')] as unknown[]), 'a hole'],
    [message([{ text: 1, type: 'text', cache_prompt: false }]), 'a number text'],
    [message([{ text: 'x', type: 'text', cache_prompt: 'no' }]), 'a string cache_prompt'],
    [{ ...base, toJSON: () => ({ replaced: true }) }, 'an event with toJSON'],
  ];
  for (const [v, why] of variants) same(v, why);
});

test('random events made from the message’s parts: always the same text as JSON.stringify', () => {
  let s = 42;
  const rnd = (n: number) => (s = (s * 1103515245 + 12345) & 0x7fffffff) % n;
  const values = [undefined, null, 0, 1.25, -0, 'x', 'e"\\\n', true, false, [], {}, [text('a')], text('b')];
  const keys = ['kind', 'source', 'llm_message', 'id', 'seq', 'timestamp', 'role', 'content', 'text', 'type', 'cache_prompt', 'other'];
  for (let i = 0; i < 3000; i++) {
    const ev = JSON.parse(JSON.stringify(message([text('t'), text('u', true)])));
    const target = [ev, ev.llm_message, ev.llm_message.content[0], ev.llm_message.content[1]][rnd(4)];
    const op = rnd(4);
    const k = keys[rnd(keys.length)]!;
    if (op === 0) target[k] = values[rnd(values.length)];
    else if (op === 1) delete target[k];
    else if (op === 2) {
      const v = target[k];
      delete target[k];
      if (v !== undefined) target[k] = v; // moved to the end
    } else ev.kind = ['MessageEvent', 'ActionEvent'][rnd(2)];
    same(ev, JSON.stringify(ev));
  }
});
