/**
 * A conversation's events as the page holds them.
 *
 * The page holds one run of events without a hole, seqs `base + 1 .. lastSeq`. New events come
 * from `/sockets/events/{id}` (docs/api.md, "WebSocket": the `full_state` snapshot, then the replay after
 * `after_seq`, then live events in seq order). Every (re)connection asks for
 * `after_seq=lastSeq`, so a dropped socket resumes exactly where it stopped: an event at or below
 * lastSeq is a duplicate and dropped, one past lastSeq + 1 is a gap and the socket is opened
 * again from lastSeq (neither should happen).
 *
 * The history is read with the typed client (`searchEvents` by `after_seq`, pages of 100), newest page first:
 * the page shows the end of the conversation after one request, the socket opens after it, and
 * older pages (several at once) are put in front as they come. A browser takes each WebSocket
 * message through its network process one at a time (measured on the loaded 2-core machine:
 * 10,000 events replayed over the socket in 3–15 s in Chromium, the same as 100 pages in 1.6–3.3 s),
 * so the socket is kept for what is new.
 *
 * A reload resumes too: when the page goes away the events it holds from seq 1 are written to the
 * tab's sessionStorage (as many as fit a budget), read back on the next load and only what came
 * after them is read again.
 *
 * The key goes in the socket's first frame (`{"type":"auth"}`), not in its URL.
 */
import { ApiError, call, type ConversationInfo, type ExecutionStatus, keyRefused, type ParleyEvent, parley, sessionKey } from './api.js';

const CACHE_PREFIX = 'parley.events.';
/** Characters of events kept in sessionStorage (its quota is about 5 M characters an origin). */
const CACHE_BUDGET = 2_000_000;
const RETRY_MS = [250, 500, 1000, 2000, 4000];
/** events/search's largest page, and the pages read at once (a browser opens 6 connections to a host). */
const PAGE = 100;
const PAGES_AT_ONCE = 5;

export type StreamEnd = 'unauthorized' | 'not-found' | 'deleted' | null;

/** What changed since a listener's last call: events added at the end, or the whole run replaced (older events put in front). */
export type StreamChange = { reset: false; added: ParleyEvent[] } | { reset: true };

interface Cached {
  created_at: string;
  events: string[];
}

export class ConversationStream {
  /** The events held: seqs base + 1 .. lastSeq, without a hole. */
  events: ParleyEvent[] = [];
  /** The seq before the first event held (0 once the history is complete). */
  base = 0;
  info: ConversationInfo | null = null;
  status: ExecutionStatus | null = null;
  /** The agent's answer as it is streamed (StreamingDeltaEvent), until its event arrives. */
  streaming = '';
  /** Output of the repository's setup script while it runs (SetupOutputEvent). */
  setupOutput = '';
  connected = false;
  /** The newest page is in: the list can be shown. */
  shown = false;
  ended: StreamEnd = null;
  /** Last socket-level error (ServerErrorEvent), shown to the user. */
  serverError: string | null = null;
  /** Why the events before `base` will not come (a refusal, not a failure asked again): shown instead of the loading note. */
  olderError: string | null = null;

  private ws: WebSocket | null = null;
  private retries = 0;
  private timer: ReturnType<typeof setTimeout> | null = null;
  private closed = false;
  private scheduled = false;
  private readonly listeners = new Set<(change: StreamChange) => void>();
  private added: ParleyEvent[] = [];
  private reset = false;
  private readonly save = () => this.saveToTab();

  constructor(readonly id: string) {}

  get lastSeq(): number {
    return this.base + this.events.length;
  }

