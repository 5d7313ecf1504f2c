/**
 * Load test of the hot path, `POST /api/conversations/{id}/events` (ARCHITECTURE.md, "The hot
 * path"), against its physical limit.
 *
 *   npm run loadtest -- [--conversations 50] [--concurrency 64] [--duration 10] [--warmup 2]
 *                       [--subscribers N|all] [--gen-procs 1] [--auth] [--profile] [--keep-data]
 *
 * Every option can also come from the environment: LOADTEST_CONVERSATIONS, LOADTEST_CONCURRENCY,
 * LOADTEST_DURATION, LOADTEST_WARMUP, LOADTEST_SUBSCRIBERS, LOADTEST_GEN_PROCS, LOADTEST_AUTH=1,
 * LOADTEST_PROFILE=1, LOADTEST_KEEP_DATA=1, LOADTEST_TIMEOUT_MS, LOADTEST_DAEMON_ENTRY (flags win).
 *
 * What it does, all on 127.0.0.1:
 *  1. starts two child processes: the real daemon (`node --import tsx bridge/main.ts`, temp
 *     DATA_DIR, LOG_LEVEL=warn) and `scripts/bare-server.ts` (one bare uWS route that reads the
 *     body, parses the JSON and answers {"success":true}: the physical limit);
 *  2. creates N conversations on the daemon and opens a WebSocket subscriber on S of them;
 *  3. drives the hot path round-robin over the N conversations from a separate load-generator
 *     process (its own keep-alive HTTP/1.1 client on `net` sockets: C connections, one request in
 *     flight per connection, no pipelining) for warmup + T seconds, then the identical load
 *     against the bare server;
 *  4. prints req/s, p50/p95/p99 latency, errors, CPU used by each process during the measured
 *     window, and the real/bare ratio;
 *  5. verifies every 200 was committed (`GET .../events/count?kind=MessageEvent&source=user`) and
 *     published (MessageEvents received by the subscribers, seq in order and gap-free) and exits 1
 *     when anything differs.
 *
 * `--profile` runs the daemon under `--cpu-prof` and prints where its CPU time went during the
 * measured window (self and inclusive time by function, self time by module).
 *
 * Bounded: every phase has a deadline; children are killed on exit, on SIGINT/SIGTERM and on error.
 * Exit codes: 0 ok, 1 verification failed, 2 setup or run failure, 130 interrupted.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import WebSocket from 'ws';

const HOST = '127.0.0.1';
const SELF = fileURLToPath(import.meta.url);
const ROOT = path.resolve(path.dirname(SELF), '..');
const now = (): number => Number(process.hrtime.bigint()) / 1e6; // CLOCK_MONOTONIC ms, shared by all processes
const BODY_TEXT = 'Load test message: please summarise the repository layout and list the entry points.';
const BODY = JSON.stringify({ role: 'user', content: [{ type: 'text', text: BODY_TEXT }], run: false });

// ================================================================================================
// Options
// ================================================================================================

interface Options {
  conversations: number;
  concurrency: number;
  duration: number;
  warmup: number;
  subscribers: number;
  genProcs: number;
  timeoutMs: number;
  auth: boolean;
  profile: boolean;
  keepData: boolean;
  /** The daemon's entry file (default bridge/main.ts): lets an experiment run a patched entry. */
  daemonEntry: string;
}

const USAGE = `usage: npm run loadtest -- [options]
  -n, --conversations N   conversations to spread the load over (default 50)
  -c, --concurrency C     concurrent keep-alive connections (default 64)
  -d, --duration T        measured seconds (default 10)
  -w, --warmup S          warmup seconds before measuring (default 2)
      --subscribers S     WebSocket subscribers, one per conversation: a number or "all" (default all)
      --gen-procs K       load-generator processes sharing the C connections (default 1)
      --timeout MS        per-request timeout (default 10000)
      --auth              configure SESSION_API_KEY on the daemon and send it (auth on the hot path)
      --profile           run the daemon under --cpu-prof and print where its time went
      --keep-data         keep the temp DATA_DIR (and the profile)
      --daemon-entry F    the daemon's entry file (default bridge/main.ts), for experiments
Environment: LOADTEST_CONVERSATIONS, LOADTEST_CONCURRENCY, LOADTEST_DURATION, LOADTEST_WARMUP,
LOADTEST_SUBSCRIBERS, LOADTEST_GEN_PROCS, LOADTEST_TIMEOUT_MS, LOADTEST_AUTH=1, LOADTEST_PROFILE=1,
LOADTEST_KEEP_DATA=1, LOADTEST_DAEMON_ENTRY (flags win).`;

const KNOWN_OPTIONS = new Set(['conversations', 'concurrency', 'duration', 'warmup', 'subscribers', 'gen-procs', 'timeout', 'auth', 'profile', 'keep-data', 'daemon-entry', 'help']);

