/**
 * The event journal: where an append is committed. Each flush of the store writes one frame
 * (u32 payload length, u32 CRC-32 of the payload, payload) with one write(2) on the event loop;
 * once it returns the events survive a kill -9 of the daemon (with SQLITE_SYNCHRONOUS=FULL the
 * frame is also fdatasync'd, so they survive a power cut). The writer thread then indexes each
 * frame into SQLite and records how far it got (`journal_state`) in the same transaction; at
 * start-up whatever the index has not seen is re-indexed from the journal before anything is served.
 *
 * Files are `journal/<generation>.log`; a new generation starts at every start-up and when a file
 * passes `rotateBytes`; a generation's file is removed once the index has everything in it.
 *
 * A frame's payload is one line per event: a JSON array header `[conversation_id, seq, id, kind,
 * timestamp, source]`, a tab, and the event's JSON (the same text the WebSocket frames carry).
 * JSON never contains a raw tab or newline, so the separators cannot be forged by content.
 */
import fs from 'node:fs';
import path from 'node:path';
import zlib from 'node:zlib';
import type Database from 'better-sqlite3';
import type { ParleyEvent } from '../events/types.js';
import { executionStatusOf } from './types.js';

const HEADER_BYTES = 8;

export interface JournalPosition {
  gen: number;
  /** Byte offset just past the frame. */
  offset: number;
}

export const journalLine = (conversationId: string, ev: ParleyEvent, json: string): string =>
  `${JSON.stringify([conversationId, ev.seq, ev.id, ev.kind, ev.timestamp, ev.source])}\t${json}`;

type IndexRow = [conversationId: string, seq: number, id: string, kind: string, timestamp: string, source: string, body: string];

function parseLines(payload: string): IndexRow[] {
  const rows: IndexRow[] = [];
  for (const line of payload.split('\n')) {
    const tab = line.indexOf('\t');
    const head = JSON.parse(line.slice(0, tab)) as IndexRow;
    head.push(line.slice(tab + 1));
    rows.push(head);
  }
  return rows;
}

export const journalFile = (dir: string, gen: number) => path.join(dir, `${String(gen).padStart(12, '0')}.log`);

/** The generations present in `dir` (regular files only), oldest first. */
export function journalGenerations(dir: string): number[] {
  return fs
    .readdirSync(dir, { withFileTypes: true })
    .filter((f) => f.isFile())
    .map((f) => /^(\d{12})\.log$/.exec(f.name))
    .filter((m): m is RegExpExecArray => m !== null)
    .map((m) => Number(m[1]))
    .sort((a, b) => a - b);
}

/** Every intact frame of a generation from `from` on; stops at the first torn or corrupt frame. */
export function* readFrames(dir: string, gen: number, from: number): Generator<{ payload: string; end: number }> {
  const buf = fs.readFileSync(journalFile(dir, gen));
  let at = from;
  while (buf.length - at >= HEADER_BYTES) {
    const len = buf.readUInt32LE(at);
    const crc = buf.readUInt32LE(at + 4);
    const start = at + HEADER_BYTES;
    if (len === 0 || start + len > buf.length) return;
    const payload = buf.subarray(start, start + len);
    if (zlib.crc32(payload) !== crc) return;
    at = start + len;
    yield { payload: payload.toString('utf8'), end: at };
  }
}

export class Journal {
  private fd: number;
  private gen: number;
  private offset = 0;
  /** Generations on disk that the index may still need, oldest first. */
  private live: number[];

  constructor(
    private readonly dir: string,
    gen: number,
    private readonly opts: { fsync: boolean; rotateBytes: number },
  ) {
    this.gen = gen;
    this.fd = this.create(gen);
    this.live = [gen];
  }

  /** A new generation's file; with fsync its directory entry is made durable too (else a power cut could lose the file). */
  private create(gen: number): number {
    const fd = fs.openSync(journalFile(this.dir, gen), 'w');
    if (this.opts.fsync) {
      const dirFd = fs.openSync(this.dir, 'r');
      try {
        fs.fsyncSync(dirFd);
      } finally {
        fs.closeSync(dirFd);
      }
    }
    return fd;
  }

