/**
 * Browser sign-in with a session key (bridge/sign-in.ts, bridge/sessions.ts, the cookie rules of
 * bridge/admission.ts) against real daemons: `/?token=` trades the key for a session cookie and a
 * redirect that leaves no token behind; the cookie opens REST, /trpc and the WebSocket from the
 * daemon's own origin only; sign-out; idle and absolute expiry; neither the token nor the session id
 * in any log line. Then the same in Debian's Chromium, with a page of another origin on the same
 * host (same site: the browser sends it the cookie) trying the socket.
 */
import assert from 'node:assert/strict';
import http from 'node:http';
import { after, before, describe, test } from 'node:test';
import NodeWebSocket from 'ws';
import { launchChromium } from './support/browser.js';
import { sleep, startDaemon, waitFor, type DaemonHandle } from './support/daemon.js';
import { connect } from './support/ws-client.js';

const KEY = 'browser-sign-in-key-0123456789';
let d: DaemonHandle;
/** Sessions end after 2 s unused. */
let idle: DaemonHandle;
/** Sessions end 3 s after sign-in, used or not. */
let short: DaemonHandle;

before(async () => {
  [d, idle, short] = await Promise.all([
    startDaemon({ SESSION_API_KEY: KEY, ALLOWED_ORIGINS: 'https://app.example.com', SANDBOX: 'none' }),
    startDaemon({ SESSION_API_KEY: KEY, BROWSER_SESSION_IDLE_SECONDS: '2', SANDBOX: 'none' }),
    startDaemon({ SESSION_API_KEY: KEY, BROWSER_SESSION_MAX_SECONDS: '3', SANDBOX: 'none' }),
  ]);
});
after(async () => {
  await Promise.all([d?.stop(), idle?.stop(), short?.stop()]);
});

interface Answer {
  status: number;
  headers: http.IncomingHttpHeaders;
  text: string;
}

/** A request exactly as given (no Origin unless named; node's fetch would add none either, but this one also keeps Host as given). */
function raw(port: number, method: string, p: string, headers: Record<string, string> = {}, body?: string): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, method, path: p, headers, agent: false }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, text: Buffer.concat(chunks).toString('utf8') }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

/** Signs in; the cookie as a browser would send it back (`parley_session=…`). */
async function signIn(daemon: DaemonHandle, extra: Record<string, string> = {}): Promise<{ cookie: string; setCookie: string; answer: Answer }> {
  const answer = await raw(daemon.port, 'GET', `/?token=${encodeURIComponent(KEY)}`, extra);
  assert.equal(answer.status, 303, answer.text);
  const setCookie = String(answer.headers['set-cookie']);
  return { cookie: setCookie.split(';')[0]!, setCookie, answer };
}

const own = (daemon: DaemonHandle) => `http://127.0.0.1:${daemon.port}`;
const json = { 'content-type': 'application/json' };

/** The HTTP status of a WebSocket handshake (101 when it opened). */
function handshake(url: string, headers: Record<string, string>): Promise<number> {
  return new Promise((resolve, reject) => {
    const ws = new NodeWebSocket(url, { headers });
    ws.once('open', () => (ws.close(), resolve(101)));
    ws.once('unexpected-response', (_req, res) => (res.resume(), resolve(res.statusCode!)));
    ws.once('error', reject);
  });
}

