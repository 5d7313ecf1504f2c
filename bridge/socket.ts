/**
 * One client of `GET /sockets/events/{id}` and its states:
 *
 *   awaiting-auth ──(auth frame)──▶ replaying ──(caught up with the topic)──▶ live ──▶ closed
 *        │ (key or cookie at the upgrade) ▲                                            ▲
 *        └────────────────────────────────┘        (any state, on any close) ─────────┘
 *
 * - awaiting-auth: only an auth frame of at most PREAUTH_FRAME_BYTES is read, for at most 10 s;
 *   the socket counts against the pre-auth budget (bridge/ws.ts) until it leaves this state.
 * - replaying: the `full_state` snapshot, then what the client asked to catch up on (src/api/resume.ts),
 *   read from the store a page at a time and sent directly, paced by what uWS holds for the socket
 *   (the next event once it is below half of WS_MAX_BUFFERED_BYTES); then it offers itself to its
 *   conversation's topic (bridge/topics.ts), which subscribes it in the turn where nothing is
 *   missing and nothing would come twice.
 * - live: uWS's pub/sub writes the conversation's events; this object only answers client frames.
 * - closed: every resource let go; nothing is sent.
 */
import crypto from 'node:crypto';
import { pack, unpack } from 'msgpackr';
import type { Logger } from 'pino';
import { resumePoint, type ResumePoint } from '../src/api/resume.js';
import { ApiSchemas } from '../src/api/schemas.js';
import { BODY_SHAPE_LIMITS, jsonShapeError, msgpackShapeError } from '../src/body-shape.js';
import type { Core } from '../src/core.js';
import { EncodedEvent } from '../src/events/types.js';
import { isoTime } from '../src/iso-time.js';
import type { LiveTopic, LiveTopics, TopicMember } from './topics.js';
import type { WebSocket } from './uws.js';

export type SocketState = 'awaiting-auth' | 'replaying' | 'live' | 'closed';

/** Until authenticated a socket may only send an auth frame: a few KiB. */
const PREAUTH_FRAME_BYTES = 4096;
const AUTH_TIMEOUT_MS = 10_000;
/** Invalid frames in a row after which the socket is closed (1008). */
const INVALID_FRAME_LIMIT = 1000;
const REPLAY_PAGE_EVENTS = 256;
/** A replay read stops once its events reach this many stored bytes: memory stays bounded by bytes. */
const REPLAY_PAGE_BYTES = 1024 * 1024;

/** What every socket shares (bridge/ws.ts). */
export interface SocketHub {
  core: Pick<Core, 'conversations' | 'events' | 'redactor'>;
  log: Logger;
  topics: LiveTopics;
  maxBufferedBytes: number;
  /** Whether a key presented in an auth frame opens the socket's conversation (a daemon key, or that conversation's own). */
  keyMatches(key: string, conversationId: string | null): boolean;
  /** A place among the conversation's subscribers (false: WS_MAX_SUBSCRIBERS reached). */
  admitSubscriber(conversationId: string): boolean;
  releaseSubscriber(conversationId: string): void;
  /** The socket stopped waiting for its auth frame (authenticated or closed). */
  unpend(socket: EventSocket): void;
  /** A subscriber closed for falling behind (counted). */
  dropped(): void;
  sendMessage(conversationId: string, body: unknown): Promise<unknown>;
}

/** uWS user data: the socket object, made at the upgrade, given its WebSocket at open. */
export interface SocketData {
  socket: EventSocket;
}

export class EventSocket implements TopicMember {
  state: SocketState;
  ws!: WebSocket<SocketData>;
  /** Every event with seq <= cursor has been sent. */
  cursor = 0;
  private topic: LiveTopic | null = null;
  private counted = false;
  private authTimer: NodeJS.Timeout | undefined;
  private drainWaiters: (() => void)[] = [];
  /** Invalid frames since the last valid one. */
  private invalid = 0;

  constructor(
    private readonly hub: SocketHub,
    readonly conversationId: string | null,
    private readonly query: Record<string, string>,
    readonly binary: boolean,
    authenticated: boolean,
    /** Remote address, while the socket counts against the pre-auth budget (else ''). */
    readonly ip: string,
  ) {
    this.state = authenticated ? 'replaying' : 'awaiting-auth';
  }

  open(ws: WebSocket<SocketData>): void {
    this.ws = ws;
    if (this.state === 'replaying') this.begin();
    else this.authTimer = setTimeout(() => this.end(4001, 'Authentication failed'), AUTH_TIMEOUT_MS);
  }

