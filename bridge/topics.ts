/**
 * Live fan-out in native code: one uWS topic per conversation and encoding (`j:<id>`, `m:<id>`),
 * fed by one EventFeed per conversation (src/events/feed.ts: seq order, gaps of a cluster read from
 * the store), so a committed event is one `app.publish` per encoding that has subscribers, and uWS
 * copies it to every subscribed socket, corked, one write per socket per loop iteration; no JS runs
 * per subscriber per event.
 *
 * A socket replays what it missed by itself (socket.ts), then hands over to the topic with no gap
 * and no duplicate. `topic.seq` is the last seq published to the topic; a member that has sent
 * every event up to `cursor` offers itself (`offer`):
 *  - cursor = seq: it subscribes now, in the same turn: uWS gives a subscriber only what is
 *    published after its subscription, and the next event the topic publishes is seq + 1;
 *  - cursor < seq: it is behind: it reads the store again (every seq up to the topic's is committed);
 *  - cursor > seq: it read the store ahead of the topic (a commit seen by the store before its
 *    publication reached this node): it waits, and the topic subscribes it right after publishing
 *    its cursor.
 * Direct sends on a subscribed socket (the replay before, error frames after) keep their place:
 * uWS writes a socket's pending topic messages before any direct send.
 *
 * Coalescing, under load only: uWS writes a subscriber's topic messages once per event-loop iteration,
 * and under load an iteration commits about one event per conversation, so each event cost every
 * subscriber a send() of its own. While the daemon publishes many events (BUSY_EVENTS in the last
 * COALESCE_MS), a topic publishes at once only when its last publication is at least COALESCE_MS old;
 * events that come sooner are held, in seq order, and published together when the window ends (one
 * timer for every topic), so a busy conversation costs its subscribers one write per window. Otherwise
 * (a daemon serving a few turns) every event goes out at once: the window would be the turn's latency. `seq`
 * is what has been published, so the hand-off below is unchanged: a member whose cursor is a held
 * event's waits for its publication like any member ahead of the topic.
 *
 * Back-pressure: uWS's own limit (maxBackpressure) would drop a frame silently and then send the
 * next one (a gap the client cannot see), so it is off (bridge/ws.ts) and the limit is enforced here:
 * every `checkEvery` bytes published to a topic, each live member whose buffer is over
 * WS_MAX_BUFFERED_BYTES is closed with 1013 (the client resumes with after_seq). What uWS holds for
 * a socket that does not read is then at most that limit plus `checkEvery` plus one loop iteration's
 * publications, and nothing is ever dropped.
 */
import type { EventFeed, FeedSink } from '../src/events/feed.js';
import type { EncodedEvent } from '../src/events/types.js';
import type { TemplatedApp, WebSocket } from './uws.js';

/** What a topic needs of a socket. */
export interface TopicMember {
  readonly ws: WebSocket<unknown>;
  readonly binary: boolean;
  /** Every event with seq <= cursor has been sent to it. */
  readonly cursor: number;
  /** The topic subscribed it: it is live. */
  subscribed(): void;
  /** Its buffer passed the limit: close it with 1013. */
  tooSlow(): void;
  /** The conversation was deleted: close it with 4004. */
  ended(): void;
}

/**
 * The coalescing window (above): how long a topic's events may be held after its last publication.
 * Load test, sendto() per committed request (one is the response): 1.81 without, 1.36-1.42 with 4 ms,
 * 1.13-1.14 with 10 ms; 10 ms is below what a person watching the stream can tell.
 */
const COALESCE_MS = 10;

/**
 * Events the whole daemon must have published in the last window for any topic to hold one: the
 * window is a cost of latency paid only under load. A text turn publishes ~6 events in ~5 ms (each
 * goes out at once: holding the last one would add the window to the turn, ~5 → ~14 ms); the load
 * test's 50 conversations publish ~200 per window.
 */
const BUSY_EVENTS = 40;

