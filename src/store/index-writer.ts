/**
 * The embedded store's side of its writer thread (writer.ts): starts the thread, sends it requests
 * and settles each once its transaction has committed, passes on the thread's notices (the index
 * stalled or resumed) and its death, and signals it through the shared control array (wake it
 * from a backoff, stop its retries).
 *
 * The thread runs only while there is indexing to do: it starts with the first request and, once
 * no request has waited for `IDLE_EXIT_MS` (30 s), checkpoints, closes its connection and exits; the next
 * request starts a new one. A thread is a V8 isolate of its own (~10 MiB of an idle daemon's
 * RSS); an idle daemon holds none. Appends never wait for it (they are committed by the journal
 * and served from the tail), so its start (tens of ms) delays only the index.
 *
 * A few frames while no thread is about are indexed on the event loop instead (`indexHere`): a
 * turn's events take a fraction of a millisecond to insert, where a thread started for them would
 * hold its isolate for the next `IDLE_EXIT_MS`. Under load the batches are larger and go to the thread.
 */
import { Worker } from 'node:worker_threads';
import { UnavailableError } from '../errors.js';
import { CONTROL_SLOTS, STOP, WAKE } from './writer-control.js';
import type { JournalPosition } from './journal.js';
import type { WriterNotice, WriterReply, WriterRequest } from './writer.js';

type WithoutN<T> = T extends unknown ? Omit<T, 'n'> : never;
export type IndexRequest = WithoutN<WriterRequest>;

/**
 * How long the thread stays after its last request was answered (by default). Long enough that a
 * conversation's turns seconds apart keep it: a restart (a V8 isolate, the writer's code, the
 * connection) landed beside the next turn and slowed it (a text turn 2.6 s after the last: p50 11.6
 * vs 7.7 ms with 2 s, scripts/bench-turn.ts --settle-ms 2600, load ~6).
 */
const IDLE_EXIT_MS = 30_000;

/** The frames' bytes at most that are indexed on the event loop (a few ms of inserts at most). */
export const INLINE_INDEX_BYTES = 64 * 1024;

/** Indexing on the event loop: the store's own connection's indexer, made on first use, and how much it takes. */
export interface InlineIndex {
  indexer: () => (frames: { payload: Uint8Array; pos: JournalPosition }[]) => void;
  maxBytes: number;
}

interface IndexWriterHooks {
  /** How the index is doing (it cannot write, or it writes again). */
  onNotice: (n: WriterNotice) => void;
  /** The thread failed or stopped before the store closed: every request waiting has been rejected with `err`. */
  onFailure: (err: Error) => void;
}

export class IndexWriter {
  /** The running thread, if any (null: none started yet, or the last one exited while idle). */
  private worker: Worker | null = null;
  private requestNo = 0;
  private readonly waiting = new Map<number, { resolve: () => void; reject: (err: Error) => void }>();
  /** Shared with the thread (writer-control.ts). */
  private readonly control = new Int32Array(new SharedArrayBuffer(CONTROL_SLOTS * 4));
  private closing = false;
  private idleTimer: NodeJS.Timeout | null = null;
  /** The exit of a thread retiring after its idle period (its checkpoint may still run). */
  private retiring: Promise<unknown> = Promise.resolve();
  /** A retiring thread has not exited yet (it may still write). */
  private retiringNow = false;
  private inlineIndexer: ReturnType<InlineIndex['indexer']> | null = null;

  constructor(
    private readonly file: string,
    private readonly synchronous: 'NORMAL' | 'FULL',
    private readonly hooks: IndexWriterHooks,
    private readonly idleExitMs = IDLE_EXIT_MS,
    private readonly inline: InlineIndex | null = null,
  ) {}

  /**
   * Indexes `frames` here, on the event loop, when they are few and no thread is
   * about (none running, retiring or with a request): nothing else writes the index then, so the
   * order holds. False: they go to the thread (too many, a thread about, or the write failed here:
   * the thread retries it and says when the index stalls).
   */
  indexHere(frames: { payload: Uint8Array; pos: JournalPosition }[]): boolean {
    if (!this.inline || this.worker || this.retiringNow || this.waiting.size > 0 || this.closing) return false;
    let bytes = 0;
    for (const f of frames) bytes += f.payload.byteLength;
    if (bytes > this.inline.maxBytes) return false;
    try {
      this.inlineIndexer ??= this.inline.indexer();
      this.inlineIndexer(frames);
      return true;
    } catch {
      return false;
    }
  }

