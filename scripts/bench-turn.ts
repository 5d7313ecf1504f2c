/**
 * A text turn, end to end, against a direct round trip to the same LLM server in the same run.
 *
 *   npx tsx scripts/bench-turn.ts [--turns 40] [--warmup 5] [--sandbox bwrap|none] [--client http|fetch] [--trace] [--compare DIR]...
 *                                 [--cpu-prof DIR] [--syscalls] [--settle-ms 100] [--dump N] [--dump-slowest N]
 *
 * The daemon runs as `npm start` runs it (`node dist/main.mjs` with the flags of package.json's start script, rebuilt first
 * when a source is newer) against the scripted OpenAI-compatible LLM (test/support/scripted-llm.ts),
 * which answers at once with the text `hello`. Each turn is a new conversation: it is created, its
 * workspace prepared and its WebSocket opened (one subscriber), untimed; then the time from
 * `POST /api/conversations/{id}/events` (`run: true`) to the terminal `execution_status` (`finished`)
 * arriving on that socket. After each turn this process sends the LLM server a request like the
 * daemon's (its body, streamed, read to its end): over node:http on a kept-alive connection, as the
 * daemon's own client does (the direct round trip), on a new connection, and with fetch (undici, kept
 * alive). It prints the p50 (and p90) of each and the turn's ratio to the round trip of the client the
 * turn's POST was sent with (`--client http`, the default, or `--client fetch`), with the daemon's CPU
 * (all threads, /proc/<pid>/task/<tid>/schedstat) and its minor page faults (/proc/<pid>/stat) over the turn.
 *
 * Before each turn the daemons are left alone for `--settle-ms` (100): what a turn started in the
 * background (a sandbox's processes, the index) does not land in the next one's time.
 *
 * `--compare DIR` (repeatable): another checkout, built (`npm run build` there), whose daemon runs
 * beside this one; the rounds alternate between the daemons (one turn each per round), so a change is
 * measured against the code before it in the same minutes of a busy machine.
 *
 * `--trace` runs this checkout's daemon with LOG_LEVEL=trace: it logs each turn's phases, timed
 * (src/events/turn-trace.ts: the user's message appended and committed, the run started and set up,
 * the prompt built, the LLM request built and sent, the answer's headers, first and last chunk, the
 * events appended and committed and published). With what this process sees (the POST sent and
 * answered, the LLM server's request arrival and answer, each event arriving on the socket), it prints
 * where the time of a turn goes, phase by phase (medians), on one clock: every process reads
 * `performance.timeOrigin + performance.now()` (the wall clock, sub-millisecond). The trace costs a
 * little; the turn times to quote are those of a run without it.
 *
 * `--cpu-prof DIR`: the daemon runs under --cpu-prof; its main thread's busiest functions during the
 * measured turns are printed, each named by its source line (through the bundle's source map).
 *
 * `--syscalls`: `perf stat` (root, or a perf_event_paranoid that allows it) counts this checkout's daemon's system calls,
 * all threads, by call, during the measured turns only (enabled at each POST, disabled when the turn has ended). On a
 * machine where a system call costs microseconds (a VM that traps them), their number is much of a turn's time.
 */
import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { originalPositionFor, TraceMap } from '@jridgewell/trace-mapping';
import WebSocket from 'ws';
import { ensureBuilt, startFlags, tempDir, waitFor } from '../test/support/daemon.js';
import { threadsCpuMs } from '../test/support/processes.js';
import { startScriptedLlm, type ScriptedLlm } from '../test/support/scripted-llm.js';

const { values } = parseArgs({
  options: {
    turns: { type: 'string', default: '40' },
    warmup: { type: 'string', default: '5' },
    sandbox: { type: 'string' },
    trace: { type: 'boolean', default: false },
    compare: { type: 'string', multiple: true, default: [] },
    'cpu-prof': { type: 'string' },
    'settle-ms': { type: 'string', default: '100' },
    dump: { type: 'string', default: '0' },
    'dump-slowest': { type: 'string', default: '0' },
    client: { type: 'string', default: 'http' },
    syscalls: { type: 'boolean', default: false },
  },
});
const TURNS = Number(values.turns);
const SETTLE_MS = Number(values['settle-ms']);
const WARMUP = Number(values.warmup);
const ROOT = path.resolve(import.meta.dirname, '..');

