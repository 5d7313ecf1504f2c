/**
 * The SQLite store's index writer thread runs only while there is indexing to do
 * (src/store/index-writer.ts): none at open when the journal holds nothing unindexed, one started by
 * the first frame to index, gone after its idle period (its connection checkpointed and closed), a
 * new one for the next frame. What each thread indexed is in the index: a reopened store finds nothing
 * in the journal left to index, and every event in order. A few frames while no thread is about are
 * indexed on the event loop, and start none (unless every commit waits for its fsync).
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { test } from 'node:test';
import { SqliteStore } from '../src/store/sqlite.js';
import { tempDir, waitFor } from './support/daemon.js';

const C = '11111111-1111-4111-8111-111111111111';
const msg = (text: string) => ({
  kind: 'MessageEvent' as const,
  source: 'user' as const,
  llm_message: { role: 'user' as const, content: [{ type: 'text' as const, text }] },
});

test('SQLite: the index writer thread starts with the first frame, exits when idle, and a new one indexes the next', { timeout: 120_000 }, async (t) => {
  const dir = tempDir();
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  // (every batch to the thread: inlineIndexBytes 0)
  const opts = { indexDelayMs: 20, writerIdleMs: 300, inlineIndexBytes: 0 };
  let store = new SqliteStore(dir, opts);
  assert.equal(store.writerRunning, false, 'no thread at open: nothing to index');

  for (let i = 0; i < 50; i++) await store.append(C, msg(`a${i}`));
  // the frames go to the thread `indexDelayMs` after their commit
  await waitFor(() => store.writerRunning, 'the first frames to start a thread', 60_000);
  await waitFor(() => store.unindexed === 0, 'the first frames indexed', 60_000);
  await waitFor(() => !store.writerRunning, 'the thread to exit once idle', 60_000);

  for (let i = 0; i < 50; i++) await store.append(C, msg(`b${i}`));
  await waitFor(() => store.writerRunning, 'a frame after the exit to start another', 60_000);
  await waitFor(() => store.unindexed === 0, 'the later frames indexed', 60_000);
  await waitFor(() => !store.writerRunning, 'that thread to exit too', 60_000);
  // closing with no thread running starts none
  await store.close();
  assert.equal(store.writerRunning, false);

  store = new SqliteStore(dir, opts);
  t.after(() => store.close());
  assert.equal(store.unindexed, 0, 'the journal holds nothing the index lacks');
  assert.equal(store.writerRunning, false);
  assert.deepEqual(
    (await store.query(C, { limit: 1000 })).map((e) => e.seq),
    Array.from({ length: 100 }, (_, i) => i + 1),
  );
});

test('SQLite: a few frames are indexed on the event loop without a thread; a batch past the limit starts one', { timeout: 120_000 }, async (t) => {
  const dir = tempDir();
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  const opts = { indexDelayMs: 20, writerIdleMs: 300, inlineIndexBytes: 16 * 1024 };
  let store = new SqliteStore(dir, opts);
  // a turn's worth: a few small events, indexed with no thread ever running
  let threads = 0;
  const watch = setInterval(() => (threads += store.writerRunning ? 1 : 0), 1);
  t.after(() => clearInterval(watch));
  for (let i = 0; i < 5; i++) await store.append(C, msg(`a${i}`));
  await waitFor(() => store.unindexed === 0, 'the few frames indexed', 60_000);
  assert.equal(threads, 0, 'no thread was started for them');
  assert.equal(store.writerRunning, false);
  // more than 16 KiB in one batch: the thread indexes it
  await Promise.all(Array.from({ length: 40 }, (_, i) => store.append(C, msg(`b${i} ${'x'.repeat(1000)}`))));
  await waitFor(() => store.writerRunning, 'the large batch to start a thread', 60_000);
  await waitFor(() => store.unindexed === 0, 'the large batch indexed', 60_000);
  await waitFor(() => !store.writerRunning, 'the thread to exit once idle', 60_000);
  // and small ones on the event loop again once it has gone
  for (let i = 0; i < 5; i++) await store.append(C, msg(`c${i}`));
  await waitFor(() => store.unindexed === 0, 'the last frames indexed', 60_000);
  assert.equal(store.writerRunning, false);
  await store.close();

  store = new SqliteStore(dir, opts);
  t.after(() => store.close());
  assert.equal(store.unindexed, 0, 'the journal holds nothing the index lacks');
  assert.deepEqual(
    (await store.query(C, { limit: 1000 })).map((e) => e.seq),
    Array.from({ length: 50 }, (_, i) => i + 1),
  );
});

test('SQLite: with SQLITE_SYNCHRONOUS=FULL even a few frames go to the thread (an index commit there waits for its fsync)', { timeout: 120_000 }, async (t) => {
  const dir = tempDir();
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  const store = new SqliteStore(dir, { indexDelayMs: 20, writerIdleMs: 300, synchronous: 'FULL' });
  t.after(() => store.close());
  for (let i = 0; i < 3; i++) await store.append(C, msg(`a${i}`));
  await waitFor(() => store.writerRunning, 'a thread for the few frames', 60_000);
  await waitFor(() => store.unindexed === 0, 'the frames indexed', 60_000);
});
