/**
 * The REST routes (generated from the operation table: routes.ts), behind the door (admission.ts): the route is matched
 * first so the door knows its body and its conversation, but the key is checked before 404/405,
 * so routes cannot be listed without it. Then the body is read under its limits and the route's
 * operation runs (`runOperation`: REST and tRPC run the same validation and the same code).
 */
import type { Logger } from 'pino';
import { runOperation } from '../src/api/operations.js';
import type { Core } from '../src/core.js';
import { FileBytes, FileStream } from '../src/conversation/file-transfer.js';
import { MAX_UPLOAD_BYTES } from '../src/conversation/side-channels.js';
import { ByteStream } from '../src/conversation/trajectory.js';
import { EventPage } from '../src/events/page.js';
import { eventJson } from '../src/events/types.js';
import type { Door, Principal } from './admission.js';
import { toHttpError } from './errors.js';
import { jsonErrorPosition, onJsonBody, parseQuery, type ResState, send, sendJson, streamBytes, streamPage, watchAbort } from './http.js';
import { RouteMetric, unmatchedMetric } from './metrics.js';
import { sendFile } from './file-transfer.js';
import { multipartUpload } from './multipart.js';
import type { RouteRequest, RouteTarget } from './route.js';
import type { Route, RouteTable } from './routes.js';
import type { HttpResponse, TemplatedApp } from './uws.js';

/** Requests being answered, and whether the daemon stops taking new ones (server.ts's stop). */
export interface InFlight {
  draining: boolean;
  begin(): void;
  done(): void;
}

interface RestOptions {
  core: Core;
  log: Logger;
  door: Door;
  routes: RouteTable;
  inFlight: InFlight;
}

/** A body that was answered with its 422. */
const REFUSED = Symbol('refused');

/** The JSON body, or REFUSED once the 422 is sent (empty, or not JSON). */
function parseBody(res: HttpResponse, state: ResState, text: string): unknown {
  if (text.trim() === '') {
    sendJson(res, state, 422, { detail: [{ type: 'missing', loc: ['body'], msg: 'Field required', input: null }] });
    return REFUSED;
  }
  try {
    return JSON.parse(text);
  } catch (err) {
    sendJson(res, state, 422, {
      detail: [{ type: 'json_invalid', loc: ['body', jsonErrorPosition(err, text)], msg: 'JSON decode error', input: {}, ctx: { error: 'Invalid JSON' } }],
    });
    return REFUSED;
  }
}

export function mountRest(app: TemplatedApp, { core, log, door, routes, inFlight }: RestOptions): void {
  // requests are counted by route template (GET /metrics): one cached metric per route
  const routeMetrics = new Map(routes.routes.map((r) => [r, new RouteMetric(r.method, r.path)]));
  const maxBody = door.maxBodyBytes;
  // an upload streams to its sandbox, so memory does not bound it: its own limit (or the body limit, when larger)
  const maxFileBytes = Math.max(maxBody, MAX_UPLOAD_BYTES);
  const upload = { maxFileBytes, maxBodyBytes: maxFileBytes + 1024 * 1024 };

  app.any('/*', (res, req) => {
    const state = watchAbort(res);
    const method = req.getMethod().toUpperCase();
    const url = req.getUrl();
    const { route, params, methods } = routes.match(method, url);
    state.metric = route ? routeMetrics.get(route) : unmatchedMetric(method);
    const admission = door.admit(req, {
      auth: route || url.startsWith('/api') ? 'required' : 'public',
      cookie: true,
      stateChanging: method !== 'GET' && method !== 'HEAD',
      // a body is judged only for a route that will read it (404/405 and a draining 503 come first)
      body: route?.body && !inFlight.draining ? (route.body === 'multipart' ? 'multipart' : 'json') : null,
      bodyLimit: route?.body === 'multipart' ? upload.maxBodyBytes : undefined,
      // from the path, or the query of the agent-server routes that name it there
      conversationId: (params as Record<string, string>).conversation_id ?? (req.getQuery('conversation_id') || null),
      byConversationKey: route?.byConversationKey,
      workspaceSession: route?.workspaceSession,
    });
    if (!admission.ok) return sendJson(res, state, admission.status, { detail: admission.detail });
    // a runtime route that names no conversation acts on the one the caller's conversation key opens (read before any await)
    const keyConversation = route?.byConversationKey ? conversationOfCaller(admission.principal, req.getHeader('x-session-api-key')) : null;
    if (!route) {
      if (methods.length) return send(res, state, 405, '{"detail":"Method Not Allowed"}', 'application/json', { allow: methods.join(', ') });
      return sendJson(res, state, 404, { detail: 'Not Found' });
    }
    if (inFlight.draining) return sendJson(res, state, 503, { detail: 'Server is shutting down' });
    const rawQuery = req.getQuery() ?? '';
    const r: RouteRequest = { params, query: parseQuery(rawQuery), rawQuery, body: undefined };
    if (keyConversation && !r.query.conversation_id) r.query.conversation_id = keyConversation;
    inFlight.begin();
    if (!route.body) return void dispatch(res, state, route, r);
    // the upload's file part goes to the operation as it arrives (bridge/multipart.ts)
    if (route.body === 'multipart') {
      r.body = multipartUpload(res, state, req.getHeader('content-type'), upload);
      return void dispatch(res, state, route, r);
    }
    onJsonBody(res, maxBody, Number(req.getHeader('content-length') || 0), (err, text) => {
      if (err) {
        sendJson(res, state, 413, { detail: err.message });
        return inFlight.done();
      }
      const body = parseBody(res, state, text);
      if (body === REFUSED) return inFlight.done();
      r.body = body;
      void dispatch(res, state, route, r);
    });
  });

  /**
   * The conversation of a caller of a runtime route: the one its conversation key opens. A keyless
   * daemon admits everyone without looking at keys, yet OpenHands' app still sends the conversation's
   * key: it names the conversation there too.
   */
  function conversationOfCaller(principal: Principal, presented: string): string | null {
    return principal.kind === 'conversation' ? principal.conversationId : door.conversationOf(presented);
  }

  /** Runs the route's operation and answers; the request is done (inFlight) when this settles, which it always does. */
  async function dispatch(res: HttpResponse, state: ResState, route: Route, r: RouteRequest) {
    let input: unknown;
    let target: RouteTarget | null = null;
    try {
      target = route.pick(r);
      input = target.input(r);
      const out = await runOperation(core, target.operation, input);
      // events/search: written as it is read
      if (out instanceof EventPage) return await streamPage(res, state, out, eventJson);
      // a file's bytes go out as the client takes them
      if (out instanceof FileStream) return await sendFile(res, state, out);
      // bytes made as they are sent (a trajectory's ZIP)
      if (out instanceof ByteStream) return await streamBytes(res, state, out);
      // bytes the daemon made (an archive) go out as they are
      if (out instanceof FileBytes)
        return send(res, state, 200, Buffer.from(out.bytes), 'application/octet-stream', {
          'content-disposition': `attachment; filename="${out.name.replace(/[^\w.-]/g, '_')}"`,
        });
      sendJson(res, state, target.status, out);
    } catch (err) {
      const e = toHttpError(err, input, (target ?? route).loc, log, core.redactor);
      sendJson(res, state, e.status, e.body);
    } finally {
      inFlight.done();
    }
  }
}