function parseOptions(argv: string[]): Options {
  const flags = new Map<string, string>();
  const aliases: Record<string, string> = { n: 'conversations', c: 'concurrency', d: 'duration', w: 'warmup', h: 'help' };
  const booleans = new Set(['auth', 'profile', 'keep-data', 'help']);
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    const m = /^--?([a-z-]+)(?:=(.*))?$/i.exec(a);
    if (!m) throw new Error(`unexpected argument "${a}"`);
    const name = aliases[m[1]!] ?? m[1]!;
    if (!KNOWN_OPTIONS.has(name)) throw new Error(`unknown option ${a}\n${USAGE}`);
    if (m[2] !== undefined) flags.set(name, m[2]);
    else if (booleans.has(name)) flags.set(name, 'true');
    else {
      const v = argv[++i];
      if (v === undefined) throw new Error(`--${name} needs a value`);
      flags.set(name, v);
    }
  }
  if (flags.has('help')) {
    process.stdout.write(`${USAGE}\n`);
    process.exit(0);
  }
  const env = (name: string) => {
    const v = process.env[`LOADTEST_${name}`];
    return v === undefined || v === '' ? undefined : v;
  };
  const int = (flag: string, envName: string, def: number, min: number, max: number): number => {
    const raw = flags.get(flag) ?? env(envName);
    if (raw === undefined) return def;
    if (!/^\d+$/.test(raw) || Number(raw) < min || Number(raw) > max) throw new Error(`--${flag} must be a whole number between ${min} and ${max} (got "${raw}")`);
    return Number(raw);
  };
  const bool = (flag: string, envName: string) => {
    const raw = flags.get(flag) ?? env(envName);
    return raw === 'true' || raw === '1';
  };
  const conversations = int('conversations', 'CONVERSATIONS', 50, 1, 10_000);
  const subsRaw = flags.get('subscribers') ?? env('SUBSCRIBERS') ?? 'all';
  let subscribers: number;
  if (subsRaw === 'all') subscribers = conversations;
  else if (/^\d+$/.test(subsRaw)) subscribers = Math.min(Number(subsRaw), conversations);
  else throw new Error(`--subscribers must be a number or "all" (got "${subsRaw}")`);
  const concurrency = int('concurrency', 'CONCURRENCY', 64, 1, 4096);
  const genProcs = int('gen-procs', 'GEN_PROCS', 1, 1, 16);
  if (genProcs > concurrency) throw new Error('--gen-procs cannot exceed --concurrency');
  return {
    conversations,
    concurrency,
    duration: int('duration', 'DURATION', 10, 1, 600),
    warmup: int('warmup', 'WARMUP', 2, 0, 120),
    subscribers,
    genProcs,
    timeoutMs: int('timeout', 'TIMEOUT_MS', 10_000, 100, 120_000),
    auth: bool('auth', 'AUTH'),
    profile: bool('profile', 'PROFILE'),
    keepData: bool('keep-data', 'KEEP_DATA'),
    daemonEntry: flags.get('daemon-entry') ?? env('DAEMON_ENTRY') ?? 'bridge/main.ts',
  };
}

// ================================================================================================
// Load generator (runs in its own process: `loadtest.ts --generator`, driven over IPC)
// ================================================================================================

interface GenConfig {
  port: number;
  paths: string[];
  body: string;
  headers: Record<string, string>;
  connections: number;
  /** Round-robin: this process sends to conversations index, index + stride, ... */
  index: number;
  stride: number;
  timeoutMs: number;
}

interface GenGo {
  startAt: number;
  warmupEnd: number;
  endAt: number;
}

interface GenResult {
  okPerConv: number[];
  /** Non-200 statuses, all phases. */
  statuses: Record<string, number>;
  connectErrors: number;
  connErrors: number;
  timeouts: number;
  protocolErrors: number;
  /** Requests whose outcome is unknown (connection lost or timed out while in flight). */
  unknownOutcome: number;
  reconnects: number;
  serverCloses: number;
  completed: number;
  measured: number;
  measuredOk: number;
  latencies: Float64Array;
  windowMs: number;
  cpuMs: number;
  elu: number;
}

const CRLFCRLF = Buffer.from('\r\n\r\n');
const HTTP11 = Buffer.from('HTTP/1.1 ');
const CONTENT_LENGTH = /\r\ncontent-length: *(\d+)/i;

class Generator {
  readonly reqs: Buffer[];
  readonly okPerConv: Uint32Array;
  readonly statuses: Record<string, number> = {};
  connectErrors = 0;
  connErrors = 0;
  timeouts = 0;
  protocolErrors = 0;
  unknownOutcome = 0;
  reconnects = 0;
  serverCloses = 0;
  completed = 0;
  measured = 0;
  measuredOk = 0;
  lat = new Float64Array(1 << 16);
  latN = 0;
  warmupEnd = Infinity;
  endAt = Infinity;
  started = false;
  private rr: number;
  private conns: Conn[] = [];
  private live = 0;
  private finished!: () => void;
  readonly allDone = new Promise<void>((r) => (this.finished = r));

