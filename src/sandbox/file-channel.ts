/**
 * The framed request/response pipe to one running file service (file-protocol.ts says what travels
 * on it). The service is not trusted, and this is the one place its bytes are read:
 *
 * - memory: a frame's length is checked against its request's limit as soon as its 8-byte prefix is
 *   in, before anything waits for its bytes; received chunks are kept in a list and each frame is
 *   copied out once (joining every chunk to the ones before it was quadratic: a 32 MB answer took
 *   17 s of the main thread);
 * - parsing: a header is counted (body-shape) before JSON.parse, and checked field by field against
 *   the answer its request expects;
 * - order: every frame must answer the oldest request waiting, by its id; bytes that arrive when no
 *   request waits (late, replayed, unsolicited) are a violation;
 * - time: a request not answered within its deadline ends the channel (a streamed transfer is a
 *   request per chunk, so the deadline is about progress, not the whole transfer);
 * - nothing it sends can throw out of the stream's listener: whatever goes wrong while a frame is
 *   read ends this channel only.
 *
 * A violation or a deadline ends the channel with a reason in the daemon's own words (never the
 * service's), tells `onFault` (the launcher: an event on the conversation), and `onBroken` (the
 * owner kills the service and with it the sandbox; the next use starts a new one).
 */
import type { Readable, Writable } from 'node:stream';
import { jsonShapeError } from '../body-shape.js';
import { checkAnswer, checkReady, failureOf, FileOpError, HEADER_SHAPE, MAX_HEADER, ProtocolViolation, type FileOpCode } from './file-protocol.js';

/** A request the service has not answered by then ends the channel. */
const FILE_OP_TIMEOUT_MS = 30_000;

/** A checked answer: its header (every field as the operation's schema allows) and its data. */
export interface Answer {
  header: Record<string, unknown>;
  data: Buffer;
}

interface Pending {
  id: number;
  op: string;
  maxData: number;
  /** Checks of the answer beyond its schema (paths under what was asked): a violation's reason, thrown. */
  check: ((a: Answer) => void) | undefined;
  resolve(v: Answer): void;
  reject(e: Error): void;
  timer: NodeJS.Timeout;
}

const MiB = 1024 * 1024;
const size = (n: number) => (n >= MiB ? `${(n / MiB).toFixed(1)} MiB` : n >= 1024 ? `${Math.round(n / 1024)} KiB` : `${n} bytes`);

export class FileChannel {
  private nextId = 1;
  private readonly queue: Pending[] = [];
  /** Received bytes not yet read, in arrival order; `offset` into the first. */
  private chunks: Buffer[] = [];
  private offset = 0;
  private have = 0;
  /** The frame being received: its lengths, checked. */
  private frame: { hl: number; dl: number } | null = null;
  private broken: string | null = null;
  /** Resolves with the first frame (the service is ready), rejects when it ends before. */
  readonly ready: Promise<void>;
  private readyResolve!: () => void;
  private readyReject!: (e: Error) => void;
  private isReady = false;
  /**
   * Told once when the service broke the protocol or missed a deadline (not when it merely ended):
   * set by whoever knows the conversation the channel serves.
   */
  onFault: ((reason: string) => void) | null = null;

  constructor(
    private readonly input: Writable,
    output: Readable,
    private readonly onBroken: (why: string) => void,
    private readonly timeoutMs = FILE_OP_TIMEOUT_MS,
  ) {
    this.ready = new Promise<void>((resolve, reject) => {
      this.readyResolve = resolve;
      this.readyReject = reject;
    });
    this.ready.catch(() => {});
    input.on('error', () => this.ended('the file service is gone'));
    output.on('data', (chunk: Buffer) => this.onData(chunk));
    output.on('end', () => this.ended('the file service ended'));
    output.on('error', () => this.ended('the file service ended'));
  }

  get usable(): boolean {
    return this.broken === null;
  }