  /** `fn` learns what changed, at most once an animation frame. */
  subscribe(fn: (change: StreamChange) => void): () => void {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  start(info: ConversationInfo): void {
    this.info = info;
    this.status = info.execution_status;
    addEventListener('pagehide', this.save);
    void this.load(info);
  }

  close(): void {
    this.closed = true;
    removeEventListener('pagehide', this.save);
    this.saveToTab();
    if (this.timer) clearTimeout(this.timer);
    this.ws?.close(1000);
    this.ws = null;
  }

  /** What this tab kept, the newest page, the socket, then the older pages. */
  private async load(info: ConversationInfo): Promise<void> {
    const end = info.last_seq;
    const kept = this.restore(info);
    const from = Math.max(kept.length, end - PAGE);
    try {
      this.base = from;
      if (from < end) for (const ev of await this.page(from, end)) this.accept(ev);
    } catch {
      // the socket replays from here
    }
    if (kept.length === this.base) this.prepend(kept);
    this.shown = true;
    this.changed();
    this.connect();
    await this.readOlder(kept);
  }

  private async page(after: number, upTo: number): Promise<ParleyEvent[]> {
    const items: ParleyEvent[] = [];
    // a page also stops at 4 MiB: read on from its last event
    while (after < upTo) {
      const page = await call(parley.searchEvents.query({ conversation_id: this.id, after_seq: after, limit: upTo - after }));
      if (!page.items.length) throw new Error(`events ${after + 1}..${upTo} missing`);
      items.push(...page.items);
      after = page.items.at(-1)!.seq!;
    }
    return items;
  }

  /** Pages before `base` down to what the tab kept, several at once, each put in front once the one after it is. */
  private async readOlder(kept: ParleyEvent[]): Promise<void> {
    let next = this.base;
    const done = new Map<number, ParleyEvent[]>();
    const worker = async () => {
      while (!this.closed && next > kept.length) {
        const upTo = next;
        const from = Math.max(kept.length, upTo - PAGE);
        next = from;
        done.set(upTo, await this.olderPage(from, upTo));
        for (let chunk = done.get(this.base); chunk; chunk = done.get(this.base)) {
          done.delete(this.base);
          this.prepend(chunk);
        }
      }
    };
    try {
      await Promise.all(Array.from({ length: PAGES_AT_ONCE }, worker));
      if (kept.length === this.base) this.prepend(kept);
    } catch (err) {
      // refused: the events before the page stay out, and the page says why instead of loading on
      if (this.closed) return;
      this.olderError = (err as Error).message;
      this.changed();
    }
  }

  /**
   * A page of older events, asked again with the socket's backoff while the failure is one the
   * daemon gets over (it cannot be reached, is restarting, answered 5xx or 429), as long as the
   * page is open: a blip does not leave a hole in the history.
   */
  private async olderPage(from: number, upTo: number): Promise<ParleyEvent[]> {
    for (let tries = 0; ; tries++) {
      try {
        return await this.page(from, upTo);
      } catch (err) {
        const status = err instanceof ApiError ? err.status : -1;
        if (this.closed || !(status === 0 || status === 429 || status >= 500)) throw err;
        await new Promise((r) => setTimeout(r, RETRY_MS[Math.min(tries, RETRY_MS.length - 1)]));
      }
    }
  }

  private prepend(chunk: ParleyEvent[]): void {
    if (!chunk.length || chunk.at(-1)!.seq !== this.base || chunk[0]!.seq !== this.base - chunk.length + 1) return;
    this.events = chunk.concat(this.events);
    this.base -= chunk.length;
    this.reset = true;
    this.changed();
  }

  private connect(): void {
    if (this.closed) return;
    const proto = location.protocol === 'https:' ? 'wss:' : 'ws:';
    const ws = new WebSocket(`${proto}//${location.host}/sockets/events/${encodeURIComponent(this.id)}?after_seq=${this.lastSeq}`);
    this.ws = ws;
    ws.onopen = () => {
      const key = sessionKey();
      if (key) ws.send(JSON.stringify({ type: 'auth', session_api_key: key }));
      this.connected = true;
      this.retries = 0;
      this.changed();
    };
    ws.onmessage = (m) => {
      if (ws !== this.ws) return;
      let ev: ParleyEvent;
      try {
        ev = JSON.parse(m.data as string);
      } catch {
        return;
      }
      this.receive(ev);
    };
    ws.onclose = (e) => {
      if (ws !== this.ws) return;
      this.ws = null;
      this.connected = false;
      if (e.code === 4001) {
        this.ended = 'unauthorized';
        keyRefused();
      } else if (e.code === 4004) this.ended = this.lastSeq > 0 ? 'deleted' : 'not-found';
      else if (!this.closed) this.reconnect();
      this.changed();
    };
  }

  private reconnect(delay = RETRY_MS[Math.min(this.retries, RETRY_MS.length - 1)]!): void {
    this.retries += 1;
    if (this.timer) clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      this.timer = null;
      this.connect();
    }, delay);
  }

  private receive(ev: ParleyEvent): void {
    if (ev.kind === 'ConversationStateUpdateEvent' && ev.key === 'full_state') {
      this.info = ev.value as ConversationInfo;
      this.status = this.info.execution_status;
      return this.changed();
    }
    if (ev.seq === undefined) {
      if (ev.kind === 'StreamingDeltaEvent') this.streaming += ev.content;
      else if (ev.kind === 'SetupOutputEvent') this.setupOutput += ev.output;
      else if (ev.kind === 'ServerErrorEvent') this.serverError = `${ev.code}: ${ev.detail}`;
      return this.changed();
    }
    if (this.accept(ev)) return;
    // a gap in what the socket sent (it should not happen): open it again from lastSeq
    const ws = this.ws;
    this.ws = null;
    this.connected = false;
    ws?.close();
    this.reconnect(0);
  }

  /** Appends an event: false when it would leave a hole (a duplicate is dropped). */
  private accept(ev: ParleyEvent): boolean {
    const seq = ev.seq!;
    if (seq <= this.lastSeq) return true;
    if (seq > this.lastSeq + 1) return false;
    this.events.push(ev);
    this.added.push(ev);
    // the status was known at load: only what came after changes it
    if (ev.kind === 'ConversationStateUpdateEvent' && ev.key === 'execution_status' && this.shown) {
      this.status = ev.value as ExecutionStatus;
      if (this.status !== 'running') this.streaming = '';
    }
    if (ev.source === 'agent' && (ev.kind === 'MessageEvent' || ev.kind === 'ActionEvent')) this.streaming = '';
    if (ev.kind === 'ConversationStateUpdateEvent' && ev.key === 'setup') this.setupOutput = '';
    this.changed();
    return true;
  }

  private changed(): void {
    if (this.scheduled) return;
    this.scheduled = true;
    requestAnimationFrame(() => {
      this.scheduled = false;
      const change: StreamChange = this.reset ? { reset: true } : { reset: false, added: this.added };
      this.added = [];
      this.reset = false;
      for (const fn of this.listeners) fn(change);
    });
  }

  /** The events 1..n this tab kept for this conversation, if it is the same one (same creation time, not a shorter log). */
  private restore(info: ConversationInfo): ParleyEvent[] {
    let cached: Cached | null = null;
    try {
      cached = JSON.parse(sessionStorage.getItem(CACHE_PREFIX + this.id) ?? 'null');
    } catch {
      cached = null;
    }
    const kept: ParleyEvent[] = [];
    if (!cached || cached.created_at !== info.created_at || cached.events.length > info.last_seq) return kept;
    for (const text of cached.events) {
      const ev = JSON.parse(text) as ParleyEvent;
      if (ev.seq !== kept.length + 1) break;
      kept.push(ev);
    }
    return kept;
  }

  /** Keeps the oldest events that fit the budget (the next load reads the rest); one conversation at a time. */
  private saveToTab(): void {
    if (!this.info || this.base !== 0) return;
    const events: string[] = [];
    let size = 0;
    for (const ev of this.events) {
      const text = JSON.stringify(ev);
      size += text.length;
      if (size > CACHE_BUDGET) break;
      events.push(text);
    }
    try {
      for (let i = sessionStorage.length - 1; i >= 0; i--) {
        const k = sessionStorage.key(i);
        if (k?.startsWith(CACHE_PREFIX)) sessionStorage.removeItem(k);
      }
      const cached: Cached = { created_at: this.info.created_at, events };
      sessionStorage.setItem(CACHE_PREFIX + this.id, JSON.stringify(cached));
    } catch {
      /* over the quota: the next load reads everything */
    }
  }
}