  message(message: ArrayBuffer, isBinary: boolean): void {
    const preauth = this.state === 'awaiting-auth';
    if (preauth && message.byteLength > PREAUTH_FRAME_BYTES) return this.end(4001, 'Authentication failed');
    // counted before it is decoded, like every request body (src/body-shape.ts): a frame of MAX_BODY_BYTES
    // of `[[],[],…]` would otherwise become millions of arrays, and zod an issue for each
    const bytes = Buffer.from(message);
    const text = isBinary ? '' : bytes.toString('utf8');
    const refused = isBinary ? msgpackShapeError(bytes) : jsonShapeError(text, BODY_SHAPE_LIMITS, 'Frame');
    if (refused) {
      if (preauth) return this.end(4001, 'Authentication failed');
      return this.invalidFrame(refused.tooLarge ? 'PayloadTooLarge' : 'InvalidFrame', refused.detail);
    }
    let parsed: unknown;
    try {
      parsed = isBinary ? unpack(bytes) : JSON.parse(text);
    } catch {
      if (preauth) return this.end(4001, 'Authentication failed');
      return this.invalidFrame('InvalidFrame', isBinary ? 'Frame is not valid msgpack' : 'Frame is not valid JSON');
    }
    if (preauth) {
      const p = parsed as Record<string, unknown> | null;
      if (!(p && p.type === 'auth' && typeof p.session_api_key === 'string' && this.hub.keyMatches(p.session_api_key, this.conversationId)))
        return this.end(4001, 'Authentication failed');
      clearTimeout(this.authTimer);
      this.hub.unpend(this);
      this.state = 'replaying';
      return this.begin();
    }
    void this.clientFrame(parsed);
  }

  /** uWS took some of the socket's buffer: a replay waiting for it goes on below the low-water mark. */
  drain(): void {
    if (!this.drainWaiters.length || this.ws.getBufferedAmount() >= this.hub.maxBufferedBytes / 2) return;
    const waiters = this.drainWaiters;
    this.drainWaiters = [];
    // not from inside uWS's writable callback: a frame sent there (the replay's next event, in a
    // microtask) can stay in uWS's buffer with nothing polling to write it, and the replay stalls
    setImmediate(() => {
      for (const w of waiters) w();
    });
  }

  /** uWS closed the socket (any reason): let everything go. */
  closed(): void {
    const wasPending = this.state === 'awaiting-auth';
    this.state = 'closed';
    clearTimeout(this.authTimer);
    if (wasPending) this.hub.unpend(this);
    this.topic?.leave(this);
    this.topic = null;
    for (const w of this.drainWaiters) w();
    this.drainWaiters = [];
    if (this.counted && this.conversationId) this.hub.releaseSubscriber(this.conversationId);
    this.counted = false;
  }

  /** Close with a code; what was queued for the socket (a deleted conversation's last events) goes first. */
  end(code: number, reason: string): void {
    if (this.state === 'closed') return;
    this.ws.end(code, reason); // uWS calls close (closed()) from here
    this.state = 'closed';
  }

  /** Closed meanwhile (read after an await: the state may have changed under it). */
  private get gone(): boolean {
    return this.state === 'closed';
  }

  // ---- TopicMember: what the conversation's topic calls ----

  subscribed(): void {
    if (this.state === 'replaying') this.state = 'live';
  }

  tooSlow(): void {
    if (this.state === 'closed') return;
    this.hub.dropped();
    this.end(1013, 'Subscriber fell too far behind; reconnect with after_seq');
  }

  ended(): void {
    this.end(4004, 'Conversation deleted');
  }

  // ---- replaying ----

  private begin(): void {
    this.stream().catch((err) => {
      this.hub.log.error({ conversation_id: this.conversationId, err: String(err) }, 'socket start failed');
      this.end(1011, 'Internal error');
    });
  }

  private async stream(): Promise<void> {
    const { core } = this.hub;
    const id = this.conversationId;
    const conv = id ? await core.conversations.load(id) : null;
    if (!id || !conv) return this.end(4004, 'Conversation not found');
    if (this.gone) return;
    if (!this.hub.admitSubscriber(id)) return this.end(1013, 'Too many connections for this conversation');
    this.counted = true;
    core.conversations.watched(conv);
    const snapshot = await core.conversations.fullState(id);
    if (this.gone) return;
    const lastSeq = snapshot.value.last_seq as number;
    const q = this.query;
    const from: ResumePoint = resumePoint({
      after_seq: q.after_seq,
      resend_mode: q.resend_mode,
      resend_all: q.resend_all,
      after_timestamp: q.after_timestamp,
    });
    if (from.kind === 'live' && from.invalid) this.serverError('InvalidQuery', from.invalid);
    this.frame(snapshot);
    // a member from now on: a deletion reaches it even while it replays
    this.topic = this.hub.topics.join(id, this, lastSeq);
    this.cursor = from.kind === 'after' ? from.seq : from.kind === 'since' ? 0 : lastSeq;
    await this.replay(id, from.kind === 'since' ? from.timestamp : null, lastSeq);
  }

