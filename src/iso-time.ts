/**
 * UTC timestamps in the form of `Date.prototype.toISOString` (`2026-12-03T10:00:00.000Z`), built
 * from the UTC fields.
 *
 * Why not `toISOString`: V8's first call of it sets up ICU's host time zone (its rules and the zone
 * data they read, ~0.9 MiB of resident memory measured with /proc/<pid>/pagemap), though the
 * result is UTC; the `getUTC*` accessors do not. Every log line and every event carries a
 * timestamp, so with `toISOString` an idle daemon paid for a time zone it never uses.
 *
 * The text up to the second is kept from the last call: the fields are read once a second.
 */
let cachedSecond = Number.NaN;
let cachedPrefix = '';

/** The last instant of year 9999: later ones, and those before 1970, are left to toISOString. */
const LAST_FOUR_DIGIT_MS = Date.UTC(9999, 11, 31, 23, 59, 59, 999);

const two = (n: number) => (n < 10 ? `0${n}` : `${n}`);

export function isoTime(ms: number = Date.now()): string {
  // a Date's time value is the number's integer part, as toISOString sees it
  const t = Math.trunc(ms);
  if (!(t >= 0 && t <= LAST_FOUR_DIGIT_MS)) return new Date(ms).toISOString();
  const milli = t % 1000;
  const second = t - milli;
  if (second !== cachedSecond) {
    const d = new Date(second);
    const day = `${d.getUTCFullYear()}-${two(d.getUTCMonth() + 1)}-${two(d.getUTCDate())}`;
    cachedPrefix = `${day}T${two(d.getUTCHours())}:${two(d.getUTCMinutes())}:${two(d.getUTCSeconds())}.`;
    cachedSecond = second;
  }
  return `${cachedPrefix}${milli < 10 ? '00' : milli < 100 ? '0' : ''}${milli}Z`;
}
