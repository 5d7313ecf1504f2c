/**
 * Cluster mode against the real servers (PostgreSQL unreachable, tRPC events and deletion across nodes): in each test, daemons on random ports sharing one
 * PostgreSQL database of the test's own (created, then dropped), one WORKSPACE_ROOT, and a
 * nats-server of the test's own with a subject prefix of its own (stopped after).
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { createParleyClient } from '../src/client.js';
import { startCluster } from './support/cluster.js';
import { waitFor, type DaemonHandle } from './support/daemon.js';
import { tcpProxy } from './support/tcp-proxy.js';
import { send, subscribe, create, texts, storedTexts, assertGapFree } from './support/cluster-api.js';

describe('cluster mode: PostgreSQL + NATS', { timeout: 900_000 }, () => {
  test('PostgreSQL briefly unreachable from a node: appends answer 503 with the reason, nothing acknowledged is lost, the node recovers by itself', {
    timeout: 180_000,
  }, async (t) => {
    const proxy = await tcpProxy(5432);
    t.after(() => proxy.close());
    // node 2 reaches PostgreSQL through the proxy
    const c = await startCluster(
      (f) => t.after(f),
      2,
      (i, db): Record<string, string> => {
        if (i === 0) return {};
        const url = new URL(db.url);
        url.port = String(proxy.port);
        return { DATABASE_URL: url.toString() };
      },
    );
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

  test('tRPC events across nodes: a subscriber through node 2 gets what is written through nodes 1 and 3 once each, in seq order; lastEventId ' +
    'resumes on node 3. Deleting through node 1: 404 on every node, subscribers on the others (WebSocket and tRPC) are closed', {
    timeout: 180_000,
  }, async (t) => {
    const c = await startCluster((f) => t.after(f), 3);
    const [n1, n2, n3] = c.nodes as [DaemonHandle, DaemonHandle, DaemonHandle];
    const trpc = (d: DaemonHandle, input: Record<string, unknown>) => {
      const events: any[] = [];
      const errors: any[] = [];
      const sub = createParleyClient({ url: d.url }).events.subscribe(input as never, {
        onData: (e: any) => events.push(e.data ?? e),
        onError: (err) => errors.push(err),
      });
      return { events, errors, seqs: () => events.filter((e) => e.seq !== undefined).map((e) => e.seq as number), close: () => sub.unsubscribe() };
    };
    const id = await create(n1);
    for (let i = 0; i < 5; i++) assert.equal((await send(n1, id, `before ${i}`)).status, 200);
    const s2 = trpc(n2, { conversation_id: id, after_seq: 0 });
    await waitFor(() => s2.seqs().length >= 5, 'the replay through node 2');
    const results = await Promise.all([
      ...Array.from({ length: 60 }, (_, i) => send(n1, id, `one ${i}`)),
      ...Array.from({ length: 60 }, (_, i) => send(n3, id, `three ${i}`)),
    ]);
    assert.ok(results.every((r) => r.status === 200));
    const last = (await n2.req('GET', `/api/conversations/${id}`)).body.last_seq as number;
    await waitFor(() => s2.seqs().at(-1) === last, 'every event through node 2', 30_000);
    assert.deepEqual(
      s2.seqs(),
      Array.from({ length: last }, (_, i) => i + 1),
      'once each, in seq order, gap-free',
    );
    s2.close();
    // resume through node 3 after an event node 2 delivered
    const mid = s2.events.filter((e) => e.seq !== undefined)[70]!;
    const r3 = trpc(n3, { conversation_id: id, lastEventId: String(mid.seq) });
    await waitFor(() => r3.seqs().at(-1) === last, 'the resumed replay through node 3', 30_000);
    assert.equal((await send(n1, id, 'live after the resume')).status, 200);
    await waitFor(
      () => r3.events.some((e) => e.kind === 'MessageEvent' && e.llm_message.content[0].text === 'live after the resume'),
      'a live event written through node 1',
      20_000,
    );
    assert.deepEqual(
      r3.seqs(),
      Array.from({ length: last + 1 - mid.seq }, (_, i) => mid.seq + 1 + i),
      'after lastEventId: no gap, no duplicate',
    );
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
});
