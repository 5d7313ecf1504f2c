/**
 * OpenHands' own TypeScript client (@openhands/typescript-client, pinned devDependency) runs a whole
 * session against a real daemon, unchanged, with the scripted LLM behind the conversation's own
 * `agent.llm`. Also the raw shapes it relies on (create body, info fields, 422s, routes order).
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { startDaemon, waitFor, type DaemonHandle } from './support/daemon.js';
import { startScriptedLlm, type ScriptedLlm } from './support/scripted-llm.js';

// the client's ESM build calls require('ws') to open its socket (a client bug, worked around here)
(globalThis as { require?: NodeJS.Require }).require = createRequire(import.meta.url);
const OH = await import('@openhands/typescript-client');
const { Agent, Conversation, ConversationManager, Workspace } = OH;

const SESSION_KEY = 'session-key-0123456789';
const LLM_KEY = 'sk-OHCLIENT-CANARY-98765';
const SECRET = 'conv-secret-CANARY-4242';
let d: DaemonHandle;
let llm: ScriptedLlm;
const H = { 'x-session-api-key': SESSION_KEY };

before(async () => {
  llm = await startScriptedLlm([], { requireApiKey: LLM_KEY });
  // no LLM configured on the server: the conversation's agent.llm is what runs
  d = await startDaemon({ SESSION_API_KEY: SESSION_KEY });
});
after(async () => {
  await d?.stop();
  await llm?.close();
});

const agent = () => new Agent({ llm: { model: 'openai/scripted', api_key: LLM_KEY, base_url: llm.url } as never });
const workspace = (dir = '/workspace/project') => new Workspace({ host: d.url, workingDir: dir, apiKey: SESSION_KEY });
const manager = () => new ConversationManager({ host: d.url, apiKey: SESSION_KEY });

describe('the OpenHands client, unchanged', { timeout: 120_000 }, () => {
  test('create, socket, send, run to finished, remote state, final response, title, policy, secrets, search, delete', async (t) => {
    const received: any[] = [];
    const errors: Error[] = [];
    const conv = new Conversation(agent(), workspace(), { callback: (e: any) => received.push(e), onError: (e: Error) => errors.push(e) } as never);
    t.after(() => conv.close());
    await conv.start();
    const id = conv.id;
    assert.match(id, /^[0-9a-f-]{36}$/);
    await conv.startWebSocketClient();
    await waitFor(() => received.some((e) => e.key === 'full_state'), 'full_state over the socket');

    llm.push(
      { text: 'Looking.', toolCalls: [{ name: 'terminal', arguments: { command: 'echo from-agent > made.txt && echo "secret=$MY_TOKEN"' } }] },
      { text: 'Done.', toolCalls: [{ name: 'finish', arguments: { message: 'All done here.' } }] },
    );
    await conv.updateSecrets({ MY_TOKEN: SECRET });
    await conv.sendMessage('Please make a file');
    await conv.run();
    await waitFor(async () => (await conv.state.refresh(), (await conv.state.getExecutionStatus()) === 'finished'), 'finished', 60_000);
    await waitFor(() => received.some((e) => e.kind === 'ActionEvent' && e.action?.kind === 'FinishAction'), 'the finish action over the socket');

    // remote state: every accessor
    const st = conv.state;
    assert.equal(await st.getExecutionStatus(), 'finished');
    assert.equal(await st.getAgentStatus(), 'finished');
    assert.deepEqual(await st.getConfirmationPolicy(), { kind: 'NeverConfirm' });
    assert.deepEqual(await st.getActivatedKnowledgeSkills(), []);
    const ag: any = await st.getAgent();
    assert.equal(ag.kind, 'Agent');
    assert.equal(ag.llm.model, 'openai/scripted');
    assert.equal(ag.llm.api_key, '**********');
    const ws: any = await st.getWorkspace();
    assert.equal(ws.kind, 'LocalWorkspace');
    // the client's working_dir is not a host path: the conversation has its own workspace
    assert.equal(ws.working_dir, path.join(d.dataDir, 'workspaces', id.replace(/-/g, '')));
    assert.equal(fs.readFileSync(path.join(ws.working_dir, 'made.txt'), 'utf8'), 'from-agent\n');
    assert.equal(typeof (await st.getPersistenceDir()), 'string');
    const dump: any = await st.modelDump();
    assert.equal(dump.id, id);
    assert.equal(dump.max_iterations, 500);
    assert.equal(dump.stuck_detection, true);
    assert.equal(JSON.parse(await st.modelDumpJson()).id, id);
    const stats: any = await conv.conversationStats();
    assert.ok(stats.usage_to_metrics.agent.accumulated_token_usage.prompt_tokens > 0);

    // events: search, count, get, the cached list
    const all = await st.events.getEvents();
    assert.ok(all.some((e: any) => e.kind === 'SystemPromptEvent' && e.tools.some((t: any) => t.kind === 'TerminalTool' && t.title)));
    const action: any = all.find((e: any) => e.kind === 'ActionEvent' && e.action?.kind === 'TerminalAction');
    assert.equal(action.tool_call.origin, 'completion');
    const obs: any = all.find((e: any) => e.kind === 'ObservationEvent' && e.tool_call_id === action.tool_call_id);
    assert.equal(obs.observation.kind, 'TerminalObservation');
    assert.ok(!JSON.stringify(all).includes(SECRET), 'the conversation secret is masked in events');
    assert.match(JSON.stringify(obs), /secret=<secret_hidden>/);
    const found = await st.events.search({ body: 'MAKE A FILE' });
    assert.equal(found.items.length, 1);
    assert.equal(found.items[0].kind, 'MessageEvent');
    assert.equal(await st.events.count({ body: 'make a file' }), 1);
    const mid = all[Math.floor(all.length / 2)] as any;
    const before = await st.events.search({ timestamp__lt: mid.timestamp, limit: 100 });
    const from = await st.events.search({ timestamp__gte: mid.timestamp, limit: 100 });
    const stored = (await st.events.search({ limit: 100 })).items;
    assert.equal(before.items.length + from.items.length, stored.length);
    assert.ok(before.items.every((e: any) => e.timestamp < mid.timestamp) && from.items.every((e: any) => e.timestamp >= mid.timestamp));
    assert.equal((await st.events.getEventById(mid.id)).id, mid.id);

    assert.equal(await conv.getAgentFinalResponse(), 'All done here.');
    await conv.setTitle('A title from the client');
    await conv.setConfirmationPolicy({ kind: 'AlwaysConfirm' } as never);
    const info = await st.refresh();
    assert.equal(info.title, 'A title from the client');
    assert.deepEqual(info.confirmation_policy, { kind: 'AlwaysConfirm' });
    await conv.setConfirmationPolicy(new OH.NeverConfirm() as never);
    assert.deepEqual(await (await st.refresh(), st.getConfirmationPolicy()), { kind: 'NeverConfirm' });

    // workspace side channels: the client names paths in its own working_dir (/workspace/project)
    const w = conv.workspace;
    const pwd = await w.executeCommand('pwd && cat made.txt', '/workspace/project');
    assert.equal(pwd.exit_code, 0, pwd.stderr);
    // the command runs where the agent's shell runs: in the conversation's sandbox when it is on
    const sandboxed = (await d.req('GET', '/server_info')).body.sandbox?.mode === 'bwrap';
    assert.equal(pwd.stdout, `${sandboxed ? '/workspace' : ws.working_dir}\nfrom-agent\n`);
    if (sandboxed) {
      const peek = await w.executeCommand(`test -e ${path.join(d.dataDir, 'parley.lock')}; echo $?`, '/workspace/project');
      assert.equal(peek.stdout.trim(), '1', 'DATA_DIR is not visible from the side channel');
    }
    const plain = await w.executeCommand('echo "$MY_TOKEN" | wc -c; exit 3');
    assert.equal(plain.exit_code, 3);
    assert.equal(plain.stdout.trim(), String(SECRET.length + 1), 'the conversation secret is in the shell');
    const started: any = await w.bash.startCommand('echo started-output', '/workspace/project');
    await waitFor(
      async () => (await w.bash.searchEvents({ command_id__eq: started.id, kind__eq: 'BashOutput' })).items.length === 1,
      "the started command's output",
    );
    const [out]: any[] = (await w.bash.searchEvents({ command_id__eq: started.id, kind__eq: 'BashOutput' })).items;
    assert.equal(out.stdout, 'started-output\n');
    assert.equal(((await w.bash.getEvent(started.id)) as any).command, 'echo started-output');
    const batch: any[] = await w.bash.batchGetEvents([started.id, out.id, 'nope']);
    assert.deepEqual(
      batch.map((e) => e?.kind ?? null),
      ['BashCommand', 'BashOutput', null],
    );
    const up = await w.fileUpload('uploaded text\n', '/workspace/project/notes/hi.txt');
    assert.equal(up.success, true);
    assert.equal(fs.readFileSync(path.join(ws.working_dir, 'notes', 'hi.txt'), 'utf8'), 'uploaded text\n');
    assert.equal(await w.downloadAsText('/workspace/project/notes/hi.txt'), 'uploaded text\n');
    assert.equal(await w.downloadAsText(path.join(ws.working_dir, 'made.txt')), 'from-agent\n');
    await assert.rejects(w.fileDownload('/etc/passwd'), (e: any) => e.status === 403 && /outside the workspace/.test(JSON.stringify(e.response)));
    fs.symlinkSync('/etc', path.join(ws.working_dir, 'etc-link'));
    await assert.rejects(w.fileDownload('/workspace/project/etc-link/passwd'), (e: any) => e.status === 403);
    await assert.rejects(w.fileUpload('x', '/workspace/project/etc-link/evil'), (e: any) => e.status === 403);
    await assert.rejects(w.fileUpload('x', '/workspace/project/../../etc/evil'), (e: any) => e.status === 403);
    await assert.rejects(w.executeCommand('pwd', '/workspace/project/etc-link'), (e: any) => e.status === 403);
    fs.unlinkSync(path.join(ws.working_dir, 'etc-link'));
    const git = await w.executeCommand(
      'git init -q . && git -c user.email=t@t -c user.name=t add made.txt && git -c user.email=t@t -c user.name=t commit -qm one && echo changed >> made.txt',
      '/workspace/project',
    );
    assert.equal(git.exit_code, 0, git.stderr);
    const changes: any[] = await w.gitChanges('/workspace/project');
    assert.deepEqual(
      changes.find((c) => c.path === 'made.txt'),
      { path: 'made.txt', status: 'UPDATED' },
    );
    assert.deepEqual(
      changes.find((c) => c.path === 'notes/hi.txt'),
      { path: 'notes/hi.txt', status: 'ADDED' },
    );
    const diff: any = await w.gitDiff('/workspace/project/made.txt');
    assert.deepEqual(diff, { original: 'from-agent\n', modified: 'from-agent\nchanged\n' });
    assert.deepEqual(await manager().tools.listTools(), ['terminal', 'file_editor', 'task_tracker', 'think', 'finish']);

    // the manager: search, count, get-many
    const m = manager();
    const page = await m.searchConversations({ limit: 10 } as never);
    assert.ok(page.items.some((c: any) => c.id === id));
    assert.equal(typeof (await m.countConversations()), 'number');
    assert.ok((await m.countConversations({ status: 'finished' } as never)) >= 1);
    const unknown = '00000000-0000-4000-8000-000000000000';
    const many = await m.getConversations([id, unknown]);
    assert.equal(many.length, 2);
    assert.equal((many[0] as any).id, id);
    assert.equal(many[1], null);
    assert.equal((await m.getConversation(id)).id, id);

    // the socket's full_state carries the same info (key masked)
    const full = received.find((e) => e.key === 'full_state');
    assert.equal(full.value.agent.llm.api_key, '**********');
    assert.equal(full.value.workspace.kind, 'LocalWorkspace');

    // ask_agent: an answer with the conversation's context, nothing added to it; condense: a Condensation
    const countBefore = await st.events.count();
    const asked = llm.requests.length;
    llm.push({ text: 'It made made.txt.' });
    assert.equal(await conv.askAgent('What did you do?'), 'It made made.txt.');
    assert.match(JSON.stringify(llm.requests[asked]!.body.messages), /Please make a file[\s\S]*What did you do\?/);
    assert.equal(await st.events.count(), countBefore);
    llm.push({ text: 'Summary: a file was made.' });
    await conv.condense();
    const condensed: any[] = (await st.events.search({ kind: 'Condensation' })).items;
    assert.equal(condensed.length, 1);
    assert.equal(condensed[0].summary, 'Summary: a file was made.');

    assert.deepEqual(errors, []);
    await conv.close();
    await m.deleteConversation(id);
    assert.equal((await d.req('GET', `/api/conversations/${id}`, undefined, H)).status, 404);
  });

  test("initial message runs; max_iterations and stuck_detection are the conversation's; the LLM key never shows", async (t) => {
    llm.push({ text: 'Hi from the agent.' });
    const conv = new Conversation(agent(), workspace('/tmp'));
    t.after(() => conv.close());
    await conv.start({ initialMessage: 'hello there', maxIterations: 7, stuckDetection: false } as never);
    await waitFor(async () => (await conv.state.refresh()).execution_status === 'finished', 'finished', 60_000);
    const info: any = await conv.state.refresh();
    assert.equal(info.max_iterations, 7);
    assert.equal(info.stuck_detection, false);
    assert.equal(info.title, 'hello there');
    assert.equal(await conv.getAgentFinalResponse(), 'Hi from the agent.');
    const raw = await d.req('GET', `/api/conversations/${conv.id}`, undefined, H);
    assert.ok(!raw.text.includes(LLM_KEY));
    await conv.close();
  });
});

describe('confirmation', { timeout: 120_000 }, () => {
  test('AlwaysConfirm: actions wait; accept runs them, reject answers them with UserRejectObservation', async (t) => {
    const conv = new Conversation(agent(), workspace('/workspace/confirm'));
    t.after(() => conv.close());
    await conv.start();
    await conv.setConfirmationPolicy({ kind: 'AlwaysConfirm' } as never);
    const wsDir = path.join(d.dataDir, 'workspaces', conv.id.replace(/-/g, ''));
    const status = async () => (await conv.state.refresh()).execution_status;
    await assert.rejects(conv.sendConfirmationResponse(true), (e: any) => e.status === 409);

    llm.push(
      { toolCalls: [{ name: 'terminal', arguments: { command: 'echo confirmed > c.txt' } }] },
      { toolCalls: [{ name: 'finish', arguments: { message: 'ok' } }] },
    );
    await conv.sendMessage('write c.txt');
    await conv.run();
    await waitFor(async () => (await status()) === 'waiting_for_confirmation', 'waiting_for_confirmation', 60_000);
    assert.equal(fs.existsSync(path.join(wsDir, 'c.txt')), false, 'nothing ran before the confirmation');
    await conv.sendConfirmationResponse(true);
    await waitFor(async () => (await status()) === 'finished', 'finished after accept', 60_000);
    assert.equal(fs.readFileSync(path.join(wsDir, 'c.txt'), 'utf8'), 'confirmed\n');

    llm.push({ toolCalls: [{ name: 'terminal', arguments: { command: 'touch r.txt' } }] });
    await conv.sendMessage('touch r.txt');
    await conv.run();
    await waitFor(async () => (await status()) === 'waiting_for_confirmation', 'waiting again', 60_000);
    await conv.sendConfirmationResponse(false, 'not that one');
    await waitFor(async () => (await status()) === 'idle', 'idle after reject', 30_000);
    assert.equal(fs.existsSync(path.join(wsDir, 'r.txt')), false);
    const rejected: any[] = (await conv.state.events.search({ kind: 'UserRejectObservation' })).items;
    assert.equal(rejected.length, 1);
    assert.equal(rejected[0].rejection_reason, 'not that one');
    const n = llm.requests.length;
    llm.push({ text: 'Understood.' });
    await conv.run();
    await waitFor(async () => (await status()) === 'finished', 'finished after the rejection', 60_000);
    assert.match(JSON.stringify(llm.requests[n]!.body.messages), /rejected this action.*not that one/);
  });
});

describe('raw shapes', { timeout: 60_000 }, () => {
  test('the seed create still answers its shape (plus id); agent-server bodies are strict too', async () => {
    const seed = await d.req('POST', '/api/conversations', {}, H);
    assert.equal(seed.status, 200);
    assert.equal(seed.body.id, seed.body.conversation_id);
    assert.equal(seed.body.status, 'ok');
    const bad = await d.req('POST', '/api/conversations', { initial_user_msg: 'x', nope: 1 }, H);
    assert.equal(bad.status, 422);
    assert.equal(bad.body.detail[0].type, 'extra_forbidden');
    const badAs = await d.req('POST', '/api/conversations', { workspace: { working_dir: '/x' }, nope: 1 }, H);
    assert.equal(badAs.status, 422);
    assert.deepEqual(badAs.body.detail[0].loc, ['body', 'nope']);
    const cid = '11111111-2222-4333-8444-555555555555';
    const a = await d.req('POST', '/api/conversations', { workspace: { kind: 'LocalWorkspace', working_dir: '/etc' }, conversation_id: cid }, H);
    assert.equal(a.status, 200, a.text);
    assert.equal(a.body.id, cid);
    assert.notEqual(a.body.workspace.working_dir, '/etc');
    const again = await d.req('POST', '/api/conversations', { workspace: { working_dir: '/etc' }, conversation_id: cid }, H);
    assert.equal(again.body.id, cid);
    const viaSettings = await d.req(
      'POST',
      '/api/conversations',
      { agent_settings: { llm: { model: 'claude-sonnet-4-5', api_key: 'sk-settings-CANARY-1' } } },
      H,
    );
    assert.equal(viaSettings.status, 200, viaSettings.text);
    assert.equal(viaSettings.body.agent.llm.model, 'anthropic/claude-sonnet-4-5');
    assert.ok(!viaSettings.text.includes('sk-settings-CANARY-1'));
    const badUrl = await d.req('POST', '/api/conversations', { agent_settings: { llm: { base_url: 'ftp://x' } } }, H);
    assert.equal(badUrl.status, 422);
    assert.deepEqual(badUrl.body.detail[0].loc, ['body', 'agent_settings', 'llm', 'base_url']);
  });

  test("secrets, tags and hook_config at create; tags in PATCH and search; without agent.llm the server's LLM runs", async () => {
    const set = await d.req('POST', '/api/settings', { llm_model: 'openai/scripted', llm_base_url: llm.url, llm_api_key: LLM_KEY }, H);
    assert.equal(set.status, 200, set.text);
    llm.push({ toolCalls: [{ name: 'terminal', arguments: { command: 'echo "$TOKEN_AT_CREATE" > s.txt' } }] }, { text: 'ok' });
    const c = await d.req(
      'POST',
      '/api/conversations',
      {
        agent: { kind: 'Agent', tools: [{ name: 'TerminalTool' }] },
        workspace: { type: 'local', working_dir: '/tmp' },
        initial_message: { role: 'user', content: [{ type: 'text', text: 'go' }] },
        secrets: { TOKEN_AT_CREATE: { kind: 'StaticSecret', value: 'create-secret-CANARY-777' } },
        tags: { team: 'red' },
        hook_config: null,
        user_id: null,
        max_iterations: 5,
        stuck_detection: true,
      },
      H,
    );
    assert.equal(c.status, 200, c.text);
    const id = c.body.id;
    assert.deepEqual(c.body.tags, { team: 'red' });
    assert.equal(c.body.agent.llm.model, 'openai/scripted');
    await waitFor(async () => (await d.req('GET', `/api/conversations/${id}`, undefined, H)).body.execution_status === 'finished', 'finished', 60_000);
    const wsDir = path.join(d.dataDir, 'workspaces', id.replace(/-/g, ''));
    assert.equal(fs.readFileSync(path.join(wsDir, 's.txt'), 'utf8'), 'create-secret-CANARY-777\n');
    const evs = await d.req('GET', `/api/conversations/${id}/events/search`, undefined, H);
    assert.ok(!evs.text.includes('create-secret-CANARY-777'));
    assert.ok(!(await d.req('GET', `/api/conversations/${id}`, undefined, H)).text.includes('create-secret-CANARY-777'));
    const patched = await d.req('PATCH', `/api/conversations/${id}`, { title: 'renamed', tags: { team: 'blue' } }, H);
    assert.equal(patched.status, 200, patched.text);
    const blue = await d.req('GET', '/api/conversations/search?tag=team%3Dblue', undefined, H);
    assert.deepEqual(
      blue.body.items.map((x: any) => x.id),
      [id],
    );
    assert.equal(blue.body.items[0].title, 'renamed');
    assert.equal((await d.req('GET', '/api/conversations/count?tag=team%3Dred', undefined, H)).body, 0);
    await d.req('POST', '/api/settings', { llm_model: null, llm_base_url: null, llm_api_key: null }, H);
  });

  test('the info through /trpc has the same fields; the side channels take the session key', async () => {
    const c = await d.req('POST', '/api/conversations', { workspace: { working_dir: '/w' } }, H);
    const input = encodeURIComponent(JSON.stringify({ conversation_id: c.body.id }));
    const t = await d.req('GET', `/trpc/getConversation?input=${input}`, undefined, H);
    assert.equal(t.status, 200, t.text);
    assert.deepEqual(t.body.result.data.workspace, c.body.workspace);
    assert.deepEqual(t.body.result.data.confirmation_policy, { kind: 'NeverConfirm' });
    for (const [m, p, b] of [
      ['POST', '/api/bash/execute_bash_command', { command: 'id' }],
      ['GET', '/api/file/download?path=/w/x'],
      ['GET', '/api/git/changes?path=/w'],
      ['GET', '/api/tools/'],
      ['GET', '/api/bash/bash_events/search'],
    ] as const) {
      assert.equal((await d.req(m, p, b)).status, 401, `${m} ${p}`);
    }
    const bad = await d.req('GET', '/api/git/diff?path=/w/a&ref=--output=/tmp/x', undefined, H);
    assert.equal(bad.status, 422, 'a ref is never an option');
  });

  test('search and count are not read as an id; unknown event-search parameters are a 422', async () => {
    assert.equal((await d.req('GET', '/api/conversations/search', undefined, H)).status, 200);
    assert.equal((await d.req('GET', '/api/conversations/count', undefined, H)).status, 200);
    const c = await d.req('POST', '/api/conversations', {}, H);
    const r = await d.req('GET', `/api/conversations/${c.body.id}/events/search?bogus=1`, undefined, H);
    assert.equal(r.status, 422);
    assert.deepEqual(r.body.detail[0].loc, ['query', 'bogus']);
    assert.equal((await d.req('GET', `/api/conversations/${c.body.id}/events/count?whatever=1`, undefined, H)).status, 422);
    assert.equal((await d.req('GET', '/api/conversations/search?nope=1', undefined, H)).status, 422);
  });
});
