/**
 * Event search with the filters the store does not index: `body` (case-insensitive text of message
 * events) and a timestamp window. The store's own filters (kind, source, seq) narrow the scan; the
 * rest is checked here page by page, so every store (SQLite, PostgreSQL) serves it unchanged. Not
 * the hot path: a search with these filters reads the conversation's events up to the page it fills.
 */
import { seqPageStart, type EventLog } from '../events/log.js';
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

function predicate(q: EventFilters): (e: ParleyEvent) => boolean {
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

export async function searchEventsFiltered(
  events: EventLog,
  id: string,
  q: EventFilters & { page_id?: string | null; limit: number; sort_order: 'TIMESTAMP' | 'TIMESTAMP_DESC' },
): Promise<{ items: ParleyEvent[]; next_page_id: string | null }> {
  const desc = q.sort_order === 'TIMESTAMP_DESC';
  const start = seqPageStart(q.page_id);
  const keep = predicate(q);
  const out: ParleyEvent[] = [];
  let after = desc ? (q.after_seq ?? null) : Math.max(q.after_seq ?? 0, start !== null ? start - 1 : 0);
  let before = desc && start !== null ? start + 1 : null;
  for (;;) {
    const page = await events.query(id, { kind: q.kind, source: q.source, desc, limit: SCAN, afterSeq: after, beforeSeq: before });
    for (const e of page) {
      if (!keep(e)) continue;
      out.push(e);
      if (out.length > q.limit) return { items: out.slice(0, q.limit), next_page_id: String(out[q.limit]!.seq) };
    }
    if (page.length < SCAN) return { items: out, next_page_id: null };
    const last = page[page.length - 1]!.seq!;
    if (desc) before = last;
    else after = last;
  }
}

export async function countEventsFiltered(events: EventLog, id: string, q: EventFilters): Promise<number> {
  const keep = predicate(q);
  let n = 0;
  let after = q.after_seq ?? 0;
  for (;;) {
    const page = await events.query(id, { kind: q.kind, source: q.source, limit: SCAN, afterSeq: after });
    for (const e of page) if (keep(e)) n++;
    if (page.length < SCAN) return n;
    after = page[page.length - 1]!.seq!;
  }
}
