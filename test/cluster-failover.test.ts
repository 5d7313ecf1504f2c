/**
 * Cluster mode against the real servers (the owner killed mid-run, shared settings, confirmation
 * through another node): in each test, daemons on random ports sharing one PostgreSQL database of the
 * test's own (created, then dropped), one WORKSPACE_ROOT, and a nats-server of the test's own with a
 * subject prefix of its own (stopped after).
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { waitFor, type DaemonHandle } from './support/daemon.js';
import { allEvents, statusOf } from './support/conversation-api.js';
import { send, create, agentCluster, readyConversation } from './support/cluster-api.js';

describe('cluster mode: PostgreSQL + NATS', { timeout: 900_000 }, () => {
  test('SIGKILL of the owner mid-run with writes in flight: its lease expires, another node takes over (error, NodeLost), every acknowledged ' +
    'message is kept, the agent runs again elsewhere; the killed node rejoins without duplicating anything', {
    timeout: 180_000,
  }, async (t) => {
    const { llm, c } = await agentCluster((f) => t.after(f), 2000);
    const id = await readyConversation(c);
    const [n1, n2, n3] = c.nodes as [DaemonHandle, DaemonHandle, DaemonHandle];
    llm.push({ text: 'never delivered', delayMs: 60_000 });
    assert.equal((await send(n2, id, 'long task', true)).status, 200);
    await llm.waitForRequests(1, 20_000);
    assert.equal((await n3.req('GET', `/api/conversations/${id}`)).body.node_id, 'node-2');
    // writes through the owner, in flight when it is killed
    const acknowledged: string[] = [];
    const writes = Array.from({ length: 60 }, (_, i) =>
      send(n2, id, `w${i}`).then(
        (r) => r.status === 200 && acknowledged.push(`w${i}`),
        () => {},
      ),
    );
    await waitFor(() => acknowledged.length >= 5, 'some writes acknowledged');
    n2.proc.kill('SIGKILL');
    await Promise.all(writes);
    await n2.exited;
    // after LEASE_TTL_MS another node applies the crash-recovery rule
    await waitFor(async () => (await statusOf(n1.req, id)) === 'error', 'the takeover', 20_000);
    let evs = await allEvents(n3.req, id);
    assert.equal(evs.filter((e) => e.kind === 'ConversationErrorEvent' && e.code === 'NodeLost').length, 1, 'one takeover');
    // the node that took over releases the lease right after it set the status
    await waitFor(async () => (await n3.req('GET', `/api/conversations/${id}`)).body.node_id === null, 'no owner after the takeover', 10_000);
    const texts = evs.filter((e) => e.kind === 'MessageEvent').map((e) => e.llm_message.content[0].text);
    for (const a of acknowledged) assert.ok(texts.includes(a), `acknowledged ${a} kept`);
    // the agent runs again, from another node
    llm.push({ text: 'picked up again' });
    assert.equal((await n3.req('POST', `/api/conversations/${id}/run`)).status, 200);
    await waitFor(async () => (await statusOf(n1.req, id)) === 'finished', 'finished after the takeover', 20_000);
    // the killed node comes back: it adds nothing (no DaemonRestarted, no second takeover) and serves the conversation
    const before = (await allEvents(n1.req, id)).length;
    const back = await c.startNode(1);
    assert.equal(await statusOf(back.req, id), 'finished');
    const extra = (await allEvents(back.req, id))
      .slice(before)
      .map((e) => `${e.seq} ${e.kind}/${e.source}${e.key ? ` ${e.key}=${e.value}` : ''}${e.code ? ` ${e.code}` : ''}`);
    assert.deepEqual(extra, [], 'nothing added by the restart');
    evs = await allEvents(back.req, id);
    assert.deepEqual(
      evs.map((e) => e.seq),
      Array.from({ length: evs.length }, (_, i) => i + 1),
      'seq gap-free',
    );
    assert.equal(new Set(evs.map((e) => e.id)).size, evs.length, 'no event twice');
    assert.ok(!evs.some((e) => e.code === 'DaemonRestarted'));
    assert.equal((await send(back, id, 'hello from the restarted node')).status, 200);
  });

  test('provider tokens, secrets, settings and MCP defaults stored through one node are used (and redacted) by the others', { timeout: 180_000 }, async (t) => {
    const { llm, c } = await agentCluster((f) => t.after(f), 3000, 2);
    const id = await readyConversation(c);
    const [n1, n2] = c.nodes as [DaemonHandle, DaemonHandle];
    const GH = 'ghp_clusterCanary0123456789abcdefABCDEF';
    const SECRET = 'cluster-secret-canary-4242';
    const MCPKEY = 'mcp-cluster-canary-key-77';
    assert.equal(
      (
        await n1.req('POST', '/api/add-git-providers', {
          provider_tokens: { github: { token: GH } },
          mcp_config: { shttp_servers: [{ url: 'http://127.0.0.1:9/mcp', api_key: MCPKEY }] },
        })
      ).status,
      200,
    );
    assert.equal((await n1.req('POST', '/api/secrets', { name: 'MY_SECRET', value: SECRET, description: 'from node 1' })).status, 201);
    assert.equal((await n1.req('POST', '/api/settings', { llm_model: 'openai/scripted' })).status, 200);
    assert.deepEqual((await n2.req('GET', '/api/secrets')).body.secrets, [{ name: 'MY_SECRET', description: 'from node 1' }]);
    assert.equal((await n2.req('GET', '/api/settings')).body.llm_model, 'openai/scripted');
    // a conversation created on node 2 gets the MCP default stored through node 1 (redacted when shown)
    const other = await create(n2);
    assert.equal((await n2.req('GET', `/api/conversations/${other}`)).body.mcp_config.shttp_servers[0].url, 'http://127.0.0.1:9/mcp');
    // the agent on node 2 has the token and the secret in its shell, and node 2 masks both
    llm.push({ toolCalls: [{ name: 'terminal', arguments: { command: 'echo "$GITHUB_TOKEN $MY_SECRET"' } }] }, { text: 'done' });
    assert.equal((await send(n2, id, 'print them', true)).status, 200);
    await waitFor(async () => (await statusOf(n2.req, id)) === 'finished', 'finished', 30_000);
    const obs = (await allEvents(n2.req, id)).find((e) => e.kind === 'ObservationEvent');
    assert.match(obs.observation.content[0].text, /<secret_hidden> <secret_hidden>/, 'the shell had the values, masked');
    const everything = JSON.stringify(await allEvents(n1.req, id)) + c.nodes.map((n) => n.output.join('\n')).join('\n');
    for (const canary of [GH, SECRET, MCPKEY]) assert.ok(!everything.includes(canary), `${canary} leaked`);
  });

  test('a confirmation accepted through another node runs the waiting actions there, under the lease', { timeout: 180_000 }, async (t) => {
    const { llm, c } = await agentCluster((f) => t.after(f), 3000, 2);
    const id = await readyConversation(c);
    const [n1, n2] = c.nodes as [DaemonHandle, DaemonHandle];
    assert.equal((await n1.req('POST', `/api/conversations/${id}/confirmation_policy`, { policy: { kind: 'AlwaysConfirm' } })).status, 200);
    // the action outlives LEASE_TTL_MS (3 s): run without the lease, it would be taken over
    llm.push({ toolCalls: [{ name: 'terminal', arguments: { command: 'sleep 5; echo confirmed' } }] }, { text: 'ok' });
    assert.equal((await send(n2, id, 'do it', true)).status, 200);
    await waitFor(async () => (await statusOf(n1.req, id)) === 'waiting_for_confirmation', 'waiting for confirmation', 30_000);
    await waitFor(async () => (await n1.req('GET', `/api/conversations/${id}`)).body.node_id === null, 'no lease while waiting', 10_000);
    assert.equal((await n1.req('POST', `/api/conversations/${id}/events/respond_to_confirmation`, { accept: true })).status, 200);
    await waitFor(async () => (await n1.req('GET', `/api/conversations/${id}`)).body.node_id === 'node-1', 'node 1 runs the actions', 10_000);
    await waitFor(async () => (await statusOf(n2.req, id)) === 'finished', 'finished', 60_000);
    const evs = await allEvents(n1.req, id);
    assert.ok(!evs.some((e) => e.code === 'NodeLost'), 'not taken over');
    assert.match(JSON.stringify(evs.filter((e) => e.kind === 'ObservationEvent')), /confirmed/);
  });
});
