import crypto from 'node:crypto';
/**
 * Server WebSocket frames (unmasked, RFC 6455) parsed from the raw bytes of an upgrade response as
 * they arrive, for clients that read at their own pace (test/fuzz.test.ts, scripts/bench-memory-attacks.ts).
 * Keeps the first `keep` bytes of each frame's payload, as latin1 text.
 */
export class FrameReader {
  readonly frames: string[] = [];
  private buf: Buffer = Buffer.alloc(0);
  private handshake = false;
  private need = 0;
  private head = '';

  constructor(private readonly keep = 200) {}

  push(chunk: Buffer): void {
    this.buf = this.buf.length ? Buffer.concat([this.buf, chunk]) : chunk;
    if (!this.handshake) {
      const i = this.buf.indexOf('\r\n\r\n');
      if (i < 0) return;
      this.handshake = true;
      this.buf = this.buf.subarray(i + 4);
    }
    for (;;) {
      if (this.need > 0) {
        const take = Math.min(this.need, this.buf.length);
        if (this.head.length < this.keep) this.head += this.buf.subarray(0, Math.min(take, this.keep - this.head.length)).toString('latin1');
        this.need -= take;
        this.buf = this.buf.subarray(take);
        if (this.need === 0) this.frames.push(this.head), (this.head = '');
        if (!this.buf.length) return;
        continue;
      }
      if (this.buf.length < 2) return;
      let len = this.buf[1]! & 127;
      let off = 2;
      if (len === 126) {
        if (this.buf.length < 4) return;
        len = this.buf.readUInt16BE(2);
        off = 4;
      } else if (len === 127) {
        if (this.buf.length < 10) return;
        len = Number(this.buf.readBigUInt64BE(2));
        off = 10;
      }
      this.buf = this.buf.subarray(off);
      this.need = len;
      if (len === 0) this.frames.push('');
    }
  }
}

/** A masked client text frame (RFC 6455), for clients that must not read what they are sent. */
export function clientFrame(payload: Buffer): Buffer {
  const mask = crypto.randomBytes(4);
  const len = payload.length;
  const head =
    len < 126
      ? Buffer.from([0x81, 0x80 | len])
      : len < 65536
        ? Buffer.from([0x81, 0x80 | 126, len >> 8, len & 255])
        : Buffer.concat([Buffer.from([0x81, 0x80 | 127, 0, 0, 0, 0]), Buffer.from([len >>> 24, (len >>> 16) & 255, (len >>> 8) & 255, len & 255])]);
  const body = Buffer.from(payload);
  for (let i = 0; i < body.length; i++) body[i]! ^= mask[i & 3]!;
  return Buffer.concat([head, mask, body]);
}

/** `p`, or an error naming `what` after `ms`. */
export function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout;
  return Promise.race([p, new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`timed out waiting for ${what}`)), ms)))]).finally(() =>
    clearTimeout(timer),
  );
}
