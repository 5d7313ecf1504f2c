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
 * The parts with a seam of their own live beside this file: the database's tables and statements
 * (sqlite-schema.ts), start-up recovery of the journal (sqlite-recovery.ts), reads that merge the
 * database with the tail (sqlite-reads.ts) and the writer thread's handle (index-writer.ts). What
 * stays here shares one in-memory state: the appends waiting for their frame, the seq counters, the
 * tail, and what the disk-full paths do with them.
 */
import path from 'node:path';
import type Database from 'better-sqlite3';
import { UnavailableError } from '../errors.js';
import { uuidv7 } from '../events/ids.js';
import { EncodedEvent, type EventDraft, type ParleyEvent } from '../events/types.js';
import { isoTime } from '../iso-time.js';
import { serializeEvent } from '../events/event-json.js';
import { metrics } from '../metrics.js';
import { DiskWatch, errorText, isDiskFull } from './disk-watch.js';
import { INLINE_INDEX_BYTES, IndexWriter, type IndexRequest } from './index-writer.js';
import { lockDataDir } from './lock.js';
import { eventSpans, framePayload, type Journal, journalEvents, journalFrame, journalIndexer, journalLine, type JournalPosition } from './journal.js';
import { countEvents, decodeBody, queryEvents } from './sqlite-reads.js';
import { recoverJournal } from './sqlite-recovery.js';
import { SqliteRecords } from './sqlite-records.js';
import { cannotWrite, openDatabase, prepareStatements } from './sqlite-schema.js';
import { UnindexedEvents } from './unindexed.js';
import { StatusesBehind } from './statuses-behind.js';
import { CommitListeners } from './types.js';
import type { CommitListener, ConversationPatch, ConversationRecord, EventQuery, SealedValue, Store } from './types.js';
import type { WriterNotice } from './writer.js';

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
  /** How long the index writer thread stays without a request before it exits (default 30 s; index-writer.ts). */
  writerIdleMs?: number;
  /** Batches of at most this many bytes are indexed on the event loop while no thread is about (default 64 KiB; 0: never; FULL: never). */
  inlineIndexBytes?: number;
  /** The watch of DATA_DIR's free space that writes meeting a full disk are reported to (default: one of the store's own). */
  disk?: DiskWatch;
}

interface Pending {
  conversationId: string;
  drafts: EventDraft[];
  /** `append`'s one event (`one`), else every event of `drafts`. */
  resolve: (value: ParleyEvent[] & ParleyEvent) => void;
  reject: (err: unknown) => void;
  /** An `append`: it resolves to its event (no array made for it, no function wrapped around its promise's resolve). */
  one?: boolean;
}

/** A batch of appends encoded as one journal frame, seq assigned (and given back if the frame is not committed). */
interface Frame {
  batch: Pending[];
  results: EncodedEvent[][];
  /** The journal frame (journal.ts `journalFrame`): its payload waits in the tail and goes on to the writer thread. */
  bytes: Buffer;
  /** Where each event's JSON text lies in the payload, in the frame's order (journal.ts `eventSpans`). */
  spans: number[];
  /** Each conversation's last seq before the frame. */
  seqBefore: Map<string, number>;
}

const appendLatency = metrics.storeAppend.child();

export class SqliteStore implements Store {
  private db: Database.Database;
  private lastSeqCache = new Map<string, number>();
  private pending: Pending[] = [];
  private flushScheduled = false;
  private stmts;
  /** Conversations' rows and secrets. */
  private readonly records: SqliteRecords;
  private writer: IndexWriter;
  /**
   * Committed frames gathered for the writer's next transaction (sent as one message: a message per frame woke the writer's
   * thread ~600 times a second under load).
   */
  private indexQueue: { payload: Uint8Array; pos: JournalPosition; newest: Map<string, number> }[] = [];
  private indexTimer: NodeJS.Timeout | null = null;
  private readonly indexDelayMs: number;
  private closed = false;
  /** Set when the writer thread died: every later write fails at once instead of waiting. */
  private writerError: Error | null = null;
  /** Why the index cannot write now (null: it can); the writer retries meanwhile. */
  private indexStall: string | null = null;
  /** DATA_DIR's free space: writes that meet a full disk are reported to it, and it says when there is room again. */
  readonly disk: DiskWatch;
  private readonly ownsDisk: boolean;
  private readonly unwatch: () => void;
  private readonly reserveBytes: number;
  private reserveTimer: NodeJS.Timeout | null = null;
  private journal: Journal;
  /** The committed events not yet indexed (the tail), which reads merge with the database. */
  private readonly tail: UnindexedEvents;
  /** Committed statuses the conversations table does not have yet (stored before a read). */
  private readonly statuses: StatusesBehind;
  private readonly unlock: () => void;
  /** When the oldest append waiting for the next frame was queued (performance.now()). */
  private pendingSince = 0;

