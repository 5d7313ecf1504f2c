/**
 * What a node buys: a capacity model of cluster mode built from measured CPU costs, and its check.
 *
 *   npx tsx scripts/bench-capacity.ts [--conversations 40] [--concurrency 32] [--low-concurrency 4]
 *        [--duration 8] [--warmup 2] [--clients-per-node 32] [--pg-cores 2] [--nats-cores 2]
 *        [--node-cores 1] [--pg-url postgres://postgres@127.0.0.1:5432/postgres] [--profile-dir DIR]
 *
 * It starts a nats-server of its own (test/support/cluster.ts) and, per phase, a database of its own on
 * --pg-url (dropped after) and daemons in cluster mode (scripts/loadtest/runner.ts), pins them with
 * `taskset`, drives `POST /api/conversations/{id}/events` (run:false) from the load test's generator
 * with a WebSocket subscriber per conversation, and reads the CPU time (utime+stime in /proc/<pid>/stat)
 * each part used in the measured window: every node, the PostgreSQL backends of the phase's database
 * (pg_stat_activity), the nats-server, the generator and this process (the subscribers); plus the
 * append statements (the daemons' metrics), the transactions (pg_stat_database.xact_commit) and the
 * machine's busy time (/proc/stat), so what other work took is known too.
 *
 * Phases:
 *  1. calibration: two nodes, node A (core 0) takes every write, node B (core 1) holds every subscriber,
 *     so A's CPU is the write path (REST, validation, the PostgreSQL client's share, NATS publish) and
 *     B's the delivery (NATS receive, WebSocket send); run at --concurrency and at --low-concurrency,
 *     whose batches differ, so the costs split into a part per statement and a part per event;
 *  2. check, 1 node: the node on core 0, PostgreSQL backends, nats-server, generator and subscribers on
 *     core 1; subscribers on the node;
 *  3. check, 2 nodes: node 1 on core 0, node 2 on core 1, the rest unpinned; each conversation written
 *     through one node and subscribed on the other;
 *  4. check, 2 nodes on core 0, the rest on core 1: the same, with no PostgreSQL on the nodes' core.
 * Then the model: per append, node CPU = W(e) + D, PostgreSQL CPU = P(e), NATS CPU = Q, where e is the
 * events per append statement (group commit: e = the ratio e/connections measured in calibration ×
 * --clients-per-node). On separate machines (a node's event loop is one core: --node-cores; PostgreSQL
 * --pg-cores, NATS --nats-cores), N nodes carry X = min(N·node/(W+D), pg/P, nats/Q); the part with the
 * lowest bound saturates first. The check predicts each check phase's throughput from the calibration
 * costs and this machine's two cores (less what other work used during that phase) and prints the error.
 *
 * `--profile-dir DIR` runs the nodes under --cpu-prof (profiles kept in DIR) and prints where each node's
 * CPU time went in each phase's first window (the profiler's cost is in the figures then).
 *
 * Bounded: every phase has deadlines; children are killed on exit and on SIGINT/SIGTERM.
 * Exit codes: 0 ok, 2 setup or run failure, 130 interrupted.
 */
import { execFileSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { startNats } from '../test/support/cluster.js';
import { now, sleep } from './loadtest/common.js';
import type { GenTarget } from './loadtest/generator.js';
import { summariseProfile } from './loadtest/report.js';
import {
  CLK_TCK,
  closeSubscriber,
  createConversations,
  createDatabase,
  installCleanup,
  interrupted,
  killAllNow,
  readProcTicks,
  runLoad,
  startDaemon,
  stopChild,
  storeCommits,
  subscribe,
  useTmpDir,
  withDeadline,
  type RunStats,
  type Server,
} from './loadtest/runner.js';

const { values } = parseArgs({
  options: {
    conversations: { type: 'string', default: '40' },
    concurrency: { type: 'string', default: '32' },
    'low-concurrency': { type: 'string', default: '4' },
    duration: { type: 'string', default: '8' },
    warmup: { type: 'string', default: '2' },
    'clients-per-node': { type: 'string' },
    'pg-cores': { type: 'string', default: '2' },
    'nats-cores': { type: 'string', default: '2' },
    'node-cores': { type: 'string', default: '1' },
    'pg-url': { type: 'string', default: 'postgres://postgres@127.0.0.1:5432/postgres' },
    'profile-dir': { type: 'string' },
  },
});
const num = (k: keyof typeof values) => {
  const v = Number(values[k]);
  if (!Number.isFinite(v) || v <= 0) throw new Error(`--${k} must be a positive number`);
  return v;
};
const opts = {
  conversations: num('conversations'),
  concurrency: num('concurrency'),
  lowConcurrency: num('low-concurrency'),
  duration: num('duration'),
  warmup: num('warmup'),
  clientsPerNode: values['clients-per-node'] ? num('clients-per-node') : num('concurrency'),
  pgCores: num('pg-cores'),
  natsCores: num('nats-cores'),
  nodeCores: num('node-cores'),
  pgUrl: values['pg-url']!,
  /** run the nodes under --cpu-prof, profiles kept here, and print where each node's time went in each phase's first window */
  profileDir: values['profile-dir'] ? path.resolve(values['profile-dir']) : null,
};
const COMMAND = `npx tsx scripts/bench-capacity.ts ${process.argv.slice(2).join(' ')}`.trim();

// ---- pinning and CPU time ----

function pin(pid: number, cores: string): void {
  // -a: every thread of the process (libuv's pool, V8's helpers), not only the main one
  execFileSync('taskset', ['-a', '-p', '-c', cores, String(pid)], { stdio: 'ignore' });
}

function pinQuietly(pid: number, cores: string): void {
  try {
    pin(pid, cores);
  } catch {
    /* the process ended meanwhile */
  }
}

/** The nats-server listening on `port` (its command line names it). */
function natsPid(port: number): number {
  for (const d of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const cmd = fs.readFileSync(`/proc/${d}/cmdline`, 'utf8').split('\0');
      if (cmd[0]?.endsWith('nats-server') && cmd.includes(String(port))) return Number(d);
    } catch {
      /* gone */
    }
  }
  throw new Error(`no nats-server process found for port ${port}`);
}

function machineBusy(): { total: number; idle: number } {
  const v = fs.readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/).slice(1, 9).map(Number);
  return { total: v.reduce((a, b) => a + b, 0), idle: v[3]! + v[4]! };
}

const loadavg = () =>
  os
    .loadavg()
    .map((l) => l.toFixed(2))
    .join(' ');

/** What one measured window saw. */
interface Sample {
  t: number;
  nodes: number[];
  nats: number;
  pg: Map<number, number>;
  pgBg: number;
  xact: number;
  statements: number;
  machine: { total: number; idle: number };
}

interface Window {
  label: string;
  concurrency: number;
  nodes: number;
  /** every node on core 0 and the rest on core 1 */
  nodesOnCore0: boolean;
  stats: RunStats;
  secs: number;
  /** Successful appends per second in the window. */
  rate: number;
  /** CPU cores each part used in the window. */
  cores: { nodes: number[]; pg: number; pgBg: number; nats: number; gen: number; subs: number; machine: number; other: number };
  /** CPU cores each part used with no load (subscribers open): node, PostgreSQL backends, NATS. */
  idle: { nodes: number[]; pg: number; nats: number };
  statementsPerSec: number;
  xactPerSec: number;
  eventsPerStatement: number;
}

const IDLE_MS = 3000;

/** Cores the phase's PostgreSQL backends used between two samples (a backend opened meanwhile counts from its start). */
function pgCores(a: Sample, b: Sample, secs: number): number {
  let ticks = 0;
  for (const [pid, t1] of b.pg) {
    const t0 = a.pg.get(pid) ?? 0;
    if (Number.isFinite(t1) && Number.isFinite(t0)) ticks += t1 - t0;
  }
  return ticks / CLK_TCK / secs;
}

