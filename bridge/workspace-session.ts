/**
 * Workspace sessions, for pages that embed a workspace's files (`<iframe src>`, `<img src>`, a link):
 * such requests cannot carry `X-Session-API-Key`, so a client holding a key trades it for a cookie
 * that reaches only those files (`GET /api/conversations/{id}/workspace/…`, served each in a sandboxed
 * origin of its own: bridge/file-transfer.ts), as OpenHands' agent server offers:
 *
 * - `POST /api/auth/workspace-session`: with a key (or a signed-in browser's cookie), `204` and the
 *   cookie (sessions.ts, WORKSPACE_COOKIE: a random id, never the key, `HttpOnly`, `Path=/api/conversations`).
 *   Made with a conversation's own key, it reaches that conversation's files only.
 * - `DELETE /api/auth/workspace-session`: ends the session the request's cookie names (if any) and
 *   clears the cookie: `204`.
 * Both pass the door's Host and Origin rules like every state change.
 */
import type { Door } from './admission.js';
import { send, sendJson, watchAbort } from './http.js';
import { RouteMetric } from './metrics.js';
import { type BrowserSessions, overTls } from './sessions.js';
import type { HttpRequest, TemplatedApp } from './uws.js';

const PATH = '/api/auth/workspace-session';
const NO_STORE = { 'cache-control': 'no-store' };
const tls = (req: HttpRequest) => overTls(req.getHeader('x-forwarded-proto'), req.getHeader('forwarded'));

export function mountWorkspaceSessions(app: TemplatedApp, door: Door, sessions: BrowserSessions): void {
  const made = new RouteMetric('POST', PATH);
  const ended = new RouteMetric('DELETE', PATH);
  app.post(PATH, (res, req) => {
    const state = watchAbort(res, made);
    // a conversation's own key may make one: of its conversation (byConversationKey)
    const admission = door.admit(req, { auth: 'required', cookie: true, stateChanging: true, byConversationKey: true });
    if (!admission.ok) return sendJson(res, state, admission.status, { detail: admission.detail });
    const p = admission.principal;
    const id = sessions.create(p.kind === 'conversation' ? p.conversationId : null);
    send(res, state, 204, '', 'text/plain; charset=utf-8', { 'set-cookie': sessions.cookie(id, tls(req)), ...NO_STORE });
  });
  app.del(PATH, (res, req) => {
    const state = watchAbort(res, ended);
    const admission = door.admit(req, { auth: 'public', cookie: false, stateChanging: true });
    if (!admission.ok) return sendJson(res, state, admission.status, { detail: admission.detail });
    const id = sessions.fromCookieHeader(req.getHeader('cookie'));
    if (id) sessions.end(id);
    send(res, state, 204, '', 'text/plain; charset=utf-8', { 'set-cookie': sessions.clearingCookie(tls(req)), ...NO_STORE });
  });
}
