/**
 * Browser-facing checks (docs/security.md, "Browsers"). A page the developer visits can send "simple" cross-site
 * requests (no preflight: no Content-Type or text/plain, any Origin) and open WebSockets to a
 * loopback daemon, and a DNS-rebinding page can even read the answers. Three checks close that:
 *
 * - JSON routes require `Content-Type: application/json` (a simple request cannot send it);
 * - a state-changing request or a WebSocket upgrade that carries an `Origin` must come from the
 *   same origin (its host equals the `Host` header) or from an `ALLOWED_ORIGINS` entry; requests
 *   without `Origin` (curl, SDKs, server-side callers) are not browsers' cross-site requests;
 * - without a session key, only a loopback `Host` is answered: a rebinding page's requests carry
 *   its own domain name as `Host`.
 *
 * Each check is a few string comparisons on headers uWS already parsed: nothing on the hot path
 * allocates more than a header string.
 */

const JSON_TYPE = /^application\/([a-z0-9.+-]*\+)?json\s*(;|$)/i;

/** `Content-Type: application/json` (or `application/*+json`), parameters allowed. */
export function isJsonContentType(contentType: string): boolean {
  return JSON_TYPE.test(contentType);
}

/**
 * The last Host found loopback: a client sends the same Host on every request, so the usual
 * request compares one string instead of lowering, cutting and matching it again. (Only a loopback
 * answer is kept: a refused Host costs its request the whole check.)
 */
let lastLoopbackHost: string | null = null;

/** localhost, 127.0.0.0/8 and ::1, with or without a port. */
function isLoopbackHost(host: string): boolean {
  if (host === lastLoopbackHost) return true;
  if (!checkLoopbackHost(host)) return false;
  lastLoopbackHost = host;
  return true;
}

function checkLoopbackHost(host: string): boolean {
  let h = host.toLowerCase();
  if (h.startsWith('[')) {
    const end = h.indexOf(']');
    return end > 0 && h.slice(1, end) === '::1';
  }
  const colon = h.indexOf(':');
  if (colon >= 0) h = h.slice(0, colon);
  if (h.endsWith('.')) h = h.slice(0, -1);
  return h === 'localhost' || h.endsWith('.localhost') || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(h);
}

export interface GuardOptions {
  /** ALLOWED_ORIGINS, each normalised to `scheme://host[:port]` (lower case). */
  allowedOrigins: string[];
  /** No session key configured: requests must name a loopback host. */
  loopbackOnly: boolean;
}

/** `null` when the request may go on, otherwise the status and the reason to answer. */
type GuardVerdict = { status: 403 | 421; detail: string } | null;

/** Host (DNS rebinding) and Origin (cross-site) checks; `stateChanging` for everything but GET/HEAD/OPTIONS. */
export function checkBrowserRequest(opts: GuardOptions, host: string, origin: string, stateChanging: boolean): GuardVerdict {
  if (opts.loopbackOnly && !isLoopbackHost(host)) {
    return {
      status: 421,
      detail: 'Without a session key only a loopback Host (localhost, 127.0.0.1, [::1]) is answered; set SESSION_API_KEY to serve other names',
    };
  }
  if (stateChanging && origin && !originAllowed(opts, host, origin)) {
    return { status: 403, detail: `Origin ${origin.slice(0, 200)} is not allowed; add it to ALLOWED_ORIGINS` };
  }
  return null;
}

function originAllowed(opts: GuardOptions, host: string, origin: string): boolean {
  return isSameOrigin(host, origin) || opts.allowedOrigins.includes(origin.toLowerCase());
}

/** The daemon's own origin: the browser names the host it connected to, which is what it sent as Host. */
export function isSameOrigin(host: string, origin: string): boolean {
  const o = origin.toLowerCase();
  const sep = o.indexOf('://');
  return sep > 0 && o.slice(sep + 3) === host.toLowerCase();
}
