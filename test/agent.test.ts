/** The agent loop against a real daemon and a scripted OpenAI-compatible LLM served over HTTP. */
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { startDaemon, waitFor, type DaemonHandle } from './support/daemon.js';
import { startScriptedLlm, type ScriptedLlm } from './support/scripted-llm.js';
import { connect } from './support/ws-client.js';

const LLM_KEY = 'sk-LLMCANARY-0123456789';
let d: DaemonHandle;
let llm: ScriptedLlm;

before(async () => {
  llm = await startScriptedLlm();
  d = await startDaemon({ LLM_MODEL: 'openai/scripted', LLM_BASE_URL: llm.url, LLM_API_KEY: LLM_KEY, MAX_ITERATIONS: '6', LLM_CONTEXT_WINDOW: '6000' });
});
after(async () => {
  await d.stop();
  await llm.close();
});

const events = async (id: string) => (await d.req('GET', `/api/conversations/${id}/events/search?limit=100`)).body.items as any[];
const status = async (id: string) => (await d.req('GET', `/api/conversations/${id}`)).body.execution_status as string;
const waitStatus = (id: string, want: string, ms = 20_000) => waitFor(async () => (await status(id)) === want, `status ${want}`, ms);
/** A conversation whose first message runs at once: its LLM replies must be queued before. */
async function start(text: string, conversationId?: string): Promise<string> {
  const r = await d.req('POST', '/api/conversations', { initial_user_msg: text, ...(conversationId ? { conversation_id: conversationId } : {}) });
  assert.equal(r.status, 200, r.text);
  return r.body.conversation_id;
}

describe('the loop', () => {
  test('a plain answer is an agent MessageEvent and ends with finished; deltas stream live; status events recorded', async () => {
    llm.push({ text: 'Hello there, human.' });
    const r = await d.req('POST', '/api/conversations', {});
    const id = r.body.conversation_id;
    const ws = connect(`ws://127.0.0.1:${d.port}/sockets/events/${id}`);
    await ws.next((f) => f.key === 'full_state');
    await d.req('POST', `/api/conversations/${id}/events`, { content: [{ text: 'hi' }], run: true });
    await waitStatus(id, 'finished');
    const evs = await events(id);
    const answer = evs.find((e) => e.kind === 'MessageEvent' && e.source === 'agent');
    assert.equal(answer.llm_message.content[0].text, 'Hello there, human.');
    const statuses = evs.filter((e) => e.key === 'execution_status').map((e) => e.value);
    assert.deepEqual(statuses, ['running', 'finished']);
    await ws.next((f) => f.kind === 'StreamingDeltaEvent');
    assert.ok(ws.frames.filter((f) => f.kind === 'StreamingDeltaEvent').every((f) => f.seq === undefined));
    assert.ok(
      evs.every((e) => e.kind !== 'StreamingDeltaEvent'),
      'deltas are live-only',
    );
    const sys = evs.find((e) => e.kind === 'SystemPromptEvent');
    assert.match(sys.system_prompt.text, /working directory/);
    ws.close();
  });

  test('tool calls: terminal and file_editor in one response run in order; finish ends the run', async () => {
    // the id is chosen here: the file editor's path names the workspace, and the replies are queued before the run starts
    const id = crypto.randomUUID();
    const ws = path.join(d.dataDir, 'workspaces', id.replace(/-/g, ''));
    llm.push(
      {
        text: 'Working.',
        toolCalls: [
          { name: 'terminal', arguments: { command: 'export GREETING=hey && echo $GREETING > a.txt && pwd' } },
          { name: 'file_editor', arguments: { command: 'create', path: `${ws}/b.txt`, file_text: 'bee\n' } },
        ],
      },
      { toolCalls: [{ name: 'terminal', arguments: { command: 'echo $GREETING; cat b.txt' } }] },
      { toolCalls: [{ name: 'finish', arguments: { message: 'all done' } }] },
    );
    assert.equal(await start('make a file', id), id);
    await waitStatus(id, 'finished');
    const evs = await events(id);
    const actions = evs.filter((e) => e.kind === 'ActionEvent');
    const obs = evs.filter((e) => e.kind === 'ObservationEvent');
    assert.deepEqual(
      actions.map((a) => a.tool_name),
      ['terminal', 'file_editor', 'terminal', 'finish'],
    );
    assert.equal(actions[0].thought[0].text, 'Working.');
    for (const a of actions) {
      const o = obs.find((x) => x.tool_call_id === a.tool_call_id);
      assert.ok(o, `observation for ${a.tool_name}`);
      assert.equal(o.action_id, a.id);
      assert.ok(o.seq > a.seq);
    }
    // the calls of one response run in order: each one's result is recorded before the next call is
    for (let i = 1; i < actions.length; i++) {
      assert.ok(obs.find((o) => o.tool_call_id === actions[i - 1].tool_call_id).seq < actions[i].seq, `result of call ${i - 1} before call ${i}`);
    }
    // the shell sees its workspace at /workspace when sandboxed (the file editor accepts both names)
    const seen = (await d.req('GET', '/server_info')).body.sandbox.mode === 'bwrap' ? '/workspace' : ws;
    assert.match(obs[0].observation.content[0].text, new RegExp(`^${seen}$`, 'm'));
    assert.equal(obs[0].observation.exit_code, 0);
    assert.match(obs[2].observation.content[0].text, /hey[\s\S]*bee/, 'the shell kept its exported variable');
    assert.equal(fs.readFileSync(path.join(ws, 'a.txt'), 'utf8'), 'hey\n');
    // the LLM saw the tool results on the next step
    const req = llm.requests[llm.requests.length - 1]!.body;
    assert.ok(JSON.stringify(req.messages).includes('bee'));
    assert.ok(req.tools.some((t: any) => t.function.name === 'terminal'));
  });

  test('unknown tools and invalid arguments become AgentErrorEvents the LLM sees and corrects', async () => {
    llm.push(
      { toolCalls: [{ name: 'teleport', arguments: {} }] },
      { toolCalls: [{ name: 'terminal', arguments: '{"command": ' }] },
      { toolCalls: [{ name: 'file_editor', arguments: { command: 'explode' } }] },
      { text: 'Recovered.' },
    );
    const id = await start('try');
    await waitStatus(id, 'finished');
    const errs = (await events(id)).filter((e) => e.kind === 'AgentErrorEvent');
    assert.equal(errs.length, 3);
    assert.match(errs[0].error, /Unknown tool "teleport"/);
    assert.match(errs[1].error, /not valid JSON/);
    assert.match(errs[2].error, /Invalid arguments for file_editor/);
    const last = JSON.stringify(llm.requests[llm.requests.length - 1]!.body.messages);
    assert.ok(last.includes('teleport') && last.includes('Invalid arguments'));
  });

  test('max_iterations ends with MaxIterationsReached and status error; run again works', async () => {
    for (let i = 0; i < 6; i++) llm.push({ toolCalls: [{ name: 'think', arguments: { thought: `step ${i}` } }] });
    const id = await start('loop forever');
    await waitStatus(id, 'error');
    const err = (await events(id)).find((e) => e.kind === 'ConversationErrorEvent');
    assert.equal(err.code, 'MaxIterationsReached');
    llm.push({ text: 'ok' });
    assert.equal((await d.req('POST', `/api/conversations/${id}/run`)).status, 200);
    await waitStatus(id, 'finished');
  });
});

