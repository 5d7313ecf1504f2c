/**
 * Pages bounded by bytes as well as by count: twenty 8 MiB messages made one
 * `events/search?limit=100` a 168 MB response. A page stops once its events reach MAX_PAGE_BYTES
 * (always at least one event) and says where the next one starts.
 *
 * A page is read lazily, in store reads of at most READ_BYTES: a transport that streams it (REST)
 * holds one read's events at a time, however large the page and however slowly its client reads;
 * `collect()` gives the whole page (tRPC, which serialises its answers whole).
 */
import { eventJson, type ParleyEvent } from './types.js';
import type { EventQuery } from '../store/types.js';

/** A search page stops once its events' JSON reaches this many bytes. */
const MAX_PAGE_BYTES = 4 * 1024 * 1024;

/** One store read of a lazily read page stops once its events reach this many stored bytes (always one at least). */
const READ_BYTES = 256 * 1024;
/** And at most this many events. */
const READ_EVENTS = 500;

interface PageQuery {
  kind?: string | null;
  source?: string | null;
  desc: boolean;
  limit: number;
  /** Events with seq > afterSeq (ascending from there) ... */
  afterSeq: number | null;
  /** ... and seq < beforeSeq (descending from there). */
  beforeSeq: number | null;
  /** Filters the store does not index (event-search.ts). */
  keep?: (e: ParleyEvent) => boolean;
}

/** One page of a conversation's events, read on demand. */
export class EventPage {
  private after: number | null;
  private before: number | null;
  private count = 0;
  private bytes = 0;
  private done = false;
  /** The seq the next page starts at (known once `next()` returned null). */
  nextPageId: string | null = null;

  constructor(
    private readonly read: (q: EventQuery) => Promise<ParleyEvent[]>,
    private readonly q: PageQuery,
  ) {
    this.after = q.afterSeq;
    this.before = q.beforeSeq;
  }

  /** The page's next events (one store read's worth), or null when the page is complete. */
  async next(): Promise<ParleyEvent[] | null> {
    while (!this.done) {
      const rows = await this.read({
        kind: this.q.kind,
        source: this.q.source,
        desc: this.q.desc,
        afterSeq: this.after,
        beforeSeq: this.before,
        limit: Math.min(READ_EVENTS, this.q.keep ? READ_EVENTS : this.q.limit - this.count + 1),
        maxBytes: READ_BYTES,
        keepJson: true,
      });
      // the store stops early at READ_BYTES: only an empty read says the log is exhausted
      if (rows.length === 0) {
        this.done = true;
        return null;
      }
      const last = rows[rows.length - 1]!.seq!;
      if (this.q.desc) this.before = last;
      else this.after = last;
      const out: ParleyEvent[] = [];
      for (const e of rows) {
        if (this.q.keep && !this.q.keep(e)) continue;
        if (this.count >= this.q.limit || (this.count > 0 && this.bytes >= MAX_PAGE_BYTES)) {
          this.nextPageId = String(e.seq);
          this.done = true;
          break;
        }
        out.push(e);
        this.count += 1;
        this.bytes += eventJson(e).length;
      }
      if (out.length) return out;
    }
    return null;
  }

  /** The whole page at once. */
  async collect(): Promise<{ items: ParleyEvent[]; next_page_id: string | null }> {
    const items: ParleyEvent[] = [];
    for (let part = await this.next(); part; part = await this.next()) items.push(...part);
    return { items, next_page_id: this.nextPageId };
  }
}
