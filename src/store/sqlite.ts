/**
 * The embedded store: SQLite (WAL) in DATA_DIR. The only module that touches the database.
 *
 * Appends made in one event-loop turn are committed together as one journal frame (journal.ts:
 * one write(2), no thread hop); `seq` is assigned here, per conversation, gap-free, and an append
 * resolves (and is published) only after its frame is written. The writer thread (`writer.ts`)
 * then indexes the frame into SQLite. Until it acknowledges, the frame's events stay in memory
 * (`tail`), and reads merge them: SQLite answers for seq below a conversation's first tail
 * event, the tail for the rest, so every committed event is visible exactly once. Reads run on
 * this thread's connection.
 *
 * A full disk: a journal write that meets it moves to the journal's reserve (journal.ts)
 * and goes through; when there is no reserve left it fails with 503 and the reason. The index
 * (writer.ts) retries until it can write again, never giving up; while it cannot, appends go on
 * into the journal and the tail up to the tail's bound, then answer 503 with the index's reason
 * instead of waiting. A write of a record on this thread (a conversation, a secret) that finds no
 * room answers 503. Every such failure is told to the DiskWatch (disk pressure, for the sandbox to
 * act on); when the watch sees room again the writer is woken and the reserve made again, so the
 * store recovers by itself. Start-up on a full disk does not index the journal on this thread: its
 * unindexed frames go to the tail and the writer, like new ones.
 *
 * Why one file of this size: it is the only module that touches the database; the tail merge, the
 * journal hand-off and the disk-full paths share the same in-memory state.
 */
import fs from 'node:fs';
import path from 'node:path';
import { Worker } from 'node:worker_threads';
import Database from 'better-sqlite3';
import { unpack } from 'msgpackr';
import { UnavailableError } from '../errors.js';
import { uuidv7 } from '../events/ids.js';
import { upgradeEvent } from '../events/legacy.js';
import { EncodedEvent, eventJson, keepStoredJson, nowIso, type EventDraft, type ParleyEvent } from '../events/types.js';
import { serializeEvent } from '../events/event-json.js';
import { metrics } from '../metrics.js';
import { DiskWatch, errorText, isDiskFull } from './disk-watch.js';
import { lockDataDir } from './lock.js';
import { TailQueue } from './tail.js';
import { Journal, journalEvents, journalFile, journalGenerations, journalIndexer, journalLine, readFrames, type JournalPosition } from './journal.js';
import {
  conversationFromRow,
  executionStatusOf,
  type ConversationRecord,
  type EventQuery,
  type SealedValue,
  type Store,
  CommitListeners,
  type CommitListener,
} from './types.js';
import { CONTROL_SLOTS, STOP, WAKE } from './writer-control.js';
import type { WriterNotice, WriterReply, WriterRequest } from './writer.js';

interface StoreOptions {
  synchronous?: 'NORMAL' | 'FULL';
  /** A journal file past this size is closed and a new generation started (default 64 MiB). */
  rotateBytes?: number;
  /** How long committed frames gather before they go to the writer, to be indexed in one transaction (default 250 ms). */
  indexDelayMs?: number;
  /** Committed events the index has not acknowledged yet, beyond which appends wait for it (default 50,000). */
  maxUnindexed?: number;
  /** The same bound in bytes of journal frames (default 256 MiB). */
  maxUnindexedBytes?: number;
  /** Size of the journal's reserve for a full disk (journal.ts; default 0: none, the daemon sets DISK_RESERVE_MB). */
  reserveBytes?: number;
  /** How long after start a missing reserve is written (default 1 s: not on the way to the first answer). */
  reserveDelayMs?: number;
  /** The watch of DATA_DIR's free space that writes meeting a full disk are reported to (default: one of the store's own). */
  disk?: DiskWatch;
}

/** SQLite result codes that mean "cannot write now" (disk, I/O, a lock), as opposed to a statement that is wrong. */
const UNAVAILABLE = /^SQLITE_(FULL|IOERR|BUSY|LOCKED|CANTOPEN|READONLY)/;
const cannotWrite = (err: unknown) => UNAVAILABLE.test(String((err as { code?: unknown })?.code ?? ''));

/** A stored body: the event's JSON text (msgpack in stores written before the journal), in today's event shape. */
const decodeBody = (b: string | Buffer): ParleyEvent => upgradeEvent((typeof b === 'string' ? JSON.parse(b) : unpack(b)) as ParleyEvent);

/** decodeBody, keeping the text with the event when it is the event's JSON as it is (not upgraded from an older shape). */
function decodeKeepingJson(b: string | Buffer): ParleyEvent {
  if (typeof b !== 'string') return decodeBody(b);
  const parsed = JSON.parse(b) as ParleyEvent;
  const ev = upgradeEvent(parsed);
  if (ev === parsed) keepStoredJson(ev, b);
  return ev;
}

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

interface Pending {
  conversationId: string;
  drafts: EventDraft[];
  resolve: (evs: ParleyEvent[]) => void;
  reject: (err: unknown) => void;
}

