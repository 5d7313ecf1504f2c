/**
 * The runner of scripts/loadtest.ts: starts and stops the processes (daemons, the bare server,
 * generators), creates conversations, subscribes, drives one load run and measures it. What it
 * prints while running is progress; the report is scripts/loadtest/report.ts.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import WebSocket from 'ws';
import { fmtInt, fmtMs, HOST, ROOT, now, sleep } from './common.js';
import type { GenConfig, GenGo, GenResult, GenTarget } from './generator.js';

const GENERATOR = path.join(ROOT, 'scripts/loadtest/generator.ts');
const BODY_TEXT = 'Load test message: please summarise the repository layout and list the entry points.';
const BODY = JSON.stringify({ role: 'user', content: [{ type: 'text', text: BODY_TEXT }], run: false });

/** What one load run needs of the options. */
export interface LoadOptions {
  concurrency: number;
  duration: number;
  warmup: number;
  genProcs: number;
  timeoutMs: number;
}

/** A process serving HTTP on a loopback port. */
export interface Server {
  child: Child;
  port: number;
}

export interface Child {
  name: string;
  proc: ChildProcess;
  tail: string[];
  warnLines: number;
  errorLines: number;
  exited: Promise<number | null>;
}

const children = new Set<ChildProcess>();
let tmpDir: string | null = null;
let keepTmp = false;

/** The run's temp dir: removed when the run ends unless `keep`. */
export function useTmpDir(dir: string, keep: boolean): void {
  tmpDir = dir;
  keepTmp = keep;
}

function startChild(name: string, args: string[], env: NodeJS.ProcessEnv, ipc = false): Child {
  const proc = spawn(process.execPath, args, {
    cwd: ROOT,
    env,
    stdio: ipc ? ['ignore', 'inherit', 'inherit', 'ipc'] : ['ignore', 'pipe', 'pipe'],
    serialization: ipc ? 'advanced' : 'json',
  });
  children.add(proc);
  const child: Child = {
    name,
    proc,
    tail: [],
    warnLines: 0,
    errorLines: 0,
    exited: new Promise((resolve) => {
      proc.on('exit', (code, signal) => {
        children.delete(proc);
        resolve(code ?? (signal ? 128 : null));
      });
      proc.on('error', () => {
        children.delete(proc);
        resolve(null);
      });
    }),
  };
  const onLine = (line: string) => {
    if (!line) return;
    child.tail.push(line);
    if (child.tail.length > 40) child.tail.shift();
    const lvl = /"level":(\d+)/.exec(line);
    if (lvl) {
      if (Number(lvl[1]) === 40) child.warnLines += 1;
      else if (Number(lvl[1]) >= 50) child.errorLines += 1;
    }
  };
  for (const stream of [proc.stdout, proc.stderr]) {
    if (!stream) continue;
    let rest = '';
    stream.setEncoding('utf8');
    stream.on('data', (d: string) => {
      const lines = (rest + d).split('\n');
      rest = lines.pop() ?? '';
      lines.forEach(onLine);
    });
  }
  return child;
}

export async function stopChild(child: Child, graceMs: number): Promise<void> {
  if (child.proc.exitCode !== null || child.proc.signalCode !== null) return;
  child.proc.kill('SIGTERM');
  const timer = setTimeout(() => child.proc.kill('SIGKILL'), graceMs);
  await child.exited;
  clearTimeout(timer);
}

export function killAllNow(): void {
  for (const p of children) {
    try {
      p.kill('SIGKILL');
    } catch {
      /* already gone */
    }
  }
  children.clear();
  if (tmpDir && !keepTmp) {
    try {
      fs.rmSync(tmpDir, { recursive: true, force: true });
    } catch {
      /* best effort */
    }
    tmpDir = null;
  }
}

export let interrupted = false;