  constructor(readonly cfg: GenConfig) {
    const extra = Object.entries(cfg.headers).map(([k, v]) => `${k}: ${v}\r\n`).join('');
    const len = Buffer.byteLength(cfg.body);
    this.reqs = cfg.paths.map((p) =>
      Buffer.from(`POST ${p} HTTP/1.1\r\nhost: ${HOST}:${cfg.port}\r\ncontent-type: application/json\r\ncontent-length: ${len}\r\n${extra}\r\n${cfg.body}`),
    );
    this.okPerConv = new Uint32Array(cfg.paths.length);
    this.rr = cfg.index;
  }

  nextConv(): number {
    const c = this.rr % this.reqs.length;
    this.rr += this.cfg.stride;
    return c;
  }

  async connectAll(): Promise<number> {
    for (let i = 0; i < this.cfg.connections; i++) this.conns.push(new Conn(this));
    const results = await Promise.allSettled(this.conns.map((c) => c.open()));
    return results.filter((r) => r.status === 'fulfilled').length;
  }

  start(go: GenGo): void {
    this.warmupEnd = go.warmupEnd;
    this.endAt = go.endAt;
    this.started = true;
    this.live = this.conns.filter((c) => !c.isDone).length;
    if (this.live === 0) this.finished();
    for (const c of this.conns) c.fire();
    const watchdog = setInterval(() => {
      const t = now();
      for (const c of this.conns) c.checkTimeout(t);
      // hard stop: nothing outlives the end of the run by more than one request timeout
      if (t > this.endAt + this.cfg.timeoutMs + 1000) {
        for (const c of this.conns) c.abandon();
      }
    }, 200);
    this.allDone.then(() => clearInterval(watchdog));
  }

  record(conv: number, status: number, t0: number, t1: number): void {
    this.completed += 1;
    if (status === 200) this.okPerConv[conv]! += 1;
    else this.statuses[status] = (this.statuses[status] ?? 0) + 1;
    if (t1 >= this.warmupEnd && t1 < this.endAt) {
      this.measured += 1;
      if (status === 200) this.measuredOk += 1;
      if (this.latN === this.lat.length) {
        const bigger = new Float64Array(this.lat.length * 2);
        bigger.set(this.lat);
        this.lat = bigger;
      }
      this.lat[this.latN++] = t1 - t0;
    }
  }

  connDone(): void {
    if (!this.started) return; // gave up before the start: never counted in `live`
    this.live -= 1;
    if (this.live === 0) {
      for (const c of this.conns) c.close();
      this.finished();
    }
  }
}

class Conn {
  private sock: net.Socket | null = null;
  private inflight = false;
  private done = false;
  private t0 = 0;
  private conv = 0;
  private pending: Buffer | null = null;
  private total = -1;
  private status = 0;

  constructor(private readonly g: Generator) {}

  get isDone(): boolean {
    return this.done;
  }

  open(): Promise<void> {
    return new Promise((resolve, reject) => {
      const s = net.createConnection({ host: HOST, port: this.g.cfg.port, noDelay: true });
      let connected = false;
      this.sock = s;
      s.on('connect', () => {
        connected = true;
        resolve();
      });
      s.on('data', (chunk: Buffer) => this.onData(s, chunk));
      s.on('error', (err) => {
        if (!connected) {
          this.g.connectErrors += 1;
          reject(err);
        }
      });
      s.on('close', () => this.onClose(s));
    });
  }

  fire(): void {
    if (this.done || !this.g.started) return;
    const t = now();
    if (t >= this.g.endAt || !this.sock || this.sock.destroyed) return this.finish();
    this.conv = this.g.nextConv();
    this.inflight = true;
    this.t0 = t;
    this.pending = null;
    this.total = -1;
    this.sock.write(this.g.reqs[this.conv]!);
  }

  private onData(s: net.Socket, chunk: Buffer): void {
    if (s !== this.sock) return;
    if (!this.inflight) return this.protocolError(s);
    const buf = this.pending ? Buffer.concat([this.pending, chunk]) : chunk;
    if (this.total < 0) {
      const he = buf.indexOf(CRLFCRLF);
      if (he < 0) {
        if (buf.length > 65536) return this.protocolError(s);
        this.pending = buf;
        return;
      }
      if (buf.compare(HTTP11, 0, HTTP11.length, 0, HTTP11.length) !== 0) return this.protocolError(s);
      this.status = (buf[9]! - 48) * 100 + (buf[10]! - 48) * 10 + (buf[11]! - 48);
      const m = CONTENT_LENGTH.exec(buf.toString('latin1', 0, he));
      if (!m) return this.protocolError(s); // uWS always sends Content-Length for res.end()
      this.total = he + 4 + Number(m[1]);
    }
    if (buf.length < this.total) {
      this.pending = buf;
      return;
    }
    if (buf.length > this.total) return this.protocolError(s); // bytes nobody asked for
    this.pending = null;
    this.inflight = false;
    this.g.record(this.conv, this.status, this.t0, now());
    this.fire();
  }

  private protocolError(s: net.Socket): void {
    this.g.protocolErrors += 1;
    if (this.inflight) {
      this.inflight = false;
      this.g.unknownOutcome += 1;
    }
    s.destroy();
  }