/** A batch of appends encoded as one journal frame, seq assigned (and given back if the frame is not committed). */
interface Frame {
  batch: Pending[];
  results: EncodedEvent[][];
  payload: string;
  /** Each conversation's last seq before the frame. */
  seqBefore: Map<string, number>;
}

type WithoutN<T> = T extends unknown ? Omit<T, 'n'> : never;

const appendLatency = metrics.storeAppend.child();

export class SqliteStore implements Store {
  private db: Database.Database;
  private lastSeqCache = new Map<string, number>();
  private pending: Pending[] = [];
  private flushScheduled = false;
  private stmts;
  private writer: Worker;
  private requestNo = 0;
  /** Committed frames gathered for the writer's next transaction (sent as one message: a message per frame woke the writer's thread ~600 times a second under load). */
  private indexQueue: { payload: string; pos: JournalPosition; newest: Map<string, number> }[] = [];
  private indexTimer: NodeJS.Timeout | null = null;
  private readonly indexDelayMs: number;
  private waiting = new Map<number, { resolve: () => void; reject: (err: Error) => void }>();
  private closed = false;
  /** Set when the writer thread died: every later write fails at once instead of waiting. */
  private writerError: Error | null = null;
  /** Why the index cannot write now (null: it can); the writer retries meanwhile. */
  private indexStall: string | null = null;
  /** Shared with the writer (writer-control.ts). */
  private readonly control = new Int32Array(new SharedArrayBuffer(CONTROL_SLOTS * 4));
  /** DATA_DIR's free space: writes that meet a full disk are reported to it, and it says when there is room again. */
  readonly disk: DiskWatch;
  private readonly ownsDisk: boolean;
  private readonly unwatch: () => void;
  private readonly reserveBytes: number;
  private reserveTimer: NodeJS.Timeout | null = null;
  private tailBytes = 0;
  private readonly maxUnindexedBytes: number;
  private journal: Journal;
  /** Per conversation, the committed events not yet indexed, in seq order. */
  private tail = new Map<string, TailQueue>();
  /** Per conversation, the status (and its time) its last committed status event set, until stored. */
  private statusBehind = new Map<string, [string, string]>();
  private tailSize = 0;
  private readonly maxUnindexed: number;
  private readonly unlock: () => void;
  /** When the oldest append waiting for the next frame was queued (performance.now()). */
  private pendingSince = 0;
  /** Commit time and size of each frame the index has not acknowledged yet, oldest first. */
  private unindexedFrames: { at: number; bytes: number }[] = [];

  private readonly commits = new CommitListeners();

  onCommit(listener: CommitListener): void {
    this.commits.add(listener);
  }

