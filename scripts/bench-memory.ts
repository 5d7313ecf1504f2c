/**
 * The daemon's memory at rest, beside a bare `node:http` server's in the same run, and what each module
 * of the bundle holds.
 *
 *   npx tsx scripts/bench-memory.ts [--runs 3] [--settle-ms 3000] [--conversations 1000] [--compare DIR]... [--modules]
 *
 * RSS (VmRSS, with its anonymous and file-backed parts, from /proc) of:
 *   - a bare node:http server answering 200 (the floor: Node itself);
 *   - the daemon as `npm start` runs it (`node dist/main.mjs` with the flags of package.json's start
 *     script, the build brought up to date first), `--settle-ms` after it listens (idle);
 *   - the same daemon after its first conversation: created, its socket opened, one text turn against
 *     the scripted LLM (test/support/scripted-llm.ts), the socket closed, then `--settle-ms`;
 *   - each of these two again 32 s later: at rest (V8's memory reducer has run; the store's index
 *     writer thread, started by the turn, has exited after its 30 s without a request);
 *   - after one turn that runs a shell command and edits a file (the sandbox's default mode);
 *   - after `--conversations` more conversations created, twice (the growth per 1,000: the first batch
 *     also pays what grows once, the second is what each further conversation holds).
 * and the floors of a start (scripts/start-floor.ts, built and started as the daemon is, as
 * `scripts/bench-startup.ts --floors` does): what the configuration, the logger and the port hold, and
 * that plus the data directory (the SQLite store with its journal; its index writer thread starts with
 * the first write).
 * `--compare DIR` measures another checkout's daemon (its build) the same way in each round.
 * Each of `--runs` rounds starts every process afresh; the medians are printed with the ratio of each
 * RSS to the bare server's.
 *
 * `--modules`: what each module of the bundle holds on the heap. The bundle (dist/daemon.cjs) is
 * copied with esbuild's module wrappers (`__esm`, `__commonJS`) instrumented (test/support/module-probe.ts):
 * each module's first evaluation is timed and its heap measured (after a full GC, before and after, less
 * what the modules it loads hold), then the daemon runs from that copy. Printed once it listens and settled, and again
 * after its first text turn (what the turn loaded), by package (node_modules) and by directory of the
 * project, largest first.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import WebSocket from 'ws';
import { ensureBuilt, startFlags, freePort, sleep, tempDir, waitFor } from '../test/support/daemon.js';
import { instrumentedBundle, type EvaluatedModule } from '../test/support/module-probe.js';
import { startScriptedLlm, type ScriptedLlm } from '../test/support/scripted-llm.js';

const { values } = parseArgs({
  options: {
    runs: { type: 'string', default: '3' },
    'settle-ms': { type: 'string', default: '3000' },
    conversations: { type: 'string', default: '1000' },
    modules: { type: 'boolean', default: false },
    compare: { type: 'string', multiple: true, default: [] },
  },
});
const RUNS = Number(values.runs);
const SETTLE = Number(values['settle-ms']);
const CONVERSATIONS = Number(values.conversations);
const ROOT = path.resolve(import.meta.dirname, '..');
const MiB = 1024 * 1024;

/** VmRSS and its anonymous and file-backed parts (bytes). */
function rssOf(pid: number): { rss: number; anon: number; file: number } {
  const st = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = (k: string) => Number(new RegExp(`${k}:\\s+(\\d+) kB`).exec(st)?.[1] ?? Number.NaN) * 1024;
  return { rss: kb('VmRSS'), anon: kb('RssAnon'), file: kb('RssFile') };
}

function request(port: number, method: string, p: string, body?: unknown): Promise<{ status: number; json: any }> {
  return new Promise((resolve, reject) => {
    const data = body === undefined ? undefined : JSON.stringify(body);
    const req = http.request(
      {
        host: '127.0.0.1',
        port,
        method,
        path: p,
        agent: false,
        headers: data ? { 'content-type': 'application/json', 'content-length': Buffer.byteLength(data) } : {},
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          let json: unknown;
          try {
            json = JSON.parse(text);
          } catch {
            json = text;
          }
          resolve({ status: res.statusCode ?? 0, json });
        });
      },
    );
    req.on('error', reject);
    req.end(data);
  });
}

interface Proc {
  proc: ChildProcess;
  port: number;
  output: string[];
  stop(): Promise<void>;
}

