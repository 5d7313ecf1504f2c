/**
 * The event bus of a cluster node: the in-memory bus for this node's subscribers, plus NATS to
 * carry each committed event to the other nodes (latency), plus the store to make up for what
 * NATS did not deliver (correctness).
 *
 * Each node publishes the events it committed, in its commit order, on `<prefix>.ev.<conversation>`
 * and subscribes to that subject while it has subscribers of the conversation. Events of two
 * nodes can arrive out of seq order: a subscriber's feed (src/events/feed.ts) reads any gap from
 * the store. NATS core delivers at most once, so a message published while a node was cut from
 * NATS is lost: a poll compares the store's last seq of every subscribed conversation with the
 * last one this node delivered and publishes locally what it missed (every second while
 * connected, for events committed more than a poll ago; four times a second while disconnected;
 * at once on reconnection). Feeds drop what they already have, so a duplicate costs nothing.
 */
import { connect, type NatsConnection, type Subscription } from '@nats-io/transport-node';
import type { Logger } from 'pino';
import { EventBus, type Listener } from '../events/bus.js';
import { EncodedEvent, type ParleyEvent } from '../events/types.js';
import type { EventQuery } from '../store/types.js';

/** What the bus reads from the store to catch up. */
interface CatchUpSource {
  lastSeqs(ids: string[]): Promise<Map<string, number>>;
  query(conversationId: string, q: EventQuery): Promise<ParleyEvent[]>;
}

interface ClusterBusOptions {
  url: string;
  /** Subjects start with this (default `parley`): clusters sharing a NATS server keep apart. */
  prefix: string;
  nodeId: string;
  log: Logger;
  /** Poll interval while connected (default 1000 ms). */
  pollMs?: number;
  /** Poll interval while NATS is unreachable (default 250 ms). */
  disconnectedPollMs?: number;
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();

export class ClusterBus extends EventBus {
  private subs = new Map<string, Subscription>();
  /** Per subscribed conversation: the highest seq handed to this node's subscribers. */
  private seen = new Map<string, number>();
  /** Per subscribed conversation: the store's last seq at the previous poll. */
  private storeSeq = new Map<string, number>();
  private connected = true;
  private timer: NodeJS.Timeout | null = null;
  private polling = false;
  private closed = false;
  private deletedListeners: ((conversationId: string) => void)[] = [];

  private constructor(
    readonly nc: NatsConnection,
    private readonly store: CatchUpSource,
    private readonly opts: ClusterBusOptions,
  ) {
    super();
  }

  /** Connects to NATS (fails when it cannot be reached) and starts the catch-up poll. */
  static async connect(store: CatchUpSource, opts: ClusterBusOptions): Promise<ClusterBus> {
    const nc = await connect({
      servers: opts.url.split(',').map((s) => s.trim()),
      name: `parley-${opts.nodeId}`,
      // this node delivers its own events locally; NATS need not send them back
      noEcho: true,
      maxReconnectAttempts: -1,
      reconnectTimeWait: 500,
      pingInterval: 5000,
      timeout: 5000,
    });
    const bus = new ClusterBus(nc, store, opts);
    bus.start();
    return bus;
  }

  private subject(kind: 'ev' | 'deleted', conversationId?: string): string {
    return conversationId === undefined ? `${this.opts.prefix}.${kind}` : `${this.opts.prefix}.${kind}.${conversationId}`;
  }

  private start(): void {
    this.nc.subscribe(this.subject('deleted'), {
      callback: (err, msg) => {
        if (err) return;
        const id = decoder.decode(msg.data);
        this.endLocally(id);
        for (const l of this.deletedListeners) l(id);
      },
    });
    void (async () => {
      for await (const s of this.nc.status()) {
        if (s.type === 'disconnect' || s.type === 'reconnecting') {
          if (this.connected) this.opts.log.warn({ nats: this.opts.url }, 'NATS unreachable: live events of other nodes now come from PostgreSQL');
          this.connected = false;
          this.schedule(0);
        } else if (s.type === 'reconnect') {
          this.connected = true;
          this.opts.log.info('NATS reachable again');
          this.schedule(0);
        }
      }
    })().catch(() => {});
    this.schedule(this.opts.pollMs ?? 1000);
  }