  constructor(dataDir: string, opts: StoreOptions = {}) {
    // a failure below leaves the lock to this process; it exits, and the next start takes it over
    this.unlock = lockDataDir(dataDir);
    this.db = new Database(path.join(dataDir, 'parley.db'));
    this.db.pragma('journal_mode = WAL');
    this.db.pragma('wal_autocheckpoint = 10000');
    this.db.pragma(`synchronous = ${opts.synchronous ?? 'NORMAL'}`);
    this.db.pragma('busy_timeout = 5000');
    this.db.exec(`
      CREATE TABLE IF NOT EXISTS conversations (
        id TEXT PRIMARY KEY,
        title TEXT,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        execution_status TEXT NOT NULL,
        data TEXT NOT NULL
      );
      CREATE INDEX IF NOT EXISTS conversations_created ON conversations (created_at DESC, id DESC);
      CREATE INDEX IF NOT EXISTS conversations_status ON conversations (execution_status);
      CREATE TABLE IF NOT EXISTS events (
        conversation_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        id TEXT NOT NULL,
        kind TEXT NOT NULL,
        timestamp TEXT NOT NULL,
        source TEXT NOT NULL,
        body BLOB NOT NULL,
        PRIMARY KEY (conversation_id, seq)
      ) WITHOUT ROWID;
      DROP INDEX IF EXISTS events_id;
      CREATE UNIQUE INDEX IF NOT EXISTS events_by_id ON events (id);
      CREATE TABLE IF NOT EXISTS journal_state (
        k INTEGER PRIMARY KEY CHECK (k = 0),
        gen INTEGER NOT NULL,
        offset INTEGER NOT NULL
      );
      CREATE TABLE IF NOT EXISTS secrets (
        kind TEXT NOT NULL,
        name TEXT NOT NULL,
        sealed TEXT,
        meta TEXT NOT NULL,
        PRIMARY KEY (kind, name)
      ) WITHOUT ROWID;
    `);
    this.stmts = {
      maxSeq: this.db.prepare('SELECT MAX(seq) FROM events WHERE conversation_id = ?').pluck(),
      getEvent: this.db.prepare('SELECT body FROM events WHERE id = ? AND conversation_id = ?').pluck(),
      getConv: this.db.prepare('SELECT * FROM conversations WHERE id = ?'),
      insertConv: this.db.prepare(
        'INSERT INTO conversations (id, title, created_at, updated_at, execution_status, data) VALUES (@id, @title, @created_at, @updated_at, @execution_status, @data)',
      ),
      deleteConv: this.db.prepare('DELETE FROM conversations WHERE id = ?'),
      setStatus: this.db.prepare('UPDATE conversations SET execution_status = ?, updated_at = ? WHERE id = ?'),
      countByStatus: this.db.prepare('SELECT execution_status AS s, COUNT(*) AS n FROM conversations GROUP BY execution_status'),
      putSecret: this.db.prepare(
        'INSERT INTO secrets (kind, name, sealed, meta) VALUES (?, ?, ?, ?) ON CONFLICT (kind, name) DO UPDATE SET sealed = excluded.sealed, meta = excluded.meta',
      ),
      getSecret: this.db.prepare('SELECT * FROM secrets WHERE kind = ? AND name = ?'),
      listSecrets: this.db.prepare('SELECT * FROM secrets WHERE kind = ? ORDER BY name'),
      deleteSecret: this.db.prepare('DELETE FROM secrets WHERE kind = ? AND name = ?'),
      deleteSecretsOfKind: this.db.prepare('DELETE FROM secrets WHERE kind = ?'),
    };
    this.maxUnindexed = opts.maxUnindexed ?? 50_000;
    this.maxUnindexedBytes = opts.maxUnindexedBytes ?? 256 * 1024 * 1024;
    this.ownsDisk = !opts.disk;
    this.disk = opts.disk ?? new DiskWatch(dataDir);
    this.reserveBytes = opts.reserveBytes ?? 0;
    const { journal, unindexed } = this.recover(path.join(dataDir, 'journal'), {
      fsync: opts.synchronous === 'FULL',
      rotateBytes: opts.rotateBytes ?? 64 * 1024 * 1024,
      reserveBytes: this.reserveBytes,
      onReserveUsed: (err) => {
        this.disk.report('event log (writing into its reserve now)', err);
        this.keepReserve(0);
      },
    });
    this.journal = journal;
    this.indexDelayMs = opts.indexDelayMs ?? 250;
    const workerData = { file: path.join(dataDir, 'parley.db'), synchronous: opts.synchronous ?? 'NORMAL', control: this.control.buffer };
    // Built (`npm start` runs dist/, see scripts/build.mjs): the writer is plain JavaScript next to this
    // bundle. From source (tsx: tests, development): a boot file registers tsx in the worker first.
    this.writer = import.meta.url.endsWith('.ts')
      ? new Worker(new URL('./worker-boot.mjs', import.meta.url), { workerData: { ...workerData, entry: new URL('./writer.ts', import.meta.url).href } })
      : new Worker(new URL('./writer.mjs', import.meta.url), { workerData });
    this.writer.on('message', (r: WriterReply | WriterNotice) => {
      if ('notice' in r) return this.indexHealth(r);
      const w = this.waiting.get(r.n);
      if (!w) return;
      this.waiting.delete(r.n);
      if (r.error) w.reject(new UnavailableError(`event index write failed: ${r.error}`));
      else w.resolve();
    });
    const fail = (err: Error) => {
      this.writerError ??= err;
      for (const w of this.waiting.values()) w.reject(err);
      this.waiting.clear();
      if (this.pending.length) this.flush(true); // appends held back for the index fail now
    };
    this.writer.on('error', (err) => fail(new UnavailableError(`event index writer failed: ${err.message}`)));
    this.writer.on('exit', (code) => {
      if (!this.closed) fail(new UnavailableError(`event log writer stopped (exit ${code})`));
    });
    this.writer.unref();
    for (const f of unindexed) this.readmit(f.payload, f.pos);
    this.applyStatuses();
    this.unwatch = this.disk.subscribe((p) => {
      if (p.full) return;
      // room again: the writer's backoff ends now, and the reserve is made again
      Atomics.add(this.control, WAKE, 1);
      Atomics.notify(this.control, WAKE);
      this.keepReserve(0);
    });
    this.keepReserve(opts.reserveDelayMs ?? 1000);
  }