export function installCleanup(): void {
  process.on('exit', killAllNow);
  const onSignal = (sig: string) => {
    if (interrupted) return;
    interrupted = true;
    process.stderr.write(`\nloadtest: ${sig}: stopping children\n`);
    for (const p of children) p.kill('SIGTERM');
    setTimeout(() => process.exit(130), 1500).unref();
  };
  process.on('SIGINT', () => onSignal('SIGINT'));
  process.on('SIGTERM', () => onSignal('SIGTERM'));
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.once('error', reject);
    srv.listen(0, HOST, () => {
      const port = (srv.address() as net.AddressInfo).port;
      srv.close(() => resolve(port));
    });
  });
}

function childFailure(child: Child, what: string): Error {
  return new Error(`${child.name} ${what}\n--- last output of ${child.name} ---\n${child.tail.join('\n')}`);
}

/**
 * The daemon as `npm start` runs it: the node arguments of package.json's start script (its flags and
 * scripts/start.mjs, which runs the build, rebuilding it first when a source is newer).
 */
export const NPM_START: string[] = (() => {
  const start = (JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { scripts: { start: string } }).scripts.start.split(/\s+/);
  if (start[0] !== 'node') throw new Error(`package.json's start script does not run node: ${start.join(' ')}`);
  return start.slice(1);
})();

/** Starts a daemon: `args` are node's (flags, then the entry file; a .ts entry runs through tsx). */
export async function startDaemon(
  name: string,
  args: string[],
  dataDir: string,
  apiKey: string | null,
  profileDir: string | null,
  extraEnv: Record<string, string> = {},
): Promise<Server> {
  const port = await freePort();
  const env: NodeJS.ProcessEnv = { ...process.env, PORT: String(port), HOST, DATA_DIR: dataDir, LOG_LEVEL: 'warn' };
  for (const k of [
    'SESSION_API_KEY',
    'SESSION_API_KEYS',
    'WORKSPACE_ROOT',
    'LLM_MODEL',
    'LLM_API_KEY',
    'LLM_BASE_URL',
    'NODE_OPTIONS',
    'DATABASE_URL',
    'NATS_URL',
    'NATS_PREFIX',
    'NODE_ID',
    'SECRET_KEY',
  ])
    delete env[k];
  Object.assign(env, extraEnv);
  if (apiKey) env.SESSION_API_KEY = apiKey;
  const prof = profileDir ? ['--cpu-prof', `--cpu-prof-dir=${profileDir}`] : [];
  const entry = args.at(-1)!;
  const child = startChild(name, [...args.slice(0, -1), ...prof, ...(entry.endsWith('.ts') ? ['--import', 'tsx'] : []), entry], env);
  const deadline = now() + 30_000;
  for (;;) {
    if (child.proc.exitCode !== null || child.proc.signalCode !== null) throw childFailure(child, `exited during start (code ${child.proc.exitCode})`);
    if (now() > deadline) throw childFailure(child, 'did not answer GET /alive within 30 s');
    try {
      const r = await fetch(`http://${HOST}:${port}/alive`, { signal: AbortSignal.timeout(1000) });
      if (r.status === 200) return { child, port };
    } catch {
      /* not up yet */
    }
    await sleep(100);
  }
}

export async function startBare(): Promise<Server> {
  const env: NodeJS.ProcessEnv = { ...process.env, PORT: '0' };
  delete env.NODE_OPTIONS;
  const child = startChild('bare-server', ['--import', 'tsx', 'scripts/bare-server.ts'], env);
  const deadline = now() + 30_000;
  for (;;) {
    const line = child.tail.find((l) => l.includes('"port"'));
    const m = line ? /"port":(\d+)/.exec(line) : null;
    if (m) return { child, port: Number(m[1]) };
    if (child.proc.exitCode !== null || child.proc.signalCode !== null) throw childFailure(child, 'exited during start');
    if (now() > deadline) throw childFailure(child, 'did not print its port within 30 s');
    await sleep(50);
  }
}

// ---- REST helpers and WebSocket subscribers ----

