import crypto from 'node:crypto';

let lastMs = 0;
let seq = 0;
/** Random bytes drawn in bulk: one syscall per 256 ids instead of one per id. */
let pool = Buffer.alloc(0);
let poolAt = 0;
function random16(): Buffer {
  if (poolAt + 16 > pool.length) {
    pool = crypto.randomBytes(4096);
    poolAt = 0;
  }
  const b = Buffer.from(pool.subarray(poolAt, poolAt + 16));
  poolAt += 16;
  return b;
}

/**
 * A UUIDv7 (RFC 9562): 48-bit Unix milliseconds, then a 12-bit counter within the millisecond, then
 * random bits. Time-ordered ids keep the event-id index appending at its tail instead of touching
 * a random page per insert.
 */
export function uuidv7(now = Date.now()): string {
  if (now <= lastMs) {
    seq = (seq + 1) & 0xfff;
    if (seq === 0) lastMs += 1;
    now = lastMs;
  } else {
    lastMs = now;
    seq = random16().readUInt16BE(0) & 0x3ff;
  }
  const b = random16();
  b.writeUIntBE(now, 0, 6);
  b[6] = 0x70 | (seq >> 8);
  b[7] = seq & 0xff;
  b[8] = 0x80 | (b[8]! & 0x3f);
  const h = b.toString('hex');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}