  /**
   * Indexes every journal frame the index has not seen (a kill -9 left them), then starts a new
   * generation and removes the old files. Runs before the writer thread exists. When the database
   * cannot be written (a full disk), the frames are returned instead and their generations kept:
   * the store serves them from the tail and the writer indexes them once it can.
   */
  private recover(
    dir: string,
    journalOpts: ConstructorParameters<typeof Journal>[2],
  ): { journal: Journal; unindexed: { payload: string; pos: JournalPosition }[] } {
    fs.mkdirSync(dir, { recursive: true });
    const state = (this.db.prepare('SELECT gen, offset FROM journal_state WHERE k = 0').get() as JournalPosition | undefined) ?? { gen: 0, offset: 0 };
    const gens = journalGenerations(dir);
    const frames: { payload: string; pos: JournalPosition }[] = [];
    for (const gen of gens) {
      if (gen < state.gen) continue;
      for (const f of readFrames(dir, gen, gen === state.gen ? state.offset : 0)) frames.push({ payload: f.payload, pos: { gen, offset: f.end } });
    }
    const next = Math.max(state.gen, ...gens) + 1;
    try {
      if (frames.length) journalIndexer(this.db, { statuses: true })(frames);
      this.db.prepare('INSERT INTO journal_state (k, gen, offset) VALUES (0, ?, 0) ON CONFLICT (k) DO UPDATE SET gen = excluded.gen, offset = 0').run(next);
    } catch (err) {
      if (!cannotWrite(err)) throw err;
      if (isDiskFull(err)) this.disk.report('event index (start-up)', err);
      for (const gen of gens) if (gen < state.gen) fs.rmSync(journalFile(dir, gen), { force: true });
      return {
        journal: new Journal(
          dir,
          next,
          journalOpts,
          gens.filter((g) => g >= state.gen),
        ),
        unindexed: frames,
      };
    }
    for (const gen of gens) fs.rmSync(journalFile(dir, gen), { force: true });
    return { journal: new Journal(dir, next, journalOpts), unindexed: [] };
  }

  /** A frame committed before this start that the index has not seen: its events join the tail and it goes to the writer, as if just committed (not published again). */
  private readmit(payload: string, pos: JournalPosition): void {
    const newest = new Map<string, number>();
    for (const { conversationId, event } of journalEvents(payload)) {
      let t = this.tail.get(conversationId);
      if (!t) this.tail.set(conversationId, (t = new TailQueue()));
      t.push(event);
      this.tailSize += 1;
      newest.set(conversationId, event.seq!);
      this.lastSeqCache.set(conversationId, event.seq!);
      const status = executionStatusOf(event);
      if (status) this.statusBehind.set(conversationId, [status, event.timestamp]);
    }
    this.toIndex(payload, pos, newest);
  }

  /** The writer tells how the index is doing. */
  private indexHealth(n: WriterNotice): void {
    if (n.notice === 'resumed') {
      this.indexStall = null;
      this.applyStatuses();
      return;
    }
    this.indexStall = n.reason;
    if (isDiskFull({ code: n.code })) this.disk.report('event index', { code: n.code, message: n.reason });
    // appends held back for the index would wait as long as the disk stays full: they answer now
    if (this.pending.length && !this.flushScheduled) this.flush();
  }

  /** Makes the journal's reserve after `delayMs` unless it is there; while the disk lacks room for it and as much again, tries again every 5 s. */
  private keepReserve(delayMs: number): void {
    if (this.closed || this.reserveTimer || this.reserveBytes === 0 || this.journal.reserved) return;
    this.reserveTimer = setTimeout(async () => {
      let again = true;
      try {
        const free = await this.disk.sample();
        if (!this.closed && free >= 2 * this.reserveBytes) again = !(await this.journal.makeReserve());
      } catch {
        // DATA_DIR unreadable for a moment: tried again
      }
      this.reserveTimer = null;
      if (again) this.keepReserve(5000);
    }, delayMs);
    this.reserveTimer.unref();
  }

  /** Sends a request to the writer; resolves when its transaction has committed. */
  private ask(req: WithoutN<WriterRequest>): Promise<void> {
    if (req.type !== 'index') this.sendIndex(); // a delete or close is ordered after every frame committed before it
    if (this.writerError) return Promise.reject(this.writerError);
    const n = ++this.requestNo;
    return new Promise<void>((resolve, reject) => {
      this.waiting.set(n, { resolve, reject });
      this.writer.ref();
      this.writer.postMessage({ ...req, n } as WriterRequest);
    }).finally(() => {
      if (this.waiting.size === 0) this.writer.unref();
    });
  }

  // ---- events -------------------------------------------------------------------------------

  append(conversationId: string, draft: EventDraft): Promise<ParleyEvent> {
    // one promise, not appendMany's and a second one to pick its only event: this is the hot path
    return new Promise((resolve, reject) => this.enqueue({ conversationId, drafts: [draft], resolve: (evs) => resolve(evs[0]!), reject }));
  }

  appendMany(conversationId: string, drafts: EventDraft[]): Promise<ParleyEvent[]> {
    return new Promise((resolve, reject) => this.enqueue({ conversationId, drafts, resolve, reject }));
  }

  /** Queues an append for the next flush (one per event-loop turn: every append of the turn in one frame). */
  private enqueue(p: Pending): void {
    if (this.pending.length === 0) this.pendingSince = performance.now();
    this.pending.push(p);
    if (!this.flushScheduled) {
      this.flushScheduled = true;
      setImmediate(() => this.flush());
    }
  }

  private seqOf(conversationId: string): number {
    let s = this.lastSeqCache.get(conversationId);
    if (s === undefined) {
      s = (this.stmts.maxSeq.get(conversationId) as number | null) ?? 0;
      this.lastSeqCache.set(conversationId, s);
    }
    return s;
  }

