/**
 * The index writer thread. It owns the write connection for events: journal frames (already
 * committed by the event loop, see journal.ts) are indexed into `events` (clustered by
 * conversation and seq, and indexed by id). Frames are gathered for up to `indexDelayMs` and
 * indexed in one transaction, so each page a conversation's newest events sit on is written once
 * per transaction rather than once per frame; each frame is acknowledged once indexed, in order.
 */
import fs from 'node:fs';
import os from 'node:os';
import { parentPort, workerData } from 'node:worker_threads';
import Database from 'better-sqlite3';
import { journalIndexer, type JournalPosition } from './journal.js';

export type WriterRequest =
  | { type: 'index'; n: number; payload: string; pos: JournalPosition }
  | { type: 'delete'; n: number; conversationId: string }
  | { type: 'close'; n: number };
export type WriterReply = { n: number; error?: string };

const { file, synchronous, indexDelayMs, indexRetries } = workerData as { file: string; synchronous: string; indexDelayMs: number; indexRetries: number; entry: string };

// Indexing is background work: the events are committed (journal) and readable (the store's tail)
// before it runs, so it yields the CPU to the event loop. Linux applies setpriority to one thread
// when given its id (found through /proc/thread-self); elsewhere this is skipped.
try {
  const tid = Number(fs.readlinkSync('/proc/thread-self').split('/').pop());
  if (Number.isInteger(tid) && tid > 0) os.setPriority(tid, 10);
} catch {
  // not Linux, or not permitted: indexing runs at the daemon's priority
}

const db = new Database(file);
db.pragma('journal_mode = WAL');
db.pragma(`synchronous = ${synchronous}`);
db.pragma('busy_timeout = 5000');
db.pragma('wal_autocheckpoint = 10000');

const index = journalIndexer(db);
const remove = db.prepare('DELETE FROM events WHERE conversation_id = ?');

let gathered: Extract<WriterRequest, { type: 'index' }>[] = [];
/** Set once indexing failed for good: no later frame is indexed, or the index would skip the failed one. */
let broken: string | null = null;
let timer: NodeJS.Timeout | null = null;
const pause = new Int32Array(new SharedArrayBuffer(4));

/** Indexes everything gathered, then acknowledges each frame. A failure (a busy or full disk) is retried with backoff: the frames are already committed. */
function indexGathered(): void {
  if (timer) clearTimeout(timer);
  timer = null;
  const run = gathered;
  gathered = [];
  if (run.length === 0) return;
  for (let attempt = 0; !broken; attempt++) {
    try {
      index(run);
      break;
    } catch (err) {
      if (attempt >= indexRetries) broken = (err as Error)?.message ?? String(err);
      else Atomics.wait(pause, 0, 0, Math.min(2000, 25 * 2 ** attempt));
    }
  }
  for (const r of run) parentPort!.postMessage({ n: r.n, ...(broken ? { error: broken } : {}) } satisfies WriterReply);
}

parentPort!.on('message', (m: WriterRequest) => {
  if (m.type === 'index') {
    gathered.push(m);
    timer ??= setTimeout(indexGathered, indexDelayMs);
    return;
  }
  indexGathered(); // a delete or close is ordered after every frame sent before it
  const reply: WriterReply = { n: m.n };
  try {
    if (m.type === 'delete') remove.run(m.conversationId);
    else {
      db.pragma('wal_checkpoint(TRUNCATE)');
      db.close();
    }
  } catch (err) {
    reply.error = (err as Error)?.message ?? String(err);
  }
  parentPort!.postMessage(reply);
});
