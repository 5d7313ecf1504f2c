/**
 * The event-log writer thread. It owns the write connection for events: appends go into `inbox`
 * (rowid order: each transaction writes a few tail pages however many conversations it touches),
 * and every 100 ms the rows move into `events` (indexed by conversation and seq, and by id) in one
 * large transaction. Every message is acknowledged after its transaction commits, in order.
 */
import { parentPort, receiveMessageOnPort, workerData } from 'node:worker_threads';
import Database from 'better-sqlite3';

export type Row = [conversationId: string, seq: number, id: string, kind: string, timestamp: string, source: string, body: Uint8Array];
export type WriterRequest =
  | { type: 'append'; n: number; rows: Row[]; touched: [string, string][] }
  | { type: 'delete'; n: number; conversationId: string }
  | { type: 'close'; n: number };
export type WriterReply = { n: number; error?: string };

const { file, synchronous } = workerData as { file: string; synchronous: string; entry: string };
const db = new Database(file);
db.pragma('journal_mode = WAL');
db.pragma(`synchronous = ${synchronous}`);
db.pragma('busy_timeout = 5000');
db.pragma('wal_autocheckpoint = 10000');

const insert = db.prepare('INSERT INTO inbox (conversation_id, seq, id, kind, timestamp, source, body) VALUES (?, ?, ?, ?, ?, ?, ?)');
const touch = db.prepare('UPDATE conversations SET updated_at = ? WHERE id = ? AND updated_at < ?');
const maxRow = db.prepare('SELECT MAX(rowid) FROM inbox').pluck();
const moveRows = db.prepare(
  'INSERT INTO events (conversation_id, seq, id, kind, timestamp, source, body) SELECT conversation_id, seq, id, kind, timestamp, source, body FROM inbox WHERE rowid <= ? ORDER BY conversation_id, seq',
);
const dropMoved = db.prepare('DELETE FROM inbox WHERE rowid <= ?');
const delEvents = db.prepare('DELETE FROM events WHERE conversation_id = ?');
const delInbox = db.prepare('DELETE FROM inbox WHERE conversation_id = ?');

const append = db.transaction((rows: Row[], touched: [string, string][]) => {
  for (const r of rows) insert.run(r[0], r[1], r[2], r[3], r[4], r[5], r[6]);
  for (const [id, ts] of touched) touch.run(ts, id, ts);
});
const move = db.transaction(() => {
  const upto = maxRow.get() as number | null;
  if (upto === null) return;
  moveRows.run(upto);
  dropMoved.run(upto);
});
const remove = db.transaction((id: string) => {
  delInbox.run(id);
  delEvents.run(id);
});

let dirty = false;
const mover = setInterval(() => {
  if (!dirty) return;
  dirty = false;
  try {
    move();
  } catch {
    dirty = true; // retried on the next tick
  }
}, 100);

/** Appends queued behind one another are committed together: one transaction, then every ack in order. */
const appendMany = db.transaction((reqs: Extract<WriterRequest, { type: 'append' }>[]) => {
  for (const r of reqs) append(r.rows, r.touched);
});

function handle(first: WriterRequest): void {
  const queue: WriterRequest[] = [first];
  for (let next = receiveMessageOnPort(parentPort!); next; next = receiveMessageOnPort(parentPort!)) queue.push(next.message as WriterRequest);
  let i = 0;
  while (i < queue.length) {
    const m = queue[i]!;
    if (m.type === 'append') {
      const run: Extract<WriterRequest, { type: 'append' }>[] = [];
      while (i < queue.length && queue[i]!.type === 'append') run.push(queue[i++] as Extract<WriterRequest, { type: 'append' }>);
      let error: string | undefined;
      try {
        appendMany(run);
        dirty = true;
      } catch (err) {
        error = (err as Error)?.message ?? String(err);
      }
      for (const r of run) parentPort!.postMessage({ n: r.n, ...(error ? { error } : {}) } satisfies WriterReply);
      continue;
    }
    i += 1;
    const reply: WriterReply = { n: m.n };
    try {
      if (m.type === 'delete') remove(m.conversationId);
      else {
        clearInterval(mover);
        move();
        db.pragma('wal_checkpoint(TRUNCATE)');
        db.close();
      }
    } catch (err) {
      reply.error = (err as Error)?.message ?? String(err);
    }
    parentPort!.postMessage(reply);
  }
}

parentPort!.on('message', handle);
