/**
 * What the bubblewrap sandbox costs, measured against plain processes in the same run.
 *
 *   npx tsx scripts/bench-sandbox.ts [--shells 40] [--turns 20] [--burst 20] [--rounds 1] [--fresh] [--only burst|shells|memory|cpu]
 *     [--trace] [--dump N | --dump-over MS] [--sandboxes 8] [--conversations 10]
 *
 * 1. Shell creation: `ShellSession.start` (the terminal's persistent bash: spawn, init script, ready
 *    marker) for a NEW conversation each time, through the launcher in bwrap mode (the conversation's
 *    sandbox from the spare holder, then cgroup join + sh + bwrap joining it + sh + bash) and in none
 *    mode (bash alone), `--shells` times each, alternating; median and min in ms, and the added ms.
 *    Before each, a spare holder is let come up (`warm`), so the figure is what a conversation's
 *    first shell costs when it finds one. "cold":
 *    the same without a spare (conversations created in a burst): holder, then the joining bwrap.
 *    `--only shells` runs this part alone.
 * 2. Agent turns: a real daemon (SANDBOX=bwrap, then SANDBOX=none) and the scripted LLM; each turn
 *    is a user message → a terminal tool call (`echo`) → an answer, timed from the POST until the
 *    agent's MessageEvent. The first turn of a conversation starts its shell; the others reuse it.
 *    A first conversation warms the daemon up and is not counted; then 6 conversations begun back to
 *    back, then 6 begun 1.5 s apart (one turn each: with the spare holder ready, as conversations
 *    begun seconds apart find it).
 * 3. Cold first turns (`--burst 20`): `--burst` conversations created back to back, each as soon as the
 *    one before has finished its turn, each running one `hello` turn as soon as its workspace is
 *    ready: four LLM calls (a terminal `echo`, a file_editor create, a str_replace edit, finish), timed
 *    from `POST …/events {run:true}` to the terminal `execution_status` (finished) on the conversation's
 *    WebSocket, as `bench-steps.ts --hello` times it. One daemon per mode (SANDBOX=bwrap and
 *    SANDBOX=none) runs beside the other; the bursts alternate between them `--rounds` times (after one
 *    uncounted conversation each), each burst after both daemons are at rest (8 s with no conversation,
 *    then no spare starting: the spares a burst leaves held for the next are ready). Prints the p50 and
 *    p90 of each mode, their ratio, the p50 of each burst (the first finds the spares of a daemon that
 *    has seen no burst; a later one, those the burst before it left held; `--fresh`: both daemons are
 *    started anew for each round, so every burst is a fresh daemon's first), and where the time
 *    of a turn goes (medians of the intervals between what this process sees: the LLM server's request
 *    arrivals and answers, the events arriving on the socket). `--trace --dump N`: the daemons run with
 *    LOG_LEVEL=trace and the first N turns of each are printed mark by mark with the daemon's own
 *    (src/events/turn-trace.ts; a first shell's: sandbox taken, spawned, ready); `--dump-over MS`
 *    prints the turns slower than MS instead. `--only burst` runs this part alone.
 * 4. What a live sandbox holds (`--only memory`, not part of the whole run): `--sandboxes` conversations'
 *    sandboxes started by a file write each (SANDBOX=bwrap, the default settings, no spare), then the
 *    PSS of every process they run (from /proc: the holder's supervisor, bwrap, the file service,
 *    the egress tool), per sandbox and for the file services alone, beside the PSS of an idle node
 *    process and an idle perl in the same run.
 * 5. The machine's CPU per new conversation (`--only cpu`, not part of the whole run): a bwrap daemon
 *    and a none daemon, each running `--conversations` conversations begun 1.5 s apart (the spares
 *    made again between them, as conversations begun seconds apart find them), each one hello turn;
 *    the CPU time of every core (user, nice, system, irq, softirq: /proc/stat) over that series, less
 *    what the machine took over as long a quiet window measured right after it, per conversation.
 *    The modes alternate `--rounds` times; the difference is what a sandbox's start costs the
 *    machine (the holder, its disk, network and file service, the first shell joining it). Printed with
 *    it, per conversation: the daemon's own CPU (all its threads) and its spawner's (the processes that
 *    start the sandboxes' host-side programs: every program costs them a fork and a few messages); the
 *    rest is the programs' own and the kernel's.
 * The machine's load average is printed: absolute figures move with it, the ratios less.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import WebSocket from 'ws';
import { Sandbox, DEFAULT_SANDBOX_SETTINGS } from '../src/sandbox/launcher.js';
import { findProgram } from '../src/sandbox/programs.js';
import { ShellSession } from '../src/tools/terminal/session.js';
import { spawn } from 'node:child_process';
import { startDaemon, startFlags, tempDir, waitFor } from '../test/support/daemon.js';
import { fileServices } from '../test/support/holders.js';
import { descendants, memoryKiB, threadsCpuMs } from '../test/support/processes.js';
import { helloTurn, startScriptedLlm } from '../test/support/scripted-llm.js';

const { values: args } = parseArgs({
  options: {
    shells: { type: 'string', default: '40' },
    turns: { type: 'string', default: '20' },
    burst: { type: 'string', default: '20' },
    rounds: { type: 'string', default: '1' },
    only: { type: 'string' },
    trace: { type: 'boolean', default: false },
    fresh: { type: 'boolean', default: false },
    dump: { type: 'string', default: '0' },
    'dump-over': { type: 'string', default: '' },
    sandboxes: { type: 'string', default: '8' },
    conversations: { type: 'string', default: '10' },
  },
});
const SHELLS = Number(args.shells);
const TURNS = Number(args.turns);
const BURST = Number(args.burst);
const ROUNDS = Number(args.rounds);

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};
const ms = (x: number) => x.toFixed(1);

async function shellCreation(): Promise<void> {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'parley-bench-sandbox-'));
  const bwrap = await Sandbox.open({ ...DEFAULT_SANDBOX_SETTINGS, mode: 'bwrap' }, { workspaceRoot: root });
  // the cold path: no spare holder, the conversation's holder starts with its first shell
  const cold = await Sandbox.open({ ...DEFAULT_SANDBOX_SETTINGS, mode: 'bwrap', spareHolder: false }, { workspaceRoot: root });
  const none = Sandbox.none(root);
  const times: Record<string, number[]> = { bwrap: [], cold: [], none: [] };
  try {
    for (let i = 0; i < SHELLS; i++) {
      for (const [name, sb] of [
        ['bwrap', bwrap],
        ['cold', cold],
        ['none', none],
      ] as const) {
        const id = crypto.randomUUID();
        const ws = path.join(root, id.replace(/-/g, ''));
        fs.mkdirSync(ws);
        // as in the daemon between conversations: the sandbox's spare holder is up (not timed)
        await sb.warm();
        const t0 = performance.now();
        const s = await ShellSession.start({
          conversationId: id,
          cwd: ws,
          env: sb.env({ TERM: 'dumb' }),
          launch: (argv, o) => sb.spawn(id, argv, { workspaceDir: ws, cwd: o.cwd, env: o.env, stdio: ['pipe', 'pipe', 'pipe'] }),
          // as the terminal does: the conversation's sandbox (and its /parley/io) first
          io: sb.enabled ? sb.prepare(id).io : undefined,
        });
        times[name]!.push(performance.now() - t0);
        await s.terminate('bench');
        await sb.closeConversation(id);
      }
    }
  } finally {
    await bwrap.close();
    await cold.close();
    fs.rmSync(root, { recursive: true, force: true });
  }
  const b = median(times.bwrap!);
  const c = median(times.cold!);
  const n = median(times.none!);
  console.log(`shell creation (${SHELLS} each, limits by ${bwrap.info().limits.enforced_by}):`);
  console.log(`  bwrap  median ${ms(b)} ms  min ${ms(Math.min(...times.bwrap!))} ms`);
  console.log(`  none   median ${ms(n)} ms  min ${ms(Math.min(...times.none!))} ms`);
  console.log(`  added by the sandbox: ${ms(b - n)} ms (ratio ${(b / n).toFixed(2)})`);
  console.log(`  cold (no spare holder: the conversation's holder starts first) median ${ms(c)} ms, added ${ms(c - n)} ms`);
}

/** A process's memory in MiB (memoryKiB's). */
function memMiB(pid: number): { pss: number; uss: number } {
  const m = memoryKiB(pid);
  return { pss: m.pss / 1024, uss: m.uss / 1024 };
}

