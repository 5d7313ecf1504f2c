/**
 * The conversation service's rules with the core built in the test (no daemon, no HTTP): create and
 * join, a message with or without a run, a run asked for while the workspace is prepared (it waits
 * as run_requested, then starts), pause, interrupt and delete, and the errors for an unknown
 * conversation or a state that refuses the operation. Real SQLite store, real agent runtime and
 * preparer; the LLM is a scripted server over HTTP, SANDBOX=none.
 */
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test, type TestContext } from 'node:test';
import { ConflictError, NotFoundError, PayloadTooLargeError, RequestValidationError } from '../src/errors.js';
import { isoTime } from '../src/iso-time.js';
import { coreParts, gate, statusTrail, type CoreParts, type PartsOptions } from './support/core-parts.js';
import { tempDir, waitFor } from './support/daemon.js';
import { startGitServer, type GitHttpServer } from './support/git-server.js';
import { startScriptedLlm, type ScriptedLlm } from './support/scripted-llm.js';

let llm: ScriptedLlm;
let git: GitHttpServer;
/** setup.sh of acme/gated touches `started` here, then waits for `open`. */
const gateDir = tempDir('parley-setup-gate-');

before(async () => {
  llm = await startScriptedLlm();
  git = await startGitServer();
  await git.createRepo('acme/gated', {
    'README.md': '# gated\n',
    '.openhands/setup.sh': `touch ${gateDir}/started\nwhile [ ! -f ${gateDir}/open ]; do sleep 0.05; done\necho setup-done\n`,
  });
});
after(async () => {
  await llm?.close();
  await git?.close();
  fs.rmSync(gateDir, { recursive: true, force: true });
});

/** LLM requests before the current test's: `llm.requests` holds the whole file's. */
let base = 0;
const calls = () => llm.requests.length - base;
const waitCalls = (n: number) => llm.waitForRequests(base + n, 20_000);

async function parts(t: TestContext, opts: PartsOptions = {}): Promise<CoreParts> {
  llm.clear();
  base = llm.requests.length;
  const p = await coreParts({ llmUrl: llm.url, ...opts });
  t.after(() => p.close());
  return p;
}

const text = (s: string) => [{ type: 'text' as const, text: s }];
const phaseOf = (p: CoreParts, id: string) => (p.conversations.loaded(id)?.record.data.setup as { phase?: string } | undefined)?.phase;
const prepared = (p: CoreParts, id: string) => waitFor(() => phaseOf(p, id) === 'ready', 'the preparation to end');
const statusIs = (p: CoreParts, id: string, want: string) =>
  waitFor(() => p.conversations.status(id) === want && !p.runtime.isRunning(id), `status ${want}`, 20_000);
const userTexts = async (p: CoreParts, id: string) =>
  (await p.events.after(id, 0)).filter((e) => e.kind === 'MessageEvent' && e.source === 'user').map((e) => (e as any).llm_message.content[0].text as string);
const requestText = (i: number) => JSON.stringify(llm.requests[base + i]?.body.messages ?? null);

/** An LLM reply held until the test opens the gate (a run that stays in its first step meanwhile). */
function heldReply() {
  const g = gate();
  llm.push(async () => {
    await g.promise;
    return { text: 'a step', toolCalls: [{ name: 'think', arguments: { thought: 'held step' } }] };
  });
  return g;
}

