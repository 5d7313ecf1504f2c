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
 * The reserve (`journal/reserve`, for a full disk): a file of zeros written ahead of need, whose blocks
 * the filesystem has therefore allocated. When a frame's write meets a full disk (ENOSPC, EDQUOT),
 * the reserve becomes the next generation and the frame is written into it again: overwriting
 * allocated blocks needs no free space, so appends go on while whatever filled the disk is stopped,
 * and no other writer can take that room first (a reserve that was deleted to free space could be
 * taken by the agent that filled the disk). Its zeros read as "no frame here" (length 0), so
 * recovery stops after its last frame. It holds on filesystems that overwrite in place (ext4, XFS,
 * tmpfs); copy-on-write or compressing ones (btrfs, ZFS) need new blocks for every write, and
 * there a full disk answers 503 at once. The store makes the reserve again once space returns.
 *
 * A frame's payload is one line per event: a JSON array header `[conversation_id, seq, id, kind,
 * timestamp, source]`, a tab, and the event's JSON (the same text the WebSocket frames carry).
 * JSON never contains a raw tab or newline, so the separators cannot be forged by content.
 */
import fs from 'node:fs';
import path from 'node:path';
import zlib from 'node:zlib';
import type Database from 'better-sqlite3';
import { jsonNumber, jsonString } from '../events/event-json.js';
import type { ParleyEvent } from '../events/types.js';
import { isDiskFull } from './disk-watch.js';
import { executionStatusOf } from './types.js';

const HEADER_BYTES = 8;
const NO_FRAME = Buffer.alloc(HEADER_BYTES);
const RESERVE = 'reserve';
/** The reserve is written in pieces this large: it never holds a big buffer or a thread of the pool for long. */
const RESERVE_PIECE = 1024 * 1024;

export interface JournalPosition {
  gen: number;
  /** Byte offset just past the frame. */
  offset: number;
}

/** `JSON.stringify(v)` for the header's values (strings and numbers but for a malformed event), a third of its cost per event. */
const headerValue = (v: unknown): string => (typeof v === 'string' ? jsonString(v) : typeof v === 'number' ? jsonNumber(v) : JSON.stringify(v ?? null));

export const journalLine = (conversationId: string, ev: ParleyEvent, json: string): string =>
  `[${headerValue(conversationId)},${headerValue(ev.seq)},${headerValue(ev.id)},${headerValue(ev.kind)},` +
  `${headerValue(ev.timestamp)},${headerValue(ev.source)}]\t${json}`;

type IndexRow = [conversationId: string, seq: number, id: string, kind: string, timestamp: string, source: string, body: string];

/** The events of a frame's payload, each with its conversation, in the frame's order. */
export function journalEvents(payload: string): { conversationId: string; event: ParleyEvent; json: string }[] {
  return parseLines(payload).map((r) => ({ conversationId: r[0], event: JSON.parse(r[6]) as ParleyEvent, json: r[6] }));
}

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

/**
 * A frame as the journal writes it: header (length, CRC-32) then the payload's UTF-8 bytes, in memory
 * of its own outside the JS heap, shared (never Node's pool): once written, the payload waits in the
 * store's tail and goes to the writer thread without a copy, and the collector never moves its bytes.
 */
export function journalFrame(payload: string): Buffer {
  const len = Buffer.byteLength(payload);
  const frame = Buffer.from(new SharedArrayBuffer(HEADER_BYTES + len));
  frame.write(payload, HEADER_BYTES, 'utf8');
  frame.writeUInt32LE(len, 0);
  frame.writeUInt32LE(zlib.crc32(frame.subarray(HEADER_BYTES)), 4);
  return frame;
}

/** A frame's payload (its bytes after the header, the same memory). */
export const framePayload = (frame: Buffer): Buffer => frame.subarray(HEADER_BYTES);

/**
 * Where each event's JSON text lies in a payload's bytes, in the frame's order: start and end (exclusive)
 * of each, one pair after the other. A line is its header, a tab and the JSON, and neither JSON holds a
 * raw tab or newline, so those two bytes find them.
 */
export function eventSpans(payload: Buffer): number[] {
  const spans: number[] = [];
  for (let at = 0; at < payload.length; ) {
    const tab = payload.indexOf(9, at);
    const newline = payload.indexOf(10, tab);
    const end = newline < 0 ? payload.length : newline;
    spans.push(tab + 1, end);
    at = end + 1;
  }
  return spans;
}

/** A payload given as text or as its UTF-8 bytes (a written frame's, sent to the writer thread). */
export type FramePayload = string | Uint8Array;

const payloadText = (p: FramePayload): string => (typeof p === 'string' ? p : Buffer.from(p.buffer, p.byteOffset, p.byteLength).toString('utf8'));

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

interface JournalOptions {
  fsync: boolean;
  rotateBytes: number;
  /** Size of the reserve to keep (default 0: none). */
  reserveBytes?: number;
  /** A frame went to the reserve because the disk was full (`err`: what the write met). */
  onReserveUsed?: (err: unknown) => void;
}

export class Journal {
  private fd: number;
  private gen: number;
  private offset = 0;
  /** Bytes the current generation takes without its file growing: the reserve's size when it was one, else unbounded. */
  private capacity = Infinity;
  /** Generations on disk that the index may still need, oldest first. */
  private live: number[];
  /** Size of the reserve on disk, ready to become a generation (0: none). */
  private reserveSize = 0;
  private making: Promise<boolean> | null = null;

  constructor(
    private readonly dir: string,
    gen: number,
    private readonly opts: JournalOptions,
    /** Older generations whose frames are not indexed yet (start-up on a full disk), oldest first. */
    kept: number[] = [],
  ) {
    this.gen = gen;
    this.fd = this.create(gen);
    this.live = [...kept, gen];
    try {
      // the size asked for, and its blocks, not only its size: a power cut can leave holes (written data not yet allocated)
      const st = fs.statSync(path.join(dir, RESERVE));
      if (st.size > 0 && st.size === opts.reserveBytes && st.blocks * 512 >= st.size) this.reserveSize = st.size;
      else fs.rmSync(path.join(dir, RESERVE), { force: true }); // none wanted (any more), or another size: its room goes back
    } catch {
      // none yet: the store makes it (makeReserve)
    }
  }

  /** A new generation's file; with fsync its directory entry is made durable too (else a power cut could lose the file). */
  private create(gen: number): number {
    const fd = fs.openSync(journalFile(this.dir, gen), 'w');
    if (this.opts.fsync) this.syncDir();
    return fd;
  }

  private syncDir(): void {
    const dirFd = fs.openSync(this.dir, 'r');
    try {
      fs.fsyncSync(dirFd);
    } finally {
      fs.closeSync(dirFd);
    }
  }

  /** Whether a reserve is ready to take frames when the disk is full. */
  get reserved(): boolean {
    return this.reserveSize > 0;
  }

  /** Writes one frame (`journalFrame`); when this returns its payload is committed. On failure nothing of it remains. */
  append(frame: Buffer): JournalPosition {
    try {
      if (this.offset > 0 && (this.offset >= this.opts.rotateBytes || this.offset + frame.length > this.capacity)) this.rotate(false);
      this.write(frame);
    } catch (err) {
      if (!isDiskFull(err) || this.reserveSize === 0) throw err;
      // the disk is full: the frame goes to the reserve, whose blocks are allocated already
      this.rotate(true);
      this.write(frame);
      this.opts.onReserveUsed?.(err);
    }
    return { gen: this.gen, offset: this.offset };
  }

  private write(frame: Buffer): void {
    try {
      let done = 0;
      while (done < frame.length) done += fs.writeSync(this.fd, frame, done, frame.length - done, this.offset + done);
      if (this.opts.fsync) fs.fdatasyncSync(this.fd);
    } catch (err) {
      this.cut(this.offset);
      throw err;
    }
    this.offset += frame.length;
  }

  /**
   * Whatever follows `at` is no frame: a file of its own is cut there; in a reserve's allocated blocks the header is zeroed
   * instead (cutting would give them back).
   */
  private cut(at: number): boolean {
    try {
      if (this.capacity === Infinity) fs.ftruncateSync(this.fd, at);
      else fs.writeSync(this.fd, NO_FRAME, 0, HEADER_BYTES, at);
      return true;
    } catch {
      // a torn frame fails its length or CRC check at recovery and ends the replay there
      return false;
    }
  }

  /**
   * Takes back the frame that ends at `pos`, the last one written (its commit was refused by what
   * it goes with: a conversation's record that could not be stored). Nothing has read it yet.
   */
  retract(pos: JournalPosition, frameBytes: number): void {
    if (pos.gen !== this.gen || pos.offset !== this.offset) throw new Error('only the last frame written can be taken back');
    if (!this.cut(this.offset - frameBytes)) throw new Error('the frame could not be taken back');
    this.offset -= frameBytes;
    if (this.opts.fsync) fs.fdatasyncSync(this.fd);
  }

  private rotate(fromReserve: boolean): void {
    const gen = this.gen + 1;
    let fd: number;
    let capacity = Infinity;
    if (fromReserve) {
      fs.renameSync(path.join(this.dir, RESERVE), journalFile(this.dir, gen));
      fd = fs.openSync(journalFile(this.dir, gen), 'r+');
      if (this.opts.fsync) this.syncDir();
      capacity = this.reserveSize;
      this.reserveSize = 0;
    } else {
      fd = this.create(gen);
    }
    fs.closeSync(this.fd);
    this.fd = fd;
    this.gen = gen;
    this.offset = 0;
    this.capacity = capacity;
    this.live.push(gen);
  }

  /**
   * Writes the reserve (zeros, `reserveBytes`) in the background unless one is ready; resolves
   * with whether one is. A write that meets a full disk removes what it wrote: the reserve is
   * made only from room that is free.
   */
  makeReserve(): Promise<boolean> {
    if (this.reserveSize > 0 || !this.opts.reserveBytes) return Promise.resolve(this.reserveSize > 0);
    this.making ??= this.writeReserve().finally(() => (this.making = null));
    return this.making;
  }

  private async writeReserve(): Promise<boolean> {
    const tmp = path.join(this.dir, `${RESERVE}.tmp`);
    const size = this.opts.reserveBytes ?? 0;
    let fh: fs.promises.FileHandle | null = null;
    const zeros = Buffer.alloc(Math.min(RESERVE_PIECE, size));
    try {
      fh = await fs.promises.open(tmp, 'w');
      for (let at = 0; at < size; at += zeros.length) {
        const n = Math.min(zeros.length, size - at);
        let done = 0;
        while (done < n) done += (await fh.write(zeros, done, n - done, at + done)).bytesWritten;
      }
      // no fsync: the filesystem counts written blocks as taken at write(2) (delayed allocation reserves them)
      await fh.close();
      fh = null;
      await fs.promises.rename(tmp, path.join(this.dir, RESERVE));
      this.reserveSize = size;
      return true;
    } catch {
      await fh?.close().catch(() => {});
      await fs.promises.rm(tmp, { force: true }).catch(() => {});
      return false;
    }
  }

  /** The index holds everything up to `pos`: files of older generations can go. */
  indexed(pos: JournalPosition): void {
    while (this.live.length > 1 && this.live[0]! < pos.gen) {
      const gen = this.live.shift()!;
      fs.rmSync(journalFile(this.dir, gen), { force: true });
    }
  }

  /** After a clean close (the index holds everything): no file is needed any more. The reserve stays for the next start. */
  close(removeAll: boolean): void {
    fs.closeSync(this.fd);
    if (removeAll) for (const gen of this.live) fs.rmSync(journalFile(this.dir, gen), { force: true });
  }
}

/**
 * Indexes journal payloads into SQLite: rows go to `events` (a row already there, from a frame
 * indexed before a crash, is kept), each conversation's `updated_at` follows its newest event, its
 * stored execution_status follows its last status event, and `journal_state` records the position,
 * all in one transaction. Used by the writer thread, the event loop's inline index and start-up
 * recovery. (Until then the store holds a committed status in memory and stores it itself before a
 * read of the conversations: statuses-behind.ts.)
 */
export function journalIndexer(db: Database.Database): (frames: { payload: FramePayload; pos: JournalPosition }[]) => void {
  const insert = db.prepare('INSERT OR IGNORE INTO events (conversation_id, seq, id, kind, timestamp, source, body) VALUES (?, ?, ?, ?, ?, ?, ?)');
  const touch = db.prepare('UPDATE conversations SET updated_at = ? WHERE id = ? AND updated_at < ?');
  const setStatus = db.prepare('UPDATE conversations SET execution_status = ? WHERE id = ?');
  const state = db.prepare(
    'INSERT INTO journal_state (k, gen, offset) VALUES (0, ?, ?) ON CONFLICT (k) DO UPDATE SET gen = excluded.gen, offset = excluded.offset',
  );
  return db.transaction((frames: { payload: FramePayload; pos: JournalPosition }[]) => {
    const newest = new Map<string, string>();
    const statuses = new Map<string, string>();
    for (const f of frames) {
      for (const r of parseLines(payloadText(f.payload))) {
        insert.run(r[0], r[1], r[2], r[3], r[4], r[5], r[6]);
        newest.set(r[0], r[4]);
        if (r[3] === 'ConversationStateUpdateEvent') {
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