describe('browser sign-in', { timeout: 180_000 }, () => {
  test('/?token=<key>: 303 to / with an HttpOnly, SameSite=Strict session cookie holding a random id, not the key; Secure behind TLS', async () => {
    const { cookie, setCookie, answer } = await signIn(d);
    assert.equal(answer.headers.location, '/', 'the address bar keeps no token');
    assert.equal(answer.headers['cache-control'], 'no-store');
    const [name, value] = cookie.split('=');
    assert.equal(name, 'parley_session');
    assert.match(value!, /^[A-Za-z0-9_-]{43}$/, 'a random id: 32 bytes, base64url');
    assert.ok(!setCookie.includes(KEY) && !value!.includes(KEY.slice(0, 12)));
    assert.match(setCookie, /; Path=\//);
    assert.match(setCookie, /; HttpOnly/);
    assert.match(setCookie, /; SameSite=Strict/);
    assert.doesNotMatch(setCookie, /Secure/, 'plain HTTP: not Secure');
    assert.notEqual((await signIn(d)).cookie, cookie, 'each sign-in is a new session');
    const proxied = await signIn(d, { 'x-forwarded-proto': 'https' });
    assert.match(proxied.setCookie, /; Secure/, 'a proxy that terminated TLS said so');
    assert.match((await signIn(d, { forwarded: 'for=1.2.3.4;proto=https' })).setCookie, /; Secure/);
  });

  test('a wrong or empty token: 401 and no cookie', async () => {
    for (const token of ['wrong-token-0123456789', '', KEY.slice(0, -1)]) {
      const r = await raw(d.port, 'GET', `/?token=${encodeURIComponent(token)}`);
      assert.equal(r.status, 401, token);
      assert.equal(r.headers['set-cookie'], undefined);
      assert.deepEqual(JSON.parse(r.text), { detail: 'Unauthorized' });
    }
  });

  test('the cookie opens REST, /trpc and the socket from the daemon`s own origin only', async () => {
    const { cookie } = await signIn(d);
    const me = { cookie, origin: own(d) };
    // REST: reads without an Origin (a same-origin GET), writes from the own origin
    assert.equal((await raw(d.port, 'GET', '/api/conversations', { cookie })).status, 200);
    const created = await raw(d.port, 'POST', '/api/conversations', { ...me, ...json }, '{}');
    assert.equal(created.status, 200, created.text);
    const id = JSON.parse(created.text).conversation_id as string;
    assert.equal((await raw(d.port, 'POST', '/api/conversations', { cookie, ...json }, '{}')).status, 403, 'a write with a cookie and no Origin');
    for (const origin of ['http://evil.example', 'https://app.example.com', `http://127.0.0.1:${d.port + 1}`, 'null']) {
      assert.equal((await raw(d.port, 'GET', '/api/conversations', { cookie, origin })).status, 403, `read from ${origin}`);
      assert.equal((await raw(d.port, 'POST', '/api/conversations', { cookie, origin, ...json }, '{}')).status, 403, `write from ${origin}`);
    }
    // ALLOWED_ORIGINS is for callers holding the key
    assert.equal((await raw(d.port, 'POST', '/api/conversations', { 'x-session-api-key': KEY, origin: 'https://app.example.com', ...json }, '{}')).status, 200);
    // /trpc
    const input = encodeURIComponent(JSON.stringify({ conversation_id: id }));
    const q = await raw(d.port, 'GET', `/trpc/getConversation?input=${input}`, { cookie });
    assert.equal(q.status, 200, q.text);
    assert.equal(JSON.parse(q.text).result.data.conversation_id ?? JSON.parse(q.text).result.data.id, id);
    assert.equal((await raw(d.port, 'POST', '/trpc/createConversation', { ...me, ...json }, '{}')).status, 200);
    assert.equal((await raw(d.port, 'POST', '/trpc/createConversation', { cookie, origin: 'http://evil.example', ...json }, '{}')).status, 403);
    assert.equal((await raw(d.port, 'GET', `/trpc/getConversation?input=${input}`, { cookie: 'parley_session=not-a-session' })).status, 401);
    // the socket: the cookie authenticates the upgrade itself (no auth frame)
    const ws = `ws://127.0.0.1:${d.port}/sockets/events/${id}`;
    const s = connect(ws, { headers: me });
    assert.equal((await s.next(() => true, 'the snapshot')).key, 'full_state');
    s.close();
    assert.equal(await handshake(ws, { cookie, origin: 'http://evil.example' }), 403);
    assert.equal(await handshake(ws, { cookie, origin: 'https://app.example.com' }), 403);
    assert.equal(await handshake(ws, { cookie }), 403, 'a browser always sends Origin with an upgrade');
    assert.equal(await handshake(ws, { cookie: 'parley_session=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA', origin: own(d) }), 401);
    // /metrics takes the key only
    assert.equal((await raw(d.port, 'GET', '/metrics', { cookie })).status, 401);
  });

  test('sign-out: POST /api/logout clears the cookie and ends the session everywhere', async () => {
    const { cookie } = await signIn(d);
    const me = { cookie, origin: own(d) };
    const id = JSON.parse((await raw(d.port, 'POST', '/api/conversations', { ...me, ...json }, '{}')).text).conversation_id;
    assert.equal((await raw(d.port, 'POST', '/api/logout', { cookie, origin: 'http://evil.example' })).status, 403, 'no sign-out from elsewhere');
    assert.equal((await raw(d.port, 'POST', '/api/logout', { cookie })).status, 403, 'nor without an Origin');
    assert.equal((await raw(d.port, 'GET', '/api/conversations', { cookie })).status, 200, 'still signed in');
    const out = await raw(d.port, 'POST', '/api/logout', me);
    assert.equal(out.status, 200, out.text);
    assert.match(String(out.headers['set-cookie']), /^parley_session=; Path=\/; Max-Age=0; HttpOnly; SameSite=Strict/);
    assert.equal((await raw(d.port, 'GET', '/api/conversations', { cookie })).status, 401);
    assert.equal((await raw(d.port, 'POST', '/trpc/createConversation', { ...me, ...json }, '{}')).status, 401);
    assert.equal(await handshake(`ws://127.0.0.1:${d.port}/sockets/events/${id}`, me), 401);
    assert.equal((await raw(d.port, 'POST', '/api/logout', me)).status, 401, 'already signed out');
  });

  test('sessions expire: after BROWSER_SESSION_IDLE_SECONDS unused, and BROWSER_SESSION_MAX_SECONDS after sign-in however used', async () => {
    const a = await signIn(idle);
    const t0 = Date.now();
    await sleep(2500);
    assert.ok(Date.now() - t0 >= 2000);
    assert.equal((await raw(idle.port, 'GET', '/api/conversations', { cookie: a.cookie })).status, 401, 'unused for more than 2 s');
    // used every 300 ms it stays valid (the idle time is a day here) until 3 s after sign-in, then never again
    const b = await signIn(short);
    const signedIn = Date.now();
    let refusedAt = 0;
    await waitFor(
      async () => {
        const status = (await raw(short.port, 'GET', '/api/conversations', { cookie: b.cookie })).status;
        if (status === 401) refusedAt = Date.now();
        else assert.equal(status, 200);
        if (!refusedAt) await sleep(300);
        return refusedAt;
      },
      'the absolute lifetime to end',
      60_000,
    );
    assert.ok(refusedAt - signedIn >= 2900, `refused ${refusedAt - signedIn} ms after sign-in`);
    assert.equal((await raw(short.port, 'GET', '/api/conversations', { cookie: b.cookie })).status, 401);
  });

  test('neither the token nor a session id appears in a Location or any log line', async () => {
    const cookies = [(await signIn(d)).cookie, (await signIn(idle)).cookie, (await signIn(short)).cookie];
    await raw(d.port, 'GET', '/?token=wrong-token-in-the-url-0001');
    await raw(d.port, 'GET', '/api/conversations', { cookie: cookies[0]! });
    await raw(d.port, 'GET', '/metrics', { 'x-session-api-key': KEY });
    const metrics = (await raw(d.port, 'GET', '/metrics', { 'x-session-api-key': KEY })).text;
    const ids = cookies.map((c) => c.split('=')[1]!);
    for (const daemon of [d, idle, short]) {
      for (const line of daemon.output) {
        assert.ok(!line.includes(KEY), `a log line carries the key: ${line}`);
        assert.ok(!line.includes('wrong-token-in-the-url'), `a log line carries a token: ${line}`);
        for (const id of ids) assert.ok(!line.includes(id), `a log line carries a session id: ${line}`);
      }
    }
    assert.ok(
      !metrics.includes('wrong-token-in-the-url') && !metrics.includes(KEY) && !ids.some((id) => metrics.includes(id)),
      'the metrics count routes by template',
    );
  });
});

describe('browser sign-in in Chromium', { timeout: 180_000 }, () => {
  test('the link signs the browser in and leaves /; its page reaches the API and the socket; another context and another origin do not', async () => {
    const browser = await launchChromium();
    // a page of another origin on the same host: same site, so SameSite=Strict lets the cookie go with its requests
    const other = http.createServer((_req, res) => res.writeHead(200, { 'content-type': 'text/html' }).end('<!doctype html><title>other</title>'));
    await new Promise<void>((r) => other.listen(0, '127.0.0.1', r));
    try {
      const id = (await d.req('POST', '/api/conversations', {}, { 'x-session-api-key': KEY })).body.conversation_id as string;
      const ctx = await browser.newContext();
      const page = await ctx.newPage();
      await page.goto(`${own(d)}/?token=${encodeURIComponent(KEY)}`);
      assert.equal(page.url(), `${own(d)}/`, 'the token left the address bar');
      const [c] = await ctx.cookies();
      assert.equal(c?.name, 'parley_session');
      assert.equal(c?.httpOnly, true);
      assert.equal(c?.sameSite, 'Strict');
      assert.equal(await page.evaluate(() => document.cookie), '', 'no script can read it');
      const fromPage = await page.evaluate(async (conversation) => {
        const list = await fetch('/api/conversations');
        const created = await fetch('/api/conversations', { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' });
        const first = await new Promise<string>((resolve) => {
          const ws = new WebSocket(`ws://${location.host}/sockets/events/${conversation}`);
          ws.onmessage = (m) => (resolve(JSON.parse(m.data).key), ws.close());
          ws.onclose = () => resolve('closed');
        });
        return [list.status, created.status, first];
      }, id);
      assert.deepEqual(fromPage, [200, 200, 'full_state']);
      const stranger = await (await browser.newContext()).newPage();
      await stranger.goto(`${own(d)}/settings`);
      assert.equal(await stranger.evaluate(async () => (await fetch('/api/conversations')).status), 401, 'a context that did not sign in');
      const otherPage = await ctx.newPage();
      await otherPage.goto(`http://127.0.0.1:${(other.address() as { port: number }).port}/`);
      const cross = await otherPage.evaluate(
        async ([port, conversation]) =>
          new Promise<string>((resolve) => {
            const ws = new WebSocket(`ws://127.0.0.1:${port}/sockets/events/${conversation}`);
            ws.onopen = () => resolve('open');
            ws.onmessage = () => resolve('message');
            ws.onerror = () => resolve('refused');
          }),
        [d.port, id] as const,
      );
      assert.equal(cross, 'refused', 'the cookie went along, and the Origin rule refused it');
      await ctx.close();
    } finally {
      other.close();
      await browser.close();
    }
  });
});
