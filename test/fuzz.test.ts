/**
 * No input, however malformed, produces a 5xx or stops the daemon: seeded random
 * bodies, paths, queries and WebSocket frames against every route that takes input.
 */
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import path from 'node:path';
import { after, before, test } from 'node:test';
import WebSocket from 'ws';
import { cloneRepository, CloneError } from '../src/workspace/index.js';
import { Sandbox } from '../src/sandbox/launcher.js';
import { startDaemon, tempDir, waitFor, type DaemonHandle } from './support/daemon.js';
import { startGitServer } from './support/git-server.js';
import { startScriptedLlm } from './support/scripted-llm.js';
import { allEvents, waitStatus } from './support/conversation-api.js';
import { startShttpServer } from './support/mcp-servers/http-servers.js';
import { connect } from './support/ws-client.js';
import { clientFrame, within } from './support/ws-frames.js';

let d: DaemonHandle;
before(async () => {
  d = await startDaemon({ MAX_BODY_BYTES: '65536', LOG_LEVEL: 'info' });
});
after(async () => {
  await d.stop();
  fs.rmSync(d.dataDir, { recursive: true, force: true });
});

/** mulberry32: a small seeded PRNG so a failure can be replayed. */
function rng(seed: number) {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
const SEED = Number(process.env.FUZZ_SEED ?? 20261121);
/** Percent-encodes; a lone surrogate goes out as raw invalid UTF-8 (%ED%A0%80), itself a good case. */
const enc = (s: string) => {
  try {
    return encodeURIComponent(s);
  } catch {
    return '%ED%A0%80';
  }
};

function generator(r: () => number) {
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(r() * xs.length)]!;
  const strings = [
    '',
    'x',
    'user',
    'text',
    'image',
    'github',
    'http://127.0.0.1:1',
    '00000000-0000-0000-0000-000000000000',
    '\u0000',
    '\ud800',
    '💥',
    'a'.repeat(5000),
    '__proto__',
    'constructor',
    '../../etc/passwd',
    '%ZZ',
    'null',
  ];
  const keys = [
    'role',
    'content',
    'run',
    'text',
    'type',
    'image_urls',
    'cache_prompt',
    'initial_user_msg',
    'repository',
    'git_provider',
    'selected_branch',
    'mcp_config',
    'stdio_servers',
    'sse_servers',
    'shttp_servers',
    'url',
    'api_key',
    'name',
    'command',
    'args',
    'env',
    'timeout',
    'provider_tokens',
    'token',
    'host',
    'suggested_task',
    'create_microagent',
    'replay_json',
    'conversation_id',
    'image_urls',
    'llm_model',
    'llm_api_key',
    'value',
    'description',
    '__proto__',
    'constructor',
    'x',
  ];
  const value = (depth: number): unknown => {
    const k = r();
    if (depth > 4 || k < 0.3) return pick([null, true, false, 0, -1, 1.5, 1e308, -0, 2 ** 53 + 1, ...strings]);
    if (k < 0.6) return Array.from({ length: Math.floor(r() * 4) }, () => value(depth + 1));
    const o: Record<string, unknown> = {};
    for (let i = Math.floor(r() * 5); i > 0; i--) o[pick(keys)] = value(depth + 1);
    return o;
  };
  const text = (v: unknown): string => {
    const s = JSON.stringify(v) ?? 'null';
    const m = r();
    if (m < 0.1) return s.slice(0, Math.floor(r() * s.length)); // truncated JSON
    if (m < 0.15) return s + pick(['}', ']', ',', '"', 'x']);
    return s;
  };
  return { pick, value, text };
}