  checkTimeout(t: number): void {
    if (this.inflight && t - this.t0 > this.g.cfg.timeoutMs) {
      this.inflight = false;
      this.g.timeouts += 1;
      this.g.unknownOutcome += 1;
      this.sock?.destroy();
    }
  }

  private onClose(s: net.Socket): void {
    if (s !== this.sock) return;
    if (this.inflight) {
      this.inflight = false;
      this.g.connErrors += 1;
      this.g.unknownOutcome += 1;
    } else if (!this.done && s.bytesRead > 0) {
      this.g.serverCloses += 1;
    }
    if (this.done) return;
    if (now() >= this.g.endAt || this.g.reconnects >= 10 * this.g.cfg.connections) return this.finish();
    this.g.reconnects += 1;
    setTimeout(() => {
      if (this.done) return;
      this.open().then(
        () => this.fire(),
        () => {
          /* its close event retries or finishes */
        },
      );
    }, 25);
  }

  abandon(): void {
    if (this.done) return;
    if (this.inflight) {
      this.inflight = false;
      this.g.timeouts += 1;
      this.g.unknownOutcome += 1;
    }
    this.finish();
  }

  private finish(): void {
    if (this.done) return;
    this.done = true;
    this.g.connDone();
  }

  close(): void {
    this.sock?.destroy();
  }
}

async function generatorMain(): Promise<void> {
  const send = (msg: unknown) => new Promise<void>((r) => process.send!(msg, () => r()));
  process.on('disconnect', () => process.exit(3)); // the orchestrator went away: stop at once
  const inbox: ((m: { type: string; [k: string]: unknown }) => void)[] = [];
  process.on('message', (m: { type: string; [k: string]: unknown }) => inbox.shift()?.(m));
  const next = () => new Promise<{ type: string; [k: string]: unknown }>((r) => inbox.push(r));

  const first = await next();
  if (first.type !== 'config') throw new Error('generator: expected config');
  const g = new Generator(first.cfg as GenConfig);
  const connected = await g.connectAll();
  const goWait = next();
  await send({ type: 'ready', connected });
  const go = (await goWait).go as GenGo;
  await new Promise((r) => setTimeout(r, Math.max(0, go.startAt - now())));
  let elu0 = performance.eventLoopUtilization();
  let cpu0 = process.cpuUsage();
  let w0 = now();
  let elu = 0;
  let cpuMs = 0;
  let windowMs = 0;
  setTimeout(() => {
    elu0 = performance.eventLoopUtilization();
    cpu0 = process.cpuUsage();
    w0 = now();
  }, Math.max(0, go.warmupEnd - now()));
  setTimeout(() => {
    elu = performance.eventLoopUtilization(elu0).utilization;
    const c = process.cpuUsage(cpu0);
    cpuMs = (c.user + c.system) / 1000;
    windowMs = now() - w0;
  }, Math.max(0, go.endAt - now()));
  g.start(go);
  await g.allDone;
  // wait for the window's closing sample when every connection stopped early
  while (windowMs === 0 && now() < go.endAt + 1000) await new Promise((r) => setTimeout(r, 20));
  const result: GenResult = {
    okPerConv: Array.from(g.okPerConv),
    statuses: g.statuses,
    connectErrors: g.connectErrors,
    connErrors: g.connErrors,
    timeouts: g.timeouts,
    protocolErrors: g.protocolErrors,
    unknownOutcome: g.unknownOutcome,
    reconnects: g.reconnects,
    serverCloses: g.serverCloses,
    completed: g.completed,
    measured: g.measured,
    measuredOk: g.measuredOk,
    latencies: g.lat.slice(0, g.latN),
    windowMs,
    cpuMs,
    elu,
  };
  await send({ type: 'result', result });
  process.exit(0);
}

// ================================================================================================
// Orchestrator: children, cleanup
// ================================================================================================

