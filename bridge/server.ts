/**
 * The uWS app: REST routes (one table), /sockets/events/*, /trpc/*, /openapi.json, /docs, health,
 * the web console's files (bridge/console.ts).
 * Transport concerns only: bodies, limits, auth, error mapping. REST runs the router's operation
 * table (`runOperation`), so REST and tRPC run the same validation and the same code.
 */
import type { Logger } from 'pino';
import { runOperation, type OperationName } from '../src/api/operations.js';
import type { Config } from '../src/config.js';
import type { Core } from '../src/core.js';
import { toHttpError } from './errors.js';
import { BodyTooLarge, jsonErrorPosition, keyMatches, parseQuery, readJsonBody, send, sendJson, streamPage, watchAbort, type ResState } from './http.js';
import { EventPage } from '../src/events/page.js';
import { eventJson } from '../src/events/types.js';
import { mountMetrics, RouteMetric, unmatchedMetric } from './metrics.js';
import { mountDocs } from './docs.js';
import { mountConsole } from './console.js';
import { buildOpenApi } from './openapi.js';
import { FileBytes } from '../src/conversation/side-channels.js';
import { isMultipart, multipartFile, multipartPartsError, readBytes } from './multipart.js';
import { checkBrowserRequest, isJsonContentType, type GuardOptions } from './guard.js';
import type { RouteRequest, RouteTarget } from './route.js';
import { type Route, RouteTable, tableRoutes } from './routes.js';
import { handleTrpc, trpcRefusal } from './trpc.js';
import { App, us_listen_socket_close, us_socket_local_port, type HttpResponse, type us_listen_socket } from './uws.js';
import { mountEventSockets } from './ws.js';

const VERSION = '0.1.0';

export interface Daemon {
  port: number;
  /** Stop accepting, wait for in-flight requests (bounded), close sockets with 1001. */
  stop(timeoutMs?: number): Promise<void>;
}