test('random bodies, paths and queries never produce a 5xx; the daemon stays up', async () => {
  const r = rng(SEED);
  const g = generator(r);
  const id = (await d.req('POST', '/api/conversations', {})).body.conversation_id as string;
  const bodyRoutes = [
    ['POST', '/api/conversations'],
    ['POST', `/api/conversations/${id}/events`],
    ['POST', '/api/add-git-providers'],
    ['POST', '/api/settings'],
    ['POST', '/api/secrets'],
    ['PUT', '/api/secrets/FUZZ_NAME'],
  ] as const;
  const seen = new Map<number, number>();
  for (let i = 0; i < 600; i++) {
    const [m, p] = g.pick(bodyRoutes);
    // keep the fuzz from starting agents: run flags are forced off where they exist
    const v = g.value(0);
    if (v && typeof v === 'object' && !Array.isArray(v))
      for (const k of ['run', 'initial_user_msg', 'suggested_task', 'create_microagent', 'replay_json']) delete (v as Record<string, unknown>)[k];
    const body = g.text(v);
    const res = await d.req(m, p, body);
    seen.set(res.status, (seen.get(res.status) ?? 0) + 1);
    assert.ok(res.status < 500, `seed ${SEED} #${i}: ${m} ${p} ${body.slice(0, 200)} → ${res.status} ${res.text.slice(0, 200)}`);
  }
  const paths = [
    '/api/conversations/',
    `/api/conversations/${id}/events/search`,
    `/api/conversations/${id}/events/count`,
    `/api/conversations/${id}/events/`,
    '/api/conversations',
    `/api/conversations/${id}/mcp`,
  ];
  const qkeys = ['limit', 'page_id', 'kind', 'source', 'sort_order', 'after_seq'];
  for (let i = 0; i < 300; i++) {
    const q = Array.from({ length: Math.floor(r() * 4) }, () => `${g.pick(qkeys)}=${enc(String(g.value(5)))}`).join('&');
    const tail = r() < 0.3 ? enc(String(g.value(5))) : '';
    const res = await d.req('GET', `${g.pick(paths)}${tail}${q ? `?${q}` : ''}`);
    seen.set(res.status, (seen.get(res.status) ?? 0) + 1);
    assert.ok(res.status < 500, `seed ${SEED} GET #${i} → ${res.status} ${res.text.slice(0, 200)}`);
  }
  assert.ok((seen.get(422) ?? 0) > 100, `mostly rejected as 422: ${JSON.stringify([...seen])}`);
  assert.equal((await d.req('GET', '/alive')).status, 200);
  assert.equal(d.proc.exitCode, null);
});

test('random WebSocket frames get ServerErrorEvents or are sends; the socket and the daemon stay up', async () => {
  const r = rng(SEED + 1);
  const g = generator(r);
  const id = (await d.req('POST', '/api/conversations', {})).body.conversation_id as string;
  const s = connect(`ws://127.0.0.1:${d.port}/sockets/events/${id}`);
  await s.next((f) => f.key === 'full_state');
  for (let i = 0; i < 300; i++) {
    const v = g.value(0);
    if (v && typeof v === 'object' && !Array.isArray(v)) delete (v as Record<string, unknown>).run;
    if (r() < 0.2) s.ws.send(Buffer.from(g.text(v)), { binary: true });
    else s.ws.send(g.text(v));
  }
  s.send({ role: 'user', content: [{ type: 'text', text: 'still alive' }] });
  await s.next((f) => f.kind === 'MessageEvent' && f.llm_message?.content?.[0]?.text === 'still alive', 'the final send', 20_000);
  assert.equal(s.closed, null, 'the socket stayed open');
  assert.ok(s.frames.some((f) => f.kind === 'ServerErrorEvent'));
  s.close();
  assert.equal((await d.req('GET', '/alive')).status, 200);
});

// ---- attacks through the public API: each one stays fixed ------------------------------------

/** A request with exactly these headers (fetch would add or refuse some, e.g. Host). */
function raw(
  port: number,
  method: string,
  p: string,
  headers: Record<string, string | number>,
  body?: string | Buffer,
): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, method, path: p, headers, agent: false, setHost: !('Host' in headers) }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode!, text: Buffer.concat(chunks).toString('utf8') }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

/** Resolves with the HTTP status a WebSocket handshake was refused with (or 101). */
function handshake(url: string, headers: Record<string, string>): Promise<number> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, { headers });
    ws.once('open', () => (ws.close(), resolve(101)));
    ws.once('unexpected-response', (_req, res) => (res.resume(), resolve(res.statusCode!)));
    ws.once('error', reject);
  });
}

const conversationCount = async () => (await d.req('GET', '/api/conversations?limit=100')).body.items.length as number;

test('attack 12.1: a cross-site "simple" POST (no Content-Type, text/plain, form) is refused with 415 and creates nothing', async () => {
  const before = await conversationCount();
  const body = JSON.stringify({ replay_json: JSON.stringify([{ kind: 'ActionEvent', action: { kind: 'ExecuteBashAction', command: 'touch /tmp/pwned' } }]) });
  for (const headers of [
    {} as Record<string, string>,
    { 'content-type': 'text/plain;charset=UTF-8' },
    { 'content-type': 'application/x-www-form-urlencoded' },
    { 'content-type': 'multipart/form-data; boundary=x' },
  ]) {
    const r = await raw(d.port, 'POST', '/api/conversations', { ...headers, 'content-length': Buffer.byteLength(body) }, body);
    assert.equal(r.status, 415, `${JSON.stringify(headers)} → ${r.status} ${r.text}`);
  }
  const empty = await raw(d.port, 'POST', '/api/settings', { 'content-length': 0 });
  assert.equal(empty.status, 415, 'an empty body without a content type too');
  assert.equal(await conversationCount(), before);
  const trpc = await raw(d.port, 'POST', '/trpc/createConversation', { 'content-type': 'text/plain', 'content-length': 2 }, '{}');
  assert.equal(trpc.status, 415, 'the tRPC door too');
  assert.equal(await conversationCount(), before);
});