async function api(port: number, headers: Record<string, string>, method: string, p: string, body?: unknown): Promise<unknown> {
  const r = await fetch(`http://${HOST}:${port}${p}`, {
    method,
    headers: { ...headers, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
    body: body !== undefined ? JSON.stringify(body) : undefined,
    signal: AbortSignal.timeout(10_000),
  });
  const text = await r.text();
  if (r.status !== 200) throw new Error(`${method} ${p}: HTTP ${r.status} ${text.slice(0, 300)}`);
  return JSON.parse(text);
}

async function mapLimited<T, R>(items: T[], limit: number, fn: (x: T, i: number) => Promise<R>): Promise<R[]> {
  const out = new Array<R>(items.length);
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(limit, items.length) }, async () => {
      while (next < items.length) {
        const i = next++;
        out[i] = await fn(items[i]!, i);
      }
    }),
  );
  return out;
}

const countPath = (id: string) => `/api/conversations/${id}/events/count?kind=MessageEvent&source=user`;

export async function countAll(port: number, headers: Record<string, string>, ids: string[]): Promise<number[]> {
  return mapLimited(ids, 8, async (id) => {
    const v = await api(port, headers, 'GET', countPath(id));
    if (typeof v !== 'number') throw new Error(`GET ${countPath(id)} did not return a number: ${JSON.stringify(v).slice(0, 200)}`);
    return v;
  });
}

export interface Subscriber {
  id: string;
  ws: WebSocket;
  lastSeq: number;
  messages: number;
  frames: number;
  orderViolations: number;
  closedEarly: string | null;
  ready: Promise<void>;
}

export function subscribe(port: number, headers: Record<string, string>, id: string): Subscriber {
  const ws = new WebSocket(`ws://${HOST}:${port}/sockets/events/${id}`, { headers, perMessageDeflate: false });
  let resolveReady!: () => void;
  let rejectReady!: (e: Error) => void;
  const sub: Subscriber = {
    id,
    ws,
    lastSeq: -1,
    messages: 0,
    frames: 0,
    orderViolations: 0,
    closedEarly: null,
    ready: new Promise<void>((res, rej) => {
      resolveReady = res;
      rejectReady = rej;
    }),
  };
  let closing = false;
  ws.on('message', (data, isBinary) => {
    sub.frames += 1;
    let ev: { kind?: string; key?: string; seq?: number; source?: string; value?: { last_seq?: number } };
    try {
      ev = JSON.parse(isBinary ? Buffer.from(data as Buffer).toString('utf8') : String(data));
    } catch {
      sub.orderViolations += 1;
      return;
    }
    if (sub.frames === 1) {
      if (ev.kind !== 'ConversationStateUpdateEvent' || ev.key !== 'full_state' || typeof ev.value?.last_seq !== 'number') {
        rejectReady(new Error(`subscriber ${id}: first frame is not a full_state snapshot: ${JSON.stringify(ev).slice(0, 200)}`));
        return;
      }
      sub.lastSeq = ev.value.last_seq;
      resolveReady();
      return;
    }
    if (typeof ev.seq === 'number') {
      if (ev.seq !== sub.lastSeq + 1) sub.orderViolations += 1;
      sub.lastSeq = ev.seq;
    }
    if (ev.kind === 'MessageEvent' && ev.source === 'user') sub.messages += 1;
  });
  ws.on('error', (err) => rejectReady(new Error(`subscriber ${id}: ${err.message}`)));
  ws.on('close', (code, reason) => {
    if (!closing) sub.closedEarly = `${code} ${reason.toString()}`;
    rejectReady(new Error(`subscriber ${id}: closed ${code} ${reason.toString()}`));
  });
  (sub as Subscriber & { shut: () => void }).shut = () => {
    closing = true;
    ws.close(1000);
  };
  return sub;
}

export const closeSubscriber = (s: Subscriber) => (s as Subscriber & { shut: () => void }).shut();

