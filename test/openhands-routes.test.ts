/**
 * How many of the routes OpenHands' TypeScript client calls a fresh daemon serves: every
 * `.get/.post/.put/.patch/.delete('<path>')` of the client's `dist/client/*.js` (its agent-server
 * sub-clients; `cloud-client.js` is the client of OpenHands Cloud's app server, another server whose
 * `/api/v1/…` routes no agent server has), called once on a new daemon with the session key. A route
 * is served when it answers anything but 404 (or 405): a 422 for a made-up body, a 501 saying why a feature is
 * not offered, a 403 for what Parley never answers (a secret's value) all count; a named 404 of a route
 * that exists (a thing not found) would not, so the ids in the paths are of things made first (a
 * conversation and its event, a bash command, a profile, an installed skill…).
 *
 * The routes not served are printed; the test fails when one answers 404 that is not in NOT_YET
 * below (none is), and when fewer than 110 are served.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { ROOT, startDaemon, waitFor, type DaemonHandle } from './support/daemon.js';

const KEY = 'routes-session-key-0123';
const H = { 'x-session-api-key': KEY };
const CLIENT_DIR = path.join(ROOT, 'node_modules/@openhands/typescript-client/dist/client');

/** Routes of the client a fresh daemon does not serve, and why (docs/api.md lists them): none left. */
const NOT_YET = new Set<string>([]);