  /** Appends cannot be taken now: the writer is gone, or the index cannot write and the tail is at its bound. */
  private refusal(): Error | null {
    if (this.writerError) return this.writerError;
    if (this.indexStall && this.tailFull) {
      return new UnavailableError(`event index cannot be written (${this.indexStall}) and ${this.tailSize} committed events already wait for it`);
    }
    return null;
  }

  private get tailFull(): boolean {
    return this.tailSize >= this.maxUnindexed || this.tailBytes >= this.maxUnindexedBytes;
  }

  /**
   * Commits every pending append as one journal frame, then (in seq order) publishes and
   * resolves; the frame goes on to the writer thread to be indexed.
   */
  private flush(force = false): void {
    this.flushScheduled = false;
    if (this.pending.length === 0) return;
    const refused = force ? this.writerError : this.refusal();
    if (refused) {
      const failed = this.pending;
      this.pending = [];
      for (const p of failed) p.reject(refused);
      return;
    }
    if (this.tailFull && !force) return; // resumed when the index acknowledges a frame
    const frame = this.encode(this.pending);
    this.pending = [];
    let pos: JournalPosition;
    try {
      pos = this.commitFrame(frame);
    } catch (err) {
      const e = new UnavailableError(`event log write failed: ${errorText(err)}`);
      for (const p of frame.batch) p.reject(e);
      return;
    }
    appendLatency.observe((performance.now() - this.pendingSince) / 1000);
    this.committed(frame, pos);
  }

  /** Assigns seq and encodes the batch's events as one frame's payload. */
  private encode(batch: Pending[]): Frame {
    const results: EncodedEvent[][] = [];
    const lines: string[] = [];
    const seqBefore = new Map<string, number>();
    const now = nowIso(); // the commit time of the whole frame
    for (const p of batch) {
      let seq = this.seqOf(p.conversationId);
      if (!seqBefore.has(p.conversationId)) seqBefore.set(p.conversationId, seq);
      const out: EncodedEvent[] = [];
      for (const d of p.drafts) {
        seq += 1;
        // Object.assign, not a spread: V8's spread-then-add costs ~5 µs here, assign ~0.1 µs
        const ev = Object.assign({}, d) as ParleyEvent;
        ev.id = d.id ?? uuidv7();
        ev.seq = seq;
        ev.timestamp = d.timestamp ?? now;
        const json = serializeEvent(ev);
        lines.push(journalLine(p.conversationId, ev, json));
        out.push(new EncodedEvent(ev, json));
      }
      this.lastSeqCache.set(p.conversationId, seq);
      results.push(out);
    }
    return { batch, results, payload: lines.join('\n'), seqBefore };
  }

  /**
   * Writes the frame to the journal: the commit. `alongside`, when given, runs right after the
   * write and may refuse the commit by throwing: the frame is then taken back. On failure nothing
   * of the frame is committed, its seqs are free again, and this throws.
   */
  private commitFrame(frame: Frame, alongside?: () => void): JournalPosition {
    try {
      const pos = this.journal.append(frame.payload);
      if (alongside) {
        try {
          alongside();
        } catch (err) {
          try {
            this.journal.retract(pos, 8 + Buffer.byteLength(frame.payload));
          } catch {
            // the frame stays in the journal: its seqs stay taken, so that no later frame reuses them
            frame.seqBefore.clear();
          }
          throw err;
        }
      }
      return pos;
    } catch (err) {
      // nothing of this batch was committed: the counters go back to what was committed
      for (const [id, seq] of frame.seqBefore) this.lastSeqCache.set(id, seq);
      if (isDiskFull(err)) this.disk.report('event log', err);
      throw err;
    }
  }

  /** After the commit: statuses, tail, index, publish and resolve, in seq order. */
  private committed(frame: Frame, pos: JournalPosition): void {
    const { batch, results } = frame;
    // a status event sets the stored status in the same commit: the frame is the commit, and a
    // crash before this update is made up for by recovery (journalIndexer `statuses`)
    batch.forEach((p, i) => {
      for (const e of results[i]!) {
        const status = executionStatusOf(e.event);
        if (status) this.statusBehind.set(p.conversationId, [status, e.event.timestamp]);
      }
    });
    this.applyStatuses();
    const newest = new Map<string, number>();
    batch.forEach((p, i) => {
      let t = this.tail.get(p.conversationId);
      if (!t) this.tail.set(p.conversationId, (t = new TailQueue()));
      for (const e of results[i]!) t.push(e.event);
      this.tailSize += results[i]!.length;
      newest.set(p.conversationId, this.lastSeqCache.get(p.conversationId)!);
    });
    this.toIndex(frame.payload, pos, newest);
    batch.forEach((p, i) => {
      this.commits.emit(p.conversationId, results[i]!);
      p.resolve(results[i]!.map((e) => e.event));
    });
  }

