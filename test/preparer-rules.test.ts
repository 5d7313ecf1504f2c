/**
 * The workspace preparer's rules (src/conversation/preparer.ts) without a daemon: its phases in
 * order (as events when there is real work), the clone and its setup.sh, a run requested meanwhile
 * or a template's first message starting the loop once ready, and a failed clone ending in the
 * error phase. `prepare()` is awaited directly. Real SQLite store, real git against a local git
 * smart-HTTP server, SANDBOX=none; the LLM is a scripted server over HTTP.
 */
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test, type TestContext } from 'node:test';
import { parseReplay } from '../src/conversation/replay.js';
import { isoTime } from '../src/iso-time.js';
import { workspacePath } from '../src/sandbox/workspace-dir.js';
import { coreParts, statusTrail, type CoreParts } from './support/core-parts.js';
import { waitFor } from './support/daemon.js';
import { startGitServer, type GitHttpServer } from './support/git-server.js';
import { startScriptedLlm, type ScriptedLlm } from './support/scripted-llm.js';

let llm: ScriptedLlm;
let git: GitHttpServer;
before(async () => {
  llm = await startScriptedLlm();
  git = await startGitServer();
  await git.createRepo(
    'acme/app',
    { 'README.md': '# app\n', '.openhands/setup.sh': 'echo "setup on $(git rev-parse --abbrev-ref HEAD)" > .setup-marker\necho SETUP-LINE\n' },
    { branches: { feature: { 'feature.txt': 'on feature\n' } } },
  );
  await git.createRepo('acme/broken-setup', { 'README.md': '# broken\n', '.openhands/setup.sh': 'echo about to fail\nexit 3\n' });
});
after(async () => {
  await llm?.close();
  await git?.close();
});

async function parts(t: TestContext): Promise<CoreParts> {
  llm.clear();
  const p = await coreParts({ llmUrl: llm.url });
  t.after(() => p.close());
  await p.settings.addGitProviders({ provider_tokens: { github: { token: null, host: git.url } } });
  return p;
}

/** A conversation as the service creates it: setup pending, `data` merged in, `first` stored with it. */
async function conversation(p: CoreParts, data: Record<string, unknown>, first: string | null = null): Promise<string> {
  const id = crypto.randomUUID();
  await p.conversations.create(
    { id, title: null, created_at: isoTime(), updated_at: isoTime(), execution_status: 'idle', data: { setup: { phase: 'pending' }, ...data } },
    first ? [{ kind: 'MessageEvent', source: 'user', llm_message: { role: 'user', content: [{ type: 'text', text: first }] } }] : [],
  );
  return id;
}

const setupOf = (p: CoreParts, id: string) => p.conversations.loaded(id)?.record.data.setup as { phase: string; detail?: string } | undefined;
/** The setup phases the log holds, in order. */
const phaseEvents = async (p: CoreParts, id: string) =>
  (await p.events.after(id, 0)).filter((e) => e.kind === 'ConversationStateUpdateEvent' && e.key === 'setup').map((e) => (e as any).value.phase as string);
const stateValue = async (p: CoreParts, id: string, key: string) =>
  (await p.events.after(id, 0)).find((e) => e.kind === 'ConversationStateUpdateEvent' && e.key === key) as any;
const finished = (p: CoreParts, id: string) => waitFor(() => p.conversations.status(id) === 'finished' && !p.runtime.isRunning(id), 'status finished', 20_000);