  override subscribe(conversationId: string, listener: Listener, onEnd?: () => void): () => void {
    const unsubscribe = super.subscribe(conversationId, listener, onEnd);
    if (!this.subs.has(conversationId) && !this.closed) {
      // What this node has delivered starts at the store's last seq now: a new subscriber reads
      // the store after subscribing, so it has everything up to here; the poll brings what
      // comes later and NATS missed. Issued before the subscriber's own read.
      this.store.lastSeqs([conversationId]).then(
        (m) => this.subs.has(conversationId) && this.seen.set(conversationId, Math.max(this.seen.get(conversationId) ?? 0, m.get(conversationId) ?? 0)),
        () => {},
      );
      this.subs.set(
        conversationId,
        this.nc.subscribe(this.subject('ev', conversationId), {
          callback: (err, msg) => {
            if (err) return;
            const text = decoder.decode(msg.data);
            this.deliver(conversationId, new EncodedEvent(JSON.parse(text) as ParleyEvent, text));
          },
        }),
      );
    }
    return () => {
      unsubscribe();
      if (this.subscriberCount(conversationId) === 0) this.forget(conversationId);
    };
  }

  private forget(conversationId: string): void {
    this.subs.get(conversationId)?.unsubscribe();
    this.subs.delete(conversationId);
    this.seen.delete(conversationId);
    this.storeSeq.delete(conversationId);
  }

  /** An event this node committed (or a live-only one): its subscribers here, then the other nodes. */
  override publish(conversationId: string, ev: EncodedEvent): void {
    this.deliver(conversationId, ev);
    if (this.closed) return;
    try {
      this.nc.publish(this.subject('ev', conversationId), encoder.encode(ev.json));
    } catch {
      // closed or draining: the other nodes read it from the store
    }
  }

  private deliver(conversationId: string, ev: EncodedEvent): void {
    const seq = ev.seq;
    if (seq !== undefined && this.subs.has(conversationId) && seq > (this.seen.get(conversationId) ?? 0)) this.seen.set(conversationId, seq);
    super.publish(conversationId, ev);
  }

  /** The conversation was deleted here: subscribers here and on every other node are closed. */
  override end(conversationId: string): void {
    this.endLocally(conversationId);
    if (this.closed) return;
    try {
      this.nc.publish(this.subject('deleted'), encoder.encode(conversationId));
    } catch {
      // NATS is down: other nodes answer 404 from the store; their subscribers stay open until they reconnect
    }
  }

  private endLocally(conversationId: string): void {
    super.end(conversationId);
    this.forget(conversationId);
  }

  /** Called with the id of each conversation another node deleted. */
  onRemoteDelete(listener: (conversationId: string) => void): void {
    this.deletedListeners.push(listener);
  }

  private schedule(ms: number): void {
    if (this.closed) return;
    if (this.timer) clearTimeout(this.timer);
    this.timer = setTimeout(() => void this.poll(), ms);
    this.timer.unref();
  }

  /** Publishes locally the committed events this node's subscribers may have missed. */
  private async poll(): Promise<void> {
    if (this.polling || this.closed) return;
    this.polling = true;
    const force = !this.connected;
    try {
      const ids = [...this.subscribed()];
      const last = await this.store.lastSeqs(ids);
      for (const id of ids) {
        const storeSeq = last.get(id) ?? 0;
        const seen = this.seen.get(id);
        const previous = this.storeSeq.get(id);
        this.storeSeq.set(id, storeSeq);
        if (seen === undefined) {
          // the read at subscription failed (the store was unreachable): start from here
          this.seen.set(id, storeSeq);
          continue;
        }
        // connected, NATS had a whole interval to bring what was committed by the previous poll
        const due = force ? storeSeq : Math.min(storeSeq, previous ?? 0);
        if (due > seen) await this.catchUp(id, seen);
      }
    } catch (err) {
      this.opts.log.debug({ err: String(err) }, 'cluster bus catch-up failed; next poll tries again');
    } finally {
      this.polling = false;
      this.schedule(this.connected ? (this.opts.pollMs ?? 1000) : (this.opts.disconnectedPollMs ?? 250));
    }
  }

  private async catchUp(conversationId: string, after: number): Promise<void> {
    for (let cursor = after; ; ) {
      const page = await this.store.query(conversationId, { afterSeq: cursor, limit: 256 });
      if (!this.subs.has(conversationId)) return;
      for (const e of page) {
        cursor = e.seq!;
        this.deliver(conversationId, new EncodedEvent(e));
      }
      if (page.length < 256) return;
    }
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.timer) clearTimeout(this.timer);
    await this.nc.drain().catch(() => {});
  }
}
