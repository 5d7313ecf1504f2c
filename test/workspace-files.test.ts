/**
 * A conversation's workspace files served to be shown (`GET /api/conversations/{id}/workspace/…`) and
 * the workspace session cookie pages embed them with (`POST`/`DELETE /api/auth/workspace-session`),
 * against a real daemon with a key and its real sandboxes: the files come through the sandbox's file
 * service, each page in an opaque origin of its own (CSP sandbox), the cookie reaches these files and
 * nothing else, a conversation's key makes a cookie of its conversation only, and what leads out of
 * the workspace (`..`, a link, a FIFO) is refused without a hang. OpenHands' client makes the session
 * (`RemoteWorkspace.startWorkspaceSession`), and Chromium shows a page the agent wrote.
 */
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { after, before, describe, test } from 'node:test';
import type { Browser } from 'playwright-core';
import { launchChromium } from './support/browser.js';
import { startDaemon, type DaemonHandle } from './support/daemon.js';

(globalThis as { require?: NodeJS.Require }).require = createRequire(import.meta.url);
const { RemoteWorkspace } = await import('@openhands/typescript-client');

const KEY = 'workspace-files-key-0123';
const H = { 'x-session-api-key': KEY };
const PAGE = '<!doctype html><title>made by the agent</title><img id="pic" src="pic.svg"><script src="app.js"></script>';
const SVG = '<svg xmlns="http://www.w3.org/2000/svg" width="4" height="4"><rect width="4" height="4"/></svg>';
// the page's script tells what its origin may do: read the daemon's API (it must not), see a cookie (none)
const SCRIPT = `let cookie; try { cookie = JSON.stringify(document.cookie); } catch { cookie = 'unreadable'; }
document.title = 'origin=' + self.origin + ' cookie=' + cookie;
fetch('/api/conversations').then((r) => (document.body.dataset.api = String(r.status))).catch(() => (document.body.dataset.api = 'refused'));`;

// …and tries to make a conversation
const MAKE = `fetch('/api/conversations', { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' })
  .then((r) => (document.body.dataset.made = String(r.status)), () => (document.body.dataset.made = 'refused'));`;

let d: DaemonHandle;
let a: { id: string; key: string };
let b: { id: string; key: string };
const responses: string[] = [];

async function get(p: string, headers: Record<string, string> = {}) {
  const res = await fetch(d.url + p, { headers, redirect: 'manual' });
  const text = await res.text();
  responses.push(text, JSON.stringify([...res.headers]));
  return { status: res.status, text, headers: res.headers };
}

async function bash(conversationId: string, command: string) {
  const r = await d.req('POST', '/api/bash/execute_bash_command', { command, conversation_id: conversationId, timeout: 60 }, H);
  assert.equal(r.status, 200, r.text);
  assert.equal(r.body.exit_code, 0, r.text);
}

async function conversation() {
  const r = await d.req('POST', '/api/conversations', {}, H);
  assert.equal(r.status, 200, r.text);
  const info = await d.req('GET', `/api/conversations/${r.body.conversation_id}`, undefined, H);
  return { id: r.body.conversation_id as string, key: info.body.session_api_key as string };
}

/** The `parley_workspace` cookie a response sets, as a request's `Cookie` header. */
function cookieOf(headers: Headers): { header: string; attrs: string } {
  const set = headers.get('set-cookie') ?? '';
  const m = /^(parley_workspace=[^;]+);\s*(.*)$/.exec(set);
  assert.ok(m, `a workspace cookie is set: ${set}`);
  return { header: m[1]!, attrs: m[2]! };
}

async function startSession(headers: Record<string, string>) {
  const res = await fetch(`${d.url}/api/auth/workspace-session`, { method: 'POST', headers });
  assert.equal(res.status, 204, await res.text());
  return cookieOf(res.headers);
}

before(async () => {
  d = await startDaemon({ SESSION_API_KEY: KEY });
  a = await conversation();
  b = await conversation();
  await bash(
    a.id,
    `mkdir -p site && printf '%s' '${PAGE}' > site/index.html && printf '%s' '${SVG}' > site/pic.svg && cat > site/app.js <<'EOF'
${SCRIPT}
EOF
printf 'plain notes' > notes.txt && ln -s /etc/passwd leak && mkfifo fifo && ln -s site linked-site`,
  );
  await bash(b.id, `printf 'b only' > secret.txt`);
});
after(async () => {
  await d?.stop();
  for (const text of responses) assert.ok(!text.includes(KEY), 'the key is in no answer');
});

