/**
 * Cluster mode against the real servers: in each test, daemons on random ports sharing one
 * PostgreSQL database of the test's own (created, then dropped), one WORKSPACE_ROOT, and a
 * nats-server of the test's own with a subject prefix of its own (stopped after).
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { describe, test } from 'node:test';
import { createParleyClient } from '../src/client.js';
import { startCluster, type Cluster, type OnEnd } from './support/cluster.js';
import { freePort, ROOT, tempDir, waitFor, type DaemonHandle } from './support/daemon.js';
import { createTestDatabase } from './support/postgres.js';
import { allEvents, statusOf } from './support/conversation-api.js';
import { startScriptedLlm } from './support/scripted-llm.js';
import { tcpProxy } from './support/tcp-proxy.js';
import { connect, type Frames } from './support/ws-client.js';

const send = (d: DaemonHandle, id: string, text: string, run = false) => d.req('POST', `/api/conversations/${id}/events`, { content: [{ text }], run });
const subscribe = (d: DaemonHandle, id: string, q = '') => connect(`ws://127.0.0.1:${d.port}/sockets/events/${id}${q ? `?${q}` : ''}`);
const create = async (d: DaemonHandle) => (await d.req('POST', '/api/conversations', {})).body.conversation_id as string;
const stored = (f: Frames) => f.frames.filter((x) => x.seq !== undefined);
const texts = (f: Frames) => stored(f).filter((x) => x.kind === 'MessageEvent').map((x) => x.llm_message.content[0].text as string);

/** The texts of every message stored, read through the REST API. */
async function storedTexts(d: DaemonHandle, id: string): Promise<string[]> {
  const out: string[] = [];
  for (let page: string | null = null; ; ) {
    const r = await d.req('GET', `/api/conversations/${id}/events/search?limit=100&kind=MessageEvent${page ? `&page_id=${page}` : ''}`);
    out.push(...r.body.items.map((e: any) => e.llm_message.content[0].text));
    page = r.body.next_page_id;
    if (!page) return out;
  }
}

/** Three nodes with a scripted LLM. */
async function agentCluster(onEnd: OnEnd, leaseTtlMs: number, nodes = 3) {
  const llm = await startScriptedLlm([]);
  onEnd(() => llm.close());
  const c = await startCluster(onEnd, nodes, { LLM_MODEL: 'openai/scripted', LLM_BASE_URL: llm.url, LLM_API_KEY: 'k', LEASE_TTL_MS: String(leaseTtlMs) });
  return { llm, c };
}

/** A conversation created on node 1, its workspace ready and its lease released. */
async function readyConversation(c: Cluster) {
  const id = await create(c.nodes[0]!);
  await waitFor(async () => (await c.nodes[0]!.req('GET', `/api/conversations/${id}`)).body.setup?.phase === 'ready', 'the workspace');
  // the creating node held the lease while it prepared the workspace, and lets it go after
  await waitFor(async () => (await c.nodes[0]!.req('GET', `/api/conversations/${id}`)).body.node_id === null, 'no owner once the workspace is ready', 10_000);
  return id;
}

/** Every stored event once, in seq order, gap-free from `from`. */
function assertGapFree(f: Frames, from = 1) {
  const seqs = stored(f).map((x) => x.seq as number);
  assert.deepEqual(seqs, Array.from({ length: seqs.length }, (_, i) => i + from));
}

