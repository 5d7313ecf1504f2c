/**
 * The embedded store's reads of events its index has not taken yet: they parse only the events the
 * page takes (a replay of large events waiting in the tail held every one of them parsed at once).
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import type { ParleyEvent } from '../src/events/types.js';
import { openDatabase } from '../src/store/sqlite-schema.js';
import { countEvents, queryEvents } from '../src/store/sqlite-reads.js';
import { UnindexedEvents } from '../src/store/unindexed.js';
import { tempDir } from './support/daemon.js';

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
  for (const seq of [1, 2, 3, 4, 5]) {
    const event = message(seq, `${seq}:${'x'.repeat(1000)}`);
    tail.add(C, [{ event, json: seq === 3 ? '{"broken' : JSON.stringify(event) }]);
  }
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
