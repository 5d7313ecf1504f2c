/**
 * OpenHands' own TypeScript client (@openhands/typescript-client, pinned) drives the agent server's
 * server-wide features against a real daemon and the scripted LLM, through its sub-clients: the
 * server's version and the client's feature gates, the LLM catalog, LLM profiles (the key sealed and
 * never answered; an activated profile is what the next conversation's LLM requests use), agent profiles,
 * settings (both shapes of GET /api/settings, diffs, schemas, MCP servers that new conversations get,
 * secrets never listed with their value), the MCP test (a stdio server in a sandbox of its own, removed
 * after it), the file browser (the sandbox's view), saved workspaces, project skills, hooks and
 * sub-agents, installed skills, and what needs the internet (501 or the agent server's own "not
 * connected" shape, never a 404). Isolation and secrets are judged from the host.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import crypto from 'node:crypto';
import os from 'node:os';
import { after, before, describe, test } from 'node:test';
import { freePort, startDaemon, waitFor, type DaemonHandle } from './support/daemon.js';
import { helperArgs } from './support/helper-programs.js';
import { startShttpServer, type RunningHttpServer } from './support/mcp-servers/http-servers.js';
import { hostPid } from './support/processes.js';
import { startScriptedLlm, type ScriptedLlm } from './support/scripted-llm.js';

// the client's ESM build calls require('ws') (a client bug, worked around as test/openhands-client.test.ts does)
(globalThis as { require?: NodeJS.Require }).require = createRequire(import.meta.url);
const C = await import('@openhands/typescript-client/clients');
const { HttpClient } = await import('@openhands/typescript-client/client/http-client');

const SESSION_KEY = 'server-features-key-0123456';
const PROFILE_KEY = 'sk-PROFILE-CANARY-31337';
const WRONG_KEY = 'sk-WRONGKEY-CANARY-4040';
const SECRET = 'settings-secret-CANARY-5150';
const ENV_SECRET = 'mcp-env-CANARY-6262';
const BEARER = 'mcp-bearer-CANARY-7373';
const CANARIES = [PROFILE_KEY, WRONG_KEY, SECRET, ENV_SECRET, BEARER];
const STDIO_SERVER = await helperArgs('stdio-server');

let d: DaemonHandle;
let llm: ScriptedLlm;
let shttp: RunningHttpServer;
let sandboxed = false;
/** Every answer the client got, to check no canary is in any. */
const answers: string[] = [];
const seen = <T>(v: T): T => {
  answers.push(JSON.stringify(v) ?? '');
  return v;
};
const opts = () => ({ host: d.url, apiKey: SESSION_KEY });
/** The MCP test's timeout (seconds) where it is meant to succeed: room for a sandbox to start on a busy machine. */
const LONG = 90;
const H = { 'x-session-api-key': SESSION_KEY };
/** A rejection of the client's call: its HTTP status (and the error's body). */
const status = (s: number, detail?: RegExp) => (e: any) => {
  answers.push(JSON.stringify(e.response ?? e.message));
  return e.status === s && (!detail || detail.test(JSON.stringify(e.response)));
};

/** A conversation (the agent-server create) whose workspace the client names `workingDir`; its host workspace. */
async function conversation(workingDir: string): Promise<{ id: string; ws: string }> {
  const r = await d.req('POST', '/api/conversations', { workspace: { working_dir: workingDir } }, H);
  assert.equal(r.status, 200, r.text);
  return { id: r.body.id, ws: r.body.workspace.working_dir };
}
/** A shell command in the conversation's sandbox (the bash side channel, as the client's workspace runs it). */
async function sh(id: string, command: string) {
  const r = await d.req('POST', '/api/bash/execute_bash_command', { command, conversation_id: id }, H);
  assert.equal(r.body?.exit_code, 0, r.text);
  return r.body.stdout as string;
}

before(async () => {
  llm = await startScriptedLlm([], { requireApiKey: PROFILE_KEY });
  shttp = await startShttpServer({ apiKey: BEARER, name: 'remote' });
  d = await startDaemon({ SESSION_API_KEY: SESSION_KEY });
  sandboxed = (await d.req('GET', '/server_info')).body.sandbox?.mode === 'bwrap';
});
after(async () => {
  await d?.stop();
  await llm?.close();
  await shttp?.close();
  for (const c of CANARIES) {
    assert.ok(!answers.some((a) => a.includes(c)), `the canary ${c} is in no answer`);
    assert.ok(!d.output.some((l) => l.includes(c)), `the canary ${c} is in no log line`);
  }
});

