/**
 * The web console's files: `console/` bundled by scripts/build.mjs into `dist/console/` (an
 * `index.html`, hashed `app-<hash>.js` / `app-<hash>.css`, each with a `.gz` made at build time).
 *
 * - Read from disk on the first request of each file, not at start: a daemon nobody browses never
 *   reads them, and the start does not wait for them.
 * - The page is served for the console's own routes only (`/`, `/conversations/:id`, `/settings`):
 *   explicit uWS routes, so nothing under `/api`, `/sockets`, `/trpc`, `/docs`, `/openapi.json` or
 *   the health routes is shadowed, and every other path still gets the JSON 404.
 * - Assets have content-hashed names: cached for a year (`immutable`); the page is revalidated by
 *   its ETag on every load, so browsers pick up the console of a restarted daemon at once. A file
 *   once read stays in memory (about 130 KB in all): the daemon serves the build it first read.
 * - The page needs no secret to be fetched (the key stays in the tab), so these routes are public;
 *   they pass the door (admission.ts) like every route, so its Host rule (DNS rebinding) applies, and a Content-Security-Policy
 *   keeps the page to its own origin: scripts and styles from the daemon only, requests and
 *   sockets to the daemon only, no framing.
 * - `/?token=<key>` is the browser sign-in (sign-in.ts), answered before the page.
 * - With a web app served at `/` (WEB_APP_DIR, web-app.ts) the console's pages move under `/console`
 *   (`/console/`, `/console/conversations/:id`, `/console/settings`; the page finds its base in its
 *   own address), its files stay where they are, and the web app answers the sign-in.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { type Door, STATIC_FILES } from './admission.js';
import { sendJson, watchAbort, type ResState } from './http.js';
import { RouteMetric } from './metrics.js';
import type { BrowserSessions } from './sessions.js';
import { isSignIn, signIn } from './sign-in.js';
import type { HttpRequest, HttpResponse, TemplatedApp } from './uws.js';
import { contentTypeOf, type ServedFile, serveFile } from './content-types.js';

/** Where the build puts the console: next to the bundled daemon, or `dist/console` when run from source. */
function defaultDir(): string {
  const here = import.meta.url;
  return fileURLToPath(here.endsWith('.ts') ? new URL('../dist/console/', here) : new URL('./console/', here));
}

const PAGE_HEADERS = {
  'content-security-policy':
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; font-src 'self'; " +
    "base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
  'x-content-type-options': 'nosniff',
  'x-frame-options': 'DENY',
  'referrer-policy': 'no-referrer',
  'cache-control': 'no-cache',
};
const ASSET_HEADERS = { 'x-content-type-options': 'nosniff', 'cache-control': 'public, max-age=31536000, immutable' };

type ConsoleFile = ServedFile;

/** Where the console's pages are: `/` by default, `/console` when a web app takes `/`. */
export type ConsoleBase = '' | '/console';

export function mountConsole(app: TemplatedApp, door: Door, sessions: BrowserSessions, base: ConsoleBase = '', dir = defaultDir()): void {
  const files = new Map<string, ConsoleFile>();
  /** `name` of the build directory, read once; null when it is not there (not built). */
  const load = (name: string): ConsoleFile | null => {
    const known = files.get(name);
    if (known) return known;
    let file: ConsoleFile | null = null;
    const type = contentTypeOf(name);
    // names come from the URL: one path segment of the build directory, nothing else
    if (type && /^[A-Za-z0-9_.-]+$/.test(name) && !name.startsWith('.')) {
      try {
        const body = fs.readFileSync(path.join(dir, name));
        let gzip: Buffer | null = null;
        try {
          gzip = fs.readFileSync(path.join(dir, `${name}.gz`));
        } catch {
          /* served uncompressed */
        }
        file = { type, body, gzip, etag: `"${crypto.createHash('sha256').update(body).digest('base64url').slice(0, 22)}"` };
      } catch {
        file = null;
      }
    }
    // unknown names are not remembered: a probe of many names must not grow the map
    if (file) files.set(name, file);
    return file;
  };

  const serve = (res: HttpResponse, req: HttpRequest, state: ResState, file: ConsoleFile, headers: Record<string, string>) =>
    serveFile(res, state, file, headers, req.getHeader('if-none-match'), /\bgzip\b/.test(req.getHeader('accept-encoding')));

  const refused = (res: HttpResponse, req: HttpRequest, state: ResState) => {
    const admission = door.admit(req, STATIC_FILES);
    if (!admission.ok) sendJson(res, state, admission.status, { detail: admission.detail });
    return !admission.ok;
  };

  const pageMetric = new RouteMetric('GET', `${base}/`);
  const page = (res: HttpResponse, req: HttpRequest) => {
    const state = watchAbort(res, pageMetric);
    if (refused(res, req, state)) return;
    if (!base && req.getUrl() === '/' && isSignIn(req.getQuery() ?? '')) return signIn(res, req, state, door, sessions);
    const index = load('index.html');
    if (!index) return sendJson(res, state, 503, { detail: 'The console is not built: run `npm run build`' });
    serve(res, req, state, index, PAGE_HEADERS);
  };
  app.get(`${base}/`, page);
  if (base) app.get(base, page);
  app.get(`${base}/settings`, page);
  app.get(`${base}/conversations/:id`, page);

  const assetMetric = new RouteMetric('GET', '/console/{asset}');
  app.get('/console/*', (res, req) => {
    const state = watchAbort(res, assetMetric);
    if (refused(res, req, state)) return;
    const name = req.getUrl().slice('/console/'.length);
    const file = name === 'index.html' ? null : load(name);
    if (!file) return sendJson(res, state, 404, { detail: 'Not Found' });
    serve(res, req, state, file, ASSET_HEADERS);
  });
}

/** The console's address for the start-up log: a wildcard listen address is reached on loopback. */
export function consoleUrl(host: string, port: number): string {
  const h = host === '0.0.0.0' || host === '' ? '127.0.0.1' : host === '::' ? '[::1]' : host.includes(':') && !host.startsWith('[') ? `[${host}]` : host;
  return `http://${h}:${port}/`;
}

/**
 * The link that signs a browser in, like Jupyter's token link: the key in the fragment, which the
 * browser never sends (no access log, no Referer sees it) and the page removes from the address
 * bar and the history entry at once. Written only to a terminal: the logs (journald, files) get no
 * secret, and the pino logger would redact it anyway.
 */
export function signInLink(url: string, key: string): string {
  return `${url}#key=${encodeURIComponent(key)}`;
}

/**
 * The generic sign-in link (sign-in.ts): `/?token=<key>` answers with a session cookie and a redirect
 * to `/` that leaves no token in the address bar. Unlike the console's fragment, the token is sent to
 * the daemon (once, over the link's own connection); it is read there and never logged. Printed only
 * to a terminal, like the console's.
 */
export function browserSignInLink(url: string, key: string): string {
  return `${url}?token=${encodeURIComponent(key)}`;
}
