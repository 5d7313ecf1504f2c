/**
 * The one door every request passes, whichever route it is for (REST, /trpc, the WebSocket upgrade,
 * /metrics, the console's files): one function, `Door.admit`, applies the same rules in the same
 * order (like fastify's onRequest → preValidation hooks) and answers either who is asking (a
 * `Principal`) or why not (a `Refusal`: the status and the detail to send). Each route says which
 * rules apply to it (`DoorRules`); how a refusal is written (a JSON body, a tRPC error, the
 * upgrade's status line) is the route's.
 *
 * The order, each rule cheaper than the next and none reading the body:
 *  1. Host (421): without a session key only a loopback Host is answered (DNS rebinding, guard.ts);
 *  2. Origin (403): a state-changing request or an upgrade carrying a foreign Origin (guard.ts);
 *  3. credentials (401), before any validation, 404 or 405: a daemon key in `X-Session-API-Key`
 *     (or, for the upgrade, `session_api_key` in the query), else a conversation's own key there
 *     (src/conversation/conversation-keys.ts), else a signed-in browser's session cookie where the
 *     route takes cookies. A keyless daemon trusts every (loopback) caller;
 *     A workspace session's cookie counts only on the GET routes of a workspace's files served to be
 *     shown (`DoorRules.workspaceSession`), which pages embed without a header;
 *  3b. a conversation's key (403) opens only the routes of its conversation: those naming it
 *     (`DoorRules.conversationId`) and the runtime routes that name none and act on the key's
 *     conversation (`DoorRules.byConversationKey`); not another conversation, not settings, not a
 *     new conversation, not /trpc or /metrics;
 *  4. a cookie's own origin rule (403): a session cookie authorises only requests from the daemon's
 *     own origin: an Origin that is not it is refused even for reads (ALLOWED_ORIGINS is for apps
 *     holding a key, not for cookies), and a request with no Origin may use the cookie only to read
 *     (GET/HEAD; browsers send Origin on every other fetch and on every WebSocket upgrade), so a
 *     state change made with a cookie always comes from the daemon's own pages (CSRF);
 *  5. Content-Type (415): a JSON body needs `application/json` (a cross-site "simple" request cannot
 *     send it), an upload `multipart/form-data`;
 *  6. size (413): a declared Content-Length over MAX_BODY_BYTES is refused before reading a byte.
 *
 * A request that needs none of this pays for little: the constant answers below are shared, and a
 * keyless daemon's hot path reads three headers (Host, Origin, Content-Type) and Content-Length.
 */
import crypto from 'node:crypto';
import { checkBrowserRequest, isJsonContentType, isSameOrigin, type GuardOptions } from './guard.js';
import { isMultipart } from './multipart.js';
import type { BrowserSessions } from './sessions.js';

/** Which conversation a conversation's own key opens (src/conversation/conversation-keys.ts). */
interface ConversationKeyCheck {
  conversationOf(key: string | null | undefined): string | null;
}

/**
 * Who is asking. Every kind but `conversation` opens the whole daemon; a conversation's key opens
 * that conversation only (rule 3b).
 */
export type Principal =
  /** No key is configured: every caller the Host rule lets in (loopback) is trusted. */
  | { kind: 'keyless' }
  /** One of the daemon's keys (SESSION_API_KEY / SESSION_API_KEYS). */
  | { kind: 'daemon-key' }
  /** A browser signed in through `/?token=`, by its session cookie (the id, never logged). */
  | { kind: 'browser'; sessionId: string }
  /**
   * A browser's workspace session (its cookie, made with a key): GET of a workspace's files served
   * to be shown, of its conversation only when a conversation's key made it.
   */
  | { kind: 'workspace'; sessionId: string; conversationId: string | null }
  /** A conversation's own key (`session_api_key` in its answers): that conversation's routes only. */
  | { kind: 'conversation'; conversationId: string }
  /** No credentials: a public route, or an upgrade whose key comes in its first frame. */
  | { kind: 'anonymous' };

interface Refusal {
  status: 401 | 403 | 413 | 415 | 421;
  detail: string;
}

export type Admission = { ok: true; principal: Principal } | ({ ok: false } & Refusal);