// ---- one phase: a database, nodes, conversations, subscribers, one or more load runs ----

interface PhaseSpec {
  name: string;
  nodes: number;
  /** taskset core list per node, and for everything else (PostgreSQL backends, NATS, generator, subscribers). */
  nodeCores: string[];
  restCores: string;
  writerOf: (i: number) => number;
  readerOf: (i: number) => number;
  loads: { label: string; concurrency: number }[];
}

async function runPhase(spec: PhaseSpec, nats: { url: string; pid: number }, tmpDir: string, admin: pg.Client): Promise<Window[]> {
  const db = await createDatabase(opts.pgUrl);
  const dbName = new URL(db.url).pathname.slice(1);
  const nodes: Server[] = [];
  const headers: Record<string, string> = {};
  let profiledWindow: [number, number] | null = null;
  try {
    pin(process.pid, spec.restCores); // the generator processes spawned from here inherit it
    pin(nats.pid, spec.restCores);
    const shared = {
      DATABASE_URL: db.url,
      SECRET_KEY: crypto.randomBytes(24).toString('hex'),
      WORKSPACE_ROOT: path.join(tmpDir, `${spec.name}-workspaces`),
      NATS_URL: nats.url,
      NATS_PREFIX: `parley_capacity_${crypto.randomBytes(4).toString('hex')}`,
    };
    for (let i = 0; i < spec.nodes; i++) {
      const profDir = opts.profileDir ? path.join(opts.profileDir, `${spec.name.replace(/[^a-z0-9]+/gi, '-')}-node-${i + 1}`) : null;
      const n = await startDaemon(`node ${i + 1}`, ['bridge/main.ts'], path.join(tmpDir, `${spec.name}-data-${i + 1}`), null, profDir, {
        ...shared,
        NODE_ID: `node-${i + 1}`,
      });
      pin(n.child.proc.pid!, spec.nodeCores[i]!);
      nodes.push(n);
    }
    process.stdout.write(
      `${spec.name}: ${nodes.map((n, i) => `node ${i + 1} pid ${n.child.proc.pid} on core ${spec.nodeCores[i]}`).join(', ')}; the rest on ${spec.restCores}\n`,
    );
    const logged0 = nodes.reduce((a, n) => a + n.child.warnLines + n.child.errorLines, 0);
    const ids = await createConversations(opts.conversations, (i) => nodes[spec.writerOf(i)]!.port, headers);
    const subs = ids.map((id, i) => subscribe(nodes[spec.readerOf(i)]!.port, headers, id));
    await withDeadline(Promise.all(subs.map((s) => s.ready)), 15_000, 'subscribers did not receive their full_state snapshot');

    const pgPids = async () => {
      const r = await admin.query<{ pid: number; datname: string | null; backend_type: string }>(
        `SELECT pid, datname, backend_type FROM pg_stat_activity WHERE datname = $1 OR backend_type IN ('walwriter', 'checkpointer', 'background writer')`,
        [dbName],
      );
      return { ours: r.rows.filter((x) => x.datname === dbName).map((x) => x.pid), bg: r.rows.filter((x) => x.datname !== dbName).map((x) => x.pid) };
    };
    const sample = async (): Promise<Sample> => {
      const t = now();
      const nodeTicks = nodes.map((n) => readProcTicks(n.child.proc.pid!));
      const natsTicks = readProcTicks(nats.pid);
      const machine = machineBusy();
      const [p, x, statements] = await Promise.all([
        pgPids(),
        admin.query<{ xact_commit: string }>('SELECT xact_commit FROM pg_stat_database WHERE datname = $1', [dbName]),
        storeCommits(nodes, headers),
      ]);
      for (const pid of p.ours) pinQuietly(pid, spec.restCores);
      return {
        t,
        nodes: nodeTicks,
        nats: natsTicks,
        pg: new Map(p.ours.map((pid) => [pid, readProcTicks(pid)])),
        pgBg: p.bg.reduce((a, pid) => a + readProcTicks(pid), 0),
        xact: Number(x.rows[0]?.xact_commit ?? NaN),
        statements,
        machine,
      };
    };
    // what each part uses with the subscribers open and no load (the catch-up poll, timers): a fixed cost
    // per second, subtracted before dividing by the appends
    const i0 = await sample(); // also pins the backends already open
    await sleep(IDLE_MS);
    const i1 = await sample();
    const idleSecs = (i1.t - i0.t) / 1000;
    const idle = {
      nodes: i1.nodes.map((t, k) => (t - i0.nodes[k]!) / CLK_TCK / idleSecs),
      pg: pgCores(i0, i1, idleSecs),
      nats: (i1.nats - i0.nats) / CLK_TCK / idleSecs,
    };

    const windows: Window[] = [];
    for (const load of spec.loads) {
      const targets: GenTarget[] = nodes
        .map((n, k) => {
          const mine = ids.map((_id, i) => i).filter((i) => spec.writerOf(i) === k);
          return { port: n.port, paths: mine.map((i) => `/api/conversations/${ids[i]}/events`), convs: mine };
        })
        .filter((t) => t.convs.length > 0);
      const got: { s0?: Promise<Sample>; s1?: Promise<Sample> } = {};
      const stats = await runLoad(
        `${spec.name}, ${load.label}`,
        nodes,
        targets,
        { concurrency: load.concurrency, duration: opts.duration, warmup: opts.warmup, genProcs: 1, timeoutMs: 10_000 },
        headers,
        {
          start: () => (got.s0 = sample()),
          end: () => (got.s1 = sample()),
        },
      );
      for (const n of nodes) if (n.child.proc.exitCode !== null || n.child.proc.signalCode !== null) throw new Error(`${n.child.name} died during the load`);
      profiledWindow ??= stats.windowUs;
      const a = await got.s0!;
      const b = await withDeadline(
        (async () => {
          while (!got.s1) await sleep(10);
          return got.s1;
        })(),
        15_000,
        'the end-of-window sample',
      );
      const secs = (b.t - a.t) / 1000;
      const cores = (d: number) => d / CLK_TCK / secs;
      const machineTotal = b.machine.total - a.machine.total;
      const machine = ((machineTotal - (b.machine.idle - a.machine.idle)) / machineTotal) * os.cpus().length;
      const c = {
        nodes: b.nodes.map((t, i) => cores(t - a.nodes[i]!)),
        pg: pgCores(a, b, secs),
        pgBg: cores(b.pgBg - a.pgBg),
        nats: cores(b.nats - a.nats),
        gen: stats.genCores,
        subs: stats.orchestratorCores,
        machine,
        other: 0,
      };
      c.other = Math.max(0, machine - c.nodes.reduce((x, y) => x + y, 0) - c.pg - c.pgBg - c.nats - c.gen - c.subs);
      const rate = stats.measuredOk / opts.duration;
      const statementsPerSec = (b.statements - a.statements) / secs;
      windows.push({
        label: `${spec.name}, ${load.label}`,
        concurrency: load.concurrency,
        nodes: spec.nodes,
        nodesOnCore0: spec.nodeCores.every((c) => c === '0') && spec.restCores === '1',
        stats,
        secs,
        rate,
        cores: c,
        idle,
        statementsPerSec,
        xactPerSec: (b.xact - a.xact) / secs,
        eventsPerStatement: rate / statementsPerSec,
      });
      if (stats.errors) process.stdout.write(`  warning: ${stats.errors} errors (${stats.errorDetail})\n`);
    }
    // every 200 was delivered to its subscriber (on the other node where there are two)
    const expected = windows.reduce((a, w) => a + w.stats.totalOk, 0);
    const until = now() + 20_000;
    while (subs.reduce((a, s) => a + s.messages, 0) < expected && now() < until) await sleep(50);
    const delivered = subs.reduce((a, s) => a + s.messages, 0);
    const disorder = subs.reduce((a, s) => a + s.orderViolations, 0);
    process.stdout.write(`  delivered ${delivered} of ${expected} appends to the subscribers${disorder ? `, ${disorder} out of order` : ''}\n`);
    const warned = nodes.reduce((a, n) => a + n.child.warnLines + n.child.errorLines, 0) - logged0;
    if (warned)
      process.stdout.write(
        `  the nodes logged ${warned} warning/error lines after their start; the last: ${nodes
          .map((n) => n.child.tail.at(-1) ?? '')
          .join(' | ')
          .slice(0, 400)}\n`,
      );
    subs.forEach(closeSubscriber);
    return windows;
  } finally {
    await Promise.all(nodes.map((n) => stopChild(n.child, 12_000)));
    if (opts.profileDir && profiledWindow) {
      for (let i = 0; i < nodes.length; i++) {
        const dir = path.join(opts.profileDir, `${spec.name.replace(/[^a-z0-9]+/gi, '-')}-node-${i + 1}`);
        const files = fs.existsSync(dir) ? fs.readdirSync(dir).filter((f) => f.endsWith('.cpuprofile')) : [];
        const sums = files.map((f) => summariseProfile(path.join(dir, f), profiledWindow!)).sort((a, b) => b.active - a.active);
        if (sums[0]) process.stdout.write(`\n${spec.name}, node ${i + 1}, first window:\n${sums[0].text}\n`);
      }
    }
    await db.drop().catch((err) => process.stderr.write(`bench-capacity: could not drop the phase's database: ${(err as Error).message}\n`));
  }
}