  /**
   * Sends one request; `maxData`: the most data bytes its answer may carry (the service is told,
   * and the daemon refuses more). The answer is checked against `header.op`'s schema and `check`.
   */
  request(header: Record<string, unknown>, data: Uint8Array | null, maxData = 0, check?: (a: Answer) => void): Promise<Answer> {
    if (this.broken) return Promise.reject(new FileOpError('UNAVAILABLE', this.broken));
    const id = this.nextId++;
    const op = String(header.op);
    const head = Buffer.from(JSON.stringify({ ...header, id, dataMax: maxData }), 'utf8');
    const body = data ?? new Uint8Array(0);
    const pre = Buffer.allocUnsafe(8);
    pre.writeUInt32LE(head.length, 0);
    pre.writeUInt32LE(body.byteLength, 4);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(
        () => this.fault(`did not answer a file operation (${op}) within ${Math.round(this.timeoutMs / 1000)} s`, 'TIMEOUT'),
        this.timeoutMs,
      );
      timer.unref();
      this.queue.push({ id, op, maxData, check, resolve, reject, timer });
      // one write: the service reads one chunk per request (a frame split in three costs wake-ups)
      this.input.write(body.byteLength > 0 ? Buffer.concat([pre, head, body]) : Buffer.concat([pre, head]));
    });
  }

  /** Ends the channel: every request waiting gets the reason. */
  break(why: string, code: FileOpCode = 'UNAVAILABLE'): void {
    if (this.broken) return;
    this.broken = why;
    this.chunks = [];
    this.have = 0;
    this.frame = null;
    if (!this.isReady) this.readyReject(new Error(why));
    for (const p of this.queue.splice(0)) {
      clearTimeout(p.timer);
      p.reject(new FileOpError(code, why));
    }
    this.onBroken(why);
  }

  /**
   * The service's pipes closed, or its sandbox ended (whichever the daemon learns first): it broke the
   * protocol when that was in the middle of an answer, else it was stopped.
   */
  ended(why: string): void {
    if (this.have > 0 || this.frame) this.fault('ended in the middle of an answer');
    else this.break(why);
  }

  /** The service broke the protocol or a deadline: the channel ends, and the owner is told why. */
  fault(reason: string, code: FileOpCode = 'UNAVAILABLE'): void {
    if (this.broken) return;
    const why = `the file service ${reason}`;
    this.break(why, code);
    try {
      this.onFault?.(why);
    } catch {
      /* a listener's failure is not the channel's */
    }
  }

  private onData(chunk: Buffer): void {
    if (this.broken) return;
    try {
      this.receive(chunk);
    } catch (e) {
      this.fault(e instanceof ProtocolViolation ? `sent what the daemon refuses: ${e.message}` : 'sent an answer the daemon could not read');
    }
  }

  private receive(chunk: Buffer): void {
    if (this.isReady && this.queue.length === 0) throw new ProtocolViolation('bytes arrived while no request waited (late, replayed or unsolicited)');
    this.chunks.push(chunk);
    this.have += chunk.length;
    while (!this.broken) {
      if (!this.frame) {
        if (this.have < 8) return;
        const pre = this.take(8);
        const hl = pre.readUInt32LE(0);
        const dl = pre.readUInt32LE(4);
        const want = this.queue[0];
        if (this.isReady && !want) throw new ProtocolViolation('a frame arrived while no request waited (late, replayed or unsolicited)');
        const maxData = this.isReady ? want!.maxData : 0;
        if (hl > MAX_HEADER) throw new ProtocolViolation(`a frame's header of ${size(hl)} is larger than ${size(MAX_HEADER)}`);
        if (dl > maxData) throw new ProtocolViolation(`a frame's data of ${size(dl)} is larger than its request allows (${size(maxData)})`);
        this.frame = { hl, dl };
      }
      const { hl, dl } = this.frame;
      if (this.have < hl + dl) return;
      const head = this.take(hl).toString('utf8');
      const data = this.take(dl);
      this.frame = null;
      this.answer(head, data);
    }
  }

  /** The next `n` received bytes (a view into one chunk, or one copy across several). */
  private take(n: number): Buffer {
    const first = this.chunks[0];
    this.have -= n;
    if (n === 0) return Buffer.alloc(0);
    if (first && first.length - this.offset >= n) {
      const out = first.subarray(this.offset, this.offset + n);
      this.offset += n;
      if (this.offset === first.length) this.chunks.shift(), (this.offset = 0);
      return out;
    }
    const out = Buffer.allocUnsafe(n);
    let filled = 0;
    while (filled < n) {
      const c = this.chunks[0]!;
      const k = Math.min(n - filled, c.length - this.offset);
      c.copy(out, filled, this.offset, this.offset + k);
      filled += k;
      this.offset += k;
      if (this.offset === c.length) this.chunks.shift(), (this.offset = 0);
    }
    return out;
  }

  private answer(text: string, data: Buffer): void {
    const shape = jsonShapeError(text, HEADER_SHAPE, 'a header');
    if (shape) throw new ProtocolViolation(shape.tooLarge ? 'a header with more structure than any answer has' : 'a malformed header');
    let header: unknown;
    try {
      header = JSON.parse(text);
    } catch {
      throw new ProtocolViolation('a header that is not JSON');
    }
    if (!this.isReady) {
      checkReady(header);
      this.isReady = true;
      this.readyResolve();
      return;
    }
    const p = this.queue[0]!;
    if (typeof header !== 'object' || header === null || (header as { id?: unknown }).id !== p.id) {
      throw new ProtocolViolation(`an answer out of order (request ${p.id}, ${p.op}, was waiting)`);
    }
    const ok = (header as { ok?: unknown }).ok;
    let result: Answer | FileOpError;
    if (ok === false) {
      if (data.length > 0) throw new ProtocolViolation('a failure answer carried data');
      result = failureOf(header);
    } else {
      result = { header: checkAnswer(p.op, header), data };
      p.check?.(result);
    }
    this.queue.shift();
    clearTimeout(p.timer);
    if (result instanceof FileOpError) p.reject(result);
    else p.resolve(result);
  }
}