describe('provider failures', () => {
  test('auth failure: typed ConversationErrorEvent without the key, status error, no retry', async () => {
    const before = llm.requests.length;
    llm.push({ error: { status: 401 } });
    const id = await start('hello');
    await waitStatus(id, 'error');
    assert.equal(llm.requests.length - before, 1);
    const err = (await events(id)).find((e) => e.kind === 'ConversationErrorEvent');
    assert.equal(err.code, 'AuthenticationFailed');
    assert.ok(err.detail.length > 0);
    assert.ok(!JSON.stringify(await events(id)).includes(LLM_KEY));
  });
  test('a 429 is retried and each retry is visible', async () => {
    llm.push({ error: { status: 429, headers: { 'retry-after': '0' } } }, { error: { status: 503 } }, { text: 'made it' });
    const id = await start('hello');
    await waitStatus(id, 'finished');
    const retries = (await events(id)).filter((e) => e.key === 'llm_retry');
    assert.equal(retries.length, 2);
    assert.equal(retries[0].value.code, 'RateLimited');
  });
});

describe('status and control', () => {
  test('interrupt cancels the running tool, fills its result and pauses; /run is 409 while running', async () => {
    llm.push({
      toolCalls: [
        { name: 'terminal', arguments: { command: 'sleep 60' } },
        { name: 'think', arguments: { thought: 'never runs' } },
      ],
    });
    const id = await start('sleepy');
    await waitFor(async () => (await events(id)).some((e) => e.kind === 'ActionEvent'), 'action');
    assert.equal((await d.req('POST', `/api/conversations/${id}/run`)).status, 409);
    const t0 = Date.now();
    assert.equal((await d.req('POST', `/api/conversations/${id}/interrupt`)).status, 200);
    await waitStatus(id, 'paused');
    assert.ok(Date.now() - t0 < 10_000);
    const evs = await events(id);
    const [sleeping, ...rest] = evs.filter((e) => e.kind === 'ActionEvent');
    // the killed command reports its interruption as an error result
    const killed = evs.filter((e) => e.tool_call_id === sleeping.tool_call_id && e.kind !== 'ActionEvent');
    assert.equal(killed.length, 1);
    assert.ok(killed[0].kind === 'AgentErrorEvent' || killed[0].observation.is_error, JSON.stringify(killed[0]));
    // the calls of a response are recorded one at a time as they run: the one after the interrupted
    // call was never recorded, so no action is left without its result, and it never ran
    assert.deepEqual(rest, [], 'no call recorded after the interrupted one');
    assert.ok(!evs.some((e) => e.tool_name === 'think'));
  });
  test('interrupt during a slow LLM call', async () => {
    llm.push({ text: 'late', delayMs: 30_000 });
    const id = await start('slow');
    await waitStatus(id, 'running');
    await waitFor(async () => llm.requests.some((r) => JSON.stringify(r.body).includes('slow')), 'llm request');
    await d.req('POST', `/api/conversations/${id}/interrupt`);
    await waitStatus(id, 'paused', 8000);
  });
  test('a message sent while running is taken at the next step (no second loop)', async () => {
    llm.push({ toolCalls: [{ name: 'terminal', arguments: { command: 'sleep 1; echo slept' } }] });
    const id = await start('first');
    await waitFor(async () => (await events(id)).some((e) => e.kind === 'ActionEvent'), 'action');
    llm.push({ text: 'saw both' });
    const r = await d.req('POST', `/api/conversations/${id}/events`, { content: [{ text: 'SECOND MESSAGE' }], run: true });
    assert.equal(r.status, 200);
    await waitStatus(id, 'finished');
    const last = JSON.stringify(llm.requests[llm.requests.length - 1]!.body.messages);
    assert.ok(last.includes('SECOND MESSAGE'));
    const running = (await events(id)).filter((e) => e.key === 'execution_status' && e.value === 'running');
    assert.equal(running.length, 1, 'one run only');
  });
  test('the same action with the same observation 4 times is stuck; a new message resumes', async () => {
    for (let i = 0; i < 4; i++) llm.push({ toolCalls: [{ name: 'terminal', arguments: { command: 'echo same' } }] });
    const id = await start('repeat');
    await waitStatus(id, 'stuck');
    const err = (await events(id)).find((e) => e.kind === 'ConversationErrorEvent');
    assert.equal(err.code, 'AgentStuck');
    llm.push({ text: 'unstuck' });
    await d.req('POST', `/api/conversations/${id}/events`, { content: [{ text: 'try something else' }], run: true });
    await waitStatus(id, 'finished');
  });
  test('pause stops between steps', async () => {
    // no second reply is scripted: if the loop went on instead of pausing it would finish on "(script exhausted)"
    llm.push({ toolCalls: [{ name: 'terminal', arguments: { command: 'sleep 1' } }] });
    const id = await start('pause me');
    await waitFor(async () => (await events(id)).some((e) => e.kind === 'ActionEvent'), 'action');
    await d.req('POST', `/api/conversations/${id}/pause`);
    await waitStatus(id, 'paused');
    const evs = await events(id);
    assert.ok(evs.some((e) => e.kind === 'PauseEvent'));
    assert.ok(
      evs.some((e) => e.kind === 'ObservationEvent'),
      'the running step completed',
    );
  });
});