export function startServer(config: Config, core: Core, log: Logger): Promise<Daemon> {
  const app = App();
  const keys = config.sessionApiKeys;
  const routes = new RouteTable(tableRoutes());
  // requests are counted by route template (GET /metrics): one cached metric per route
  const routeMetrics = new Map(routes.routes.map((r) => [r, new RouteMetric(r.method, r.path)]));
  const fixed = (path: string) => new RouteMetric('GET', path);
  // generated on first request: converting every zod schema takes tens of ms the start does not need to wait for
  let openapi: string | null = null;
  let inFlight = 0;
  let draining = false;
  let onIdle: (() => void) | null = null;
  const done = () => {
    inFlight -= 1;
    if (inFlight === 0 && onIdle) onIdle();
  };

  const guard: GuardOptions = { allowedOrigins: config.allowedOrigins, loopbackOnly: keys.length === 0 };
  const tooLarge = { detail: `Request body exceeds ${config.maxBodyBytes} bytes` };
  const call = (procedure: OperationName, input: unknown) => runOperation(core, procedure, input);

  const sockets = mountEventSockets(app, core, log, {
    keys,
    maxBufferedBytes: config.wsMaxBufferedBytes,
    maxSubscribers: config.wsMaxSubscribers,
    guard,
    maxBodyBytes: config.maxBodyBytes,
    sendMessage: (id, body) => call('sendMessage', { conversation_id: id, message: body }),
  });

  const health = (res: HttpResponse, metric: RouteMetric, body: unknown, status = 200) => sendJson(res, watchAbort(res, metric), status, body);
  const [alive, healthy, ready, info] = ['/alive', '/health', '/ready', '/server_info'].map(fixed) as [RouteMetric, RouteMetric, RouteMetric, RouteMetric];
  app.get('/alive', (res) => health(res, alive, { status: 'ok' }));
  app.get('/health', (res) => health(res, healthy, { status: 'ok' }));
  app.get('/ready', (res) => (draining ? health(res, ready, { status: 'draining' }, 503) : health(res, ready, { status: 'ready' })));
  app.get('/server_info', (res) =>
    health(res, info, {
      title: 'Parley',
      version: VERSION,
      uptime: Math.floor((Date.now() - core.startedAt) / 1000),
      idle_time: Math.floor((Date.now() - core.events.lastActivity) / 1000),
      docs: '/docs',
      node_version: process.version,
      sandbox: core.sandbox.info(),
    }),
  );
  const openapiMetric = fixed('/openapi.json');
  app.get('/openapi.json', (res) => send(res, watchAbort(res, openapiMetric), 200, (openapi ??= JSON.stringify(buildOpenApi(VERSION, keys.length > 0)))));
  mountMetrics(app, keys, log);
  mountDocs(app);
  mountConsole(app, guard);

  app.any('/trpc/*', (res, req) => {
    const state = { aborted: false };
    const method = req.getMethod().toUpperCase();
    const verdict = checkBrowserRequest(guard, req.getHeader('host'), req.getHeader('origin'), method !== 'GET' && method !== 'HEAD');
    if (verdict) {
      res.onAborted(() => {});
      return sendJson(res, state, verdict.status, { detail: verdict.detail });
    }
    if (keys.length && !keyMatches(req.getHeader('x-session-api-key'), keys)) {
      res.onAborted(() => {});
      return sendJson(res, state, 401, trpcRefusal(req.getUrl(), req.getQuery() ?? '', 401, 'Unauthorized'));
    }
    if (method === 'POST') {
      res.onAborted(() => {});
      if (!isJsonContentType(req.getHeader('content-type'))) return sendJson(res, state, 415, { detail: 'Content-Type must be application/json' });
      if (Number(req.getHeader('content-length') || 0) > config.maxBodyBytes)
        return sendJson(res, state, 413, trpcRefusal(req.getUrl(), req.getQuery() ?? '', 413, tooLarge.detail));
    }
    inFlight += 1;
    handleTrpc(res, req, state, { core, maxQueuedBytes: config.wsMaxBufferedBytes }, config.maxBodyBytes, log)
      .catch((err) => {
        log.error({ err: core.redactor.redact(String(err)) }, 'trpc transport error');
        if (!state.aborted) {
          try {
            sendJson(res, state, 500, { detail: 'Internal Server Error' });
          } catch {
            /* response already started */
          }
        }
      })
      .finally(done);
  });

  app.any('/*', (res, req) => {
    const state = watchAbort(res);
    const method = req.getMethod().toUpperCase();
    const url = req.getUrl();
    const { route, params, methods } = routes.match(method, url);
    state.metric = route ? routeMetrics.get(route) : unmatchedMetric(method);
    const verdict = checkBrowserRequest(guard, req.getHeader('host'), req.getHeader('origin'), method !== 'GET' && method !== 'HEAD');
    if (verdict) return sendJson(res, state, verdict.status, { detail: verdict.detail });
    // the key is checked before 404/405 so routes cannot be listed without it
    if (keys.length && (route || url.startsWith('/api')) && !keyMatches(req.getHeader('x-session-api-key'), keys)) {
      return sendJson(res, state, 401, { detail: 'Unauthorized' });
    }
    if (!route) {
      if (methods.length) return send(res, state, 405, '{"detail":"Method Not Allowed"}', 'application/json', { allow: methods.join(', ') });
      return sendJson(res, state, 404, { detail: 'Not Found' });
    }
    if (draining) return sendJson(res, state, 503, { detail: 'Server is shutting down' });
    const rawQuery = req.getQuery() ?? '';
    const query = parseQuery(rawQuery);
    if (!route.body) {
      inFlight += 1;
      return void dispatch(res, state, route, { params, query, rawQuery, body: undefined }).finally(done);
    }
    if (route.body === 'multipart') {
      inFlight += 1;
      return void readUpload(res, state, route, { params, query, rawQuery, body: undefined }, req.getHeader('content-type')).finally(done);
    }
    // a cross-site "simple" request cannot send this type: no body without it, even an empty one
    if (!isJsonContentType(req.getHeader('content-type'))) {
      return sendJson(res, state, 415, { detail: 'Content-Type must be application/json' });
    }
    const declared = Number(req.getHeader('content-length') || 0);
    if (declared > config.maxBodyBytes) return sendJson(res, state, 413, tooLarge);
    inFlight += 1;
    readJsonBody(res, config.maxBodyBytes, declared)
      .then((text) => {
        if (text.trim() === '') {
          return sendJson(res, state, 422, { detail: [{ type: 'missing', loc: ['body'], msg: 'Field required', input: null }] });
        }
        let body: unknown;
        try {
          body = JSON.parse(text);
        } catch (err) {
          return sendJson(res, state, 422, {
            detail: [
              { type: 'json_invalid', loc: ['body', jsonErrorPosition(err, text)], msg: 'JSON decode error', input: {}, ctx: { error: 'Invalid JSON' } },
            ],
          });
        }
        return dispatch(res, state, route, { params, query, rawQuery, body });
      })
      .catch((err) => {
        if (err instanceof BodyTooLarge) sendJson(res, state, 413, { detail: err.message });
        else sendJson(res, state, 500, toHttpError(err, undefined, route.loc, log, core.redactor).body);
      })
      .finally(done);
  });

  /** POST /api/file/upload: the multipart body's `file` part is the input's body. */
  async function readUpload(res: HttpResponse, state: ResState, route: Route, r: RouteRequest, contentType: string) {
    if (!isMultipart(contentType)) return sendJson(res, state, 415, { detail: 'Content-Type must be multipart/form-data' });
    let bytes: Buffer;
    try {
      bytes = await readBytes(res, config.maxBodyBytes);
    } catch {
      return sendJson(res, state, 413, tooLarge);
    }
    const refused = multipartPartsError(bytes, contentType);
    if (refused) return sendJson(res, state, 413, { detail: refused });
    const file = await multipartFile(bytes, contentType);
    if (!file) return sendJson(res, state, 422, { detail: [{ type: 'missing', loc: ['body', 'file'], msg: 'Field required', input: null }] });
    return dispatch(res, state, route, { ...r, body: file });
  }

  async function dispatch(res: HttpResponse, state: ResState, route: Route, r: RouteRequest) {
    let input: unknown;
    const target: RouteTarget = route.pick(r);
    try {
      input = target.input(r);
      const out = await call(target.operation, input);
      // events/search: written as it is read
      if (out instanceof EventPage) return await streamPage(res, state, out, eventJson);
      // a file's bytes go out as they are
      if (out instanceof FileBytes)
        return send(res, state, 200, Buffer.from(out.bytes), 'application/octet-stream', {
          'content-disposition': `attachment; filename="${out.name.replace(/[^\w.-]/g, '_')}"`,
        });
      sendJson(res, state, target.status, out);
    } catch (err) {
      const e = toHttpError(err, input, target.loc, log, core.redactor);
      sendJson(res, state, e.status, e.body);
    }
  }

  return new Promise((resolve, reject) => {
    app.listen(config.host, config.port, (listenSocket: us_listen_socket | false) => {
      if (!listenSocket) return reject(new Error(`cannot listen on ${config.host}:${config.port} (port in use or address unavailable)`));
      const port = us_socket_local_port(listenSocket as never);
      resolve({
        port,
        async stop(timeoutMs = 8000) {
          draining = true;
          us_listen_socket_close(listenSocket);
          sockets.closeAll();
          if (inFlight > 0) {
            await new Promise<void>((r) => {
              onIdle = r;
              setTimeout(r, timeoutMs).unref();
            });
          }
        },
      });
    });
  });
}
