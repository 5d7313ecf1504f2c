/**
 * WEB_APP_DIR (bridge/web-app.ts) against real daemons: the directory's single-page app at `/` (its
 * client routes answered with its index.html, its files with their types and cache rules, a real 404
 * for a missing asset, nothing outside the directory), a Content-Security-Policy that allows the
 * page's inline scripts by the hashes of the index.html the daemon reads when the page is first
 * asked for (not at start), the console at /console/, the REST routes untouched, and a start refused
 * with one line when the directory has no index.html.
 */
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { launchChromium, watch } from './support/browser.js';
import { startDaemon, tempDir, type DaemonHandle } from './support/daemon.js';

const sha256 = (s: string) => crypto.createHash('sha256').update(s, 'utf8').digest('base64');
const INLINE_AT_START = 'window.startedWith = 1;';
/** The page as it is when first asked for: the daemon must serve this one, and hash these scripts. */
const INLINE = ['window.appBooted = "yes";', '\n  import "/assets/app-4f2a9c.js";\n'];
const PAGE =
  `<!doctype html><html><head><title>the app</title><script>${INLINE[0]}</script></head>` +
  `<body><div id="root"></div><script type="module">${INLINE[1]}</script><script type="module" src="/assets/app-4f2a9c.js"></script></body></html>`;
const APP_JS = `export const x = ${JSON.stringify('a'.repeat(4000))};\n`;

let app: string;
let outside: string;
let d: DaemonHandle;

before(async () => {
  app = tempDir('parley-webapp-');
  outside = tempDir('parley-outside-');
  fs.writeFileSync(path.join(outside, 'secret.txt'), 'outside the app\n');
  fs.writeFileSync(path.join(app, 'index.html'), `<!doctype html><script>${INLINE_AT_START}</script>`);
  fs.mkdirSync(path.join(app, 'assets'));
  fs.writeFileSync(path.join(app, 'assets', 'app-4f2a9c.js'), APP_JS);
  fs.mkdirSync(path.join(app, 'locales', 'en'), { recursive: true });
  fs.writeFileSync(path.join(app, 'locales', 'en', 'translation.json'), '{"HELLO":"hello"}');
  fs.writeFileSync(path.join(app, 'favicon.ico'), Buffer.from([0, 0, 1, 0]));
  fs.writeFileSync(path.join(app, '.env'), 'SECRET=1\n');
  fs.symlinkSync(outside, path.join(app, 'link'));
  d = await startDaemon({ WEB_APP_DIR: app, SANDBOX: 'none' });
  // changed after the start, before any request: what is served shows when the files were read
  fs.writeFileSync(path.join(app, 'index.html'), PAGE);
});
after(() => d?.stop());

const get = (p: string, headers: Record<string, string> = {}) => fetch(d.url + p, { headers, redirect: 'manual' });