async function sandboxMemory(): Promise<void> {
  const n = Number(args.sandboxes);
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'parley-bench-sandbox-'));
  const sb = await Sandbox.open({ ...DEFAULT_SANDBOX_SETTINGS, mode: 'bwrap', spareHolder: false }, { workspaceRoot: root });
  // the baselines: an idle node and an idle perl, each its one process
  const idle = [spawn(process.execPath, ['-e', 'setInterval(() => {}, 1e6)']), spawn(findProgram('perl')!, ['-e', 'sleep 1e6'])];
  try {
    const before = new Set([...descendants(process.pid), ...idle.map((p) => p.pid!)]);
    for (let i = 0; i < n; i++) {
      const id = crypto.randomUUID();
      const ws = path.join(root, id.replace(/-/g, ''));
      fs.mkdirSync(ws);
      await sb.files(id, ws).write(path.join(ws, 'x.txt'), 'x', { mode: 'create' });
    }
    await new Promise((r) => setTimeout(r, 1000));
    const theirs = descendants(process.pid).filter((p) => !before.has(p));
    const services = fileServices(process.pid);
    // each figure the total of those processes, divided by `count`
    const sum = (pids: number[], count: number) => {
      const m = pids.map(memMiB);
      return `${ms(m.reduce((a, x) => a + x.pss, 0) / count)} MiB PSS, ${ms(m.reduce((a, x) => a + x.uss, 0) / count)} MiB USS`;
    };
    console.log(`  per sandbox (${ms(theirs.length / n)} processes): ${sum(theirs, n)}`);
    console.log(`  its file service (${services.length} services): ${sum(services, Math.max(1, services.length))}`);
    const one = (pid: number) => `${ms(memMiB(pid).pss)} MiB PSS, ${ms(memMiB(pid).uss)} MiB USS`;
    console.log(`  beside: an idle node process ${one(idle[0]!.pid!)}; an idle perl ${one(idle[1]!.pid!)}`);
  } finally {
    for (const p of idle) p.kill();
    await sb.close();
    fs.rmSync(root, { recursive: true, force: true });
  }
}

