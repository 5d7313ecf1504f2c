/** The bus hands one EncodedEvent to every subscriber: each encoding is computed at most once. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { unpack } from 'msgpackr';
import { EventBus } from '../src/events/bus.js';
import { EncodedEvent } from '../src/events/types.js';

test('one encoding per event however many subscribers; a throwing subscriber harms no one', () => {
  const bus = new EventBus();
  const seen: EncodedEvent[] = [];
  let stringifies = 0;
  const original = JSON.stringify;
  JSON.stringify = ((...a: Parameters<typeof JSON.stringify>) => (stringifies++, original(...a))) as typeof JSON.stringify;
  try {
    for (let i = 0; i < 100; i++) bus.subscribe('c', (ev) => (seen.push(ev), ev.json, ev.msgpack));
    bus.subscribe('c', () => {
      throw new Error('bad subscriber');
    });
    const ev = new EncodedEvent({ kind: 'PauseEvent', id: 'x', seq: 1, timestamp: 't', source: 'user' });
    bus.publish('c', ev);
    assert.equal(seen.length, 100);
    assert.ok(seen.every((e) => e === ev));
    assert.equal(stringifies, 1, 'JSON encoded once');
  } finally {
    JSON.stringify = original;
  }
  assert.equal(seen[0]!.msgpack, seen[99]!.msgpack, 'the same msgpack buffer');
  assert.deepEqual(unpack(seen[0]!.msgpack), seen[0]!.event);
  assert.equal(bus.subscriberCount('other'), 0);
});
