import crypto from 'node:crypto';

let lastMs = 0;
let seq = 0;
/** The hex of `lastMs`, dashed as the id's first 13 characters (`xxxxxxxx-xxxx-`). */
let msHex = '';
/**
 * Random hex digits drawn in bulk: one syscall per ~200 ids, and no Buffer or hex conversion per
 * id (this runs once per event on the hot path).
 */
let pool = '';
let poolAt = 0;
function randomHex(n: number): string {
  if (poolAt + n > pool.length) {
    pool = crypto.randomBytes(2048).toString('hex');
    poolAt = 0;
  }
  poolAt += n;
  return pool.slice(poolAt - n, poolAt);
}

const VARIANT = '89ab';

/**
 * A UUIDv7 (RFC 9562): 48-bit Unix milliseconds, then a 12-bit counter within the millisecond, then
 * random bits. Time-ordered ids keep the event-id index appending at its tail instead of touching
 * a random page per insert.
 */
export function uuidv7(now = Date.now()): string {
  if (now <= lastMs) {
    seq = (seq + 1) & 0xfff;
    if (seq === 0) {
      lastMs += 1;
      msHex = '';
    }
  } else {
    lastMs = now;
    msHex = '';
    seq = parseInt(randomHex(3), 16) & 0x3ff; // a random start leaves room to count up within the millisecond
  }
  if (msHex === '') {
    const h = lastMs.toString(16).padStart(12, '0');
    msHex = `${h.slice(0, 8)}-${h.slice(8, 12)}-`;
  }
  // version 7 and the counter; the variant (10xx) and 62 random bits
  const r = randomHex(16);
  return `${msHex}7${(seq | 0x1000).toString(16).slice(1)}-${VARIANT[parseInt(r[0]!, 16) & 3]}${r.slice(1, 4)}-${r.slice(4, 16)}`;
}
