/**
 * One subscriber's view of a conversation: an optional replay from the log followed by live
 * events, in seq order, with no gap and no duplicate even while events are appended during the
 * replay. The listener is registered before the first read; live events that arrive meanwhile
 * are buffered and released after the replay, skipping any seq the replay already delivered.
 */
import type { EventBus } from './bus.js';
import { EncodedEvent } from './types.js';
import type { EventStore } from '../store/types.js';

export interface FeedSink {
  /** Deliver one frame. Return false when the transport is over its high-water mark. */
  send(ev: EncodedEvent): boolean;
  /** Resolves when the transport has drained below its mark. */
  drained(): Promise<void>;
  /** The subscriber fell too far behind: the transport must close (1013); the client resumes with after_seq. */
  overflow(): void;
  /** The conversation was deleted (on this node or another): the transport must close. */
  ended?(): void;
}

export interface FeedOptions {
  /** Replay every event with seq > afterSeq. */
  afterSeq?: number | null;
  /** Replay every event with timestamp >= this. */
  sinceTimestamp?: string | null;
  /** Max events held while the replay runs or the transport is backpressured. */
  maxPending?: number;
  pageSize?: number;
  /** A replay read stops once its events reach this many stored bytes. */
  pageBytes?: number;
}

const REPLAY_PAGE_BYTES = 1024 * 1024;

export class EventFeed {
  private cursor: number | null;
  private replaying: boolean;
  private pending: EncodedEvent[] = [];
  private unsubscribe: () => void;
  private closed = false;
  readonly done: Promise<void>;

  constructor(
    bus: EventBus,
    private readonly store: EventStore,
    private readonly conversationId: string,
    private readonly sink: FeedSink,
    private readonly opts: FeedOptions = {},
  ) {
    const wantsReplay = opts.afterSeq != null || opts.sinceTimestamp != null;
    this.cursor = opts.afterSeq ?? (opts.sinceTimestamp != null ? 0 : null);
    this.replaying = wantsReplay;
    this.unsubscribe = bus.subscribe(
      conversationId,
      (ev) => this.onLive(ev),
      () => this.ended(),
    );
    this.done = wantsReplay ? this.replay(opts.sinceTimestamp ?? null) : Promise.resolve();
  }

  private onLive(ev: EncodedEvent): void {
    if (this.closed) return;
    if (this.replaying) {
      this.pending.push(ev);
      if (this.pending.length > (this.opts.maxPending ?? 10000)) this.fail();
      return;
    }
    const seq = ev.seq;
    if (seq !== undefined && this.cursor !== null && seq > this.cursor + 1) {
      // Another node's event overtook ones committed before it (each node publishes its own
      // commits): every seq below a committed one is committed too, so the gap is read from the store.
      this.replaying = true;
      this.pending.push(ev);
      void this.replay(null);
      return;
    }
    this.deliver(ev);
  }

  private deliver(ev: EncodedEvent): void {
    const seq = ev.seq;
    if (seq !== undefined) {
      if (this.cursor !== null && seq <= this.cursor) return;
      this.cursor = seq;
    }
    this.sink.send(ev);
  }

  private ended(): void {
    if (this.closed) return;
    this.close();
    if (this.sink.ended) this.sink.ended();
    else this.sink.overflow();
  }

  /** Sends every stored event after the cursor (the first page from `since` when given), then the live ones held meanwhile. */
  private async replay(since: string | null): Promise<void> {
    const pageSize = this.opts.pageSize ?? 256;
    let first = true;
    try {
      // a replay from a timestamp starts at the log's end as it is now: when no stored event is that
      // recent, the next live one (a later seq) is not a gap to read from seq 0
      const end = since !== null ? await this.store.lastSeq(this.conversationId) : null;
      for (;;) {
        const page = await this.store.query(this.conversationId, {
          afterSeq: this.cursor,
          sinceTimestamp: first ? since : null,
          limit: pageSize,
          // a page of large events is read and sent in parts: memory stays bounded by bytes
          maxBytes: this.opts.pageBytes ?? REPLAY_PAGE_BYTES,
          keepJson: true,
        });
        if (this.closed) return;
        if (first && page.length === 0 && end !== null) this.cursor = Math.max(this.cursor ?? 0, end);
        first = false;
        if (page.length === 0) break;
        let backpressured = false;
        for (const e of page) {
          this.cursor = e.seq!;
          // stop at the transport's high-water mark; the rest of the page is read again after the drain
          if (!this.sink.send(new EncodedEvent(e))) {
            backpressured = true;
            break;
          }
        }
        if (backpressured) await this.sink.drained();
        if (this.closed) return;
      }
      // switch to live in this same turn: everything committed so far was read or is pending
      this.replaying = false;
      const held = this.pending;
      this.pending = [];
      for (const ev of held) this.onLive(ev); // a gap among them (events of several nodes) starts another read
    } catch {
      this.fail();
    }
  }

  private fail(): void {
    if (this.closed) return;
    this.close();
    this.sink.overflow();
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.pending = [];
    this.unsubscribe();
  }
}
