/**
 * The uWS app, put together: the door every request passes (admission.ts), then the routes —
 * health and the API's description (public, no door), /metrics, the web console's files (and a web
 * app's, WEB_APP_DIR) and the browser sign-in, /sockets/events/*, /trpc/*, and the REST table — and the listen/stop cycle.
 * Transport concerns only: bodies, limits, who is asking, error mapping; `src/` decides.
 */
import type { Logger } from 'pino';
import { runOperation } from '../src/api/operations.js';
import type { Config } from '../src/config.js';
import type { Core } from '../src/core.js';
import { Door } from './admission.js';
import { mountConsole } from './console.js';
import { mountDocs } from './docs.js';
import { send, sendJson, watchAbort } from './http.js';
import { mountMetrics, RouteMetric } from './metrics.js';
import { buildOpenApi } from './openapi.js';
import { type InFlight, mountRest } from './rest.js';
import { RouteTable, tableRoutes } from './routes.js';
import { BrowserSessions, WORKSPACE_COOKIE } from './sessions.js';
import { mountSignOut } from './sign-in.js';
import { mountTrpc } from './trpc.js';
import { App, type HttpResponse, type TemplatedApp, us_listen_socket_close, us_socket_local_port, type us_listen_socket } from './uws.js';
import { mountWebApp } from './web-app.js';
import { mountWorkspaceSessions } from './workspace-session.js';
import { mountEventSockets } from './ws.js';
import { AGENT_SERVER_API_VERSION } from '../src/conversation/agent-server-info.js';

const VERSION = '0.1.0';

export interface Daemon {
  port: number;
  /** Stop accepting, wait for in-flight requests (bounded), close sockets with 1001. */
  stop(timeoutMs?: number): Promise<void>;
}

export function startServer(config: Config, core: Core, log: Logger): Promise<Daemon> {
  const app = App();
  const sessions = new BrowserSessions(config.browserSession);
  const workspaceSessions = new BrowserSessions(config.browserSession, Date.now, WORKSPACE_COOKIE);
  const door = new Door({
    keys: config.sessionApiKeys,
    allowedOrigins: config.allowedOrigins,
    loopbackOnly: config.sessionApiKeys.length === 0,
    maxBodyBytes: config.maxBodyBytes,
    sessions,
    workspaceSessions,
    conversationKeys: core.conversationKeys,
  });
  const inFlight = inFlightCounter();

  const sockets = mountEventSockets(app, core, log, {
    door,
    maxBufferedBytes: config.wsMaxBufferedBytes,
    maxSubscribers: config.wsMaxSubscribers,
    sendMessage: (id, body) => runOperation(core, 'sendMessage', { conversation_id: id, message: body }),
  });
  mountPublic(app, core, () => inFlight.draining, door.keyed);
  mountMetrics(app, door, log);
  mountDocs(app);
  // a web app takes `/` (and every path no other route takes): the console moves to /console/
  mountConsole(app, door, sessions, config.webAppDir ? '/console' : '');
  if (config.webAppDir) mountWebApp(app, door, sessions, config.webAppDir);
  mountSignOut(app, door, sessions);
  mountWorkspaceSessions(app, door, workspaceSessions);
  mountTrpc(app, core, log, door, inFlight, config.wsMaxBufferedBytes);
  mountRest(app, { core, log, door, routes: new RouteTable(tableRoutes()), inFlight });
  return listen(app, config, inFlight, () => sockets.closeAll());
}

/** Health, the server's description and the OpenAPI document: public, and outside the door (a supervisor's probe names any Host). */
function mountPublic(app: TemplatedApp, core: Core, draining: () => boolean, keyed: boolean): void {
  const fixed = (path: string) => new RouteMetric('GET', path);
  const health = (res: HttpResponse, metric: RouteMetric, body: unknown, status = 200) => sendJson(res, watchAbort(res, metric), status, body);
  const [alive, healthy, ready, info] = ['/alive', '/health', '/ready', '/server_info'].map(fixed) as [RouteMetric, RouteMetric, RouteMetric, RouteMetric];
  app.get('/alive', (res) => health(res, alive, { status: 'ok' }));
  app.get('/health', (res) => health(res, healthy, { status: 'ok' }));
  app.get('/ready', (res) => (draining() ? health(res, ready, { status: 'draining' }, 503) : health(res, ready, { status: 'ready' })));
  app.get('/server_info', (res) =>
    health(res, info, {
      title: 'Parley',
      // the agent-server API version (OpenHands' client gates features on it); Parley's interface version beside it
      version: AGENT_SERVER_API_VERSION,
      interface_version: VERSION,
      uptime: Math.floor((Date.now() - core.startedAt) / 1000),
      idle_time: Math.floor((Date.now() - core.events.lastActivity) / 1000),
      docs: '/docs',
      node_version: process.version,
      sandbox: core.sandbox.info(),
    }),
  );
  // generated on first request: converting every zod schema takes tens of ms the start does not need to wait for
  let openapi: string | null = null;
  const openapiMetric = fixed('/openapi.json');
  app.get('/openapi.json', (res) => send(res, watchAbort(res, openapiMetric), 200, (openapi ??= JSON.stringify(buildOpenApi(VERSION, keyed)))));
}

/** Requests being answered; `stop` waits for them (bounded). */
function inFlightCounter(): InFlight & { idle(timeoutMs: number): Promise<void> } {
  let n = 0;
  let onIdle: (() => void) | null = null;
  return {
    draining: false,
    begin: () => void (n += 1),
    done() {
      n -= 1;
      if (n === 0 && onIdle) onIdle();
    },
    idle: (timeoutMs) =>
      n === 0
        ? Promise.resolve()
        : new Promise<void>((r) => {
            onIdle = r;
            setTimeout(r, timeoutMs).unref();
          }),
  };
}

function listen(app: TemplatedApp, config: Config, inFlight: ReturnType<typeof inFlightCounter>, closeSockets: () => void): Promise<Daemon> {
  return new Promise((resolve, reject) => {
    app.listen(config.host, config.port, (listenSocket: us_listen_socket | false) => {
      if (!listenSocket) return reject(new Error(`cannot listen on ${config.host}:${config.port} (port in use or address unavailable)`));
      resolve({
        port: us_socket_local_port(listenSocket as never),
        async stop(timeoutMs = 8000) {
          inFlight.draining = true;
          us_listen_socket_close(listenSocket);
          closeSockets();
          await inFlight.idle(timeoutMs);
        },
      });
    });
  });
}
