/**
 * The web console (console/, served by bridge/console.ts) in Debian's headless Chromium against a
 * real daemon: its files and headers (types, ETag, gzip, CSP, 404s, the API and /docs untouched,
 * the bundle's size), sign-in (a wrong key, a key kept for the tab only, the start-up link whose
 * key leaves the address bar and the history at once), and a keyless daemon. The pages at work
 * are in console-pages.test.ts (settings, a repository conversation, follow-up, the list),
 * console-stream.test.ts (interrupt, reload, a dropped socket, confirmation) and
 * console-10k.test.ts (10,000 events): four files, each within the per-file time limit.
 * Screenshots of each page go to test/artifacts/ (not in git).
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import zlib from 'node:zlib';
import { after, before, describe, test } from 'node:test';
import { screenshot } from './support/browser.js';
import { assertEveryEventOnce, CONSOLE_DIR, ConsoleBrowser } from './support/console-page.js';
import { daemonArgs, freePort, ROOT, startDaemon, tempDir, waitFor, type DaemonHandle } from './support/daemon.js';
import { startScriptedLlm, type ScriptedLlm } from './support/scripted-llm.js';

const KEY = 'console-test-key-0123456789';

let d: DaemonHandle;
/** The same daemon without a session key. */
let keyless: DaemonHandle;
let llm: ScriptedLlm;
let browser: ConsoleBrowser;

const api = (method: string, p: string, body?: unknown) => d.req(method, p, body, { 'x-session-api-key': KEY });
const newPage = (origin = d.url) => browser.newPage(origin);

function rawGet(url: string, headers: Record<string, string> = {}): Promise<{ status: number; headers: http.IncomingHttpHeaders; body: Buffer }> {
  return new Promise((resolve, reject) => {
    http
      .get(url, { headers, agent: false }, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) }));
      })
      .on('error', reject);
  });
}

/**
 * A daemon with a session key whose output goes to a terminal, as `npm start` in a shell has it
 * (`script` gives it a pty); what it writes is collected in `output`.
 */
function startOnTerminal(key: string, port: number, daemon: string[]) {
  const env = {
    PATH: process.env.PATH ?? '/usr/bin:/bin',
    HOME: process.env.HOME ?? '/tmp',
    PORT: String(port),
    DATA_DIR: tempDir(),
    SESSION_API_KEY: key,
    SANDBOX: 'none',
    LOG_LEVEL: 'info',
  };
  const proc = spawn('script', ['-qfec', [process.execPath, ...daemon].join(' '), '/dev/null'], {
    cwd: ROOT,
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
  });
  const t = {
    port,
    key,
    output: '',
    async stop() {
      if (proc.exitCode !== null || proc.signalCode !== null) return;
      const exited = new Promise((r) => proc.once('exit', r));
      process.kill(-proc.pid!, 'SIGTERM'); // script and the daemon under it
      await exited;
    },
  };
  proc.stdout!.on('data', (c) => (t.output += c));
  proc.stderr!.on('data', (c) => (t.output += c));
  return t;
}
let onTerminal: ReturnType<typeof startOnTerminal>;

before(async () => {
  onTerminal = startOnTerminal('link-key-0123456789-abcdef', await freePort(), await daemonArgs());
  llm = await startScriptedLlm();
  // started side by side: a daemon takes seconds to start on a loaded machine
  [d, keyless, browser] = await Promise.all([
    startDaemon({ SESSION_API_KEY: KEY }),
    startDaemon({ LLM_MODEL: 'openai/scripted', LLM_BASE_URL: llm.url, LLM_API_KEY: 'k' }),
    ConsoleBrowser.launch(),
  ]);
});
after(async () => {
  await browser?.close();
  await Promise.all([d?.stop(), keyless?.stop(), onTerminal?.stop()]);
  await llm?.close();
});