  /** Hands a committed frame to the writer (with the others of the next `indexDelayMs`); once it is indexed its events leave the tail. */
  private toIndex(payload: string, pos: JournalPosition, newest: Map<string, number>): void {
    this.unindexedFrames.push({ at: performance.now(), bytes: payload.length });
    this.tailBytes += payload.length;
    this.indexQueue.push({ payload, pos, newest });
    this.indexTimer ??= setTimeout(() => this.sendIndex(), this.indexDelayMs);
  }

  /** Sends the gathered frames to the writer as one transaction's worth. */
  private sendIndex(): void {
    if (this.indexTimer) clearTimeout(this.indexTimer);
    this.indexTimer = null;
    const frames = this.indexQueue;
    if (frames.length === 0) return;
    this.indexQueue = [];
    this.ask({ type: 'index', frames: frames.map(({ payload, pos }) => ({ payload, pos })) }).then(
      () => {
        for (const f of frames) this.indexed(f.pos, f.newest);
      },
      (err: Error) => {
        // The index cannot take these frames (the store is closing, or the writer is gone). Their events
        // stay in the tail, readable; later frames fail too (the writer indexes in order), so the
        // index never skips past them, and the journal is re-indexed at the next start.
        this.writerError ??= new UnavailableError(`event index unavailable: ${err.message}`);
      },
    );
  }

  /** Stores the statuses of committed status events (one that failed, e.g. a busy database, goes again at the next commit). */
  private applyStatuses(): void {
    for (const [id, [status, ts]] of this.statusBehind) {
      try {
        this.stmts.setStatus.run(status, ts, id);
      } catch {
        return;
      }
      this.statusBehind.delete(id);
    }
  }

  /** The index holds a frame: its events leave the tail (up to `newest` seq per conversation). */
  private indexed(pos: JournalPosition, newest: Map<string, number>): void {
    for (const [id, upto] of newest) {
      const t = this.tail.get(id);
      if (!t) continue;
      this.tailSize -= t.dropThrough(upto);
      if (t.size === 0) this.tail.delete(id);
    }
    this.journal.indexed(pos);
    this.tailBytes -= this.unindexedFrames.shift()?.bytes ?? 0;
    if (this.pending.length && !this.flushScheduled && !this.tailFull) {
      this.flushScheduled = true;
      setImmediate(() => this.flush());
    }
  }

  /** Seconds since the oldest frame the index has not acknowledged was committed (0: none waiting). */
  get indexLagSeconds(): number {
    const oldest = this.unindexedFrames[0];
    return oldest === undefined ? 0 : (performance.now() - oldest.at) / 1000;
  }

  /** Conversations per execution status. */
  countByStatus(): [string, number][] {
    return (this.stmts.countByStatus.all() as { s: string; n: number }[]).map((r) => [r.s, r.n]);
  }

  /** Committed events the writer has not indexed yet (held in memory and readable). */
  get unindexed(): number {
    return this.tailSize;
  }

  /** The conversation's unindexed events, and the seq below which SQLite answers. */
  private tailOf(conversationId: string): { events: ParleyEvent[]; below: number | null } {
    const t = this.tail.get(conversationId);
    return t ? { events: t.events(), below: t.first!.seq! } : { events: [], below: null };
  }

  async query(conversationId: string, q: EventQuery): Promise<ParleyEvent[]> {
    const t = this.tailOf(conversationId);
    const where = ['conversation_id = ?'];
    const args: unknown[] = [conversationId];
    if (q.afterSeq != null) where.push('seq > ?'), args.push(q.afterSeq);
    const below = t.below === null ? q.beforeSeq : q.beforeSeq == null ? t.below : Math.min(q.beforeSeq, t.below);
    if (below != null) where.push('seq < ?'), args.push(below);
    if (q.kind) where.push('kind = ?'), args.push(q.kind);
    if (q.source) where.push('source = ?'), args.push(q.source);
    if (q.sinceTimestamp) where.push('timestamp >= ?'), args.push(q.sinceTimestamp);
    const order = q.desc ? 'DESC' : 'ASC';
    const sql = `SELECT body FROM events WHERE ${where.join(' AND ')} ORDER BY seq ${order} LIMIT ?`;
    const stmt = this.db.prepare(sql);
    if (q.maxBytes === undefined) {
      const events = (stmt.all(...args, q.limit) as { body: string | Buffer }[]).map((r) => decodeBody(r.body));
      // unindexed events all come after the stored ones
      for (const ev of t.events) if (matches(ev, q)) events.push(ev);
      events.sort((a, b) => (q.desc ? b.seq! - a.seq! : a.seq! - b.seq!));
      return events.slice(0, q.limit);
    }
    // bounded by bytes: rows are read one at a time, so a page of large events is never held whole, and
    // the unindexed events (newer than every stored one) count as well: first in descending order, last in ascending
    const max = q.maxBytes;
    const events: ParleyEvent[] = [];
    let bytes = 0;
    const full = () => events.length >= q.limit || bytes >= max;
    const unindexed = () => {
      const tail = t.events.filter((ev) => matches(ev, q));
      if (q.desc) tail.reverse();
      for (const ev of tail) {
        if (full()) return;
        events.push(ev);
        bytes += eventJson(ev).length;
      }
    };
    if (q.desc) unindexed();
    if (!full()) {
      const decode = q.keepJson ? decodeKeepingJson : decodeBody;
      for (const r of stmt.iterate(...args, q.limit - events.length) as IterableIterator<{ body: string | Buffer }>) {
        events.push(decode(r.body));
        bytes += r.body.length;
        if (full()) break;
      }
    }
    if (!q.desc) unindexed();
    return events;
  }

