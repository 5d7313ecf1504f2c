/**
 * Cluster mode against the real servers: the conversation features that act on a conversation's loop
 * reach the node that runs it. A switch of the LLM sent through another node is what the running loop's
 * next request uses; a goal started through one node runs where the loop runs, holds the lease between
 * its runs, and is stopped through another node.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { type DaemonHandle, waitFor } from './support/daemon.js';
import { agentCluster, readyConversation, send } from './support/cluster-api.js';
import { startScriptedLlm } from './support/scripted-llm.js';
import { statusOf } from './support/conversation-api.js';

describe('cluster mode: the conversation features reach the loop', { timeout: 900_000 }, () => {
  test("switch_llm through another node changes the running loop's next request; a goal runs on one node and is stopped through another", {
    timeout: 240_000,
  }, async (t) => {
    const { llm, c } = await agentCluster((f) => t.after(f), 4000, 2);
    const llmB = await startScriptedLlm([], { requireApiKey: 'key-b-0123' });
    t.after(() => llmB.close());
    const id = await readyConversation(c);
    const [n1, n2] = c.nodes as [DaemonHandle, DaemonHandle];
    const goal = async (n: DaemonHandle) => (await n.req('GET', `/api/conversations/${id}`)).body.goal;

    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    llm.push(async () => (await gate, { toolCalls: [{ name: 'terminal', arguments: { command: 'echo one' } }] }));
    llmB.push({ text: 'answered by B' });
    assert.equal((await send(n2, id, 'start on node 2', true)).status, 200);
    await llm.waitForRequests(1, 20_000);
    const switched = await n1.req('POST', `/api/conversations/${id}/switch_llm`, {
      llm: { model: 'openai/model-b', base_url: llmB.url, api_key: 'key-b-0123' },
    });
    assert.equal(switched.status, 200, switched.text);
    release();
    await waitFor(async () => (await statusOf(n1.req, id)) === 'finished', 'finished', 30_000);
    assert.equal(llmB.requests.length, 1, "the owner's next request went to B");
    assert.equal(llmB.requests[0]!.body.model, 'model-b');
    assert.equal((await n2.req('GET', `/api/conversations/${id}`)).body.agent.llm.model, 'openai/model-b');

    // a goal through node 1: it runs where the loop runs, the lease held between its runs
    let again!: () => void;
    const gate2 = new Promise<void>((r) => (again = r));
    llmB.push(async () => (await gate2, { text: 'working on it' }));
    const started = await n1.req('POST', `/api/conversations/${id}/goal`, { objective: 'say it twice', max_iterations: 3 });
    assert.equal(started.status, 200, started.text);
    await llmB.waitForRequests(2, 20_000);
    // it runs on the node that held the lease (node 2, if its lease from the run had not gone yet) or took it
    let owner: string | null = null;
    await waitFor(async () => (owner = (await n2.req('GET', `/api/conversations/${id}`)).body.node_id) !== null, 'an owner for the goal', 15_000);
    const other = owner === 'node-1' ? n2 : n1;
    assert.equal((await other.req('POST', `/api/conversations/${id}/goal`, { objective: 'another' })).status, 409, 'the owner says a goal runs');
    // stopped through the other node: the loop on the owner records it
    assert.equal((await other.req('POST', `/api/conversations/${id}/goal/stop`)).status, 200);
    await waitFor(async () => (await goal(other))?.status === 'interrupted', 'interrupted, as the other node sees it', 15_000);
    again();
    await waitFor(async () => (await statusOf(n1.req, id)) === 'finished', 'the run goes on to its end', 30_000);
    assert.equal(llmB.requests.length, 2, 'a stopped goal asks no judge');
    assert.equal((await goal(n1)).active, false);
  });
});
