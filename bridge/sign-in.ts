/**
 * The browser's way in and out (sessions.ts says what a session is):
 *
 * - `GET /?token=<key>`: a daemon key answers `303 See Other` to `/` with the session cookie, so the
 *   address bar and the history keep no token; a wrong (or empty) token answers 401 and sets no
 *   cookie; a keyless daemon needs no sign-in and only drops the token from the address (303, no
 *   cookie). The answer is never cached and sends no Referer onwards.
 * - `POST /api/logout`: ends the session and clears the cookie (200 `{"status":"signed_out"}`).
 *   It passes the door like every /api route: a cookie from the daemon's own origin, or a key.
 */
import type { Door } from './admission.js';
import { send, sendJson, watchAbort, type ResState } from './http.js';
import { RouteMetric } from './metrics.js';
import { type BrowserSessions, overTls } from './sessions.js';
import type { HttpRequest, HttpResponse, TemplatedApp } from './uws.js';

const NO_STORE = { 'cache-control': 'no-store', 'referrer-policy': 'no-referrer' };

/** Whether a request for `/` is a sign-in (`?token=`, even empty). */
export const isSignIn = (query: string) => /(^|&)token=/.test(query);

const tls = (req: HttpRequest) => overTls(req.getHeader('x-forwarded-proto'), req.getHeader('forwarded'));

/** `GET /?token=…`, after the door's Host rule (the caller's). */
export function signIn(res: HttpResponse, req: HttpRequest, state: ResState, door: Door, sessions: BrowserSessions): void {
  if (!door.keyed) return send(res, state, 303, '', 'text/plain; charset=utf-8', { location: '/', ...NO_STORE });
  // the token is read from the query here and nowhere else: no log line, metric or error carries it
  if (!door.keyMatches(req.getQuery('token') ?? '')) return send(res, state, 401, '{"detail":"Unauthorized"}', 'application/json', NO_STORE);
  const cookie = sessions.cookie(sessions.create(), tls(req));
  send(res, state, 303, '', 'text/plain; charset=utf-8', { location: '/', 'set-cookie': cookie, ...NO_STORE });
}

export function mountSignOut(app: TemplatedApp, door: Door, sessions: BrowserSessions): void {
  const metric = new RouteMetric('POST', '/api/logout');
  app.post('/api/logout', (res, req) => {
    const state = watchAbort(res, metric);
    const admission = door.admit(req, { auth: 'required', cookie: true, stateChanging: true });
    if (!admission.ok) return sendJson(res, state, admission.status, { detail: admission.detail });
    if (admission.principal.kind === 'browser') sessions.end(admission.principal.sessionId);
    send(res, state, 200, '{"status":"signed_out"}', 'application/json', { 'set-cookie': sessions.clearingCookie(tls(req)), ...NO_STORE });
  });
}
