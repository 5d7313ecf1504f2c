/**
 * The embedded store's side of its writer thread (writer.ts): starts the thread, sends it requests
 * and settles each once its transaction has committed, passes on the thread's notices (the index
 * stalled or resumed) and its death, and signals it through the shared control array (wake it
 * from a backoff, stop its retries).
 */
import { Worker } from 'node:worker_threads';
import { UnavailableError } from '../errors.js';
import { CONTROL_SLOTS, STOP, WAKE } from './writer-control.js';
import type { WriterNotice, WriterReply, WriterRequest } from './writer.js';

type WithoutN<T> = T extends unknown ? Omit<T, 'n'> : never;
export type IndexRequest = WithoutN<WriterRequest>;

interface IndexWriterHooks {
  /** How the index is doing (it cannot write, or it writes again). */
  onNotice: (n: WriterNotice) => void;
  /** The thread failed or stopped before the store closed: every request waiting has been rejected with `err`. */
  onFailure: (err: Error) => void;
}

export class IndexWriter {
  private readonly worker: Worker;
  private requestNo = 0;
  private readonly waiting = new Map<number, { resolve: () => void; reject: (err: Error) => void }>();
  /** Shared with the thread (writer-control.ts). */
  private readonly control = new Int32Array(new SharedArrayBuffer(CONTROL_SLOTS * 4));
  private closing = false;

  constructor(file: string, synchronous: 'NORMAL' | 'FULL', hooks: IndexWriterHooks) {
    const workerData = { file, synchronous, control: this.control.buffer };
    // Built (`npm start` runs dist/, see scripts/build.mjs): the writer is plain JavaScript next to this
    // bundle. From source (tsx: tests, development): a boot file registers tsx in the worker first.
    this.worker = import.meta.url.endsWith('.ts')
      ? new Worker(new URL('./worker-boot.mjs', import.meta.url), { workerData: { ...workerData, entry: new URL('./writer.ts', import.meta.url).href } })
      : new Worker(new URL('./writer.mjs', import.meta.url), { workerData });
    this.worker.on('message', (r: WriterReply | WriterNotice) => {
      if ('notice' in r) return hooks.onNotice(r);
      const w = this.waiting.get(r.n);
      if (!w) return;
      this.waiting.delete(r.n);
      if (r.error) w.reject(new UnavailableError(`event index write failed: ${r.error}`));
      else w.resolve();
    });
    const fail = (err: Error) => {
      for (const w of this.waiting.values()) w.reject(err);
      this.waiting.clear();
      hooks.onFailure(err);
    };
    this.worker.on('error', (err) => fail(new UnavailableError(`event index writer failed: ${err.message}`)));
    this.worker.on('exit', (code) => {
      if (!this.closing) fail(new UnavailableError(`event log writer stopped (exit ${code})`));
    });
    this.worker.unref();
  }

  /**
   * Sends a request (`transfer`: buffers it hands over, no longer usable here); resolves when its
   * transaction has committed. The thread keeps the process alive only while a request waits.
   */
  ask(req: IndexRequest, transfer?: ArrayBuffer[]): Promise<void> {
    const n = ++this.requestNo;
    return new Promise<void>((resolve, reject) => {
      this.waiting.set(n, { resolve, reject });
      this.worker.ref();
      this.worker.postMessage({ ...req, n } as WriterRequest, transfer);
    }).finally(() => {
      if (this.waiting.size === 0) this.worker.unref();
    });
  }

  /** Ends a retry's backoff at once (the disk has room again). */
  wake(): void {
    Atomics.add(this.control, WAKE, 1);
    Atomics.notify(this.control, WAKE);
  }

  /** The store is closing: a write that keeps failing is left to the journal, not retried; the thread's exit is no failure. */
  stop(): void {
    this.closing = true;
    Atomics.store(this.control, STOP, 1);
    this.wake();
  }

  async terminate(): Promise<void> {
    this.closing = true;
    await this.worker.terminate();
  }
}