test('attack 12.1: a foreign Origin cannot change state or open a WebSocket; same-origin, no Origin and ALLOWED_ORIGINS can', async () => {
  const json = { 'content-type': 'application/json', 'content-length': 2 };
  const evil = await raw(d.port, 'POST', '/api/conversations', { ...json, origin: 'http://evil.example' }, '{}');
  assert.equal(evil.status, 403, evil.text);
  assert.match(evil.text, /ALLOWED_ORIGINS/);
  assert.equal((await raw(d.port, 'POST', '/trpc/createConversation', { ...json, origin: 'null' }, '{}')).status, 403, 'an opaque origin is foreign');
  assert.equal((await raw(d.port, 'DELETE', '/api/secrets/SOME_NAME', { origin: 'https://evil.example' })).status, 403);
  assert.equal((await raw(d.port, 'POST', '/api/conversations', { ...json, origin: `http://127.0.0.1:${d.port}` }, '{}')).status, 200, 'same origin');
  assert.equal((await raw(d.port, 'POST', '/api/conversations', json, '{}')).status, 200, 'no Origin (curl, SDKs)');
  assert.equal(
    (await raw(d.port, 'GET', '/api/conversations', { origin: 'http://evil.example' })).status,
    200,
    'reads are not state changes (and CORS keeps them unreadable)',
  );
  const id = (await d.req('POST', '/api/conversations', {})).body.conversation_id as string;
  const ws = `ws://127.0.0.1:${d.port}/sockets/events/${id}`;
  assert.equal(await handshake(ws, { origin: 'http://evil.example' }), 403);
  assert.equal(await handshake(ws, { origin: `http://127.0.0.1:${d.port}` }), 101);
  assert.equal(await handshake(ws, {}), 101);
  const allowed = await startDaemon({ ALLOWED_ORIGINS: 'https://app.example.com, http://localhost:5173' });
  try {
    assert.equal((await raw(allowed.port, 'POST', '/api/conversations', { ...json, origin: 'https://app.example.com' }, '{}')).status, 200);
    assert.equal((await raw(allowed.port, 'POST', '/api/conversations', { ...json, origin: 'https://other.example.com' }, '{}')).status, 403);
    const wsId = (await allowed.req('POST', '/api/conversations', {})).body.conversation_id as string;
    assert.equal(await handshake(`ws://127.0.0.1:${allowed.port}/sockets/events/${wsId}`, { origin: 'http://localhost:5173' }), 101);
  } finally {
    await allowed.stop();
  }
});

test('attack 12.1: without a session key only a loopback Host is answered (DNS rebinding)', async () => {
  for (const host of ['evil.example', `evil.example:${d.port}`, `127.0.0.1.nip.io:${d.port}`, '192.168.1.10']) {
    const r = await raw(d.port, 'GET', '/api/conversations', { Host: host });
    assert.equal(r.status, 421, `${host} → ${r.status}`);
    assert.equal((await raw(d.port, 'POST', '/api/conversations', { Host: host, 'content-type': 'application/json', 'content-length': 2 }, '{}')).status, 421);
  }
  for (const host of [`127.0.0.1:${d.port}`, `localhost:${d.port}`, `[::1]:${d.port}`, 'localhost']) {
    assert.equal((await raw(d.port, 'GET', '/api/conversations', { Host: host })).status, 200, host);
  }
  const id = (await d.req('POST', '/api/conversations', {})).body.conversation_id as string;
  assert.equal(await handshake(`ws://127.0.0.1:${d.port}/sockets/events/${id}`, { host: `evil.example:${d.port}` }), 421);
  // with a key the name does not matter: a rebinding page cannot know the key
  const keyed = await startDaemon({ SESSION_API_KEY: 'attack-test-key-1' });
  try {
    assert.equal((await raw(keyed.port, 'GET', '/api/conversations', { Host: 'parley.internal', 'x-session-api-key': 'attack-test-key-1' })).status, 200);
  } finally {
    await keyed.stop();
  }
});