/**
 * Between conversations begun "apart": a spare holder is started 1 s after one was taken (REFILL_MS in
 * src/sandbox/holders.ts) and takes ~0.2 s to be ready; conversations begun closer than that start a
 * holder of their own (the "back to back" figure).
 */
const APART_MS = 1500;

async function turns(mode: 'bwrap' | 'none'): Promise<{ first: number[]; firstApart: number[]; later: number[] }> {
  const llm = await startScriptedLlm();
  const key = 'bench-sandbox-session-key';
  // SANDBOX=bwrap with the host network requires a key (agents would reach a keyless API)
  const d = await startDaemon({
    LLM_MODEL: 'openai/scripted',
    LLM_BASE_URL: llm.url,
    LLM_API_KEY: 'bench',
    SANDBOX: mode,
    LOG_LEVEL: 'info',
    SESSION_API_KEY: key,
  });
  const req = (m: string, p: string, b?: unknown) => d.req(m, p, b, { 'X-Session-API-Key': key });
  const first: number[] = [];
  const firstApart: number[] = [];
  const later: number[] = [];
  try {
    // conversation 0 warms the daemon up (first LLM client, first tool call) and is not counted;
    // conversations 1–6 begin back to back, 7–12 each APART_MS after the one before ended
    const convs = 6;
    for (let c = 0; c <= 2 * convs; c++) {
      const apart = c > convs;
      if (apart) await new Promise((r) => setTimeout(r, APART_MS));
      const id = (await req('POST', '/api/conversations', {})).body.conversation_id as string;
      await waitFor(async () => (await req('GET', `/api/conversations/${id}`)).body.execution_status === 'idle', 'idle', 20_000);
      for (let t = 0; t < (apart ? 1 : Math.ceil(TURNS / convs)); t++) {
        llm.push({ toolCalls: [{ name: 'terminal', arguments: { command: `echo turn-${t}` } }] }, { text: `done ${t}` });
        const t0 = performance.now();
        await req('POST', `/api/conversations/${id}/events`, { content: [{ text: `turn ${t}` }], run: true });
        await waitFor(
          async () => {
            const evs = (await req('GET', `/api/conversations/${id}/events/search?limit=100&sort_order=TIMESTAMP_DESC`)).body.items as any[];
            return evs.some((e) => e.kind === 'MessageEvent' && e.source === 'agent' && e.llm_message.content[0]?.text === `done ${t}`);
          },
          'answer',
          30_000,
        );
        if (c > 0) (t > 0 ? later : apart ? firstApart : first).push(performance.now() - t0);
        await waitFor(async () => (await req('GET', `/api/conversations/${id}`)).body.execution_status !== 'running', 'run ended', 20_000);
      }
    }
  } finally {
    await d.stop();
    await llm.close();
    fs.rmSync(d.dataDir, { recursive: true, force: true });
  }
  return { first, firstApart, later };
}

