/**
 * GET /sockets/events/{conversation_id} (docs/api.md, "WebSocket"): auth three ways, the full_state snapshot
 * first, exact resume, msgpack or JSON frames, client frames handled as sends, a bounded buffer
 * per subscriber (close 1013 when it falls behind), and live events written once per turn.
 */
import crypto from 'node:crypto';
import { pack, unpack } from 'msgpackr';
import type { Logger } from 'pino';
import { ConversationId, SendMessageRequest } from '../src/api/schemas.js';
import { BODY_SHAPE_LIMITS, jsonShapeError, msgpackShapeError } from '../src/body-shape.js';
import type { Core } from '../src/core.js';
import type { EventFeed } from '../src/events/feed.js';
import { nowIso, type EncodedEvent } from '../src/events/types.js';
import { metrics } from '../src/metrics.js';
import { checkBrowserRequest, type GuardOptions } from './guard.js';
import { keyMatches, parseQuery } from './http.js';
import { safeDecode } from './routes.js';
import type { TemplatedApp, WebSocket } from './uws.js';

interface SocketData {
  conversationId: string | null;
  query: Record<string, string>;
  authed: boolean;
  binary: boolean;
  feed?: EventFeed;
  authTimer?: NodeJS.Timeout;
  closed: boolean;
  drainWaiters: (() => void)[];
  /** Remote address, kept while the socket counts as pending authentication. */
  ip: string;
  pending: boolean;
  /** Invalid frames since the last valid one. */
  invalid: number;
  /** Live events waiting for the end of this turn (`flushOutbox`), and their bytes. */
  out: (string | Buffer)[];
  outBytes: number;
}

/** Until authenticated a socket may only send an auth frame: a few KiB, so it cannot make the daemon hold more. */
const PREAUTH_FRAME_BYTES = 4096;
/**
 * What sockets waiting for their auth frame may make uWS hold. uWS's frame limit (maxPayloadLength)
 * is one per route, not per socket, and the URL is fixed by the API clients use: an unauthenticated socket can
 * still send a frame up to MAX_BODY_BYTES, which uWS buffers whole before the 4 KiB check sees it
 * (and closes the socket, 4001). So the number of such sockets is what bounds that memory: at most
 * PREAUTH_BUDGET_BYTES / MAX_BODY_BYTES of them at once (6 with the default 10 MiB), at most half
 * of those from one address (and never more than 8 / 128), each for at most 10 s. A socket that
 * names its key at the upgrade (header or query) is authenticated there and not counted.
 */
const PREAUTH_BUDGET_BYTES = 64 * 1024 * 1024;
const PREAUTH_PER_IP_MAX = 8;
const PREAUTH_TOTAL_MAX = 128;

/** Unauthenticated sockets at once, in total and per remote address, for a body limit. */
function preauthCaps(maxBodyBytes: number): { total: number; perIp: number } {
  const total = Math.max(2, Math.min(PREAUTH_TOTAL_MAX, Math.floor(PREAUTH_BUDGET_BYTES / maxBodyBytes)));
  return { total, perIp: Math.max(1, Math.min(PREAUTH_PER_IP_MAX, Math.floor(total / 2))) };
}
/** Invalid frames in a row after which the socket is closed (1008). */
const INVALID_FRAME_LIMIT = 1000;

interface SocketOptions {
  keys: string[];
  maxBufferedBytes: number;
  maxSubscribers: number;
  /** Host/Origin checks shared with HTTP (bridge/guard.ts). */
  guard: GuardOptions;
  /** Largest client frame (= MAX_BODY_BYTES). */
  maxBodyBytes: number;
  sendMessage: (conversationId: string, body: unknown) => Promise<unknown>;
}

/** uWS's WebSocket.send result when the frame was not sent (its buffer would pass maxBackpressure). */
const DROPPED = 2;

