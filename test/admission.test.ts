/**
 * The door (bridge/admission.ts): each rule once, run against every door it applies to — REST (a
 * read, a JSON write, the multipart upload), /trpc (a query and a mutation), the WebSocket upgrade,
 * /metrics, the console's files and sign-out — with raw requests whose headers are exactly the
 * test's, against real daemons (one keyless on loopback, one with a key).
 */
import { MAX_UPLOAD_BYTES } from '../src/conversation/side-channels.js';
import assert from 'node:assert/strict';
import http from 'node:http';
import { after, before, describe, test } from 'node:test';
import NodeWebSocket from 'ws';
import { startDaemon, type DaemonHandle } from './support/daemon.js';

const KEY = 'admission-test-key-0123456789';
const LIMIT = 65536;
let keyless: DaemonHandle;
let keyed: DaemonHandle;
let keylessId: string;
let keyedId: string;

before(async () => {
  [keyless, keyed] = await Promise.all([
    startDaemon({ SANDBOX: 'none', MAX_BODY_BYTES: String(LIMIT) }),
    startDaemon({ SANDBOX: 'none', MAX_BODY_BYTES: String(LIMIT), SESSION_API_KEY: KEY }),
  ]);
  keylessId = (await keyless.req('POST', '/api/conversations', {})).body.conversation_id;
  keyedId = (await keyed.req('POST', '/api/conversations', {}, { 'x-session-api-key': KEY })).body.conversation_id;
  // a page in each workspace, for the door of the files served to be shown
  for (const [d, id, h] of [
    [keyless, keylessId, {}],
    [keyed, keyedId, { 'x-session-api-key': KEY }],
  ] as const) {
    const r = await d.req('POST', '/api/bash/execute_bash_command', { command: 'echo page > index.html', conversation_id: id }, h);
    assert.equal(r.body.exit_code, 0, r.text);
  }
});
after(async () => {
  await Promise.all([keyless?.stop(), keyed?.stop()]);
});

/** A request with exactly these headers (Host included when given); the status and the body. */
function raw(port: number, method: string, p: string, headers: Record<string, string | number>, body?: string): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, method, path: p, headers, agent: false, setHost: !('host' in headers) }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode!, text: Buffer.concat(chunks).toString('utf8') }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

/** The status a WebSocket handshake answered (101 when it opened). */
function upgrade(port: number, id: string, headers: Record<string, string>, query = ''): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const ws = new NodeWebSocket(`ws://127.0.0.1:${port}/sockets/events/${id}${query}`, { headers });
    ws.once('open', () => (ws.close(), resolve({ status: 101, text: '' })));
    ws.once('unexpected-response', (_req, res) => {
      let text = '';
      res.on('data', (c: Buffer) => (text += c));
      res.on('end', () => resolve({ status: res.statusCode!, text }));
    });
    ws.once('error', reject);
  });
}

type DoorCall = (port: number, headers: Record<string, string | number>, id: string) => Promise<{ status: number; text: string }>;

const JSON_TYPE = { 'content-type': 'application/json', 'content-length': 2 };
const BOUNDARY = 'admission-test-boundary';
const upload = `--${BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="a.txt"\r\n\r\nhello\r\n--${BOUNDARY}--\r\n`;
const MULTIPART = { 'content-type': `multipart/form-data; boundary=${BOUNDARY}`, 'content-length': Buffer.byteLength(upload) };

/** Every door, each with a request that the door lets through when nothing is wrong with it. */
const DOORS: Record<string, { call: DoorCall; writes: boolean; auth: boolean; body?: 'json' | 'multipart' }> = {
  'REST read': { call: (port, h) => raw(port, 'GET', '/api/conversations', h), writes: false, auth: true },
  'REST JSON write': { call: (port, h) => raw(port, 'POST', '/api/conversations', { ...JSON_TYPE, ...h }, '{}'), writes: true, auth: true, body: 'json' },
  'REST upload': {
    call: (port, h, id) => raw(port, 'POST', `/api/file/upload?path=a.txt&conversation_id=${id}`, { ...MULTIPART, ...h }, upload),
    writes: true,
    auth: true,
    body: 'multipart',
  },
  'tRPC query': { call: (port, h) => raw(port, 'GET', '/trpc/listConversations?input=%7B%7D', h), writes: false, auth: true },
  'tRPC mutation': { call: (port, h) => raw(port, 'POST', '/trpc/createConversation', { ...JSON_TYPE, ...h }, '{}'), writes: true, auth: true, body: 'json' },
  'WebSocket upgrade': { call: (port, h, id) => upgrade(port, id, h as Record<string, string>), writes: true, auth: true },
  metrics: { call: (port, h) => raw(port, 'GET', '/metrics', h), writes: false, auth: true },
  "the console's files": { call: (port, h) => raw(port, 'GET', '/', h), writes: false, auth: false },
  'a workspace file shown': { call: (port, h, id) => raw(port, 'GET', `/api/conversations/${id}/workspace/index.html`, h), writes: false, auth: true },
  'workspace session': { call: (port, h) => raw(port, 'POST', '/api/auth/workspace-session', h), writes: true, auth: true },
  // last: it ends the browser session the cookie test signed in
  'sign-out': { call: (port, h) => raw(port, 'POST', '/api/logout', h), writes: true, auth: true },
};