  /** Sends what the store holds after the cursor until the topic takes over. */
  private async replay(id: string, since: string | null, lastSeq: number): Promise<void> {
    let emptyReads = 0;
    for (;;) {
      if (since === null) {
        const topic = this.topic;
        if (!topic || this.state !== 'replaying') return;
        if (topic.offer(this) !== 'behind') return;
      }
      const page = await this.hub.core.events.query(id, {
        afterSeq: this.cursor,
        sinceTimestamp: since,
        limit: REPLAY_PAGE_EVENTS,
        maxBytes: REPLAY_PAGE_BYTES,
        keepJson: true,
      });
      if (this.state !== 'replaying') return;
      // nothing since that time: the events up to the snapshot's last seq were all before it
      if (since !== null && page.length === 0) this.cursor = Math.max(this.cursor, lastSeq);
      since = null;
      if (page.length === 0) {
        // behind the topic yet the store has nothing more: a read that raced a commit; read again shortly
        if (++emptyReads > 50) return this.tooSlow();
        if (emptyReads > 1) await new Promise((r) => setTimeout(r, 20));
        continue;
      }
      emptyReads = 0;
      for (const e of page) {
        const ev = new EncodedEvent(e);
        this.ws.send(this.binary ? ev.msgpack : ev.json, this.binary);
        this.cursor = e.seq!;
        // the rest of the page is read again once uWS's buffer for this socket went below the mark
        if (this.ws.getBufferedAmount() >= this.hub.maxBufferedBytes / 2) {
          await new Promise<void>((r) => this.drainWaiters.push(r));
          break;
        }
      }
    }
  }

  // ---- frames of the daemon's own and client frames ----

  private frame(obj: unknown): void {
    if (this.state === 'closed') return;
    this.ws.send(this.binary ? pack(obj) : JSON.stringify(obj), this.binary);
  }

  private serverError(code: string, detail: string): void {
    this.frame({ kind: 'ServerErrorEvent', id: crypto.randomUUID(), timestamp: isoTime(), source: 'environment', code, detail });
  }

  /** An invalid client frame: answered, counted; a client that does not read its answers or keeps sending junk is closed. */
  private invalidFrame(code: string, detail: string): void {
    this.serverError(code, detail);
    if (++this.invalid >= INVALID_FRAME_LIMIT) return this.end(1008, 'Too many invalid frames');
    if (this.state !== 'closed' && this.ws.getBufferedAmount() > this.hub.maxBufferedBytes) this.tooSlow();
  }

  /** A frame after authentication: a SendMessageRequest or an LLM message, handled as a send with run:true. */
  private async clientFrame(raw: unknown): Promise<void> {
    if (!raw || typeof raw !== 'object' || Array.isArray(raw))
      return this.invalidFrame('ValidationError', 'A frame must be a JSON object: a SendMessageRequest or {"role","content"}');
    const obj = raw as Record<string, unknown>;
    if (obj.type === 'auth') return;
    // a message has content or a role; anything else (e.g. {"nonsense":true}) is not one, and must not append an empty message or start a run
    if (!('content' in obj) && !('role' in obj))
      return this.invalidFrame('ValidationError', 'A frame must carry "content" or "role": a SendMessageRequest or {"role","content"}');
    const body: Record<string, unknown> = { ...obj };
    if (typeof body.content === 'string') body.content = [{ type: 'text', text: body.content }];
    body.run = true;
    const parsed = ApiSchemas.SendMessageRequest.safeParse(body);
    if (!parsed.success) {
      const first = parsed.error.issues[0];
      return this.invalidFrame('ValidationError', `${first?.path.join('.') || 'frame'}: ${first?.message ?? 'invalid'}`);
    }
    this.invalid = 0;
    try {
      await this.hub.sendMessage(this.conversationId!, parsed.data);
    } catch (err) {
      this.serverError((err as Error)?.name ?? 'Error', this.hub.core.redactor.redact(String((err as Error)?.message ?? err)));
    }
  }
}
