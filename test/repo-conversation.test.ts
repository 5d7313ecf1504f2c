/**
 * Conversations with a repository, end to end through the real daemon: clone from a real git
 * smart-HTTP server with a stored token, setup phases as events, repository instructions and
 * conversation instructions in the LLM's system prompt, `.openhands/setup.sh`, clone failures,
 * resume after a daemon restart, suggested_task / create_microagent, and images.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { startDaemon, waitFor, type DaemonHandle } from './support/daemon.js';
import { startGitServer, type GitHttpServer } from './support/git-server.js';
import { startScriptedLlm, type ScriptedLlm } from './support/scripted-llm.js';

const TOKEN = 'ghp_REPOTEST0123456789abcdefTOKEN';
const BAD_TOKEN = 'ghp_WRONGTOKEN0123456789abcdefXYZ';
const MCP_KEY = 'mcp-REPOTEST-key-4242';
// a 1x1 transparent PNG
const PNG = Buffer.from('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII=', 'base64');

let d: DaemonHandle;
let llm: ScriptedLlm;
let git: GitHttpServer;
const responses: string[] = [];

async function call(method: string, p: string, body?: unknown) {
  const r = await d.req(method, p, body);
  responses.push(r.text);
  return r;
}
const events = async (id: string) => (await call('GET', `/api/conversations/${id}/events/search?limit=100`)).body.items as any[];
const info = async (id: string) => (await call('GET', `/api/conversations/${id}`)).body;
const waitStatus = (id: string, want: string, ms = 90_000) => waitFor(async () => (await info(id)).execution_status === want, `status ${want}`, ms);
const workspace = (id: string) => path.join(d.dataDir, 'workspaces', id.replace(/-/g, ''));
// the workspace belongs to the sandbox's uid: the host's git (run as the test's user) must be told it may read it
const gitOut = (dir: string, args: string[]) => execFileSync('git', ['-c', 'safe.directory=*', ...args], { cwd: dir, encoding: 'utf8' }).trim();
const systemOf = (req: any) => String(req.body.messages.find((m: any) => m.role === 'system')?.content ?? '');
const textOf = (ev: any) =>
  ev.llm_message.content
    .filter((c: any) => c.type === 'text')
    .map((c: any) => c.text)
    .join('\n');

async function create(body: Record<string, unknown>): Promise<string> {
  const r = await call('POST', '/api/conversations', body);
  assert.equal(r.status, 200, r.text);
  return r.body.conversation_id;
}
async function storeProviders(entries: Record<string, { token: string | null; host: string }>) {
  const r = await call('POST', '/api/add-git-providers', { provider_tokens: entries });
  assert.equal(r.status, 200, r.text);
}

const llmEnv = () => ({ LLM_MODEL: 'openai/scripted', LLM_BASE_URL: llm.url, LLM_API_KEY: 'sk-repo-test-key', MAX_ITERATIONS: '8' });

before(async () => {
  llm = await startScriptedLlm();
  git = await startGitServer({ token: TOKEN });
  await git.createRepo(
    'acme/app',
    {
      'README.md': '# app\n',
      'AGENTS.md': 'AGENTS-RULE: always run the frobnicate check before committing.\n',
      '.openhands/microagents/deploy.md': '---\nname: deploy\ntype: knowledge\ntriggers: [deploy]\n---\nKNOWLEDGE-DEPLOY: ship with `make ship`.\n',
      '.openhands/microagents/kube.md': '---\nname: kube\ntype: knowledge\ntriggers: [kubernetes]\n---\nKNOWLEDGE-KUBE: never shown here.\n',
      '.openhands/setup.sh': 'echo "setup ran on $(git rev-parse --abbrev-ref HEAD)" > .setup-marker\necho SETUP-OUTPUT-LINE\n',
    },
    { private: true, branches: { feature: { 'feature.txt': 'on feature\n' } } },
  );
  // the first run of its setup script is slow (3 s): time to send a message or kill the daemon meanwhile
  await git.createRepo(
    'acme/slow',
    {
      'AGENTS.md': 'SLOW-AGENTS: be patient.\n',
      '.openhands/setup.sh': 'if [ ! -f .slow-once ]; then touch .slow-once; sleep 3; fi\necho slow-ready\n',
    },
    { private: true },
  );
  d = await startDaemon(llmEnv());
});
after(async () => {
  await d?.stop();
  await llm?.close();
  await git?.close();
});

describe('clone through POST /api/conversations', () => {
  let cloned = '';

  test('selected branch: setup phases as events, setup.sh before the first step, instructions in the system prompt', async () => {
    await storeProviders({ github: { token: TOKEN, host: git.url } });
    llm.push({ text: 'Deployed.' });
    const before = llm.requests.length;
    const id = await create({
      repository: 'acme/app',
      git_provider: 'github',
      selected_branch: 'feature',
      initial_user_msg: 'Please deploy the app',
      conversation_instructions: 'CONV-INSTR: answer in one line.',
      mcp_config: { shttp_servers: [{ url: 'http://127.0.0.1:9/mcp', api_key: MCP_KEY }] },
    });
    cloned = id;
    await waitStatus(id, 'finished');
    const evs = await events(id);
    const phases = evs.filter((e) => e.kind === 'ConversationStateUpdateEvent' && e.key === 'setup').map((e) => e.value.phase);
    assert.deepEqual(phases, ['preparing', 'cloning', 'checking_out', 'cloned', 'ready']);
    const setupScript = evs.find((e) => e.key === 'setup_script');
    assert.ok(setupScript, 'the setup script result is an event');
    assert.equal(setupScript.value.exit_code, 0);
    assert.match(setupScript.value.output, /SETUP-OUTPUT-LINE/);
    const firstRunning = evs.find((e) => e.key === 'execution_status' && e.value === 'running');
    assert.ok(setupScript.seq < firstRunning.seq, 'setup.sh ran before the first step');
    assert.ok(evs.find((e) => e.key === 'setup' && e.value.phase === 'ready').seq < firstRunning.seq);

    const ws = workspace(id);
    assert.equal(gitOut(ws, ['rev-parse', '--abbrev-ref', 'HEAD']), 'feature');
    assert.equal(fs.readFileSync(path.join(ws, 'feature.txt'), 'utf8'), 'on feature\n');
    assert.equal(fs.readFileSync(path.join(ws, '.setup-marker'), 'utf8'), 'setup ran on feature\n');
    assert.equal(gitOut(ws, ['remote', 'get-url', 'origin']), `${git.url}/acme/app.git`);

    assert.equal(llm.requests.length, before + 1);
    const system = systemOf(llm.requests[before]);
    assert.match(system, /AGENTS-RULE: always run the frobnicate check/);
    assert.match(system, /KNOWLEDGE-DEPLOY/, 'the triggered microagent (trigger "deploy") is in the prompt');
    assert.doesNotMatch(system, /KNOWLEDGE-KUBE/, 'an untriggered microagent is not');
    assert.match(system, /CONV-INSTR: answer in one line\./);
    assert.match(system, /acme\/app.*branch feature/);

    const g = await info(id);
    assert.equal(g.selected_repository, 'acme/app');
    assert.equal(g.selected_branch, 'feature');
    assert.equal(g.setup.phase, 'ready');
  });

  test('no branch given: a work branch is created from the default branch', async () => {
    llm.push({ text: 'ok' });
    const id = await create({ repository: 'acme/app', git_provider: 'github', initial_user_msg: 'hello' });
    await waitStatus(id, 'finished');
    const ws = workspace(id);
    const branch = gitOut(ws, ['rev-parse', '--abbrev-ref', 'HEAD']);
    assert.match(branch, /^parley\/[0-9a-f]{8}$/);
    assert.equal(gitOut(ws, ['rev-parse', 'HEAD']), gitOut(ws, ['rev-parse', 'origin/main']), 'branched from the default branch');
    assert.ok(!fs.existsSync(path.join(ws, 'feature.txt')));
    assert.match(systemOf(llm.requests[llm.requests.length - 1]), new RegExp(`branch ${branch.replace('/', '\\/')}`));
  });

  test('a conversation without a message is prepared but does not run', async () => {
    const before = llm.requests.length;
    const id = await create({ repository: 'acme/app', git_provider: 'github' });
    await waitFor(async () => (await info(id)).setup?.phase === 'ready', 'ready', 30_000);
    assert.equal((await info(id)).execution_status, 'idle');
    assert.equal(llm.requests.length, before);
    // a message sent later runs in the prepared workspace
    llm.push({ text: 'later' });
    await call('POST', `/api/conversations/${id}/events`, { content: [{ text: 'now go' }], run: true });
    await waitStatus(id, 'finished');
    assert.match(systemOf(llm.requests[llm.requests.length - 1]), /AGENTS-RULE/);
  });

  test('a run requested while the clone is under way starts when the workspace is ready', async () => {
    llm.push({ text: 'after clone' });
    const id = await create({ repository: 'acme/app', git_provider: 'github' });
    // sent at once: preparation is still running
    assert.equal((await call('POST', `/api/conversations/${id}/events`, { content: [{ text: 'go as soon as you can' }], run: true })).status, 200);
    await waitStatus(id, 'finished');
    const evs = await events(id);
    const ready = evs.find((e) => e.key === 'setup' && e.value.phase === 'ready');
    const running = evs.find((e) => e.key === 'execution_status' && e.value === 'running');
    assert.ok(ready && running && ready.seq < running.seq, 'the run started after preparation');
  });

  test('a run requested while setup.sh runs waits for it (no step before the workspace is ready)', async () => {
    await storeProviders({ github: { token: TOKEN, host: git.url } });
    llm.push({ text: 'patient' });
    const id = await create({ repository: 'acme/slow', git_provider: 'github' });
    await waitFor(() => fs.existsSync(path.join(workspace(id), '.slow-once')), 'setup.sh running', 20_000);
    assert.equal((await info(id)).setup.phase, 'cloned');
    await call('POST', `/api/conversations/${id}/events`, { content: [{ text: 'start now' }], run: true });
    await waitStatus(id, 'finished');
    const evs = await events(id);
    const setupScript = evs.find((e) => e.key === 'setup_script');
    const running = evs.find((e) => e.key === 'execution_status' && e.value === 'running');
    assert.ok(setupScript.seq < running.seq, 'the run waited for setup.sh');
    assert.match(systemOf(llm.requests[llm.requests.length - 1]), /SLOW-AGENTS/);
  });

  test('a preparation cut short by a daemon crash resumes by itself at start-up and runs as requested', async () => {
    await storeProviders({ github: { token: TOKEN, host: git.url } });
    const id = await create({ repository: 'acme/slow', git_provider: 'github', initial_user_msg: 'resume me' });
    await waitFor(() => fs.existsSync(path.join(workspace(id), '.slow-once')), 'setup.sh running', 20_000);
    await d.stop('SIGKILL');
    llm.push({ text: 'resumed' });
    const before = llm.requests.length;
    d = await startDaemon(llmEnv(), d.dataDir);
    // no /run and no message: the restart itself finishes the preparation and the run asked for at creation
    await waitStatus(id, 'finished');
    const evs = await events(id);
    const phases = evs.filter((e) => e.key === 'setup').map((e) => e.value.phase);
    assert.deepEqual(phases.slice(-4), ['preparing', 'checking_out', 'cloned', 'ready'], 'prepared again, reusing the clone');
    assert.match(evs.find((e) => e.key === 'setup_script').value.output, /slow-ready/);
    assert.equal(llm.requests.length, before + 1);
    assert.match(systemOf(llm.requests[before]), /SLOW-AGENTS/);
    assert.match(JSON.stringify(llm.requests[before].body.messages), /resume me/);
  });

  for (const [name, setup, repository, code, pattern] of [
    ['a bad token', () => storeProviders({ github: { token: BAD_TOKEN, host: git.url } }), 'acme/app', 'auth_failed', /rejected the stored github token/],
    ['a missing repository', () => storeProviders({ github: { token: TOKEN, host: git.url } }), 'acme/nope', 'not_found', /acme\/nope was not found/],
    [
      'an unreachable host',
      () => storeProviders({ github: { token: TOKEN, host: 'http://127.0.0.1:9' } }),
      'acme/app',
      'unreachable',
      /could not reach http:\/\/127\.0\.0\.1:9/,
    ],
  ] as const) {
    test(`clone failure with ${name}: ConversationErrorEvent, status error, setup error, no token anywhere`, async () => {
      await setup();
      const before = llm.requests.length;
      const id = await create({ repository, git_provider: 'github', initial_user_msg: 'hi' });
      await waitStatus(id, 'error');
      const evs = await events(id);
      const err = evs.find((e) => e.kind === 'ConversationErrorEvent');
      assert.equal(err.code, code);
      assert.match(err.detail, pattern);
      const setupErr = evs.find((e) => e.key === 'setup' && e.value.phase === 'error');
      assert.equal(setupErr.value.detail, err.detail);
      const g = await info(id);
      assert.equal(g.execution_status, 'error');
      assert.equal(g.setup.phase, 'error');
      assert.match(g.setup.detail, pattern);
      assert.equal(llm.requests.length, before, 'the agent did not run');
      assert.deepEqual(fs.readdirSync(workspace(id)), [], 'nothing half-cloned is left');
      for (const t of [TOKEN, BAD_TOKEN]) {
        assert.ok(!responses.join('\n').includes(t), 'no token in a response');
        assert.ok(!d.output.join('\n').includes(t), 'no token in the log');
      }
    });
  }

  test('a restarted daemon resumes the conversation with its repository, branch, instructions and MCP config', async () => {
    await storeProviders({ github: { token: TOKEN, host: git.url } });
    const id = cloned;
    await d.stop();
    d = await startDaemon(llmEnv(), d.dataDir);
    const g = await info(id);
    assert.equal(g.selected_repository, 'acme/app');
    assert.equal(g.selected_branch, 'feature');
    assert.equal(g.mcp_config.shttp_servers[0].url, 'http://127.0.0.1:9/mcp');
    assert.equal(g.mcp_config.shttp_servers[0].api_key, '<secret_hidden>');
    const before = llm.requests.length;
    llm.push({ toolCalls: [{ name: 'terminal', arguments: { command: 'git rev-parse --abbrev-ref HEAD; cat feature.txt' } }] }, { text: 'deployed again' });
    await call('POST', `/api/conversations/${id}/events`, { content: [{ text: 'deploy once more' }], run: true });
    await waitStatus(id, 'finished');
    assert.equal(llm.requests.length, before + 2);
    const system = systemOf(llm.requests[before]);
    assert.match(system, /AGENTS-RULE/);
    assert.match(system, /KNOWLEDGE-DEPLOY/);
    assert.match(system, /CONV-INSTR/);
    assert.match(system, /acme\/app.*branch feature/);
    const obs = (await events(id)).filter((e) => e.kind === 'ObservationEvent').at(-1);
    assert.match(obs.observation.content[0].text, /^feature\s+on feature/m, 'the shell works in the same checkout');
    // the MCP server of the stored config was tried again (and failed: nothing listens there)
    assert.ok((await events(id)).some((e) => e.kind === 'ConversationErrorEvent' && e.code === 'MCPServerFailed'));
    assert.ok(!JSON.stringify(llm.requests.map((r) => r.body)).includes(MCP_KEY));
    assert.ok(!responses.join('\n').includes(MCP_KEY));
  });
});

describe('suggested_task and create_microagent', () => {
  const task = (over: Record<string, unknown>) => ({ repo: 'acme/app', issue_number: 7, title: 'Fix the widget', ...over });

  test('unsupported combinations are a 422 at creation at body.suggested_task.<field>; nothing is created', async () => {
    const count = async () => (await call('GET', '/api/conversations?limit=100')).body.items.length;
    const n = await count();
    const cases: [Record<string, unknown>, string, RegExp][] = [
      [{ suggested_task: task({ git_provider: 'enterprise_sso', task_type: 'MERGE_CONFLICTS' }) }, 'task_type', /enterprise_sso/],
      [{ git_provider: 'enterprise_sso', suggested_task: task({ task_type: 'FAILING_CHECKS' }) }, 'task_type', /pull\/merge request API/],
      [{ suggested_task: task({ issue_number: 0 }) }, 'issue_number', /positive integer/],
      [{ suggested_task: task({ repo: 'no-slash' }) }, 'repo', /owner\/repo/],
    ];
    for (const [body, field, msg] of cases) {
      const r = await call('POST', '/api/conversations', body);
      assert.equal(r.status, 422, r.text);
      const e = r.body.detail[0];
      assert.deepEqual(e.loc, ['body', 'suggested_task', field], r.text);
      assert.equal(e.type, 'value_error');
      assert.match(e.msg, msg);
    }
    const bad = await call('POST', '/api/conversations', { create_microagent: { repo: '../etc' } });
    assert.equal(bad.status, 422);
    assert.deepEqual(bad.body.detail[0].loc, ['body', 'create_microagent', 'repo']);
    const badRepo = await call('POST', '/api/conversations', { repository: 'not a repo' });
    assert.equal(badRepo.status, 422);
    assert.deepEqual(badRepo.body.detail[0].loc, ['body', 'repository']);
    assert.equal(await count(), n, 'no conversation was created');
  });

  test('a GitLab suggested task becomes the first user message (merge request words) and starts the agent', async () => {
    await storeProviders({ github: { token: TOKEN, host: git.url }, gitlab: { token: TOKEN, host: git.url } });
    llm.push({ text: 'Resolved the conflicts.' });
    const before = llm.requests.length;
    const r = await call('POST', '/api/conversations', { suggested_task: task({ git_provider: 'gitlab', task_type: 'MERGE_CONFLICTS' }) });
    assert.equal(r.status, 200);
    assert.equal(r.body.conversation_status, 'RUNNING');
    const id = r.body.conversation_id;
    await waitStatus(id, 'finished');
    const evs = await events(id);
    const first = evs.find((e) => e.kind === 'MessageEvent' && e.source === 'user');
    assert.match(textOf(first), /merge request #7/);
    assert.match(textOf(first), /GITLAB_TOKEN/);
    assert.doesNotMatch(textOf(first), /pull request/);
    assert.equal(llm.requests.length, before + 1);
    assert.match(JSON.stringify(llm.requests[before].body.messages), /merge request #7/);
    assert.equal(gitOut(workspace(id), ['remote', 'get-url', 'origin']), `${git.url}/acme/app.git`, 'the task repository was cloned');
    assert.equal((await info(id)).title, 'Fix the widget');
  });

  test('create_microagent becomes the first user message and starts the agent', async () => {
    llm.push({ text: 'Wrote it.' });
    const before = llm.requests.length;
    const id = await create({ create_microagent: { repo: 'acme/app', git_provider: 'github', title: 'Deploy notes' } });
    await waitStatus(id, 'finished');
    const first = (await events(id)).find((e) => e.kind === 'MessageEvent' && e.source === 'user');
    assert.match(textOf(first), /\.openhands\/microagents\/deploy-notes\.md/);
    assert.equal(llm.requests.length, before + 1);
    assert.match(JSON.stringify(llm.requests[before].body.messages), /deploy-notes\.md/);
  });
});

describe('initial_user_msg with image_urls', () => {
  // a data URL: the AI SDK downloads http(s) image URLs itself and refuses private addresses
  const dataUrl = `data:image/png;base64,${PNG.toString('base64')}`;
  const otherUrl = 'data:image/gif;base64,R0lGODlhAQABAIAAAAAAAP///yH5BAEAAAAALAAAAAABAAEAAAIBRAA7';

  const userParts = (req: any) =>
    req.body.messages.filter((m: any) => m.role === 'user').flatMap((m: any) => (Array.isArray(m.content) ? m.content : [{ type: 'text', text: m.content }]));

  test('the first user message has text and image content, sent to the LLM as image parts', async () => {
    llm.push({ text: 'Two tiny pictures.' });
    const before = llm.requests.length;
    const id = await create({ initial_user_msg: 'What is in these?', image_urls: [dataUrl, otherUrl] });
    await waitStatus(id, 'finished');
    const first = (await events(id)).find((e) => e.kind === 'MessageEvent' && e.source === 'user');
    assert.deepEqual(first.llm_message.content, [
      { type: 'text', text: 'What is in these?', cache_prompt: false },
      { type: 'image', image_urls: [dataUrl, otherUrl], cache_prompt: false },
    ]);
    const parts = userParts(llm.requests[before]);
    assert.ok(parts.some((p: any) => p.type === 'text' && p.text === 'What is in these?'));
    const images = parts.filter((p: any) => p.type === 'image_url');
    assert.equal(images.length, 2, JSON.stringify(parts).slice(0, 500));
    assert.deepEqual(
      images.map((p: any) => p.image_url.url),
      [dataUrl, otherUrl],
    );
  });

  test('a model known not to accept images gets the text with a note, not an error', async () => {
    assert.equal((await call('POST', '/api/settings', { llm_model: 'openai/gpt-3.5-turbo' })).status, 200);
    try {
      llm.push({ text: 'I cannot see images.' });
      const before = llm.requests.length;
      const id = await create({ initial_user_msg: 'Describe it', image_urls: [dataUrl] });
      await waitStatus(id, 'finished');
      const parts = userParts(llm.requests[before]);
      assert.ok(!parts.some((p: any) => p.type === 'image_url'), 'no image sent');
      assert.ok(parts.some((p: any) => p.type === 'text' && p.text === 'Describe it'));
      assert.ok(
        parts.some((p: any) => p.type === 'text' && /image omitted/.test(p.text)),
        JSON.stringify(parts),
      );
    } finally {
      await call('POST', '/api/settings', { llm_model: null });
    }
  });

  test('an image URL that is not a URL is refused on arrival (422 with the rule)', async () => {
    const r = await call('POST', '/api/conversations', { initial_user_msg: 'look', image_urls: ['not a url'] });
    assert.equal(r.status, 422, r.text);
    assert.match(r.text, /image URLs must be https:\/\/, http:\/\/ or data:image/);
  });
});
