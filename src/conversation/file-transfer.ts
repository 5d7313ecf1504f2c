/**
 * A download and an upload as they move between a client and a conversation's file service, a
 * chunk at a time: neither the daemon nor the service holds a whole file, and every chunk is a
 * request of its own to the service (so its deadline is about progress, not the whole transfer:
 * a slow client never ends the sandbox). The bridge drives them: it writes a download's chunks as
 * the client takes them (bridge/file-transfer.ts), and feeds an upload's bytes as they arrive,
 * pausing the request while the service is behind.
 */
import type { FileReader } from '../sandbox/files.js';
import { CHUNK_BYTES } from '../sandbox/file-protocol.js';
import { UnavailableError } from '../errors.js';

/** Bytes the daemon made whole (an archive of a directory), answered raw (not as JSON) by the bridge. */
export class FileBytes {
  constructor(
    readonly name: string,
    readonly bytes: Uint8Array,
  ) {}
}

/**
 * A file being downloaded: its name and size, then its bytes in chunks. Close it. `inline`: the
 * file is served to be shown where it is (a page, an image a page embeds), not saved as a download.
 */
export class FileStream {
  constructor(
    readonly name: string,
    private readonly reader: FileReader,
    readonly inline = false,
  ) {}

  /** The size the file had when it was opened: the response's length (a file that grows is cut there). */
  get size(): number {
    return this.reader.info.size;
  }

  /** The next bytes; empty at the end. A failure of the service is an UnavailableError. */
  async read(): Promise<Buffer> {
    return this.reader.read(CHUNK_BYTES).catch(() => {
      throw new UnavailableError("The conversation's files could not be read to the end (its sandbox stopped); try again.");
    });
  }

  close(): Promise<void> {
    return this.reader.close();
  }

  /** The whole file in one buffer of its size (tRPC answers it as base64), then closed. */
  async collect(): Promise<Buffer> {
    try {
      const out = Buffer.allocUnsafe(this.size);
      let at = 0;
      while (at < out.length) {
        const chunk = await this.read();
        if (chunk.length === 0) break;
        chunk.copy(out, at);
        at += chunk.length;
      }
      return out.subarray(0, at);
    } finally {
      await this.close();
    }
  }
}

/**
 * An upload's bytes as they arrive (the bridge `push`es them), read by the side channels in chunks
 * of up to CHUNK_BYTES. Holds at most `highWater` bytes (plus one arriving chunk): beyond it, the
 * producer is told to pause until the reader has taken half of them. A producer's failure (a body
 * over its limits, a form without the file) is thrown to the reader as the error it passed.
 */
export class UploadSource {
  private readonly queue: Uint8Array[] = [];
  private queued = 0;
  private ended = false;
  private error: Error | null = null;
  private paused = false;
  private wake: (() => void) | null = null;

  constructor(
    private readonly flow: { pause(): void; resume(): void },
    private readonly highWater = 4 * CHUNK_BYTES,
  ) {}

  push(chunk: Uint8Array): void {
    if (this.ended || this.error || chunk.byteLength === 0) return;
    this.queue.push(chunk);
    this.queued += chunk.byteLength;
    if (this.queued > this.highWater && !this.paused) {
      this.paused = true;
      this.flow.pause();
    }
    this.notify();
  }

  end(): void {
    this.ended = true;
    this.notify();
  }

  fail(err: Error): void {
    if (this.ended || this.error) return;
    this.error = err;
    this.queue.length = 0;
    this.queued = 0;
    this.notify();
  }

  /** The next bytes (at most `max`, joined from what arrived), or null at the end. */
  async next(max = CHUNK_BYTES): Promise<Uint8Array | null> {
    for (;;) {
      if (this.error) throw this.error;
      if (this.queue.length > 0) break;
      if (this.ended) return null;
      await new Promise<void>((resolve) => (this.wake = resolve));
    }
    const parts: Uint8Array[] = [];
    let n = 0;
    while (this.queue.length > 0 && n < max) {
      const head = this.queue[0]!;
      const take = Math.min(head.byteLength, max - n);
      parts.push(take === head.byteLength ? head : head.subarray(0, take));
      if (take === head.byteLength) this.queue.shift();
      else this.queue[0] = head.subarray(take);
      n += take;
    }
    this.queued -= n;
    if (this.paused && this.queued <= this.highWater / 2) {
      this.paused = false;
      this.flow.resume();
    }
    return parts.length === 1 ? parts[0]! : Buffer.concat(parts, n);
  }

  private notify(): void {
    const w = this.wake;
    this.wake = null;
    w?.();
  }
}