// ---- the model ----

/** µs of CPU per append a part took in a window. */
const us = (coresUsed: number, w: Window) => (coresUsed / w.rate) * 1e6;

/** cost = perStatement / e + perEvent, from two windows with different batch sizes e. */
function fit(hi: { e: number; c: number }, lo: { e: number; c: number }): { perStatement: number; perEvent: number; fitted: boolean } {
  const dx = 1 / lo.e - 1 / hi.e;
  if (dx > 0.02) {
    const perStatement = (lo.c - hi.c) / dx;
    if (perStatement >= 0) return { perStatement, perEvent: hi.c - perStatement / hi.e, fitted: true };
  }
  return { perStatement: 0, perEvent: hi.c, fitted: false };
}

const f0 = (x: number) => (Number.isFinite(x) ? Math.round(x).toLocaleString('en-US') : '—');
const f1 = (x: number) => (Number.isFinite(x) ? x.toFixed(1) : '—');
const f2 = (x: number) => (Number.isFinite(x) ? x.toFixed(2) : '—');
const pct = (x: number) => `${(x * 100).toFixed(0)} %`;

function windowLine(w: Window): string {
  const c = w.cores;
  return (
    `| ${w.label} | ${f0(w.rate)} | ${f1(w.eventsPerStatement)} | ${f0(w.statementsPerSec)} | ${f0(w.xactPerSec)} | ` +
    `${c.nodes.map(f2).join(' + ')} | ${f2(c.pg)} | ${f2(c.nats)} | ${f2(c.gen + c.subs)} | ${f2(c.other)} |`
  );
}