// ---- 3. cold first turns: a burst of new conversations, one hello turn each ----

interface Seen {
  kind: string;
  key?: string;
  value?: unknown;
  at: number;
}

interface BurstDaemon {
  mode: 'bwrap' | 'none';
  d: Awaited<ReturnType<typeof startDaemon>>;
  llm: Awaited<ReturnType<typeof startScriptedLlm>>;
  key: string;
}

async function burstDaemon(mode: 'bwrap' | 'none'): Promise<BurstDaemon> {
  const llm = await startScriptedLlm();
  const key = 'bench-sandbox-session-key';
  const d = await startDaemon(
    {
      LLM_MODEL: 'openai/scripted',
      LLM_BASE_URL: llm.url,
      LLM_API_KEY: 'bench',
      SANDBOX: mode,
      LOG_LEVEL: args.trace ? 'trace' : 'info',
      SESSION_API_KEY: key,
      METRICS_PORT: '0',
    },
    tempDir(),
    { nodeArgs: startFlags() },
  );
  return { mode, d, llm, key };
}

/** Spares of the daemon starting now (its /metrics: parley_sandbox_spares). */
async function sparesStarting(b: BurstDaemon): Promise<number> {
  const port = Number(/"metrics_port":(\d+)/.exec(b.d.output.join('\n'))?.[1]);
  const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
  return Number(/^parley_sandbox_spares\{state="starting"\} (\d+)$/m.exec(text)?.[1] ?? 0);
}

/**
 * Between bursts, every daemon at rest: REST_MS with no conversation (the arrivals have stopped:
 * src/sandbox/holders.ts QUIET_MS), then until none starts a spare for a second, so no burst runs
 * beside another daemon's spares starting (or its own, left from the burst before).
 */
const REST_MS = 8000;
async function rest(daemons: BurstDaemon[]): Promise<void> {
  await new Promise((r) => setTimeout(r, REST_MS));
  for (let still = 0; still < 4; ) {
    const starting = (await Promise.all(daemons.map(sparesStarting))).reduce((a, x) => a + x, 0);
    still = starting === 0 ? still + 1 : 0;
    await new Promise((r) => setTimeout(r, 250));
  }
}

