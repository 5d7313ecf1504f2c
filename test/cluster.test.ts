/**
 * Cluster mode against the real servers (configuration, fan-out across three nodes, NATS stopped): in each test, daemons on random ports sharing one
 * PostgreSQL database of the test's own (created, then dropped), one WORKSPACE_ROOT, and a
 * nats-server of the test's own with a subject prefix of its own (stopped after).
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { describe, test } from 'node:test';
import { startCluster } from './support/cluster.js';
import { daemonArgs, freePort, ROOT, tempDir, waitFor, type DaemonHandle } from './support/daemon.js';
import { createTestDatabase } from './support/postgres.js';
import { send, subscribe, create, stored, texts, assertGapFree } from './support/cluster-api.js';

describe('cluster mode: PostgreSQL + NATS', { timeout: 900_000 }, () => {
  test('cluster configuration: without SECRET_KEY, or with PostgreSQL or NATS unreachable, start fails with one clear line', {
    timeout: 120_000,
  }, async (t) => {
    const db = await createTestDatabase();
    t.after(() => db.drop());
    const [pgPort, natsPort] = [await freePort(), await freePort()];
    const daemon = await daemonArgs();
    const start = (env: Record<string, string>) =>
      new Promise<{ status: number | null; stderr: string }>((resolve) => {
        const p = spawn(process.execPath, daemon, {
          cwd: ROOT,
          env: { PATH: process.env.PATH!, DATA_DIR: tempDir(), PORT: '0', ...env },
          stdio: ['ignore', 'ignore', 'pipe'],
        });
        let stderr = '';
        p.stderr!.on('data', (b: Buffer) => (stderr += b.toString()));
        p.on('exit', (status) => resolve({ status, stderr }));
      });
    const runs = await Promise.all([
      start({ DATABASE_URL: db.url }),
      start({ DATABASE_URL: `postgres://postgres@127.0.0.1:${pgPort}/x`, SECRET_KEY: 'k' }),
      start({ DATABASE_URL: db.url, NATS_URL: `nats://127.0.0.1:${natsPort}`, SECRET_KEY: 'k' }),
    ]);
    const want = [
      /SECRET_KEY: required with DATABASE_URL/,
      /PostgreSQL unavailable: .*ECONNREFUSED/,
      new RegExp(`cannot reach NATS at nats://127.0.0.1:${natsPort}`),
    ];
    for (const [i, r] of runs.entries()) {
      assert.equal(r.status, 1, r.stderr);
      assert.match(r.stderr, want[i]!);
      assert.equal(r.stderr.trim().split('\n').length, 1, `one line: ${r.stderr}`);
    }
  });

  test('three nodes: writes through two nodes at once reach subscribers on the others once each, in seq order, gap-free; resume on a third node', {
    timeout: 180_000,
  }, async (t) => {
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
    assert.ok(
      results.every((r) => r.status === 200),
      'every send answered 200',
    );
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
});
