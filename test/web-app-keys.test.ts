/**
 * A key per conversation (src/conversation/conversation-keys.ts, the `conversation` principal of
 * bridge/admission.ts) against real daemons, the way a holder of one conversation's key would try
 * to reach further: `session_api_key` in a conversation's answers is its own key, never the
 * daemon's; it opens that conversation's routes, socket, files and git changes, and the runtime
 * routes that name no conversation act on its conversation; it is refused everywhere else (403:
 * the key is valid, the route is not its conversation's), a forged or altered key is a 401, and
 * no key appears in the daemon's output.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import crypto from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { startDaemon, waitFor, type DaemonHandle } from './support/daemon.js';
import { connect } from './support/ws-client.js';

const KEY = 'web-app-keys-daemon-key-0123';
let d: DaemonHandle;
let keyless: DaemonHandle;

before(async () => {
  [d, keyless] = await Promise.all([startDaemon({ SESSION_API_KEY: KEY }), startDaemon({ SANDBOX: 'none' })]);
});
after(async () => {
  await Promise.all([d?.stop(), keyless?.stop()]);
});

const withKey = (key: string, extra: Record<string, string> = {}) => ({ 'x-session-api-key': key, ...extra });
const daemonReq = (method: string, p: string, body?: unknown) => d.req(method, p, body, withKey(KEY));
const enc = encodeURIComponent;

async function conversation(daemon: DaemonHandle, headers: Record<string, string>) {
  const created = await daemon.req('POST', '/api/conversations', {}, headers);
  assert.equal(created.status, 200, created.text);
  const info = await daemon.req('GET', `/api/conversations/${created.body.conversation_id}`, undefined, headers);
  assert.equal(info.status, 200, info.text);
  return { id: info.body.conversation_id as string, key: info.body.session_api_key as string, info: info.body };
}

function upload(daemon: DaemonHandle, key: string, appPath: string, text: string, query = '') {
  const form = new FormData();
  form.append('file', new Blob([text]), 'note.txt');
  return fetch(`${daemon.url}/api/file/upload/${enc(appPath)}${query}`, { method: 'POST', headers: withKey(key), body: form });
}

describe("a conversation's own key", { timeout: 170_000 }, () => {
  let a: Awaited<ReturnType<typeof conversation>>;
  let b: Awaited<ReturnType<typeof conversation>>;
  before(async () => {
    a = await conversation(d, withKey(KEY));
    b = await conversation(d, withKey(KEY));
  });

  test("every answer about a conversation carries its own key, never the daemon's; the app's fields are added, Parley's kept", async () => {
    assert.match(a.key, /^pk1\.[0-9a-f]{32}\.[\w-]{43}$/);
    assert.notEqual(a.key, b.key);
    assert.ok(!a.key.includes(KEY));
    assert.equal(a.info.status, 'RUNNING', 'a conversation that can take a message is RUNNING (its sandbox starts on demand)');
    assert.equal(a.info.execution_status, 'idle', "the agent's state stays in execution_status");
    assert.equal(a.info.conversation_version, 'V1');
    assert.equal(a.info.title, `Conversation ${a.id.slice(0, 5)}`, "OpenHands' default title for a conversation created without one");
    assert.equal(a.info.url, `/api/conversations/${a.id}`);
    assert.equal(a.info.runtime_status, 'STATUS$READY');
    assert.equal(a.info.last_updated_at, a.info.updated_at);
    assert.deepEqual(a.info.sub_conversation_ids, []);
    for (const field of ['id', 'conversation_status', 'last_seq', 'agent', 'workspace', 'setup']) assert.ok(field in a.info, field);
    const list = await daemonReq('GET', '/api/conversations?limit=10');
    assert.deepEqual(list.body.results, list.body.items, 'the listing under both names');
    assert.deepEqual(new Set(list.body.items.map((c: any) => c.session_api_key)), new Set([a.key, b.key]));
    const many = await daemonReq('GET', `/api/v1/app-conversations?ids=${a.id}&ids=${crypto.randomUUID()}`);
    assert.equal(many.status, 200, many.text);
    assert.equal(many.body[0].session_api_key, a.key);
    assert.equal(many.body[0].sandbox_status, 'RUNNING');
    assert.equal(many.body[1], null);
    const sandboxes = await daemonReq('GET', `/api/v1/sandboxes?id=${b.id}`);
    assert.equal(sandboxes.body[0].session_api_key, b.key);
    // the socket's first frame is the same info
    const s = connect(`${d.url.replace('http', 'ws')}/sockets/events/${a.id}`, { headers: withKey(KEY) });
    const first = await s.next((f) => f.key === 'full_state', 'full_state');
    s.close();
    assert.equal(first.value.session_api_key, a.key);
  });

  test("it opens its conversation's routes, socket, files and git changes; the runtime routes act on its conversation", async () => {
    assert.equal((await d.req('GET', `/api/conversations/${a.id}`, undefined, withKey(a.key))).status, 200);
    // the 32-hex form of the id is the same conversation
    assert.equal((await d.req('GET', `/api/conversations/${a.id.replace(/-/g, '').toUpperCase()}`, undefined, withKey(a.key))).status, 200);
    assert.equal((await d.req('GET', `/api/conversations/${a.id}/events/search`, undefined, withKey(a.key))).status, 200);
    const sent = await d.req('POST', `/api/conversations/${a.id}/events`, { role: 'user', content: [{ type: 'text', text: 'hello' }] }, withKey(a.key));
    assert.equal(sent.status, 200, sent.text);
    assert.equal((await d.req('GET', `/api/conversations/${a.id}/config`, undefined, withKey(a.key))).status, 200);

    const up = await upload(d, a.key, '/workspace/project/note.txt', 'written with the key of a\n');
    assert.equal(up.status, 200, await up.text());
    const down = await fetch(`${d.url}/api/file/download/${enc('/workspace/note.txt')}`, { headers: withKey(a.key) });
    assert.equal(down.status, 200);
    assert.equal(await down.text(), 'written with the key of a\n');
    // the same path with b's key is b's workspace, where the file is not
    const other = await fetch(`${d.url}/api/file/download/${enc('/workspace/note.txt')}`, { headers: withKey(b.key) });
    assert.equal(other.status, 422, await other.text());
    // the daemon's key reaches it by naming the conversation
    const named = await fetch(`${d.url}/api/file/download?path=${enc('/workspace/note.txt')}&conversation_id=${a.id}`, { headers: withKey(KEY) });
    assert.equal(await named.text(), 'written with the key of a\n');

    const changes = await d.req('GET', `/api/git/changes/${enc('/workspace/project')}`, undefined, withKey(a.key));
    assert.equal(changes.status, 200, changes.text);
    assert.deepEqual(changes.body, [], 'a workspace that is not a git repository has no changes (not a 422)');
    const diff = await d.req('GET', `/api/git/diff/${enc('/workspace/project/note.txt')}`, undefined, withKey(a.key));
    assert.equal(diff.status, 200, diff.text);
    assert.deepEqual(diff.body, { original: null, modified: 'written with the key of a\n' });

    const s = connect(`${d.url.replace('http', 'ws')}/sockets/events/${a.id}?resend_all=true&session_api_key=${enc(a.key)}`);
    await s.next((f) => f.key === 'full_state', 'full_state by the query key');
    await s.next((f) => f.kind === 'MessageEvent', 'the replay');
    s.close();
    const framed = connect(`${d.url.replace('http', 'ws')}/sockets/events/${a.id}`);
    await framed.opened;
    framed.send({ type: 'auth', session_api_key: a.key });
    await framed.next((f) => f.key === 'full_state', 'full_state after the auth frame');
    framed.close();
  });

  test('it is refused (403) everywhere else: another conversation, the listing, a new one, settings, provider tokens, secrets, /trpc, /metrics', async () => {
    const refusals: [string, string, unknown?][] = [
      ['GET', `/api/conversations/${b.id}`],
      ['DELETE', `/api/conversations/${b.id}`],
      ['POST', `/api/conversations/${b.id}/events`, { role: 'user', content: [{ type: 'text', text: 'x' }] }],
      ['GET', `/api/conversations/${b.id}/config`],
      ['GET', '/api/conversations'],
      ['GET', '/api/conversations/search'],
      ['POST', '/api/conversations', {}],
      ['POST', '/api/conversations', { conversation_id: crypto.randomUUID() }],
      ['GET', '/api/settings'],
      ['POST', '/api/settings', { llm_model: 'openai/x' }],
      ['POST', '/api/settings', { agent: 'CodeActAgent', language: 'en', llm_api_key: 'stolen' }],
      ['POST', '/api/add-git-providers', { provider_tokens: {} }],
      ['POST', '/api/unset-provider-tokens'],
      ['GET', '/api/secrets'],
      ['GET', '/api/options/config'],
      ['GET', `/api/v1/app-conversations?ids=${a.id}`],
      ['POST', `/api/v1/sandboxes/${a.id}/pause`],
      ['POST', '/api/bash/execute_bash_command', { command: 'id', conversation_id: a.id }],
      ['GET', `/api/file/download/${enc('/workspace/note.txt')}?conversation_id=${b.id}`],
      ['GET', `/api/git/changes?path=/workspace&conversation_id=${b.id}`],
      ['GET', `/trpc/listConversations?input=${enc('{}')}`],
      ['GET', `/trpc/getConversation?input=${enc(JSON.stringify({ conversation_id: a.id }))}`],
      ['GET', '/metrics'],
      ['POST', '/api/logout'],
    ];
    for (const [method, p, body] of refusals) {
      const r = await d.req(method, p, body, withKey(a.key));
      assert.equal(r.status, 403, `${method} ${p}: ${r.status} ${r.text}`);
      assert.deepEqual(r.body, { detail: "This key opens its own conversation's routes only" }, `${method} ${p}`);
    }
    const up = await upload(d, a.key, '/workspace/x.txt', 'x', `?conversation_id=${b.id}`);
    assert.equal(up.status, 403, 'an upload naming another conversation');
    // the other conversation's socket: at the upgrade, and by an auth frame
    const upgrade = connect(`${d.url.replace('http', 'ws')}/sockets/events/${b.id}?session_api_key=${enc(a.key)}`);
    await assert.rejects(upgrade.opened, /handshake refused: 403/);
    const framed = connect(`${d.url.replace('http', 'ws')}/sockets/events/${b.id}`);
    await framed.opened;
    framed.send({ type: 'auth', session_api_key: a.key });
    assert.equal((await framed.waitClose()).code, 4001);
    // a conversation key does not sign a browser in
    const signIn = await fetch(`${d.url}/?token=${enc(a.key)}`, { redirect: 'manual' });
    assert.equal(signIn.status, 401);
    assert.equal(signIn.headers.get('set-cookie'), null);
  });

  test('an altered or forged key is a 401 (300 tries), checked before anything else', async () => {
    const [, hex, mac] = a.key.split('.') as [string, string, string];
    const bHex = b.id.replace(/-/g, '');
    const flip = (s: string, i: number) => s.slice(0, i) + (s[i] === 'A' ? 'B' : 'A') + s.slice(i + 1);
    // the last character carries two bits no byte of the MAC uses: a key differing only there is another string, refused too
    const B64 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';
    const last = B64.indexOf(mac[42]!) & ~3;
    const lastBits = [0, 1, 2, 3].map((i) => `pk1.${hex}.${mac.slice(0, 42)}${B64[last + i]}`).filter((k) => k !== a.key);
    const forged = [...lastBits, `pk1.${bHex}.${mac}`, `pk1.${hex}.${flip(mac, 0)}`, `pk1.${hex}.${mac}x`, `pk2.${hex}.${mac}`, a.key.toUpperCase()];
    for (let i = 0; forged.length < 300; i++) forged.push(`pk1.${i % 2 ? hex : bHex}.${crypto.randomBytes(32).toString('base64url')}`);
    for (const k of forged) {
      const r = await d.req('GET', `/api/conversations/${k.includes(bHex) ? b.id : a.id}`, undefined, withKey(k));
      assert.equal(r.status, 401, k);
    }
    const s = connect(`${d.url.replace('http', 'ws')}/sockets/events/${b.id}?session_api_key=${enc(`pk1.${bHex}.${mac}`)}`);
    await assert.rejects(s.opened, /handshake refused: 401/);
  });

  test("the app's 'stop the runtime' (a sandbox's pause) ends the conversation's processes, judged from the host; resume answers", async () => {
    const c = await conversation(d, withKey(KEY));
    const marker = `sleep ${31_000 + Math.floor(Math.random() * 1000)}`;
    const started = await daemonReq('POST', '/api/bash/execute_bash_command', {
      command: `(${marker} </dev/null >/dev/null 2>&1 &) ; echo started`,
      conversation_id: c.id,
      timeout: 30,
    });
    assert.equal(started.status, 200, started.text);
    const running = () =>
      execFileSync('ps', ['-eo', 'args'], { encoding: 'utf8' })
        .split('\n')
        .some((l) => l.trim() === marker);
    await waitFor(running, 'the background process', 30_000);
    const paused = await daemonReq('POST', `/api/v1/sandboxes/${c.id}/pause`);
    assert.equal(paused.status, 200, paused.text);
    await waitFor(() => !running(), 'the process ended', 30_000);
    assert.equal((await daemonReq('POST', `/api/v1/sandboxes/${c.id}/resume`)).status, 200);
    assert.equal((await daemonReq('POST', `/api/v1/sandboxes/${crypto.randomUUID()}/pause`)).status, 404);
  });

  test("a deleted conversation's key opens nothing that is there; no key is ever in the daemon's output", async () => {
    const c = await conversation(d, withKey(KEY));
    assert.equal((await daemonReq('DELETE', `/api/conversations/${c.id}`)).status, 200);
    assert.equal((await d.req('GET', `/api/conversations/${c.id}`, undefined, withKey(c.key))).status, 404);
    assert.equal((await d.req('GET', `/api/conversations/${a.id}`, undefined, withKey(c.key))).status, 403);
    const out = d.output.join('\n');
    for (const k of [a.key, b.key, c.key, KEY]) assert.ok(!out.includes(k), 'a key in the output');
    assert.ok(!out.includes(a.key.split('.')[2]!), "a key's MAC in the output");
  });
});

describe('a keyless daemon', { timeout: 120_000 }, () => {
  test('still gives each conversation its key, and a runtime route takes its conversation from the key the app sends', async () => {
    const a = await conversation(keyless, {});
    const b = await conversation(keyless, {}); // the newest: what a runtime route without a key would pick
    assert.match(a.key, /^pk1\./);
    const up = await upload(keyless, a.key, '/workspace/project/from-a.txt', 'for a\n');
    assert.equal(up.status, 200, await up.text());
    const inA = await fetch(`${keyless.url}/api/file/download/${enc('/workspace/from-a.txt')}?conversation_id=${a.id}`);
    assert.equal(await inA.text(), 'for a\n');
    const inB = await fetch(`${keyless.url}/api/file/download/${enc('/workspace/from-a.txt')}?conversation_id=${b.id}`);
    assert.equal(inB.status, 422);
    const changes = await keyless.req('GET', `/api/git/changes/${enc('/workspace/project')}`, undefined, withKey(a.key));
    assert.deepEqual(changes.body, [], 'without a sandbox too, the app names the workspace /workspace/project');
  });
});