  /** Writes one frame; when this returns the payload is committed. On failure nothing of it remains. */
  append(payload: string): JournalPosition {
    if (this.offset >= this.opts.rotateBytes) this.rotate();
    const len = Buffer.byteLength(payload);
    const frame = Buffer.allocUnsafe(HEADER_BYTES + len);
    frame.write(payload, HEADER_BYTES, 'utf8');
    frame.writeUInt32LE(len, 0);
    frame.writeUInt32LE(zlib.crc32(frame.subarray(HEADER_BYTES)), 4);
    try {
      let done = 0;
      while (done < frame.length) done += fs.writeSync(this.fd, frame, done, frame.length - done, this.offset + done);
      if (this.opts.fsync) fs.fdatasyncSync(this.fd);
    } catch (err) {
      try {
        fs.ftruncateSync(this.fd, this.offset);
      } catch {
        // the torn frame fails its length or CRC check at recovery and ends the replay there
      }
      throw err;
    }
    this.offset += frame.length;
    return { gen: this.gen, offset: this.offset };
  }

  private rotate(): void {
    fs.closeSync(this.fd);
    this.gen += 1;
    this.offset = 0;
    this.fd = this.create(this.gen);
    this.live.push(this.gen);
  }

  /** The index holds everything up to `pos`: files of older generations can go. */
  indexed(pos: JournalPosition): void {
    while (this.live.length > 1 && this.live[0]! < pos.gen) {
      const gen = this.live.shift()!;
      fs.rmSync(journalFile(this.dir, gen), { force: true });
    }
  }

  /** After a clean close (the index holds everything): no file is needed any more. */
  close(removeAll: boolean): void {
    fs.closeSync(this.fd);
    if (removeAll) for (const gen of this.live) fs.rmSync(journalFile(this.dir, gen), { force: true });
  }
}

/**
 * Indexes journal payloads into SQLite: rows go to `events` (a row already there, from a frame
 * indexed before a crash, is kept), each conversation's `updated_at` follows its newest event,
 * and `journal_state` records the position, all in one transaction. Used by the writer thread
 * and by start-up recovery; recovery (`statuses`) also sets each conversation's stored
 * execution_status from its last status event, which a crash between the journal write and the
 * status update (sqlite.ts `flush`) may have left behind.
 */
export function journalIndexer(db: Database.Database, opts: { statuses?: boolean } = {}): (frames: { payload: string; pos: JournalPosition }[]) => void {
  const insert = db.prepare('INSERT OR IGNORE INTO events (conversation_id, seq, id, kind, timestamp, source, body) VALUES (?, ?, ?, ?, ?, ?, ?)');
  const touch = db.prepare('UPDATE conversations SET updated_at = ? WHERE id = ? AND updated_at < ?');
  const setStatus = db.prepare('UPDATE conversations SET execution_status = ? WHERE id = ?');
  const state = db.prepare('INSERT INTO journal_state (k, gen, offset) VALUES (0, ?, ?) ON CONFLICT (k) DO UPDATE SET gen = excluded.gen, offset = excluded.offset');
  return db.transaction((frames: { payload: string; pos: JournalPosition }[]) => {
    const newest = new Map<string, string>();
    const statuses = new Map<string, string>();
    for (const f of frames) {
      for (const r of parseLines(f.payload)) {
        insert.run(r[0], r[1], r[2], r[3], r[4], r[5], r[6]);
        newest.set(r[0], r[4]);
        if (opts.statuses && r[3] === 'ConversationStateUpdateEvent') {
          const status = executionStatusOf(JSON.parse(r[6]) as Record<string, unknown>);
          if (status) statuses.set(r[0], status);
        }
      }
    }
    for (const [id, ts] of newest) touch.run(ts, id, ts);
    for (const [id, status] of statuses) setStatus.run(status, id);
    const last = frames[frames.length - 1];
    if (last) state.run(last.pos.gen, last.pos.offset);
  });
}

