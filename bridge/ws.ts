/**
 * GET /sockets/events/{conversation_id}: the upgrade (through the door, admission.ts), what every
 * socket shares (the pre-auth budget, the subscribers per conversation, the conversations' topics),
 * and uWS's handlers, each handing its socket to the EventSocket it belongs to (socket.ts).
 */
import type { Logger } from 'pino';
import { ApiSchemas } from '../src/api/schemas.js';
import type { Core } from '../src/core.js';
import { metrics } from '../src/metrics.js';
import type { Door } from './admission.js';
import { parseQuery, send } from './http.js';
import { safeDecode } from './routes.js';
import { EventSocket, type SocketData, type SocketHub } from './socket.js';
import { LiveTopics } from './topics.js';
import type { TemplatedApp, WebSocket } from './uws.js';

/**
 * What sockets waiting for their auth frame may make uWS hold. uWS's frame limit (maxPayloadLength)
 * is one per route, not per socket, and the URL is fixed by the API clients use: an unauthenticated socket can
 * still send a frame up to MAX_BODY_BYTES, which uWS buffers whole before the 4 KiB check sees it
 * (and closes the socket, 4001). So the number of such sockets is what bounds that memory: at most
 * PREAUTH_BUDGET_BYTES / MAX_BODY_BYTES of them at once (6 with the default 10 MiB), at most half
 * of those from one address (and never more than 8 / 128), each for at most 10 s. A socket that
 * names its key at the upgrade (header, query or a signed-in browser's cookie) is authenticated
 * there and not counted.
 */
const PREAUTH_BUDGET_BYTES = 64 * 1024 * 1024;
const PREAUTH_PER_IP_MAX = 8;
const PREAUTH_TOTAL_MAX = 128;

/** Unauthenticated sockets at once, in total and per remote address, for a body limit. */
function preauthCaps(maxBodyBytes: number): { total: number; perIp: number } {
  const total = Math.max(2, Math.min(PREAUTH_TOTAL_MAX, Math.floor(PREAUTH_BUDGET_BYTES / maxBodyBytes)));
  return { total, perIp: Math.max(1, Math.min(PREAUTH_PER_IP_MAX, Math.floor(total / 2))) };
}

interface SocketOptions {
  door: Door;
  maxBufferedBytes: number;
  maxSubscribers: number;
  sendMessage: (conversationId: string, body: unknown) => Promise<unknown>;
}

const UPGRADE = { auth: 'deferred', cookie: true, stateChanging: true } as const;

export function mountEventSockets(app: TemplatedApp, core: Core, log: Logger, opts: SocketOptions) {
  const open = new Set<EventSocket>();
  const perConversation = new Map<string, number>();
  const pending = new Set<EventSocket>();
  const pendingByIp = new Map<string, number>();
  const preauth = preauthCaps(opts.door.maxBodyBytes);
  const droppedCounter = metrics.wsDropped.child();
  metrics.wsSubscribers.read(() => {
    let n = 0;
    for (const s of open) if (s.state === 'replaying' || s.state === 'live') n++;
    return [[[], n]];
  });

  const hub: SocketHub = {
    core,
    log,
    topics: new LiveTopics(app, (id, sink, o) => core.events.follow(id, sink, o), opts.maxBufferedBytes),
    maxBufferedBytes: opts.maxBufferedBytes,
    keyMatches: (key, conversationId) => opts.door.socketKeyMatches(key, conversationId),
    admitSubscriber(id) {
      const n = perConversation.get(id) ?? 0;
      if (n >= opts.maxSubscribers) return false;
      perConversation.set(id, n + 1);
      return true;
    },
    releaseSubscriber(id) {
      const n = (perConversation.get(id) ?? 1) - 1;
      if (n <= 0) perConversation.delete(id);
      else perConversation.set(id, n);
    },
    unpend(s) {
      if (!pending.delete(s)) return;
      const n = (pendingByIp.get(s.ip) ?? 1) - 1;
      if (n <= 0) pendingByIp.delete(s.ip);
      else pendingByIp.set(s.ip, n);
    },
    dropped: () => droppedCounter.inc(),
    sendMessage: opts.sendMessage,
  };

  app.ws<SocketData>('/sockets/events/*', {
    // a client frame is a send: the REST body limit applies
    maxPayloadLength: opts.door.maxBodyBytes,
    // uWS's limit would drop frames silently past it, then send the next ones: a gap. Off; the
    // limit (WS_MAX_BUFFERED_BYTES, 1013 past it) is the replay's pacing and the topics' check (topics.ts)
    maxBackpressure: 0,
    idleTimeout: 120,
    sendPingsAutomatically: true,
    upgrade: (res, req, context) => {
      // everything is read before upgrade(): uWS's request is valid only until then
      const url = req.getUrl();
      const query = parseQuery(req.getQuery() ?? '');
      const secKey = req.getHeader('sec-websocket-key');
      const secProtocol = req.getHeader('sec-websocket-protocol');
      const secExt = req.getHeader('sec-websocket-extensions');
      const state = { aborted: false };
      const parsedId = ApiSchemas.ConversationId.safeParse(safeDecode(url.slice('/sockets/events/'.length).replace(/\/$/, '')));
      const conversationId = parsedId.success ? parsedId.data : null;
      const admission = opts.door.admit(req, { ...UPGRADE, conversationId }, query.session_api_key);
      if (!admission.ok) return send(res, state, admission.status, JSON.stringify({ detail: admission.detail }));
      const authenticated = admission.principal.kind !== 'anonymous';
      const ip = authenticated ? '' : Buffer.from(res.getRemoteAddressAsText()).toString();
      if (!authenticated && (pending.size >= preauth.total || (pendingByIp.get(ip) ?? 0) >= preauth.perIp)) {
        return send(res, state, 429, '{"detail":"Too many sockets waiting for authentication"}');
      }
      const socket = new EventSocket(hub, conversationId, query, query.encoding === 'msgpack', authenticated, ip);
      res.upgrade<SocketData>({ socket }, secKey, secProtocol, secExt, context);
    },
    open: (ws) => {
      const socket = ws.getUserData().socket;
      open.add(socket);
      if (socket.state === 'awaiting-auth') {
        pending.add(socket);
        pendingByIp.set(socket.ip, (pendingByIp.get(socket.ip) ?? 0) + 1);
      }
      socket.open(ws as WebSocket<SocketData>);
    },
    message: (ws, message, isBinary) => ws.getUserData().socket.message(message, isBinary),
    drain: (ws) => ws.getUserData().socket.drain(),
    close: (ws) => {
      const socket = ws.getUserData().socket;
      open.delete(socket);
      socket.closed();
    },
  });

  return {
    /** Close every socket with 1001 (going away). */
    closeAll() {
      for (const s of [...open]) s.end(1001, 'Server shutting down');
    },
  };
}