interface Child {
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

async function stopChild(child: Child, graceMs: number): Promise<void> {
  if (child.proc.exitCode !== null || child.proc.signalCode !== null) return;
  child.proc.kill('SIGTERM');
  const timer = setTimeout(() => child.proc.kill('SIGKILL'), graceMs);
  await child.exited;
  clearTimeout(timer);
}

function killAllNow(): void {
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

let interrupted = false;

function installCleanup(): void {
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

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function childFailure(child: Child, what: string): Error {
  return new Error(`${child.name} ${what}\n--- last output of ${child.name} ---\n${child.tail.join('\n')}`);
}

async function startDaemon(entry: string, dataDir: string, apiKey: string | null, profileDir: string | null): Promise<{ child: Child; port: number }> {
  const port = await freePort();
  const env: NodeJS.ProcessEnv = { ...process.env, PORT: String(port), HOST, DATA_DIR: dataDir, LOG_LEVEL: 'warn' };
  for (const k of ['SESSION_API_KEY', 'SESSION_API_KEYS', 'WORKSPACE_ROOT', 'LLM_MODEL', 'LLM_API_KEY', 'LLM_BASE_URL', 'NODE_OPTIONS']) delete env[k];
  if (apiKey) env.SESSION_API_KEY = apiKey;
  const prof = profileDir ? ['--cpu-prof', `--cpu-prof-dir=${profileDir}`] : [];
  const child = startChild('daemon', [...prof, '--import', 'tsx', entry], env);
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

async function startBare(): Promise<{ child: Child; port: number }> {
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

// ================================================================================================
// Orchestrator: REST helpers and WebSocket subscribers
// ================================================================================================

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

async function countAll(port: number, headers: Record<string, string>, ids: string[]): Promise<number[]> {
  return mapLimited(ids, 8, async (id) => {
    const v = await api(port, headers, 'GET', countPath(id));
    if (typeof v !== 'number') throw new Error(`GET ${countPath(id)} did not return a number: ${JSON.stringify(v).slice(0, 200)}`);
    return v;
  });
}

interface Subscriber {
  id: string;
  ws: WebSocket;
  lastSeq: number;
  messages: number;
  frames: number;
  orderViolations: number;
  closedEarly: string | null;
  ready: Promise<void>;
}

function subscribe(port: number, headers: Record<string, string>, id: string): Subscriber {
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

const closeSubscriber = (s: Subscriber) => (s as Subscriber & { shut: () => void }).shut();

// ================================================================================================
// Orchestrator: one load run
// ================================================================================================

interface CpuSample {
  t: number;
  proc: Map<number, number>; // pid → utime+stime ticks
  sysTotal: number;
  sysIdle: number;
  self: NodeJS.CpuUsage;
}

const CLK_TCK = 100; // Linux USER_HZ

function readProcTicks(pid: number): number {
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

interface RunStats {
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

async function runLoad(label: string, server: { child: Child; port: number }, ids: string[], opts: Options, headers: Record<string, string>): Promise<RunStats> {
  const paths = ids.map((id) => `/api/conversations/${id}/events`);
  const gens: Child[] = [];
  const results: Promise<GenResult>[] = [];
  const readies: Promise<number>[] = [];
  for (let k = 0; k < opts.genProcs; k++) {
    const env: NodeJS.ProcessEnv = { ...process.env };
    delete env.NODE_OPTIONS;
    const gen = startChild(`generator-${k}`, ['--import', 'tsx', SELF, '--generator'], env, true);
    gens.push(gen);
    const connections = Math.floor(opts.concurrency / opts.genProcs) + (k < opts.concurrency % opts.genProcs ? 1 : 0);
    const cfg: GenConfig = { port: server.port, paths, body: BODY, headers, connections, index: k, stride: opts.genProcs, timeoutMs: opts.timeoutMs };
    readies.push(
      new Promise((resolve, reject) => {
        gen.proc.once('message', (m: { type: string; connected: number }) => (m.type === 'ready' ? resolve(m.connected) : reject(new Error('generator: unexpected message'))));
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
  if (connected === 0) throw childFailure(server.child, `accepts no connections on port ${server.port}`);

  const startAt = now() + 100;
  const warmupEnd = startAt + opts.warmup * 1000;
  const endAt = warmupEnd + opts.duration * 1000;
  for (const g of gens) g.proc.send({ type: 'go', go: { startAt, warmupEnd, endAt } satisfies GenGo });
  const pids = [server.child.proc.pid!];
  let s0: CpuSample | null = null;
  let s1: CpuSample | null = null;
  setTimeout(() => (s0 = sampleCpu(pids)), Math.max(0, warmupEnd - now()));
  setTimeout(() => (s1 = sampleCpu(pids)), Math.max(0, endAt - now()));
  process.stdout.write(`  ${label}: ${connected}/${opts.concurrency} connections, ${opts.warmup} s warmup + ${opts.duration} s measured ...`);
  const all = await withDeadline(Promise.all(results), endAt - now() + opts.timeoutMs + 20_000, 'generators did not report');
  await Promise.all(gens.map((g) => withDeadline(g.exited, 5000, 'generator did not exit').catch(() => g.proc.kill('SIGKILL'))));
  while (!s1) await sleep(10);

  // merge
  const okPerConv = new Array<number>(ids.length).fill(0);
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
    r.okPerConv.forEach((n, i) => (okPerConv[i]! += n));
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
  const pid = server.child.proc.pid!;
  const serverCores = (b.proc.get(pid)! - a.proc.get(pid)!) / CLK_TCK / secs;
  const genCores = genCpuMs / windowMs;
  const orchestratorCores = ((b.self.user + b.self.system - a.self.user - a.self.system) / 1e6) / secs;
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

async function withDeadline<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([p, new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`${what} within ${Math.round(ms)} ms`)), ms)))]);
  } finally {
    clearTimeout(timer);
  }
}

// ================================================================================================
// Profile summary (daemon --cpu-prof, restricted to the measured window)
// ================================================================================================

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number; columnNumber: number };
  children?: number[];
}

function summariseProfile(file: string, windowUs: [number, number]): { active: number; text: string } {
  const prof = JSON.parse(fs.readFileSync(file, 'utf8')) as { nodes: ProfileNode[]; startTime: number; samples: number[]; timeDeltas: number[] };
  const byId = new Map<number, ProfileNode>();
  const parent = new Map<number, number>();
  for (const n of prof.nodes) {
    byId.set(n.id, n);
    for (const c of n.children ?? []) parent.set(c, n.id);
  }
  const shortUrl = (u: string) => {
    if (!u) return '';
    let s = u.replace(/^file:\/\//, '');
    const nm = s.lastIndexOf('/node_modules/');
    if (nm >= 0) s = s.slice(nm + '/node_modules/'.length);
    else if (s.startsWith(ROOT + '/')) s = s.slice(ROOT.length + 1);
    return s;
  };
  const fnKey = (n: ProfileNode) => {
    const cf = n.callFrame;
    const name = cf.functionName || '(anonymous)';
    const u = shortUrl(cf.url);
    // tsx-transformed modules report line 1 for everything: show a line only when it means something
    return u ? `${name}  ${u}${cf.lineNumber > 0 ? `:${cf.lineNumber + 1}` : ''}` : name;
  };
  const area = (n: ProfileNode) => {
    const u = n.callFrame.url;
    if (!u) return n.callFrame.functionName.startsWith('(') ? n.callFrame.functionName : '(native / V8 builtins)';
    if (u.startsWith('node:')) return 'node: core modules';
    const nm = u.lastIndexOf('/node_modules/');
    if (nm >= 0) {
      const rest = u.slice(nm + '/node_modules/'.length).split('/');
      return rest[0]!.startsWith('@') ? `${rest[0]}/${rest[1]}` : rest[0]!;
    }
    const s = shortUrl(u);
    return s;
  };

  // sample timestamps: startTime + cumulative deltas (µs, CLOCK_MONOTONIC like process.hrtime)
  let t = prof.startTime;
  const picked: number[] = [];
  for (let i = 0; i < prof.samples.length; i++) {
    t += prof.timeDeltas[i] ?? 0;
    if (t >= windowUs[0] && t <= windowUs[1]) picked.push(prof.samples[i]!);
  }
  let note = 'samples restricted to the measured window';
  let samples = picked;
  if (picked.length < 50) {
    samples = prof.samples;
    note = 'WARNING: could not align the profile clock with the window; whole daemon lifetime shown';
  }
  const self = new Map<string, number>();
  const incl = new Map<string, number>();
  const areas = new Map<string, number>();
  let active = 0;
  for (const id of samples) {
    const n = byId.get(id);
    if (!n) continue;
    const k = fnKey(n);
    self.set(k, (self.get(k) ?? 0) + 1);
    const ar = area(n);
    areas.set(ar, (areas.get(ar) ?? 0) + 1);
    if (n.callFrame.functionName !== '(idle)') active += 1;
    const seen = new Set<string>();
    for (let cur: number | undefined = id; cur !== undefined; cur = parent.get(cur)) {
      const cn = byId.get(cur)!;
      if (cn.callFrame.functionName === '(root)') break;
      const ck = fnKey(cn);
      if (seen.has(ck)) continue;
      seen.add(ck);
      incl.set(ck, (incl.get(ck) ?? 0) + 1);
    }
  }
  const total = samples.length;
  const pctOf = (n: number) => `${((100 * n) / total).toFixed(1).padStart(5)} %`;
  const top = (m: Map<string, number>, k: number) =>
    [...m.entries()]
      .sort((x, y) => y[1] - x[1])
      .slice(0, k)
      .map(([name, n]) => `    ${pctOf(n)}  ${name}`)
      .join('\n');
  const text = [
    `daemon CPU profile (${path.basename(file)}): ${total} samples, ${note}; ${pctOf(active).trim()} not idle`,
    '  self time by module:',
    top(areas, 18),
    '  self time by function:',
    top(self, 30),
    '  inclusive time by function (callers included):',
    top(incl, 40),
  ].join('\n');
  return { active: picked.length >= 50 ? active : 0, text };
}

// ================================================================================================
// Orchestrator main
// ================================================================================================

const fmtInt = (n: number) => (Number.isFinite(n) ? Math.round(n).toLocaleString('en-US') : 'n/a');
const fmtMs = (n: number) => (Number.isFinite(n) ? n.toFixed(2) : 'n/a');
const fmtCores = (n: number) => (Number.isFinite(n) ? `${(n * 100).toFixed(0)} %` : 'n/a');

async function main(): Promise<number> {
  const opts = parseOptions(process.argv.slice(2));
  installCleanup();
  keepTmp = opts.keepData;
  tmpDir = fs.mkdtempSync(path.join(os.tmpdir(), 'parley-loadtest-'));
  const dataDir = path.join(tmpDir, 'data');
  const profileDir = opts.profile ? path.join(tmpDir, 'profile') : null;
  const apiKey = opts.auth ? crypto.randomBytes(24).toString('hex') : null;
  const headers: Record<string, string> = apiKey ? { 'x-session-api-key': apiKey } : {};
  const cpus = os.cpus();
  const started = new Date();
  const loadBefore = os.loadavg()[0]!;
  process.stdout.write(
    `parley load test: ${opts.conversations} conversations, ${opts.concurrency} connections, ${opts.warmup} s warmup + ${opts.duration} s, ` +
      `${opts.subscribers} subscribers, ${opts.genProcs} generator process(es), auth ${opts.auth ? 'on' : 'off'}${opts.profile ? ', daemon profiled' : ''}\n` +
      (opts.daemonEntry !== 'bridge/main.ts' ? `daemon entry: ${opts.daemonEntry}\n` : '') +
      `machine: ${cpus.length} × ${cpus[0]?.model.trim() ?? '?'}, Node ${process.version}, load average ${loadBefore.toFixed(2)}, temp dir ${tmpDir}\n`,
  );

  const [daemon, bare] = await Promise.all([startDaemon(opts.daemonEntry, dataDir, apiKey, profileDir), startBare()]);
  process.stdout.write(`daemon pid ${daemon.child.proc.pid} on :${daemon.port}, bare server pid ${bare.child.proc.pid} on :${bare.port}\n`);

  // conversations
  const ids = await mapLimited(Array.from({ length: opts.conversations }), 8, async () => {
    const r = (await api(daemon.port, headers, 'POST', '/api/conversations', {})) as { conversation_id?: string };
    if (!r.conversation_id) throw new Error(`POST /api/conversations: no conversation_id in ${JSON.stringify(r)}`);
    return r.conversation_id;
  });
  // let workspace preparation (background, per conversation) finish before measuring anything
  const until = now() + 15_000;
  const unsettled = await mapLimited(ids, 8, async (id) => {
    for (;;) {
      const c = (await api(daemon.port, headers, 'GET', `/api/conversations/${id}`)) as { setup?: { phase?: string } | null };
      const phase = c.setup?.phase;
      if (phase !== 'pending' && phase !== 'preparing') return null;
      if (now() > until) return `${id}: ${phase}`;
      await sleep(100);
    }
  });
  const stuck = unsettled.filter(Boolean);
  if (stuck.length) process.stdout.write(`warning: ${stuck.length} conversation(s) still preparing after 15 s, measuring anyway (${stuck[0]})\n`);
  const baseline = await countAll(daemon.port, headers, ids);

  // subscribers, before any load
  const subs = ids.slice(0, opts.subscribers).map((id) => subscribe(daemon.port, headers, id));
  await withDeadline(Promise.all(subs.map((s) => s.ready)), 15_000, 'subscribers did not receive their full_state snapshot');
  process.stdout.write(`${ids.length} conversations created, ${subs.length} WebSocket subscribers ready\n`);

  // the real endpoint
  const logs0 = { warn: daemon.child.warnLines, error: daemon.child.errorLines };
  const real = await runLoad('Parley POST /api/conversations/{id}/events', daemon, ids, opts, headers);

  const alive = (c: Child) => c.proc.exitCode === null && c.proc.signalCode === null;
  if (!alive(daemon.child)) throw childFailure(daemon.child, `died during the load (${daemon.child.proc.signalCode ?? `exit code ${daemon.child.proc.exitCode}`}); ${real.errors} errors: ${real.errorDetail}`);

  // verification: committed and published
  const expected = real.okPerConv;
  const waitUntil = now() + 30_000;
  let lastProgress = now();
  let lastSum = -1;
  for (;;) {
    const sum = subs.reduce((a, s) => a + s.messages, 0);
    if (subs.every((s, i) => s.messages >= expected[i]!)) break;
    if (sum !== lastSum) {
      lastSum = sum;
      lastProgress = now();
    }
    if (now() > waitUntil || now() - lastProgress > 5000) break;
    await sleep(50);
  }
  const counts = await countAll(daemon.port, headers, ids);
  const committedPerConv = counts.map((c, i) => c - baseline[i]!);
  const committed = committedPerConv.reduce((a, b) => a + b, 0);
  const committedBad = committedPerConv.filter((c, i) => c !== expected[i]).length;
  const published = subs.reduce((a, s) => a + s.messages, 0);
  const publishedExpected = subs.reduce((a, _s, i) => a + expected[i]!, 0);
  const publishedBad = subs.filter((s, i) => s.messages !== expected[i]).length;
  const orderViolations = subs.reduce((a, s) => a + s.orderViolations, 0);
  const closedEarly = subs.filter((s) => s.closedEarly !== null);
  subs.forEach(closeSubscriber);

  // the physical limit
  const limit = await runLoad('bare uWS route (read body, JSON.parse, 200)', bare, ids, opts, headers);

  // stop the servers (the daemon writes its profile on a clean exit)
  await Promise.all([stopChild(daemon.child, 12_000), stopChild(bare.child, 3000)]);

  const ratio = real.rps / limit.rps;
  const ok = committed === real.totalOk && committedBad === 0 && published === publishedExpected && publishedBad === 0 && orderViolations === 0 && closedEarly.length === 0;

  const row = (s: RunStats) =>
    `| ${s.label.padEnd(44)} | ${fmtInt(s.rps).padStart(8)} | ${fmtMs(s.p50).padStart(6)} | ${fmtMs(s.p95).padStart(6)} | ${fmtMs(s.p99).padStart(6)} | ${String(s.errors).padStart(6)} | ${fmtCores(s.serverCores).padStart(10)} | ${fmtCores(s.genCores).padStart(13)} | ${fmtCores(s.otherCores).padStart(9)} |`;
  const lines = [
    '',
    `### Load test: POST /api/conversations/{id}/events (${started.toISOString().slice(0, 16).replace('T', ' ')} UTC)`,
    '',
    `${cpus.length} × ${cpus[0]?.model.trim() ?? '?'}, Node ${process.version}, ${os.platform()} ${os.arch()}; ` +
      `${opts.conversations} conversations, ${opts.concurrency} keep-alive connections (${opts.genProcs} generator process${opts.genProcs > 1 ? 'es' : ''}, no pipelining), ` +
      `${opts.duration} s measured after ${opts.warmup} s warmup, ${subs.length} WebSocket subscribers, auth ${opts.auth ? 'on' : 'off'}${opts.profile ? ', daemon under --cpu-prof' : ''}.`,
    '',
    '| target                                       |    req/s | p50 ms | p95 ms | p99 ms | errors | server CPU | generator CPU | other CPU |',
    '|----------------------------------------------|---------:|-------:|-------:|-------:|-------:|-----------:|--------------:|----------:|',
    row(limit),
    row(real),
    '',
    `real/bare: ${ratio.toFixed(2)} (target >= 0.50: ${ratio >= 0.5 ? 'met' : 'MISSED'})`,
    `committed: ${committed}/${real.totalOk}, published: ${published}/${publishedExpected} ` +
      `(${subs.length} of ${ids.length} conversations subscribed; seq order ${orderViolations === 0 ? 'gap-free' : `VIOLATED ${orderViolations}×`})`,
  ];
  if (committedBad) lines.push(`  ${committedBad} conversation(s) whose committed count differs from their 200 responses`);
  if (publishedBad) lines.push(`  ${publishedBad} subscriber(s) whose received MessageEvents differ from their conversation's 200 responses`);
  if (closedEarly.length) lines.push(`  ${closedEarly.length} subscriber(s) closed during the run: ${closedEarly.slice(0, 3).map((s) => s.closedEarly).join('; ')}`);
  if (real.unknownOutcome) lines.push(`  ${real.unknownOutcome} request(s) had an unknown outcome (connection lost or timed out in flight)`);
  for (const s of [limit, real]) if (s.errors) lines.push(`  errors (${s.label}): ${s.errorDetail}`);
  lines.push(
    '',
    'CPU = cores used during the measured window (100 % = one core): server from /proc/<pid>/stat, generator from its process.cpuUsage(),',
    '"other" = whole machine minus server, generator and the orchestrator (WebSocket subscribers): other processes on the machine.',
    `generator event-loop utilisation: bare ${limit.genElu.toFixed(2)}, real ${real.genElu.toFixed(2)}; ` +
      `orchestrator (subscribers) CPU during the real run ${fmtCores(real.orchestratorCores)}; ` +
      `daemon log lines after start-up: ${daemon.child.warnLines - logs0.warn} warn, ${daemon.child.errorLines - logs0.error} error.`,
  );
  if (limit.genElu >= 0.85 || limit.genCores >= 0.85) {
    lines.push(
      `note: the load generator was near saturation during the bare run (event loop ${Math.round(limit.genElu * 100)} % busy): ` +
        'the bare figure is a lower bound of what the route can do here, so the ratio above is, if anything, optimistic.',
    );
  }
  const other = Math.max(limit.otherCores, real.otherCores);
  if (other >= 0.25) lines.push(`note: other processes used up to ${fmtCores(other)} of a core during a measured window: expect noise; repeat the run.`);
  process.stdout.write(`${lines.join('\n')}\n`);

  if (profileDir) {
    const files = fs.existsSync(profileDir) ? fs.readdirSync(profileDir).filter((f) => f.endsWith('.cpuprofile')) : [];
    if (files.length === 0) process.stdout.write('\nno daemon CPU profile was written (did the daemon exit cleanly?)\n');
    else {
      // one profile per V8 isolate: the main thread and tsx's module-hooks thread; show the busy one
      const summaries = files.map((f) => ({ file: path.join(profileDir, f), ...summariseProfile(path.join(profileDir, f), real.windowUs) }));
      summaries.sort((x, y) => y.active - x.active);
      const { file, text } = summaries[0]!;
      process.stdout.write(`\n${text}\n`);
      if (opts.keepData) process.stdout.write(`profile kept at ${file}\n`);
    }
  }
  if (!ok) process.stderr.write('\nloadtest: VERIFICATION FAILED: the committed / published counts differ from the 200 responses\n');
  return ok ? 0 : 1;
}

if (process.argv.includes('--generator')) {
  generatorMain().catch((err) => {
    process.stderr.write(`loadtest generator: ${(err as Error)?.stack ?? err}\n`);
    process.exit(2);
  });
} else {
  main().then(
    (code) => {
      killAllNow();
      process.exit(code);
    },
    (err) => {
      if (!interrupted) process.stderr.write(`loadtest: ${(err as Error)?.message ?? err}\n`);
      killAllNow();
      process.exit(interrupted ? 130 : 2);
    },
  );
}
