/**
 * A single-page web app served at `/` from WEB_APP_DIR (e.g. OpenHands' frontend build: `index.html`,
 * hashed `assets/`, `locales/`, icons), in place of the console (which moves to `/console/`).
 *
 * - Every GET no other route takes comes here, except under `/api`, `/trpc` and `/sockets`, which
 *   are yielded to the REST routes (their JSON 404 included). A file of the directory is served as
 *   it is; a missing one is a 404 under `assets/` or when its name has an extension (a script or a
 *   translation the app asks for must not be answered with HTML), and any other path is a client
 *   route of the app (`/conversations/{id}`, `/settings`…): its `index.html`.
 * - Files are read when first asked for, not at start (the start only checked that `index.html`
 *   exists: src/config.ts), asynchronously, and kept in memory up to CACHE_BYTES (text ones with a
 *   gzip copy made then, off the event loop); a daemon nobody browses reads nothing.
 * - `assets/` holds content-hashed names (Vite's build): cached for a year (`immutable`); every other
 *   file, `index.html` included, is revalidated by its ETag on each load.
 * - Names come from the URL and are confined to the directory: no empty, `.` or `..` segment, no
 *   dot-file (`.env`, `.git`), no NUL or backslash, and the real path (symbolic links resolved) must
 *   stay inside the directory's.
 * - `index.html` carries a Content-Security-Policy whose script sources are the app's own files and
 *   its inline scripts by their SHA-256 hashes, computed from the file when it is first served (a
 *   rebuilt app gets its own hashes on the daemon's next start, with nothing in this code to
 *   change). What the policy allows beyond the daemon's origin is what OpenHands' app loads from the
 *   internet: its fonts (Google Fonts) and its diff viewer (Monaco from jsDelivr); without the
 *   internet those requests fail and the rest of the app works (docs/web-app.md).
 * - The files are public (the page holds no data) and pass the door (admission.ts, STATIC_FILES):
 *   its Host rule applies. `/?token=<key>` is the browser sign-in (sign-in.ts), answered before the page.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import zlib from 'node:zlib';
import { type Door, STATIC_FILES } from './admission.js';
import { sendJson, watchAbort } from './http.js';
import { RouteMetric } from './metrics.js';
import { safeDecode } from './routes.js';
import type { BrowserSessions } from './sessions.js';
import { isSignIn, signIn } from './sign-in.js';
import type { TemplatedApp } from './uws.js';
import { contentTypeOf, type ServedFile, serveFile } from './content-types.js';

/** Paths the REST routes answer (their 404 included): never the app's. */
const NOT_THE_APP = /^\/(api|trpc|sockets)(\/|$)/;
/** The most of the app's files kept in memory; beyond it a file is read for each request. */
const CACHE_BYTES = 64 * 1024 * 1024;
/** A file larger than this is never kept (nor compressed). */
const CACHE_FILE_BYTES = 8 * 1024 * 1024;

const COMPRESSIBLE = /^(text\/|application\/(json|manifest\+json|xml)|image\/svg)/;

/**
 * The origins OpenHands' app loads from the internet (the page works without them): Google Fonts'
 * stylesheet and font files, and the diff viewer (Monaco, pinned by the app's build to this version,
 * its loader, scripts, styles, font and workers all under this path).
 */
const FONT_CSS = 'https://fonts.googleapis.com';
const FONT_FILES = 'https://fonts.gstatic.com';
const DIFF_VIEWER = 'https://cdn.jsdelivr.net/npm/monaco-editor@0.52.2/';

/** The page's policy, with the hashes of its inline scripts. Styles allow inline ones: the app's libraries inject `<style>` elements. */
function contentSecurityPolicy(scriptHashes: string[]): string {
  const hashes = scriptHashes.map((h) => `'sha256-${h}'`).join(' ');
  return [
    "default-src 'self'",
    `script-src 'self' ${hashes} ${DIFF_VIEWER}`,
    `style-src 'self' 'unsafe-inline' ${FONT_CSS} ${DIFF_VIEWER}`,
    `font-src 'self' data: ${FONT_FILES} ${DIFF_VIEWER}`,
    "img-src 'self' data: blob:",
    "media-src 'self'",
    "connect-src 'self'",
    "worker-src 'self' blob:",
    "object-src 'none'",
    "base-uri 'self'",
    "form-action 'self'",
    "frame-ancestors 'none'",
  ].join('; ');
}

/** SHA-256 (base64) of each inline `<script>` of a page: the elements without `src`, their text exactly as written. */
function inlineScriptHashes(html: string): string[] {
  const out: string[] = [];
  for (const m of html.matchAll(/<script\b([^>]*)>([\s\S]*?)<\/script\s*>/gi)) {
    if (/\bsrc\s*=/i.test(m[1]!)) continue;
    out.push(crypto.createHash('sha256').update(m[2]!, 'utf8').digest('base64'));
  }
  return [...new Set(out)];
}

const PAGE_HEADERS = { 'x-content-type-options': 'nosniff', 'x-frame-options': 'DENY', 'referrer-policy': 'no-referrer', 'cache-control': 'no-cache' };
const FILE_HEADERS = { 'x-content-type-options': 'nosniff', 'cache-control': 'no-cache' };
const HASHED_HEADERS = { 'x-content-type-options': 'nosniff', 'cache-control': 'public, max-age=31536000, immutable' };