async function stopDaemons(daemons: BurstDaemon[]): Promise<void> {
  for (const b of daemons) {
    await b.d.stop();
    await b.llm.close();
    fs.rmSync(b.d.dataDir, { recursive: true, force: true });
  }
}

const wallNow = () => performance.timeOrigin + performance.now();

/** One conversation created, its workspace ready (untimed), then its hello turn timed: the turn's marks. */
async function coldTurn(b: BurstDaemon): Promise<{ ms: number; marks: [string, number][] }> {
  const { d, llm, key } = b;
  const req = (m: string, p: string, body?: unknown) => d.req(m, p, body, { 'X-Session-API-Key': key });
  const created = (await req('POST', '/api/conversations', {})).body.conversation_id as string;
  for (let i = 0; ; i++) {
    const phase = (await req('GET', `/api/conversations/${created}`)).body.setup?.phase;
    if (phase !== 'pending' && phase !== 'preparing') break;
    if (i > 2000) throw new Error(`the workspace of ${created} is still ${phase}`);
    await new Promise((r) => setTimeout(r, 5));
  }
  const ws = path.join(d.dataDir, 'workspaces', created.replace(/-/g, ''));
  llm.push(...helloTurn(ws));
  const seen: Seen[] = [];
  const sock = new WebSocket(`ws://127.0.0.1:${d.port}/sockets/events/${created}`, { perMessageDeflate: false, headers: { 'X-Session-API-Key': key } });
  let onEnd: (v: unknown) => void = () => {};
  const ended = new Promise((r) => (onEnd = r));
  await new Promise<void>((resolve, reject) => {
    let first = true;
    sock.on('message', (data: Buffer) => {
      const at = wallNow();
      if (first) {
        first = false;
        return resolve();
      }
      const ev = JSON.parse(data.toString('utf8'));
      seen.push({ kind: ev.kind, key: ev.key, value: ev.value, at });
      if (ev.kind === 'ConversationStateUpdateEvent' && ev.key === 'execution_status' && ['finished', 'error', 'stuck'].includes(ev.value)) onEnd(ev.value);
    });
    sock.once('error', reject);
  });
  const base = llm.requests.length;
  const posted = wallNow();
  const r = await req('POST', `/api/conversations/${created}/events`, {
    role: 'user',
    content: [{ type: 'text', text: 'say hello, then write it to hello.txt' }],
    run: true,
  });
  if (r.status !== 200) throw new Error(`POST events: ${r.status} ${r.text}`);
  let timer: NodeJS.Timeout | undefined;
  const how = await Promise.race([ended, new Promise((_, reject) => (timer = setTimeout(() => reject(new Error('the turn did not end in 60 s')), 60_000)))]);
  clearTimeout(timer);
  sock.close();
  if (how !== 'finished') throw new Error(`the turn ended ${String(how)}`);
  const reqs = llm.requests.slice(base);
  if (reqs.length !== 4) throw new Error(`${reqs.length} LLM requests, expected 4`);
  const done = seen.find((e) => e.key === 'execution_status' && e.value === 'finished')!.at;
  const actions = seen.filter((e) => e.kind === 'ActionEvent');
  const obs = seen.filter((e) => e.kind === 'ObservationEvent');
  const names = ['shell', 'create', 'edit', 'finish'];
  const marks: [string, number][] = [['POST sent', posted]];
  for (let k = 0; k < 4; k++) {
    marks.push([`${names[k]}: LLM request arrived`, performance.timeOrigin + reqs[k]!.receivedAt]);
    marks.push([`${names[k]}: LLM answer sent`, performance.timeOrigin + reqs[k]!.answeredAt!]);
    if (actions[k]) marks.push([`${names[k]}: action at the subscriber`, actions[k]!.at]);
    if (obs[k]) marks.push([`${names[k]}: observation at the subscriber`, obs[k]!.at]);
  }
  marks.push(['finished at the subscriber', done]);
  for (const q of llm.requests) q.body = undefined;
  if (args.trace) {
    // the daemon's own marks (LOG_LEVEL=trace: src/events/turn-trace.ts), for --dump
    const line = await waitFor(() => [...d.output].reverse().find((l) => l.includes('"turn trace"') && l.includes(created)), 'the turn trace');
    for (const [name, at] of (JSON.parse(line as string) as { marks: [string, number][] }).marks) marks.push([`  daemon: ${name}`, at]);
  }
  return { ms: done - posted, marks };
}

