/**
 * The agent runtime's rules (src/agent/runtime.ts, built by createAgent) without a daemon: the
 * status machine of a run (idle → running → finished, error or paused), one run per conversation,
 * tool calls answered in order, interrupt, a message taken at the next step, the step limit, and a
 * failing or missing LLM. Real SQLite store and tools (bash runs as a plain process: SANDBOX=none);
 * the LLM is a scripted server over HTTP.
 */
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test, type TestContext } from 'node:test';
import { isoTime } from '../src/iso-time.js';
import { workspacePath } from '../src/sandbox/workspace-dir.js';
import { coreParts, gate, statusTrail, type CoreParts, type PartsOptions } from './support/core-parts.js';
import { waitFor } from './support/daemon.js';
import { startScriptedLlm, type ScriptedLlm, type ScriptedReplyValue } from './support/scripted-llm.js';

let llm: ScriptedLlm;
before(async () => {
  llm = await startScriptedLlm();
});
after(() => llm?.close());

/** LLM requests before the current test's (`llm.requests` holds the whole file's). */
let base = 0;
const calls = () => llm.requests.length - base;
const waitCalls = (n: number) => llm.waitForRequests(base + n, 20_000);
const requestText = (i: number) => JSON.stringify(llm.requests[base + i]?.body.messages ?? null);

async function parts(t: TestContext, opts: PartsOptions = { llmUrl: llm.url }): Promise<CoreParts> {
  llm.clear();
  base = llm.requests.length;
  const p = await coreParts(opts);
  t.after(() => p.close());
  return p;
}

/** A new idle conversation holding one user message. */
async function conversation(p: CoreParts, message = 'please help'): Promise<string> {
  const id = crypto.randomUUID();
  await p.conversations.create({ id, title: null, created_at: isoTime(), updated_at: isoTime(), execution_status: 'idle', data: {} }, [
    { kind: 'MessageEvent', source: 'user', llm_message: { role: 'user', content: [{ type: 'text', text: message }] } },
  ]);
  return id;
}

/** A reply held until the test opens the gate. */
function held(reply: ScriptedReplyValue) {
  const g = gate();
  llm.push(async () => {
    await g.promise;
    return reply;
  });
  return g;
}

/** Host processes running `sleep 120` in `dir` (the terminal's command, a plain process with SANDBOX=none). */
const sleepersIn = (dir: string) =>
  fs.readdirSync('/proc').filter((pid) => {
    try {
      return (
        /^\d+$/.test(pid) && fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8') === ['sleep', '120', ''].join('\0') && fs.readlinkSync(`/proc/${pid}/cwd`) === dir
      );
    } catch {
      return false;
    }
  });
const ended = (p: CoreParts, id: string) => waitFor(() => !p.runtime.isRunning(id), 'the run to end', 20_000);
const kinds = async (p: CoreParts, id: string) => (await p.events.after(id, 0)).map((e) => e.kind);
const errorCodes = async (p: CoreParts, id: string) =>
  (await p.events.after(id, 0)).filter((e) => e.kind === 'ConversationErrorEvent').map((e) => (e as any).code);

