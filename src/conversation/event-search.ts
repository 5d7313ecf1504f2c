/**
 * Event search with the filters the store does not index: `body` (case-insensitive text of message
 * events) and a timestamp window. The store's own filters (kind, source, seq) narrow the scan; the
 * rest is checked here (EventLog.page reads in byte-bounded parts and applies it), so every store
 * (SQLite, PostgreSQL) serves it unchanged. Not the hot path: a search with these filters reads the
 * conversation's events up to the page it fills.
 */
import type { EventLog } from '../events/log.js';
import type { ParleyEvent } from '../events/types.js';

interface EventFilters {
  kind?: string | null;
  source?: string | null;
  after_seq?: number | null;
  body?: string | null;
  timestamp__gte?: string | null;
  timestamp__lt?: string | null;
}

export const hasExtraFilters = (q: EventFilters) => !!(q.body || q.timestamp__gte || q.timestamp__lt);

/** A timestamp without an offset is UTC (as the server writes them). */
const instant = (t: string) => Date.parse(/(?:Z|[+-]\d\d:?\d\d)$/i.test(t) ? t : `${t}Z`);

/** The filters the store does not index, as a predicate (EventLog.page's `keep`). */
export function eventPredicate(q: EventFilters): (e: ParleyEvent) => boolean {
  const needle = q.body?.toLowerCase();
  const gte = q.timestamp__gte ? instant(q.timestamp__gte) : null;
  const lt = q.timestamp__lt ? instant(q.timestamp__lt) : null;
  return (e) => {
    if (gte !== null || lt !== null) {
      const t = Date.parse(e.timestamp);
      if (gte !== null && t < gte) return false;
      if (lt !== null && t >= lt) return false;
    }
    if (needle !== undefined) {
      if (e.kind !== 'MessageEvent') return false;
      const text = e.llm_message.content.flatMap((c) => (c.type === 'text' ? [c.text] : [])).join('\n');
      if (!text.toLowerCase().includes(needle)) return false;
    }
    return true;
  };
}

const SCAN = 500;

export async function countEventsFiltered(events: EventLog, id: string, q: EventFilters): Promise<number> {
  const keep = eventPredicate(q);
  let n = 0;
  let after = q.after_seq ?? 0;
  for (;;) {
    const page = await events.query(id, { kind: q.kind, source: q.source, limit: SCAN, afterSeq: after });
    for (const e of page) if (keep(e)) n++;
    if (page.length < SCAN) return n;
    after = page[page.length - 1]!.seq!;
  }
}