  async count(conversationId: string, q: Omit<EventQuery, 'limit' | 'desc'>): Promise<number> {
    const t = this.tailOf(conversationId);
    const where = ['conversation_id = ?'];
    const args: unknown[] = [conversationId];
    if (q.afterSeq != null) where.push('seq > ?'), args.push(q.afterSeq);
    if (t.below !== null) where.push('seq < ?'), args.push(t.below);
    if (q.kind) where.push('kind = ?'), args.push(q.kind);
    if (q.source) where.push('source = ?'), args.push(q.source);
    const stored = this.db
      .prepare(`SELECT COUNT(*) FROM events WHERE ${where.join(' AND ')}`)
      .pluck()
      .get(...args) as number;
    let unindexed = 0;
    for (const ev of t.events) if (matches(ev, q)) unindexed += 1;
    return stored + unindexed;
  }

  async get(conversationId: string, eventId: string): Promise<ParleyEvent | null> {
    const unindexed = this.tail.get(conversationId)?.find((e) => e.id === eventId);
    if (unindexed) return unindexed;
    const b = this.stmts.getEvent.get(eventId, conversationId) as string | Buffer | undefined;
    return b ? decodeBody(b) : null;
  }

  async lastSeq(conversationId: string): Promise<number> {
    return this.seqOf(conversationId);
  }

  // ---- conversations ------------------------------------------------------------------------

  private static rowToConv(r: Record<string, unknown>): ConversationRecord {
    return conversationFromRow(r, JSON.parse(String(r.data)));
  }

  /** A write on this thread's connection: one that finds no room (or no lock, or an I/O error) answers 503 with the reason. */
  private writeRow<T>(what: string, run: () => T): T {
    try {
      return run();
    } catch (err) {
      throw this.writeError(what, err);
    }
  }

  private writeError(what: string, err: unknown): Error {
    if (!cannotWrite(err)) return err as Error;
    if (isDiskFull(err)) this.disk.report(what, err);
    return new UnavailableError(`${what} failed: ${errorText(err)}`);
  }

  /**
   * The record and its first events commit together or not at all: the record's transaction stays
   * open across the journal write and commits right after it; if that commit fails (no room in the
   * database) the frame is taken back before anything has read it. A crash between the two
   * (synchronous code, microseconds) leaves events in the journal without their conversation, which
   * no read reaches (every read needs the record).
   */
  async createConversation(rec: ConversationRecord, first: EventDraft[] = []): Promise<ParleyEvent[]> {
    const row = { ...rec, data: JSON.stringify(rec.data) };
    if (first.length === 0) {
      this.writeRow('storing the conversation', () => this.stmts.insertConv.run(row));
      return [];
    }
    if (this.closed) throw new UnavailableError('the store is closed');
    const refused = this.refusal();
    if (refused) throw refused;
    let events: ParleyEvent[] = [];
    const frame = this.encode([{ conversationId: rec.id, drafts: first, resolve: (evs) => (events = evs), reject: () => {} }]);
    let pos: JournalPosition;
    try {
      this.db.exec('BEGIN IMMEDIATE');
      try {
        this.stmts.insertConv.run(row);
        pos = this.commitFrame(frame, () => this.db.exec('COMMIT'));
      } finally {
        if (this.db.inTransaction) this.db.exec('ROLLBACK');
      }
    } catch (err) {
      for (const [id, seq] of frame.seqBefore) this.lastSeqCache.set(id, seq);
      if (cannotWrite(err)) throw this.writeError('storing the conversation', err);
      if (typeof (err as { syscall?: unknown })?.syscall === 'string') throw new UnavailableError(`event log write failed: ${errorText(err)}`);
      throw err; // e.g. the id is taken
    }
    this.committed(frame, pos);
    return events;
  }

  async getConversation(id: string): Promise<ConversationRecord | null> {
    const r = this.stmts.getConv.get(id) as Record<string, unknown> | undefined;
    return r ? SqliteStore.rowToConv(r) : null;
  }

  async listConversations(limit: number, cursor?: { created_at: string; id: string } | null): Promise<ConversationRecord[]> {
    const rows = cursor
      ? this.db
          .prepare('SELECT * FROM conversations WHERE (created_at < ?) OR (created_at = ? AND id <= ?) ORDER BY created_at DESC, id DESC LIMIT ?')
          .all(cursor.created_at, cursor.created_at, cursor.id, limit)
      : this.db.prepare('SELECT * FROM conversations ORDER BY created_at DESC, id DESC LIMIT ?').all(limit);
    return (rows as Record<string, unknown>[]).map(SqliteStore.rowToConv);
  }

