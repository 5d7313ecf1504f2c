/**
 * Agent control through the real daemon: run-time LLM settings, the Anthropic provider with
 * prompt caching, stuck detection end to end, recovery after a daemon killed mid-run, and
 * messages that arrive as a run ends.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { startDaemon, tempDir, waitFor, type DaemonHandle } from './support/daemon.js';
import { startScriptedAnthropic, startScriptedLlm, type ScriptedLlm } from './support/scripted-llm.js';
import { allEvents, statusOf, waitStatus, type Req } from './support/conversation-api.js';

/** Parley's own fields of a settings answer (it also carries OpenHands' SettingsResponse). */
const llmView = (b: any) => ({ llm_model: b.llm_model, llm_base_url: b.llm_base_url, llm_api_key_set: b.llm_api_key_set });

const statuses = (evs: any[]) => evs.filter((e) => e.key === 'execution_status').map((e) => e.value);

const daemons: DaemonHandle[] = [];
const llms: ScriptedLlm[] = [];
after(async () => {
  for (const d of daemons) await d.stop();
  for (const l of llms) await l.close();
});
async function daemon(env: Record<string, string>, dir?: string): Promise<DaemonHandle> {
  const d = await startDaemon(env, dir);
  daemons.push(d);
  return d;
}
async function scripted(kind: 'openai' | 'anthropic' = 'openai', requireApiKey?: string): Promise<ScriptedLlm> {
  const l = kind === 'openai' ? await startScriptedLlm([], { requireApiKey }) : await startScriptedAnthropic([], { requireApiKey });
  llms.push(l);
  return l;
}

describe('LLM settings at run time', () => {
  test('no LLM configured → LLMNotConfigured; POST /api/settings takes effect for the next run, persists, never returns the key; validation 422', async () => {
    const KEY = 'sk-SETTINGS-CANARY-31337';
    const llm1 = await scripted('openai', KEY);
    const llm2 = await scripted('openai', KEY);
    const dir = tempDir();
    let d = await daemon({}, dir);
    const responses: string[] = [];
    const req: Req = async (m, p, b, h) => {
      const r = await d.req(m, p, b, h);
      responses.push(r.text);
      return r;
    };

    assert.deepEqual(llmView((await req('GET', '/api/settings')).body), { llm_model: null, llm_base_url: null, llm_api_key_set: false });
    const id = (await req('POST', '/api/conversations', { initial_user_msg: 'hello?' })).body.conversation_id as string;
    await waitStatus(req, id, 'error');
    const err = (await allEvents(req, id)).find((e) => e.kind === 'ConversationErrorEvent');
    assert.equal(err.code, 'LLMNotConfigured');
    assert.match(err.detail, /api\/settings/);

    // validation: 422 in the pydantic shape, the key never echoed, nothing stored
    const bad = [
      [{ llm_model: 'gpt-5' }, ['body', 'llm_model']],
      [{ llm_base_url: 'ftp://llm.example' }, ['body', 'llm_base_url']],
      [{ llm_api_key: 12345 }, ['body', 'llm_api_key']],
      [{ llm_api_key: KEY, surprise: true }, ['body', 'surprise']],
    ] as const;
    for (const [body, loc] of bad) {
      const r = await req('POST', '/api/settings', body);
      assert.equal(r.status, 422, r.text);
      assert.deepEqual(r.body.detail[0].loc, loc, r.text);
      assert.ok(!r.text.includes(KEY), 'the key is not echoed');
    }
    assert.equal((await req('POST', '/api/settings', '{"llm_model": ')).status, 422);
    assert.deepEqual(llmView((await req('GET', '/api/settings')).body), { llm_model: null, llm_base_url: null, llm_api_key_set: false });

    const saved = await req('POST', '/api/settings', { llm_model: 'openai/scripted', llm_base_url: llm1.url, llm_api_key: KEY });
    assert.equal(saved.status, 200, saved.text);
    assert.deepEqual(llmView(saved.body), { llm_model: 'openai/scripted', llm_base_url: llm1.url, llm_api_key_set: true });
    assert.deepEqual((await req('GET', '/api/settings')).body, saved.body);

    // the next run uses them, without a restart
    llm1.push({ text: 'configured now' });
    assert.equal((await req('POST', `/api/conversations/${id}/run`)).status, 200);
    await waitStatus(req, id, 'finished');
    assert.equal(llm1.requests.length, 1);
    assert.equal(llm1.requests[0]!.apiKey, KEY);
    assert.deepEqual(statuses(await allEvents(req, id)), ['running', 'error', 'running', 'finished']);

    // a partial update keeps the other fields (the key included)
    const moved = await req('POST', '/api/settings', { llm_base_url: llm2.url });
    assert.deepEqual(llmView(moved.body), { llm_model: 'openai/scripted', llm_base_url: llm2.url, llm_api_key_set: true });
    llm2.push({ text: 'from the second server' });
    await req('POST', `/api/conversations/${id}/events`, { content: [{ text: 'again' }], run: true });
    await waitStatus(req, id, 'finished');
    assert.equal(llm2.requests.length, 1);
    assert.equal(llm2.requests[0]!.apiKey, KEY);

    // they survive a restart
    await d.stop();
    d = await daemon({}, dir);
    assert.deepEqual((await req('GET', '/api/settings')).body, moved.body);
    llm2.push({ text: 'after restart' });
    const id2 = (await req('POST', '/api/conversations', { initial_user_msg: 'still there?' })).body.conversation_id as string;
    await waitStatus(req, id2, 'finished');
    assert.equal(llm2.requests[1]!.apiKey, KEY);

    // null clears a field: without a model there is no LLM again
    assert.deepEqual(llmView((await req('POST', '/api/settings', { llm_model: null })).body), {
      llm_model: null,
      llm_base_url: llm2.url,
      llm_api_key_set: true,
    });
    await req('POST', `/api/conversations/${id2}/events`, { content: [{ text: 'and now?' }], run: true });
    await waitStatus(req, id2, 'error');
    assert.equal((await allEvents(req, id2)).filter((e) => e.kind === 'ConversationErrorEvent').pop().code, 'LLMNotConfigured');

    const all = responses.join('\n') + JSON.stringify(await allEvents(req, id)) + daemons.flatMap((x) => x.output).join('\n');
    assert.ok(!all.includes(KEY), 'the key appears in no response, event or log line');
  });
});