type AppFile = ServedFile;

const gzip = (b: Buffer) => new Promise<Buffer>((resolve, reject) => zlib.gzip(b, { level: 9 }, (err, out) => (err ? reject(err) : resolve(out))));

/** The app's files, read on first request and kept in memory within CACHE_BYTES. */
class AppFiles {
  private readonly cache = new Map<string, Promise<AppFile | null>>();
  private cached = 0;
  private realRoot: Promise<string> | null = null;
  private page: Promise<{ file: AppFile; csp: string }> | null = null;

  constructor(private readonly dir: string) {}

  /** A file of the directory by its relative name (already checked by `nameOf`), or null when there is none. */
  get(name: string): Promise<AppFile | null> {
    const known = this.cache.get(name);
    if (known) return known;
    const p = this.read(name);
    this.cache.set(name, p);
    // what is missing, unreadable or too large is not remembered: a probe of many names must not grow the map
    void p.then((f) => {
      if (!f || this.cached + f.body.length > CACHE_BYTES || f.body.length > CACHE_FILE_BYTES) this.cache.delete(name);
      else this.cached += f.body.length + (f.gzip?.length ?? 0);
    });
    return p;
  }

  /** `index.html` and its policy (the hashes of its inline scripts), made once. */
  index(): Promise<{ file: AppFile; csp: string }> {
    this.page ??= this.get('index.html').then((file) => {
      if (!file) throw new Error(`${this.dir} has no index.html any more`);
      this.cache.delete('index.html'); // held here instead
      return { file, csp: contentSecurityPolicy(inlineScriptHashes(file.body.toString('utf8'))) };
    });
    // a failure (the file was removed) is tried again on the next request
    this.page.catch(() => (this.page = null));
    return this.page;
  }

  private async read(name: string): Promise<AppFile | null> {
    this.realRoot ??= fs.promises.realpath(this.dir);
    try {
      const root = await this.realRoot;
      const real = await fs.promises.realpath(path.join(this.dir, name));
      if (real !== root && !real.startsWith(root + path.sep)) return null;
      const stat = await fs.promises.stat(real);
      if (!stat.isFile()) return null;
      const body = await fs.promises.readFile(real);
      const type = contentTypeOf(name) ?? 'application/octet-stream';
      let compressed: Buffer | null = null;
      if (COMPRESSIBLE.test(type) && body.length > 1024 && body.length <= CACHE_FILE_BYTES) {
        const z = await gzip(body);
        if (z.length < body.length) compressed = z;
      }
      return { type, body, gzip: compressed, etag: `"${crypto.createHash('sha256').update(body).digest('base64url').slice(0, 22)}"` };
    } catch {
      return null;
    }
  }
}

/** The relative name a URL path asks for, or null when it may not name a file of the directory. */
function nameOf(url: string): string | null {
  const decoded = safeDecode(url);
  if (decoded.includes('\0') || decoded.includes('\\')) return null;
  const parts = decoded.split('/').slice(1);
  if (parts.length && parts[parts.length - 1] === '') parts.pop();
  if (!parts.length) return 'index.html';
  for (const p of parts) if (p === '' || p.startsWith('.')) return null;
  return parts.join('/');
}

/** A name that is not there: a 404 when it looks like a file (an asset, an extension), else a client route of the app. */
const isFileName = (name: string) => name.startsWith('assets/') || /\.[A-Za-z0-9]+$/.test(name.slice(name.lastIndexOf('/') + 1));

export function mountWebApp(app: TemplatedApp, door: Door, sessions: BrowserSessions, dir: string): void {
  const files = new AppFiles(dir);
  const pageMetric = new RouteMetric('GET', '/');
  const fileMetric = new RouteMetric('GET', '/{web app file}');

  app.get('/*', (res, req) => {
    const url = req.getUrl();
    if (NOT_THE_APP.test(url)) return void req.setYield(true);
    const name = nameOf(url);
    const state = watchAbort(res, name === 'index.html' || (name && !isFileName(name)) ? pageMetric : fileMetric);
    const admission = door.admit(req, STATIC_FILES);
    if (!admission.ok) return sendJson(res, state, admission.status, { detail: admission.detail });
    if (url === '/' && isSignIn(req.getQuery() ?? '')) return signIn(res, req, state, door, sessions);
    // everything read of the request is read now: uWS's request is gone after the first await
    const ifNoneMatch = req.getHeader('if-none-match');
    const acceptsGzip = /\bgzip\b/.test(req.getHeader('accept-encoding'));
    const answer = async () => {
      if (name === null) return sendJson(res, state, 404, { detail: 'Not Found' });
      const file = name === 'index.html' ? null : await files.get(name);
      if (file) return serveFile(res, state, file, name.startsWith('assets/') ? HASHED_HEADERS : FILE_HEADERS, ifNoneMatch, acceptsGzip);
      if (name !== 'index.html' && isFileName(name)) return sendJson(res, state, 404, { detail: 'Not Found' });
      const page = await files.index();
      serveFile(res, state, page.file, { ...PAGE_HEADERS, 'content-security-policy': page.csp }, ifNoneMatch, acceptsGzip);
    };
    answer().catch(() => sendJson(res, state, 503, { detail: 'The web app cannot be read (WEB_APP_DIR)' }));
  });
}