describe('workspace files served to be shown', { timeout: 120_000 }, () => {
  test('with the key: the file as it is, its type from its name, in a sandboxed origin; a directory serves its index.html', async () => {
    const page = await get(`/api/conversations/${a.id}/workspace/site/index.html`, H);
    assert.equal(page.status, 200);
    assert.equal(page.text, PAGE);
    assert.equal(page.headers.get('content-type'), 'text/html; charset=utf-8');
    assert.match(page.headers.get('content-security-policy') ?? '', /^sandbox allow-scripts\b/);
    assert.doesNotMatch(page.headers.get('content-security-policy') ?? '', /allow-same-origin/);
    assert.equal(page.headers.get('x-content-type-options'), 'nosniff');
    assert.equal(page.headers.get('content-disposition'), null);
    for (const p of ['site', 'site/', 'linked-site/']) assert.equal((await get(`/api/conversations/${a.id}/workspace/${p}`, H)).text, PAGE, p);
    const svg = await get(`/api/conversations/${a.id}/workspace/site/pic.svg`, H);
    assert.equal(svg.headers.get('content-type'), 'image/svg+xml');
    const notes = await get(`/api/conversations/${a.id}/workspace/notes.txt`, H);
    assert.deepEqual([notes.status, notes.text, notes.headers.get('content-type')], [200, 'plain notes', 'text/plain; charset=utf-8']);
    // an encoded slash is a slash: the same file
    assert.equal((await get(`/api/conversations/${a.id}/workspace/site%2Findex.html`, H)).text, PAGE);
    // the workspace itself has no index.html: not found, as a missing file
    for (const p of ['workspace', 'workspace/', 'workspace/nothing.html']) {
      const r = await get(`/api/conversations/${a.id}/${p}`, H);
      assert.equal(r.status, 404, p);
      assert.deepEqual(JSON.parse(r.text), { detail: 'File not found' });
    }
    // the download route still answers the same file as a download
    const dl = await get(`/api/file/download?path=site/index.html&conversation_id=${a.id}`, H);
    assert.match(dl.headers.get('content-disposition') ?? '', /^attachment/);
  });

  test('what leads out of the workspace is refused, a FIFO at once, and nothing of the host is answered', async () => {
    for (const p of ['../../../../etc/passwd', '%2e%2e/%2e%2e/etc/passwd', 'site/../../x', 'leak']) {
      const r = await get(`/api/conversations/${a.id}/workspace/${p}`, H);
      assert.ok([403, 404].includes(r.status), `${p}: ${r.status} ${r.text}`);
      assert.doesNotMatch(r.text, /root:/);
    }
    assert.equal((await get(`/api/conversations/${a.id}/workspace/fifo`, H)).status, 404);
    // no key, a wrong key, another conversation's key
    assert.equal((await get(`/api/conversations/${a.id}/workspace/notes.txt`)).status, 401);
    assert.equal((await get(`/api/conversations/${a.id}/workspace/notes.txt`, { 'x-session-api-key': 'wrong-key-000000' })).status, 401);
    assert.equal((await get(`/api/conversations/${b.id}/workspace/secret.txt`, { 'x-session-api-key': a.key })).status, 403);
    assert.equal((await get(`/api/conversations/${a.id}/workspace/notes.txt`, { 'x-session-api-key': a.key })).text, 'plain notes');
  });

  test("the workspace session: made through OpenHands' client; its cookie reads served files and nothing else; ended by DELETE", async () => {
    const client = new RemoteWorkspace({ host: d.url, apiKey: KEY, workingDir: '/workspace' });
    assert.equal(await client.startWorkspaceSession(a.id), `${d.url}/api/conversations/${a.id}/workspace/`);
    await client.deleteWorkspaceSession();

    const made = await startSession(H);
    assert.match(made.attrs, /Path=\/api\/conversations/);
    assert.match(made.attrs, /HttpOnly/);
    assert.match(made.attrs, /SameSite=Lax/);
    assert.ok(!made.header.includes(KEY));
    const C = { cookie: made.header };
    assert.equal((await get(`/api/conversations/${a.id}/workspace/notes.txt`, C)).text, 'plain notes');
    assert.equal((await get(`/api/conversations/${b.id}/workspace/secret.txt`, C)).text, 'b only');
    // nothing else: the conversation, its events, downloads, a change
    for (const p of [`/api/conversations/${a.id}`, `/api/conversations/${a.id}/events/search`, `/api/file/download?path=notes.txt&conversation_id=${a.id}`]) {
      assert.equal((await get(p, C)).status, 401, p);
    }
    const del = await fetch(`${d.url}/api/conversations/${a.id}`, { method: 'DELETE', headers: C });
    assert.equal(del.status, 401);
    // a conversation's key makes a session of its conversation only
    const own = { cookie: (await startSession({ 'x-session-api-key': a.key })).header };
    assert.equal((await get(`/api/conversations/${a.id}/workspace/notes.txt`, own)).status, 200);
    assert.equal((await get(`/api/conversations/${b.id}/workspace/secret.txt`, own)).status, 403);
    // without credentials no session; a foreign Origin may not make one
    assert.equal((await fetch(`${d.url}/api/auth/workspace-session`, { method: 'POST' })).status, 401);
    assert.equal((await fetch(`${d.url}/api/auth/workspace-session`, { method: 'POST', headers: { ...H, origin: 'https://evil.example' } })).status, 403);
    // ended: the cookie is cleared and no longer reads
    const end = await fetch(`${d.url}/api/auth/workspace-session`, { method: 'DELETE', headers: C });
    assert.equal(end.status, 204);
    assert.match(end.headers.get('set-cookie') ?? '', /^parley_workspace=; .*Max-Age=0/);
    assert.equal((await get(`/api/conversations/${a.id}/workspace/notes.txt`, C)).status, 401);
    assert.equal((await get(`/api/conversations/${a.id}/workspace/notes.txt`, own)).status, 200, 'another session goes on');
  });
});