/** How a topic follows its conversation: `core.events.follow`. */
export type Follow = (conversationId: string, sink: FeedSink, opts: { afterSeq: number }) => EventFeed;

export class LiveTopics {
  private readonly topics = new Map<string, LiveTopic>();
  /** Topics holding events until the window's end, and the one timer that publishes them. */
  private readonly holding = new Set<LiveTopic>();
  private timer: NodeJS.Timeout | null = null;

  constructor(
    private readonly app: TemplatedApp,
    private readonly follow: Follow,
    /** WS_MAX_BUFFERED_BYTES: a live member past it is closed (1013). */
    private readonly maxBufferedBytes: number,
    /** The coalescing window (a test's may be longer). */
    readonly coalesceMs = COALESCE_MS,
    /** Events per window above which topics coalesce (a test's may be 0: always). */
    private readonly busyEvents = BUSY_EVENTS,
  ) {}

  /** The current window (of the whole daemon's publications): when it began and what it counted; the last window's count. */
  private windowStart = Number.NEGATIVE_INFINITY;
  private inWindow = 0;
  private lastWindow = 0;

  /** Counts one event about to be published; whether the daemon is busy enough for topics to coalesce. */
  busy(now: number): boolean {
    if (now - this.windowStart >= this.coalesceMs) {
      // a window with nothing in between counts as quiet
      this.lastWindow = now - this.windowStart < 2 * this.coalesceMs ? this.inWindow : 0;
      this.inWindow = 0;
      this.windowStart = now;
    }
    this.inWindow += 1;
    return this.lastWindow >= this.busyEvents;
  }

  /** The conversation's topic, created (following from `startSeq`, a seq already committed) if it has none. */
  join(conversationId: string, member: TopicMember, startSeq: number): LiveTopic {
    let topic = this.topics.get(conversationId);
    if (!topic) {
      topic = new LiveTopic(this.app, conversationId, startSeq, this.maxBufferedBytes, this, () => this.topics.delete(conversationId));
      this.topics.set(conversationId, topic);
      topic.start(this.follow);
    }
    topic.members.add(member);
    return topic;
  }

  /** A topic holds events: they are published when the window ends. */
  hold(topic: LiveTopic): void {
    this.holding.add(topic);
    this.timer ??= setTimeout(() => this.release(), this.coalesceMs);
  }

  private release(): void {
    this.timer = null;
    const due = [...this.holding];
    this.holding.clear();
    for (const t of due) t.release();
  }
}

export class LiveTopic {
  /** Every socket of the conversation from its start (replaying, waiting or live) until it closes. */
  readonly members = new Set<TopicMember>();
  private readonly live = new Set<TopicMember>();
  /** Members waiting for the topic to publish their cursor. */
  private readonly waiting = new Map<number, TopicMember[]>();
  private readonly jsonTopic: string;
  private readonly packTopic: string;
  private jsonLive = 0;
  private packLive = 0;
  private sinceCheck = 0;
  private readonly checkEvery: number;
  private feed: EventFeed | null = null;
  private closed = false;
  /** Events held until the window ends (seq order), and when the last publication was. */
  private held: EncodedEvent[] = [];
  private lastPublished = Number.NEGATIVE_INFINITY;

  constructor(
    private readonly app: TemplatedApp,
    private readonly conversationId: string,
    /** The last seq published to the topic (its start: a seq already committed). */
    public seq: number,
    private readonly maxBufferedBytes: number,
    private readonly window: { readonly coalesceMs: number; busy(now: number): boolean; hold(topic: LiveTopic): void },
    private readonly onClosed: () => void,
  ) {
    this.jsonTopic = `j:${conversationId}`;
    this.packTopic = `m:${conversationId}`;
    this.checkEvery = Math.max(16 * 1024, Math.floor(maxBufferedBytes / 4));
  }