describe('ConversationService (no daemon)', { timeout: 180_000 }, () => {
  test('create without a message: STARTING, the record idle, prepared to ready with no visible phase, no run', async (t) => {
    const p = await parts(t);
    const res = await p.service.createConversation({});
    assert.equal(res.conversation_status, 'STARTING');
    assert.equal(res.id, res.conversation_id);
    assert.equal(res.message, null);
    await prepared(p, res.id);
    assert.equal(p.conversations.status(res.id), 'idle');
    assert.equal(p.runtime.isRunning(res.id), false);
    assert.deepEqual(await p.events.after(res.id, 0), [], 'no repository: no phase events, no status event');
    assert.equal(calls(), 0);
    assert.equal((await p.store.getConversation(res.id))?.execution_status, 'idle');
  });

  test('create with a first message: RUNNING, the message stored with the record, the run starts once prepared and finishes', async (t) => {
    const p = await parts(t);
    llm.push({ text: 'hello back' });
    const res = await p.service.createConversation({ initial_user_msg: 'hi there\nsecond line' });
    assert.equal(res.conversation_status, 'RUNNING');
    await statusIs(p, res.id, 'finished');
    const evs = await p.events.after(res.id, 0);
    assert.equal(evs[0]?.kind, 'MessageEvent', 'the first message is the first event');
    assert.deepEqual(await userTexts(p, res.id), ['hi there\nsecond line']);
    assert.deepEqual(await statusTrail(p.events, res.id), ['running', 'finished']);
    assert.equal(calls(), 1);
    assert.match(requestText(0), /hi there/);
    assert.equal((await p.conversations.get(res.id)).title, 'hi there');
  });

  test('a create naming an existing conversation joins it: its message is sent with a run; a new id is taken as given', async (t) => {
    const p = await parts(t);
    const wanted = crypto.randomUUID();
    const first = await p.service.createConversation({ conversation_id: wanted });
    assert.equal(first.conversation_id, wanted);
    assert.equal(first.message, null);
    await prepared(p, wanted);
    llm.push({ text: 'joined answer' });
    const joined = await p.service.createConversation({ conversation_id: wanted, initial_user_msg: 'again' });
    assert.equal(joined.message, 'Joined existing conversation');
    assert.equal(joined.conversation_id, wanted);
    await statusIs(p, wanted, 'finished');
    assert.deepEqual(await userTexts(p, wanted), ['again']);
    assert.deepEqual(await statusTrail(p.events, wanted), ['running', 'finished']);
    assert.equal((await p.store.listConversations(10)).length, 1, 'no second conversation');
  });

  test('a message without run starts nothing; with run the loop runs; a finished conversation goes back to idle with the message in one commit', async (t) => {
    const p = await parts(t);
    const { id } = await p.service.createConversation({});
    await prepared(p, id);
    await p.service.sendMessage(id, { role: 'user', content: text('just a note'), run: false });
    assert.equal(p.runtime.isRunning(id), false);
    assert.equal(p.conversations.status(id), 'idle');
    assert.equal(calls(), 0);

    llm.push({ text: 'ran' });
    await p.service.sendMessage(id, { role: 'user', content: text('now run'), run: true });
    await statusIs(p, id, 'finished');
    assert.equal(calls(), 1);
    assert.match(requestText(0), /just a note[\s\S]*now run/);

    await p.service.sendMessage(id, { role: 'user', content: text('after the end'), run: false });
    assert.equal(p.conversations.status(id), 'idle');
    assert.deepEqual(await statusTrail(p.events, id), ['running', 'finished', 'idle']);
    const evs = await p.events.after(id, 0);
    const idle = evs[evs.length - 1]!;
    const msg = evs[evs.length - 2]!;
    assert.equal((idle as any).value, 'idle');
    assert.equal(msg.kind, 'MessageEvent');
    assert.equal(msg.seq! + 1, idle.seq, 'the message and the status it brings back are consecutive');
    assert.equal(calls(), 1, 'no run without run: true');
  });

  test('a run asked for while the workspace is prepared waits as run_requested and starts when the preparation ends', async (t) => {
    const p = await parts(t);
    await p.settings.addGitProviders({ provider_tokens: { github: { token: null, host: git.url } } });
    fs.rmSync(path.join(gateDir, 'started'), { force: true });
    fs.rmSync(path.join(gateDir, 'open'), { force: true });
    const { id, conversation_status } = await p.service.createConversation({ repository: 'acme/gated', git_provider: 'github' });
    assert.equal(conversation_status, 'STARTING');
    await waitFor(() => fs.existsSync(path.join(gateDir, 'started')), 'setup.sh to start', 20_000);
    assert.equal(phaseOf(p, id), 'cloned', 'setup.sh runs in the cloned phase');

    await p.service.run(id);
    await p.service.sendMessage(id, { role: 'user', content: text('sent while preparing'), run: true });
    assert.equal(p.conversations.loaded(id)?.record.data.run_requested, true);
    assert.equal(p.runtime.isRunning(id), false);
    assert.equal(p.conversations.status(id), 'idle');
    assert.equal(calls(), 0);

    llm.push({ text: 'ran after setup' });
    fs.writeFileSync(path.join(gateDir, 'open'), '');
    await statusIs(p, id, 'finished');
    assert.equal(calls(), 1);
    assert.match(requestText(0), /sent while preparing/);
    assert.equal(p.conversations.loaded(id)?.record.data.run_requested, undefined, 'the request is used up');
    const evs = await p.events.after(id, 0);
    const readyAt = evs.findIndex((e) => (e as any).key === 'setup' && (e as any).value.phase === 'ready');
    const runningAt = evs.findIndex((e) => (e as any).key === 'execution_status' && (e as any).value === 'running');
    assert.ok(readyAt >= 0 && readyAt < runningAt, `ready (${readyAt}) before running (${runningAt})`);
    assert.deepEqual(await statusTrail(p.events, id), ['running', 'finished']);
  });

  test('a preparation a restart cut short is started again: by resumePreparations (its requested run follows), or by a run asked for meanwhile', async (t) => {
    const p = await parts(t);
    const stored = async (data: Record<string, unknown>, message: string) => {
      const id = crypto.randomUUID();
      await p.store.createConversation({ id, title: null, created_at: isoTime(), updated_at: isoTime(), execution_status: 'idle', data }, [
        p.events.toStore({ kind: 'MessageEvent', source: 'user', llm_message: { role: 'user', content: text(message) } }),
      ]);
      return id;
    };
    const resumed = await stored({ setup: { phase: 'cloning' }, run_requested: true }, 'resume me');
    const asked = await stored({ setup: { phase: 'preparing' } }, 'run me');
    llm.push({ text: 'resumed' });
    await p.service.resumePreparations();
    await statusIs(p, resumed, 'finished');
    assert.equal(phaseOf(p, resumed), 'ready');
    assert.equal(calls(), 1);
    assert.match(requestText(0), /resume me/);
    assert.equal(p.conversations.status(asked), 'idle', 'resumed, but no run was requested');
    await waitFor(() => phaseOf(p, asked) === 'ready', 'the second preparation to end');
    assert.equal(calls(), 1);

    const again = await stored({ setup: { phase: 'checking_out' } }, 'run me now');
    llm.push({ text: 'ran after the preparation' });
    await p.service.run(again);
    await statusIs(p, again, 'finished');
    assert.equal(phaseOf(p, again), 'ready');
    assert.match(requestText(1), /run me now/);
  });

  test('pause: an idle conversation is paused at once; a running one stops after its current step', async (t) => {
    const p = await parts(t);
    const idle = await p.service.createConversation({});
    await prepared(p, idle.id);
    await p.service.pause(idle.id);
    assert.equal(p.conversations.status(idle.id), 'paused');
    assert.deepEqual(
      (await p.events.after(idle.id, 0)).map((e) => e.kind),
      ['PauseEvent', 'ConversationStateUpdateEvent'],
    );

    const { id } = await p.service.createConversation({});
    await prepared(p, id);
    const held = heldReply();
    await p.service.sendMessage(id, { role: 'user', content: text('go'), run: true });
    await waitCalls(1);
    await p.service.pause(id);
    assert.equal(p.conversations.status(id), 'running', 'the step under way is not cut');
    held.open();
    await statusIs(p, id, 'paused');
    assert.equal(calls(), 1, 'no second step');
    assert.deepEqual(await statusTrail(p.events, id), ['running', 'paused']);
    const kinds = (await p.events.after(id, 0)).map((e) => e.kind);
    assert.deepEqual(kinds.slice(-4), ['ActionEvent', 'ObservationEvent', 'PauseEvent', 'ConversationStateUpdateEvent']);
  });

  test('interrupt: the LLM call in flight is cancelled and the conversation paused; an idle one is left as it is', async (t) => {
    const p = await parts(t);
    const { id } = await p.service.createConversation({});
    await prepared(p, id);
    await p.service.interrupt(id);
    assert.equal(p.conversations.status(id), 'idle');
    assert.deepEqual(await p.events.after(id, 0), []);

    const held = heldReply();
    t.after(() => held.open());
    await p.service.sendMessage(id, { role: 'user', content: text('go'), run: true });
    await waitCalls(1);
    await p.service.interrupt(id);
    assert.equal(p.runtime.isRunning(id), false, 'the run is over when interrupt returns');
    assert.equal(p.conversations.status(id), 'paused');
    assert.deepEqual(await statusTrail(p.events, id), ['running', 'paused']);
    const kinds = (await p.events.after(id, 0)).map((e) => e.kind);
    assert.deepEqual(kinds.slice(-2), ['InterruptEvent', 'ConversationStateUpdateEvent']);
    assert.ok(!kinds.includes('ActionEvent'), 'the held answer never arrived');
  });

  test('delete: a running conversation is stopped and removed with its workspace; every later operation answers not found', async (t) => {
    const p = await parts(t);
    const { id } = await p.service.createConversation({});
    await prepared(p, id);
    const ws = path.join(p.config.workspaceRoot, id.replace(/-/g, ''));
    fs.mkdirSync(ws, { recursive: true });
    fs.writeFileSync(path.join(ws, 'made-by-the-agent.txt'), 'x');
    const held = heldReply();
    t.after(() => held.open());
    await p.service.sendMessage(id, { role: 'user', content: text('go'), run: true });
    await waitCalls(1);
    await p.service.deleteConversation(id);
    assert.equal(p.runtime.isRunning(id), false);
    assert.equal(await p.store.getConversation(id), null);
    assert.equal(p.conversations.status(id), undefined);
    assert.equal(fs.existsSync(ws), false, 'workspace removed');
    for (const [name, op] of Object.entries({
      send: () => p.service.sendMessage(id, { role: 'user', content: text('x'), run: true }),
      run: () => p.service.run(id),
      pause: () => p.service.pause(id),
      interrupt: () => p.service.interrupt(id),
      delete: () => p.service.deleteConversation(id),
    })) {
      await assert.rejects(op(), NotFoundError, name);
    }
  });

  test('errors: run while running is a conflict; bad requests are refused before anything is stored', async (t) => {
    const p = await parts(t, { env: { MAX_EVENT_BYTES: '4096' } });
    const { id } = await p.service.createConversation({});
    await prepared(p, id);
    const held = heldReply();
    await p.service.sendMessage(id, { role: 'user', content: text('go'), run: true });
    await waitCalls(1);
    await assert.rejects(p.service.run(id), ConflictError);
    llm.push({ text: 'done' });
    held.open();
    await statusIs(p, id, 'finished');

    const before = (await p.events.after(id, 0)).length;
    await assert.rejects(p.service.sendMessage(id, { role: 'user', content: text('x'.repeat(5000)), run: false }), PayloadTooLargeError);
    assert.equal((await p.events.after(id, 0)).length, before, 'an oversized message is not stored');
    await assert.rejects(p.service.createConversation({ repository: 'not a repository' }), RequestValidationError);
    await assert.rejects(p.service.createConversation({ replay_json: '[]', initial_user_msg: 'both' }), RequestValidationError);
    await assert.rejects(p.service.createConversation({ initial_user_msg: 'y'.repeat(5000) }), PayloadTooLargeError);
    assert.deepEqual(
      (await p.store.listConversations(10)).map((r) => r.id),
      [id],
      'nothing stored by a refused create',
    );
    await assert.rejects(p.service.run(crypto.randomUUID()), NotFoundError);
  });
});