describe('cluster mode: PostgreSQL + NATS', { timeout: 900_000 }, () => {
  test('cluster configuration: without SECRET_KEY, or with PostgreSQL or NATS unreachable, start fails with one clear line', { timeout: 120_000 }, async (t) => {
    const db = await createTestDatabase();
    t.after(() => db.drop());
    const [pgPort, natsPort] = [await freePort(), await freePort()];
    const start = (env: Record<string, string>) =>
      new Promise<{ status: number | null; stderr: string }>((resolve) => {
        const p = spawn(process.execPath, ['--import', 'tsx', 'bridge/main.ts'], { cwd: ROOT, env: { PATH: process.env.PATH!, DATA_DIR: tempDir(), PORT: '0', ...env }, stdio: ['ignore', 'ignore', 'pipe'] });
        let stderr = '';
        p.stderr!.on('data', (b: Buffer) => (stderr += b.toString()));
        p.on('exit', (status) => resolve({ status, stderr }));
      });
    const runs = await Promise.all([
      start({ DATABASE_URL: db.url }),
      start({ DATABASE_URL: `postgres://postgres@127.0.0.1:${pgPort}/x`, SECRET_KEY: 'k' }),
      start({ DATABASE_URL: db.url, NATS_URL: `nats://127.0.0.1:${natsPort}`, SECRET_KEY: 'k' }),
    ]);
    const want = [/SECRET_KEY: required with DATABASE_URL/, /PostgreSQL unavailable: .*ECONNREFUSED/, new RegExp(`cannot reach NATS at nats://127.0.0.1:${natsPort}`)];
    for (const [i, r] of runs.entries()) {
      assert.equal(r.status, 1, r.stderr);
      assert.match(r.stderr, want[i]!);
      assert.equal(r.stderr.trim().split('\n').length, 1, `one line: ${r.stderr}`);
    }
  });

  test('three nodes: writes through two nodes at once reach subscribers on the others once each, in seq order, gap-free; resume on a third node', { timeout: 180_000 }, async (t) => {
    const c = await startCluster((f) => t.after(f), 3);
    const [n1, n2, n3] = c.nodes as [DaemonHandle, DaemonHandle, DaemonHandle];
    const id = await create(n1);
    const s2 = subscribe(n2, id, 'after_seq=0');
    const s3 = subscribe(n3, id, 'after_seq=0');
    await Promise.all([s2.next((f) => f.key === 'full_state'), s3.next((f) => f.key === 'full_state')]);
    const results = await Promise.all([
      ...Array.from({ length: 100 }, (_, i) => send(n2, id, `two ${i}`)),
      ...Array.from({ length: 100 }, (_, i) => send(n3, id, `three ${i}`)),
    ]);
    assert.ok(results.every((r) => r.status === 200), 'every send answered 200');
    // a 200 from any node means committed: every node counts all of them at once
    for (const n of c.nodes) assert.equal((await n.req('GET', `/api/conversations/${id}/events/count?kind=MessageEvent`)).body, 200);
    for (const s of [s2, s3]) {
      await waitFor(() => texts(s).length === 200, 'all 200 messages on a subscriber', 30_000);
      assertGapFree(s);
      assert.equal(new Set(texts(s)).size, 200, 'each message once');
    }
    // resume on the third node from the middle of what the second saw
    const mid = stored(s2)[120]!.seq as number;
    s2.close();
    const r1 = subscribe(n1, id, `after_seq=${mid}`);
    const last = stored(s3).at(-1)!.seq as number;
    await waitFor(() => stored(r1).at(-1)?.seq === last, 'the resumed subscriber to catch up');
    assertGapFree(r1, mid + 1);
    await send(n2, id, 'after the resume');
    await waitFor(() => texts(r1).includes('after the resume'), 'a live event after the resume');
    assertGapFree(r1, mid + 1);
    r1.close();
    s3.close();
    // resend_mode=all on yet another node: the whole log, once, in order
    const all = subscribe(n2, id, 'resend_mode=all');
    await waitFor(() => stored(all).at(-1)?.seq === stored(r1).at(-1)!.seq, 'the whole log on node 2');
    assertGapFree(all);
    all.close();
  });


  test('NATS stopped mid-run: events still reach subscribers on other nodes (from PostgreSQL); NATS back, live again', { timeout: 180_000 }, async (t) => {
    const c = await startCluster((f) => t.after(f), 2);
    const [n1, n2] = c.nodes as [DaemonHandle, DaemonHandle];
    const id = await create(n1);
    const s2 = subscribe(n2, id, 'after_seq=0');
    await s2.next((f) => f.key === 'full_state');
    for (let i = 0; i < 10; i++) assert.equal((await send(n1, id, `before ${i}`)).status, 200);
    await waitFor(() => texts(s2).length === 10, 'the events before the stop');
    await c.nats.stop();
    for (let i = 0; i < 10; i++) assert.equal((await send(n1, id, `during ${i}`)).status, 200, 'NATS down: writes go on');
    await waitFor(() => texts(s2).length === 20, 'the events written while NATS was down', 20_000);
    await c.nats.start();
    for (let i = 0; i < 10; i++) assert.equal((await send(n1, id, `after ${i}`)).status, 200);
    await waitFor(() => texts(s2).length === 30, 'the events after NATS came back', 20_000);
    assertGapFree(s2);
    s2.close();
  });

  test('PostgreSQL briefly unreachable from a node: appends answer 503 with the reason, nothing acknowledged is lost, the node recovers by itself', { timeout: 180_000 }, async (t) => {
    const proxy = await tcpProxy(5432);
    t.after(() => proxy.close());
    // node 2 reaches PostgreSQL through the proxy
    const c = await startCluster((f) => t.after(f), 2, (i, db): Record<string, string> => {
      if (i === 0) return {};
      const url = new URL(db.url);
      url.port = String(proxy.port);
      return { DATABASE_URL: url.toString() };
    });
    const [n1, n2] = c.nodes as [DaemonHandle, DaemonHandle];
    const id = await create(n1);
    const s1 = subscribe(n1, id, 'after_seq=0');
    await s1.next((f) => f.key === 'full_state');
    const acknowledged: string[] = [];
    let refused: { status: number; body: any } | null = null;
    let i = 0;
    const writer = (async () => {
      while (!refused || acknowledged.length < 40) {
        const text = `m${i++}`;
        const r = await send(n2, id, text);
        if (r.status === 200) acknowledged.push(text);
        else if (r.status === 503) refused ??= r;
        else assert.fail(`unexpected ${r.status}: ${r.text}`);
      }
    })();
    await waitFor(() => acknowledged.length >= 10, 'appends before the cut');
    proxy.cut();
    await waitFor(() => refused, 'a 503 while PostgreSQL is unreachable', 20_000);
    assert.match(JSON.stringify(refused!.body), /PostgreSQL unavailable/);
    proxy.restore();
    await writer; // went on by itself after the restore
    const all = await storedTexts(n1, id);
    for (const a of acknowledged) assert.ok(all.includes(a), `acknowledged ${a} is stored`);
    await waitFor(() => acknowledged.every((a) => texts(s1).includes(a)), 'every acknowledged event on a subscriber of the other node', 20_000);
    assertGapFree(s1);
    s1.close();
  });

  test('tRPC events across nodes: a subscriber through node 2 gets what is written through nodes 1 and 3 once each, in seq order; lastEventId resumes on node 3. Deleting through node 1: 404 on every node, subscribers on the others (WebSocket and tRPC) are closed', { timeout: 180_000 }, async (t) => {
    const c = await startCluster((f) => t.after(f), 3);
    const [n1, n2, n3] = c.nodes as [DaemonHandle, DaemonHandle, DaemonHandle];
    const trpc = (d: DaemonHandle, input: Record<string, unknown>) => {
      const events: any[] = [];
      const errors: any[] = [];
      const sub = createParleyClient({ url: d.url }).events.subscribe(input as never, { onData: (e: any) => events.push(e.data ?? e), onError: (err) => errors.push(err) });
      return { events, errors, seqs: () => events.filter((e) => e.seq !== undefined).map((e) => e.seq as number), close: () => sub.unsubscribe() };
    };
    const id = await create(n1);
    for (let i = 0; i < 5; i++) assert.equal((await send(n1, id, `before ${i}`)).status, 200);
    const s2 = trpc(n2, { conversation_id: id, after_seq: 0 });
    await waitFor(() => s2.seqs().length >= 5, 'the replay through node 2');
    const results = await Promise.all([...Array.from({ length: 60 }, (_, i) => send(n1, id, `one ${i}`)), ...Array.from({ length: 60 }, (_, i) => send(n3, id, `three ${i}`))]);
    assert.ok(results.every((r) => r.status === 200));
    const last = (await n2.req('GET', `/api/conversations/${id}`)).body.last_seq as number;
    await waitFor(() => s2.seqs().at(-1) === last, 'every event through node 2', 30_000);
    assert.deepEqual(s2.seqs(), Array.from({ length: last }, (_, i) => i + 1), 'once each, in seq order, gap-free');
    s2.close();
    // resume through node 3 after an event node 2 delivered
    const mid = s2.events.filter((e) => e.seq !== undefined)[70]!;
    const r3 = trpc(n3, { conversation_id: id, lastEventId: String(mid.seq) });
    await waitFor(() => r3.seqs().at(-1) === last, 'the resumed replay through node 3', 30_000);
    assert.equal((await send(n1, id, 'live after the resume')).status, 200);
    await waitFor(() => r3.events.some((e) => e.kind === 'MessageEvent' && e.llm_message.content[0].text === 'live after the resume'), 'a live event written through node 1', 20_000);
    assert.deepEqual(r3.seqs(), Array.from({ length: last + 1 - mid.seq }, (_, i) => mid.seq + 1 + i), 'after lastEventId: no gap, no duplicate');
    // deleting through node 1: 404 everywhere, and the subscribers on nodes 2 and 3 are closed
    const w2 = subscribe(n2, id);
    const w3 = subscribe(n3, id);
    await Promise.all([w2.next((f) => f.key === 'full_state'), w3.next((f) => f.key === 'full_state')]);
    for (const n of c.nodes) assert.equal((await n.req('GET', `/api/conversations/${id}`)).status, 200, 'loaded on each node');
    assert.equal((await n1.req('DELETE', `/api/conversations/${id}`)).status, 200);
    for (const n of c.nodes) assert.equal((await n.req('GET', `/api/conversations/${id}`)).status, 404);
    assert.equal((await send(n3, id, 'too late')).status, 404);
    for (const w of [w2, w3]) assert.equal((await w.waitClose()).code, 4004);
    await waitFor(() => r3.errors.length > 0, 'the tRPC subscription on node 3 ended by the delete', 20_000);
    assert.match(String(r3.errors[0]?.message), /deleted/i);
    r3.close();
  });

  test('an owner stalled (SIGSTOP) past its lease: a command that must reach it answers 503 with the reason; another node takes over; resumed (SIGCONT), it stops its loop and writes nothing as the owner', { timeout: 180_000 }, async (t) => {
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
    assert.deepEqual(after.map((e) => e.seq), Array.from({ length: after.length }, (_, i) => i + 1), 'seq gap-free');
  });

  test('ownership: the node that runs the loop is shown everywhere; run, interrupt and messages through other nodes reach it; the lease goes when the loop stops', { timeout: 180_000 }, async (t) => {
    const { llm, c } = await agentCluster((f) => t.after(f), 3000);
    const id = await readyConversation(c);
    const [n1, n2, n3] = c.nodes as [DaemonHandle, DaemonHandle, DaemonHandle];
    const owner = async (n: DaemonHandle) => (await n.req('GET', `/api/conversations/${id}`)).body.node_id ?? null;
    for (const n of c.nodes) assert.equal(await owner(n), null, 'no owner before a run');
    llm.push({ text: 'slow answer', delayMs: 60_000 });
    assert.equal((await send(n2, id, 'start on node 2', true)).status, 200);
    await llm.waitForRequests(1, 20_000);
    for (const n of c.nodes) {
      assert.equal(await owner(n), 'node-2');
      assert.equal(await statusOf(n.req, id), 'running', 'every node shows the status the owner set');
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
    // pause through node 2 reaches the loop on node 1: it stops after the step in progress
    llm.push({ toolCalls: [{ name: 'terminal', arguments: { command: 'sleep 2; echo step' } }] }, { text: 'not reached' });
    const asked = llm.requests.length;
    await waitFor(async () => (await owner(n1)) === null, 'the lease released after the run on node 3', 15_000);
    assert.equal((await n1.req('POST', `/api/conversations/${id}/run`)).status, 200);
    await llm.waitForRequests(asked + 1, 20_000);
    assert.equal(await owner(n2), 'node-1');
    assert.equal((await n2.req('POST', `/api/conversations/${id}/pause`)).status, 200);
    await waitFor(async () => (await statusOf(n3.req, id)) === 'paused', 'paused, as node 3 sees it', 30_000);
    assert.equal(llm.requests.length, asked + 1, 'no step after the pause');
    assert.ok((await allEvents(n2.req, id)).some((e) => e.kind === 'PauseEvent'));
  });

  test('SIGKILL of the owner mid-run with writes in flight: its lease expires, another node takes over (error, NodeLost), every acknowledged message is kept, the agent runs again elsewhere; the killed node rejoins without duplicating anything', { timeout: 180_000 }, async (t) => {
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
    const extra = (await allEvents(back.req, id)).slice(before).map((e) => `${e.seq} ${e.kind}/${e.source}${e.key ? ` ${e.key}=${e.value}` : ''}${e.code ? ` ${e.code}` : ''}`);
    assert.deepEqual(extra, [], 'nothing added by the restart');
    evs = await allEvents(back.req, id);
    assert.deepEqual(evs.map((e) => e.seq), Array.from({ length: evs.length }, (_, i) => i + 1), 'seq gap-free');
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
    assert.equal((await n1.req('POST', '/api/add-git-providers', { provider_tokens: { github: { token: GH } }, mcp_config: { shttp_servers: [{ url: 'http://127.0.0.1:9/mcp', api_key: MCPKEY }] } })).status, 200);
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

