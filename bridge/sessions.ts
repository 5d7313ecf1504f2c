/**
 * Browser sign-in when the daemon has a key: `GET /?token=<key>` trades the key for a session
 * cookie and redirects to `/`, so a web app served by the daemon (same origin) calls `/api`, `/trpc`
 * and the socket without ever holding the key, and the address bar and history keep no token.
 *
 * - The cookie holds a random id (32 bytes from the CSPRNG, base64url), never the key; it is
 *   `HttpOnly` (no script reads it), `SameSite=Strict` (no other site's page sends it), `Path=/`, and
 *   `Secure` when the browser reached the daemon over TLS: the daemon serves plain HTTP itself, so
 *   that is when a proxy in front says so (`X-Forwarded-Proto: https` or `Forwarded: proto=https`).
 *   Trusting that header costs nothing: a forged one only makes a browser keep the cookie for https.
 * - Which requests a cookie authorises, and from which origin, is the door's rule (admission.ts).
 * - Sessions live in this process's memory: a restart signs every browser out, and in a cluster a
 *   session is known to the node that made it only (route a browser to one node). The store was
 *   not chosen: a session is a convenience of one browser, and keeping it out of the store keeps the
 *   sign-in path from writing to disk and the id out of every backup.
 * - A session ends after `idleMs` without a request, `maxMs` after sign-in, or at sign-out. At most
 *   MAX_SESSIONS are held (a sign-in needs the key, but memory is bounded anyway): the oldest goes.
 * - Neither the id nor the token is ever logged: the request metric counts `/` by its template, and
 *   no log line carries a query string or a cookie.
 */
import crypto from 'node:crypto';

/** A kind of session cookie: its name, the paths it is sent to, and its SameSite rule (over TLS or not). */
export interface SessionCookie {
  name: string;
  path: string;
  sameSite: (secure: boolean) => 'Strict' | 'Lax' | 'None';
}

/** The signed-in browser's: every route of the daemon, from its own pages only. */
const BROWSER_COOKIE: SessionCookie = { name: 'parley_session', path: '/', sameSite: () => 'Strict' };

/**
 * A workspace session's (`POST /api/auth/workspace-session`): it only reads a workspace's files
 * served to be shown (the routes under /api/conversations that take it), so pages may embed them.
 * Over TLS `SameSite=None` (a page of another site, or a workspace page in its own sandboxed
 * origin, loads them), else `Lax` (a browser keeps a `None` cookie only with `Secure`).
 */
export const WORKSPACE_COOKIE: SessionCookie = { name: 'parley_workspace', path: '/api/conversations', sameSite: (secure) => (secure ? 'None' : 'Lax') };

const MAX_SESSIONS = 10_000;
const ID_SHAPE = /^[A-Za-z0-9_-]{43}$/;

interface Session {
  created: number;
  seen: number;
  /** The conversation it is limited to (made with that conversation's key), or null: every one the maker could reach. */
  scope: string | null;
}

export interface SessionLifetimes {
  /** A session unused this long ends. */
  idleMs: number;
  /** A session ends this long after sign-in, used or not. */
  maxMs: number;
}

export class BrowserSessions {
  private readonly sessions = new Map<string, Session>();

  constructor(
    private readonly lifetimes: SessionLifetimes,
    private readonly now: () => number = Date.now,
    private readonly kind: SessionCookie = BROWSER_COOKIE,
  ) {}

  /** A new session; its id goes in the cookie only. */
  create(scope: string | null = null): string {
    this.sweep();
    if (this.sessions.size >= MAX_SESSIONS) this.sessions.delete(this.sessions.keys().next().value!);
    const id = crypto.randomBytes(32).toString('base64url');
    const t = this.now();
    this.sessions.set(id, { created: t, seen: t, scope });
    return id;
  }

  /** Whether the session is valid; a valid one counts as used now (its idle time starts again). */
  touch(id: string): boolean {
    const s = this.sessions.get(id);
    if (!s) return false;
    const t = this.now();
    if (t - s.seen > this.lifetimes.idleMs || t - s.created > this.lifetimes.maxMs) {
      this.sessions.delete(id);
      return false;
    }
    s.seen = t;
    return true;
  }

  /** The conversation a valid session is limited to (null: none), after `touch`. */
  scopeOf(id: string): string | null {
    return this.sessions.get(id)?.scope ?? null;
  }

  end(id: string): void {
    this.sessions.delete(id);
  }

  /** The session id a `Cookie` header carries (`parley_session=…`), or null when it carries none. */
  fromCookieHeader(header: string): string | null {
    const name = this.kind.name;
    if (!header.includes(name)) return null;
    for (const part of header.split(';')) {
      const eq = part.indexOf('=');
      if (eq < 0 || part.slice(0, eq).trim() !== name) continue;
      const v = part.slice(eq + 1).trim();
      // a malformed value is still a session cookie that was presented: it is simply not a valid one
      return ID_SHAPE.test(v) ? v : '';
    }
    return null;
  }

  /** `Set-Cookie` for a new session; the browser drops it at the absolute lifetime. */
  cookie(id: string, secure: boolean): string {
    return this.setCookie(id, Math.floor(this.lifetimes.maxMs / 1000), secure);
  }

  /** `Set-Cookie` that removes the session cookie. */
  clearingCookie(secure: boolean): string {
    return this.setCookie('', 0, secure);
  }

  private setCookie(value: string, maxAge: number, secure: boolean): string {
    const { name, path, sameSite } = this.kind;
    return `${name}=${value}; Path=${path}; Max-Age=${maxAge}; HttpOnly; SameSite=${sameSite(secure)}${secure ? '; Secure' : ''}`;
  }

  /** Drops expired sessions (on each sign-in: sessions are made rarely, and checked on use anyway). */
  private sweep(): void {
    const t = this.now();
    for (const [id, s] of this.sessions) {
      if (t - s.seen > this.lifetimes.idleMs || t - s.created > this.lifetimes.maxMs) this.sessions.delete(id);
    }
  }
}

/** Whether the browser reached the daemon over TLS, as a proxy in front of it says (the daemon itself serves plain HTTP). */
export function overTls(forwardedProto: string, forwarded: string): boolean {
  if (forwardedProto) return forwardedProto.split(',')[0]!.trim().toLowerCase() === 'https';
  return /(^|[;,\s])proto=("?)https\2(\s*[;,]|$)/i.test(forwarded);
}
