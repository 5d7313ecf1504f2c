/**
 * A conversation's event log: the one way events are written (redacted, stored, then published
 * in seq order once committed), read (search, count, get, whole history) and followed (a feed:
 * replay from a seq, then live). Live-only events (streamed text, setup output) are published
 * without being stored.
 */
import crypto from 'node:crypto';
import { RequestValidationError } from '../errors.js';
import { metrics } from '../metrics.js';
import type { Redactor } from '../secrets/redact.js';
import type { EventQuery, EventStore } from '../store/types.js';
import type { EventBus } from './bus.js';
import { EventFeed, type FeedOptions, type FeedSink } from './feed.js';
import { EncodedEvent, type EventDraft, type ParleyEvent } from './types.js';
import { isoTime } from '../iso-time.js';
import { EventPage } from './page.js';
import { capEvent } from './cap.js';
import { mark, published as tracePublished, tracing } from './turn-trace.js';

const appended = metrics.eventsAppended.child();
const published = metrics.eventsPublished.child();

interface EventSearch {
  page_id?: string | null;
  limit: number;
  kind?: string | null;
  source?: string | null;
  sort_order: 'TIMESTAMP' | 'TIMESTAMP_DESC';
  after_seq?: number | null;
}

interface EventFilter {
  kind?: string | null;
  source?: string | null;
  after_seq?: number | null;
}

/** An event page id is the seq the page starts at; anything else is a 422. */
function seqPageStart(pageId: string | null | undefined): number | null {
  if (!pageId) return null;
  if (!/^\d+$/.test(pageId)) {
    throw new RequestValidationError([
      { type: 'value_error', loc: ['query', 'page_id'], msg: 'Value error, page_id is not a page id returned by this endpoint', input: pageId },
    ]);
  }
  return Number(pageId);
}

export class EventLog {
  /** When an event was last appended (server_info's idle time). */
  lastActivity = Date.now();

  constructor(
    private readonly store: EventStore,
    private readonly bus: EventBus,
    private readonly redactor: Redactor,
    /** MAX_EVENT_BYTES: every appended event's JSON is cut to this (src/events/cap.ts). */
    private readonly maxEventBytes = 2 * 1024 * 1024,
  ) {}

  /** The store reports each commit here: publish in seq order. */
  committed(conversationId: string, events: EncodedEvent[]): void {
    appended.inc(events.length);
    published.inc(events.length);
    for (const ev of events) this.bus.publish(conversationId, ev);
    if (tracing()) for (const ev of events) tracePublished(conversationId, ev.event);
  }

  /** Redact, bound by MAX_EVENT_BYTES, store (resolves once committed), publish. */
  append(conversationId: string, draft: EventDraft): Promise<ParleyEvent> {
    this.lastActivity = Date.now();
    if (tracing()) mark(conversationId, `append ${draft.kind}`);
    return this.store.append(conversationId, this.toStore(draft));
  }

  appendMany(conversationId: string, drafts: EventDraft[]): Promise<ParleyEvent[]> {
    this.lastActivity = Date.now();
    if (tracing()) mark(conversationId, `append ${drafts.map((d) => d.kind).join('+')}`);
    return this.store.appendMany(
      conversationId,
      drafts.map((d) => this.toStore(d)),
    );
  }

  /** A draft as it is stored: redacted and bounded by MAX_EVENT_BYTES (also for events stored with a new conversation's record). */
  toStore(draft: EventDraft): EventDraft {
    return capEvent(this.redactor.redactDeep(draft), this.maxEventBytes);
  }

  /** A live-only event (no seq, not stored), e.g. StreamingDeltaEvent. */
  publishTransient(conversationId: string, draft: EventDraft): void {
    const ev = { id: crypto.randomUUID(), timestamp: isoTime(), ...capEvent(this.redactor.redactDeep(draft), this.maxEventBytes) } as ParleyEvent;
    published.inc();
    this.bus.publish(conversationId, new EncodedEvent(ev));
  }

  /** Events with seq > afterSeq, oldest first, in pages read from the store. */
  async after(conversationId: string, afterSeq = 0): Promise<ParleyEvent[]> {
    const out: ParleyEvent[] = [];
    let after = afterSeq;
    for (;;) {
      const page = await this.store.query(conversationId, { afterSeq: after, limit: 1000 });
      out.push(...page);
      if (page.length < 1000) return out;
      after = page[page.length - 1]!.seq!;
    }
  }

  /** Whether a user message was committed after `afterSeq`. */
  async hasUserMessageAfter(conversationId: string, afterSeq: number): Promise<boolean> {
    return (await this.store.query(conversationId, { afterSeq, kind: 'MessageEvent', source: 'user', limit: 1 })).length > 0;
  }

  /** A store query as it is (the store's filters: kind, source, seq range, order). */
  query(conversationId: string, q: EventQuery): Promise<ParleyEvent[]> {
    return this.store.query(conversationId, q);
  }

  lastSeq(conversationId: string): Promise<number> {
    return this.store.lastSeq(conversationId);
  }

  /**
   * One page of the log, filtered (`keep`: filters the store does not index), read lazily in
   * byte-bounded store reads; `next_page_id` is the seq the next page starts at.
   */
  page(conversationId: string, q: EventSearch, keep?: (e: ParleyEvent) => boolean): EventPage {
    const desc = q.sort_order === 'TIMESTAMP_DESC';
    const start = seqPageStart(q.page_id);
    return new EventPage((sq) => this.store.query(conversationId, sq), {
      kind: q.kind,
      source: q.source,
      desc,
      limit: q.limit,
      afterSeq: desc ? (q.after_seq ?? null) : Math.max(q.after_seq ?? 0, start !== null ? start - 1 : 0),
      beforeSeq: desc && start !== null ? start + 1 : null,
      keep,
    });
  }

  /** The whole page at once. */
  search(conversationId: string, q: EventSearch) {
    return this.page(conversationId, q).collect();
  }

  count(conversationId: string, q: EventFilter): Promise<number> {
    return this.store.count(conversationId, { kind: q.kind, source: q.source, afterSeq: q.after_seq });
  }

  get(conversationId: string, eventId: string): Promise<ParleyEvent | null> {
    return this.store.get(conversationId, eventId);
  }

  /** The conversation was deleted: its subscribers are closed (on every node of a cluster). */
  end(conversationId: string): void {
    this.bus.end(conversationId);
  }

  /** Follow a conversation: replay (when asked) then live events, in seq order, into `sink`. */
  follow(conversationId: string, sink: FeedSink, opts?: FeedOptions): EventFeed {
    return new EventFeed(this.bus, this.store, conversationId, sink, opts);
  }
}