describe('WEB_APP_DIR', { timeout: 120_000 }, () => {
  test("the page is the directory's index.html as first asked for, with a policy allowing exactly its inline scripts by their hashes", async () => {
    const r = await get('/');
    assert.equal(r.status, 200);
    assert.match(r.headers.get('content-type')!, /^text\/html/);
    assert.equal(await r.text(), PAGE, 'read when first asked for, not at start');
    const csp = r.headers.get('content-security-policy')!;
    const scriptSrc = csp.split(';').find((d) => d.trim().startsWith('script-src'))!;
    for (const s of INLINE) assert.ok(scriptSrc.includes(`'sha256-${sha256(s)}'`), `${scriptSrc} allows ${JSON.stringify(s)}`);
    assert.ok(!scriptSrc.includes(sha256(INLINE_AT_START)), 'the hashes are those of the page served');
    assert.ok(!/unsafe-inline|unsafe-eval/.test(scriptSrc), scriptSrc);
    assert.match(csp, /frame-ancestors 'none'/);
    assert.match(csp, /connect-src 'self'/);
    assert.equal(r.headers.get('cache-control'), 'no-cache');
    const etag = r.headers.get('etag')!;
    assert.equal((await get('/', { 'if-none-match': etag })).status, 304);
  });

  test("client routes are the app's page; its files are served with their types; a missing asset or file is a real 404", async () => {
    const id = crypto.randomUUID();
    for (const p of [`/conversations/${id}`, '/settings', '/settings/app', '/some/client/route/']) {
      const r = await get(p);
      assert.equal(r.status, 200, p);
      assert.equal(await r.text(), PAGE, p);
      assert.ok(r.headers.get('content-security-policy'), p);
    }
    const js = await get('/assets/app-4f2a9c.js', { 'accept-encoding': 'gzip' });
    assert.equal(js.status, 200);
    assert.match(js.headers.get('content-type')!, /^text\/javascript/);
    assert.equal(js.headers.get('cache-control'), 'public, max-age=31536000, immutable', 'hashed assets are cached for a year');
    assert.equal(await js.text(), APP_JS);
    const json = await get('/locales/en/translation.json');
    assert.equal(json.status, 200);
    assert.match(json.headers.get('content-type')!, /^application\/json/);
    assert.equal(json.headers.get('cache-control'), 'no-cache', 'files without a hashed name are revalidated');
    assert.deepEqual(await json.json(), { HELLO: 'hello' });
    assert.equal((await get('/favicon.ico')).status, 200);
    for (const p of ['/assets/app-missing.js', '/assets/nothing', '/locales/fr/translation.json', '/missing.png']) {
      const r = await get(p);
      assert.equal(r.status, 404, p);
      assert.deepEqual(await r.json(), { detail: 'Not Found' }, p);
    }
  });

  test('nothing outside the directory, and no dot-file, is served', async () => {
    for (const p of [
      '/.env',
      '/%2eenv',
      '/link/secret.txt',
      '/assets/%2e%2e/%2e%2e/etc/passwd',
      '/..%2f..%2fetc%2fpasswd',
      '/assets/..%5c..%5cindex.html',
      '/a%00.js',
    ]) {
      const r = await get(p);
      const text = await r.text();
      assert.ok(r.status === 404 || (r.status === 200 && text === PAGE), `${p}: ${r.status}`);
      assert.ok(!text.includes('SECRET=1') && !text.includes('outside the app') && !text.includes('root:'), p);
    }
  });

  test('the console is at /console/, the REST routes and the sign-in are untouched', async () => {
    for (const p of ['/console/', '/console', '/console/settings', `/console/conversations/${crypto.randomUUID()}`]) {
      const r = await get(p);
      assert.equal(r.status, 200, p);
      assert.match(await r.text(), /\/console\/app-[\w-]+\.js/, `${p} is the console's page`);
    }
    const api = await get('/api/no-such-route');
    assert.equal(api.status, 404);
    assert.deepEqual(await api.json(), { detail: 'Not Found' });
    assert.equal((await get('/api/conversations')).status, 200);
    assert.equal((await get('/trpc/nothing')).status, 404);
    assert.equal((await get('/health')).status, 200);
    const signIn = await get('/?token=anything');
    assert.equal(signIn.status, 303, 'a keyless daemon drops the token from the address');
    assert.equal(signIn.headers.get('location'), '/');
  });

  test('the console works at /console/: its links, its settings page and a reload stay under it', async () => {
    const id = (await d.req('POST', '/api/conversations', { initial_user_msg: 'from the console test' })).body.conversation_id as string;
    const browser = await launchChromium();
    try {
      const page = await browser.newPage();
      page.setDefaultTimeout(90_000);
      const w = watch(page, d.url);
      await page.goto(`${d.url}/console/`);
      await page.locator('h1', { hasText: 'Conversations' }).waitFor();
      await page.locator(`a[href="/console/conversations/${id}"]`).click();
      await page.waitForURL(`${d.url}/console/conversations/${id}`);
      await page.getByText('from the console test').first().waitFor();
      await page.reload();
      await page.getByText('from the console test').first().waitFor();
      await page.locator('nav a', { hasText: 'Settings' }).click();
      await page.waitForURL(`${d.url}/console/settings`);
      await page.locator('h2', { hasText: 'Language model' }).waitFor();
      await page.locator('nav a', { hasText: 'Conversations' }).click();
      await page.waitForURL(`${d.url}/console/`);
      assert.deepEqual(w.errors, []);
      assert.deepEqual(w.elsewhere, []);
    } finally {
      await browser.close();
    }
  });

  test('a directory without index.html stops the start with one line and exit code 1', async () => {
    const empty = tempDir('parley-noapp-');
    const err = await startDaemon({ WEB_APP_DIR: empty, SANDBOX: 'none' }).then(
      () => null,
      (e: Error) => e,
    );
    assert.ok(err, 'the daemon did not start');
    assert.match(err.message, /exited with 1 before listening/);
    const lines = err.message.split('\n').filter((l) => l.startsWith('parley: '));
    assert.equal(lines.length, 1, err.message);
    assert.match(lines[0]!, new RegExp(`^parley: invalid configuration: WEB_APP_DIR: ${empty.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')} has no index\\.html`));
  });
});
