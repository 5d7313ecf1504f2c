/**
 * What a restart owes the log: a tool call that was running when the daemon died gets its answer (an
 * AgentErrorEvent with the call's id), so a client watching the stream never sees an action without
 * one, and the conversation runs on from there.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { startDaemon, tempDir, waitFor } from './support/daemon.js';
import { startScriptedLlm } from './support/scripted-llm.js';
import { allEvents, waitStatus } from './support/conversation-api.js';

describe('restart debts', { timeout: 420_000 }, () => {
  test('a daemon SIGKILLed while two tool calls run: after the restart each action has an error answer, in order, and the agent runs again', async (t) => {
    const llm = await startScriptedLlm([]);
    t.after(() => llm.close());
    const dir = tempDir();
    const env = { LLM_MODEL: 'openai/scripted', LLM_BASE_URL: llm.url, LLM_API_KEY: 'k' };
    const d1 = await startDaemon(env, dir);
    t.after(() => d1.stop());
    llm.push({
      toolCalls: [
        { name: 'terminal', arguments: { command: 'echo first-done' } },
        { name: 'terminal', arguments: { command: 'touch started-marker; sleep 120' } },
      ],
    });
    const id = (await d1.req('POST', '/api/conversations', { initial_user_msg: 'run the long one' })).body.conversation_id as string;
    // the first call answered, the second one running
    await waitFor(async () => (await allEvents(d1.req, id)).filter((e) => e.kind === 'ObservationEvent').length === 1, 'the first observation', 60_000);
    await waitFor(async () => (await allEvents(d1.req, id)).filter((e) => e.kind === 'ActionEvent').length === 2, 'both actions', 60_000);
    d1.proc.kill('SIGKILL');
    await d1.exited;

    const d2 = await startDaemon(env, dir);
    t.after(() => d2.stop());
    let evs = await allEvents(d2.req, id);
    const actions = evs.filter((e) => e.kind === 'ActionEvent');
    assert.equal(actions.length, 2);
    const answers = evs.filter((e) => (e.kind === 'ObservationEvent' || e.kind === 'AgentErrorEvent') && e.tool_call_id);
    for (const a of actions) {
      const answer = answers.filter((e) => e.tool_call_id === a.tool_call_id);
      assert.equal(answer.length, 1, `one answer for ${a.tool_call_id}: ${JSON.stringify(answer)}`);
      assert.ok(answer[0].seq > a.seq);
    }
    const debt = answers.find((e) => e.tool_call_id === actions[1].tool_call_id);
    assert.equal(debt.kind, 'AgentErrorEvent');
    assert.equal(debt.tool_name, 'terminal');
    assert.match(debt.error, /daemon restarted while this tool call ran/);
    const why = evs.find((e) => e.kind === 'ConversationErrorEvent');
    assert.equal(why.code, 'DaemonRestarted');
    assert.ok(debt.seq < why.seq, 'the answer comes before the conversation error');

    // a second restart adds nothing: the debt is paid once
    await d2.stop();
    const d3 = await startDaemon(env, dir);
    t.after(() => d3.stop());
    assert.equal((await allEvents(d3.req, id)).length, evs.length);

    llm.push({ text: 'picked up again' });
    assert.equal((await d3.req('POST', `/api/conversations/${id}/run`)).status, 200);
    await waitStatus(d3.req, id, 'finished');
    evs = await allEvents(d3.req, id);
    const sent = JSON.stringify(llm.requests[llm.requests.length - 1]!.body.messages);
    assert.match(sent, /daemon restarted while this tool call ran/, 'the LLM sees the same answer the log has');
  });

  test("an agent's task list survives a restart: the next run's view shows the list planned before it", async (t) => {
    const llm = await startScriptedLlm([]);
    t.after(() => llm.close());
    const dir = tempDir();
    const env = { LLM_MODEL: 'openai/scripted', LLM_BASE_URL: llm.url, LLM_API_KEY: 'k' };
    const list = [
      { id: '1', title: 'Reproduce the bug', status: 'done' },
      { id: '2', title: 'Fix it', status: 'in_progress' },
    ];
    const d1 = await startDaemon(env, dir);
    t.after(() => d1.stop());
    llm.push({ toolCalls: [{ name: 'task_tracker', arguments: { command: 'plan', task_list: list } }] }, { text: 'planned' });
    const id = (await d1.req('POST', '/api/conversations', { initial_user_msg: 'plan the work' })).body.conversation_id as string;
    await waitStatus(d1.req, id, 'finished');
    await d1.stop();

    const d2 = await startDaemon(env, dir);
    t.after(() => d2.stop());
    llm.push({ toolCalls: [{ name: 'task_tracker', arguments: { command: 'view' } }] }, { text: 'viewed' });
    assert.equal((await d2.req('POST', `/api/conversations/${id}/events`, { content: [{ text: 'where were we?' }], run: true })).status, 200);
    await waitStatus(d2.req, id, 'finished');
    const views = (await allEvents(d2.req, id)).filter((e) => e.kind === 'ObservationEvent' && e.tool_name === 'task_tracker');
    assert.equal(views.length, 2);
    assert.equal(views[1].observation.command, 'view');
    assert.deepEqual(views[1].observation.task_list, list);
    assert.match(views[1].observation.content[0].text, /\[x\] Reproduce the bug[\s\S]*\[~\] Fix it/);
  });
});
