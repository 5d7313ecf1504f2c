/**
 * The embedded store's events its index has not taken yet (the tail): reads parse only the events the
 * page takes (a replay of large events waiting in the tail held every one of them parsed at once); each
 * event's text is found in its frame's bytes, whatever characters come before it; and those bytes wait
 * outside the JS heap.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import v8 from 'node:v8';
import vm from 'node:vm';
import type { ParleyEvent } from '../src/events/types.js';
import { eventSpans, framePayload, journalFrame, journalLine } from '../src/store/journal.js';
import { SqliteStore } from '../src/store/sqlite.js';
import { openDatabase } from '../src/store/sqlite-schema.js';
import { countEvents, queryEvents } from '../src/store/sqlite-reads.js';
import { UnindexedEvents } from '../src/store/unindexed.js';
import { tempDir } from './support/daemon.js';

v8.setFlagsFromString('--expose-gc');
const gc = vm.runInNewContext('gc') as () => void;

const C = '11111111-1111-4111-8111-111111111111';

const message = (seq: number, text: string) =>
  ({
    kind: 'MessageEvent',
    source: 'user',
    id: `e${seq}`,
    seq,
    timestamp: new Date(Date.UTC(2026, 0, 1, 0, 0, seq)).toISOString(),
    llm_message: { role: 'user', content: [{ type: 'text', text }] },
  }) as ParleyEvent;

/**
 * A tail of five events whose middle one is text no parser takes: a read that parses it throws, so each
 * read below that passes has parsed only the events on its side of it.
 */
function tailWithABrokenMiddle(): UnindexedEvents {
  const tail = new UnindexedEvents(1000, 1 << 30);
  const events = [1, 2, 3, 4, 5].map((seq) => message(seq, `${seq}:${'x'.repeat(1000)}`));
  const lines = events.map((e) => journalLine(C, e, e.seq === 3 ? '{"broken' : JSON.stringify(e)));
  const payload = framePayload(journalFrame(lines.join('\n')));
  tail.add(
    C,
    payload,
    eventSpans(payload),
    0,
    events.map((event) => ({ event })),
  );
  return tail;
}

test('a read of unindexed events parses only those its page takes, by count and by bytes, in either order', { timeout: 30_000 }, (t) => {
  const dir = tempDir();
  const db = openDatabase(path.join(dir, 'parley.db'), 'NORMAL');
  t.after(() => {
    db.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });
  const tail = tailWithABrokenMiddle();
  const read = (q: Parameters<typeof queryEvents>[2]) => queryEvents(db, C, q, tail.of(C, q)).map((e) => e.seq);

  assert.deepEqual(read({ limit: 2 }), [1, 2]);
  assert.deepEqual(read({ limit: 2, desc: true }), [5, 4]);
  // each event's text is over 1,000 bytes: a bound of 1,500 takes two
  assert.deepEqual(read({ limit: 100, maxBytes: 1500, keepJson: true }), [1, 2]);
  assert.deepEqual(read({ limit: 100, maxBytes: 1500, desc: true }), [5, 4]);
  // a seq range is applied before parsing: the broken event is outside it
  assert.deepEqual(read({ limit: 100, afterSeq: 3 }), [4, 5]);
  assert.deepEqual(read({ limit: 100, beforeSeq: 3, desc: true }), [2, 1]);
  assert.equal(countEvents(db, C, { afterSeq: 3 }, tail.of(C, { afterSeq: 3 })), 2);
  // a count by seq alone parses none of them; one by kind parses each
  assert.equal(countEvents(db, C, {}, tail.of(C, {})), 5);
  assert.equal(countEvents(db, C, { afterSeq: 1 }, tail.of(C, { afterSeq: 1 })), 4);
  assert.throws(() => countEvents(db, C, { kind: 'MessageEvent' }, tail.of(C, {})), SyntaxError);
  // and a read that does reach it parses it (the test's premise)
  assert.throws(() => read({ limit: 3 }), SyntaxError);
});

test('a frame of two conversations, its texts in and beyond ASCII, is read back from the tail exactly, by page, by bytes and by id', {
  timeout: 60_000,
}, async (t) => {
  const dir = tempDir();
  // an index that does not run during the test: every read below comes from the tail
  const store = new SqliteStore(dir, { indexDelayMs: 600_000 });
  t.after(async () => {
    await store.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });
  const D = '22222222-2222-4222-8222-222222222222';
  const text = (s: string) => ({
    kind: 'MessageEvent' as const,
    source: 'user' as const,
    llm_message: { role: 'user' as const, content: [{ type: 'text' as const, text: s }] },
  });
  // appended in one event-loop turn: one frame, where every event after the first non-ASCII character lies at a byte offset
  // other than its character offset
  const appended = await Promise.all([
    store.append(C, text('plain')),
    store.append(D, text('ünïcødé 😀 \u2028 "quoted" \t tab')),
    store.append(C, text('after it: 字')),
    store.append(D, text('ascii again')),
    store.append(C, text('x'.repeat(300))),
  ]);
  assert.equal(store.unindexed, 5);
  for (const id of [C, D]) {
    const mine = appended.filter((e) => appended.indexOf(e) % 2 === (id === C ? 0 : 1));
    assert.deepEqual(await store.query(id, { limit: 10 }), mine);
    assert.deepEqual(await store.query(id, { limit: 10, desc: true }), [...mine].reverse());
    for (const e of mine) assert.deepEqual(await store.get(id, e.id), e);
  }
  // a page bounded by bytes counts each event's stored text in bytes
  const bytes = (e: ParleyEvent) => Buffer.byteLength(JSON.stringify(e));
  const [c1, c2] = [appended[0]!, appended[2]!];
  assert.deepEqual(
    (await store.query(C, { limit: 10, maxBytes: bytes(c1) + bytes(c2) })).map((e) => e.seq),
    [c1.seq, c2.seq],
  );
  assert.deepEqual(
    (await store.query(C, { limit: 10, maxBytes: bytes(c1) + 1 })).map((e) => e.seq),
    [c1.seq, c2.seq],
  );
});

test('the texts waiting in the tail are outside the JS heap', { timeout: 120_000 }, async (t) => {
  const dir = tempDir();
  const store = new SqliteStore(dir, { indexDelayMs: 600_000 });
  t.after(async () => {
    await store.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });
  const text = (n: number) => ({
    kind: 'MessageEvent' as const,
    source: 'user' as const,
    llm_message: { role: 'user' as const, content: [{ type: 'text' as const, text: `${n}:${'y'.repeat(256 * 1024)}` }] },
  });
  await store.append(C, text(0));
  gc();
  const before = process.memoryUsage();
  // 64 events of 256 KiB: 16 MiB of text waiting, kept by nothing but the tail
  for (let i = 1; i <= 64; i++) await store.append(C, text(i));
  assert.equal(store.unindexed, 65);
  gc();
  const after = process.memoryUsage();
  const mib = (n: number) => (n / 1024 / 1024).toFixed(1);
  assert.ok(after.arrayBuffers - before.arrayBuffers >= 16 * 1024 * 1024, `off the heap: +${mib(after.arrayBuffers - before.arrayBuffers)} MiB`);
  assert.ok(after.heapUsed - before.heapUsed < 4 * 1024 * 1024, `on the heap: +${mib(after.heapUsed - before.heapUsed)} MiB`);
  // and they are all there
  const last = await store.query(C, { limit: 1, desc: true });
  assert.equal(last[0]?.kind === 'MessageEvent' && (last[0].llm_message.content[0] as { text: string }).text.startsWith('64:'), true);
});