describe('condensation', () => {
  test('a prompt over the context budget is condensed by the LLM; the full history stays in the log', async () => {
    const big = 'x'.repeat(7000);
    // summarisation requests carry no tools; agent steps do
    let step = 0;
    const reply = (req: any) =>
      !req.body.tools?.length
        ? { text: 'SUMMARY OF EARLIER WORK' }
        : step < 3
          ? { toolCalls: [{ name: 'think', arguments: { thought: `${step++}${big}` } }] }
          : { text: 'continuing after summary' };
    for (let i = 0; i < 6; i++) llm.push(reply);
    const id = await start('big history');
    await waitStatus(id, 'finished');
    const evs = await events(id);
    const cond = evs.find((e) => e.kind === 'Condensation');
    assert.ok(cond, 'a Condensation event');
    assert.equal(cond.summary, 'SUMMARY OF EARLIER WORK');
    assert.ok(cond.forgotten_event_ids.length > 0);
    assert.ok(
      evs.some((e) => e.kind === 'ActionEvent' && e.tool_name === 'think'),
      'nothing deleted',
    );
    const last = JSON.stringify(llm.requests[llm.requests.length - 1]!.body.messages);
    assert.ok(last.includes('SUMMARY OF EARLIER WORK'));
    assert.ok(!last.includes(`0${big}`), 'the oldest step was condensed away');
    assert.ok(last.includes(`2${big}`), 'recent steps stay');
  });
});
