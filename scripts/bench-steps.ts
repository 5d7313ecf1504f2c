/**
 * What an agent step costs the daemon, as the history grows. One conversation runs N steps
 * (default 1,000) against the scripted OpenAI-compatible LLM, each step one terminal call
 * (`echo step <i>`), through the public API of a real daemon. A step's overhead is the gap between
 * the LLM's reply being completely sent and the daemon's next completion request arriving: it holds
 * recording the action, running the shell command, recording the observation, stuck detection and
 * building the next prompt. Prints the median gap around steps 10, 100 and 1,000 (and the last
 * step of a shorter run; a window of ±`window` steps), their ratio to the first, and the load average.
 *
 * `--cpu-prof DIR` writes the daemon's CPU profile there (open it in Chrome DevTools or speedscope).
 *
 *   npx tsx scripts/bench-steps.ts [--steps 1000] [--window 10] [--cpu-prof DIR]
 *
 * `--hello` instead profiles the turn of a `hello` task end to end : four LLM
 * calls (shell, create, edit, finish), repeated over --turns conversations, timed from outside (the scripted
 * LLM's request arrival and answer times, a WebSocket subscriber's event arrival times, the events' own
 * timestamps) and with the daemon under `--cpu-prof` for the split of its CPU time per step; the CPU time of the
 * daemon's sandbox spawner (src/sandbox/spawner.ts: the process that starts the holders' programs) is printed apart.
 *
 *   npx tsx scripts/bench-steps.ts --hello [--turns 30] [--no-profile]   (--no-profile: the times without the profiler)
 *
 * The daemon is the one the tests start (test/support/daemon.ts): the build, `dist/main.mjs`, with the node flags
 * of `npm start` (package.json's start script); with
 * PARLEY_TEST_FROM_SOURCE=1 the sources through tsx, whose profile frames name src/ modules (the split by part).
 *
 * `--llm-client` measures the LLM client alone, in this process, in the same run: the four answers of a
 * `hello` turn (and a history growing by them) through the own Chat Completions client and through the AI
 * SDK provider's (`chatCompletionsClient: 'ai-sdk'`), in alternating rounds; per step the time from the
 * scripted LLM's answer sent to `complete()` resolved, and this process's CPU time (the scripted LLM's
 * included, the same for both), with the ratio own / AI SDK.
 *
 *   npx tsx scripts/bench-steps.ts --llm-client [--rounds 6] [--turns 30]
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { startDaemon, startFlags } from '../test/support/daemon.js';
import { helloTurn, startScriptedLlm } from '../test/support/scripted-llm.js';
import type { LlmToolSpec } from '../src/llm/types.js';
import type { ModelMessage } from 'ai';
import WebSocket from 'ws';

const { values } = parseArgs({
  options: {
    steps: { type: 'string', default: '1000' },
    window: { type: 'string', default: '10' },
    'cpu-prof': { type: 'string' },
    hello: { type: 'boolean' },
    turns: { type: 'string', default: '30' },
    'no-profile': { type: 'boolean' },
    'llm-client': { type: 'boolean' },
    rounds: { type: 'string', default: '6' },
  },
});
if (values['llm-client']) {
  process.exitCode = await llmClientBench(Number(values.rounds), Number(values.turns));
  process.exit();
}
if (values.hello) {
  process.exitCode = await helloBench(Number(values.turns), !values['no-profile']);
  process.exit();
}
const steps = Number(values.steps);
const window = Number(values.window);

const llm = await startScriptedLlm();
for (let i = 1; i <= steps; i++) llm.push({ toolCalls: [{ name: 'terminal', arguments: { command: `echo step ${i}` } }] });
llm.push({ toolCalls: [{ name: 'finish', arguments: { message: 'done' } }] });
const d = await startDaemon(
  {
    LLM_MODEL: 'openai/scripted',
    LLM_BASE_URL: llm.url,
    LLM_API_KEY: 'k',
    MAX_ITERATIONS: String(steps + 10),
    LLM_CONTEXT_WINDOW: '10000000',
    LOG_LEVEL: 'info',
  },
  undefined,
  {
    nodeArgs: [...startFlags(), ...(values['cpu-prof'] ? ['--cpu-prof', `--cpu-prof-dir=${values['cpu-prof']}`] : [])],
  },
);
try {
  const started = performance.now();
  let shown = started;
  const r = await d.req('POST', '/api/conversations', { initial_user_msg: 'run the steps' });
  const id = r.body.conversation_id as string;
  for (;;) {
    await new Promise((res) => setTimeout(res, 200));
    // a poll that fails (a reused keep-alive connection reset) is simply made again
    const s = (await d.req('GET', `/api/conversations/${id}`).catch(() => null))?.body.execution_status;
    if (d.proc.exitCode !== null || d.proc.signalCode !== null) throw new Error('the daemon exited');
    // the scripted LLM keeps every request: their bodies (the whole history each) would fill this process's
    // heap and its GC would delay the next request's arrival time, which is what is measured
    for (const q of llm.requests) if (q.answeredAt !== undefined) q.body = undefined;
    if (s === undefined) continue;
    if (performance.now() - shown > 10_000) {
      shown = performance.now();
      process.stderr.write(`  ${llm.requests.length - 1}/${steps} steps, status ${s}\n`);
    }
    if (s !== 'running' && s !== 'idle' && llm.requests.length > steps) break;
    if (s === 'error' || s === 'stuck') throw new Error(`the run ended with ${s}`);
  }
  const total = (performance.now() - started) / 1000;
  // gap[i]: from the end of answer i (1-based: the reply that asked for step i) to request i+1
  const gaps: number[] = [];
  for (let i = 0; i + 1 < llm.requests.length; i++) gaps.push(llm.requests[i + 1]!.receivedAt - llm.requests[i]!.answeredAt!);
  const median = (xs: number[]) => {
    const s = [...xs].sort((a, b) => a - b);
    return s[Math.floor(s.length / 2)]!;
  };
  const at = (step: number) => median(gaps.slice(Math.max(0, step - 1 - window), Math.min(gaps.length, step - 1 + window)));
  const points = [...new Set([10, 100, 1000, steps])].filter((p) => p <= steps);
  const base = at(points[0]!);
  console.log(
    `steps=${steps} total=${total.toFixed(1)} s load=${os
      .loadavg()
      .map((l) => l.toFixed(2))
      .join(' ')} (command: npx tsx scripts/bench-steps.ts --steps ${steps} --window ${window})`,
  );
  console.log('step | median gap ms | ratio to step 10');
  for (const p of points) console.log(`${String(p).padStart(4)} | ${at(p).toFixed(2).padStart(13)} | ${(at(p) / base).toFixed(2)}`);
} catch (err) {
  console.error(
    `the benchmark failed: ${(err as Error).message} (${String((err as Error).cause)}; daemon exit ${d.proc.exitCode} ${d.proc.signalCode})\nlast ` +
      `daemon lines:\n${d.output.slice(-20).join('\n')}`,
  );
  process.exitCode = 1;
} finally {
  await d.stop();
  await llm.close();
  fs.rmSync(d.dataDir, { recursive: true, force: true });
}

// ================================================================================================
// --hello: where the time of one `hello` turn goes, step by step
// ================================================================================================

interface Seen {
  kind: string;
  source?: string;
  tool?: string;
  key?: string;
  value?: unknown;
  /** when the daemon created it (its timestamp, ms) and when it arrived here (wall clock, ms, sub-ms) */
  created: number;
  arrived: number;
}