const quantile = (xs: number[], q: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(q * s.length))]!;
};

async function coldBursts(): Promise<void> {
  let daemons = [await burstDaemon('bwrap'), await burstDaemon('none')];
  // the turns by mode (with --fresh the daemons of each round are new ones)
  const turnsOf = new Map<BurstDaemon['mode'], { ms: number; marks: [string, number][] }[]>(daemons.map((b) => [b.mode, []]));
  const load0 = os.loadavg();
  try {
    for (let round = 0; round < ROUNDS; round++) {
      if (round > 0 && args.fresh) {
        await stopDaemons(daemons);
        daemons = [await burstDaemon('bwrap'), await burstDaemon('none')];
      }
      // the daemon's first conversation (first LLM client, first tool calls): not counted
      if (round === 0 || args.fresh) for (const b of daemons) await coldTurn(b);
      for (const b of round % 2 ? [...daemons].reverse() : daemons) {
        await rest(daemons);
        for (let i = 0; i < BURST; i++) turnsOf.get(b.mode)!.push(await coldTurn(b));
      }
    }
  } finally {
    await stopDaemons(daemons);
  }
  const load1 = os.loadavg();
  const p50 = (b: BurstDaemon) => median(turnsOf.get(b.mode)!.map((t) => t.ms));
  const [bw, no] = daemons as [BurstDaemon, BurstDaemon];
  console.log(
    `cold first turns: ${BURST} conversations back to back × ${ROUNDS} round(s) per mode, each one hello turn (shell, create, edit, finish: 4 LLM calls), ` +
      `POST …/events {run:true} → finished on its socket; ` +
      `load average ${load0.map((x) => x.toFixed(2)).join(' ')} at the start, ${load1.map((x) => x.toFixed(2)).join(' ')} at the end ` +
      `(command: npx tsx scripts/bench-sandbox.ts --only burst --burst ${BURST} --rounds ${ROUNDS}${args.fresh ? ' --fresh' : ''})`,
  );
  for (const b of daemons) {
    const ms = turnsOf.get(b.mode)!.map((t) => t.ms);
    const mean = ms.reduce((a, x) => a + x, 0) / ms.length;
    console.log(
      `  ${b.mode.padEnd(5)}  p50 ${ms.length ? ms_(median(ms)) : '—'} ms  p90 ${ms_(quantile(ms, 0.9))} ms  mean ${ms_(mean)} ms  ` +
        `min ${ms_(Math.min(...ms))} ms  (${ms.length})`,
    );
  }
  console.log(`  ratio bwrap / none (p50): ${(p50(bw) / p50(no)).toFixed(2)}`);
  // the first burst's spares are sized from no arrivals; a later one finds those the burst before it left held
  // (with --fresh every burst is a new daemon's first)
  for (const b of daemons) {
    const ms = turnsOf.get(b.mode)!.map((t) => t.ms);
    const rounds = Array.from({ length: ROUNDS }, (_, r) => ms_(median(ms.slice(r * BURST, (r + 1) * BURST))));
    console.log(`  ${b.mode} p50 by burst: ${rounds.join(' / ')} ms`);
  }
  for (const b of daemons) {
    const order = turnsOf.get(b.mode)!.map((t) => t.ms.toFixed(0));
    console.log(`  ${b.mode} turns in order (ms): ${order.join(' ')}`);
  }
  console.log('  where a cold turn goes (median ms between consecutive marks):');
  const names = turnsOf.get(bw.mode)![0]!.marks.map((m) => m[0]);
  console.log(`  | from → to | ${daemons.map((b) => b.mode).join(' | ')} |`);
  console.log(`  |---|${daemons.map(() => '---:').join('|')}|`);
  for (let i = 1; i < names.length; i++) {
    if (names[i]!.startsWith('  daemon:')) break;
    const cells = daemons.map((b) =>
      ms_(
        median(
          turnsOf.get(b.mode)!.map((t) => {
            const a = t.marks.find((m) => m[0] === names[i - 1]);
            const z = t.marks.find((m) => m[0] === names[i]);
            return a && z ? z[1] - a[1] : Number.NaN;
          }),
        ),
      ),
    );
    console.log(`  | ${names[i - 1]} → ${names[i]} | ${cells.join(' | ')} |`);
  }
  // --dump N: the first N turns of each mode, every mark in order (ms from the POST); --dump-over MS: the turns slower than MS
  for (const b of daemons) {
    const all = turnsOf.get(b.mode)!;
    const over = args['dump-over'] ? Number(args['dump-over']) : Number.NaN;
    for (const t of Number.isFinite(over) ? all.filter((x) => x.ms > over) : all.slice(0, Number(args.dump))) {
      console.log(`  ${b.mode} turn of ${ms_(t.ms)} ms:`);
      const t0 = t.marks[0]![1];
      for (const [name, at] of [...t.marks].sort((x, y) => x[1] - y[1])) console.log(`    ${ms_(at - t0).padStart(7)}  ${name}`);
    }
  }
}
/** CPU time every core has spent busy since boot (user, nice, system, irq, softirq), in ms. */
function machineCpuMs(): number {
  const f = fs.readFileSync('/proc/stat', 'utf8').split('\n', 1)[0]!.trim().split(/\s+/).slice(1).map(Number);
  // (USER_HZ: 100 ticks a second on Linux)
  return (f[0]! + f[1]! + f[2]! + f[5]! + f[6]!) * 10;
}