describe('WorkspacePreparer (no daemon)', { timeout: 180_000 }, () => {
  test('no repository: preparing → ready in the data only; no event, no directory, no run', async (t) => {
    const p = await parts(t);
    const id = await conversation(p, {});
    await p.preparer.prepare(id);
    assert.deepEqual(setupOf(p, id), { phase: 'ready' });
    assert.deepEqual(((await p.store.getConversation(id))!.data as { setup?: unknown }).setup, { phase: 'ready' });
    assert.deepEqual(await p.events.after(id, 0), []);
    assert.equal(fs.existsSync(workspacePath(p.config.workspaceRoot, id)), false, 'the directory is made when something needs it');
    assert.equal(p.runtime.isRunning(id), false);
    assert.equal(p.conversations.status(id), 'idle');
  });

  test('a repository: phases in order as events, the branch checked out and recorded, setup.sh run on it; a second preparation reuses the clone', async (t) => {
    const p = await parts(t);
    const id = await conversation(p, { selected_repository: 'acme/app', git_provider: 'github', selected_branch: 'feature' });
    await p.preparer.prepare(id);
    assert.deepEqual(await phaseEvents(p, id), ['preparing', 'cloning', 'checking_out', 'cloned', 'ready']);
    assert.equal(setupOf(p, id)?.phase, 'ready');
    assert.equal(p.conversations.loaded(id)?.record.data.branch, 'feature');
    const ws = workspacePath(p.config.workspaceRoot, id);
    assert.equal(fs.readFileSync(path.join(ws, 'feature.txt'), 'utf8'), 'on feature\n');
    assert.equal(fs.readFileSync(path.join(ws, '.setup-marker'), 'utf8'), 'setup on feature\n');
    const setup = await stateValue(p, id, 'setup_script');
    assert.equal(setup.value.exit_code, 0);
    assert.match(setup.value.output, /SETUP-LINE/);
    const seqOf = async (phase: string) => (await p.events.after(id, 0)).find((e) => (e as any).key === 'setup' && (e as any).value.phase === phase)!.seq!;
    assert.ok(setup.seq > (await seqOf('cloned')) && setup.seq < (await seqOf('ready')), 'setup.sh runs between cloned and ready');
    assert.equal(p.conversations.status(id), 'idle', 'no run was requested');

    // a preparation the daemon's stop cut short runs again: the clone there is reused
    await p.conversations.updateData(id, { setup: { phase: 'cloning' } });
    await p.preparer.prepare(id);
    const again = (await phaseEvents(p, id)).slice(5);
    assert.deepEqual(again, ['preparing', 'checking_out', 'cloned', 'ready']);
    assert.equal(setupOf(p, id)?.phase, 'ready');
  });

  test('a setup.sh that fails: its exit code and output are recorded and the workspace is still ready', async (t) => {
    const p = await parts(t);
    const id = await conversation(p, { selected_repository: 'acme/broken-setup', git_provider: 'github' });
    await p.preparer.prepare(id);
    const setup = await stateValue(p, id, 'setup_script');
    assert.equal(setup.value.exit_code, 3);
    assert.match(setup.value.output, /about to fail/);
    assert.equal(setupOf(p, id)?.phase, 'ready');
    assert.deepEqual(await statusTrail(p.events, id), [], 'the status is left alone');
  });

  test('a clone that fails: the error phase with its reason, a ConversationErrorEvent, status error, and no run although one was requested', async (t) => {
    const p = await parts(t);
    const id = await conversation(p, { selected_repository: 'acme/missing', git_provider: 'github', run_requested: true }, 'start when ready');
    const before = llm.requests.length;
    await p.preparer.prepare(id);
    assert.equal(setupOf(p, id)?.phase, 'error');
    assert.match(setupOf(p, id)?.detail ?? '', /acme\/missing was not found/);
    assert.deepEqual(await phaseEvents(p, id), ['preparing', 'cloning', 'error']);
    const err = (await p.events.after(id, 0)).find((e) => e.kind === 'ConversationErrorEvent') as any;
    assert.equal(err.code, 'not_found');
    assert.equal(p.conversations.status(id), 'error');
    assert.deepEqual(await statusTrail(p.events, id), ['error']);
    assert.equal(p.runtime.isRunning(id), false);
    assert.equal(p.conversations.loaded(id)?.record.data.run_requested, undefined, 'the request is dropped: no run follows');
    assert.equal(llm.requests.length, before, 'no LLM call');
  });

  test('a run requested meanwhile starts once ready and is used up; a finished conversation is set idle first', async (t) => {
    const p = await parts(t);
    const id = await conversation(p, { run_requested: true }, 'do the thing');
    await p.conversations.setStatus(id, 'finished');
    const before = llm.requests.length;
    llm.push({ text: 'did the thing' });
    await p.preparer.prepare(id);
    assert.equal(p.conversations.loaded(id)?.record.data.run_requested, undefined);
    await finished(p, id);
    assert.deepEqual(await statusTrail(p.events, id), ['finished', 'idle', 'running', 'finished']);
    assert.equal(llm.requests.length - before, 1);
    assert.match(JSON.stringify(llm.requests[before]!.body.messages), /do the thing/);
  });

  test('a template (create_microagent): its first message is appended once prepared and the run starts without run_requested', async (t) => {
    const p = await parts(t);
    const id = await conversation(p, { create_microagent: { repo: 'acme/app', title: 'Deploy Notes' } });
    const before = llm.requests.length;
    llm.push({ text: 'writing the microagent' });
    await p.preparer.prepare(id);
    const first = (await p.events.after(id, 0)).find((e) => e.kind === 'MessageEvent' && e.source === 'user') as any;
    assert.match(first.llm_message.content[0].text, /\.openhands\/microagents\/deploy-notes\.md/);
    await finished(p, id);
    assert.equal(llm.requests.length - before, 1);
    assert.match(JSON.stringify(llm.requests[before]!.body.messages), /deploy-notes\.md/);
    assert.deepEqual(await statusTrail(p.events, id), ['running', 'finished']);
  });

  test('a replay: replaying after the workspace is made, its actions run with the real tools (no LLM), then finished and ready', async (t) => {
    const p = await parts(t);
    const parsed = parseReplay(
      JSON.stringify([
        { action: 'message', source: 'user', args: { content: 'replay this' } },
        { action: 'run', source: 'agent', args: { command: 'echo replayed > replayed.txt' } },
      ]),
    );
    assert.ok(parsed.ok);
    const id = await conversation(p, { replay_json: true });
    const before = llm.requests.length;
    await p.preparer.prepare(id, { replay: parsed.plan });
    assert.deepEqual(await phaseEvents(p, id), ['preparing', 'replaying', 'ready']);
    assert.deepEqual(await statusTrail(p.events, id), ['running', 'finished']);
    assert.equal(fs.readFileSync(path.join(workspacePath(p.config.workspaceRoot, id), 'replayed.txt'), 'utf8'), 'replayed\n');
    const observed = (await p.events.after(id, 0)).filter((e) => e.kind === 'ObservationEvent').map((e) => (e as any).tool_name);
    assert.deepEqual(observed, ['terminal']);
    assert.equal(llm.requests.length, before, 'a replay does not call the LLM');
    assert.equal(p.runtime.isRunning(id), false);
  });
});