/** Spawns `argv` (in `cwd`) with PORT and DATA_DIR; resolves once `ready(port)` holds. */
async function start(argv: string[], env: Record<string, string>, ready: (port: number) => Promise<boolean>, cwd = ROOT): Promise<Proc> {
  const port = await freePort();
  const dataDir = tempDir('parley-bench-memory-');
  const proc = spawn(argv[0]!, argv.slice(1), {
    cwd,
    env: { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: process.env.HOME ?? os.tmpdir(), PORT: String(port), DATA_DIR: dataDir, LOG_LEVEL: 'warn', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const output: string[] = [];
  let partial = '';
  const feed = (c: Buffer) => {
    const lines = (partial + c.toString('utf8')).split('\n');
    partial = lines.pop()!;
    output.push(...lines);
  };
  proc.stdout!.on('data', feed);
  proc.stderr!.on('data', feed);
  const exited = new Promise<void>((r) => proc.once('exit', () => r()));
  await waitFor(
    async () => {
      if (proc.exitCode !== null) throw new Error(`${argv.join(' ')} exited with ${proc.exitCode}:\n${output.join('\n')}`);
      return ready(port).catch(() => false);
    },
    `${argv.join(' ')} to answer`,
    60_000,
  );
  return {
    proc,
    port,
    output,
    async stop() {
      proc.kill('SIGTERM');
      await exited;
      fs.rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

/** The daemon, listening and its sandbox probe decided. */
const daemonReady = async (port: number) => {
  const r = await request(port, 'GET', '/server_info');
  return r.status === 200 && r.json.sandbox?.mode !== 'probing';
};

/** A new conversation with one subscriber on its socket, one turn (`replies` queued first), the socket closed. */
async function conversationTurn(port: number, llm: ScriptedLlm, replies: Parameters<ScriptedLlm['push']>, text: string): Promise<void> {
  const id = (await request(port, 'POST', '/api/conversations', {})).json.conversation_id as string;
  const ws = new WebSocket(`ws://127.0.0.1:${port}/sockets/events/${id}`, { perMessageDeflate: false });
  const ended = new Promise<void>((resolve, reject) => {
    ws.on('message', (data: Buffer) => {
      const ev = JSON.parse(data.toString('utf8'));
      if (ev.key === 'execution_status' && ['finished', 'error', 'stuck', 'paused'].includes(ev.value)) {
        if (ev.value === 'finished') resolve();
        else reject(new Error(`the turn ended ${ev.value}`));
      }
    });
    ws.once('error', reject);
  });
  await new Promise((r) => ws.once('open', r));
  llm.push(...replies);
  const r = await request(port, 'POST', `/api/conversations/${id}/events`, { role: 'user', content: [{ type: 'text', text }], run: true });
  if (r.status !== 200) throw new Error(`POST events: ${r.status} ${JSON.stringify(r.json)}`);
  await ended;
  ws.close();
}

/**
 * At rest: how long the store's index writer thread stays without a request (src/store/index-writer.ts),
 * and a margin. By then V8's memory reducer has also run its collections (it starts ~8 s after the heap
 * grew and repeats while the daemon allocates little), which give back young generation and
 * fragmented pages a start or a turn left.
 */
const AT_REST_MS = 30_000 + 2_000;

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const mib = (b: number) => (b / MiB).toFixed(1);
const load = () =>
  os
    .loadavg()
    .map((l) => l.toFixed(1))
    .join(' ');

await ensureBuilt();
const llm = await startScriptedLlm();
const daemonEnv = { LLM_MODEL: 'openai/scripted', LLM_BASE_URL: llm.url, LLM_API_KEY: 'sk-bench' };

if (values.modules) {
  await modules();
  await llm.close();
  process.exit(0);
}

type Sample = { rss: number; anon: number; file: number };
/** Rows in the order they are printed: a label and its samples (one per run). */
const rows = new Map<string, Sample[]>();
const push = (row: string, sample: Sample) => rows.set(row, [...(rows.get(row) ?? []), sample]);
const growth = new Map<string, number[]>();
const load0 = load();
const floorDir = await buildFloor();
const health = async (port: number) => (await request(port, 'GET', '/health')).status === 200;
const checkouts: [string, string][] = [['', ROOT], ...values.compare.map((dir): [string, string] => [`${dir}: `, path.resolve(dir)])];
for (let run = 0; run < RUNS; run++) {
  const bare = await start(
    [process.execPath, '-e', "require('node:http').createServer((q, s) => s.end('ok')).listen(Number(process.env.PORT), '127.0.0.1')"],
    {},
    async (port) => {
      return (await request(port, 'GET', '/')).status === 200;
    },
  );
  await sleep(SETTLE);
  push('bare node:http server', rssOf(bare.proc.pid!));
  await bare.stop();
  for (const [row, env] of [
    ['floor: configuration, logger, port', { FLOOR: 'port' }],
    ['floor: configuration, logger, data directory, port', {}],
  ] as const) {
    const floor = await start([process.execPath, ...startFlags(ROOT), 'dist/main.mjs'], env, health, floorDir);
    await sleep(SETTLE);
    push(row, rssOf(floor.proc.pid!));
    await floor.stop();
  }
  for (const [label, cwd] of checkouts) await measureDaemon(label, cwd);
}
await llm.close();
fs.rmSync(floorDir, { recursive: true, force: true });

/** The daemon of the checkout `cwd` (its build): idle, after its first conversation, after a tool turn, after CONVERSATIONS more. */
async function measureDaemon(label: string, cwd: string): Promise<void> {
  const d = await start([process.execPath, ...startFlags(cwd), 'dist/main.mjs'], daemonEnv, daemonReady, cwd);
  try {
    const pid = d.proc.pid!;
    await sleep(SETTLE);
    push(`${label}daemon, idle after start`, rssOf(pid));
    await sleep(Math.max(0, AT_REST_MS - SETTLE));
    push(`${label}the same, ${AT_REST_MS / 1000} s after the start (V8's memory reducer has run)`, rssOf(pid));
    await conversationTurn(d.port, llm, [{ text: 'hello' }], 'say hello');
    await sleep(SETTLE);
    push(`${label}after its first conversation (a text turn)`, rssOf(pid));
    await sleep(Math.max(0, AT_REST_MS - SETTLE));
    push(`${label}the same, ${AT_REST_MS / 1000} s after the turn (the index writer thread, if one started, has exited)`, rssOf(pid));
    await conversationTurn(
      d.port,
      llm,
      [
        { toolCalls: [{ name: 'terminal', arguments: { command: 'echo hello' } }] },
        { toolCalls: [{ name: 'file_editor', arguments: { command: 'create', path: '/workspace/hello.txt', file_text: 'hello\n' } }] },
        { text: 'done' },
      ],
      'say hello in a file',
    );
    await sleep(SETTLE);
    const before = rssOf(pid);
    push(`${label}after a turn with a shell command and a file edit`, before);
    // two batches: the first also pays what grows once (the heap sized for the burst of creates,
    // SQLite's page cache, malloc's arenas); the second is what each further conversation holds
    let last = before;
    for (const batch of ['the first', 'the next']) {
      let next = 0;
      await Promise.all(
        Array.from({ length: 8 }, async () => {
          while (next < CONVERSATIONS) {
            next++;
            const r = await request(d.port, 'POST', '/api/conversations', {});
            if (r.status !== 200) throw new Error(`create: ${r.status}`);
          }
        }),
      );
      await sleep(SETTLE);
      const now = rssOf(pid);
      const key = `${label}growth per 1,000 idle conversations, ${batch} ${CONVERSATIONS} created`;
      growth.set(key, [...(growth.get(key) ?? []), ((now.rss - last.rss) * 1000) / CONVERSATIONS]);
      last = now;
    }
  } finally {
    await d.stop();
  }
}

const bareRss = median(rows.get('bare node:http server')!.map((r) => r.rss));
console.log(
  `memory at rest (VmRSS ${SETTLE} ms after each step, median of ${RUNS} runs, each a fresh process); load average ${load0} at the start, ` +
    `${load()} at the end (command: npx tsx scripts/bench-memory.ts --runs ` +
    `${RUNS}${SETTLE !== 3000 ? ` --settle-ms ${SETTLE}` : ''}${CONVERSATIONS !== 1000 ? ` --conversations ${CONVERSATIONS}` : ''}` +
    `${values.compare.map((c) => ` --compare ${c}`).join('')})`,
);
console.log('| | RSS MiB | anonymous MiB | file-backed MiB | RSS / the bare server |');
console.log('|---|---:|---:|---:|---:|');
for (const [name, rs] of rows) {
  const rss = median(rs.map((r) => r.rss));
  console.log(`| ${name} | ${mib(rss)} | ${mib(median(rs.map((r) => r.anon)))} | ${mib(median(rs.map((r) => r.file)))} | ${(rss / bareRss).toFixed(2)} |`);
}
for (const [label, g] of growth) console.log(`| ${label} | +${mib(median(g))} | | | |`);
console.log(`the goal: idle ≤ 70 MiB and ≤ 1.6 × the bare server (${mib(1.6 * bareRss)} MiB in this run)`);

/** scripts/start-floor.ts, built as the daemon is (scripts/build.mjs) into a directory of its own. */
async function buildFloor(): Promise<string> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'parley-bench-floor-'));
  // the bundle resolves its native addons from node_modules next to its directory, as in a checkout
  fs.symlinkSync(path.join(ROOT, 'node_modules'), path.join(dir, 'node_modules'));
  const { build } = (await import(path.join(ROOT, 'scripts', 'build.mjs'))) as {
    build(dist: string, opts: { entry: string; withConsole: boolean }): Promise<void>;
  };
  await build(path.join(dir, 'dist'), { entry: 'scripts/start-floor.ts', withConsole: false });
  return dir;
}

// ================================================================================================
// --modules: the heap each module of the bundle holds
// ================================================================================================

async function modules(): Promise<void> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'parley-bench-modules-'));
  try {
    const runner = instrumentedBundle(path.join(ROOT, 'dist'), dir);
    const d = await start([process.execPath, '--expose-gc', ...startFlags(ROOT), runner], daemonEnv, daemonReady);
    const take = async (): Promise<EvaluatedModule[]> => {
      const at = d.output.length;
      d.proc.kill('SIGUSR2');
      const line = await waitFor(() => d.output.slice(at).find((l) => l.startsWith('parley-modules ')), 'the module report');
      return JSON.parse(line!.slice('parley-modules '.length));
    };
    try {
      await sleep(SETTLE);
      const atStart = await take();
      await conversationTurn(d.port, llm, [{ text: 'hello' }], 'say hello');
      await sleep(SETTLE);
      const byTurn = await take();
      report('evaluated by the start (until the daemon listens and its sandbox probe decided)', atStart);
      report('evaluated by the first text turn', byTurn);
    } finally {
      await d.stop();
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

/** Modules grouped by package (node_modules/<name>) or directory of the project, largest heap first. */
function report(title: string, mods: EvaluatedModule[]): void {
  const groups = new Map<string, { heap: number; rss: number; ms: number; n: number }>();
  for (const m of mods) {
    const pkg = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(m.name)?.[1];
    const key = pkg ? `package ${pkg}` : m.name.startsWith('builtin:') ? 'Node built-ins' : m.name.replace(/\/[^/]+$/, '/');
    const g = groups.get(key) ?? { heap: 0, rss: 0, ms: 0, n: 0 };
    g.heap += m.heap;
    g.rss += m.rss;
    g.ms += m.ms;
    g.n++;
    groups.set(key, g);
  }
  const total = mods.reduce((s, m) => s + m.heap, 0);
  const totalRss = mods.reduce((s, m) => s + m.rss, 0);
  console.log('');
  console.log(`${title}: ${mods.length} modules, ${mib(total)} MiB of heap after a full GC, RSS +${mib(totalRss)} MiB while they were evaluated`);
  console.log('| package or directory | modules | heap KiB | RSS KiB | evaluation ms (GCs included) |');
  console.log('|---|---:|---:|---:|---:|');
  for (const [k, g] of [...groups].sort((a, b) => b[1].heap - a[1].heap).slice(0, 30)) {
    console.log(`| ${k} | ${g.n} | ${(g.heap / 1024).toFixed(0)} | ${(g.rss / 1024).toFixed(0)} | ${g.ms.toFixed(0)} |`);
  }
  console.log('the largest modules (KiB):');
  console.log(
    `  ${[...mods]
      .sort((a, b) => b.heap - a.heap)
      .slice(0, 20)
      .map((m) => `${m.name} ${(m.heap / 1024).toFixed(0)}`)
      .join('; ')}`,
  );
}