  private readonly commits = new CommitListeners();

  onCommit(listener: CommitListener): void {
    this.commits.add(listener);
  }

  constructor(dataDir: string, opts: StoreOptions = {}) {
    // a failure below leaves the lock to this process; it exits, and the next start takes it over
    this.unlock = lockDataDir(dataDir);
    const file = path.join(dataDir, 'parley.db');
    const synchronous = opts.synchronous ?? 'NORMAL';
    this.db = openDatabase(file, synchronous);
    this.stmts = prepareStatements(this.db);
    this.statuses = new StatusesBehind((status, ts, id) => this.stmts.setStatus.run(status, ts, id));
    this.tail = new UnindexedEvents(opts.maxUnindexed ?? 50_000, opts.maxUnindexedBytes ?? 256 * 1024 * 1024);
    this.ownsDisk = !opts.disk;
    this.disk = opts.disk ?? new DiskWatch(dataDir);
    this.reserveBytes = opts.reserveBytes ?? 0;
    this.records = new SqliteRecords(this.db, this.stmts, this.disk);
    const journalOpts = {
      fsync: synchronous === 'FULL',
      rotateBytes: opts.rotateBytes ?? 64 * 1024 * 1024,
      reserveBytes: this.reserveBytes,
      onReserveUsed: (err: unknown) => {
        this.disk.report('event log (writing into its reserve now)', err);
        this.keepReserve(0);
      },
    };
    const { journal, unindexed } = recoverJournal(this.db, path.join(dataDir, 'journal'), journalOpts, (err) =>
      this.disk.report('event index (start-up)', err),
    );
    this.journal = journal;
    this.indexDelayMs = opts.indexDelayMs ?? 250;
    this.writer = new IndexWriter(
      file,
      synchronous,
      {
        onNotice: (n) => this.indexHealth(n),
        onFailure: (err) => {
          this.writerError ??= err;
          if (this.pending.length) this.flush(true); // appends held back for the index fail now
        },
      },
      opts.writerIdleMs,
      // (FULL: an index commit on the event loop would wait for its fsync there)
      { indexer: () => journalIndexer(this.db), maxBytes: synchronous === 'FULL' ? 0 : (opts.inlineIndexBytes ?? INLINE_INDEX_BYTES) },
    );
    for (const f of unindexed) this.readmit(f.payload, f.pos);
    this.unwatch = this.disk.subscribe((p) => {
      if (p.full) return;
      // room again: the writer's backoff ends now, and the reserve is made again
      this.writer.wake();
      this.keepReserve(0);
    });
    this.keepReserve(opts.reserveDelayMs ?? 1000);
  }

  /** Whether the index writer thread runs now (it starts with the first frame to index and exits when idle). */
  get writerRunning(): boolean {
    return this.writer.running;
  }

  /**
   * A frame committed before this start that the index has not seen: its events join the tail and it goes to the writer, as if
   * just committed (not published again).
   */
  private readmit(payload: string, pos: JournalPosition): void {
    const newest = new Map<string, number>();
    const bytes = framePayload(journalFrame(payload));
    const spans = eventSpans(bytes);
    journalEvents(payload).forEach(({ conversationId, event }, k) => {
      this.tail.add(conversationId, bytes, spans, k, [{ event }]);
      newest.set(conversationId, event.seq!);
      this.lastSeqCache.set(conversationId, event.seq!);
      this.statuses.note(conversationId, event);
    });
    this.toIndex(bytes, pos, newest);
  }