describe('a page the agent wrote, in Chromium', { timeout: 120_000 }, () => {
  let browser: Browser;
  let open: DaemonHandle;
  let id: string;
  before(async () => {
    browser = await launchChromium();
    // keyless, on loopback: every local caller is trusted, so the page's own origin is what keeps it from the API
    open = await startDaemon({});
    id = (await open.req('POST', '/api/conversations', {})).body.conversation_id;
    const r = await open.req('POST', '/api/bash/execute_bash_command', {
      command: `mkdir -p site && printf '%s' '${PAGE}' > site/index.html && printf '%s' '${SVG}' > site/pic.svg && cat > site/app.js <<'EOF'
${SCRIPT}
${MAKE}
EOF`,
      conversation_id: id,
      timeout: 60,
    });
    assert.equal(r.body.exit_code, 0, r.text);
  });
  after(async () => {
    await browser?.close();
    await open?.stop();
  });

  test('it runs in an opaque origin of its own: its files load, the API neither answers it nor takes a change from it', async () => {
    const before = (await open.req('GET', '/api/conversations')).body.items.length;
    const context = await browser.newContext();
    const page = await context.newPage();
    const loaded = await page.goto(`${open.url}/api/conversations/${id}/workspace/site/`);
    assert.equal(loaded?.status(), 200);
    await page.waitForFunction(() => document.body?.dataset.api !== undefined && document.body?.dataset.made !== undefined, undefined, { timeout: 30_000 });
    // the script ran in an origin that is not the daemon's, where cookies cannot even be read
    assert.equal(await page.title(), 'origin=null cookie=unreadable');
    assert.equal(await page.evaluate(() => (document.getElementById('pic') as HTMLImageElement).naturalWidth), 4, 'its image loaded');
    // reading the API: the browser gives it nothing (no CORS for its origin); a change: refused
    assert.equal(await page.evaluate(() => document.body.dataset.api), 'refused');
    assert.equal(await page.evaluate(() => document.body.dataset.made), 'refused');
    assert.equal((await open.req('GET', '/api/conversations')).body.items.length, before, 'no conversation was made');
    await context.close();
  });

  test('with a key, the workspace cookie opens the page in a browser', async () => {
    const context = await browser.newContext();
    const made = await startSession(H);
    const [name, value] = made.header.split('=') as [string, string];
    await context.addCookies([{ name, value, url: `${d.url}/api/conversations/`, httpOnly: true, sameSite: 'Lax' }]);
    const page = await context.newPage();
    const loaded = await page.goto(`${d.url}/api/conversations/${a.id}/workspace/site/index.html`);
    assert.equal(loaded?.status(), 200);
    assert.equal(await page.title(), 'made by the agent');
    await context.close();
  });
});