  /** Whether a thread runs now (one exiting after its idle period too, until it has exited). */
  get running(): boolean {
    return this.worker !== null || this.retiringNow;
  }

  private start(): Worker {
    const workerData = { file: this.file, synchronous: this.synchronous, control: this.control.buffer };
    // Built (`npm start` runs dist/, see scripts/build.mjs): the writer is plain JavaScript next to this
    // bundle. From source (tsx: tests, development): a boot file registers tsx in the worker first.
    const worker = import.meta.url.endsWith('.ts')
      ? new Worker(new URL('./worker-boot.mjs', import.meta.url), { workerData: { ...workerData, entry: new URL('./writer.ts', import.meta.url).href } })
      : new Worker(new URL('./writer.mjs', import.meta.url), { workerData });
    worker.on('message', (r: WriterReply | WriterNotice) => {
      if ('notice' in r) return this.hooks.onNotice(r);
      const w = this.waiting.get(r.n);
      if (!w) return;
      this.waiting.delete(r.n);
      if (r.error) w.reject(new UnavailableError(`event index write failed: ${r.error}`));
      else w.resolve();
    });
    const fail = (err: Error) => {
      // a thread that exited while idle is no failure (nothing waits on it)
      if (this.worker !== worker) return;
      for (const w of this.waiting.values()) w.reject(err);
      this.waiting.clear();
      this.hooks.onFailure(err);
    };
    worker.on('error', (err) => fail(new UnavailableError(`event index writer failed: ${err.message}`)));
    worker.on('exit', (code) => {
      if (!this.closing) fail(new UnavailableError(`event log writer stopped (exit ${code})`));
    });
    return worker;
  }

  /**
   * Sends a request (a frame's payload is shared memory: the thread reads the bytes the journal wrote);
   * resolves when its transaction has committed. The thread keeps the process alive only while a request waits.
   */
  ask(req: IndexRequest): Promise<void> {
    // the store's closing checkpoint needs no thread when none runs (SQLite checkpoints as the last connection closes)
    if (req.type === 'close' && !this.worker) return Promise.resolve();
    if (this.idleTimer) clearTimeout(this.idleTimer);
    this.idleTimer = null;
    this.worker ??= this.start();
    const worker = this.worker;
    const n = ++this.requestNo;
    return new Promise<void>((resolve, reject) => {
      this.waiting.set(n, { resolve, reject });
      worker.ref();
      worker.postMessage({ ...req, n } as WriterRequest);
    }).finally(() => {
      if (this.waiting.size > 0) return;
      worker.unref();
      if (!this.closing && this.worker === worker && !this.idleTimer) {
        this.idleTimer = setTimeout(() => this.retire(worker), this.idleExitMs);
        this.idleTimer.unref();
      }
    });
  }

  /** The thread has been idle for `idleExitMs`: it checkpoints, closes its connection and exits; the next request starts another. */
  private retire(worker: Worker): void {
    this.idleTimer = null;
    if (this.closing || this.worker !== worker || this.waiting.size > 0) return;
    this.worker = null;
    this.retiringNow = true;
    this.retiring = new Promise((resolve) => worker.once('exit', resolve)).finally(() => {
      this.retiringNow = false;
    });
    const n = ++this.requestNo;
    worker.on('message', (r: WriterReply | WriterNotice) => {
      if (!('notice' in r) && r.n === n) void worker.terminate();
    });
    // held by the event loop until it exits: a store closing meanwhile waits for that exit
    worker.ref();
    worker.postMessage({ type: 'close', n } satisfies WriterRequest);
  }

  /** Ends a retry's backoff at once (the disk has room again). */
  wake(): void {
    Atomics.add(this.control, WAKE, 1);
    Atomics.notify(this.control, WAKE);
  }

  /** The store is closing: a write that keeps failing is left to the journal, not retried; the thread's exit is no failure. */
  stop(): void {
    this.closing = true;
    if (this.idleTimer) clearTimeout(this.idleTimer);
    this.idleTimer = null;
    Atomics.store(this.control, STOP, 1);
    this.wake();
  }

  async terminate(): Promise<void> {
    this.closing = true;
    await Promise.all([this.worker?.terminate(), this.retiring]);
  }
}