describe('Anthropic provider', () => {
  test('a message with cache_prompt:true becomes a cache_control breakpoint; tool calls round-trip', async () => {
    const anth = await scripted('anthropic', 'sk-ant-test-key');
    const d = await daemon({ LLM_MODEL: 'anthropic/claude-scripted', LLM_BASE_URL: anth.url, LLM_API_KEY: 'sk-ant-test-key' });
    const id = (await d.req('POST', '/api/conversations', {})).body.conversation_id as string;
    anth.push({ text: 'Thinking first.', toolCalls: [{ name: 'think', arguments: { thought: 'plan' } }] }, { text: 'cached answer' });
    await d.req('POST', `/api/conversations/${id}/events`, { content: [{ type: 'text', text: 'plain context message' }] });
    await d.req('POST', `/api/conversations/${id}/events`, { content: [{ type: 'text', text: 'CACHE THIS PART', cache_prompt: true }], run: true });
    await waitStatus(d.req, id, 'finished');
    assert.equal(anth.requests.length, 2);
    const body = anth.requests[0]!.body;
    assert.equal(anth.requests[0]!.apiKey, 'sk-ant-test-key');
    assert.equal(body.model, 'claude-scripted');
    const blocks = (body.messages as any[]).flatMap((m) => (Array.isArray(m.content) ? m.content : [{ type: 'text', text: m.content }]));
    const cached = blocks.find((b) => b.text === 'CACHE THIS PART');
    const plain = blocks.find((b) => b.text === 'plain context message');
    assert.deepEqual(cached?.cache_control, { type: 'ephemeral' }, JSON.stringify(body.messages));
    assert.equal(plain?.cache_control, undefined, 'only the marked message is a breakpoint');
    assert.ok(
      body.tools.some((t: any) => t.name === 'terminal' && t.input_schema),
      'tools in the Anthropic shape',
    );
    // the tool result went back as a tool_result block
    const second = JSON.stringify(anth.requests[1]!.body.messages);
    assert.match(second, /"tool_result"/);
    assert.match(second, /Your thought has been logged/);
    const evs = await allEvents(d.req, id);
    assert.equal(evs.filter((e) => e.kind === 'MessageEvent' && e.source === 'agent').pop().llm_message.content[0].text, 'cached answer');
  });
});