/** Every method and path the client's agent-server sub-clients call (paths' `${…}` as `{x}`, no query, no trailing slash). */
export function clientRoutes(): { method: string; path: string }[] {
  const seen = new Set<string>();
  const out: { method: string; path: string }[] = [];
  for (const f of fs.readdirSync(CLIENT_DIR).filter((f) => f.endsWith('.js') && f !== 'cloud-client.js')) {
    const src = fs.readFileSync(path.join(CLIENT_DIR, f), 'utf8');
    for (const m of src.matchAll(/\.(get|post|put|patch|delete)\(\s*(['`])(\/[^'`]*)\2/g)) {
      let p = m[3]!.replace(/\$\{[^}]*\}/g, '{x}').replace(/\?.*$/, '');
      if (p.length > 1) p = p.replace(/\/$/, '');
      const key = `${m[1]!.toUpperCase()} ${p}`;
      if (seen.has(key)) continue;
      seen.add(key);
      out.push({ method: m[1]!.toUpperCase(), path: p });
    }
  }
  return out;
}

let d: DaemonHandle;
before(async () => {
  d = await startDaemon({ SESSION_API_KEY: KEY });
});
after(async () => {
  await d?.stop();
});

test('the routes of OpenHands client a fresh daemon serves', { timeout: 180_000 }, async () => {
  const routes = clientRoutes();
  assert.ok(routes.length > 100, `the client's routes were found (${routes.length})`);
  const req = (m: string, p: string, body?: unknown) => d.req(m, p, body, H);

  // before any conversation: the file browser has no sandbox view to show (a 409 saying so, not a 404)
  const noView = await req('GET', '/api/file/home');
  assert.equal(noView.status, 409, noView.text);
  assert.match(noView.body.detail, /create a conversation first/);

  // what the paths name, made first
  const conv = await req('POST', '/api/conversations', { workspace: { working_dir: '/workspace/routes' } });
  assert.equal(conv.status, 200, conv.text);
  const id: string = conv.body.id;
  assert.equal((await req('POST', `/api/conversations/${id}/events`, { role: 'user', content: [{ type: 'text', text: 'hi' }] })).status, 200);
  const eventId: string = (await req('GET', `/api/conversations/${id}/events/search`)).body.items[0].id;
  const bash = await req('POST', '/api/bash/execute_bash_command', {
    command: 'mkdir -p skills/route-skill && printf -- "---\\nname: route-skill\\n---\\nA skill.\\n" > skills/route-skill/SKILL.md',
    conversation_id: id,
  });
  assert.equal(bash.body.exit_code, 0, bash.text);
  const bashId: string = bash.body.command_id;
  const ws = conv.body.workspace.working_dir as string;
  const installed = await req('POST', '/api/skills/install', { source: path.join(ws, 'skills/route-skill'), conversation_id: id });
  assert.equal(installed.status, 200, installed.text);
  assert.equal((await req('POST', '/api/agent-profiles/route-agent', {})).status, 201);
  const agentProfileId: string = (await req('GET', '/api/agent-profiles/route-agent')).body.profile.id;

  const value = (p: string): string => {
    if (p.startsWith('/api/conversations/{x}/events/{x}')) return p.replace('{x}', id).replace('{x}', eventId);
    if (p.startsWith('/api/conversations/') || p.startsWith('/api/file/download-trajectory/')) return p.replace('{x}', id);
    if (p.startsWith('/api/bash/bash_events/')) return p.replace('{x}', bashId);
    if (p === '/api/agent-profiles/{x}/activate') return p.replace('{x}', agentProfileId);
    if (p.startsWith('/api/agent-profiles/')) return p.replace('{x}', 'route-agent');
    if (p.startsWith('/api/profiles/')) return p.replace('{x}', 'route-profile');
    if (p.startsWith('/api/settings/mcp/')) return p.replace('{x}', 'route-mcp');
    if (p.startsWith('/api/settings/secrets/')) return p.replace('{x}', 'ROUTE_SECRET');
    if (p.startsWith('/api/skills/installed/')) return p.replace('{x}', 'route-skill');
    return p.replace(/\{x\}/g, 'route-thing');
  };
  const bodies: Record<string, unknown> = {
    'POST /api/profiles/{x}': { llm: { model: 'openai/route-model' } },
    'POST /api/settings/mcp/{x}': { command: 'true' },
    'PUT /api/settings/secrets': { name: 'ROUTE_SECRET', value: 'route-secret-value' },
  };
  // creates first, deletes last: what a route names exists when it is called
  const order = (m: string) => ({ POST: 0, PUT: 0, GET: 1, PATCH: 1, DELETE: 2 })[m] ?? 1;
  const results: { route: string; status: number; text: string }[] = [];
  for (const r of [...routes].sort((a, b) => order(a.method) - order(b.method))) {
    const route = `${r.method} ${r.path}`;
    const body = r.method === 'GET' || r.method === 'DELETE' ? undefined : (bodies[route] ?? {});
    const res = await req(r.method, value(r.path), body);
    results.push({ route, status: res.status, text: res.text.slice(0, 160) });
  }
  // a 405 would be another method's route on the same path: not this one
  const unserved = results.filter((r) => r.status === 404 || r.status === 405);
  const served = results.length - unserved.length;
  console.log(`# OpenHands client routes served by a fresh daemon: ${served} of ${results.length}`);
  for (const u of unserved) console.log(`#   not served: ${u.route}: ${u.text}`);
  assert.deepEqual(
    unserved.map((u) => u.route).filter((r) => !NOT_YET.has(r)),
    [],
    'every route of the client is served',
  );
  assert.ok(served >= Math.max(110, results.length - NOT_YET.size), `${served} of ${results.length}`);
  // what each conversation feature answered a made-up call with (a 501 and a 400 say why they are not offered)
  const answer = (route: string) => results.find((r) => r.route === route)?.status;
  assert.equal(answer('POST /api/conversations/{x}/fork'), 201);
  assert.equal(answer('POST /api/conversations/{x}/navigate'), 501);
  assert.equal(answer('POST /api/conversations/{x}/switch_acp_model'), 422);
  assert.equal(answer('POST /api/conversations/{x}/goal/resume'), 400);
  assert.equal(answer('GET /api/file/download-trajectory/{x}'), 200);
  // the daemon is still well after every route was called
  await waitFor(async () => (await d.req('GET', '/health')).status === 200, 'health');
});

test('the server-wide routes and the conversation features take hostile input without a 5xx (but the 501s of what is not offered): wrong types, ' +
  'arrays, nulls, deep nesting, odd path values', {
  timeout: 180_000,
}, async () => {
  const sections = await Promise.all([
    import('../src/api/operations/llm-profiles.js').then((m) => m.llmProfileOperations),
    import('../src/api/operations/server-settings.js').then((m) => m.serverSettingsOperations),
    import('../src/api/operations/server-workspace.js').then((m) => m.serverWorkspaceOperations),
    import('../src/api/operations/agent-server-features.js').then((m) => m.agentServerFeatureOperations),
  ]);
  // the conversation features' paths name a conversation that exists too
  const conv = await d.req('POST', '/api/conversations', { workspace: { working_dir: '/workspace/hostile' } }, H);
  assert.equal(conv.status, 200, conv.text);
  const routes = sections.flatMap((s) => Object.values(s).map((o: { rest: { method: string; path: string; body?: unknown } }) => o.rest));
  const deep = JSON.parse(`${'{"a":'.repeat(500)}1${'}'.repeat(500)}`);
  const bodies: unknown[] = [
    [],
    'text',
    5,
    null,
    { llm: [] },
    { server: { type: 'stdio', command: ['x'] } },
    { a: deep },
    { path: '/../../etc', project_dir: '\u0000' },
  ];
  const values = ['x', '..', '%2e%2e', 'a%2Fb', 'A'.repeat(300), '%00', conv.body.id];
  const failures: string[] = [];
  for (const r of routes) {
    for (const v of values) {
      const p = r.path.replace(/\{[a-z_]+\}/g, v);
      for (const b of r.body ? bodies : [undefined]) {
        const q = r.method === 'GET' || r.method === 'DELETE' ? '?path=%00&limit=-1&include_hidden=maybe&provider=' : '';
        const res = await d.req(r.method, `${p}${q}`, b, H);
        if (res.status >= 500 && res.status !== 501)
          failures.push(`${r.method} ${p} ${JSON.stringify(b)?.slice(0, 60)} → ${res.status} ${res.text.slice(0, 120)}`);
      }
    }
  }
  assert.deepEqual(failures, []);
  assert.equal((await d.req('GET', '/health')).status, 200);
});