const wallNow = () => performance.timeOrigin + performance.now();
const monoUs = () => Number(process.hrtime.bigint() / 1000n);
const keepAlive = new http.Agent({ keepAlive: true });

/** A request, read to its end (on the kept-alive agent, or on a new connection). */
function request(url: string, method: string, body: string | undefined, agent: http.Agent | false = keepAlive): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      url,
      { method, agent, headers: body === undefined ? {} : { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString('utf8') }));
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

interface Daemon {
  label: string;
  url: string;
  port: number;
  pid: number;
  output: string[];
  traced: boolean;
  stop(): Promise<void>;
}

/** `node <npm start's flags> dist/main.mjs` of the checkout `dir`, as `npm start` runs it, on a new DATA_DIR. */
async function startBuilt(label: string, dir: string, env: Record<string, string>, nodeArgs: string[]): Promise<Daemon> {
  const dataDir = tempDir('parley-bench-turn-');
  const proc = spawn(process.execPath, [...startFlags(dir), ...nodeArgs, 'dist/main.mjs'], {
    cwd: dir,
    env: { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: process.env.HOME ?? os.tmpdir(), PORT: '0', DATA_DIR: dataDir, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const output: string[] = [];
  let buf = '';
  const port = await new Promise<number>((resolve, reject) => {
    const feed = (chunk: Buffer) => {
      buf += chunk.toString('utf8');
      for (let i = buf.indexOf('\n'); i >= 0; i = buf.indexOf('\n')) {
        const line = buf.slice(0, i);
        buf = buf.slice(i + 1);
        output.push(line);
        const m = /"port":(\d+).*listening on/.exec(line);
        if (m) resolve(Number(m[1]));
      }
    };
    proc.stdout!.on('data', feed);
    proc.stderr!.on('data', feed);
    proc.once('exit', (code) => reject(new Error(`${label}: the daemon exited with ${code}:\n${output.join('\n')}`)));
  });
  const url = `http://127.0.0.1:${port}`;
  // the sandbox's probe decides after the port opens
  await waitFor(async () => {
    const r = await request(`${url}/server_info`, 'GET', undefined).catch(() => null);
    return r?.status === 200 && JSON.parse(r.text).sandbox?.mode !== 'probing';
  }, `${label}: the sandbox probe`);
  const exited = new Promise<void>((r) => proc.once('exit', () => r()));
  return {
    label,
    url,
    port,
    pid: proc.pid!,
    output,
    traced: env.LOG_LEVEL === 'trace',
    async stop() {
      proc.kill('SIGTERM');
      await exited;
      fs.rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

interface Frame {
  kind: string;
  source?: string;
  key?: string;
  value?: unknown;
  at: number;
}

interface Turn {
  /** POST sent → the terminal status on the socket (ms). */
  ms: number;
  /** the POST's time on CLOCK_MONOTONIC (µs), as the daemon's CPU profile counts */
  postedMono: number;
  posted: number;
  answered: number;
  frames: Frame[];
  llmReceived: number;
  llmAnswered: number;
  trace: [string, number, number][] | null;
  /** the daemon's CPU time over the turn, all threads (ms) */
  cpu: number;
  /** the daemon's minor page faults over the turn, all threads */
  faults: number;
}

const ENDS = new Set(['finished', 'error', 'stuck', 'paused']);

/** One subscriber on the conversation's socket, ready once its first frame (the full state) came. */
async function subscribe(d: Daemon, id: string): Promise<{ frames: Frame[]; ended: Promise<void>; close(): void }> {
  const frames: Frame[] = [];
  const sock = new WebSocket(`ws://127.0.0.1:${d.port}/sockets/events/${id}`, { perMessageDeflate: false });
  let first = true;
  let onEnd: () => void = () => {};
  const ended = new Promise<void>((r) => (onEnd = r));
  await new Promise<void>((resolve, reject) => {
    sock.on('message', (data: Buffer) => {
      const at = wallNow();
      if (first) {
        first = false;
        return resolve();
      }
      const ev = JSON.parse(data.toString('utf8'));
      frames.push({ kind: ev.kind, source: ev.source, key: ev.key, value: ev.value, at });
      if (ev.kind === 'ConversationStateUpdateEvent' && ev.key === 'execution_status' && ENDS.has(ev.value)) onEnd();
    });
    sock.once('error', reject);
  });
  return { frames, ended, close: () => sock.close() };
}

/** The daemon's turn traces, from its log (one JSON line each), by conversation. */
function traceOf(d: Daemon, id: string): [string, number, number][] | null {
  for (let i = d.output.length - 1; i >= 0; i--) {
    const line = d.output[i]!;
    if (line.includes('"turn trace"') && line.includes(id)) return (JSON.parse(line) as { marks: [string, number, number][] }).marks;
  }
  return null;
}

/** A process's minor page faults so far, all its threads (/proc/<pid>/stat's minflt). */
function faultsOf(pid: number): number {
  const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[7]);
}

/** `perf stat` on a process's system calls, counting only between `enable` and `disable` (its control FIFOs). */
class SyscallCount {
  private readonly dir = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-turn-perf-'));
  private readonly out = path.join(this.dir, 'stat.csv');
  private readonly proc;
  private ctl = -1;
  private ack = -1;

  constructor(pid: number) {
    for (const f of ['ctl', 'ack']) execFileSync('mkfifo', [path.join(this.dir, f)]);
    this.proc = spawn(
      'perf',
      ['stat', '-e', 'syscalls:sys_enter_*', '-p', String(pid), '-x', ',', '-o', this.out, '-D', '-1', `--control=fifo:${this.dir}/ctl,${this.dir}/ack`],
      { stdio: ['ignore', 'ignore', 'pipe'] },
    );
  }

  private async command(c: 'enable' | 'disable'): Promise<void> {
    if (this.ctl < 0) {
      // (opened read-write: neither open waits for perf's side)
      this.ctl = fs.openSync(path.join(this.dir, 'ctl'), fs.constants.O_RDWR);
      this.ack = fs.openSync(path.join(this.dir, 'ack'), fs.constants.O_RDWR);
    }
    fs.writeSync(this.ctl, `${c}\n`);
    const buf = Buffer.alloc(16);
    await new Promise<void>((resolve, reject) =>
      fs.read(this.ack, buf, 0, 16, null, (err) => (err ? reject(new Error(`perf stat did not answer ${c}: ${err.message}`)) : resolve())),
    );
  }

  enable = () => this.command('enable');
  disable = () => this.command('disable');

  /** Ends perf; the calls counted, by name, most first. */
  async counts(): Promise<[string, number][]> {
    const ended = new Promise((r) => this.proc.once('exit', r));
    this.proc.kill('SIGINT');
    await ended;
    for (const fd of [this.ctl, this.ack]) if (fd >= 0) fs.closeSync(fd);
    const out: [string, number][] = [];
    for (const line of fs.readFileSync(this.out, 'utf8').split('\n')) {
      const [count, , event] = line.split(',');
      const n = Number(count);
      if (event?.startsWith('syscalls:sys_enter_') && Number.isFinite(n) && n > 0) out.push([event.slice('syscalls:sys_enter_'.length), n]);
    }
    fs.rmSync(this.dir, { recursive: true, force: true });
    return out.sort((a, b) => b[1] - a[1]);
  }
}
let syscalls: SyscallCount | null = null;

async function turn(d: Daemon, llm: ScriptedLlm): Promise<Turn> {
  const id = JSON.parse((await request(`${d.url}/api/conversations`, 'POST', '{}')).text).conversation_id as string;
  // the workspace's preparation (no repository: a directory) is not the turn
  await waitFor(async () => {
    const phase = JSON.parse((await request(`${d.url}/api/conversations/${id}`, 'GET', undefined)).text).setup?.phase;
    return phase !== 'pending' && phase !== 'preparing';
  }, `the workspace of ${id}`);
  const sub = await subscribe(d, id);
  // what the turn before started in the background (a sandbox's processes, the index) is not this one's
  await new Promise((r) => setTimeout(r, SETTLE_MS));
  llm.push({ text: 'hello' });
  const before = llm.requests.length;
  const body = JSON.stringify({ role: 'user', content: [{ type: 'text', text: 'say hello' }], run: true });
  const counted = syscalls !== null && d === daemons[0] && measuring;
  if (counted) await syscalls!.enable();
  const cpu0 = threadsCpuMs(d.pid);
  const faults0 = faultsOf(d.pid);
  const postedMono = monoUs();
  const posted = wallNow();
  const res = await post(`${d.url}/api/conversations/${id}/events`, body);
  const answered = wallNow();
  if (res.status !== 200) throw new Error(`${d.label}: POST events: ${res.status} ${res.text}`);
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([
    sub.ended,
    new Promise((_, reject) => (timer = setTimeout(() => reject(new Error(`${d.label}: the turn of ${id} did not end in 30 s`)), 30_000))),
  ]);
  clearTimeout(timer);
  const cpu = threadsCpuMs(d.pid) - cpu0;
  const faults = faultsOf(d.pid) - faults0;
  if (counted) await syscalls!.disable();
  sub.close();
  const end = sub.frames.find((f) => f.kind === 'ConversationStateUpdateEvent' && f.key === 'execution_status' && ENDS.has(f.value as string))!;
  if (end.value !== 'finished') throw new Error(`${d.label}: the turn of ${id} ended ${String(end.value)}`);
  if (llm.requests.length !== before + 1) throw new Error(`${d.label}: the turn made ${llm.requests.length - before} LLM requests`);
  const q = llm.requests[before]!;
  const trace = d.traced ? await waitFor(() => traceOf(d, id), `the turn trace of ${id}`) : null;
  return {
    ms: end.at - posted,
    postedMono,
    posted,
    answered,
    frames: sub.frames,
    llmReceived: performance.timeOrigin + q.receivedAt,
    llmAnswered: performance.timeOrigin + q.answeredAt!,
    trace,
    cpu,
    faults,
  };
}

/** The daemon's last request body, sent by this process to the same server: kept alive and on a new connection (ms). */
async function direct(llm: ScriptedLlm, body: string): Promise<{ kept: number; fresh: number; fetched: number }> {
  const once = async (agent: http.Agent | false) => {
    llm.push({ text: 'hello' });
    const t0 = wallNow();
    const res = await request(`${llm.url}/chat/completions`, 'POST', body, agent);
    const ms = wallNow() - t0;
    if (res.status !== 200 || !res.text.includes('[DONE]')) throw new Error(`direct request: ${res.status} ${res.text.slice(0, 200)}`);
    return ms;
  };
  const kept = await once(keepAlive);
  const fresh = await once(false);
  llm.push({ text: 'hello' });
  const t0 = wallNow();
  const res = await fetch(`${llm.url}/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
  const text = await res.text();
  const fetched = wallNow() - t0;
  if (res.status !== 200 || !text.includes('[DONE]')) throw new Error(`direct request (fetch): ${res.status} ${text.slice(0, 200)}`);
  return { kept, fresh, fetched };
}

/** The turn's POST: on node:http (kept alive), or with fetch (undici, as many clients send it). */
async function post(url: string, body: string): Promise<{ status: number; text: string }> {
  if (values.client !== 'fetch') return request(url, 'POST', body);
  const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
  return { status: res.status, text: await res.text() };
}

const quantile = (xs: number[], q: number) => {
  const s = xs.filter(Number.isFinite).sort((a, b) => a - b);
  return s.length ? s[Math.min(s.length - 1, Math.floor(q * s.length))]! : Number.NaN;
};
const median = (xs: number[]) => quantile(xs, 0.5);
const f = (x: number) => (Number.isFinite(x) ? x.toFixed(2) : '—');
const load = () =>
  os
    .loadavg()
    .map((l) => l.toFixed(2))
    .join(' ');

await ensureBuilt();
const llm = await startScriptedLlm();
const env = {
  LLM_MODEL: 'openai/scripted',
  LLM_BASE_URL: llm.url,
  LLM_API_KEY: 'k',
  LOG_LEVEL: 'info',
  ...(values.sandbox ? { SANDBOX: values.sandbox } : {}),
};
const profDir = values['cpu-prof'] ? path.resolve(values['cpu-prof']) : null;
const daemons: Daemon[] = [];
const results = new Map<Daemon, Turn[]>();
/** Past the warm-up turns. */
let measuring = false;
let syscallCounts: [string, number][] | null = null;
const directs: { kept: number; fresh: number; fetched: number }[] = [];
const load0 = load();
let failed = false;
try {
  daemons.push(
    await startBuilt(
      'this checkout',
      ROOT,
      { ...env, ...(values.trace ? { LOG_LEVEL: 'trace' } : {}) },
      profDir ? ['--cpu-prof', `--cpu-prof-dir=${profDir}`, '--cpu-prof-interval=50'] : [],
    ),
  );
  for (const dir of values.compare) daemons.push(await startBuilt(path.resolve(dir), path.resolve(dir), env, []));
  for (const d of daemons) results.set(d, []);
  if (values.syscalls) syscalls = new SyscallCount(daemons[0]!.pid);
  for (let round = 0; round < WARMUP + TURNS; round++) {
    measuring = round >= WARMUP;
    // alternating which daemon goes first
    for (const d of round % 2 ? [...daemons].reverse() : daemons) {
      const t = await turn(d, llm);
      const dr = await direct(llm, JSON.stringify(llm.requests[llm.requests.length - 1]!.body));
      for (const q of llm.requests) q.body = undefined;
      if (round < WARMUP) continue;
      results.get(d)!.push(t);
      directs.push(dr);
    }
  }
  syscallCounts = syscalls ? await syscalls.counts() : null;
} catch (err) {
  console.error(`the benchmark failed: ${(err as Error).stack}`);
  for (const d of daemons) console.error(`last lines of ${d.label}:\n${d.output.slice(-10).join('\n')}`);
  failed = true;
} finally {
  for (const d of daemons) await d.stop();
  await llm.close();
  keepAlive.destroy();
}
if (failed) process.exit(1);

const p50Of = (key: 'kept' | 'fresh' | 'fetched') => median(directs.map((x) => x[key]));
const p90Of = (key: 'kept' | 'fresh' | 'fetched') =>
  quantile(
    directs.map((x) => x[key]),
    0.9,
  );
const kept = p50Of('kept');
const fetched = p50Of('fetched');
// the turn is set against the round trip of the same client as its POST
const baseline = values.client === 'fetch' ? fetched : kept;
const command =
  `npx tsx scripts/bench-turn.ts --turns ${TURNS} --warmup ` +
  `${WARMUP}${values.sandbox ? ` --sandbox ${values.sandbox}` : ''}${values.trace ? ' --trace' : ''}` +
  `${SETTLE_MS !== 100 ? ` --settle-ms ${SETTLE_MS}` : ''}${values.client !== 'http' ? ` --client ${values.client}` : ''}` +
  `${values.compare.map((c) => ` --compare ${c}`).join('')}${values.syscalls ? ' --syscalls' : ''}`;
console.log(
  `text turn × ${TURNS} per daemon (after ${WARMUP} warm-up turns), each in a new conversation with one WebSocket subscriber, instant scripted ` +
    `LLM${values.sandbox ? `, SANDBOX=${values.sandbox}` : ''}, the POST sent with ${values.client === 'fetch' ? 'fetch' : 'node:http'}; load ` +
    `average ${load0} at the start, ${load()} at the end (command: ${command})`,
);
console.log(
  `| | p50 ms | p90 ms | p50 / the ${values.client === 'fetch' ? 'fetch' : 'kept-alive'} round trip ` +
    "| the daemon's CPU per turn, all threads (median ms) | its minor page faults per turn (median) |",
);
console.log('|---|---:|---:|---:|---:|---:|');
for (const d of daemons) {
  const ms = results.get(d)!.map((t) => t.ms);
  const cpu = median(results.get(d)!.map((t) => t.cpu));
  const faults = median(results.get(d)!.map((t) => t.faults));
  console.log(
    `| text turn, ${d.label}${d.traced ? ' (traced)' : ''}: POST …/events {run:true} → terminal execution_status on the socket | ${f(median(ms))} ` +
      `| ${f(quantile(ms, 0.9))} | ${(median(ms) / baseline).toFixed(2)} | ${f(cpu)} | ${faults} |`,
  );
}
console.log(
  "| direct round trip: the daemon's request from this process to the same LLM server, node:http, kept-alive connection (as the daemon's client) |" +
    ` ${f(kept)} | ${f(p90Of('kept'))} | ${(kept / baseline).toFixed(2)} | | |`,
);
console.log(`| the same, node:http, a new connection | ${f(p50Of('fresh'))} | ${f(p90Of('fresh'))} | ${(p50Of('fresh') / baseline).toFixed(2)} | | |`);
console.log(`| the same with fetch (undici, kept alive) | ${f(fetched)} | ${f(p90Of('fetched'))} | ${(fetched / baseline).toFixed(2)} | | |`);

// ---- --syscalls: what the daemon asked of the kernel during the turns ----
if (syscallCounts) {
  const n = results.get(daemons[0]!)!.length;
  const total = syscallCounts.reduce((a, [, c]) => a + c, 0);
  console.log('');
  console.log(`the daemon's system calls during the turns (perf stat, all threads): ${(total / n).toFixed(1)} per turn; by call, per turn:`);
  for (const [name, c] of syscallCounts.slice(0, 25)) console.log(`  ${(c / n).toFixed(1).padStart(7)}  ${name}`);
}

// ---- where the time goes: phases between named marks, on one clock ----
const traced = daemons.find((d) => d.traced);
if (traced) {
  /** A turn's marks by name (the first of each name; `last:` the last), with this process's. */
  const marksOf = (t: Turn) => {
    const first = new Map<string, [number, number]>();
    const put = (name: string, at: number, cpu = Number.NaN) => {
      if (!first.has(name)) first.set(name, [at, cpu]);
    };
    put('POST sent', t.posted);
    put('POST answered', t.answered);
    put('LLM server: request arrived', t.llmReceived);
    put('LLM server: answer sent', t.llmAnswered);
    for (const [name, at, cpu] of t.trace ?? []) put(name, at, cpu);
    for (const fr of t.frames) put(`socket: ${fr.kind === 'ConversationStateUpdateEvent' ? `${fr.key}=${String(fr.value)}` : fr.kind}`, fr.at);
    return (name: string) => first.get(name);
  };
  const PHASES: [string, string, string][] = [
    ['HTTP in, route, validation, the service (this process → daemon)', 'POST sent', 'append MessageEvent'],
    ['the user message committed and published', 'append MessageEvent', 'published MessageEvent'],
    ['the run started (the POST answered beside it)', 'published MessageEvent', 'run started'],
    ['the run set up (its LLM, tools and their schemas)', 'run started', 'run set up'],
    ['the prompt built (history, instructions, system prompt)', 'run set up', 'prompt built'],
    ['the prompt converted for the provider', 'prompt built', 'LLM prompt converted'],
    ['the request body built', 'LLM prompt converted', 'LLM request body built'],
    ['the request sent, daemon → LLM server (in this process)', 'LLM request body built', 'LLM server: request arrived'],
    ['the LLM server answers', 'LLM server: request arrived', 'LLM server: answer sent'],
    ['LLM server → the answer read to its end', 'LLM server: answer sent', 'LLM answer ended'],
    ['the answer parsed into the response', 'LLM answer ended', 'LLM answered'],
    ['the usage recorded', 'LLM answered', 'usage recorded'],
    ['the answer and the status appended, committed and published', 'usage recorded', 'published execution_status=finished'],
    ['daemon → the subscriber (this process)', 'published execution_status=finished', 'socket: execution_status=finished'],
  ];
  const beside: [string, string, string][] = [
    ['POST sent → POST answered (this process)', 'POST sent', 'POST answered'],
    ["the request's 'finish' (node:http: written and flushed)", 'LLM request body built', 'LLM request sent'],
    ['the status running and the system prompt committed and published (beside the LLM request)', 'prompt built', 'published SystemPromptEvent'],
    ['the answer: headers → first chunk → last chunk', 'LLM answer headers', 'LLM answer ended'],
  ];
  const turns = results.get(traced)!;
  // --dump N: the marks of the first N traced turns, in order (ms from the POST; the daemon's CPU ms since it);
  // --dump-slowest N: of the N slowest
  const dumped = [...turns.slice(0, Number(values.dump)), ...[...turns].sort((a, b) => b.ms - a.ms).slice(0, Number(values['dump-slowest']))];
  for (const t of dumped) {
    const all: [string, number, number][] = [
      ['POST sent', t.posted, Number.NaN],
      ['POST answered', t.answered, Number.NaN],
      ['LLM server: request arrived', t.llmReceived, Number.NaN],
      ['LLM server: answer sent', t.llmAnswered, Number.NaN],
      ...(t.trace ?? []),
      ...t.frames.map((fr): [string, number, number] => [`socket: ${fr.kind} ${fr.key ?? ''}=${String(fr.value ?? '')}`, fr.at, Number.NaN]),
    ];
    all.sort((a, b) => a[1] - b[1]);
    const cpu0 = t.trace?.[0]?.[2] ?? 0;
    console.log('');
    for (const [name, at, cpu] of all)
      console.log(`${(at - t.posted).toFixed(3).padStart(8)} ${Number.isFinite(cpu) ? (cpu - cpu0).toFixed(3).padStart(7) : ''.padStart(7)}  ${name}`);
  }
  const row = (from: string, to: string) => {
    const wall: number[] = [];
    const cpu: number[] = [];
    for (const t of turns) {
      const at = marksOf(t);
      const a = at(from);
      const b = at(to);
      wall.push(a && b ? b[0] - a[0] : Number.NaN);
      cpu.push(a && b ? b[1] - a[1] : Number.NaN);
    }
    return { wall: median(wall), cpu: median(cpu), n: wall.filter(Number.isFinite).length };
  };
  console.log('');
  console.log(
    `where a turn's time goes (${traced.label}, traced; medians per phase; wall: on one clock for the daemon's marks and this process's; CPU: the ` +
      `daemon's, all threads, between two of its own marks):`,
  );
  console.log('| phase | from → to | wall ms | daemon CPU ms | turns |');
  console.log('|---|---|---:|---:|---:|');
  let sum = 0;
  let cpuSum = 0;
  for (const [name, from, to] of PHASES) {
    const r = row(from, to);
    sum += Number.isFinite(r.wall) ? r.wall : 0;
    cpuSum += Number.isFinite(r.cpu) ? r.cpu : 0;
    console.log(`| ${name} | ${from} → ${to} | ${f(r.wall)} | ${f(r.cpu)} | ${r.n} |`);
  }
  console.log(`| (sum of the medians) | | ${f(sum)} | ${f(cpuSum)} | |`);
  console.log(
    `| the traced turn (median) | POST sent → socket: execution_status=finished | ${f(median(turns.map((t) => t.ms)))} | ` +
      `${f(median(turns.map((t) => t.cpu)))} (all of it) | ${turns.length} |`,
  );
  for (const [name, from, to] of beside) {
    const r = row(from, to);
    console.log(`| beside: ${name} | ${from} → ${to} | ${f(r.wall)} | ${f(r.cpu)} | ${r.n} |`);
  }
}

// ---- --cpu-prof: the daemon's main thread during the turns, by function (self time) ----
if (profDir) {
  const turns = results.get(daemons[0]!)!;
  const windows = turns.map((t) => [t.postedMono, t.postedMono + t.ms * 1000] as const);
  let best: { total: number; fns: Map<string, number>; inclusive: Map<string, number> } | null = null;
  // The daemon runs from a minified bundle: each frame is named by the source line its bundle position maps to.
  const maps = new Map<string, TraceMap | null>();
  const where = (cf: { url: string; lineNumber: number; columnNumber: number }): string => {
    if (!maps.has(cf.url)) {
      let map: TraceMap | null = null;
      try {
        if (cf.url.startsWith('file://')) map = new TraceMap(fs.readFileSync(`${new URL(cf.url).pathname}.map`, 'utf8'));
      } catch {}
      maps.set(cf.url, map);
    }
    const map = maps.get(cf.url);
    const pos = map ? originalPositionFor(map, { line: cf.lineNumber + 1, column: cf.columnNumber }) : null;
    if (pos?.source) return `${pos.source.replace(/^(\.\.\/)+/, '')}:${pos.line}`;
    return `${cf.url.replace(/^.*\/(node_modules|src|bridge|dist)\//, '$1/')}:${cf.lineNumber + 1}`;
  };
  for (const file of fs.readdirSync(profDir).filter((x) => x.endsWith('.cpuprofile'))) {
    const prof = JSON.parse(fs.readFileSync(path.join(profDir, file), 'utf8')) as {
      nodes: { id: number; callFrame: { functionName: string; url: string; lineNumber: number; columnNumber: number } }[];
      startTime: number;
      samples: number[];
      timeDeltas: number[];
    };
    const byId = new Map(prof.nodes.map((n) => [n.id, n]));
    const parent = new Map<number, number>();
    for (const n of prof.nodes as { id: number; children?: number[] }[]) for (const c of n.children ?? []) parent.set(c, n.id);
    const fns = new Map<string, number>();
    const inclusive = new Map<string, number>();
    let total = 0;
    let t = prof.startTime;
    for (let i = 0; i < prof.samples.length; i++) {
      t += prof.timeDeltas[i] ?? 0;
      if (!windows.some(([a, b]) => t >= a && t <= b)) continue;
      const cf = byId.get(prof.samples[i]!)!.callFrame;
      if (cf.functionName === '(idle)') continue;
      const dt = (prof.timeDeltas[i] ?? 0) / 1000;
      const name = `${cf.functionName || '(anonymous)'} ${where(cf)}`;
      fns.set(name, (fns.get(name) ?? 0) + dt);
      total += dt;
      // inclusive: every function of the project on the stack, once
      const seen = new Set<string>();
      for (let id: number | undefined = prof.samples[i]!; id !== undefined; id = parent.get(id)) {
        const c = byId.get(id)!.callFrame;
        if (!/\/(dist|src|bridge)\//.test(c.url)) continue;
        const fn = `${c.functionName || '(anonymous)'} ${where(c)}`;
        if (fn.includes('node_modules/') || seen.has(fn)) continue;
        seen.add(fn);
        inclusive.set(fn, (inclusive.get(fn) ?? 0) + dt);
      }
    }
    if (!best || total > best.total) best = { total, fns, inclusive };
  }
  if (best) {
    console.log('');
    console.log(
      `the daemon's main thread during the turns (--cpu-prof samples, wall time while not idle: a busy machine inflates them): ` +
        `${f(best.total / turns.length)} ms per turn; the functions with the most self time, ms per turn:`,
    );
    for (const [name, ms] of [...best.fns.entries()].sort((a, b) => b[1] - a[1]).slice(0, 30)) console.log(`  ${f(ms / turns.length).padStart(6)}  ${name}`);
    console.log("the project's functions with the most time on the stack (inclusive), ms per turn:");
    for (const [name, ms] of [...best.inclusive.entries()].sort((a, b) => b[1] - a[1]).slice(0, 50))
      console.log(`  ${f(ms / turns.length).padStart(6)}  ${name}`);
  }
}