  async updateConversation(id: string, patch: Partial<Omit<ConversationRecord, 'id' | 'created_at'>>): Promise<void> {
    const sets: string[] = [];
    const args: unknown[] = [];
    for (const [k, v] of Object.entries(patch)) {
      if (!['title', 'updated_at', 'execution_status', 'data'].includes(k)) continue;
      sets.push(`${k} = ?`);
      args.push(k === 'data' ? JSON.stringify(v) : v);
    }
    if (!('updated_at' in patch)) sets.push('updated_at = ?'), args.push(nowIso());
    this.writeRow('storing the conversation', () => this.db.prepare(`UPDATE conversations SET ${sets.join(', ')} WHERE id = ?`).run(...args, id));
  }

  async deleteConversation(id: string): Promise<boolean> {
    if (this.writerError) throw this.writerError; // its events could not be removed: keep the conversation too
    // the index would remove its events only once it can write again: answer now, keep the conversation
    if (this.indexStall) throw new UnavailableError(`deleting the conversation failed: the event index cannot be written (${this.indexStall})`);
    const changed = this.writeRow('deleting the conversation', () => this.stmts.deleteConv.run(id).changes);
    // ordered after every append made so far, including those still waiting for their flush
    if (this.pending.length) this.flush(true);
    await this.ask({ type: 'delete', conversationId: id });
    // every earlier frame is indexed (and now deleted): whatever is left is not to be seen
    this.tailSize -= this.tail.get(id)?.size ?? 0;
    this.tail.delete(id);
    this.lastSeqCache.delete(id);
    return changed > 0;
  }

  async conversationsWithUnfinishedSetup(): Promise<string[]> {
    return this.db
      .prepare(
        "SELECT id FROM conversations WHERE execution_status <> 'error' AND json_extract(data, '$.setup.phase') IS NOT NULL AND json_extract(data, '$.setup.phase') NOT IN ('ready', 'error')",
      )
      .pluck()
      .all() as string[];
  }

  async conversationsWithStatus(statuses: string[]): Promise<ConversationRecord[]> {
    if (statuses.length === 0) return [];
    const rows = this.db.prepare(`SELECT * FROM conversations WHERE execution_status IN (${statuses.map(() => '?').join(',')})`).all(...statuses);
    return (rows as Record<string, unknown>[]).map(SqliteStore.rowToConv);
  }

  // ---- secrets ------------------------------------------------------------------------------

  private static rowToSecret(r: Record<string, unknown>): SealedValue {
    return { kind: r.kind as string, name: r.name as string, sealed: (r.sealed as string | null) ?? null, meta: JSON.parse(r.meta as string) };
  }

  async putSecret(v: SealedValue): Promise<void> {
    this.writeRow('storing a secret', () => this.stmts.putSecret.run(v.kind, v.name, v.sealed, JSON.stringify(v.meta)));
  }
  async getSecret(kind: string, name: string): Promise<SealedValue | null> {
    const r = this.stmts.getSecret.get(kind, name) as Record<string, unknown> | undefined;
    return r ? SqliteStore.rowToSecret(r) : null;
  }
  async listSecrets(kind: string): Promise<SealedValue[]> {
    return (this.stmts.listSecrets.all(kind) as Record<string, unknown>[]).map(SqliteStore.rowToSecret);
  }
  async deleteSecret(kind: string, name: string): Promise<boolean> {
    return this.writeRow('deleting a secret', () => this.stmts.deleteSecret.run(kind, name).changes > 0);
  }
  async replaceSecrets(kind: string, values: SealedValue[]): Promise<void> {
    this.writeRow('storing secrets', () =>
      this.db.transaction(() => {
        this.stmts.deleteSecretsOfKind.run(kind);
        for (const v of values) this.stmts.putSecret.run(kind, v.name, v.sealed, JSON.stringify(v.meta));
      })(),
    );
  }

  /**
   * Commits pending appends, lets the writer index, move and checkpoint everything, then closes
   * both connections; the journal files go too when the index holds all of them. A writer that
   * cannot write (a full disk) stops retrying: what it had not indexed stays in the journal for
   * the next start.
   */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.unwatch();
    if (this.reserveTimer) clearTimeout(this.reserveTimer);
    if (this.ownsDisk) this.disk.close();
    if (this.pending.length) this.flush(true);
    Atomics.store(this.control, STOP, 1);
    Atomics.add(this.control, WAKE, 1);
    Atomics.notify(this.control, WAKE);
    let indexedAll = true;
    await this.ask({ type: 'close' }).catch(() => (indexedAll = false));
    await this.writer.terminate();
    this.journal.close(indexedAll && !this.writerError);
    this.db.close();
    this.unlock();
  }
}