describe('stuck detection and run control', () => {
  let d: DaemonHandle;
  let llm: ScriptedLlm;
  before(async () => {
    llm = await scripted();
    d = await daemon({ LLM_MODEL: 'openai/scripted', LLM_BASE_URL: llm.url, LLM_API_KEY: 'k', MAX_ITERATIONS: '30', TERMINAL_NO_OUTPUT_TIMEOUT_MS: '1000' });
  });
  const start = async (text: string) => (await d.req('POST', '/api/conversations', { initial_user_msg: text })).body.conversation_id as string;

  test('the same error 3 times: a nudge first, then stuck on the 4th', async () => {
    // different arguments, same error: the repeat rule (same action 4 times) does not apply
    // (were it not detected, the next reply would be "(script exhausted)" and the run would finish)
    for (let i = 1; i <= 4; i++) llm.push({ toolCalls: [{ name: 'terminal', arguments: { command: i } }] });
    const before = llm.requests.length;
    const id = await start('error loop');
    await waitStatus(d.req, id, 'stuck');
    const evs = await allEvents(d.req, id);
    const actions = evs.filter((e) => e.kind === 'ActionEvent');
    assert.equal(actions.length, 4);
    const nudge = evs.find((e) => e.kind === 'AgentErrorEvent' && !e.tool_call_id);
    assert.ok(nudge, 'a nudge event');
    assert.match(nudge.error, /same error has occurred 3 times/);
    assert.ok(nudge.seq > actions[2].seq && nudge.seq < actions[3].seq, 'the nudge comes after the third error, before the fourth step');
    const stuck = evs.find((e) => e.kind === 'ConversationErrorEvent');
    assert.equal(stuck.code, 'AgentStuck');
    assert.match(stuck.detail, /same error occurred 3 times.*hint/);
    assert.ok(stuck.seq > actions[3].seq);
    assert.ok(JSON.stringify(llm.requests[before + 3]!.body.messages).includes('Stop repeating that call'), 'the LLM saw the nudge');
    assert.equal(llm.requests.length - before, 4);
    // consume the spare reply so the next test starts clean
    llm.push({ text: 'resumed' });
    await d.req('POST', `/api/conversations/${id}/events`, { content: [{ text: 'ok, go on' }], run: true });
    await waitStatus(d.req, id, 'finished');
  });

  test('A/B alternation six steps long is stuck', async () => {
    for (let i = 0; i < 3; i++)
      llm.push({ toolCalls: [{ name: 'think', arguments: { thought: 'option A' } }] }, { toolCalls: [{ name: 'think', arguments: { thought: 'option B' } }] });
    const id = await start('dither');
    await waitStatus(d.req, id, 'stuck');
    const evs = await allEvents(d.req, id);
    assert.equal(evs.filter((e) => e.kind === 'ActionEvent').length, 6);
    assert.match(evs.find((e) => e.kind === 'ConversationErrorEvent').detail, /alternating/);
    assert.ok(!evs.some((e) => e.kind === 'AgentErrorEvent'), 'no nudge: nothing failed');
    llm.push({ text: 'resumed' });
    await d.req('POST', `/api/conversations/${id}/events`, { content: [{ text: 'pick one' }], run: true });
    await waitStatus(d.req, id, 'finished');
  });

  test('polling a long command (exit_code -1, then "" to keep waiting) is not flagged', async () => {
    // every poll reply consumes exactly one request: "" while the command runs, a thought once it is done
    const poll = (req: any) => {
      const last = JSON.stringify(req.body.messages[req.body.messages.length - 1]);
      return /finished with exit code 0/.test(last)
        ? { toolCalls: [{ name: 'think', arguments: { thought: 'the command is done' } }] }
        : { toolCalls: [{ name: 'terminal', arguments: { command: '' } }] };
    };
    llm.push({ toolCalls: [{ name: 'terminal', arguments: { command: 'sleep 7' } }] }, ...Array.from({ length: 8 }, () => poll), { text: 'waited it out' });
    const id = await start('wait for it');
    await waitStatus(d.req, id, 'finished', 40_000);
    const evs = await allEvents(d.req, id);
    assert.ok(!evs.some((e) => e.kind === 'ConversationErrorEvent' || (e.kind === 'AgentErrorEvent' && !e.tool_call_id)), 'neither stuck nor nudged');
    const obs = evs.filter((e) => e.kind === 'ObservationEvent' && e.tool_name === 'terminal');
    assert.equal(obs[0].observation.exit_code, -1, 'the command outlived the no-output timeout');
    const polls = evs.filter((e) => e.kind === 'ActionEvent' && e.action?.command === '').map((a) => obs.find((o) => o.tool_call_id === a.tool_call_id));
    const waiting = polls.filter((o) => o.observation.exit_code === -1);
    assert.ok(waiting.length >= 4, `at least 4 identical polls (${waiting.length})`);
    assert.ok(
      waiting.every((o) => o.observation.content[0].text === waiting[0].observation.content[0].text),
      'identical results',
    );
    assert.ok(
      obs.some((o) => o.observation.exit_code === 0),
      'the command finished',
    );
  });

  test('a message sent during the final LLM call is answered by the same run', async () => {
    const id = (await d.req('POST', '/api/conversations', {})).body.conversation_id as string;
    llm.push(
      async () => {
        await d.req('POST', `/api/conversations/${id}/events`, { content: [{ text: 'LATE QUESTION' }], run: true });
        return { text: 'answer to the first', delayMs: 200 };
      },
      { text: 'answer to the late one' },
    );
    await d.req('POST', `/api/conversations/${id}/events`, { content: [{ text: 'first question' }], run: true });
    await waitFor(async () => (await allEvents(d.req, id)).filter((e) => e.kind === 'MessageEvent' && e.source === 'agent').length === 2, 'two answers');
    await waitStatus(d.req, id, 'finished');
    assert.ok(JSON.stringify(llm.requests[llm.requests.length - 1]!.body.messages).includes('LATE QUESTION'));
    assert.deepEqual(statuses(await allEvents(d.req, id)), ['running', 'finished']);
  });

  test('a message that arrives as the run ends is never stranded', async () => {
    // the late message is sent 0…45 ms after the final answer leaves the LLM: some land while the
    // loop is writing the answer and ending the run
    for (let delay = 0; delay <= 45; delay += 3) {
      const id = (await d.req('POST', '/api/conversations', {})).body.conversation_id as string;
      const tag = `LATE-${delay}`;
      llm.push(
        () => {
          setTimeout(() => void d.req('POST', `/api/conversations/${id}/events`, { content: [{ text: tag }], run: true }), delay);
          return { text: `first answer ${delay}` };
        },
        { text: `answer to ${tag}` },
      );
      await d.req('POST', `/api/conversations/${id}/events`, { content: [{ text: 'question' }], run: true });
      await waitFor(
        async () => {
          const evs = await allEvents(d.req, id);
          return (
            evs.some((e) => e.kind === 'MessageEvent' && e.source === 'agent' && e.llm_message.content[0].text === `answer to ${tag}`) &&
            (await statusOf(d.req, id)) === 'finished'
          );
        },
        `the message sent ${delay} ms after the final answer was answered`,
        15_000,
      ).catch(async (err) => {
        const evs = await allEvents(d.req, id);
        const brief = evs.map((e) => `${e.seq} ${e.kind} ${e.source} ${e.key ?? ''} ${JSON.stringify(e.value ?? e.llm_message?.content?.[0]?.text ?? '')}`);
        throw new Error(`${err.message}; status ${await statusOf(d.req, id)}; pending replies ${llm.pending()}\n${brief.join('\n')}`);
      });
      const evs = await allEvents(d.req, id);
      const lateMsg = evs.find((e) => e.kind === 'MessageEvent' && e.llm_message.content[0]?.text === tag);
      const answer = evs.find((e) => e.kind === 'MessageEvent' && e.llm_message.content[0]?.text === `answer to ${tag}`);
      assert.ok(answer.seq > lateMsg.seq);
      assert.equal(llm.pending(), 0);
    }
  });
});

