/**
 * Several real daemons sharing one PostgreSQL database (a new one per cluster, dropped after),
 * one WORKSPACE_ROOT and a NATS server of their own (`nats-server` on a random port, started
 * and stopped here).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
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

/** Registers what to do when the test (or suite) ends: `(f) => t.after(f)`, or a list run in `after()`. */
export type OnEnd = (fn: () => unknown) => void;

/** A nats-server (JetStream on, store in a temp dir) on a random loopback port. */
export async function startNats(onEnd: OnEnd): Promise<NatsServer> {
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
  onEnd(async () => {
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

/**
 * `n` nodes named node-1..node-n, started together (their schema migrations take turns); `env`
 * is added to every node's environment, or given per node. Everything is stopped and removed
 * (the database dropped) when the test ends.
 */
export async function startCluster(
  onEnd: OnEnd,
  n: number,
  env: Record<string, string> | ((i: number, db: TestDatabase) => Record<string, string>) = {},
): Promise<Cluster> {
  const db = await createTestDatabase();
  onEnd(() => db.drop());
  const nats = await startNats(onEnd);
  const workspaceRoot = tempDir('parley-cluster-ws-');
  const dataDirs = Array.from({ length: n }, () => tempDir('parley-cluster-node-'));
  const prefix = `parley_test_${crypto.randomBytes(4).toString('hex')}`;
  const nodes: DaemonHandle[] = [];
  onEnd(async () => {
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
      ...(typeof env === 'function' ? env(i, db) : env),
    }),
    async startNode(i, extra = {}) {
      // three daemons compiling at once on a loaded 2-core machine can take long to start
      const d = await startDaemon({ ...cluster.envOf(i), ...extra }, dataDirs[i], { startTimeoutMs: 90_000 });
      nodes[i] = d;
      return d;
    },
  };
  await Promise.all(Array.from({ length: n }, (_, i) => cluster.startNode(i)));
  return cluster;
}