test('attack 12.5: over-limit bodies answer 413 on every path, before reading when Content-Length says so', async () => {
  const big = JSON.stringify({ initial_user_msg: 'x'.repeat(70_000) });
  for (const p of ['/api/conversations', '/trpc/createConversation']) {
    const declared = await raw(d.port, 'POST', p, { 'content-type': 'application/json', 'content-length': 10 * 1024 * 1024 }, '');
    assert.equal(declared.status, 413, `${p} declared: ${declared.text}`);
    const sent = await raw(d.port, 'POST', p, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(big) }, big);
    assert.equal(sent.status, 413, `${p} sent: ${sent.text}`);
    assert.match(sent.text, /exceeds 65536 bytes/);
  }
});

test('attack 12.5: the key is checked before 404/405, so routes cannot be listed without it', async () => {
  const keyed = await startDaemon({ SESSION_API_KEY: 'attack-test-key-2' });
  try {
    assert.equal((await keyed.req('GET', '/api/nothing-here')).status, 401);
    assert.equal((await keyed.req('DELETE', '/api/settings')).status, 401);
    assert.equal((await keyed.req('PUT', '/api/conversations')).status, 401);
    const k = { 'x-session-api-key': 'attack-test-key-2' };
    assert.equal((await keyed.req('GET', '/api/nothing-here', undefined, k)).status, 404);
    assert.equal((await keyed.req('DELETE', '/api/settings', undefined, k)).status, 405);
  } finally {
    await keyed.stop();
  }
});

test('attack 12.5: secrets and session keys shorter than 8 characters are refused', async () => {
  const r = await d.req('POST', '/api/secrets', { name: 'SHORT_ONE', value: 'abc' });
  assert.equal(r.status, 422);
  assert.match(r.text, /at least 8 characters/);
  assert.equal((await d.req('POST', '/api/secrets', { name: 'LONG_ENOUGH', value: 'abcdefgh' })).status, 201);
  assert.equal((await d.req('PUT', '/api/secrets/LONG_ENOUGH', { value: 'abc' })).status, 422);
  const token = await d.req('POST', '/api/add-git-providers', { provider_tokens: { github: { token: 'ghp_x' } } });
  assert.equal(token.status, 422, token.text);
  assert.match(token.text, /at least 8 characters/);
  await assert.rejects(startDaemon({ SESSION_API_KEY: 'short' }), /SESSION_API_KEY: a session key must be at least 8 characters/);
  await assert.rejects(startDaemon({ SESSION_API_KEYS: 'long-enough-key,k2' }), /at least 8 characters/);
});