  start(follow: Follow): void {
    this.feed = follow(
      this.conversationId,
      {
        send: (ev) => this.take(ev),
        drained: () => Promise.resolve(),
        // held too many events while reading a gap, or the store failed: every member resumes
        overflow: () => this.close((m) => m.tooSlow()),
        ended: () => this.close((m) => m.ended()),
      },
      { afterSeq: this.seq },
    );
  }

  /**
   * A member has sent every event up to its cursor: `live` (subscribed now), `waiting` (it will be
   * when the topic publishes its cursor) or `behind` (it must read the store up to `seq` first).
   */
  offer(m: TopicMember): 'live' | 'waiting' | 'behind' {
    if (this.closed) return 'waiting'; // its close is on its way
    if (m.cursor < this.seq) return 'behind';
    if (m.cursor === this.seq) {
      this.subscribe(m);
      return 'live';
    }
    const list = this.waiting.get(m.cursor);
    if (list) list.push(m);
    else this.waiting.set(m.cursor, [m]);
    return 'waiting';
  }

  /** A member closed. */
  leave(m: TopicMember): void {
    this.members.delete(m);
    if (this.live.delete(m)) {
      if (m.binary) this.packLive -= 1;
      else this.jsonLive -= 1;
    }
    for (const [seq, list] of this.waiting) {
      const i = list.indexOf(m);
      if (i < 0) continue;
      list.splice(i, 1);
      if (list.length === 0) this.waiting.delete(seq);
    }
    if (this.members.size === 0) this.close(() => {});
  }

  private subscribe(m: TopicMember): void {
    m.ws.subscribe(m.binary ? this.packTopic : this.jsonTopic);
    this.live.add(m);
    if (m.binary) this.packLive += 1;
    else this.jsonLive += 1;
    m.subscribed();
  }

  /** One committed event (or a live-only one), in seq order: published now, or held until the window ends (above). */
  private take(ev: EncodedEvent): boolean {
    if (this.closed) return true;
    if (this.held.length > 0) {
      this.held.push(ev);
      return true;
    }
    const now = performance.now();
    if (!this.window.busy(now) || now - this.lastPublished >= this.window.coalesceMs) {
      this.lastPublished = now;
      this.publish(ev);
    } else {
      this.held.push(ev);
      this.window.hold(this);
    }
    return true;
  }

  /** The window ended: the held events go out, in order. */
  release(): void {
    const held = this.held;
    this.held = [];
    this.lastPublished = performance.now();
    for (const ev of held) {
      if (this.closed) return;
      this.publish(ev);
    }
  }

  /** One event: one publish per encoding with subscribers. */
  private publish(ev: EncodedEvent): void {
    let bytes = 0;
    if (this.jsonLive > 0) {
      const json = ev.json;
      this.app.publish(this.jsonTopic, json, false);
      bytes = json.length;
    }
    if (this.packLive > 0) {
      const packed = ev.msgpack;
      this.app.publish(this.packTopic, packed, true);
      bytes = Math.max(bytes, packed.length);
    }
    const seq = ev.seq;
    if (seq !== undefined) {
      this.seq = seq;
      const ready = this.waiting.get(seq);
      if (ready) {
        this.waiting.delete(seq);
        for (const m of ready) this.subscribe(m);
      }
    }
    this.sinceCheck += bytes;
    if (this.sinceCheck >= this.checkEvery) {
      this.sinceCheck = 0;
      const slow: TopicMember[] = [];
      for (const m of this.live) if (m.ws.getBufferedAmount() > this.maxBufferedBytes) slow.push(m);
      for (const m of slow) m.tooSlow();
    }
  }

  private close(each: (m: TopicMember) => void): void {
    if (this.closed) return;
    // events held are committed before whatever ends the topic: they go out before its members close
    if (this.held.length > 0) this.release();
    if (this.closed) return; // (the last member left meanwhile)
    this.closed = true;
    this.feed?.close();
    this.onClosed();
    for (const m of [...this.members]) each(m);
  }
}
