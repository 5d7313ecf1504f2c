/**
 * Cluster mode against the real servers (lease ownership: a stalled owner, commands routed to the owner): in each test, daemons on random ports sharing one
 * PostgreSQL database of the test's own (created, then dropped), one WORKSPACE_ROOT, and a
 * nats-server of the test's own with a subject prefix of its own (stopped after).
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { waitFor, type DaemonHandle } from './support/daemon.js';
import { allEvents, statusOf } from './support/conversation-api.js';
import { send, agentCluster, readyConversation } from './support/cluster-api.js';

describe('cluster mode: PostgreSQL + NATS', { timeout: 900_000 }, () => {
  test('an owner stalled (SIGSTOP) past its lease: a command that must reach it answers 503 with the reason; another node takes over; resumed ' +
    '(SIGCONT), it stops its loop and writes nothing as the owner', {
    timeout: 180_000,
  }, async (t) => {
    const { llm, c } = await agentCluster((f) => t.after(f), 4000, 2);
    const id = await readyConversation(c);
    const [n1, n2] = c.nodes as [DaemonHandle, DaemonHandle];
    let answer!: () => void;
    const gate = new Promise<void>((r) => (answer = r));
    llm.push(async () => {
      await gate;
      return { text: 'written by a stalled owner' };
    });
    assert.equal((await send(n2, id, 'long task', true)).status, 200);
    await llm.waitForRequests(1, 20_000);
    assert.equal((await n1.req('GET', `/api/conversations/${id}`)).body.node_id, 'node-2');
    n2.proc.kill('SIGSTOP');
    t.after(() => n2.proc.kill('SIGCONT'));
    // the owner holds the lease but does not answer: 503 naming it, not a wait without end
    const interrupt = await n1.req('POST', `/api/conversations/${id}/interrupt`);
    assert.equal(interrupt.status, 503, interrupt.text);
    assert.match(interrupt.text, /node-2.*does not answer/);
    // its lease expires: another node applies the crash-recovery rule
    await waitFor(async () => (await statusOf(n1.req, id)) === 'error', 'the takeover', 30_000);
    const recovered = await allEvents(n1.req, id);
    assert.equal(recovered.filter((e) => e.code === 'NodeLost').length, 1);
    // the LLM answers the stalled node, which then resumes
    answer();
    n2.proc.kill('SIGCONT');
    await waitFor(() => n2.output.some((l) => l.includes('lease lost to another node')), 'the resumed node to see it lost the lease', 30_000);
    const active = async () => /^parley_agent_runs_active (\d+)/m.exec((await n2.req('GET', '/metrics')).text)?.[1];
    await waitFor(async () => (await active()) === '0', 'the loop on the resumed node to stop', 30_000);
    // nothing was written as the owner after the takeover
    const evs = await allEvents(n1.req, id);
    assert.deepEqual(evs.slice(recovered.length), [], 'no event after the takeover');
    assert.ok(!JSON.stringify(evs).includes('written by a stalled owner'));
    for (const n of c.nodes) assert.equal(await statusOf(n.req, id), 'error', 'the status the takeover set, everywhere');
    // the resumed node serves the conversation again: a message, and a run it owns
    llm.push({ text: 'done after the stall' });
    assert.equal((await send(n2, id, 'go on', true)).status, 200);
    await waitFor(async () => (await statusOf(n1.req, id)) === 'finished', 'finished', 30_000);
    const after = await allEvents(n1.req, id);
    assert.equal(after.filter((e) => e.kind === 'MessageEvent' && e.source === 'agent').pop().llm_message.content[0].text, 'done after the stall');
    assert.deepEqual(
      after.map((e) => e.seq),
      Array.from({ length: after.length }, (_, i) => i + 1),
      'seq gap-free',
    );
  });

  test('ownership: the node that runs the loop is shown everywhere; run, interrupt and messages through other nodes reach it; the lease goes when ' +
    'the loop stops', {
    timeout: 180_000,
  }, async (t) => {
    const { llm, c } = await agentCluster((f) => t.after(f), 3000);
    const id = await readyConversation(c);
    const [n1, n2, n3] = c.nodes as [DaemonHandle, DaemonHandle, DaemonHandle];
    const owner = async (n: DaemonHandle) => (await n.req('GET', `/api/conversations/${id}`)).body.node_id ?? null;
    for (const n of c.nodes) assert.equal(await owner(n), null, 'no owner before a run');
    llm.push({ text: 'slow answer', delayMs: 60_000 });
    assert.equal((await send(n2, id, 'start on node 2', true)).status, 200);
    await llm.waitForRequests(1, 20_000);
    // the other nodes learn it over NATS: shown everywhere within moments, not necessarily at once
    for (const n of c.nodes) {
      await waitFor(async () => (await owner(n)) === 'node-2', `node-2 shown as the owner on ${n.url}`, 15_000);
      await waitFor(async () => (await statusOf(n.req, id)) === 'running', `every node shows the status the owner set (${n.url})`, 15_000);
    }
    // a second run through another node reaches the owner, which is already running it
    assert.equal((await n3.req('POST', `/api/conversations/${id}/run`)).status, 409);
    // a message through node 3 is taken by the loop on node 2 (no second loop)
    assert.equal((await send(n3, id, 'more from node 3', true)).status, 200);
    assert.equal(llm.requests.length, 1, 'no second loop started');
    // interrupt through node 1 stops the loop on node 2
    assert.equal((await n1.req('POST', `/api/conversations/${id}/interrupt`)).status, 200);
    await waitFor(async () => (await statusOf(n3.req, id)) === 'paused', 'paused, as node 3 sees it', 15_000);
    await waitFor(async () => (await owner(n1)) === null, 'the lease released once the loop stopped', 15_000);
    // with no owner, the node that receives the run takes the lease
    llm.push({ text: 'done on node 3' });
    assert.equal((await n3.req('POST', `/api/conversations/${id}/run`)).status, 200);
    await waitFor(async () => (await statusOf(n1.req, id)) === 'finished', 'finished', 20_000);
    const evs = await allEvents(n1.req, id);
    assert.equal(evs.filter((e) => e.kind === 'MessageEvent' && e.source === 'agent').pop().llm_message.content[0].text, 'done on node 3');
    assert.ok(JSON.stringify(llm.requests.at(-1)!.body.messages).includes('more from node 3'), 'the message sent through node 3 was in the history');
    // pause through node 2 reaches the loop on node 1: it stops after the step in progress (5 s: the window
    // in which the pause must arrive, on a busy machine too)
    llm.push({ toolCalls: [{ name: 'terminal', arguments: { command: 'sleep 5; echo step' } }] }, { text: 'not reached' });
    const asked = llm.requests.length;
    await waitFor(async () => (await owner(n1)) === null, 'the lease released after the run on node 3', 15_000);
    assert.equal((await n1.req('POST', `/api/conversations/${id}/run`)).status, 200);
    await llm.waitForRequests(asked + 1, 20_000);
    await waitFor(async () => (await owner(n2)) === 'node-1', 'node-1 shown as the owner on node 2', 15_000);
    assert.equal((await n2.req('POST', `/api/conversations/${id}/pause`)).status, 200);
    await waitFor(async () => (await statusOf(n3.req, id)) === 'paused', 'paused, as node 3 sees it', 30_000);
    assert.equal(llm.requests.length, asked + 1, 'no step after the pause');
    assert.ok((await allEvents(n2.req, id)).some((e) => e.kind === 'PauseEvent'));
  });
});