describe('AgentRuntime (no daemon)', { timeout: 180_000 }, () => {
  test('a plain answer: idle → running → finished; one run at a time; isRunning follows the run; a second start runs again', async (t) => {
    const p = await parts(t);
    const id = await conversation(p);
    assert.equal(p.runtime.isRunning(id), false);
    const g = held({ text: 'the answer' });
    assert.equal(p.runtime.start(id), true);
    assert.equal(p.runtime.isRunning(id), true);
    assert.equal(p.runtime.start(id), false, 'a second run is refused while one is active');
    await waitCalls(1);
    assert.equal(p.conversations.status(id), 'running');
    g.open();
    await ended(p, id);
    assert.equal(p.conversations.status(id), 'finished');
    assert.deepEqual(await kinds(p, id), ['MessageEvent', 'ConversationStateUpdateEvent', 'SystemPromptEvent', 'MessageEvent', 'ConversationStateUpdateEvent']);
    const answer = (await p.events.after(id, 0)).find((e) => e.kind === 'MessageEvent' && e.source === 'agent');
    assert.equal((answer as any).llm_message.content[0].text, 'the answer');
    assert.match(requestText(0), /please help/);

    llm.push({ text: 'again' });
    assert.equal(p.runtime.start(id), true);
    await ended(p, id);
    assert.deepEqual(await statusTrail(p.events, id), ['running', 'finished', 'running', 'finished']);
    assert.equal(calls(), 2);
  });

  test('tool calls run in order, each answered (an unknown tool with an error); finish ends the run', async (t) => {
    const p = await parts(t);
    const id = await conversation(p);
    llm.push(
      {
        text: 'working',
        toolCalls: [
          { name: 'terminal', arguments: { command: 'echo from-bash-$((40+2))' } },
          { name: 'no_such_tool', arguments: {} },
          { name: 'think', arguments: { thought: 'next: finish' } },
        ],
      },
      { toolCalls: [{ name: 'finish', arguments: { message: 'all done' } }] },
    );
    p.runtime.start(id);
    await ended(p, id);
    assert.equal(p.conversations.status(id), 'finished');
    const evs = (await p.events.after(id, 0)).filter((e) => e.kind === 'ActionEvent' || e.kind === 'ObservationEvent' || e.kind === 'AgentErrorEvent');
    assert.deepEqual(
      evs.map((e) => `${e.kind} ${(e as any).tool_name}`),
      [
        'ActionEvent terminal',
        'ObservationEvent terminal',
        'ActionEvent no_such_tool',
        'AgentErrorEvent no_such_tool',
        'ActionEvent think',
        'ObservationEvent think',
        'ActionEvent finish',
        'ObservationEvent finish',
      ],
    );
    assert.match(JSON.stringify((evs[1] as any).observation), /from-bash-42/);
    assert.match((evs[3] as any).error, /Unknown tool "no_such_tool"/);
    assert.equal(calls(), 2);
    assert.match(requestText(1), /from-bash-42/, "the second step saw the first step's output");
  });

  test('a message that arrives during a step is taken at the next step instead of finishing', async (t) => {
    const p = await parts(t);
    const id = await conversation(p);
    const g = held({ text: 'first answer' });
    llm.push({ text: 'second answer' });
    p.runtime.start(id);
    await waitCalls(1);
    await p.events.append(id, { kind: 'MessageEvent', source: 'user', llm_message: { role: 'user', content: [{ type: 'text', text: 'one more thing' }] } });
    p.runtime.notifyMessage(id);
    g.open();
    await ended(p, id);
    assert.equal(p.conversations.status(id), 'finished');
    assert.equal(calls(), 2);
    assert.match(requestText(1), /one more thing/);
    assert.deepEqual(await statusTrail(p.events, id), ['running', 'finished'], 'one run, not two');
  });

  test("interrupt during a tool call: the command is killed and answers; the step's next call is not recorded; then InterruptEvent and paused", async (t) => {
    const p = await parts(t);
    const id = await conversation(p);
    llm.push({
      toolCalls: [
        { name: 'terminal', arguments: { command: 'touch sleeping && sleep 120' }, id: 'call-sleep' },
        { name: 'think', arguments: { thought: 'after the sleep' }, id: 'call-think' },
      ],
    });
    p.runtime.start(id);
    const ws = workspacePath(p.config.workspaceRoot, id);
    await waitFor(() => fs.existsSync(path.join(ws, 'sleeping')), 'the command to run', 20_000);
    await waitFor(() => sleepersIn(ws).length === 1, 'the sleep process');
    await p.runtime.interrupt(id);
    await waitFor(() => sleepersIn(ws).length === 0, 'the sleep process to be killed');
    assert.equal(p.runtime.isRunning(id), false);
    assert.equal(p.conversations.status(id), 'paused');
    const evs = await p.events.after(id, 0);
    const tail = evs.slice(evs.findIndex((e) => e.kind === 'ActionEvent'));
    assert.deepEqual(
      tail.map((e) => `${e.kind} ${(e as any).tool_call_id ?? (e as any).value ?? ''}`.trim()),
      ['ActionEvent call-sleep', 'ObservationEvent call-sleep', 'InterruptEvent', 'ConversationStateUpdateEvent paused'],
    );
    assert.match(JSON.stringify((tail[1] as any).observation), /interrupted because the run was stopped/);
    assert.deepEqual(await statusTrail(p.events, id), ['running', 'paused']);
    assert.equal(calls(), 1);
  });

  test('interrupt while waiting for the LLM: its call is cancelled; only InterruptEvent and paused follow', async (t) => {
    const p = await parts(t);
    const id = await conversation(p);
    const g = held({ text: 'never seen' });
    t.after(() => g.open());
    p.runtime.start(id);
    await waitCalls(1);
    const before = (await p.events.after(id, 0)).length;
    await p.runtime.interrupt(id);
    assert.equal(p.runtime.isRunning(id), false);
    assert.equal(p.conversations.status(id), 'paused');
    const evs = await p.events.after(id, 0);
    assert.deepEqual(
      evs.slice(before).map((e) => e.kind),
      ['InterruptEvent', 'ConversationStateUpdateEvent'],
    );
    assert.deepEqual(await statusTrail(p.events, id), ['running', 'paused']);
  });

  test('the step limit: after MAX_ITERATIONS steps the run stops with MaxIterationsReached, status error', async (t) => {
    const p = await parts(t, { llmUrl: llm.url, env: { MAX_ITERATIONS: '2' } });
    const id = await conversation(p);
    for (const n of [1, 2, 3]) llm.push({ toolCalls: [{ name: 'think', arguments: { thought: `step ${n}` } }] });
    p.runtime.start(id);
    await ended(p, id);
    assert.equal(p.conversations.status(id), 'error');
    assert.equal(calls(), 2);
    assert.deepEqual(await errorCodes(p, id), ['MaxIterationsReached']);
    assert.deepEqual(await statusTrail(p.events, id), ['running', 'error']);
  });

  test("a failing LLM ends the run in error with the provider's code; no LLM configured is an error too", async (t) => {
    const p = await parts(t);
    const id = await conversation(p);
    llm.push({ error: { status: 401 } });
    p.runtime.start(id);
    await ended(p, id);
    assert.equal(p.conversations.status(id), 'error');
    assert.deepEqual(await errorCodes(p, id), ['AuthenticationFailed']);
    assert.equal(calls(), 1, 'an authentication failure is not retried');

    const none = await parts(t, {});
    const other = await conversation(none);
    none.runtime.start(other);
    await ended(none, other);
    assert.equal(none.conversations.status(other), 'error');
    assert.deepEqual(await errorCodes(none, other), ['LLMNotConfigured']);
    assert.deepEqual(await statusTrail(none.events, other), ['running', 'error']);
  });
});