describe('server-wide features through the OpenHands client', { timeout: 420_000 }, () => {
  test('server_info names agent-server 1.30.0: the gates up to it pass, MCP OAuth (1.31.0) is refused by the client', async () => {
    const info: any = seen(await new C.ServerClient(opts()).getServerInfo());
    assert.equal(info.version, '1.30.0');
    assert.equal(info.interface_version, '0.1.0');
    const http = new HttpClient({ baseUrl: d.url, apiKey: SESSION_KEY });
    for (const r of ['workspaces', 'hooks', 'mcpTest'] as const) await C.assertAgentServerSupports(http, C.AgentServerFeatureRequirements[r]);
    await assert.rejects(C.assertAgentServerSupports(http, C.AgentServerFeatureRequirements.mcpOAuth), (e) => C.isAgentServerVersionError(e));
    await assert.rejects(new C.MCPClient(opts()).startOAuth({ server: { type: 'http', url: shttp.url } } as never), (e) => C.isAgentServerVersionError(e));
    // asked anyway: OpenHands' own "could not start" answer, and 501 for a job that cannot exist
    const start = await d.req('POST', '/api/mcp/oauth/start', { server: { type: 'http', url: shttp.url } }, H);
    assert.equal(start.status, 200);
    assert.equal(start.body.ok, false);
    assert.match(start.body.error, /not available/);
    assert.equal((await d.req('GET', '/api/mcp/oauth/status/job-1', undefined, H)).status, 501);
  });

  test('the LLM catalog: the providers and models Parley knows, no network; the subscription is not connected', async () => {
    const llmc = new C.LLMMetadataClient(opts());
    assert.deepEqual(seen(await llmc.getProviders()), ['anthropic', 'openai']);
    const all = await llmc.getModels();
    assert.ok(all.includes('openai/gpt-5') && all.includes('anthropic/claude-sonnet-4-5'), all.join());
    const anthropic = await llmc.getModels('anthropic');
    assert.ok(anthropic.length > 0 && anthropic.every((m) => m.startsWith('anthropic/')));
    assert.deepEqual(await llmc.getModels('bedrock'), []);
    const verified = await llmc.getVerifiedModels();
    assert.deepEqual(Object.keys(verified).sort(), ['anthropic', 'openai']);
    assert.ok(verified.openai!.includes('gpt-5'));
    assert.deepEqual(await llmc.getOpenAISubscriptionStatus(), { vendor: 'openai', connected: false, account_email: null, expires_at: null });
    assert.deepEqual(await llmc.getOpenAISubscriptionModels(), []);
    await assert.rejects(llmc.startOpenAISubscriptionDeviceLogin(), status(501, /needs the internet/));
    await assert.rejects(llmc.pollOpenAISubscriptionDeviceLogin('code'), status(501));
    assert.equal((await llmc.logoutOpenAISubscription()).connected, false);
  });

  test("LLM profiles: the key sealed and never answered; the activated profile is the next conversation's LLM", async () => {
    const p = new C.ProfilesClient(opts());
    seen(await p.saveProfile('scripted', { llm: { model: 'openai/scripted', base_url: llm.url, api_key: PROFILE_KEY, temperature: 0.3 } } as never));
    const list: any = seen(await p.listProfiles());
    assert.deepEqual(list.profiles, [
      { name: 'scripted', model: 'openai/scripted', base_url: llm.url, provider_connection_id: null, provider_connection_broken: false, api_key_set: true },
    ]);
    assert.equal(list.active_profile, null);
    const got: any = seen(await p.getProfile('scripted', { exposeSecrets: 'plaintext' } as never));
    assert.deepEqual(got, { name: 'scripted', config: { model: 'openai/scripted', base_url: llm.url, api_key: null }, api_key_set: true });
    // at rest the key is sealed: no file of DATA_DIR holds it
    if (process.env.PARLEY_TEST_STORE !== 'postgres') {
      // a conversation's disk image is mounted while the daemon runs: its files are read through the mount
      const files = fs.readdirSync(d.dataDir, { recursive: true, withFileTypes: true }).filter((e) => e.isFile() && e.name !== 'disk.img');
      for (const f of files) assert.ok(!fs.readFileSync(path.join(f.parentPath, f.name)).includes(PROFILE_KEY), `${f.name} holds the key`);
    }
    seen(await p.renameProfile('scripted', 'main'));
    await assert.rejects(p.getProfile('scripted'), status(404, /not found/));
    await assert.rejects(p.renameProfile('nope', 'other'), status(404));
    // the pre-flight: one request to the LLM; a wrong key is named without being shown
    const before = llm.requests.length;
    assert.deepEqual(seen(await p.validateProfile('main', { llm: { model: 'openai/scripted', base_url: llm.url, api_key: PROFILE_KEY } } as never)), {
      valid: true,
      error: null,
    });
    assert.equal(llm.requests.length, before + 1);
    const bad: any = seen(await p.validateProfile('main', { llm: { model: 'openai/scripted', base_url: llm.url, api_key: WRONG_KEY } } as never));
    assert.equal(bad.valid, false);
    assert.equal(bad.error.type, 'AuthenticationFailed');
    await assert.rejects(p.saveProfile('bad', { llm: { model: 'bedrock/x' } } as never), status(422));
    // activated: the server's LLM, which a conversation without its own LLM runs
    assert.equal((seen(await p.activateProfile('main')) as any).llm_applied, true);
    const settings: any = seen(await new C.SettingsClient(opts()).getSettings());
    assert.deepEqual(settings.agent_settings.llm, { model: 'openai/scripted', base_url: llm.url, api_key: '**********' });
    assert.equal(settings.active_profile, 'main');
    assert.equal(settings.llm_api_key_is_set, true);
    llm.push({ text: 'Hello from the profile.' });
    const n = llm.requests.length;
    const c = await d.req(
      'POST',
      '/api/conversations',
      { workspace: { working_dir: '/w/profile' }, initial_message: { content: [{ type: 'text', text: 'hi' }] } },
      H,
    );
    assert.equal(c.status, 200, c.text);
    await waitFor(async () => (await d.req('GET', `/api/conversations/${c.body.id}`, undefined, H)).body.execution_status === 'finished', 'finished', 60_000);
    assert.equal(llm.requests[n]!.body.model, 'scripted');
    assert.equal(llm.requests[n]!.headers.authorization, `Bearer ${PROFILE_KEY}`);
    seen(await p.deleteProfile('main'));
    assert.deepEqual((await p.listProfiles()).profiles, []);
    assert.equal(((await new C.SettingsClient(opts()).getSettings()) as any).active_profile, null);
    await d.req('POST', '/api/settings', { llm_model: null, llm_base_url: null, llm_api_key: null }, H);
  });

  test('agent profiles: ids kept across saves, references resolved or dangling, pointer-only activation; a referenced LLM profile stays', async () => {
    const a = new C.AgentProfilesClient(opts());
    const p = new C.ProfilesClient(opts());
    await p.saveProfile('ref', { llm: { model: 'openai/x', base_url: llm.url } } as never);
    await a.saveAgentProfile('reviewer', { llm_profile_ref: 'ref', mcp_server_refs: ['nope'] } as never);
    const first: any = (await a.getAgentProfile('reviewer')).profile;
    assert.equal(first.revision, 1);
    await a.saveAgentProfile('reviewer', { llm_profile_ref: 'ref', mcp_server_refs: ['nope'], description: 'reviews' } as never);
    const second: any = (await a.getAgentProfile('reviewer')).profile;
    assert.equal(second.id, first.id);
    assert.equal(second.revision, 2);
    const diag: any = await a.materializeAgentProfile('reviewer');
    assert.equal(diag.valid, false);
    assert.equal(diag.llm_profile_resolved, true);
    assert.deepEqual(diag.dangling_mcp_server_refs, ['nope']);
    await assert.rejects(p.deleteProfile('ref'), status(409, /reviewer/));
    assert.equal((await a.activateAgentProfile(first.id)).agent_settings_applied, false);
    assert.equal((await a.listAgentProfiles()).active_agent_profile_id, first.id);
    await a.renameAgentProfile('reviewer', 'critic');
    await assert.rejects(a.getAgentProfile('reviewer'), status(404));
    await a.deleteAgentProfile('critic');
    assert.equal((await a.listAgentProfiles()).active_agent_profile_id, null);
    await p.deleteProfile('ref');
    await assert.rejects(a.activateAgentProfile('no-such-id'), status(404));
  });

  test('settings: both shapes on GET, deep-merged diffs (a nested null unsets), a key Parley does not use is a 422, the form schemas', async () => {
    const s = new C.SettingsClient(opts());
    const got: any = seen(await s.getSettings());
    // OpenHands' SettingsResponse and Parley's own fields, in one answer
    for (const k of ['agent_settings', 'conversation_settings', 'misc_settings', 'llm_api_key_is_set', 'llm_model', 'llm_base_url', 'llm_api_key_set'])
      assert.ok(k in got, k);
    assert.equal(got.agent_settings.agent_kind, 'openhands');
    let r: any = await s.updateSettings({
      conversation_settings_diff: { max_iterations: 42, confirmation_mode: true },
      misc_settings_diff: { ui: { theme: 'dark', font: 'mono' } },
    });
    assert.deepEqual(r.conversation_settings, { max_iterations: 42, confirmation_mode: true });
    r = await s.updateSettings({ misc_settings_diff: { ui: { theme: null } } });
    assert.deepEqual(r.misc_settings, { ui: { font: 'mono' } });
    assert.equal(r.conversation_settings.max_iterations, 42);
    await assert.rejects(s.updateSettings({ agent_settings_diff: { condenser: { max_size: 5 } } } as never), status(422, /condenser/));
    await assert.rejects(s.updateSettings({ conversation_settings_diff: { max_iterations: 'many' } } as never), status(422, /max_iterations/));
    await assert.rejects(s.updateSettings({} as never), status(422));
    r = await s.updateSettings({ agent_settings_diff: { llm: { model: 'claude-sonnet-4-5' } } } as never);
    assert.equal(r.agent_settings.llm.model, 'anthropic/claude-sonnet-4-5');
    assert.equal(r.llm_model, 'anthropic/claude-sonnet-4-5');
    await s.updateSettings({ agent_settings_diff: { llm: null } } as never);
    const agentSchema: any = await s.getAgentSchema();
    assert.deepEqual(
      agentSchema.sections.map((x: any) => x.key),
      ['llm', 'mcp'],
    );
    assert.equal(agentSchema.sections[0].fields.find((f: any) => f.key === 'llm.api_key').secret, true);
    const convSchema: any = await s.getConversationSchema();
    assert.deepEqual(
      convSchema.sections[0].fields.map((f: any) => f.key),
      ['max_iterations', 'confirmation_mode', 'security_analyzer'],
    );
  });

  test('MCP servers of the settings: credentials masked, one at a time, and the enabled ones join every new conversation', async () => {
    const s = new C.SettingsClient(opts());
    const r: any = seen(
      await s.createMcpServer('tools', { command: process.execPath, args: [...STDIO_SERVER, 'tools'], env: { TOOLS_ENV: ENV_SECRET } } as never),
    );
    assert.deepEqual(r.agent_settings.mcp_config.tools.env, { TOOLS_ENV: '<secret_hidden>' });
    seen(await s.createMcpServer('remote', { url: shttp.url, auth: { strategy: 'bearer', value: BEARER } } as never));
    await assert.rejects(s.createMcpServer('tools', { command: 'true' } as never), status(409));
    await assert.rejects(s.createMcpServer('cwd', { command: 'true', cwd: '/srv' } as never), status(422, /cwd/));
    await assert.rejects(s.createMcpServer('hdr', { url: shttp.url, headers: { 'X-Api': 'k' } } as never), status(422, /headers/));
    await assert.rejects(
      s.createMcpServer('basic', { url: shttp.url, auth: { strategy: 'basic', username: 'u', password: 'p' } } as never),
      status(422, /basic/),
    );
    // a patch written back with the masked values keeps the stored ones
    seen(await s.patchMcpServer('remote', { enabled: false, auth: { strategy: 'bearer', value: '<secret_hidden>' } } as never));
    const c = await conversation('/w/mcp');
    const mcp = await d.req('GET', `/api/conversations/${c.id}/mcp`, undefined, H);
    assert.deepEqual(
      mcp.body.config.stdio_servers.map((x: any) => [x.name, x.env]),
      [['tools', { TOOLS_ENV: '<secret_hidden>' }]],
    );
    assert.deepEqual(mcp.body.config.shttp_servers, [], 'a disabled server is not given');
    seen(await s.patchMcpServer('remote', { enabled: true } as never));
    const c2 = await conversation('/w/mcp2');
    const mcp2 = await d.req('GET', `/api/conversations/${c2.id}/mcp`, undefined, H);
    assert.deepEqual(
      mcp2.body.config.shttp_servers.map((x: any) => [x.url, x.api_key]),
      [[shttp.url, '<secret_hidden>']],
    );
    await s.deleteMcpServer('tools');
    await s.deleteMcpServer('remote');
    await assert.rejects(s.deleteMcpServer('tools'), status(404));
    assert.deepEqual(((await s.getSettings()) as any).agent_settings.mcp_config, {});
  });

  test("secrets of the settings: listed by name only, their value never answered, in a conversation's shell", async () => {
    const s = new C.SettingsClient(opts());
    assert.deepEqual(seen(await s.upsertSecret({ name: 'API_TOKEN', value: SECRET, description: 'a token' } as never)), {
      name: 'API_TOKEN',
      description: 'a token',
    });
    assert.deepEqual(seen(await s.listSecrets()), { secrets: [{ name: 'API_TOKEN', description: 'a token' }] });
    await assert.rejects(s.getSecret('API_TOKEN'), status(403, /never returned/));
    await assert.rejects(s.upsertSecret({ name: '1BAD', value: SECRET } as never), status(422));
    const c = await conversation('/w/secret');
    assert.equal((await sh(c.id, 'printf %s "$API_TOKEN" | wc -c')).trim(), String(SECRET.length));
    assert.equal((await sh(c.id, 'echo "$API_TOKEN"')).trim(), '<secret_hidden>');
    assert.deepEqual(await s.deleteSecret('API_TOKEN'), { deleted: true });
    await assert.rejects(s.deleteSecret('API_TOKEN'), status(404));
  });

  test('the MCP test: a stdio server in a sandbox of its own (gone afterwards), a remote one with its bearer, failures as ok:false kinds', async () => {
    const m = new C.MCPClient(opts());
    const workspaces = () => fs.readdirSync(path.join(d.dataDir, 'workspaces')).sort();
    const before = workspaces();
    const server = { type: 'stdio', command: process.execPath, args: [...STDIO_SERVER, 'probe'], env: { PROBE_ENV: ENV_SECRET } };
    const ok: any = seen(await m.testServer({ server, tool_call: { name: 'echo', arguments: { text: 'hi' } }, timeout: LONG } as never));
    assert.equal(ok.ok, true, JSON.stringify(ok));
    assert.ok(
      ['echo', 'pid', 'cwd', 'env'].every((t) => ok.tools.includes(t)),
      ok.tools.join(),
    );
    assert.deepEqual(ok.tool_result, { is_error: false, text: 'echo: hi' });
    const env: any = seen(await m.testServer({ server, tool_call: { name: 'env', arguments: { name: 'PROBE_ENV' } }, timeout: LONG } as never));
    assert.equal(env.tool_result.text, 'PROBE_ENV=<secret_hidden>', 'the env reaches the server, its value is not answered');
    const child: any = await m.testServer({ server, tool_call: { name: 'spawn_child', arguments: {} }, timeout: LONG } as never);
    if (sandboxed) {
      // in a pid namespace of its own, and everything it started is gone once the test answered
      assert.match(child.tool_result.text, /^ns:/);
      assert.equal(hostPid(child.tool_result.text), 0, 'the sandbox of the test is removed with its processes');
      assert.equal(((await m.testServer({ server, tool_call: { name: 'cwd', arguments: {} }, timeout: LONG } as never)) as any).tool_result.text, '/workspace');
      assert.deepEqual(workspaces(), before, "no test's workspace is left behind");
    } else {
      assert.ok(true, 'sandbox off: the server ran as a plain process');
    }
    const remote: any = seen(
      await m.testServer({
        server: { type: 'http', url: shttp.url, auth: { strategy: 'bearer', value: BEARER } },
        tool_call: { name: 'auth_header', arguments: {} },
        timeout: LONG,
      } as never),
    );
    assert.equal(remote.ok, true, JSON.stringify(remote));
    assert.equal(remote.tool_result.text, 'authorization: Bearer <secret_hidden>');
    assert.ok(shttp.authHeaders.includes(`Bearer ${BEARER}`));
    const missing: any = await m.testServer({ server: { type: 'stdio', command: '/nonexistent/mcp-server' }, timeout: LONG } as never);
    assert.deepEqual([missing.ok, missing.error_kind], [false, 'connection']);
    const silent: any = await m.testServer({ server: { type: 'stdio', command: 'sleep', args: ['30'] }, timeout: 1 } as never);
    assert.deepEqual([silent.ok, silent.error_kind], [false, 'timeout']);
    const refused: any = await m.testServer({ server: { type: 'http', url: `http://127.0.0.1:${await freePort()}/mcp` }, timeout: 5 } as never);
    assert.deepEqual([refused.ok, refused.error_kind], [false, 'connection']);
    const noTool: any = await m.testServer({ server, tool_call: { name: 'nope', arguments: {} }, timeout: LONG } as never);
    assert.equal(noTool.tool_result.is_error, true);
  });

  test("the MCP test's timeout bounds the whole test (the client gives up five seconds after it): a slow start and a slow call in one", async () => {
    // the server takes 12 of the 20 s to start, then its tool sleeps a minute: a test that gave the call its own
    // 20 s would answer after about 32 s, past the client's 25 s
    const slowStart = { type: 'stdio', command: 'bash', args: ['-c', 'sleep 12; exec "$0" "$@"', process.execPath, ...STDIO_SERVER, 'probe'] };
    const r: any = await new C.MCPClient(opts()).testServer({
      server: slowStart,
      tool_call: { name: 'slow', arguments: { ms: 60_000 } },
      timeout: 20,
    } as never);
    const timedOut = (r.ok === false && r.error_kind === 'timeout') || (r.ok === true && r.tool_result.is_error && /timed out/.test(r.tool_result.text));
    assert.ok(timedOut, JSON.stringify(r));
  });

  test("the file browser shows a conversation's sandbox view: its workspace, pages of subdirectories, nothing outside it", async () => {
    const c = await conversation('/workspace/browse');
    await sh(c.id, 'mkdir -p alpha Beta gamma/deep .hidden && touch file.txt && ln -s / rootlink');
    const f = new C.FileClient(opts());
    const home: any = seen(await f.getHome());
    const root = sandboxed ? '/workspace' : c.ws;
    assert.equal(home.home, root);
    assert.deepEqual(
      home.favorites.map((x: any) => x.label),
      ['alpha', 'Beta', 'gamma'],
    );
    const page1: any = await f.searchSubdirectories('/workspace/browse', { limit: 2 });
    assert.deepEqual(
      page1.items.map((x: any) => x.name),
      ['alpha', 'Beta'],
    );
    assert.equal(page1.next_page_id, 'gamma');
    const page2: any = await f.searchSubdirectories('/workspace/browse', { limit: 2, pageId: page1.next_page_id });
    assert.deepEqual(
      page2.items.map((x: any) => [x.name, x.path]),
      [['gamma', path.join(root, 'gamma')]],
    );
    const hidden: any = await f.searchSubdirectories('/workspace/browse', { includeHidden: true });
    assert.ok(hidden.items.some((x: any) => x.name === '.hidden'));
    await assert.rejects(f.searchSubdirectories('/etc'), status(403));
    await assert.rejects(f.searchSubdirectories('/workspace/browse/rootlink/etc'), status(403));
    await assert.rejects(f.searchSubdirectories('/workspace/browse/../../etc'), status(403));
    await assert.rejects(f.searchSubdirectories('/workspace/browse/file.txt'), status(422));
    await assert.rejects(f.searchSubdirectories('/workspace/browse/none'), status(404));
    // create_directory and the archive (no client method: raw)
    const made = await d.req('POST', `/api/file/create_directory?path=${encodeURIComponent('/workspace/browse/new/inner')}`, undefined, H);
    assert.equal(made.status, 200, made.text);
    assert.ok(fs.statSync(path.join(c.ws, 'new', 'inner')).isDirectory());
    assert.equal((await d.req('POST', `/api/file/create_directory?path=${encodeURIComponent('/workspace/browse/file.txt')}`, undefined, H)).status, 422);
    assert.equal((await d.req('POST', `/api/file/create_directory?path=${encodeURIComponent('/workspace/browse/rootlink/tmp/x')}`, undefined, H)).status, 403);
    await sh(
      c.id,
      'git init -q . && git -c user.email=t@t -c user.name=t commit -q --allow-empty -m one && echo hello > alpha/a.txt && printf "[core]\\n" >> .git/config',
    );
    const tar = await fetch(`${d.url}/api/file/archive?path=${encodeURIComponent('/workspace/browse')}&format=tar.gz&use_default_excludes=false`, {
      headers: H,
    });
    assert.equal(tar.status, 200);
    const tgz = path.join(c.ws, '..', `archive-${c.id}.tgz`);
    fs.writeFileSync(tgz, Buffer.from(await tar.arrayBuffer()));
    const names = execFileSync('tar', ['-tzf', tgz], { encoding: 'utf8' }).split('\n');
    fs.rmSync(tgz);
    assert.ok(names.includes('./alpha/a.txt'), names.join());
    assert.ok(names.includes('./.git/HEAD') && !names.includes('./.git/config'), "git's credential-bearing files are never archived");
    const patch = await d.req('GET', `/api/file/archive?path=${encodeURIComponent('/workspace/browse')}&format=git-delta`, undefined, H);
    assert.equal(patch.status, 200, patch.text);
    assert.match(patch.text, /\+\+\+ b\/alpha\/a\.txt\n@@ -0,0 \+1 @@\n\+hello/);
    assert.equal((await sh(c.id, 'git status --porcelain alpha')).trim(), '?? alpha/', "the repository's own index is left as it was");
  });

  test('saved workspaces and their parents: kept by path, once each', async () => {
    const w = new C.WorkspacesClient(opts());
    await w.addWorkspaces([
      { id: '1', name: 'one', path: '/w/one' },
      { id: '2', name: 'one again', path: '/w/one' },
      { id: '3', name: 'two', path: '/w/two', parentPath: '/w' },
    ] as never);
    await w.addWorkspaces([{ id: '4', name: 'one', path: '/w/one' }] as never);
    await w.addWorkspaceParents([{ id: 'p', name: 'w', path: '/w' }] as never);
    const list: any = await w.listWorkspaces();
    assert.deepEqual(list, {
      workspaces: [
        { id: '1', name: 'one', path: '/w/one' },
        { id: '3', name: 'two', path: '/w/two', parentPath: '/w' },
      ],
      workspaceParents: [{ id: 'p', name: 'w', path: '/w' }],
    });
    assert.deepEqual(await w.deleteWorkspace('/w/one'), { deleted: true });
    await assert.rejects(w.deleteWorkspace('/w/one'), status(404));
    assert.deepEqual(await w.deleteWorkspaceParent('/w'), { deleted: true });
    assert.deepEqual((await w.listWorkspaces()) as any, { workspaces: [{ id: '3', name: 'two', path: '/w/two', parentPath: '/w' }], workspaceParents: [] });
  });

  test("a project's skills, hooks and sub-agents, read from its workspace as OpenHands reads them; links out are not followed", async () => {
    const c = await conversation('/workspace/proj');
    await sh(
      c.id,
      [
        'mkdir -p .agents/skills/lint .openhands/microagents .agents/agents .openhands',
        'printf "# Rules\\nUse tabs.\\n" > AGENTS.md',
        'printf -- "---\\nname: lint\\ndescription: Lints the code\\n---\\nRun the linter.\\n" > .agents/skills/lint/SKILL.md',
        'printf -- "---\\ntriggers: [docker, compose]\\n---\\nDocker notes.\\n" > .openhands/microagents/docker.md',
        'ln -s /etc/passwd .openhands/microagents/passwd.md',
        'printf -- "---\\nname: reviewer\\ndescription: Reviews changes\\ntools: [terminal, file_editor]\\n---\\nYou review.\\n" > .agents/agents/reviewer.md',
        `printf '{"hooks":{"PreToolUse":[{"matcher":"terminal","hooks":[{"command":"./check.sh","timeout":5}]}]}}' > .openhands/hooks.json`,
      ].join(' && '),
    );
    const skills: any = seen(await new C.SkillsClient(opts()).getSkills({ project_dir: '/workspace/proj', load_public: false } as never));
    const byName = Object.fromEntries(skills.skills.map((s: any) => [s.name, s]));
    assert.deepEqual(Object.keys(byName).sort(), ['agents', 'docker', 'lint']);
    assert.equal(byName.agents.type, 'repo');
    assert.match(byName.agents.content, /Use tabs/);
    assert.deepEqual([byName.lint.type, byName.lint.description, byName.lint.is_agentskills_format], ['agentskills', 'Lints the code', true]);
    assert.deepEqual([byName.docker.type, byName.docker.triggers], ['knowledge', ['docker', 'compose']]);
    assert.equal(skills.sources.project, 3);
    assert.ok(!JSON.stringify(skills).includes('root:x:0:0'), 'a link out of the workspace is not read');
    const hooks: any = await new C.HooksClient(opts()).loadHooks({ project_dir: '/workspace/proj' });
    assert.equal(hooks.hook_config.pre_tool_use[0].matcher, 'terminal');
    assert.equal(hooks.hook_config.pre_tool_use[0].hooks[0].command, './check.sh');
    assert.deepEqual(await new C.HooksClient(opts()).loadHooks({}), { hook_config: null });
    const agents: any = await new C.SubAgentsClient(opts()).getSubAgents({ project_dir: '/workspace/proj' });
    assert.deepEqual(
      agents.agents.map((a: any) => [a.name, a.level, a.tools, a.system_prompt]),
      [['reviewer', 'project', ['terminal', 'file_editor'], 'You review.']],
    );
    await assert.rejects(new C.SkillsClient(opts()).getSkills({ project_dir: '/etc' } as never), status(403));
  });

  test('installed skills: from a directory of a workspace, toggled, refreshed, uninstalled; URLs and the marketplace need the internet (501)', async () => {
    const sk = new C.SkillsClient(opts());
    const c = await conversation('/workspace/install');
    await sh(c.id, 'mkdir -p my-skill && printf -- "---\\nname: my-skill\\ndescription: first\\nversion: 1.0\\n---\\nDo it.\\n" > my-skill/SKILL.md');
    const installed: any = seen(await sk.installSkill({ source: '/workspace/install/my-skill' }));
    assert.deepEqual([installed.name, installed.description, installed.version, installed.enabled], ['my-skill', 'first', '1.0', true]);
    await assert.rejects(sk.installSkill({ source: '/workspace/install/my-skill' }), status(409));
    await assert.rejects(sk.installSkill({ source: '/workspace/install/none' }), status(422, /SKILL\.md/));
    await assert.rejects(sk.installSkill({ source: 'https://github.com/OpenHands/extensions/tree/main/skills/github' }), status(501, /internet/));
    assert.deepEqual(
      (await sk.listInstalledSkills()).skills.map((s: any) => s.name),
      ['my-skill'],
    );
    const user = async () => ((await sk.getSkills({ load_project: false } as never)) as any).skills.map((s: any) => s.name);
    assert.deepEqual(await user(), ['my-skill']);
    await sk.toggleSkill('my-skill', false);
    assert.deepEqual(await user(), []);
    await sk.toggleSkill('my-skill', true);
    await sh(c.id, 'sed -i "s/first/second/" my-skill/SKILL.md');
    assert.equal(((await sk.refreshSkill('my-skill')) as any).skill.description, 'second');
    await sk.uninstallSkill('my-skill');
    await assert.rejects(sk.getInstalledSkill('my-skill'), status(404));
    await assert.rejects(sk.getMarketplace(), status(501));
    assert.equal((await sk.syncSkills()).status, 'error');
  });

  test('what Parley does not offer answers 501 with the reason or its disabled shape, never a 404; /api/init is ready', async () => {
    const vs = new C.VSCodeClient(opts());
    assert.deepEqual({ ...(await vs.getStatus()), message: 'm' }, { running: false, enabled: false, message: 'm' });
    await assert.rejects(vs.getUrl(), status(501));
    await assert.rejects(new C.DesktopClient(opts()).getUrl(), status(501));
    const pl = new C.PluginsClient(opts());
    for (const call of [
      () => pl.getPlugins(),
      () => pl.getPluginsMarketplace(),
      () => pl.listInstalledPlugins(),
      () => pl.installPlugin({ source: '/x' } as never),
    ]) {
      await assert.rejects(call(), status(501, /plugins/));
    }
    const meta = new C.MetaProfilesClient(opts());
    await assert.rejects(meta.listMetaProfiles(), status(501, /classify_and_switch_llm/));
    await assert.rejects(new C.SharedClient(opts()).getSharedConversations(['x']), status(501));
    assert.deepEqual((await d.req('GET', '/api/init', undefined, H)).body, { state: 'ready', error: null });
    assert.equal((await d.req('POST', '/api/init', {}, H)).status, 409);
  });

  test("Parley's rules: the key on every route, 422 in the seed's shape, the body limit", async () => {
    for (const [m, p] of [
      ['GET', '/api/llm/providers'],
      ['GET', '/api/profiles'],
      ['PATCH', '/api/settings'],
      ['POST', '/api/mcp/test'],
      ['GET', '/api/file/home'],
      ['GET', '/api/workspaces'],
      ['POST', '/api/skills'],
      ['GET', '/api/vscode/url'],
    ] as const) {
      assert.equal((await d.req(m, p, m === 'GET' ? undefined : {})).status, 401, `${m} ${p}`);
    }
    const bad = await d.req('POST', '/api/profiles/-bad-', { llm: {} }, H);
    assert.equal(bad.status, 422);
    assert.deepEqual(bad.body.detail[0].loc, ['path', 'name']);
    const badMcp = await d.req('POST', '/api/mcp/test', { server: { type: 'stdio' } }, H);
    assert.equal(badMcp.status, 422);
    assert.deepEqual(badMcp.body.detail[0].loc, ['body', 'server', 'command']);
    const leak = await d.req('POST', '/api/profiles/x', { llm: { model: 5, api_key: PROFILE_KEY } }, H);
    assert.equal(leak.status, 422);
    assert.ok(!leak.text.includes(PROFILE_KEY), 'a 422 does not echo the key');
    const huge = await d.req('PATCH', '/api/settings', { misc_settings_diff: { blob: 'x'.repeat(11 * 1024 * 1024) } }, H);
    assert.equal(huge.status, 413);
  });
});