describe('crash recovery', () => {
  test('a daemon killed (SIGKILL) mid-run comes back with status error and a reason, and the conversation runs again', async () => {
    const llm = await scripted();
    const dir = tempDir();
    const env = { LLM_MODEL: 'openai/scripted', LLM_BASE_URL: llm.url, LLM_API_KEY: 'k' };
    const d1 = await daemon(env, dir);
    llm.push({ text: 'never delivered', delayMs: 60_000 });
    const id = (await d1.req('POST', '/api/conversations', { initial_user_msg: 'long task' })).body.conversation_id as string;
    await waitStatus(d1.req, id, 'running');
    await llm.waitForRequests(1, 10_000);
    d1.proc.kill('SIGKILL');
    await d1.exited;

    const d2 = await daemon(env, dir);
    const conv = (await d2.req('GET', `/api/conversations/${id}`)).body;
    assert.equal(conv.execution_status, 'error');
    assert.equal(conv.conversation_status, 'ERROR');
    let evs = await allEvents(d2.req, id);
    const why = evs.find((e) => e.kind === 'ConversationErrorEvent');
    assert.equal(why.code, 'DaemonRestarted');
    assert.match(why.detail, /restarted while this conversation was running/);
    assert.deepEqual(statuses(evs), ['running', 'error']);
    const list = (await d2.req('GET', '/api/conversations')).body.items;
    assert.equal(list.find((c: any) => c.conversation_id === id).execution_status, 'error');

    llm.push({ text: 'picked up again' });
    assert.equal((await d2.req('POST', `/api/conversations/${id}/run`)).status, 200);
    await waitStatus(d2.req, id, 'finished');
    evs = await allEvents(d2.req, id);
    assert.equal(evs.filter((e) => e.kind === 'MessageEvent' && e.source === 'agent').pop().llm_message.content[0].text, 'picked up again');
    assert.ok(JSON.stringify(llm.requests[llm.requests.length - 1]!.body.messages).includes('long task'), 'the history was kept');
  });
});