// (function declarations: --hello runs from the top of the file, before these lines are reached)
function wallNow(): number {
  return performance.timeOrigin + performance.now();
}
function monoUs(): number {
  return Number(process.hrtime.bigint() / 1000n);
}

/**
 * Busy time of the daemon's profile within the windows (µs, CLOCK_MONOTONIC), attributed to the nearest src/
 * frame on the stack; and the same per tagged interval (a part of a step).
 */
function profileSplit(
  file: string,
  windows: [number, number][],
  intervals: { from: number; to: number; tag: string }[],
): { ms: Map<string, number>; fns: Map<string, Map<string, number>>; byTag: Map<string, Map<string, number>>; totalMs: number } {
  const prof = JSON.parse(fs.readFileSync(file, 'utf8')) as {
    nodes: { id: number; callFrame: { functionName: string; url: string }; children?: number[] }[];
    startTime: number;
    samples: number[];
    timeDeltas: number[];
  };
  const byId = new Map(prof.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of prof.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const category = (url: string): string | null => {
    const m = /\/src\/([^/]+)\/?([^/]*)/.exec(url.replace(/^file:\/\//, ''));
    if (!m || url.includes('/node_modules/')) return null;
    const [, dir, file] = m;
    if (dir === 'llm') return 'LLM client (request build, HTTP, stream parse)';
    if (dir === 'tools' || dir === 'sandbox' || dir === 'workspace') return 'tools (shell, files, sandbox)';
    if (dir === 'store') return 'event append (store)';
    if (dir === 'events' || (dir === 'api' && file === 'subscription.ts')) return 'events and WebSocket publish';
    if (dir === 'agent') return 'agent loop (prompt view, stuck check)';
    if (dir === 'api') return 'REST API';
    return `src/${dir}`;
  };
  const libraryCategory = (url: string): string | null => {
    // node:http's client: the daemon's only outgoing HTTP during a turn is the LLM request (src/llm/chat-completions.ts)
    if (/\/node_modules\/(@ai-sdk|zod|eventsource-parser)\/|node:internal\/(webstreams|deps\/undici)|node:_http_(client|common|outgoing|incoming)/.test(url))
      return 'LLM client (request build, HTTP, stream parse)';
    if (/node:internal\/worker|\/node_modules\/better-sqlite3\//.test(url)) return 'event append (store)';
    if (/\/bridge\/ws\.ts|\/node_modules\/(ws|uWebSockets\.js)\//.test(url)) return 'events and WebSocket publish';
    return null;
  };
  const ms = new Map<string, number>();
  const fns = new Map<string, Map<string, number>>();
  const byTag = new Map<string, Map<string, number>>();
  let t = prof.startTime;
  let totalMs = 0;
  for (let i = 0; i < prof.samples.length; i++) {
    const dt = prof.timeDeltas[i] ?? 0;
    t += dt;
    if (!windows.some(([a, b]) => t >= a && t <= b)) continue;
    const leaf = byId.get(prof.samples[i]!)!;
    if (leaf.callFrame.functionName === '(idle)') continue;
    let cat: string | null = null;
    let at = '';
    for (let cur: number | undefined = leaf.id; cur !== undefined && !cat; cur = parent.get(cur)) {
      const cf = byId.get(cur)!.callFrame;
      cat = category(cf.url);
      if (cat && cur !== leaf.id) at = ` ← ${cf.functionName || '(anonymous)'} ${cf.url.replace(/^.*\/src\//, 'src/')}`;
    }
    // a stack with no src/ frame (a stream or I/O callback): the nearest frame of a library whose job is known
    for (let cur: number | undefined = leaf.id; cur !== undefined && !cat; cur = parent.get(cur)) cat = libraryCategory(byId.get(cur)!.callFrame.url);
    const name = cat ?? (leaf.callFrame.functionName === '(garbage collector)' ? 'garbage collector' : 'no src/ frame (Node internals, I/O callbacks)');
    ms.set(name, (ms.get(name) ?? 0) + dt / 1000);
    const fn =
      `${leaf.callFrame.functionName || '(anonymous)'} ${leaf.callFrame.url.replace(/^.*\/node_modules\//, '').replace(/^.*\/src\//, 'src/')}`.trim() + at;
    const m = fns.get(name) ?? new Map<string, number>();
    m.set(fn, (m.get(fn) ?? 0) + dt / 1000);
    fns.set(name, m);
    totalMs += dt / 1000;
    for (const iv of intervals) {
      if (t < iv.from || t > iv.to) continue;
      const tm = byTag.get(iv.tag) ?? new Map<string, number>();
      tm.set(name, (tm.get(name) ?? 0) + dt / 1000);
      byTag.set(iv.tag, tm);
      // and by function, per part over all steps (the tag's part after '|')
      const part = `part|${iv.tag.split('|')[1]}`;
      const fm = byTag.get(part) ?? new Map<string, number>();
      fm.set(fn, (fm.get(fn) ?? 0) + dt / 1000);
      byTag.set(part, fm);
    }
  }
  return { ms, fns, byTag, totalMs };
}

async function helloBench(turns: number, profile: boolean): Promise<number> {
  const warm = 3;
  const profDir = fs.mkdtempSync(path.join(os.tmpdir(), 'parley-hello-prof-'));
  const llm = await startScriptedLlm();
  const d = await startDaemon({ LLM_MODEL: 'openai/scripted', LLM_BASE_URL: llm.url, LLM_API_KEY: 'k', LOG_LEVEL: 'info' }, undefined, {
    nodeArgs: [...startFlags(), ...(profile ? ['--cpu-prof', `--cpu-prof-dir=${profDir}`, '--cpu-prof-interval=1000'] : [])],
  });
  const load0 = os.loadavg();
  const rows: { reqAt: number[]; ansAt: number[]; posted: number; seen: Seen[] }[] = [];
  /** each measured turn, from the POST of its message to its end reaching the subscriber (µs, CLOCK_MONOTONIC) */
  const windows: [number, number][] = [];
  /** the daemon's CPU time (all its threads, /proc/<pid>/stat utime+stime, 10 ms ticks) over the same turns */
  let cpuTicks = 0;
  const ticksOf = (pid: number | undefined) => {
    if (!pid) return 0;
    try {
      const st = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
      const fl = st.slice(st.lastIndexOf(')') + 2).split(' ');
      return Number(fl[11]) + Number(fl[12]);
    } catch {
      return 0;
    }
  };
  const ticks = () => ticksOf(d.proc.pid);
  /** the sandbox's spawner (src/sandbox/spawner.ts: the daemon's process that starts the holders' programs), counted apart */
  let spawnerTicks = 0;
  const spawnerPid = (): number | undefined => {
    for (const p of fs.readdirSync('/proc')) {
      if (!/^\d+$/.test(p)) continue;
      try {
        const stat = fs.readFileSync(`/proc/${p}/stat`, 'utf8');
        if (stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1] !== String(d.proc.pid)) continue;
        if (fs.readFileSync(`/proc/${p}/cmdline`, 'utf8').includes('spawner-process.pl')) return Number(p);
      } catch {
        // gone meanwhile
      }
    }
    return undefined;
  };
  try {
    for (let turn = 0; turn < warm + turns; turn++) {
      const id = (await d.req('POST', '/api/conversations', {})).body.conversation_id as string;
      const ws = `${d.dataDir}/workspaces/${id.replace(/-/g, '')}`;
      // wait for the workspace to be ready, so the turn measures the turn
      for (let i = 0; ; i++) {
        const phase = (await d.req('GET', `/api/conversations/${id}`)).body.setup?.phase;
        if (phase !== 'pending' && phase !== 'preparing') break;
        if (i > 300) throw new Error(`workspace of ${id} still ${phase}`);
        await new Promise((r) => setTimeout(r, 50));
      }
      llm.push(...helloTurn(ws));
      const seen: Seen[] = [];
      const sock = new WebSocket(`ws://127.0.0.1:${d.port}/sockets/events/${id}`, { perMessageDeflate: false });
      let first = true;
      const ready = new Promise<void>((resolve, reject) => {
        sock.on('message', (data: Buffer) => {
          const arrived = wallNow();
          if (first) {
            first = false;
            resolve();
            return;
          }
          const ev = JSON.parse(data.toString('utf8'));
          seen.push({
            kind: ev.kind,
            source: ev.source,
            tool: ev.tool_name ?? ev.action?.kind,
            key: ev.key,
            value: ev.value,
            created: Date.parse(ev.timestamp),
            arrived,
          });
        });
        sock.once('error', reject);
      });
      await ready;
      const base = llm.requests.length;
      const postedUs = monoUs();
      const ticks0 = ticks();
      const sp = spawnerPid();
      const spawnerTicks0 = ticksOf(sp);
      const posted = wallNow();
      const r = await d.req('POST', `/api/conversations/${id}/events`, {
        role: 'user',
        content: [{ type: 'text', text: 'say hello, then write it to hello.txt' }],
        run: true,
      });
      if (r.status !== 200) throw new Error(`POST events: ${r.status} ${r.text}`);
      const finished = () => seen.some((e) => e.kind === 'ConversationStateUpdateEvent' && e.key === 'execution_status' && e.value === 'finished');
      const until = Date.now() + 60_000;
      while (!finished()) {
        if (Date.now() > until) throw new Error(`turn ${turn} did not finish; events: ${seen.map((e) => `${e.kind}/${e.tool ?? e.key ?? ''}`).join(', ')}`);
        if (seen.some((e) => e.kind === 'ConversationStateUpdateEvent' && e.key === 'execution_status' && (e.value === 'error' || e.value === 'stuck')))
          throw new Error(`turn ${turn} ended in error`);
        await new Promise((res) => setTimeout(res, 5));
      }
      if (turn >= warm) {
        windows.push([postedUs, monoUs()]);
        cpuTicks += ticks() - ticks0;
        spawnerTicks += ticksOf(sp) - spawnerTicks0;
      }
      sock.close();
      const reqs = llm.requests.slice(base);
      if (reqs.length !== 4) throw new Error(`turn ${turn}: ${reqs.length} LLM requests, expected 4`);
      // the scripted LLM's times are performance.now() of this process: on the wall clock
      if (turn >= warm)
        rows.push({
          reqAt: reqs.map((q) => performance.timeOrigin + q.receivedAt),
          ansAt: reqs.map((q) => performance.timeOrigin + q.answeredAt!),
          posted,
          seen,
        });
      for (const q of llm.requests) q.body = undefined;
    }
  } catch (err) {
    console.error(`the benchmark failed: ${(err as Error).message}\nlast daemon lines:\n${d.output.slice(-20).join('\n')}`);
    await d.stop();
    await llm.close();
    return 1;
  }
  await d.stop();
  await llm.close();
  fs.rmSync(d.dataDir, { recursive: true, force: true });

  // ---- from outside, per step ----
  const median = (xs: number[]) => {
    const s = xs.filter(Number.isFinite).sort((a, b) => a - b);
    return s.length ? s[Math.floor(s.length / 2)]! : NaN;
  };
  const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
  const names = ['shell', 'create', 'edit', 'finish'];
  type Col = { build: number; llm: number; toAction: number; actionPublish: number; tool: number; obsPublish: number; own: number };
  const cols: Col[][] = names.map(() => []);
  // the parts of each step on the daemon's clock, for the profile: wall ms here → CLOCK_MONOTONIC µs
  const monoOffset = monoUs() - wallNow() * 1000;
  const mono = (wallMs: number) => wallMs * 1000 + monoOffset;
  const PARTS = [
    'LLM request → answer sent (the LLM)',
    'answer sent → action at the subscriber',
    'action → observation at the subscriber (the tool)',
    'observation → next LLM request (or the end)',
  ];
  const intervals: { from: number; to: number; tag: string }[] = [];
  const first: number[] = [];
  for (const r of rows) {
    const actions = r.seen.filter((e) => e.kind === 'ActionEvent');
    const obs = r.seen.filter((e) => e.kind === 'ObservationEvent');
    const userMsg = r.seen.find((e) => e.kind === 'MessageEvent' && e.source === 'user');
    const done = r.seen.find((e) => e.kind === 'ConversationStateUpdateEvent' && e.key === 'execution_status' && e.value === 'finished')!;
    first.push(r.reqAt[0]! - r.posted);
    for (let k = 0; k < 4; k++) {
      const a = actions[k];
      const o = obs[k];
      // the step ends at the next LLM request, or for finish at the state change reaching the subscriber
      const end = k < 3 ? r.reqAt[k + 1]! : done.arrived;
      const prev = k === 0 ? (userMsg?.arrived ?? r.posted) : (obs[k - 1]?.arrived ?? NaN);
      const tool = a && o ? o.created - a.created : 0;
      if (a && o) {
        const marks = [r.reqAt[k]!, r.ansAt[k]!, a.arrived, o.arrived, end];
        for (let j = 0; j < 4; j++) intervals.push({ from: mono(marks[j]!), to: mono(marks[j + 1]!), tag: `${names[k]}|${j}` });
      }
      cols[k]!.push({
        build: r.reqAt[k]! - prev,
        llm: r.ansAt[k]! - r.reqAt[k]!,
        toAction: a ? a.arrived - r.ansAt[k]! : NaN,
        actionPublish: a ? a.arrived - a.created : NaN,
        tool,
        obsPublish: o ? o.arrived - o.created : NaN,
        own: end - r.ansAt[k]! - tool,
      });
    }
  }
  const f = (x: number) => (Number.isFinite(x) ? x.toFixed(2) : '—');
  const load1 = os.loadavg();
  console.log(
    `hello turn × ${turns} (after ${warm} warm-up turns), load average ${load0.map((l) => l.toFixed(2)).join(' ')} at the start, ` +
      `${load1.map((l) => l.toFixed(2)).join(' ')} at the end (command: npx tsx scripts/bench-steps.ts --hello --turns ` +
      `${turns}${profile ? '' : ' --no-profile'})`,
  );
  console.log(`POST of the user message (run:true) → first LLM request: median ${f(median(first))} ms`);
  console.log(`whole turn (POST of the message → the end at the subscriber): median ${f(median(windows.map(([a, b]) => (b - a) / 1000)))} ms`);
  console.log('');
  console.log('medians in ms; "created" is the event\'s own timestamp (1 ms resolution: its columns are means)');
  console.log(
    '| step | last observation at the subscriber → LLM request | LLM (scripted) request → answer sent | answer sent → action at the ' +
      'subscriber | action created → at the subscriber (mean) | tool: action created → observation created (mean) | observation created → at ' +
      "the subscriber (mean) | daemon's own time (step less LLM less tool) |",
  );
  console.log('|---|---:|---:|---:|---:|---:|---:|---:|');
  for (let k = 0; k < 4; k++) {
    const c = cols[k]!;
    const med = (key: keyof Col) => median(c.map((x) => x[key]));
    const avg = (key: keyof Col) => mean(c.map((x) => x[key]).filter(Number.isFinite));
    console.log(
      `| ${names[k]} | ${f(med('build'))} | ${f(med('llm'))} | ${f(med('toAction'))} | ${f(avg('actionPublish'))} | ${f(avg('tool'))} | ` +
        `${f(avg('obsPublish'))} | ${f(med('own'))} |`,
    );
  }

  // ---- in the daemon: CPU by part over the measured turns ----
  const files = fs.readdirSync(profDir).filter((x) => x.endsWith('.cpuprofile'));
  const splits = files.map((x) => profileSplit(path.join(profDir, x), windows, intervals)).sort((a, b) => b.totalMs - a.totalMs);
  const main = splits[0];
  const cpuMs = cpuTicks * 10;
  const stepsRun = turns * 4;
  console.log('');
  console.log(`daemon CPU time (/proc, all threads) over the measured turns: ${f(cpuMs / turns)} ms per turn, ${f(cpuMs / stepsRun)} ms per step`);
  console.log(`its sandbox spawner's CPU time (the process that starts the holders' programs; none before it): ${f((spawnerTicks * 10) / turns)} ms per turn`);
  if (main && main.totalMs > 0) {
    // the profiler's sample intervals are wall time: on a busy machine they include time the thread waited for a core
    console.log(
      `daemon profile (main thread, --cpu-prof at 1 ms; sample intervals are wall time while not idle, so a busy machine inflates them) over the ` +
        `${turns} measured turns (from the POST of the message to the end of the turn; conversation creation and workspace preparation excluded): ` +
        `${f(main.totalMs / turns)} ms per turn, ${f(main.totalMs / stepsRun)} ms per step; by the nearest src/ frame on the stack (else the ` +
        `nearest frame of the AI SDK, zod, web streams, undici or node:http's client: LLM client; of the worker channel or better-sqlite3: store; ` +
        `of the WebSocket server: publish):`,
    );
    console.log('| part | ms per step | share |');
    console.log('|---|---:|---:|');
    const byPart = [...main.ms.entries()].sort((a, b) => b[1] - a[1]);
    for (const [name, v] of byPart) console.log(`| ${name} | ${f(v / stepsRun)} | ${((100 * v) / main.totalMs).toFixed(1)} % |`);
    console.log('');
    console.log("the daemon's main thread busy (profile, ms per step, mean) in each part of a step, and the largest parts of it:");
    console.log(`| step | ${PARTS.join(' | ')} |`);
    console.log(`|---|${PARTS.map(() => '---:').join('|')}|`);
    for (const nm of names) {
      const cells = PARTS.map((_p, j) => {
        const tm = main.byTag.get(`${nm}|${j}`);
        if (!tm) return '—';
        const all = [...tm.values()].reduce((x, y) => x + y, 0) / turns;
        const top = [...tm.entries()]
          .sort((x, y) => y[1] - x[1])
          .slice(0, 2)
          .map(([c, v]) => `${c.replace(/ \(.*\)$/, '')} ${f(v / turns)}`);
        return `${f(all)} (${top.join(', ')})`;
      });
      console.log(`| ${nm} | ${cells.join(' | ')} |`);
    }
    for (const j of [1, 3]) {
      const top = [...(main.byTag.get(`part|${j}`) ?? new Map<string, number>()).entries()].sort((x, y) => y[1] - x[1]).slice(0, 8);
      console.log(`  ${PARTS[j]}, largest functions (ms per step): ${top.map(([fn, v]) => `${fn} ${f(v / stepsRun)}`).join('; ')}`);
    }
    console.log('');
    console.log('where (self time of the leaf function ← the nearest src/ frame, ms per step):');
    for (const [name] of byPart.slice(0, 4)) {
      const top = [...main.fns.get(name)!.entries()].sort((a, b) => b[1] - a[1]).slice(0, 4);
      console.log(`  ${name}: ${top.map(([fn, v]) => `${fn} ${f(v / stepsRun)}`).join('; ')}`);
    }
  } else if (profile) console.log('\nno daemon CPU profile was written');
  fs.rmSync(profDir, { recursive: true, force: true });
  return 0;
}

// ================================================================================================
// --llm-client: the LLM client alone, own vs the AI SDK's, alternating in one run
// ================================================================================================

async function llmClientBench(rounds: number, turns: number): Promise<number> {
  // loaded here: the other modes measure a daemon from outside and keep this process light
  const { createLlmClient, toAssistantMessage } = await import('../src/llm/provider.js');
  const llm = await startScriptedLlm();
  const tools: LlmToolSpec[] = ['terminal', 'file_editor', 'finish'].map((name) => ({
    name,
    description: `the ${name} tool`,
    inputSchema: {
      type: 'object',
      properties: { command: { type: 'string' }, path: { type: 'string' }, file_text: { type: 'string' }, message: { type: 'string' } },
    },
  }));
  const answers = helloTurn('/workspace');
  const clients = ['own', 'ai-sdk'] as const;
  const after: Record<(typeof clients)[number], number[]> = { own: [], 'ai-sdk': [] };
  const cpu: Record<(typeof clients)[number], number[]> = { own: [], 'ai-sdk': [] };
  const load0 = os.loadavg();
  /** `turns` hello turns in one conversation (its history grows by them); per step: answer sent → resolved, CPU */
  const run = async (client: (typeof clients)[number], record: boolean) => {
    const c = createLlmClient({ model: 'openai/scripted', baseUrl: llm.url, apiKey: 'k', chatCompletionsClient: client });
    const messages: ModelMessage[] = [];
    for (let t = 0; t < turns; t++) {
      messages.push({ role: 'user', content: 'say hello, then write it to hello.txt' });
      for (const answer of answers) {
        llm.push(answer);
        const cpu0 = process.cpuUsage();
        const res = await c.complete({ system: 'You are a test agent.', messages: messages.slice(), tools });
        const done = performance.now();
        const used = process.cpuUsage(cpu0);
        const q = llm.requests[llm.requests.length - 1]!;
        q.body = undefined;
        if (record) {
          after[client].push(done - q.answeredAt!);
          cpu[client].push((used.user + used.system) / 1000);
        }
        messages.push(toAssistantMessage(res), {
          role: 'tool',
          content: res.toolCalls.map((call) => ({
            type: 'tool-result' as const,
            toolCallId: call.id,
            toolName: call.name,
            output: { type: 'text' as const, value: 'ok' },
          })),
        });
      }
    }
  };
  try {
    for (const client of clients) await run(client, false); // warm-up
    for (let r = 0; r < rounds; r++) for (const client of r % 2 === 0 ? clients : [...clients].reverse()) await run(client, true);
  } finally {
    await llm.close();
  }
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
  const load1 = os.loadavg();
  console.log(
    `LLM client alone: ${rounds} rounds × ${turns} hello turns (4 steps each, history growing) per client, alternating; load average ` +
      `${load0.map((l) => l.toFixed(2)).join(' ')} at the start, ${load1.map((l) => l.toFixed(2)).join(' ')} at the end (command: npx tsx ` +
      `scripts/bench-steps.ts --llm-client --rounds ${rounds} --turns ${turns})`,
  );
  console.log('| client | answer sent → complete() resolved, median ms | CPU per step (this process, scripted LLM included), median ms |');
  console.log('|---|---:|---:|');
  for (const client of clients) console.log(`| ${client} | ${median(after[client]).toFixed(3)} | ${median(cpu[client]).toFixed(3)} |`);
  console.log(
    `ratio own / AI SDK: ${(median(after.own) / median(after['ai-sdk'])).toFixed(2)} (after the answer), ` +
      `${(median(cpu.own) / median(cpu['ai-sdk'])).toFixed(2)} (CPU per step)`,
  );
  return 0;
}