describe('attacks on what these routes reach, judged from the host', { timeout: 420_000 }, () => {
  test('a stdio server under test cannot write DATA_DIR or the host /tmp, and none of its processes outlives the test', async (t) => {
    if (!sandboxed) return t.skip('the sandbox is off on this machine (bwrap unavailable): the server runs as a plain process by design');
    const marker = `mcp-test-pwned-${crypto.randomUUID()}`;
    const targets = [path.join(d.dataDir, marker), path.join(os.tmpdir(), marker), path.join(path.dirname(d.dataDir), marker)];
    const script = `for f in ${targets.join(' ')}; do touch "$f" 2>/dev/null; done; exec -a ${marker} sleep 30`;
    const r: any = await new C.MCPClient(opts()).testServer({ server: { type: 'stdio', command: 'bash', args: ['-c', script] }, timeout: 2 } as never);
    assert.deepEqual([r.ok, r.error_kind], [false, 'timeout']);
    for (const f of targets) assert.equal(fs.existsSync(f), false, `${f} was not written`);
    assert.equal(hostPid(`ns:${marker}`), 0, 'the server was killed with its sandbox');
  });

  test('race: the agent swaps a dir for a link to / while the browser and skill reader read it (200 tries); nothing outside the workspace served', async () => {
    const c = await conversation('/workspace/race');
    const marker = `host-only-${crypto.randomUUID()}`;
    fs.mkdirSync(path.join(d.dataDir, marker));
    fs.mkdirSync(path.join(os.tmpdir(), marker));
    try {
      const root = sandboxed ? '/workspace' : c.ws;
      const swap = `for i in $(seq 1 4000); do rm -rf d; ln -s / d; rm -f d; mkdir -p d/sub d/.agents/skills; printf 'inside' > d/AGENTS.md; done`;
      const started = await d.req('POST', '/api/bash/start_bash_command', { command: swap, conversation_id: c.id, timeout: 120 }, H);
      assert.equal(started.status, 200, started.text);
      const f = new C.FileClient(opts());
      const sk = new C.SkillsClient(opts());
      let listed = 0;
      for (let i = 0; i < 200; i++) {
        const [dirs, skills] = await Promise.allSettled([
          f.searchSubdirectories('/workspace/race/d'),
          sk.getSkills({ project_dir: '/workspace/race/d', load_user: false } as never),
        ]);
        for (const r of [dirs, skills]) {
          const text = r.status === 'fulfilled' ? JSON.stringify(r.value) : JSON.stringify((r.reason as any).response ?? String(r.reason));
          assert.ok(!text.includes(marker), `the host's ${marker} is never named: ${text}`);
          if (r.status === 'rejected') assert.ok([403, 404, 422, 503].includes((r.reason as any).status), text);
        }
        if (dirs.status === 'fulfilled') {
          listed++;
          for (const item of (dirs.value as any).items) assert.ok(item.path.startsWith(`${root}/d/`), `only the workspace is listed: ${item.path}`);
        }
        if (skills.status === 'fulfilled') for (const s of (skills.value as any).skills) assert.equal(s.content, 'inside', s.source);
      }
      assert.ok(listed > 0, 'the directory was listed at least once');
    } finally {
      fs.rmSync(path.join(d.dataDir, marker), { recursive: true, force: true });
      fs.rmSync(path.join(os.tmpdir(), marker), { recursive: true, force: true });
    }
  });

  test("an MCP server's header credentials given where Parley cannot send them are refused without echo", async () => {
    const r = await d.req('POST', '/api/mcp/test', { server: { type: 'http', url: shttp.url, headers: `Bearer ${BEARER}` } }, H);
    assert.equal(r.status, 422);
    assert.ok(!r.text.includes(BEARER), r.text);
    const s = await d.req('POST', '/api/settings/mcp/leaky', { url: shttp.url, headers: { Authorization: `Bearer ${BEARER}` } }, H);
    assert.equal(s.status, 422);
    assert.ok(!s.text.includes(BEARER), s.text);
  });
});
