/**
 * The MAX_EVENT_BYTES bound as the event log applies it (src/events/cap.ts): what fits is appended
 * untouched, what does not is cut until its JSON fits, text and structure alike.
 */
import assert from 'node:assert/strict';
import test from 'node:test';
import { capEvent, fitsEvent, jsonBytes } from '../src/events/cap.js';

const MAX = 64 * 1024;

test('a small event passes as the same object; a large string is cut in the middle with a marker', () => {
  const small = { kind: 'MessageEvent', llm_message: { role: 'user', content: [{ type: 'text', text: 'hi' }] } };
  assert.equal(capEvent(small, MAX), small);
  const text = `HEAD${'x'.repeat(300_000)}TAIL`;
  const big = { kind: 'ObservationEvent', observation: { kind: 'TerminalObservation', content: [{ type: 'text', text }] } };
  const capped = capEvent(big, MAX);
  assert.ok(jsonBytes(capped) <= MAX, `${jsonBytes(capped)} > ${MAX}`);
  const out = capped.observation.content[0]!.text;
  assert.ok(out.startsWith('HEAD') && out.endsWith('TAIL'));
  assert.match(out, /bytes cut here: an event may hold at most 65536 bytes \(MAX_EVENT_BYTES\)/);
  assert.equal(big.observation.content[0]!.text, text, 'the draft itself is not changed');
});

test('structure without text is not free: nested empty arrays are measured and cut to fit', () => {
  const args = { kind: 'ActionEvent', tool_call: { arguments: Array.from({ length: 50_000 }, () => []) } };
  assert.ok(jsonBytes(args) > MAX);
  assert.equal(fitsEvent(args, MAX), false);
  const capped = capEvent(args, MAX);
  assert.ok(jsonBytes(capped) <= MAX, `${jsonBytes(capped)} > ${MAX}`);
  const kept = capped.tool_call.arguments as unknown[];
  assert.match(String(kept.at(-1)), /bytes cut here.*items\)/s);
  assert.equal(capped.kind, 'ActionEvent');
});

test('multi-byte text: the bound counts UTF-8 bytes and a surrogate pair is never split', () => {
  const text = '😀'.repeat(100_000);
  const capped = capEvent({ kind: 'MessageEvent', text }, MAX);
  assert.ok(jsonBytes(capped) <= MAX);
  assert.doesNotMatch(capped.text, /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/);
});