export function mountEventSockets(app: TemplatedApp, core: Core, log: Logger, opts: SocketOptions) {
  const open = new Set<WebSocket<SocketData>>();
  /** A replay sends its next event once what uWS holds for the socket is below this. */
  const lowWater = opts.maxBufferedBytes / 2;
  const perConversation = new Map<string, number>();
  const pendingByIp = new Map<string, number>();
  let pendingTotal = 0;
  const preauth = preauthCaps(opts.maxBodyBytes);
  const unpend = (d: SocketData) => {
    if (!d.pending) return;
    d.pending = false;
    pendingTotal -= 1;
    const n = (pendingByIp.get(d.ip) ?? 1) - 1;
    if (n <= 0) pendingByIp.delete(d.ip);
    else pendingByIp.set(d.ip, n);
  };
  const dropped = metrics.wsDropped.child();
  const tooSlow = (ws: WebSocket<SocketData>) => {
    dropped.inc();
    end(ws, 1013, 'Subscriber fell too far behind; reconnect with after_seq');
  };
  metrics.wsSubscribers.read(() => {
    let n = 0;
    for (const ws of open) if (ws.getUserData().feed && !ws.getUserData().closed) n++;
    return [[[], n]];
  });

  /**
   * Live events are not written one send() each: they wait in the socket's outbox until the end of
   * the turn that delivered them (a microtask), then go out corked, one write per socket. A turn
   * commits the events of many requests at once (~34 under the load test), and one conversation's
   * subscriber often gets several of them: the subscribers' frames were ~20 % of the event loop
   * there, one syscall each, and an agent's step (its action, observation and state) is one write.
   */
  const outbox = new Map<WebSocket<SocketData>, SocketData>();
  const queueLive = (ws: WebSocket<SocketData>, d: SocketData, data: string | Buffer) => {
    if (outbox.size === 0) queueMicrotask(flushOutbox);
    outbox.set(ws, d);
    d.out.push(data);
    d.outBytes += data.length; // a JSON string's length: its bytes for ASCII, near enough for pacing
  };
  const flushOutbox = () => {
    for (const [ws, d] of outbox) {
      outbox.delete(ws);
      try {
        writeOut(ws, d);
      } catch (err) {
        // one socket's failure neither stops the others' frames nor escapes this microtask (it would end the
        // daemon); the client, closed 1011, resumes with after_seq
        log.error({ conversation_id: d.conversationId, err: String(err) }, 'writing to a subscriber failed; closing it');
        d.out = [];
        try {
          end(ws, 1011, 'Internal error');
        } catch {
          d.closed = true; // already gone
        }
      }
    }
  };
  /** Writes the socket's waiting events, in order, before anything else is sent on it. */
  const writeOut = (ws: WebSocket<SocketData>, d: SocketData) => {
    if (d.out.length === 0) return;
    const frames = d.out;
    d.out = [];
    d.outBytes = 0;
    if (d.closed) return; // the socket may be gone: nothing of it is touched
    let refused = false;
    ws.cork(() => {
      for (const f of frames) if (ws.send(f, d.binary) === DROPPED) return void (refused = true);
    });
    // as each live send did: a frame uWS refused, or more buffered than a subscriber may have, closes it
    if (refused || ws.getBufferedAmount() > opts.maxBufferedBytes) return tooSlow(ws);
    // the feed stopped on its outbox (below lowWater in uWS, so uWS will not call drain): resume it
    if (d.drainWaiters.length && ws.getBufferedAmount() < lowWater) resume(d);
  };
  const resume = (d: SocketData) => {
    const waiters = d.drainWaiters;
    d.drainWaiters = [];
    // not from inside uWS's writable callback: a frame sent there (the replay's next event, in a
    // microtask) can stay in uWS's buffer with nothing polling to write it, and the replay stalls
    setImmediate(() => {
      for (const w of waiters) w();
    });
  };

  const frame = (ws: WebSocket<SocketData>, obj: unknown) => {
    const d = ws.getUserData();
    if (d.closed) return;
    writeOut(ws, d);
    if (d.closed) return;
    ws.send(d.binary ? pack(obj) : JSON.stringify(obj), d.binary);
  };
  const serverError = (ws: WebSocket<SocketData>, code: string, detail: string) =>
    frame(ws, { kind: 'ServerErrorEvent', id: crypto.randomUUID(), timestamp: nowIso(), source: 'environment', code, detail });
  /** An invalid client frame: answered, counted; a client that does not read its answers or keeps sending junk is closed. */
  const invalidFrame = (ws: WebSocket<SocketData>, code: string, detail: string) => {
    const d = ws.getUserData();
    serverError(ws, code, detail);
    if (++d.invalid >= INVALID_FRAME_LIMIT) return end(ws, 1008, 'Too many invalid frames');
    if (ws.getBufferedAmount() > opts.maxBufferedBytes) tooSlow(ws);
  };
  const end = (ws: WebSocket<SocketData>, code: number, reason: string) => {
    const d = ws.getUserData();
    if (d.closed) return;
    writeOut(ws, d); // what was delivered before the close goes first (a deleted conversation's last events)
    if (d.closed) return;
    d.closed = true;
    ws.end(code, reason);
  };

  async function start(ws: WebSocket<SocketData>) {
    const d = ws.getUserData();
    const id = d.conversationId;
    if (!id || !(await core.conversations.load(id))) return end(ws, 4004, 'Conversation not found');
    if (d.closed) return;
    const count = perConversation.get(id) ?? 0;
    if (count >= opts.maxSubscribers) return end(ws, 1013, 'Too many connections for this conversation');
    perConversation.set(id, count + 1);
    const snapshot = await core.conversations.fullState(id);
    if (d.closed) return release(id);
    const q = d.query;
    let afterSeq: number | null = snapshot.value.last_seq;
    let since: string | null = null;
    if (q.after_seq !== undefined && /^\d+$/.test(q.after_seq)) afterSeq = Number(q.after_seq);
    else if (q.resend_mode === 'all' || q.resend_all === 'true') afterSeq = 0;
    else if (q.resend_mode === 'since' && q.after_timestamp) {
      const t = new Date(q.after_timestamp);
      if (!Number.isNaN(t.getTime())) {
        since = t.toISOString();
        afterSeq = null;
      } else serverError(ws, 'InvalidQuery', 'after_timestamp is not an ISO 8601 timestamp');
    }
    frame(ws, snapshot);
    const sinkSend = (ev: EncodedEvent) => {
      if (d.closed) return false;
      const data = d.binary ? ev.msgpack : ev.json;
      // live (and a replay of a gap while live): through the outbox, closed there when too far behind
      if (!feedReplaying) {
        queueLive(ws, d, data);
        return ws.getBufferedAmount() + d.outBytes < lowWater;
      }
      // the first replay, paced by the return value: uWS drops a frame that would take its buffer past
      // maxBackpressure, and the client must resume (after_seq), not miss it
      if (ws.send(data, d.binary) === DROPPED) {
        tooSlow(ws);
        return false;
      }
      return ws.getBufferedAmount() < lowWater;
    };
    let feedReplaying = true;
    d.feed = core.events.follow(
      id,
      {
        send: sinkSend,
        drained: () => new Promise<void>((r) => d.drainWaiters.push(r)),
        overflow: () => tooSlow(ws),
        ended: () => end(ws, 4004, 'Conversation deleted'),
      },
      { afterSeq, sinceTimestamp: since },
    );
    d.feed.done.then(() => (feedReplaying = false));
  }

  function release(id: string) {
    const n = (perConversation.get(id) ?? 1) - 1;
    if (n <= 0) perConversation.delete(id);
    else perConversation.set(id, n);
  }

  async function onClientFrame(ws: WebSocket<SocketData>, raw: unknown) {
    const d = ws.getUserData();
    if (!raw || typeof raw !== 'object' || Array.isArray(raw))
      return invalidFrame(ws, 'ValidationError', 'A frame must be a JSON object: a SendMessageRequest or {"role","content"}');
    const obj = raw as Record<string, unknown>;
    if (obj.type === 'auth') return;
    // a message has content or a role; anything else (e.g. {"nonsense":true}) is not one, and must not append an empty message or start a run
    if (!('content' in obj) && !('role' in obj))
      return invalidFrame(ws, 'ValidationError', 'A frame must carry "content" or "role": a SendMessageRequest or {"role","content"}');
    const body: Record<string, unknown> = { ...obj };
    if (typeof body.content === 'string') body.content = [{ type: 'text', text: body.content }];
    body.run = true;
    const parsed = SendMessageRequest.safeParse(body);
    if (!parsed.success) {
      const first = parsed.error.issues[0];
      return invalidFrame(ws, 'ValidationError', `${first?.path.join('.') || 'frame'}: ${first?.message ?? 'invalid'}`);
    }
    d.invalid = 0;
    try {
      await opts.sendMessage(d.conversationId!, parsed.data);
    } catch (err) {
      serverError(ws, (err as Error)?.name ?? 'Error', core.redactor.redact(String((err as Error)?.message ?? err)));
    }
  }

  app.ws<SocketData>('/sockets/events/*', {
    // a client frame is a send: the REST body limit applies. What uWS buffers for a reader that does
    // not read is bounded: past WS_MAX_BUFFERED_BYTES the socket is closed (1013, tooSlow); uWS drops
    // sends once it holds more than maxBackpressure, so it gets headroom for the close frame
    maxPayloadLength: opts.maxBodyBytes,
    maxBackpressure: 2 * opts.maxBufferedBytes,
    idleTimeout: 120,
    sendPingsAutomatically: true,
    upgrade: (res, req, context) => {
      const url = req.getUrl();
      const query = parseQuery(req.getQuery() ?? '');
      const headerKey = req.getHeader('x-session-api-key');
      const key = query.session_api_key ?? headerKey;
      const secKey = req.getHeader('sec-websocket-key');
      const secProtocol = req.getHeader('sec-websocket-protocol');
      const secExt = req.getHeader('sec-websocket-extensions');
      const verdict = checkBrowserRequest(opts.guard, req.getHeader('host'), req.getHeader('origin'), true);
      if (verdict) {
        res.cork(() =>
          res
            .writeStatus(verdict.status === 403 ? '403 Forbidden' : '421 Misdirected Request')
            .writeHeader('content-type', 'application/json')
            .end(JSON.stringify({ detail: verdict.detail })),
        );
        return;
      }
      if (opts.keys.length && key && !keyMatches(key, opts.keys)) {
        res.cork(() => res.writeStatus('401 Unauthorized').writeHeader('content-type', 'application/json').end('{"detail":"Unauthorized"}'));
        return;
      }
      const rawId = safeDecode(url.slice('/sockets/events/'.length).replace(/\/$/, ''));
      const parsedId = ConversationId.safeParse(rawId);
      const authed = opts.keys.length === 0 || !!key;
      const ip = authed ? '' : Buffer.from(res.getRemoteAddressAsText()).toString();
      if (!authed && (pendingTotal >= preauth.total || (pendingByIp.get(ip) ?? 0) >= preauth.perIp)) {
        res.cork(() =>
          res
            .writeStatus('429 Too Many Requests')
            .writeHeader('content-type', 'application/json')
            .end('{"detail":"Too many sockets waiting for authentication"}'),
        );
        return;
      }
      const data: SocketData = {
        conversationId: parsedId.success ? parsedId.data : null,
        query,
        authed,
        binary: query.encoding === 'msgpack',
        closed: false,
        drainWaiters: [],
        ip,
        pending: false,
        invalid: 0,
        out: [],
        outBytes: 0,
      };
      res.upgrade(data, secKey, secProtocol, secExt, context);
    },
    open: (ws) => {
      open.add(ws);
      const d = ws.getUserData();
      if (d.authed) {
        start(ws).catch((err) => {
          log.error({ conversation_id: d.conversationId, err: String(err) }, 'socket start failed');
          end(ws, 1011, 'Internal error');
        });
      } else {
        d.pending = true;
        pendingTotal += 1;
        pendingByIp.set(d.ip, (pendingByIp.get(d.ip) ?? 0) + 1);
        d.authTimer = setTimeout(() => end(ws, 4001, 'Authentication failed'), 10_000);
      }
    },
    message: (ws, message, isBinary) => {
      const d = ws.getUserData();
      if (!d.authed && message.byteLength > PREAUTH_FRAME_BYTES) return end(ws, 4001, 'Authentication failed');
      // counted before it is decoded, like every request body (src/body-shape.ts): a frame of MAX_BODY_BYTES
      // of `[[],[],…]` would otherwise become millions of arrays, and zod an issue for each
      const bytes = Buffer.from(message);
      const text = isBinary ? '' : bytes.toString('utf8');
      const refused = isBinary ? msgpackShapeError(bytes) : jsonShapeError(text, BODY_SHAPE_LIMITS, 'Frame');
      if (refused) {
        if (!d.authed) return end(ws, 4001, 'Authentication failed');
        return invalidFrame(ws, refused.tooLarge ? 'PayloadTooLarge' : 'InvalidFrame', refused.detail);
      }
      let parsed: unknown;
      try {
        parsed = isBinary ? unpack(bytes) : JSON.parse(text);
      } catch {
        if (!d.authed) return end(ws, 4001, 'Authentication failed');
        return invalidFrame(ws, 'InvalidFrame', isBinary ? 'Frame is not valid msgpack' : 'Frame is not valid JSON');
      }
      if (!d.authed) {
        const p = parsed as Record<string, unknown> | null;
        if (p && p.type === 'auth' && typeof p.session_api_key === 'string' && keyMatches(p.session_api_key, opts.keys)) {
          clearTimeout(d.authTimer);
          unpend(d);
          d.authed = true;
          start(ws).catch(() => end(ws, 1011, 'Internal error'));
        } else end(ws, 4001, 'Authentication failed');
        return;
      }
      void onClientFrame(ws, parsed);
    },
    drain: (ws) => {
      const d = ws.getUserData();
      // uWS calls this each time some of its buffer went out: a replay waits until it is below the low-water mark,
      // so what is buffered for one socket stays under lowWater + one event
      if (!d.drainWaiters.length || ws.getBufferedAmount() >= lowWater) return;
      resume(d);
    },
    close: (ws) => {
      open.delete(ws);
      const d = ws.getUserData();
      const wasCounted = !!d.feed;
      d.closed = true;
      d.out = [];
      d.outBytes = 0;
      clearTimeout(d.authTimer);
      unpend(d);
      d.feed?.close();
      for (const w of d.drainWaiters) w();
      if (wasCounted && d.conversationId) release(d.conversationId);
    },
  });

  return {
    /** Close every socket with 1001 (going away). */
    closeAll() {
      for (const ws of [...open]) end(ws, 1001, 'Server shutting down');
    },
  };
}