  /** The writer tells how the index is doing. */
  private indexHealth(n: WriterNotice): void {
    if (n.notice === 'resumed') {
      this.indexStall = null;
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
  private ask(req: IndexRequest): Promise<void> {
    if (req.type !== 'index') this.sendIndex(); // a delete or close is ordered after every frame committed before it
    if (this.writerError) return Promise.reject(this.writerError);
    return this.writer.ask(req);
  }

  // ---- events -------------------------------------------------------------------------------

  append(conversationId: string, draft: EventDraft): Promise<ParleyEvent> {
    // one promise, not appendMany's and a second one to pick its only event: this is the hot path
    return new Promise((resolve, reject) => this.enqueue({ conversationId, drafts: [draft], resolve, reject, one: true }));
  }

  appendMany(conversationId: string, drafts: EventDraft[]): Promise<ParleyEvent[]> {
    return new Promise((resolve, reject) => this.enqueue({ conversationId, drafts, resolve: resolve as Pending['resolve'], reject }));
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
    if (this.indexStall && this.tail.full) {
      return new UnavailableError(`event index cannot be written (${this.indexStall}) and ${this.tail.size} committed events already wait for it`);
    }
    return null;
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
    if (this.tail.full && !force) return; // resumed when the index acknowledges a frame
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
    // each event's JSON within the payload, in characters: its bytes too while the payload is ASCII, and then no scan of
    // the bytes (eventSpans: ~70 ns an event, 1 % of the hot path's event loop) is needed
    let spans: number[] = [];
    let at = 0;
    const seqBefore = new Map<string, number>();
    const now = isoTime(); // the commit time of the whole frame
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
        const line = journalLine(p.conversationId, ev, json);
        lines.push(line);
        spans.push(at + line.length - json.length, at + line.length);
        at += line.length + 1;
        out.push(new EncodedEvent(ev, json));
      }
      this.lastSeqCache.set(p.conversationId, seq);
      results.push(out);
    }
    const text = lines.join('\n');
    const bytes = journalFrame(text);
    if (framePayload(bytes).length !== text.length) spans = eventSpans(framePayload(bytes));
    return { batch, results, bytes, spans, seqBefore };
  }