async function main(): Promise<number> {
  installCleanup();
  const tmpDir = fs.mkdtempSync(path.join(os.tmpdir(), 'parley-capacity-'));
  useTmpDir(tmpDir, false);
  const ends: (() => unknown)[] = [];
  const admin = new pg.Client({ connectionString: opts.pgUrl, connectionTimeoutMillis: 5000 });
  const started = new Date();
  const load0 = loadavg();
  const cpus = os.cpus();
  process.stdout.write(
    `parley capacity model: ${opts.conversations} conversations, ${opts.warmup} s warmup + ${opts.duration} s per window; ${cpus.length} × ` +
      `${cpus[0]?.model.trim()}, Node ${process.version}; load average ${load0}\n`,
  );
  try {
    const natsServer = await startNats((fn) => ends.push(fn));
    const nats = { url: natsServer.url, pid: natsPid(natsServer.port) };
    process.on('exit', () => {
      try {
        process.kill(nats.pid, 'SIGKILL');
      } catch {
        /* stopped */
      }
    });
    await admin.connect();

    const calib = await runPhase(
      {
        name: 'calibration (A writes, B delivers)',
        nodes: 2,
        nodeCores: ['0', '1'],
        restCores: '0,1',
        writerOf: () => 0,
        readerOf: () => 1,
        loads: [
          { label: `${opts.concurrency} connections`, concurrency: opts.concurrency },
          { label: `${opts.lowConcurrency} connections`, concurrency: opts.lowConcurrency },
        ],
      },
      nats,
      tmpDir,
      admin,
    );
    const check1 = await runPhase(
      {
        name: 'check, 1 node',
        nodes: 1,
        nodeCores: ['0'],
        restCores: '1',
        writerOf: () => 0,
        readerOf: () => 0,
        loads: [{ label: `${opts.concurrency} connections`, concurrency: opts.concurrency }],
      },
      nats,
      tmpDir,
      admin,
    );
    const check2 = await runPhase(
      {
        name: 'check, 2 nodes',
        nodes: 2,
        nodeCores: ['0', '1'],
        restCores: '0,1',
        writerOf: (i) => i % 2,
        readerOf: (i) => (i + 1) % 2,
        loads: [{ label: `${opts.concurrency} connections`, concurrency: opts.concurrency }],
      },
      nats,
      tmpDir,
      admin,
    );
    // the nodes together on core 0, the rest on core 1: a node's cost without PostgreSQL on its core
    const check3 = await runPhase(
      {
        name: 'check, 2 nodes on core 0',
        nodes: 2,
        nodeCores: ['0', '0'],
        restCores: '1',
        writerOf: (i) => i % 2,
        readerOf: (i) => (i + 1) % 2,
        loads: [{ label: `${opts.concurrency} connections`, concurrency: opts.concurrency }],
      },
      nats,
      tmpDir,
      admin,
    );
    const load1 = loadavg();

    // ---- per-part costs ----
    const [hi, lo] = calib as [Window, Window];
    const loadUs = (w: Window, part: 'A' | 'B' | 'pg' | 'nats') => {
      const [used, idle] =
        part === 'A' ? [w.cores.nodes[0]!, w.idle.nodes[0]!] : part === 'B' ? [w.cores.nodes[1]!, w.idle.nodes[1]!] : [w.cores[part], w.idle[part]];
      return us(used - idle, w);
    };
    const W = fit({ e: hi.eventsPerStatement, c: loadUs(hi, 'A') }, { e: lo.eventsPerStatement, c: loadUs(lo, 'A') });
    const P = fit({ e: hi.eventsPerStatement, c: loadUs(hi, 'pg') }, { e: lo.eventsPerStatement, c: loadUs(lo, 'pg') });
    const D = loadUs(hi, 'B');
    const Q = loadUs(hi, 'nats');
    const G = us(hi.cores.gen + hi.cores.subs, hi);
    /** fixed cores with the conversations subscribed and no load: all nodes together, PostgreSQL, NATS */
    const fixed = { node: hi.idle.nodes[0]! + hi.idle.nodes[1]!, pg: hi.idle.pg, nats: hi.idle.nats };
    /** events per statement per client connection on a node (group commit), from calibration */
    const batchPerClient = hi.eventsPerStatement / hi.concurrency;
    const cost = (e: number) => ({ node: W.perStatement / e + W.perEvent + D, pg: P.perStatement / e + P.perEvent, nats: Q, drive: G });
    const stmtUs = hi.statementsPerSec > 0 ? 1e6 / hi.statementsPerSec : NaN;

    const out: string[] = [];
    const p = (s = '') => out.push(s);
    p();
    p(`Measured ${started.toISOString().slice(0, 16).replace('T', ' ')} UTC, load average ${load0} at the start, ${load1} at the end; ${COMMAND}`);
    p();
    p('Windows (CPU in cores used during the window; "other" is what the rest of the machine used meanwhile):');
    p();
    p('| window | appends/s | events per statement | statements/s | transactions/s | node CPU | PostgreSQL CPU | NATS CPU | generator + subscribers | other |');
    p('|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|');
    for (const w of [...calib, ...check1, ...check2, ...check3]) p(windowLine(w));
    p();
    p(
      `With no load (${opts.conversations} conversations subscribed, ${IDLE_MS / 1000} s): nodes ${f2(fixed.node)} cores together, PostgreSQL ` +
        `backends ${f2(fixed.pg)}, NATS ${f2(fixed.nats)}; subtracted below.`,
    );
    p();
    p('Per-part costs, CPU per append (calibration: A takes the writes, B delivers them; a statement is one append transaction):');
    p();
    p(`| part | at ${f1(hi.eventsPerStatement)} events/statement | at ${f1(lo.eventsPerStatement)} | per statement | per event |`);
    p('|---|---:|---:|---:|---:|');
    const split = (f: ReturnType<typeof fit>) => (f.fitted ? `${f1(f.perStatement)} µs | ${f1(f.perEvent)} µs` : `— | ${f1(f.perEvent)} µs`);
    p(`| node, write (REST, validation, PostgreSQL client, NATS publish) | ${f1(loadUs(hi, 'A'))} µs | ${f1(loadUs(lo, 'A'))} µs | ${split(W)} |`);
    p(`| node, delivery (NATS receive, WebSocket send) | ${f1(D)} µs | ${f1(loadUs(lo, 'B'))} µs | | |`);
    p(`| PostgreSQL backends | ${f1(loadUs(hi, 'pg'))} µs | ${f1(loadUs(lo, 'pg'))} µs | ${split(P)} |`);
    p(
      `| PostgreSQL background (walwriter, checkpointer, bgwriter; shared with other databases) | ${f1(us(hi.cores.pgBg, hi))} µs | ` +
        `${f1(us(lo.cores.pgBg, lo))} µs | | |`,
    );
    p(`| nats-server, per delivery to one other node | ${f1(Q)} µs | ${f1(loadUs(lo, 'nats'))} µs | | |`);
    p(`| generator + subscribers (the clients) | ${f1(G)} µs | ${f1(us(lo.cores.gen + lo.cores.subs, lo))} µs | | |`);
    p();
    p(
      `PostgreSQL transactions per append: ${f2(hi.xactPerSec / hi.rate)} at ${hi.concurrency} connections, ${f2(lo.xactPerSec / lo.rate)} at ` +
        `${lo.concurrency} (append statements plus reads); the node's one append statement in flight takes ${f2(stmtUs / 1000)} ms at ` +
        `${hi.concurrency} connections; events per statement per connection ${f2(batchPerClient)}.`,
    );

    // ---- prediction, separate machines ----
    const e = Math.max(1, batchPerClient * opts.clientsPerNode);
    const c = cost(e);
    p();
    p(
      `Predicted on separate machines (each node ${opts.nodeCores} core for its event loop, PostgreSQL ${opts.pgCores} cores, NATS ` +
        `${opts.natsCores} cores, the clients elsewhere; ${opts.clientsPerNode} client connections per node, so ${f1(e)} events per statement; per ` +
        `append: node ${f1(c.node)} µs, PostgreSQL ${f1(c.pg)} µs, NATS ${f1(c.nats)} µs; plus the fixed cost above):`,
    );
    p();
    p('| nodes | appends/s | node CPU (each) | PostgreSQL CPU | NATS CPU | statements/s | saturates first |');
    p('|---:|---:|---:|---:|---:|---:|---|');
    for (const n of [1, 2, 4, 8]) {
      const bounds = {
        'the nodes': ((n * opts.nodeCores - fixed.node) * 1e6) / c.node,
        PostgreSQL: ((opts.pgCores - fixed.pg) * 1e6) / c.pg,
        NATS: ((opts.natsCores - fixed.nats) * 1e6) / c.nats,
      };
      const [first, x] = Object.entries(bounds).sort((a, b) => a[1] - b[1])[0]!;
      const util = (fx: number, per: number, cores: number) => pct((fx + (x * per) / 1e6) / cores);
      p(
        `| ${n} | ${f0(x)} | ${util(fixed.node / n, c.node / n, opts.nodeCores)} | ${util(fixed.pg, c.pg, opts.pgCores)} | ` +
          `${util(fixed.nats, c.nats, opts.natsCores)} | ${f0(x / e)} | ${first} |`,
      );
    }

    // ---- the check: this machine, two cores, less what other work took ----
    p();
    p('Check on this machine (2 cores; what a part can have = its core(s) less what other work used during the window, split evenly over the two cores):');
    p();
    p(
      '| window | predicted appends/s | measured | error | limit | from the CPU the parts got: predicted | error | node µs/append predicted ' +
        '/ measured | PostgreSQL µs predicted / measured |',
    );
    p('|---|---:|---:|---:|---|---:|---:|---:|---:|');
    for (const w of [...check1, ...check2, ...check3]) {
      const ew = Math.max(1, batchPerClient * (w.concurrency / w.nodes));
      const cw = cost(ew);
      const free = 1 - w.cores.other / 2;
      const rest = cw.pg + cw.nats + cw.drive;
      const restFixed = fixed.pg + fixed.nats;
      let x: number;
      let limit: string;
      if (w.nodesOnCore0) {
        // the node(s) on core 0; PostgreSQL, NATS and the clients on core 1
        const xNode = ((free - fixed.node) * 1e6) / cw.node;
        const xRest = ((free - restFixed) * 1e6) / rest;
        x = Math.min(xNode, xRest);
        limit = xNode < xRest ? 'core 0 (the nodes)' : 'core 1 (PostgreSQL + NATS + clients)';
      } else {
        const xAll = ((2 * free - fixed.node - restFixed) * 1e6) / (cw.node + rest);
        const xNode = ((w.nodes * free - fixed.node) * 1e6) / cw.node;
        x = Math.min(xAll, xNode);
        limit = xAll < xNode ? 'both cores (all parts)' : 'the nodes';
      }
      const nodeUs = us(w.cores.nodes.reduce((a, b) => a + b, 0) - w.idle.nodes.reduce((a, b) => a + b, 0), w);
      // the CPU the parts (nodes, PostgreSQL, NATS, clients) were given in the window, less the fixed cost, over
      // the calibrated cost per append: checks the costs alone, whatever share of the machine other work left
      const got = w.cores.nodes.reduce((a, b) => a + b, 0) + w.cores.pg + w.cores.nats + w.cores.gen + w.cores.subs - fixed.node - restFixed;
      const xGot = (got * 1e6) / (cw.node + rest);
      const err = (pred: number) => `${w.rate >= pred ? '+' : ''}${((w.rate / pred - 1) * 100).toFixed(0)} %`;
      p(
        `| ${w.label} | ${f0(x)} | ${f0(w.rate)} | ${err(x)} | ${limit} | ${f0(xGot)} | ${err(xGot)} | ${f1(cw.node)} / ${f1(nodeUs)} | ` +
          `${f1(cw.pg)} / ${f1(us(w.cores.pg - w.idle.pg, w))} |`,
      );
    }
    process.stdout.write(`${out.join('\n')}\n`);
    return 0;
  } finally {
    await admin.end().catch(() => {});
    for (const fn of ends.reverse()) await fn();
  }
}

main().then(
  (code) => {
    killAllNow();
    process.exit(code);
  },
  (err) => {
    if (!interrupted) process.stderr.write(`bench-capacity: ${(err as Error)?.stack ?? err}\n`);
    killAllNow();
    process.exit(interrupted ? 130 : 2);
  },
);