export interface DoorRules {
  /** `required`: credentials or 401; `deferred`: the upgrade, whose key may come in its first frame; `public`: none needed. */
  auth: 'required' | 'deferred' | 'public';
  /** Whether a signed-in browser's cookie counts here (/api, /trpc, the socket; not /metrics). */
  cookie: boolean;
  /** A state change (anything but GET/HEAD/OPTIONS) or an upgrade: a foreign Origin is refused. */
  stateChanging: boolean;
  /** The body the route reads, if any: its Content-Type and declared size are checked. */
  body?: 'json' | 'multipart' | null;
  /** The most its declared size may be, when not MAX_BODY_BYTES (an upload streams to its sandbox: its own limit). */
  bodyLimit?: number;
  /** The conversation the request concerns (a path parameter), for principals that open one conversation only. */
  conversationId?: string | null;
  /** A runtime route that names no conversation: with a conversation's key it acts on that conversation. */
  byConversationKey?: boolean;
  /** A workspace's files served to be shown (GET): a browser's workspace session cookie counts here. */
  workspaceSession?: boolean;
}

/** Files served to browsers (the console's, a web app's): public; a GET changes nothing, so only the Host rule applies. */
export const STATIC_FILES: DoorRules = Object.freeze({ auth: 'public', cookie: false, stateChanging: false });

/** What admission reads of a request: uWS's HttpRequest, or anything answering the same. */
interface Head {
  getHeader(lowerCaseName: string): string;
}

interface DoorOptions extends GuardOptions {
  keys: string[];
  maxBodyBytes: number;
  sessions: BrowserSessions;
  /** Workspace sessions (`POST /api/auth/workspace-session`), for the routes that take them. */
  workspaceSessions?: BrowserSessions;
  conversationKeys?: ConversationKeyCheck;
}

const KEYLESS: Admission = Object.freeze({ ok: true, principal: Object.freeze({ kind: 'keyless' }) });
const DAEMON_KEY: Admission = Object.freeze({ ok: true, principal: Object.freeze({ kind: 'daemon-key' }) });
const ANONYMOUS: Admission = Object.freeze({ ok: true, principal: Object.freeze({ kind: 'anonymous' }) });
const UNAUTHORIZED = Object.freeze({ ok: false, status: 401, detail: 'Unauthorized' }) as Admission;
const NOT_JSON = Object.freeze({ ok: false, status: 415, detail: 'Content-Type must be application/json' }) as Admission;
const NOT_MULTIPART = Object.freeze({ ok: false, status: 415, detail: 'Content-Type must be multipart/form-data' }) as Admission;
const FOREIGN_COOKIE = Object.freeze({
  ok: false,
  status: 403,
  detail: "A signed-in browser's session is accepted only from the daemon's own origin (and without an Origin only to read)",
}) as Admission;
const OTHER_CONVERSATION = Object.freeze({ ok: false, status: 403, detail: "This key opens its own conversation's routes only" }) as Admission;

/** A conversation id in either form (dashed or 32 hex, any case) as 32 lowercase hex: how a path's id is compared with a key's. */
const hexOf = (id: string) => id.replace(/-/g, '').toLowerCase();

/** Whether a conversation's key may use a route (rule 3b). */
function mayUse(conversationId: string, rules: DoorRules): boolean {
  if (rules.conversationId) return hexOf(rules.conversationId) === hexOf(conversationId);
  return rules.byConversationKey === true;
}

const sha256 = (s: string) => crypto.createHash('sha256').update(s).digest();

export class Door {
  /** The keys' digests, made once: a request hashes only what it presents. */
  private readonly keyDigests: Buffer[];
  private readonly tooLarge: Admission;

  constructor(private readonly opts: DoorOptions) {
    this.keyDigests = opts.keys.map(sha256);
    this.tooLarge = Object.freeze({ ok: false, status: 413, detail: `Request body exceeds ${opts.maxBodyBytes} bytes` }) as Admission;
  }

  /** Whether the daemon has keys (then every non-public route needs credentials). */
  get keyed(): boolean {
    return this.keyDigests.length > 0;
  }

