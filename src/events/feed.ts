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
}

export interface FeedOptions {
  /** Replay every event with seq > afterSeq. */
  afterSeq?: number | null;
  /** Replay every event with timestamp >= this. */
  sinceTimestamp?: string | null;
  /** Max events held while the replay runs or the transport is backpressured. */
  maxPending?: number;
  pageSize?: number;
}

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
    this.unsubscribe = bus.subscribe(conversationId, (ev) => this.onLive(ev));
    this.done = wantsReplay ? this.replay() : Promise.resolve();
  }

  private onLive(ev: EncodedEvent): void {
    if (this.closed) return;
    if (this.replaying) {
      this.pending.push(ev);
      if (this.pending.length > (this.opts.maxPending ?? 10000)) this.fail();
      return;
    }
    this.deliver(ev);
  }

  private deliver(ev: EncodedEvent): void {
    const seq = ev.seq;
    if (seq !== undefined && this.cursor !== null) {
      if (seq <= this.cursor) return;
      this.cursor = seq;
    }
    this.sink.send(ev);
  }

  private async replay(): Promise<void> {
    const pageSize = this.opts.pageSize ?? 256;
    let first = true;
    try {
      for (;;) {
        const page = await this.store.query(this.conversationId, {
          afterSeq: this.cursor,
          sinceTimestamp: first ? this.opts.sinceTimestamp : null,
          limit: pageSize,
        });
        first = false;
        if (this.closed) return;
        let backpressured = false;
        for (const e of page) {
          this.cursor = e.seq!;
          if (!this.sink.send(new EncodedEvent(e))) backpressured = true;
        }
        if (page.length < pageSize) break;
        if (backpressured) await this.sink.drained();
        if (this.closed) return;
      }
      // switch to live in this same turn: everything committed so far was read or is pending
      this.replaying = false;
      const held = this.pending;
      this.pending = [];
      for (const ev of held) this.deliver(ev);
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