/** A database of the setup's own on the --pg-url server; `drop` removes it. */
export async function createDatabase(adminUrl: string): Promise<{ url: string; drop(): Promise<void> }> {
  const name = `parley_loadtest_${crypto.randomBytes(6).toString('hex')}`;
  const admin = async (sql: string) => {
    const c = new pg.Client({ connectionString: adminUrl, connectionTimeoutMillis: 5000 });
    try {
      await c.connect();
    } catch (err) {
      throw new Error(`PostgreSQL is unreachable at ${adminUrl.replace(/\/\/[^@]*@/, '//')}: ${(err as Error).message} (--pg-url)`);
    }
    try {
      await c.query(sql);
    } finally {
      await c.end().catch(() => {});
    }
  };
  await admin(`CREATE DATABASE ${name}`);
  const url = new URL(adminUrl);
  url.pathname = `/${name}`;
  return { url: url.toString(), drop: () => admin(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`) };
}

/** Committed events and store commits so far, summed over the nodes (from GET /metrics). */
export async function storeCommits(nodes: Server[], headers: Record<string, string>): Promise<number> {
  let commits = 0;
  for (const n of nodes) {
    const r = await fetch(`http://127.0.0.1:${n.port}/metrics`, { headers, signal: AbortSignal.timeout(10_000) });
    const m = /^parley_store_append_duration_seconds_count(?:\{[^}]*\})? (\d+)/m.exec(await r.text());
    commits += m ? Number(m[1]) : NaN;
  }
  return commits;
}

/**
 * Creates `n` conversations, conversation i through the node on `writerPort(i)`, and waits (up to 15 s)
 * for their workspace preparation (background, per conversation) to finish.
 */
export async function createConversations(n: number, writerPort: (i: number) => number, headers: Record<string, string>): Promise<string[]> {
  const ids = await mapLimited(Array.from({ length: n }), 8, async (_x, i) => {
    const r = (await api(writerPort(i), headers, 'POST', '/api/conversations', {})) as { conversation_id?: string };
    if (!r.conversation_id) throw new Error(`POST /api/conversations: no conversation_id in ${JSON.stringify(r)}`);
    return r.conversation_id;
  });
  // let workspace preparation (background, per conversation) finish before measuring anything
  const until = now() + 15_000;
  const unsettled = await mapLimited(ids, 8, async (id, i) => {
    for (;;) {
      const c = (await api(writerPort(i), headers, 'GET', `/api/conversations/${id}`)) as { setup?: { phase?: string } | null };
      const phase = c.setup?.phase;
      if (phase !== 'pending' && phase !== 'preparing') return null;
      if (now() > until) return `${id}: ${phase}`;
      await sleep(100);
    }
  });
  const stuck = unsettled.filter(Boolean);
  if (stuck.length) process.stdout.write(`warning: ${stuck.length} conversation(s) still preparing after 15 s, measuring anyway (${stuck[0]})\n`);
  return ids;
}

// ---- one load run ----

interface CpuSample {
  t: number;
  proc: Map<number, number>; // pid → utime+stime ticks
  sysTotal: number;
  sysIdle: number;
  self: NodeJS.CpuUsage;
}

export const CLK_TCK = 100; // Linux USER_HZ

export function readProcTicks(pid: number): number {
  try {
    const s = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    const f = s.slice(s.lastIndexOf(')') + 2).split(' ');
    return Number(f[11]) + Number(f[12]);
  } catch {
    return NaN;
  }
}

function sampleCpu(pids: number[]): CpuSample {
  const proc = new Map<number, number>();
  for (const p of pids) proc.set(p, readProcTicks(p));
  let sysTotal = NaN;
  let sysIdle = NaN;
  try {
    const line = fs.readFileSync('/proc/stat', 'utf8').split('\n')[0]!;
    const v = line.trim().split(/\s+/).slice(1, 9).map(Number);
    sysTotal = v.reduce((a, b) => a + b, 0);
    sysIdle = v[3]! + v[4]!;
  } catch {
    /* not Linux */
  }
  return { t: now(), proc, sysTotal, sysIdle, self: process.cpuUsage() };
}

