/**
 * Reading a conversation's events from the embedded store: SQLite answers for the seqs below the
 * conversation's first unindexed event, the tail (the committed events the writer has not indexed
 * yet, all newer than every stored one) for the rest, so that every committed event is read
 * exactly once whether the index has it yet or not.
 */
import type Database from 'better-sqlite3';
import { unpack } from 'msgpackr';
import { upgradeEvent } from '../events/legacy.js';
import { keepStoredJson, type ParleyEvent } from '../events/types.js';
import type { TailRead } from './tail.js';
import type { EventQuery } from './types.js';

/**
 * A conversation's unindexed events in the read's seq range, parsed one by one as `read` is iterated
 * (oldest first, or newest first with `desc`), and the seq below which SQLite answers (null: no event waits).
 */
export interface TailView {
  read(desc: boolean): Iterable<TailRead>;
  /** How many of them there are (in the read's seq range), none parsed. */
  count(): number;
  below: number | null;
}

/** A stored body: the event's JSON text (msgpack in stores written before the journal), in today's event shape. */
export const decodeBody = (b: string | Buffer): ParleyEvent => upgradeEvent((typeof b === 'string' ? JSON.parse(b) : unpack(b)) as ParleyEvent);

/** decodeBody, keeping the text with the event when it is the event's JSON as it is (not upgraded from an older shape). */
function decodeKeepingJson(b: string | Buffer): ParleyEvent {
  if (typeof b !== 'string') return decodeBody(b);
  const parsed = JSON.parse(b) as ParleyEvent;
  const ev = upgradeEvent(parsed);
  if (ev === parsed) keepStoredJson(ev, b);
  return ev;
}

/**
 * The statement for `sql`, prepared once per database: a read's SQL is one of a few shapes (the filters it
 * uses), and preparing it again at every read was ~0.1 ms of each (SQLite parses and plans it anew).
 */
const prepared = new WeakMap<Database.Database, Map<string, Database.Statement>>();
function statement(db: Database.Database, sql: string, pluck = false): Database.Statement {
  let byText = prepared.get(db);
  if (!byText) prepared.set(db, (byText = new Map()));
  const key = pluck ? `pluck:${sql}` : sql;
  let stmt = byText.get(key);
  if (!stmt) {
    stmt = db.prepare(sql);
    if (pluck) stmt.pluck();
    byText.set(key, stmt);
  }
  return stmt;
}

/** No stored seq lies between `afterSeq` and `below` (every event the read wants is unindexed): SQLite is not asked. */
const noneStored = (afterSeq: number | null | undefined, below: number | null | undefined) => below != null && below <= (afterSeq ?? 0) + 1;

function matches(ev: ParleyEvent, q: Omit<EventQuery, 'limit' | 'desc'>): boolean {
  const seq = ev.seq!;
  return (
    (q.afterSeq == null || seq > q.afterSeq) &&
    (q.beforeSeq == null || seq < q.beforeSeq) &&
    (!q.kind || ev.kind === q.kind) &&
    (!q.source || ev.source === q.source) &&
    (!q.sinceTimestamp || ev.timestamp >= q.sinceTimestamp)
  );
}

export function queryEvents(db: Database.Database, conversationId: string, q: EventQuery, t: TailView): ParleyEvent[] {
  const where = ['conversation_id = ?'];
  const args: unknown[] = [conversationId];
  if (q.afterSeq != null) where.push('seq > ?'), args.push(q.afterSeq);
  const below = t.below === null ? q.beforeSeq : q.beforeSeq == null ? t.below : Math.min(q.beforeSeq, t.below);
  if (below != null) where.push('seq < ?'), args.push(below);
  if (q.kind) where.push('kind = ?'), args.push(q.kind);
  if (q.source) where.push('source = ?'), args.push(q.source);
  if (q.sinceTimestamp) where.push('timestamp >= ?'), args.push(q.sinceTimestamp);
  const order = q.desc ? 'DESC' : 'ASC';
  const skip = noneStored(q.afterSeq, below);
  const stmt = statement(db, `SELECT body FROM events WHERE ${where.join(' AND ')} ORDER BY seq ${order} LIMIT ?`);
  // the unindexed events are all newer than every stored one: they come first in descending order and
  // last in ascending, and are read (parsed) only until the page is full, by count or (maxBytes) by bytes
  const max = q.maxBytes ?? Number.POSITIVE_INFINITY;
  const events: ParleyEvent[] = [];
  let bytes = 0;
  const full = () => events.length >= q.limit || bytes >= max;
  const unindexed = () => {
    if (full()) return;
    for (const { event, bytes: n } of t.read(q.desc === true)) {
      if (!matches(event, q)) continue;
      events.push(event);
      bytes += n;
      if (full()) return;
    }
  };
  if (q.desc) unindexed();
  if (!full() && !skip) {
    if (q.maxBytes === undefined) {
      for (const r of stmt.all(...args, q.limit - events.length) as { body: string | Buffer }[]) events.push(decodeBody(r.body));
    } else {
      // bounded by bytes: rows are read one at a time, so a page of large events is never held whole
      const decode = q.keepJson ? decodeKeepingJson : decodeBody;
      for (const r of stmt.iterate(...args, q.limit - events.length) as IterableIterator<{ body: string | Buffer }>) {
        events.push(decode(r.body));
        bytes += r.body.length;
        if (full()) break;
      }
    }
  }
  if (!q.desc) unindexed();
  return events;
}

export function countEvents(db: Database.Database, conversationId: string, q: Omit<EventQuery, 'limit' | 'desc'>, t: TailView): number {
  const where = ['conversation_id = ?'];
  const args: unknown[] = [conversationId];
  if (q.afterSeq != null) where.push('seq > ?'), args.push(q.afterSeq);
  if (t.below !== null) where.push('seq < ?'), args.push(t.below);
  if (q.kind) where.push('kind = ?'), args.push(q.kind);
  if (q.source) where.push('source = ?'), args.push(q.source);
  const stored = noneStored(q.afterSeq, t.below) ? 0 : (statement(db, `SELECT COUNT(*) FROM events WHERE ${where.join(' AND ')}`, true).get(...args) as number);
  // a count by seq alone (the usual one) parses none of the waiting events
  if (!q.kind && !q.source && !q.sinceTimestamp) return stored + t.count();
  let unindexed = 0;
  for (const { event } of t.read(false)) if (matches(event, q)) unindexed += 1;
  return stored + unindexed;
}
