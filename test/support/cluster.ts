/**
 * Several real daemons sharing one PostgreSQL database (a new one per cluster, dropped after),
 * one WORKSPACE_ROOT and a NATS server of their own (`nats-server` on a random port, started
 * and stopped here).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import type { TestContext } from 'node:test';
import { freePort, startDaemon, tempDir, type DaemonHandle } from './daemon.js';
import { createTestDatabase, type TestDatabase } from './postgres.js';

export const NATS_SERVER = process.env.PARLEY_TEST_NATS_SERVER ?? '/usr/sbin/nats-server';

export interface NatsServer {
  url: string;
  port: number;
  stop(): Promise<void>;
  /** Starts it again on the same port. */
  start(): Promise<void>;
}

/** A nats-server (JetStream on, store in a temp dir) on a random loopback port. */
export async function startNats(t: TestContext): Promise<NatsServer> {
  if (!fs.existsSync(NATS_SERVER)) throw new Error(`nats-server not found at ${NATS_SERVER}: these tests need it (set PARLEY_TEST_NATS_SERVER)`);
  const port = await freePort();
  const dir = tempDir('parley-nats-');
  let proc: ChildProcess | null = null;
  const server: NatsServer = {
    url: `nats://127.0.0.1:${port}`,
    port,
    async start() {
      const p = spawn(NATS_SERVER, ['-a', '127.0.0.1', '-p', String(port), '-js', '-sd', dir], { stdio: ['ignore', 'pipe', 'pipe'] });
      proc = p;
      let out = '';
      const ready = new Promise<void>((resolve, reject) => {
        const onData = (b: Buffer) => {
          out += b.toString();
          if (out.includes('Server is ready')) resolve();
        };
        p.stdout!.on('data', onData);
        p.stderr!.on('data', onData);
        p.once('exit', (code) => reject(new Error(`nats-server exited (${code}) before it was ready:\n${out}`)));
      });
      await Promise.race([ready, new Promise((_, reject) => setTimeout(() => reject(new Error(`nats-server not ready in 15 s:\n${out}`)), 15_000).unref())]);
    },
    async stop() {
      const p = proc;
      proc = null;
      if (!p || p.exitCode !== null || p.signalCode !== null) return;
      const exited = new Promise((r) => p.once('exit', r));
      p.kill('SIGKILL');
      await exited;
    },
  };
  t.after(async () => {
    await server.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  });
  await server.start();
  return server;
}

export interface Cluster {
  db: TestDatabase;
  nats: NatsServer;
  workspaceRoot: string;
  nodes: DaemonHandle[];
  /** The environment of node `i` (start it again with `startNode(i)`). */
  envOf(i: number): Record<string, string>;
  startNode(i: number, env?: Record<string, string>): Promise<DaemonHandle>;
}

/** `n` nodes named node-1..node-n; everything is stopped and removed when the test ends. */
export async function startCluster(t: TestContext, n: number, env: Record<string, string> = {}): Promise<Cluster> {
  const db = await createTestDatabase();
  t.after(() => db.drop());
  const nats = await startNats(t);
  const workspaceRoot = tempDir('parley-cluster-ws-');
  const dataDirs = Array.from({ length: n }, () => tempDir('parley-cluster-node-'));
  const prefix = `parley_test_${crypto.randomBytes(4).toString('hex')}`;
  const nodes: DaemonHandle[] = [];
  t.after(async () => {
    await Promise.all(nodes.map((d) => d.stop('SIGKILL')));
    for (const d of [workspaceRoot, ...dataDirs]) fs.rmSync(d, { recursive: true, force: true });
  });
  const cluster: Cluster = {
    db,
    nats,
    workspaceRoot,
    nodes,
    envOf: (i) => ({
      DATABASE_URL: db.url,
      NATS_URL: nats.url,
      NATS_PREFIX: prefix,
      NODE_ID: `node-${i + 1}`,
      SECRET_KEY: 'parley-cluster-test-key',
      WORKSPACE_ROOT: workspaceRoot,
      LOG_LEVEL: 'info',
      ...env,
    }),
    async startNode(i, extra = {}) {
      const d = await startDaemon({ ...cluster.envOf(i), ...extra }, dataDirs[i]);
      nodes[i] = d;
      return d;
    },
  };
  // one after the other would be slower; together they also prove the migrations do not race
  await Promise.all(Array.from({ length: n }, (_, i) => cluster.startNode(i)));
  return cluster;
}
