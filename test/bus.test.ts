/** The bus hands one EncodedEvent to every subscriber (each encoding computed at most once); a feed over it is exact whatever order events arrive in. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { unpack } from 'msgpackr';
import fs from 'node:fs';
import { EventBus } from '../src/events/bus.js';
import { EventFeed } from '../src/events/feed.js';
import { SqliteStore } from '../src/store/sqlite.js';
import { tempDir, waitFor } from './support/daemon.js';
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

test('a feed that receives a later seq first reads the gap from the store: each event once, in seq order', async (t) => {
  const dir = tempDir();
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  // the store publishes nothing itself: the test plays the bus, out of order (as events of two nodes can arrive)
  const store = new SqliteStore(dir);
  t.after(() => store.close());
  const bus = new EventBus();
  const got: number[] = [];
  let ended = false;
  const feed = new EventFeed(
    bus,
    store,
    'c',
    { send: (ev) => (got.push(ev.seq!), true), drained: async () => {}, overflow: () => assert.fail('no overflow'), ended: () => (ended = true) },
    { afterSeq: 0 },
  );
  await feed.done;
  const evs = (
    await store.appendMany(
      'c',
      Array.from({ length: 5 }, () => ({ kind: 'PauseEvent' as const, source: 'user' as const })),
    )
  ).map((e) => new EncodedEvent(e));
  for (const i of [2, 0, 1, 4, 3]) bus.publish('c', evs[i]!);
  await waitFor(() => got.length === 5, 'the feed to read the gap');
  assert.deepEqual(got, [1, 2, 3, 4, 5]);
  bus.end('c');
  assert.equal(ended, true, 'ending the topic ends the feed');
  assert.equal(bus.subscriberCount('c'), 0);
});

test("a feed from a timestamp no stored event reaches starts at the log's end: the next live event comes alone, not the whole log", async (t) => {
  const dir = tempDir();
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  const store = new SqliteStore(dir);
  t.after(() => store.close());
  const bus = new EventBus();
  await store.appendMany(
    'c',
    Array.from({ length: 4 }, () => ({ kind: 'PauseEvent' as const, source: 'user' as const })),
  );
  const got: number[] = [];
  const feed = new EventFeed(
    bus,
    store,
    'c',
    { send: (ev) => (got.push(ev.seq!), true), drained: async () => {}, overflow: () => assert.fail('no overflow') },
    { sinceTimestamp: new Date(Date.now() + 60_000).toISOString() },
  );
  t.after(() => feed.close());
  await feed.done;
  assert.deepEqual(got, [], 'nothing stored is that recent');
  const [next] = await store.appendMany('c', [{ kind: 'PauseEvent' as const, source: 'user' as const }]);
  bus.publish('c', new EncodedEvent(next!));
  await waitFor(() => got.length > 0, 'the live event');
  // give a gap read (the bug: from seq 0) the time to deliver the old events
  await store.query('c', { afterSeq: 0, limit: 10 });
  await new Promise((r) => setImmediate(r));
  assert.deepEqual(got, [5]);
});