/**
 * The daemon's spawner (src/sandbox/spawner.ts): its child running spawner-process.pl, and that one's
 * forker (spawner-forker.pl); empty when it has none.
 */
function spawnerOf(daemon: number): number[] {
  const childOf = (parent: number, script: string): number | null => {
    for (const d of fs.readdirSync('/proc')) {
      if (!/^\d+$/.test(d)) continue;
      try {
        const stat = fs.readFileSync(`/proc/${d}/stat`, 'utf8');
        if (Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]) !== parent) continue;
        if (fs.readFileSync(`/proc/${d}/cmdline`, 'utf8').includes(script)) return Number(d);
      } catch {
        // gone, or not ours to look at
      }
    }
    return null;
  };
  const spawner = childOf(daemon, 'spawner-process.pl');
  if (spawner === null) return [];
  const forker = childOf(spawner, 'spawner-forker.pl');
  return forker === null ? [spawner] : [spawner, forker];
}

async function cpuPerConversation(): Promise<void> {
  const n = Number(args.conversations);
  const apart = 1500;
  const daemons = [await burstDaemon('bwrap'), await burstDaemon('none')];
  const perConversation = new Map<BurstDaemon, number[]>(daemons.map((b) => [b, []]));
  /** Of each series, per conversation: the daemon's own CPU (all its threads) and its spawner's. */
  const ownParts = new Map<BurstDaemon, { daemon: number; spawner: number }[]>(daemons.map((b) => [b, []]));
  const load0 = os.loadavg();
  const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));
  try {
    for (const b of daemons) await coldTurn(b); // not counted
    await pause(apart);
    for (let round = 0; round < ROUNDS; round++) {
      for (const b of round % 2 ? [...daemons].reverse() : daemons) {
        const t0 = performance.now();
        const spawner = spawnerOf(b.d.proc.pid!);
        const d0 = threadsCpuMs(b.d.proc.pid!);
        const spawnerCpu = () => spawner.reduce((sum, p) => sum + threadsCpuMs(p), 0);
        const s0 = spawnerCpu();
        const c0 = machineCpuMs();
        for (let i = 0; i < n; i++) {
          const at = performance.now();
          await coldTurn(b);
          await pause(Math.max(0, apart - (performance.now() - at)));
        }
        const busy = machineCpuMs() - c0;
        ownParts.get(b)!.push({
          daemon: (threadsCpuMs(b.d.proc.pid!) - d0) / n,
          spawner: (spawnerCpu() - s0) / n,
        });
        const span = performance.now() - t0;
        const q0 = machineCpuMs();
        await pause(span);
        const quiet = machineCpuMs() - q0;
        perConversation.get(b)!.push((busy - quiet) / n);
      }
    }
  } finally {
    await stopDaemons(daemons);
  }
  const load1 = os.loadavg();
  console.log(
    `machine CPU per new conversation: ${n} conversations begun ${apart} ms apart per round and mode, each one hello turn, ` +
      `${ROUNDS} round(s) alternating; all cores, less a quiet window as long; ` +
      `load average ${load0.map((x) => x.toFixed(2)).join(' ')} at the start, ${load1.map((x) => x.toFixed(2)).join(' ')} at the end ` +
      `(command: npx tsx scripts/bench-sandbox.ts --only cpu --conversations ${n} --rounds ${ROUNDS})`,
  );
  for (const b of daemons) {
    const xs = perConversation.get(b)!;
    const parts = ownParts.get(b)!;
    console.log(
      `  ${b.mode.padEnd(5)}  median ${ms_(median(xs))} ms  (rounds: ${xs.map(ms_).join(' / ')}); of it the daemon's own ` +
        `${ms_(median(parts.map((x) => x.daemon)))} ms, its spawner's ${ms_(median(parts.map((x) => x.spawner)))} ms`,
    );
  }
  const [bw, no] = daemons as [BurstDaemon, BurstDaemon];
  console.log(
    `  a sandbox's start costs the machine ${ms_(median(perConversation.get(bw)!) - median(perConversation.get(no)!))} ms of CPU (median bwrap − median none)`,
  );
}

