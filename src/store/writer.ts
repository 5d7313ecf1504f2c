/**
 * The index writer thread. It owns the write connection for events: journal frames (already
 * committed by the event loop, see journal.ts) are indexed into `events` (clustered by
 * conversation and seq, and indexed by id). The store sends the frames of up to `indexDelayMs` in
 * one message, indexed in one transaction, so each page a conversation's newest events sit on is
 * written once per transaction rather than once per frame; the message is acknowledged once indexed.
 *
 * A write that fails (a full disk, a busy or failing database) is retried with backoff up to
 * `RETRY_MAX_MS`, never given up: the frames are committed already (the journal), and giving up
 * would leave the daemon unable to index until restarted. The thread tells the store when it
 * starts failing (`stalled`, with the reason) and when it succeeds again (`resumed`); the store can
 * wake it from a backoff at once (space returned) and stops the retries when it closes.
 */
import fs from 'node:fs';
import os from 'node:os';
import { parentPort, workerData } from 'node:worker_threads';
import Database from 'better-sqlite3';
import { type FramePayload, journalIndexer, type JournalPosition } from './journal.js';
import { STOP, WAKE } from './writer-control.js';

export type WriterRequest =
  | { type: 'index'; n: number; frames: { payload: FramePayload; pos: JournalPosition }[] }
  | { type: 'delete'; n: number; conversationId: string }
  | { type: 'close'; n: number };
export type WriterReply = { n: number; error?: string };
/** The index's health: it cannot write (`reason`, and the error's code), or it writes again. */
export type WriterNotice = { notice: 'stalled'; reason: string; code: string | null } | { notice: 'resumed' };

const RETRY_MAX_MS = 1000;

const { file, synchronous, control } = workerData as { file: string; synchronous: string; control: SharedArrayBuffer; entry: string };
const ctl = new Int32Array(control);

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

let stalled = false;
/**
 * Set when the store closed while a run could not be indexed: no later frame is indexed, or the index would skip that run (it
 * stays in the journal for the next start).
 */
let abandoned: string | null = null;

const notify = (n: WriterNotice) => parentPort!.postMessage(n);

/**
 * Runs `write` until it succeeds, waiting between attempts (25 ms doubling, at most RETRY_MAX_MS,
 * cut short by a wake). Returns null once done, or the last error's text when the store closes
 * meanwhile (the frames are then left to the journal: the next start indexes them).
 */
function persist(write: () => void): string | null {
  for (let attempt = 0; ; attempt++) {
    const woken = Atomics.load(ctl, WAKE);
    try {
      write();
      if (stalled) notify({ notice: 'resumed' });
      stalled = false;
      return null;
    } catch (err) {
      const reason = (err as Error)?.message ?? String(err);
      if (!stalled) notify({ notice: 'stalled', reason, code: typeof (err as { code?: unknown })?.code === 'string' ? (err as { code: string }).code : null });
      stalled = true;
      if (Atomics.load(ctl, STOP)) return reason;
      Atomics.wait(ctl, WAKE, woken, Math.min(RETRY_MAX_MS, 25 * 2 ** Math.min(attempt, 10)));
    }
  }
}

parentPort!.on('message', (m: WriterRequest) => {
  const reply: WriterReply = { n: m.n };
  if (m.type === 'index') {
    const error = abandoned ?? persist(() => index(m.frames));
    abandoned = error;
    if (error) reply.error = error;
  } else if (m.type === 'delete') {
    const error = persist(() => remove.run(m.conversationId));
    if (error) reply.error = error;
  } else {
    try {
      db.pragma('wal_checkpoint(TRUNCATE)');
    } catch (err) {
      reply.error = (err as Error)?.message ?? String(err);
    }
    db.close();
  }
  parentPort!.postMessage(reply);
});
