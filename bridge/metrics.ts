/**
 * GET /metrics (Prometheus text) and the per-route request metric. On the API port /metrics sits
 * behind the session keys like /api; METRICS_PORT adds a listener that serves only /metrics,
 * without a key (for a scraper on a private network).
 */
import type { Logger } from 'pino';
import { metrics, render, type HistogramChild } from '../src/metrics.js';
import type { Door } from './admission.js';
import { send, sendJson, watchAbort } from './http.js';
import { App, us_listen_socket_close, us_socket_local_port, type HttpResponse, type TemplatedApp, type us_listen_socket } from './uws.js';

/** One route template's request metric: a cached child per status, so a request costs one lookup and an increment. */
export class RouteMetric {
  private byStatus = new Map<number, HistogramChild>();
  constructor(
    private readonly method: string,
    private readonly route: string,
  ) {}
  end(status: number, t0: number): void {
    let c = this.byStatus.get(status);
    if (!c) this.byStatus.set(status, (c = metrics.httpRequests.child(this.method, this.route, String(status))));
    c.observe((performance.now() - t0) / 1000);
  }
}

const METHODS = new Set(['GET', 'POST', 'PUT', 'PATCH', 'DELETE', 'HEAD', 'OPTIONS']);
const unmatched = new Map<string, RouteMetric>();
/** Requests no route matched (404/405), by method; a made-up method is counted as OTHER (bounded labels). */
export function unmatchedMetric(method: string): RouteMetric {
  const m = METHODS.has(method) ? method : 'OTHER';
  let r = unmatched.get(m);
  if (!r) unmatched.set(m, (r = new RouteMetric(m, '(unmatched)')));
  return r;
}

function serve(res: HttpResponse, metric: RouteMetric, log: Logger) {
  const state = watchAbort(res, metric);
  render().then(
    ({ contentType, body }) => send(res, state, 200, body, contentType),
    (err) => {
      log.error({ err: String(err) }, 'rendering metrics failed');
      sendJson(res, state, 500, { detail: 'Internal Server Error' });
    },
  );
}

/** GET /metrics on the API app, behind the door: a key when there are any (a browser's cookie is not one here). */
export function mountMetrics(app: TemplatedApp, door: Door, log: Logger): void {
  const metric = new RouteMetric('GET', '/metrics');
  app.get('/metrics', (res, req) => {
    const admission = door.admit(req, { auth: 'required', cookie: false, stateChanging: false });
    if (!admission.ok) return sendJson(res, watchAbort(res, metric), admission.status, { detail: admission.detail });
    serve(res, metric, log);
  });
}

/** The separate, key-less metrics listener (METRICS_PORT): /metrics only, for a scraper on a private network (no door: any Host, no key). */
export function startMetricsServer(host: string, port: number, log: Logger): Promise<{ port: number; stop(): void }> {
  const app = App();
  const metric = new RouteMetric('GET', '/metrics');
  app.get('/metrics', (res) => serve(res, metric, log));
  app.any('/*', (res) => sendJson(res, watchAbort(res), 404, { detail: 'Not Found' }));
  return new Promise((resolve, reject) => {
    app.listen(host, port, (s: us_listen_socket | false) => {
      if (!s) return reject(new Error(`cannot listen for metrics on ${host}:${port} (port in use or address unavailable)`));
      resolve({ port: us_socket_local_port(s as never), stop: () => us_listen_socket_close(s) });
    });
  });
}
