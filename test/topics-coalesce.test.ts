/**
 * The live topics' coalescing window (bridge/topics.ts): a conversation's event is published at once
 * when its topic published nothing for a window; events that follow sooner are held and published
 * together, in seq order, when the window ends; a socket handing over at a held event's seq is
 * subscribed right after that event's publication, so it misses nothing and gets nothing twice. The
 * topic runs here on a stand-in for uWS that records each publish (the real fan-out, gaps and
 * back-pressure are test/ws-fanout.test.ts's, against a daemon).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { LiveTopics, type TopicMember } from '../bridge/topics.js';
import type { TemplatedApp, WebSocket } from '../bridge/uws.js';
import type { FeedSink } from '../src/events/feed.js';
import { EncodedEvent, type ParleyEvent } from '../src/events/types.js';
import { waitFor } from './support/daemon.js';

/** What the stand-in app saw: each publish (topic, seq) and each subscription, in order. */
type Seen = ['publish', string, number] | ['subscribe', string, string];

/** `busyEvents`: the load gate (0: always coalesce, as the window's own tests want; 'default': the daemon's). */
function setup(coalesceMs: number, busyEvents: number | 'default' = 0) {
  const seen: Seen[] = [];
  const app = {
    publish: (topic: string, message: string) => {
      seen.push(['publish', topic, (JSON.parse(message) as { seq: number }).seq]);
      return true;
    },
  } as unknown as TemplatedApp;
  let sink: FeedSink | null = null;
  const topics = new LiveTopics(
    app,
    (_id, s) => {
      sink = s;
      return { close: () => {} } as never;
    },
    1 << 30,
    coalesceMs,
    busyEvents === 'default' ? undefined : busyEvents,
  );
  const member = (name: string, cursor: number): TopicMember & { cursor: number; live: boolean } => {
    const ws = { subscribe: (topic: string) => seen.push(['subscribe', name, topic]), getBufferedAmount: () => 0 } as unknown as WebSocket<unknown>;
    return {
      ws,
      binary: false,
      cursor,
      live: false,
      subscribed() {
        this.live = true;
      },
      tooSlow: () => assert.fail(`${name} was closed as too slow`),
      ended: () => assert.fail(`${name} was told the conversation ended`),
    };
  };
  const commit = (seq: number) =>
    sink!.send(new EncodedEvent({ kind: 'MessageEvent', source: 'user', id: `e${seq}`, seq, timestamp: 't' } as unknown as ParleyEvent));
  return { seen, topics, member, commit };
}

test('a daemon publishing few events holds none: each goes out as it is committed, however close together', { timeout: 30_000 }, () => {
  // the default load gate, a long window: six events in a row, as a text turn commits them
  const { seen, topics, member, commit } = setup(300, 'default');
  const a = member('a', 0);
  topics.join('c3', a, 0).offer(a);
  for (let seq = 1; seq <= 6; seq++) {
    commit(seq);
    assert.deepEqual(seen.at(-1), ['publish', 'j:c3', seq], `event ${seq} published at once`);
  }
});

test('under load (more events in the last window than the gate), topics coalesce', { timeout: 30_000 }, async () => {
  const { seen, topics, member, commit } = setup(1000, 3);
  const publishes = () => seen.filter((s) => s[0] === 'publish').map((s) => s[2]);
  const a = member('a', 0);
  topics.join('c4', a, 0).offer(a);
  // the first window: quiet so far, every event at once
  for (let seq = 1; seq <= 4; seq++) commit(seq);
  assert.deepEqual(publishes(), [1, 2, 3, 4]);
  // the next window sees the last one's 4 events: busy. The topic's last publication is a window old: 5 goes out, 6 is held
  const since = performance.now();
  while (performance.now() - since < 1010) await new Promise((r) => setImmediate(r));
  commit(5);
  commit(6);
  assert.deepEqual(publishes(), [1, 2, 3, 4, 5], 'held under load');
  await waitFor(() => publishes().length === 6, 'published when the window ended', 20_000);
  assert.deepEqual(publishes(), [1, 2, 3, 4, 5, 6]);
});

test('a busy topic publishes its first event at once and holds the next ones until the window ends, in seq order', { timeout: 30_000 }, async () => {
  // a window far longer than the synchronous calls below take, so what is held does not depend on the machine's speed
  const { seen, topics, member, commit } = setup(300);
  const a = member('a', 10);
  const topic = topics.join('c1', a, 10);
  assert.equal(topic.offer(a), 'live');
  commit(11);
  assert.deepEqual(seen, [
    ['subscribe', 'a', 'j:c1'],
    ['publish', 'j:c1', 11],
  ]);
  commit(12);
  commit(13);
  assert.equal(seen.length, 2, 'held within the window');
  assert.equal(topic.seq, 11, 'the topic names what it published');
  // a socket that read the store up to a held event waits for its publication, then is subscribed
  const b = member('b', 12);
  topics.join('c1', b, 10);
  assert.equal(topic.offer(b), 'waiting');
  await waitFor(() => seen.length === 5, 'the held events published when the window ended', 20_000);
  assert.deepEqual(seen.slice(2), [
    ['publish', 'j:c1', 12],
    ['subscribe', 'b', 'j:c1'],
    ['publish', 'j:c1', 13],
  ]);
  assert.equal(topic.seq, 13);
  assert.ok(b.live);
});

test('a quiet topic publishes each event at once', { timeout: 30_000 }, async () => {
  const { seen, topics, member, commit } = setup(1);
  const a = member('a', 0);
  const topic = topics.join('c2', a, 0);
  topic.offer(a);
  for (let seq = 1; seq <= 3; seq++) {
    // the window (1 ms) has passed since the last publication
    const since = performance.now();
    while (performance.now() - since < 2) await new Promise((r) => setImmediate(r));
    commit(seq);
    assert.deepEqual(seen.at(-1), ['publish', 'j:c2', seq], `event ${seq} published as it was committed`);
  }
});