const keyHeader = { 'x-session-api-key': KEY };

describe('the door, rule by rule', { timeout: 170_000 }, () => {
  test('Host: without a key only a loopback Host is answered (421), at every door', async () => {
    for (const [name, door] of Object.entries(DOORS)) {
      for (const host of ['evil.example', `evil.example:${keyless.port}`, '127.0.0.1.nip.io']) {
        const r = await door.call(keyless.port, { host }, keylessId);
        assert.equal(r.status, 421, `${name}, Host ${host}: ${r.status} ${r.text}`);
      }
      for (const host of [`127.0.0.1:${keyless.port}`, `localhost:${keyless.port}`, `[::1]:${keyless.port}`]) {
        const r = await door.call(keyless.port, { host }, keylessId);
        assert.ok(r.status < 400 || r.status === 404, `${name}, Host ${host}: ${r.status} ${r.text}`);
      }
      // with a key any name is answered: a rebinding page cannot know the key
      assert.notEqual((await door.call(keyed.port, { host: 'parley.internal', ...keyHeader }, keyedId)).status, 421, name);
    }
  });

  test('Origin: a foreign Origin cannot change state or open a socket (403); reads and same-origin pass, at every door', async () => {
    for (const [name, door] of Object.entries(DOORS)) {
      for (const origin of ['http://evil.example', 'null']) {
        const r = await door.call(keyed.port, { origin, ...keyHeader }, keyedId);
        if (door.writes) {
          assert.equal(r.status, 403, `${name} from ${origin}: ${r.status} ${r.text}`);
          assert.match(r.text, /ALLOWED_ORIGINS/);
        } else assert.ok(r.status < 400, `${name} is a read: ${r.status} ${r.text}`);
      }
      const same = await door.call(keyed.port, { origin: `http://127.0.0.1:${keyed.port}`, ...keyHeader }, keyedId);
      assert.ok(same.status < 400, `${name} from its own origin: ${same.status} ${same.text}`);
    }
  });

  test('credentials: every door but the public files needs a key (401, before 404/405 and before any body rule); a wrong one is 401 everywhere', async () => {
    for (const [name, door] of Object.entries(DOORS)) {
      const none = await door.call(keyed.port, {}, keyedId);
      const wrong = await door.call(keyed.port, { 'x-session-api-key': 'wrong-key-0123456789' }, keyedId);
      const right = await door.call(keyed.port, keyHeader, keyedId);
      assert.ok(right.status < 400, `${name} with the key: ${right.status} ${right.text}`);
      if (!door.auth) {
        assert.ok(none.status < 400 && wrong.status < 400, `${name} is public`);
        continue;
      }
      assert.equal(wrong.status, 401, `${name} with a wrong key: ${wrong.text}`);
      // the socket may still authenticate with its first frame: no key at the upgrade is not a refusal
      if (name === 'WebSocket upgrade') assert.equal(none.status, 101);
      else assert.equal(none.status, 401, `${name} without a key: ${none.text}`);
    }
    assert.equal((await upgrade(keyed.port, keyedId, {}, '?session_api_key=wrong-key-0123456789')).status, 401, 'the query key too');
    assert.equal((await raw(keyed.port, 'GET', '/api/no/such/route', {})).status, 401, 'no listing of routes');
    assert.equal((await raw(keyed.port, 'PATCH', '/api/conversations', {})).status, 401, 'nor of methods');
    assert.equal((await raw(keyed.port, 'POST', '/api/conversations', { 'content-type': 'text/plain', 'content-length': LIMIT * 2 })).status, 401);
    const trpc = await raw(keyed.port, 'POST', '/trpc/createConversation', { 'content-type': 'text/plain' }, '{}');
    assert.equal(trpc.status, 401);
    assert.equal(JSON.parse(trpc.text).error.data.code, 'UNAUTHORIZED', "tRPC's own error shape");
  });

  test("a session cookie only from the daemon's own origin (403), and not at /metrics", async () => {
    const signIn = await fetch(`${keyed.url}/?token=${KEY}`, { redirect: 'manual' });
    const cookie = String(signIn.headers.get('set-cookie')).split(';')[0]!;
    const own = `http://127.0.0.1:${keyed.port}`;
    for (const [name, door] of Object.entries(DOORS)) {
      if (!door.auth) continue;
      const foreign = await door.call(keyed.port, { cookie, origin: 'http://127.0.0.1:1' }, keyedId);
      // a cookie is no credential at /metrics at all
      assert.equal(foreign.status, name === 'metrics' ? 401 : 403, `${name}, cookie from another origin: ${foreign.text}`);
      const mine = await door.call(keyed.port, { cookie, origin: own }, keyedId);
      if (name === 'metrics') assert.equal(mine.status, 401, 'the metrics take a key only');
      else assert.ok(mine.status < 400, `${name}, cookie from the own origin: ${mine.status} ${mine.text}`);
      if (name !== 'sign-out' && name !== 'metrics') {
        const bare = await door.call(keyed.port, { cookie }, keyedId);
        assert.equal(bare.status, door.writes ? 403 : 200, `${name}, cookie and no Origin: ${bare.text}`);
      }
    }
  });

  test("a workspace session's cookie is a credential only where a workspace's files are shown (GET), and is not the key", async () => {
    const made = await fetch(`${keyed.url}/api/auth/workspace-session`, { method: 'POST', headers: keyHeader });
    const cookie = String(made.headers.get('set-cookie')).split(';')[0]!;
    assert.match(cookie, /^parley_workspace=[A-Za-z0-9_-]{43}$/);
    for (const [name, door] of Object.entries(DOORS)) {
      const r = await door.call(keyed.port, { cookie }, keyedId);
      const none = await door.call(keyed.port, {}, keyedId);
      if (name === 'a workspace file shown') assert.deepEqual([r.status, r.text], [200, 'page\n'], name);
      else assert.equal(r.status, none.status, `${name}: the cookie counts for nothing (${r.text})`);
    }
    // the same path with another method: no credential there either
    assert.equal((await raw(keyed.port, 'DELETE', `/api/conversations/${keyedId}/workspace/index.html`, { cookie })).status, 401);
  });

  test('Content-Type: a JSON body needs application/json, an upload multipart/form-data (415), even empty', async () => {
    for (const [name, door] of Object.entries(DOORS)) {
      if (!door.body) continue;
      for (const type of ['text/plain', 'application/x-www-form-urlencoded', door.body === 'json' ? 'multipart/form-data; boundary=x' : 'application/json']) {
        const r = await door.call(keyless.port, { 'content-type': type }, keylessId);
        assert.equal(r.status, 415, `${name} with ${type}: ${r.text}`);
      }
      const untyped = await door.call(keyless.port, { 'content-type': '', 'content-length': 0 }, keylessId);
      assert.equal(untyped.status, 415, `${name} without a type`);
    }
  });

  test('size: a declared Content-Length over MAX_BODY_BYTES (an upload: its own limit) is 413 before a byte is read', async () => {
    // an upload streams to its sandbox: MAX_UPLOAD_BYTES (or MAX_BODY_BYTES when larger) plus 1 MiB of form
    const uploadLimit = Math.max(LIMIT, MAX_UPLOAD_BYTES) + 1024 * 1024;
    for (const [name, door] of Object.entries(DOORS)) {
      if (!door.body) continue;
      const limit = door.body === 'multipart' ? uploadLimit : LIMIT;
      const r = await door.call(keyless.port, { 'content-length': limit + 1 }, keylessId).catch((err: Error) => ({ status: -1, text: String(err) }));
      assert.equal(r.status, 413, `${name}: ${r.text}`);
      assert.match(r.text, new RegExp(`exceeds ${limit} bytes`));
    }
  });
});