  get maxBodyBytes(): number {
    return this.opts.maxBodyBytes;
  }

  /** Constant-time membership of a presented key among the daemon's keys. */
  keyMatches(given: string | null | undefined): boolean {
    if (!given) return false;
    const g = sha256(given);
    let ok = false;
    for (const k of this.keyDigests) if (crypto.timingSafeEqual(g, k)) ok = true;
    return ok;
  }

  /** The conversation a conversation's own key opens (lowercase dashed id), or null: not such a key. */
  conversationOf(key: string | null | undefined): string | null {
    return this.opts.conversationKeys?.conversationOf(key) ?? null;
  }

  /**
   * Whether a key presented in a socket's first frame opens that socket's conversation: a daemon key,
   * or that conversation's own key.
   */
  socketKeyMatches(key: string, conversationId: string | null): boolean {
    if (this.keyMatches(key)) return true;
    const of = this.conversationOf(key);
    return of !== null && conversationId !== null && hexOf(of) === hexOf(conversationId);
  }

  /**
   * The rules above, in order, for one request. `presentedKey` replaces the header's key where a
   * route takes it from elsewhere (the upgrade's `session_api_key` query parameter).
   */
  admit(req: Head, rules: DoorRules, presentedKey?: string): Admission {
    const host = req.getHeader('host');
    const origin = req.getHeader('origin');
    const verdict = checkBrowserRequest(this.opts, host, origin, rules.stateChanging);
    if (verdict) return { ok: false, ...verdict };
    const who = this.identify(req, rules, presentedKey);
    if (!who.ok) return who;
    const p = who.principal;
    if (p.kind === 'conversation' && !mayUse(p.conversationId, rules)) return OTHER_CONVERSATION;
    if (p.kind === 'workspace' && p.conversationId !== null && !mayUse(p.conversationId, rules)) return OTHER_CONVERSATION;
    if (p.kind === 'browser' && (origin ? !isSameOrigin(host, origin) : rules.stateChanging)) return FOREIGN_COOKIE;
    if (rules.body) {
      const type = req.getHeader('content-type');
      // a cross-site "simple" request cannot send this type: no body without it, even an empty one
      if (rules.body === 'json' ? !isJsonContentType(type) : !isMultipart(type)) return rules.body === 'json' ? NOT_JSON : NOT_MULTIPART;
      const limit = rules.bodyLimit ?? this.opts.maxBodyBytes;
      if (Number(req.getHeader('content-length') || 0) > limit) {
        return limit === this.opts.maxBodyBytes ? this.tooLarge : { ok: false, status: 413, detail: `Request body exceeds ${limit} bytes` };
      }
    }
    return who;
  }

  /** Rule 3: who presents which credentials. */
  private identify(req: Head, rules: DoorRules, presentedKey?: string): Admission {
    if (!this.keyed) return KEYLESS;
    if (rules.auth === 'public') return ANONYMOUS;
    const key = presentedKey ?? req.getHeader('x-session-api-key');
    if (key) {
      if (this.keyMatches(key)) return DAEMON_KEY;
      const conversationId = this.conversationOf(key);
      return conversationId ? { ok: true, principal: { kind: 'conversation', conversationId } } : UNAUTHORIZED;
    }
    if (rules.cookie) {
      const sessionId = this.opts.sessions.fromCookieHeader(req.getHeader('cookie'));
      // a session cookie that is not (or no longer) valid is a wrong credential, not a missing one
      if (sessionId !== null) return this.opts.sessions.touch(sessionId) ? { ok: true, principal: { kind: 'browser', sessionId } } : UNAUTHORIZED;
    }
    const workspace = rules.workspaceSession ? this.opts.workspaceSessions : undefined;
    if (workspace) {
      const sessionId = workspace.fromCookieHeader(req.getHeader('cookie'));
      if (sessionId !== null) {
        if (!workspace.touch(sessionId)) return UNAUTHORIZED;
        return { ok: true, principal: { kind: 'workspace', sessionId, conversationId: workspace.scopeOf(sessionId) } };
      }
    }
    return rules.auth === 'deferred' ? ANONYMOUS : UNAUTHORIZED;
  }
}