const ms_ = (x: number) => (Number.isFinite(x) ? x.toFixed(1) : '—');

console.log(
  `machine: ${os.cpus().length} CPUs, load average ${os
    .loadavg()
    .map((x) => x.toFixed(1))
    .join(' ')}`,
);
if (args.only === 'burst') {
  await coldBursts();
  process.exit(0);
}
if (args.only === 'shells') {
  await shellCreation();
  process.exit(0);
}
if (args.only === 'cpu') {
  await cpuPerConversation();
  process.exit(0);
}
if (args.only === 'memory') {
  await sandboxMemory();
  process.exit(0);
}
await shellCreation();
const tb = await turns('bwrap');
const tn = await turns('none');
console.log(`agent turns (terminal call + answer, scripted LLM, polled every 25 ms):`);
for (const [name, r] of [
  ['bwrap', tb],
  ['none', tn],
] as const) {
  console.log(
    `  ${name.padEnd(5)}  first turn (starts the shell) median ${ms(median(r.firstApart))} ms for conversations begun ${APART_MS / 1000} s apart, ` +
      `${ms(median(r.first))} ms back to back;  later turns median ${ms(median(r.later))} ms (${r.later.length})`,
  );
}
console.log(
  `  added by the sandbox: first turn +${ms(median(tb.firstApart) - median(tn.firstApart))} ms apart, +${ms(median(tb.first) - median(tn.first))} ` +
    `ms back to back; ` +
    `later turns ${ms(median(tb.later) - median(tn.later))} ms (ratio bwrap/none: first ` +
    `${(median(tb.firstApart) / median(tn.firstApart)).toFixed(2)} / ${(median(tb.first) / median(tn.first)).toFixed(2)}, later ` +
    `${(median(tb.later) / median(tn.later)).toFixed(2)})`,
);
await coldBursts();