test('attack 12.5: every file under DATA_DIR is 0600 and every directory 0700, whatever the umask', async () => {
  const dir = tempDir();
  // what an earlier version (or a looser umask) left behind is tightened at start too
  fs.mkdirSync(path.join(dir, 'journal'), { mode: 0o755 });
  fs.writeFileSync(path.join(dir, 'journal', 'old.log'), 'x', { mode: 0o644 });
  fs.chmodSync(path.join(dir, 'journal', 'old.log'), 0o644);
  fs.chmodSync(dir, 0o755);
  const previous = process.umask(0o022);
  let loose: DaemonHandle;
  try {
    loose = await startDaemon({}, dir);
  } finally {
    process.umask(previous);
  }
  try {
    const id = (await loose.req('POST', '/api/conversations', { initial_user_msg: 'hello' })).body.conversation_id as string;
    assert.equal((await loose.req('POST', '/api/secrets', { name: 'A_SECRET', value: 'abcdefgh-secret' })).status, 201);
    await waitFor(() => fs.existsSync(path.join(dir, 'parley.db-wal')), 'the WAL');
    assert.ok(id);
    const bad: string[] = [];
    const walk = (p: string) => {
      const st = fs.lstatSync(p);
      if (st.isDirectory() ? (st.mode & 0o777) !== 0o700 : (st.mode & 0o077) !== 0)
        bad.push(`${path.relative(dir, p) || '.'} ${(st.mode & 0o777).toString(8)}`);
      if (st.isDirectory() && p !== path.join(dir, 'workspaces')) for (const n of fs.readdirSync(p)) walk(path.join(p, n));
    };
    walk(dir);
    assert.deepEqual(bad, []);
    assert.ok(fs.readdirSync(dir).length >= 3, fs.readdirSync(dir).join(' '));
  } finally {
    await loose!.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('attack 12.5: DELETE removes DATA_DIR/outputs/<id> with the workspace', async () => {
  const id = (await d.req('POST', '/api/conversations', {})).body.conversation_id as string;
  const out = path.join(d.dataDir, 'outputs', id);
  fs.mkdirSync(out, { recursive: true });
  fs.writeFileSync(path.join(out, 'output-1.txt'), 'full output of a command');
  assert.equal((await d.req('DELETE', `/api/conversations/${id}`)).status, 200);
  assert.equal(fs.existsSync(out), false);
});

test('attack 12.2: a git host that redirects the clone to another host does not get the token there', async () => {
  const TOKEN = `tok-${crypto.randomBytes(12).toString('hex')}`;
  const second = await startGitServer({ token: TOKEN });
  await second.createRepo('acme/app', { 'README.md': '# app\n' }, { private: true });
  const seen: string[] = [];
  // the first host answers every request with a redirect to the second
  const first = http.createServer((req, res) => {
    seen.push(String(req.headers.authorization ?? ''));
    res.writeHead(302, { location: `${second.url}${req.url}` }).end();
  });
  await new Promise<void>((r) => first.listen(0, '127.0.0.1', r));
  const firstUrl = `http://127.0.0.1:${(first.address() as { port: number }).port}`;
  const root = tempDir('parley-redirect-');
  const plainFiles = Sandbox.none(root);
  try {
    const workspaceDir = path.join(root, 'ws');
    fs.mkdirSync(workspaceDir);
    await assert.rejects(
      cloneRepository({
        workspaceDir,
        files: plainFiles.files('fuzz-ws', workspaceDir),
        repository: 'acme/app',
        provider: 'github',
        providers: [{ provider: 'github', token: TOKEN, host: firstUrl }],
        helperDir: path.join(root, 'helpers'),
        redact: (s) => s,
      }),
      CloneError,
    );
    assert.ok(second.requests.length > 0, 'git followed the redirect (the attack reached the second host)');
    for (const r of second.requests) assert.equal(r.headers.authorization, undefined, `no credentials at the second host: ${r.method} ${r.url}`);
    assert.ok(seen.every((a) => !a.includes(Buffer.from(TOKEN).toString('base64').slice(0, 8))));
    // the same token still works for the host it was stored for
    const direct = path.join(root, 'ws2');
    fs.mkdirSync(direct);
    const ok = await cloneRepository({
      workspaceDir: direct,
      files: plainFiles.files('fuzz-direct', direct),
      repository: 'acme/app',
      provider: 'github',
      providers: [{ provider: 'github', token: TOKEN, host: second.url }],
      helperDir: path.join(root, 'helpers'),
      redact: (s) => s,
    });
    assert.equal(ok.provider, 'github');
    // GIT_ALLOWED_HOSTS: a host outside the list is not cloned from at all
    const before = second.requests.length;
    const third = path.join(root, 'ws3');
    fs.mkdirSync(third);
    await assert.rejects(
      cloneRepository({
        workspaceDir: third,
        files: plainFiles.files('fuzz-third', third),
        repository: 'acme/app',
        provider: 'github',
        providers: [{ provider: 'github', token: TOKEN, host: second.url }],
        helperDir: path.join(root, 'helpers'),
        redact: (s) => s,
        allowedHosts: ['github.com'],
      }),
      /not in GIT_ALLOWED_HOSTS/,
    );
    assert.equal(second.requests.length, before);
  } finally {
    first.close();
    await second.close();
    await plainFiles.close();
    fs.rmSync(root, { recursive: true, force: true });
  }
});

test('attack 12.3: image URLs that will never be fetched are refused on arrival (422 with the rule)', async () => {
  const id = (await d.req('POST', '/api/conversations', {})).body.conversation_id as string;
  const never = [
    'http://127.0.0.1:1/x.png',
    'http://169.254.169.254/latest/meta-data',
    'http://[::1]/a.png',
    'http://[::ffff:10.0.0.1]/a.png',
    'http://10.1.2.3/a.png',
    'https://printer.local/a.png',
    'http://metadata.google.internal/x',
    'file:///etc/passwd',
    'ftp://example.com/a.png',
    'data:text/html;base64,PGgxPg==',
    'not a url',
    'http://0.0.0.0/',
  ];
  for (const url of never) {
    const r = await d.req('POST', `/api/conversations/${id}/events`, { role: 'user', content: [{ type: 'image', image_urls: [url] }], run: false });
    assert.equal(r.status, 422, `${url} → ${r.status}`);
    assert.match(r.text, /image URLs must be https:\/\/, http:\/\/ or data:image/);
    assert.equal((await d.req('POST', '/api/conversations', { initial_user_msg: 'x', image_urls: [url] })).status, 422, url);
  }
  for (const url of ['https://example.com/cat.png', 'http://93.184.216.34/a.png', 'data:image/png;base64,iVBORw0KGgo=']) {
    assert.equal(
      (await d.req('POST', `/api/conversations/${id}/events`, { role: 'user', content: [{ type: 'image', image_urls: [url] }], run: false })).status,
      200,
      url,
    );
  }
  const s = connect(`ws://127.0.0.1:${d.port}/sockets/events/${id}`);
  await s.next((f) => f.key === 'full_state');
  s.send({ role: 'user', content: [{ type: 'image', image_urls: ['http://192.168.0.1/a.png'] }] });
  const err = await s.next((f) => f.kind === 'ServerErrorEvent', 'the refusal');
  assert.match(err.detail, /never fetched/);
  s.close();
});

test('attack 12.3: an image whose download fails at step time becomes a note; the conversation keeps working', async () => {
  const llm = await startScriptedLlm([{ text: 'first answer' }, { text: 'second answer' }]);
  const withLlm = await startDaemon({ LLM_MODEL: 'openai/scripted', LLM_BASE_URL: llm.url, LLM_API_KEY: 'sk-scripted-key' });
  try {
    // passes the arrival rule (a public name) but cannot be downloaded: the name does not resolve
    const dead = 'https://img.nonexistent.invalid/cat.png';
    const created = await withLlm.req('POST', '/api/conversations', { initial_user_msg: 'what is this?', image_urls: [dead] });
    assert.equal(created.status, 200, created.text);
    const id = created.body.conversation_id as string;
    const finished = async (n: number) =>
      waitFor(
        async () => {
          const evs = (await withLlm.req('GET', `/api/conversations/${id}/events/search?limit=100`)).body.items as any[];
          return (
            evs.filter((e) => e.kind === 'MessageEvent' && e.source === 'agent').length >= n &&
            (await withLlm.req('GET', `/api/conversations/${id}`)).body.execution_status !== 'running'
          );
        },
        `agent answer ${n}`,
        30_000,
      );
    await finished(1);
    const first = JSON.stringify(llm.requests[0]!.body.messages);
    assert.match(first, /image omitted: https:\/\/img\.nonexistent\.invalid\/cat\.png could not be downloaded/);
    assert.match(first, /what is this\?/);
    assert.equal(
      (await withLlm.req('POST', `/api/conversations/${id}/events`, { role: 'user', content: [{ type: 'text', text: 'and now?' }], run: true })).status,
      200,
    );
    await finished(2);
    assert.equal(llm.requests.length, 2);
    assert.match(JSON.stringify(llm.requests[1]!.body.messages), /and now\?/);
    const errors = ((await withLlm.req('GET', `/api/conversations/${id}/events/search?limit=100`)).body.items as any[]).filter((e) => /Error/.test(e.kind));
    assert.deepEqual(errors, []);
  } finally {
    await withLlm.stop();
    await llm.close();
    fs.rmSync(withLlm.dataDir, { recursive: true, force: true });
  }
});

/** `p`, or a failure naming `what` after `ms` (so a missing close fails the test instead of hanging it). */
/** The close code in the last close frame among what a raw client received (null: none). */
function closeCode(raw: Buffer): number | null {
  // the close frame is the last frame: 0x88, a payload length under 126, then the code
  for (let i = raw.lastIndexOf(0x88); i >= 0; i = i > 0 ? raw.lastIndexOf(0x88, i - 1) : -1) {
    const len = raw[i + 1]!;
    if (len >= 2 && len < 126 && i + 2 + len === raw.length) return raw.readUInt16BE(i + 2);
  }
  return null;
}

function rawSocket(port: number, p: string, headers = ''): Promise<{ sock: net.Socket; received: () => Buffer; closed: Promise<void> }> {
  return new Promise((resolve, reject) => {
    const sock = net.connect(port, '127.0.0.1');
    const chunks: Buffer[] = [];
    const closed = new Promise<void>((r) => sock.once('close', () => r()));
    sock.on('error', () => {});
    sock.write(
      `GET ${p} HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: ` +
        `dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n${headers}\r\n`,
    );
    sock.once('data', (c: Buffer) => {
      if (!c.toString('latin1').startsWith('HTTP/1.1 101')) return reject(new Error(`handshake: ${c.toString('latin1').split('\r\n')[0]}`));
      chunks.push(c.subarray(c.indexOf('\r\n\r\n') + 4));
      sock.on('data', (d: Buffer) => chunks.push(d));
      resolve({ sock, received: () => Buffer.concat(chunks), closed });
    });
  });
}

test('attack 12.4: search pages are bounded by bytes (fewer items and a next_page_id); one content item over MAX_EVENT_BYTES is 413', async () => {
  const big = await startDaemon({ MAX_EVENT_BYTES: '1048576' });
  try {
    const id = (await big.req('POST', '/api/conversations', {})).body.conversation_id as string;
    const tooBig = 'y'.repeat(1_100_000);
    const r = await big.req('POST', `/api/conversations/${id}/events`, { role: 'user', content: [{ type: 'text', text: tooBig }], run: false });
    assert.equal(r.status, 413, r.text);
    assert.match(r.text, /MAX_EVENT_BYTES/);
    assert.equal((await big.req('POST', '/api/conversations', { initial_user_msg: tooBig })).status, 413);
    const t = await raw(
      big.port,
      'POST',
      '/trpc/sendMessage',
      { 'content-type': 'application/json' },
      JSON.stringify({ conversation_id: id, message: { role: 'user', content: [{ type: 'text', text: tooBig }], run: false } }),
    );
    assert.equal(t.status, 413, t.text.slice(0, 300));
    const s = connect(`ws://127.0.0.1:${big.port}/sockets/events/${id}`);
    await s.next((f) => f.key === 'full_state');
    s.send({ role: 'user', content: tooBig });
    assert.match((await s.next((f) => f.kind === 'ServerErrorEvent', 'the refusal')).detail, /MAX_EVENT_BYTES/);
    s.close();
    // six messages of ~900 KB: a page stops once it reaches 4 MiB
    const text = (i: number) => `${i}:${'z'.repeat(900_000)}`;
    for (let i = 0; i < 6; i++)
      assert.equal(
        (await big.req('POST', `/api/conversations/${id}/events`, { role: 'user', content: [{ type: 'text', text: text(i) }], run: false })).status,
        200,
      );
    const seen: number[] = [];
    let page: string | null = null;
    let pages = 0;
    do {
      const res = await fetch(`${big.url}/api/conversations/${id}/events/search?limit=100&kind=MessageEvent${page ? `&page_id=${page}` : ''}`);
      const body = await res.text();
      assert.ok(body.length < 5.5 * 1024 * 1024, `a page of ${body.length} bytes`);
      const json = JSON.parse(body);
      for (const e of json.items) seen.push(Number(e.llm_message.content[0].text.split(':')[0]));
      page = json.next_page_id;
      pages++;
    } while (page);
    assert.deepEqual(seen, [0, 1, 2, 3, 4, 5], 'every message once, in order');
    assert.ok(pages >= 2, `${pages} pages`);
    // a replay over the WebSocket delivers them all, in order
    const all = connect(`ws://127.0.0.1:${big.port}/sockets/events/${id}?resend_mode=all`);
    await waitFor(() => all.frames.filter((f) => f.kind === 'MessageEvent').length === 6, 'the replay', 30_000);
    assert.deepEqual(
      all.frames.filter((f) => f.kind === 'MessageEvent').map((f) => Number(f.llm_message.content[0].text.split(':')[0])),
      [0, 1, 2, 3, 4, 5],
    );
    all.close();
  } finally {
    await big.stop();
    fs.rmSync(big.dataDir, { recursive: true, force: true });
  }
});

test('attack 12.4: WebSocket limits: frames over MAX_BODY_BYTES, unread replies, repeated invalid frames, pre-auth frames and pending sockets', async () => {
  const KEY = 'attack-test-key-ws';
  const w = await startDaemon({ SESSION_API_KEY: KEY, MAX_BODY_BYTES: '65536', WS_MAX_BUFFERED_BYTES: '65536' });
  try {
    const id = (await w.req('POST', '/api/conversations', {}, { 'x-session-api-key': KEY })).body.conversation_id as string;
    const p = `/sockets/events/${id}`;
    // a frame above the body limit closes the connection (uWS drops it without buffering the rest)
    const over = await rawSocket(w.port, p, `X-Session-API-Key: ${KEY}\r\n`);
    over.sock.write(clientFrame(Buffer.alloc(70_000, 0x20)));
    await within(over.closed, 20_000, 'the server closing the over socket');
    assert.ok(over.received().includes('full_state'), 'it was open and authenticated');
    assert.ok([null, 1009].includes(closeCode(over.received())));
    const under = connect(`ws://127.0.0.1:${w.port}${p}`, { headers: { 'x-session-api-key': KEY } });
    await under.next((f) => f.key === 'full_state');
    under.send({ role: 'user', content: 'x'.repeat(60_000), run: false });
    await under.next((f) => f.kind === 'MessageEvent', 'a frame under the limit is a send');
    under.close();
    // invalid frames sent without reading the replies: the socket is closed, not buffered without end
    const junk = await rawSocket(w.port, p, `X-Session-API-Key: ${KEY}\r\n`);
    junk.sock.pause();
    const frame = clientFrame(Buffer.from('{"nonsense":true}'));
    junk.sock.write(Buffer.concat(Array.from({ length: 3000 }, () => frame)));
    junk.sock.resume();
    await within(junk.closed, 20_000, 'the server closing the junk socket');
    assert.ok([1008, 1013].includes(closeCode(junk.received())!), `closed with ${closeCode(junk.received())}`);
    // repeated invalid frames from a client that reads: closed after the limit (1008)
    const reader = connect(`ws://127.0.0.1:${w.port}${p}`, { headers: { 'x-session-api-key': KEY } });
    await reader.next((f) => f.key === 'full_state');
    for (let i = 0; i < 1000; i++) reader.ws.send('{"nonsense":true}');
    assert.equal((await reader.waitClose(20_000)).code, 1008);
    // before authentication: a frame above a few KiB ends the socket
    const preauth = await rawSocket(w.port, p);
    preauth.sock.write(clientFrame(Buffer.from(JSON.stringify({ type: 'auth', session_api_key: 'x'.repeat(10_000) }))));
    await within(preauth.closed, 20_000, 'the server closing the preauth socket');
    assert.equal(closeCode(preauth.received()), 4001);
    // and the sockets waiting for authentication are capped per address
    const waiting: Awaited<ReturnType<typeof rawSocket>>[] = [];
    for (let i = 0; i < 8; i++) waiting.push(await rawSocket(w.port, p));
    await assert.rejects(rawSocket(w.port, p), /429/);
    // an authenticated one is not affected, and a pending one still authenticates
    const ok = connect(`ws://127.0.0.1:${w.port}${p}`, { headers: { 'x-session-api-key': KEY } });
    await ok.next((f) => f.key === 'full_state');
    ok.close();
    waiting[0]!.sock.write(clientFrame(Buffer.from(JSON.stringify({ type: 'auth', session_api_key: KEY }))));
    await waitFor(() => waiting[0]!.received().includes('full_state'), 'auth by frame');
    for (const s of waiting) s.sock.destroy();
    await rawSocket(w.port, p).then((s) => s.sock.destroy());
  } finally {
    await w.stop();
    fs.rmSync(w.dataDir, { recursive: true, force: true });
  }
});

test('12.6: MCP_ALLOWED_HOSTS: an sse/shttp MCP server on another host is not contacted; an allowed one is', async () => {
  const allowed = await startShttpServer({ name: 'allowed' });
  const other = await startShttpServer({ name: 'other' });
  const llm = await startScriptedLlm([{ text: 'done' }]);
  const m = await startDaemon({
    MCP_ALLOWED_HOSTS: `mcp.example.com, 127.0.0.1:${allowed.port}`,
    LLM_MODEL: 'openai/scripted',
    LLM_BASE_URL: llm.url,
    LLM_API_KEY: 'sk-scripted-key',
  });
  try {
    const r = await m.req('POST', '/api/conversations', {
      initial_user_msg: 'hi',
      mcp_config: {
        shttp_servers: [
          { url: allowed.url, api_key: 'allowed-key-1' },
          { url: other.url, api_key: 'other-key-12' },
        ],
      },
    });
    assert.equal(r.status, 200, r.text);
    const id = r.body.conversation_id as string;
    await waitStatus(m.req, id, 'finished', 40_000);
    const failed = (await allEvents(m.req, id)).filter((e) => e.kind === 'ConversationErrorEvent' && e.code === 'MCPServerFailed');
    assert.equal(failed.length, 1, JSON.stringify(failed));
    assert.match(failed[0].detail, new RegExp(`host 127\\.0\\.0\\.1:${other.port} is not in MCP_ALLOWED_HOSTS`));
    assert.deepEqual(other.authHeaders, [], 'the refused server never saw a request (nor its key)');
    assert.ok(allowed.authHeaders.length > 0, 'the allowed one was used');
  } finally {
    await m.stop();
    await Promise.all([allowed.close(), other.close(), llm.close()]);
    fs.rmSync(m.dataDir, { recursive: true, force: true });
  }
});
