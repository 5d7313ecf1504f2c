/**
 * Where a subscriber's stream starts: the one reading of the resume parameters, for the WebSocket
 * (`after_seq`, `resend_mode=all|since`, `resend_all`, `after_timestamp`, from its query string) and
 * the tRPC `events` subscription (`after_seq`, and `lastEventId`, which tRPC's client sends when it
 * resubscribes). A rule of the stream, not of a transport: both doors resume the same way.
 *
 * Precedence: `lastEventId` (a reconnecting client knows best), then `after_seq`, then "everything"
 * (`resend_mode=all` or `resend_all=true`), then `resend_mode=since` with `after_timestamp`;
 * otherwise live only. A malformed `after_seq` is ignored as before (the socket never refused one);
 * a malformed `after_timestamp` is reported (`invalid`) and the stream goes live only.
 */
import { isoTime } from '../iso-time.js';

/** What a subscriber asked for; every field as it arrived (query strings are strings, tRPC input numbers). */
export interface ResumeParams {
  after_seq?: number | string | null;
  lastEventId?: string | null;
  resend_mode?: string | null;
  resend_all?: string | boolean | null;
  after_timestamp?: string | null;
}

export type ResumePoint =
  /** Every event with seq > `seq` (0: everything), then live. */
  | { kind: 'after'; seq: number }
  /** Every event with timestamp >= `timestamp` (ISO 8601, normalised), then live. */
  | { kind: 'since'; timestamp: string }
  /** Live events only; `invalid` says why a parameter was ignored. */
  | { kind: 'live'; invalid?: string };

const DIGITS = /^\d+$/;

function seqOf(v: number | string | null | undefined): number | null {
  if (typeof v === 'number') return Number.isSafeInteger(v) && v >= 0 ? v : null;
  if (typeof v === 'string' && DIGITS.test(v)) {
    const n = Number(v);
    return Number.isSafeInteger(n) ? n : null;
  }
  return null;
}

export function resumePoint(p: ResumeParams): ResumePoint {
  const last = seqOf(p.lastEventId);
  if (last !== null) return { kind: 'after', seq: last };
  const after = seqOf(p.after_seq);
  if (after !== null) return { kind: 'after', seq: after };
  if (p.resend_mode === 'all' || p.resend_all === 'true' || p.resend_all === true) return { kind: 'after', seq: 0 };
  if (p.resend_mode === 'since' && p.after_timestamp) {
    const t = new Date(p.after_timestamp);
    if (Number.isNaN(t.getTime())) return { kind: 'live', invalid: 'after_timestamp is not an ISO 8601 timestamp' };
    return { kind: 'since', timestamp: isoTime(t.getTime()) };
  }
  return { kind: 'live' };
}