export interface RunStats {
  label: string;
  rps: number;
  p50: number;
  p95: number;
  p99: number;
  max: number;
  measured: number;
  measuredOk: number;
  errors: number;
  errorDetail: string;
  unknownOutcome: number;
  okPerConv: number[];
  totalOk: number;
  /** CPU cores used during the measured window. */
  serverCores: number;
  genCores: number;
  genElu: number;
  orchestratorCores: number;
  machineCores: number;
  otherCores: number;
  connected: number;
  /** The measured window, µs on the monotonic clock (for the profile). */
  windowUs: [number, number];
}

/** Called when the measured window starts and ends (right after the runner's own CPU samples). */
export interface LoadWindowHooks {
  start?: () => void;
  end?: () => void;
}

/**
 * Drives the load for warmup + duration over `targets` (one per node) from `opts.genProcs`
 * generator processes; `servers` are the processes whose CPU is measured.
 */
export async function runLoad(
  label: string,
  servers: Server[],
  targets: GenTarget[],
  opts: LoadOptions,
  headers: Record<string, string>,
  window: LoadWindowHooks = {},
): Promise<RunStats> {
  const conversations = targets.reduce((n, t) => n + t.paths.length, 0);
  const gens: Child[] = [];
  const results: Promise<GenResult>[] = [];
  const readies: Promise<number>[] = [];
  for (let k = 0; k < opts.genProcs; k++) {
    const env: NodeJS.ProcessEnv = { ...process.env };
    delete env.NODE_OPTIONS;
    const gen = startChild(`generator-${k}`, ['--import', 'tsx', GENERATOR], env, true);
    gens.push(gen);
    const connections = Math.floor(opts.concurrency / opts.genProcs) + (k < opts.concurrency % opts.genProcs ? 1 : 0);
    const cfg: GenConfig = { targets, conversations, body: BODY, headers, connections, index: k, stride: opts.genProcs, timeoutMs: opts.timeoutMs };
    readies.push(
      new Promise((resolve, reject) => {
        gen.proc.once('message', (m: { type: string; connected: number }) =>
          m.type === 'ready' ? resolve(m.connected) : reject(new Error('generator: unexpected message')),
        );
        gen.exited.then((code) => reject(new Error(`generator-${k} exited early (code ${code})`)));
      }),
    );
    results.push(
      new Promise((resolve, reject) => {
        gen.proc.on('message', (m: { type: string; result?: GenResult }) => {
          if (m.type === 'result') resolve(m.result!);
        });
        gen.exited.then((code) => reject(new Error(`generator-${k} exited without a result (code ${code})`)));
      }),
    );
    gen.proc.send({ type: 'config', cfg });
  }
  for (const r of results) r.catch(() => {}); // observed below
  const connected = (await withDeadline(Promise.all(readies), 30_000, 'generators did not connect')).reduce((a, b) => a + b, 0);
  if (connected === 0) throw new Error(`${label}: no connection could be opened to ${targets.map((t) => `:${t.port}`).join(', ')}`);

  const startAt = now() + 100;
  const warmupEnd = startAt + opts.warmup * 1000;
  const endAt = warmupEnd + opts.duration * 1000;
  for (const g of gens) g.proc.send({ type: 'go', go: { startAt, warmupEnd, endAt } satisfies GenGo });
  const pids = servers.map((s) => s.child.proc.pid!);
  let s0: CpuSample | null = null;
  let s1: CpuSample | null = null;
  setTimeout(
    () => {
      s0 = sampleCpu(pids);
      window.start?.();
    },
    Math.max(0, warmupEnd - now()),
  );
  setTimeout(
    () => {
      s1 = sampleCpu(pids);
      window.end?.();
    },
    Math.max(0, endAt - now()),
  );
  process.stdout.write(`  ${label}: ${connected}/${opts.concurrency} connections, ${opts.warmup} s warmup + ${opts.duration} s measured ...`);
  const all = await withDeadline(Promise.all(results), endAt - now() + opts.timeoutMs + 20_000, 'generators did not report');
  await Promise.all(gens.map((g) => withDeadline(g.exited, 5000, 'generator did not exit').catch(() => g.proc.kill('SIGKILL'))));
  while (!s1) await sleep(10);

  // merge
  const okPerConv = new Array<number>(conversations).fill(0);
  const statuses: Record<string, number> = {};
  let measured = 0;
  let measuredOk = 0;
  let connErrors = 0;
  let connectErrors = 0;
  let timeouts = 0;
  let protocolErrors = 0;
  let unknownOutcome = 0;
  let latN = 0;
  let genCpuMs = 0;
  let genElu = 0;
  let windowMs = 0;
  for (const r of all) {
    for (const [i, n] of r.okPerConv.entries()) okPerConv[i]! += n;
    for (const [s, n] of Object.entries(r.statuses)) statuses[s] = (statuses[s] ?? 0) + n;
    measured += r.measured;
    measuredOk += r.measuredOk;
    connErrors += r.connErrors;
    connectErrors += r.connectErrors;
    timeouts += r.timeouts;
    protocolErrors += r.protocolErrors;
    unknownOutcome += r.unknownOutcome;
    latN += r.latencies.length;
    genCpuMs += r.cpuMs;
    genElu = Math.max(genElu, r.elu);
    windowMs = Math.max(windowMs, r.windowMs);
  }
  const lat = new Float64Array(latN);
  let off = 0;
  for (const r of all) {
    lat.set(r.latencies, off);
    off += r.latencies.length;
  }
  lat.sort();
  const pct = (p: number) => (lat.length ? lat[Math.min(lat.length - 1, Math.max(0, Math.ceil((p / 100) * lat.length) - 1))]! : NaN);
  const non200 = Object.values(statuses).reduce((a, b) => a + b, 0);
  const errors = non200 + connErrors + connectErrors + timeouts + protocolErrors;
  const detail = [
    ...Object.entries(statuses).map(([s, n]) => `HTTP ${s}: ${n}`),
    connectErrors ? `connect failures: ${connectErrors}` : '',
    connErrors ? `connections lost mid-request: ${connErrors}` : '',
    timeouts ? `timeouts: ${timeouts}` : '',
    protocolErrors ? `protocol errors: ${protocolErrors}` : '',
  ].filter(Boolean);

  const a = s0! as CpuSample;
  const b = s1 as CpuSample;
  const secs = (b.t - a.t) / 1000;
  const serverCores = pids.reduce((sum, pid) => sum + (b.proc.get(pid)! - a.proc.get(pid)!) / CLK_TCK / secs, 0);
  const genCores = genCpuMs / windowMs;
  const orchestratorCores = (b.self.user + b.self.system - a.self.user - a.self.system) / 1e6 / secs;
  const ncpu = os.cpus().length;
  const machineCores = ((b.sysTotal - a.sysTotal - (b.sysIdle - a.sysIdle)) / (b.sysTotal - a.sysTotal)) * ncpu;
  const stats: RunStats = {
    label,
    rps: measured / (opts.duration || 1),
    p50: pct(50),
    p95: pct(95),
    p99: pct(99),
    max: lat.length ? lat[lat.length - 1]! : NaN,
    measured,
    measuredOk,
    errors,
    errorDetail: detail.join(', ') || 'none',
    unknownOutcome,
    okPerConv,
    totalOk: okPerConv.reduce((x, y) => x + y, 0),
    serverCores,
    genCores,
    genElu,
    orchestratorCores,
    machineCores,
    otherCores: Math.max(0, machineCores - serverCores - genCores - orchestratorCores),
    connected,
    windowUs: [warmupEnd * 1000, endAt * 1000],
  };
  process.stdout.write(` ${fmtInt(stats.rps)} req/s, p50 ${fmtMs(stats.p50)} ms, p99 ${fmtMs(stats.p99)} ms, ${stats.errors} errors\n`);
  return stats;
}

export async function withDeadline<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([p, new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`${what} within ${Math.round(ms)} ms`)), ms)))]);
  } finally {
    clearTimeout(timer);
  }
}