describe('web console', { timeout: 420_000 }, () => {
  test('served at / by the daemon: content types, ETag and cache headers, gzip, CSP, 404s; the API, /docs and health unchanged; ≤ 150 KB gzipped', async () => {
    const page = await rawGet(`${d.url}/`, { 'accept-encoding': 'gzip' });
    assert.equal(page.status, 200);
    assert.equal(page.headers['content-type'], 'text/html; charset=utf-8');
    assert.equal(page.headers['content-encoding'], 'gzip');
    assert.equal(page.headers['cache-control'], 'no-cache');
    assert.match(String(page.headers['content-security-policy']), /script-src 'self'.*connect-src 'self'.*frame-ancestors 'none'/);
    assert.equal(page.headers['x-frame-options'], 'DENY');
    const html = zlib.gunzipSync(page.body).toString();
    const js = /src="\/console\/(app-[A-Z0-9]+\.js)"/.exec(html)?.[1];
    const css = /href="\/console\/(app-[A-Z0-9]+\.css)"/.exec(html)?.[1];
    assert.ok(js && css, html);
    assert.equal((await rawGet(`${d.url}/`, { 'if-none-match': String(page.headers.etag) })).status, 304);
    for (const spa of ['/settings', '/conversations/0b8f3c1e-6d55-4ac4-9b35-21e1b0a5d6f1'])
      assert.equal((await rawGet(`${d.url}${spa}`)).headers['content-type'], 'text/html; charset=utf-8');

    const plain = await rawGet(`${d.url}/console/${js}`);
    assert.equal(plain.status, 200);
    assert.equal(plain.headers['content-type'], 'text/javascript; charset=utf-8');
    assert.equal(plain.headers['content-encoding'], undefined, 'no gzip unless asked for');
    assert.deepEqual(plain.body, fs.readFileSync(path.join(CONSOLE_DIR, js!)));
    assert.equal(plain.headers['cache-control'], 'public, max-age=31536000, immutable');
    const gz = await rawGet(`${d.url}/console/${css}`, { 'accept-encoding': 'gzip, deflate, br' });
    assert.equal(gz.headers['content-type'], 'text/css; charset=utf-8');
    assert.equal(gz.headers['content-encoding'], 'gzip');
    assert.equal(gz.headers.vary, 'accept-encoding');
    assert.deepEqual(zlib.gunzipSync(gz.body), fs.readFileSync(path.join(CONSOLE_DIR, css!)));
    for (const bad of ['/console/nope.js', '/console/index.html', '/console/..%2Fmain.mjs', '/console/%2e%2e/main.mjs', '/console/.hidden.js']) {
      const r = await rawGet(`${d.url}${bad}`);
      assert.equal(r.status, 404, bad);
      assert.deepEqual(JSON.parse(r.body.toString()), { detail: 'Not Found' });
    }

    // nothing else moved: the key still guards the API, the public routes still answer
    assert.equal((await d.req('GET', '/api/conversations')).status, 401);
    assert.equal((await d.req('GET', '/trpc/listConversations')).status, 401);
    assert.equal((await api('GET', '/api/conversations')).status, 200);
    assert.match((await d.req('GET', '/docs')).text, /swagger-ui/);
    assert.equal((await d.req('GET', '/openapi.json')).body.openapi, '3.1.0');
    assert.deepEqual((await d.req('GET', '/health')).body, { status: 'ok' });
    assert.deepEqual((await d.req('GET', '/conversations')).body, { detail: 'Not Found' }, 'only the console routes serve the page');
    assert.equal((await d.req('POST', '/', {}, { origin: 'https://evil.example' })).status, 403, 'the Origin rule still holds for /');

    const sizes = fs
      .readdirSync(CONSOLE_DIR)
      .filter((f) => /\.(js|css)\.gz$/.test(f))
      .map((f) => [f, fs.statSync(path.join(CONSOLE_DIR, f)).size] as const);
    const total = sizes.reduce((n, [, s]) => n + s, 0);
    console.log(`console bundle, gzipped: ${sizes.map(([f, s]) => `${f} ${(s / 1024).toFixed(1)} KB`).join(', ')}; total ${(total / 1024).toFixed(1)} KB`);
    assert.ok(total <= 150 * 1024, `JS + CSS gzipped ${total} bytes > 150 KB`);
  });

  test('sign-in: a wrong key gets a clear message; the right key is kept for the tab only (sessionStorage), not in a cookie or localStorage', async () => {
    const { page, w } = await newPage();
    await page.goto(`${d.url}/`);
    await page.locator('input[name="key"]').waitFor();
    await screenshot(page, 'console-signin');
    await page.locator('input[name="key"]').fill('not-the-key-123');
    await page.locator('form button[type="submit"]').click();
    await page.locator('.alert', { hasText: 'Wrong key: the daemon refused it (401)' }).waitFor();
    await screenshot(page, 'console-signin-wrong-key');

    await page.locator('input[name="key"]').fill(KEY);
    await page.locator('form button[type="submit"]').click();
    await page.locator('h1', { hasText: 'Conversations' }).waitFor();
    assert.deepEqual(await page.evaluate(() => [sessionStorage.getItem('parley.session-key'), localStorage.length, document.cookie]), [KEY, 0, '']);
    await page.reload();
    await page.locator('h1', { hasText: 'Conversations' }).waitFor();
    // another tab has its own sessionStorage: it asks again
    const other = await newPage();
    await other.page.goto(`${d.url}/`);
    await other.page.locator('input[name="key"]').waitFor();
    // a link with a wrong key, opened in a new tab or in one already on the console: refused with the reason, the key leaves the address bar
    const linked = await newPage();
    for (const p of [linked.page, other.page]) {
      await p.goto(`${d.url}/#key=wrong-key-from-a-link`);
      await p.locator('.alert', { hasText: 'The session key from the link was refused' }).waitFor();
      assert.equal(p.url(), `${d.url}/`);
    }
    assert.deepEqual([...w.elsewhere, ...other.w.elsewhere], []);
    assert.deepEqual([...w.errors, ...other.w.errors], []);
  });

  test('the page uses the typed client (/trpc): the key in a header of every call, never in a URL; a key refused later sends it back to sign-in', async () => {
    const id = (await api('POST', '/api/conversations', {})).body.conversation_id as string;
    const { page, w } = await browser.signedInPage(d.url, KEY);
    const calls: { url: string; method: string; key: string | undefined; type: string | undefined }[] = [];
    page.on('request', (r) => {
      const h = r.headers();
      if (new URL(r.url()).origin === d.url) calls.push({ url: r.url(), method: r.method(), key: h['x-session-api-key'], type: h['content-type'] });
    });
    // a query (the conversation, its history, its changes), then mutations (the title, a message)
    await page.goto(`${d.url}/conversations/${id}`);
    await page.locator('.conv-head').waitFor();
    await page.locator('.tabs button', { hasText: 'Details' }).click();
    await page.locator('input[name="title"]').fill('Renamed in the console');
    await page.locator('form:has(input[name="title"]) button', { hasText: 'Rename' }).click();
    await waitFor(async () => (await api('GET', `/api/conversations/${id}`)).body.title === 'Renamed in the console', 'the title saved');
    const trpc = calls.filter((c) => new URL(c.url).pathname.startsWith('/trpc/'));
    const names = new Set(trpc.map((c) => new URL(c.url).pathname.slice('/trpc/'.length)));
    for (const name of ['getConversation', 'updateConversation']) assert.ok(names.has(name), `${name} was called: ${[...names].join(', ')}`);
    assert.deepEqual(
      calls.filter((c) => new URL(c.url).pathname.startsWith('/api/')).map((c) => c.url),
      [],
      'no hand-written REST call is left',
    );
    for (const c of trpc) {
      assert.equal(c.key, KEY, `${c.method} ${c.url} carries the key in its header`);
      if (c.method === 'POST') assert.match(c.type ?? '', /^application\/json/, `${c.url}: a mutation is JSON`);
    }
    assert.ok(!calls.some((c) => c.url.includes(KEY) || c.url.includes(encodeURIComponent(KEY))), 'the key is in no URL');

    // the key is rotated away while the tab is open: the next call is refused (401 over /trpc) and the page asks for the key again
    await page.evaluate(`sessionStorage.setItem('parley.session-key', 'a-key-that-was-rotated-away')`);
    await page.locator('nav a', { hasText: 'Settings' }).click();
    await page.locator('.alert', { hasText: 'The daemon refused the session key' }).waitFor();
    await page.locator('input[name="key"]').waitFor();
    assert.equal(await page.evaluate(() => sessionStorage.getItem('parley.session-key')), null, 'the refused key is forgotten');
    assert.deepEqual(w.elsewhere, []);
  });

  test('the start-up link (printed on a terminal only) signs in; the key leaves the address bar and the history at once; no log line carries it', async () => {
    const { port, key: linkKey } = onTerminal;
    const out = () => onTerminal.output;
    const link = await waitFor(() => /Open the web console \(signed in\): (\S+)/.exec(out())?.[1], 'the sign-in link', 60_000);
    await waitFor(() => out().includes('"msg":"web console: '), 'the log line');
    assert.equal(link, `http://127.0.0.1:${port}/#key=${linkKey}`);
    // the generic link a web app served here uses: a session cookie and a redirect to /
    const cookieLink = await waitFor(
      () => /Sign a browser in \(a session cookie, for a web app served here\): (\S+)/.exec(out())?.[1],
      'the cookie sign-in link',
    );
    assert.equal(cookieLink, `http://127.0.0.1:${port}/?token=${linkKey}`);
    const signedIn = await fetch(cookieLink, { redirect: 'manual' });
    assert.equal(signedIn.status, 303);
    assert.equal(signedIn.headers.get('location'), '/');
    assert.match(String(signedIn.headers.get('set-cookie')), /^parley_session=[\w-]{43}; /);
    for (const line of out()
      .split(/\r?\n/)
      .filter((l) => l.startsWith('{')))
      assert.ok(!line.includes(linkKey), `a log line carries the key: ${line}`);
    assert.match(out(), /"msg":"web console: http:\/\/127\.0\.0\.1:\d+\/ \(sign in with the session key\)"/);

    const { page, w } = await newPage(`http://127.0.0.1:${port}`);
    await page.goto(link);
    await page.locator('h1', { hasText: 'Conversations' }).waitFor();
    assert.equal(page.url(), `http://127.0.0.1:${port}/`);
    assert.deepEqual(await page.evaluate(() => [location.hash, sessionStorage.getItem('parley.session-key')]), ['', linkKey]);
    // the history entry itself was rewritten: back to the blank page and forward again lands on the bare URL
    const entries = await page.evaluate(() => history.length);
    await page.goBack();
    await page.goForward();
    assert.equal(page.url(), `http://127.0.0.1:${port}/`);
    assert.equal(await page.evaluate(() => history.length), entries, 'no entry was added');
    await page.locator('h1', { hasText: 'Conversations' }).waitFor();
    assert.ok(w.elsewhere.every((u) => !u.includes(linkKey)) && w.elsewhere.length === 0);
    // without a terminal (journald, a file) the link is not written at all
    assert.ok(d.output.some((l) => l.includes('web console: http://127.0.0.1:')));
    assert.ok(!d.output.some((l) => l.includes(KEY)), 'the daemon started without a terminal never printed its key');
  });

  test('keyless daemon: no sign-in; the page only answers a loopback Host', async () => {
    llm.clear();
    llm.push({ text: 'Hello from a keyless daemon.' });
    const id = (await keyless.req('POST', '/api/conversations', { initial_user_msg: 'Say hello.' })).body.conversation_id;
    const { page, w } = await newPage(keyless.url);
    await page.goto(`${keyless.url}/`);
    await page.locator('h1', { hasText: 'Conversations' }).waitFor();
    await page.locator('.topbar', { hasText: 'no session key' }).waitFor();
    assert.equal(await page.locator('input[name="key"]').count(), 0);
    await page.locator('table.list a', { hasText: 'Say hello.' }).click();
    await page.locator('.msg-assistant', { hasText: 'Hello from a keyless daemon.' }).waitFor();
    assert.equal((await rawGet(`${keyless.url}/`, { host: `evil.example:${keyless.port}` })).status, 421, 'DNS rebinding: a foreign Host gets nothing');
    assert.deepEqual(w.elsewhere, []);
    assert.deepEqual(w.errors, []);
    await assertEveryEventOnce(page, (await keyless.req('GET', `/api/conversations/${id}`)).body.last_seq);
  });
});