  /**
   * Writes the frame to the journal: the commit. `alongside`, when given, runs right after the
   * write and may refuse the commit by throwing: the frame is then taken back. On failure nothing
   * of the frame is committed, its seqs are free again, and this throws.
   */
  private commitFrame(frame: Frame, alongside?: () => void): JournalPosition {
    try {
      const pos = this.journal.append(frame.bytes);
      if (alongside) {
        try {
          alongside();
        } catch (err) {
          try {
            this.journal.retract(pos, frame.bytes.length);
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
    const { batch, results, spans } = frame;
    const payload = framePayload(frame.bytes);
    // a status event sets the stored status in the same commit: the frame is the commit (statuses-behind.ts)
    batch.forEach((p, i) => {
      for (const e of results[i]!) this.statuses.note(p.conversationId, e.event);
    });
    const newest = new Map<string, number>();
    let first = 0;
    batch.forEach((p, i) => {
      this.tail.add(p.conversationId, payload, spans, first, results[i]!);
      first += results[i]!.length;
      newest.set(p.conversationId, this.lastSeqCache.get(p.conversationId)!);
    });
    this.toIndex(payload, pos, newest);
    batch.forEach((p, i) => {
      this.commits.emit(p.conversationId, results[i]!);
      const encoded = results[i]!;
      p.resolve((p.one ? encoded[0]!.event : encoded.map((e) => e.event)) as ParleyEvent[] & ParleyEvent);
    });
  }

  /**
   * Hands a committed frame's payload to the writer (with the others of the next `indexDelayMs`);
   * once it is indexed its events leave the tail. The payload is the written frame's own bytes, shared
   * with the thread and with the tail (journal.ts `journalFrame`): no copy, and nothing of it waits in
   * the JS heap, where ~250 ms of frames would outlive young-generation collections and be copied by each.
   */
  private toIndex(payload: Buffer, pos: JournalPosition, newest: Map<string, number>): void {
    this.tail.frameSent(payload.byteLength);
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
    if (this.writer.indexHere(frames)) {
      for (const f of frames) this.indexed(f.pos, f.newest);
      return;
    }
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

  /** The index holds a frame: its events leave the tail (up to `newest` seq per conversation), and the statuses it stored are no longer behind. */
  private indexed(pos: JournalPosition, newest: Map<string, number>): void {
    this.statuses.indexed(newest);
    this.tail.frameIndexed(newest);
    this.journal.indexed(pos);
    if (this.pending.length && !this.flushScheduled && !this.tail.full) {
      this.flushScheduled = true;
      setImmediate(() => this.flush());
    }
  }

  /** Seconds since the oldest frame the index has not acknowledged was committed (0: none waiting). */
  get indexLagSeconds(): number {
    return this.tail.lagSeconds;
  }

  /** Committed events the writer has not indexed yet (held in memory and readable). */
  get unindexed(): number {
    return this.tail.size;
  }

  async query(conversationId: string, q: EventQuery): Promise<ParleyEvent[]> {
    return queryEvents(this.db, conversationId, q, this.tail.of(conversationId, q));
  }

  async count(conversationId: string, q: Omit<EventQuery, 'limit' | 'desc'>): Promise<number> {
    return countEvents(this.db, conversationId, q, this.tail.of(conversationId, q));
  }

  async get(conversationId: string, eventId: string): Promise<ParleyEvent | null> {
    const unindexed = this.tail.find(conversationId, eventId);
    if (unindexed) return unindexed;
    const b = this.stmts.getEvent.get(eventId, conversationId) as string | Buffer | undefined;
    return b ? decodeBody(b) : null;
  }

  async lastSeq(conversationId: string): Promise<number> {
    return this.seqOf(conversationId);
  }

  // ---- conversations and secrets: their rows (sqlite-records.ts), but for a conversation's create and delete ----

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
      this.records.writeRow('storing the conversation', () => this.stmts.insertConv.run(row));
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
      if (cannotWrite(err)) throw this.records.writeError('storing the conversation', err);
      if (typeof (err as { syscall?: unknown })?.syscall === 'string') throw new UnavailableError(`event log write failed: ${errorText(err)}`);
      throw err; // e.g. the id is taken
    }
    this.committed(frame, pos);
    return events;
  }

  async getConversation(id: string): Promise<ConversationRecord | null> {
    this.statuses.apply();
    return this.records.getConversation(id);
  }
  async listConversations(limit: number, cursor?: { created_at: string; id: string } | null): Promise<ConversationRecord[]> {
    this.statuses.apply();
    return this.records.listConversations(limit, cursor);
  }
  async updateConversation(id: string, patch: ConversationPatch): Promise<void> {
    this.records.updateConversation(id, patch);
  }
  async conversationsWithUnfinishedSetup(): Promise<string[]> {
    this.statuses.apply();
    return this.records.conversationsWithUnfinishedSetup();
  }
  async conversationsWithStatus(statuses: string[]): Promise<ConversationRecord[]> {
    this.statuses.apply();
    return this.records.conversationsWithStatus(statuses);
  }
  /** Conversations per execution status. */
  countByStatus(): [string, number][] {
    this.statuses.apply();
    return this.records.countByStatus();
  }

  async deleteConversation(id: string): Promise<boolean> {
    if (this.writerError) throw this.writerError; // its events could not be removed: keep the conversation too
    // the index would remove its events only once it can write again: answer now, keep the conversation
    if (this.indexStall) throw new UnavailableError(`deleting the conversation failed: the event index cannot be written (${this.indexStall})`);
    const changed = this.records.writeRow('deleting the conversation', () => this.stmts.deleteConv.run(id).changes);
    // ordered after every append made so far, including those still waiting for their flush
    if (this.pending.length) this.flush(true);
    await this.ask({ type: 'delete', conversationId: id });
    // every earlier frame is indexed (and now deleted): whatever is left is not to be seen
    this.tail.forget(id);
    this.lastSeqCache.delete(id);
    return changed > 0;
  }

  async putSecret(v: SealedValue): Promise<void> {
    this.records.putSecret(v);
  }
  async getSecret(kind: string, name: string): Promise<SealedValue | null> {
    return this.records.getSecret(kind, name);
  }
  async listSecrets(kind: string): Promise<SealedValue[]> {
    return this.records.listSecrets(kind);
  }
  async deleteSecret(kind: string, name: string): Promise<boolean> {
    return this.records.deleteSecret(kind, name);
  }
  async replaceSecrets(kind: string, values: SealedValue[]): Promise<void> {
    this.records.replaceSecrets(kind, values);
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
    this.writer.stop();
    let indexedAll = true;
    await this.ask({ type: 'close' }).catch(() => (indexedAll = false));
    await this.writer.terminate();
    this.journal.close(indexedAll && !this.writerError);
    this.db.close();
    this.unlock();
  }
}
