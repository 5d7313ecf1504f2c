/** Unit tests of the event store (journal + SQLite index written by the writer thread) on real files. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { SqliteStore } from '../src/store/sqlite.js';
import type { ParleyEvent } from '../src/events/types.js';
import { tempDir, waitFor } from './support/daemon.js';

const C = '11111111-1111-4111-8111-111111111111';
const D = '22222222-2222-4222-8222-222222222222';
const msg = (text: string) => ({ kind: 'MessageEvent' as const, source: 'user' as const, llm_message: { role: 'user' as const, content: [{ type: 'text' as const, text }] } });

test('seq is gap-free per conversation; publish order is seq order; reads see events before and after they are indexed', async () => {
  const published: ParleyEvent[] = [];
  const store = new SqliteStore(tempDir(), (_id, evs) => published.push(...evs.map((e) => e.event)), { indexDelayMs: 200 });
  const all = await Promise.all(Array.from({ length: 300 }, (_, i) => store.append(i % 3 ? C : D, msg(`m${i}`))));
  assert.deepEqual(all.filter((e) => e.kind === 'MessageEvent' && e.seq).length, 300);
  const cSeqs = published.filter((_, i) => i >= 0).filter((e) => all.indexOf(e) % 3 !== 0).map((e) => e.seq);
  assert.deepEqual(cSeqs, Array.from({ length: 200 }, (_, i) => i + 1));
  // none indexed yet, then all: every read path sees each event exactly once
  const check = async () => {
    const page = await store.query(C, { limit: 1000 });
    assert.deepEqual(page.map((e) => e.seq), Array.from({ length: 200 }, (_, i) => i + 1));
    assert.equal(await store.count(C, {}), 200);
    assert.equal(await store.lastSeq(C), 200);
    const desc = await store.query(C, { limit: 5, desc: true, beforeSeq: 100 });
    assert.deepEqual(desc.map((e) => e.seq), [99, 98, 97, 96, 95]);
    assert.equal((await store.get(C, all[1]!.id))?.seq, all[1]!.seq);
    assert.equal(await store.get(D, all[1]!.id), null, 'an event is only found in its own conversation');
  };
  assert.ok(store.unindexed > 0, 'read from memory before the index has them');
  await check();
  await waitFor(() => store.unindexed === 0, 'the index');
  await check();
  await store.appendMany(C, [msg('x'), msg('y')]);
  assert.deepEqual((await store.query(C, { afterSeq: 199, limit: 10 })).map((e) => e.seq), [200, 201, 202]);
  await store.close();
});

test('deleting a conversation removes its indexed and unindexed events, after appends already queued', async () => {
  const dir = tempDir();
  const store = new SqliteStore(dir);
  await store.createConversation({ id: C, title: null, created_at: 'a', updated_at: 'a', execution_status: 'idle', data: {} });
  for (let i = 0; i < 10; i++) await store.append(C, msg(`a${i}`));
  await waitFor(() => store.unindexed === 0, 'the index');
  for (let i = 0; i < 5; i++) await store.append(C, msg(`b${i}`));
  void store.append(C, msg('queued just before the delete'));
  assert.equal(await store.deleteConversation(C), true);
  assert.equal(await store.count(C, {}), 0);
  assert.equal(await store.lastSeq(C), 0);
  await store.close();
  const reopened = new SqliteStore(dir);
  assert.equal(await reopened.count(C, {}), 0);
  await reopened.close();
});

test('events survive close and reopen with their seq; ids are time-ordered UUIDv7', async () => {
  const dir = tempDir();
  const s1 = new SqliteStore(dir);
  const evs = await s1.appendMany(D, [msg('1'), msg('2'), msg('3')]);
  await s1.close();
  for (const e of evs) assert.match(e.id, /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  assert.deepEqual([...evs.map((e) => e.id)].sort(), evs.map((e) => e.id));
  const s2 = new SqliteStore(dir);
  assert.deepEqual((await s2.query(D, { limit: 10 })).map((e) => e.seq), [1, 2, 3]);
  assert.equal((await s2.append(D, msg('4'))).seq, 4);
  await s2.close();
});
