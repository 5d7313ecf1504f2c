/**
 * The hot path's own work without HTTP: `sendMessage` through the operation table (the quick input
 * check, the conversation lookup, the append, the journal commit, the publish to one subscriber per
 * conversation), on a real core (SQLite store, its writer thread) in this process. No sockets, so
 * none of the load test's network noise: what it prints moves only with the daemon's code, which
 * makes it the A/B measure for changes to that path (run it from two checkouts alternately, or
 * with `--compare DIR`, which runs DIR's sources in the same run). Prints numbers; not a test.
 *
 *   npx tsx scripts/bench-send.ts [--messages 100000] [--conversations 50] [--batch 40] [--runs 5] [--compare DIR]
 *
 * Per message: the event loop's busy time (the daemon's main thread: what bounds its rate) and the
 * CPU of every thread of the process until the writer thread has indexed it (the index included).
 * Best of `--runs` (each on a fresh DATA_DIR), per checkout; with `--compare`, the two alternate.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const { values: args } = parseArgs({
  options: {
    messages: { type: 'string', default: '100000' },
    conversations: { type: 'string', default: '50' },
    batch: { type: 'string', default: '40' },
    runs: { type: 'string', default: '5' },
    compare: { type: 'string' },
    root: { type: 'string' },
    once: { type: 'boolean', default: false },
  },
});
const MESSAGES = Number(args.messages);
const CONVERSATIONS = Number(args.conversations);
const BATCH = Number(args.batch);
const RUNS = Number(args.runs);
const HERE = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

interface Result {
  busyUs: number;
  cpuUs: number;
  perSecond: number;
}

/** One measured run of the core at `root` (this checkout or another), in this process. */
async function once(root: string): Promise<Result> {
  const load = (p: string) => import(path.join(root, p));
  const { loadConfig } = await load('src/config.ts');
  const { createCore } = await load('src/core.ts');
  const { createLogger } = await load('src/logger.ts');
  const { Redactor } = await load('src/secrets/redact.ts');
  const { runOperation } = await load('src/api/operations.ts');
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'parley-bench-send-'));
  const redactor = new Redactor();
  const config = loadConfig({ DATA_DIR: dataDir, SANDBOX: 'none', LOG_LEVEL: 'warn' });
  const core = await createCore(config, createLogger('warn', redactor), redactor);
  try {
    const ids: string[] = [];
    for (let i = 0; i < CONVERSATIONS; i++) ids.push(((await runOperation(core, 'createConversation', {})) as { conversation_id: string }).conversation_id);
    // a subscriber per conversation that takes each frame's JSON, as the WebSocket does
    let frames = 0;
    for (const id of ids) {
      core.events.follow(id, {
        send: (ev: { json: string }) => ((frames += ev.json.length > 0 ? 1 : 0), true),
        drained: () => Promise.resolve(),
        overflow: () => {
          throw new Error('a subscriber overflowed');
        },
      });
    }
    // the body as the bridge hands it over: parsed JSON of the usual shape
    const body = (id: string, n: number) => ({
      conversation_id: id,
      message: { role: 'user', content: [{ type: 'text', text: `message ${n}: hello, an ordinary line of text` }] },
    });
    const send = async (from: number, count: number) => {
      for (let i = from; i < from + count; i += BATCH) {
        const turn: Promise<unknown>[] = [];
        for (let j = i; j < Math.min(i + BATCH, from + count); j++) turn.push(runOperation(core, 'sendMessage', body(ids[j % ids.length]!, j)));
        await Promise.all(turn);
      }
    };
    await send(0, Math.min(20_000, MESSAGES));
    const framesBefore = frames;
    const cpu0 = process.cpuUsage();
    const elu0 = performance.eventLoopUtilization();
    const t0 = performance.now();
    await send(0, MESSAGES);
    const wall = performance.now() - t0;
    const elu = performance.eventLoopUtilization(elu0);
    await core.close(); // waits until the writer thread has indexed everything
    const cpu = process.cpuUsage(cpu0);
    if (frames - framesBefore !== MESSAGES) throw new Error(`the subscribers got ${frames - framesBefore} frames for ${MESSAGES} messages`);
    return { busyUs: (elu.active * 1000) / MESSAGES, cpuUs: (cpu.user + cpu.system) / MESSAGES, perSecond: MESSAGES / (wall / 1000) };
  } finally {
    fs.rmSync(dataDir, { recursive: true, force: true });
  }
}

if (args.once) {
  // a child run: one measurement of --root, as JSON
  process.stdout.write(`${JSON.stringify(await once(args.root ?? HERE))}\n`);
  process.exit(0);
}

/** Each run in a process of its own: a warm JIT or heap from the previous run would favour the later one. */
function child(root: string): Result {
  const out = execFileSync(
    process.execPath,
    [
      '--import',
      'tsx',
      fileURLToPath(import.meta.url),
      '--once',
      '--root',
      root,
      '--messages',
      String(MESSAGES),
      '--conversations',
      String(CONVERSATIONS),
      '--batch',
      String(BATCH),
    ],
    {
      cwd: HERE,
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'inherit'],
    },
  );
  return JSON.parse(out.trim().split('\n').pop()!) as Result;
}

const roots = [HERE, ...(args.compare ? [path.resolve(args.compare)] : [])];
if (roots[1] === HERE) throw new Error('--compare names this checkout: give another one');
const results = new Map<string, Result[]>(roots.map((r) => [r, []]));
for (let run = 0; run < RUNS; run++) for (const r of roots) results.get(r)!.push(child(r));
const best = (rs: Result[], k: keyof Result) => (k === 'perSecond' ? Math.max(...rs.map((r) => r[k])) : Math.min(...rs.map((r) => r[k])));
const loadNow = os
  .loadavg()
  .map((l) => l.toFixed(1))
  .join(' ');
console.log(
  `sendMessage in process (no HTTP): ${MESSAGES} messages over ${CONVERSATIONS} conversations, ${BATCH} per event-loop turn, one subscriber each; ` +
    `best of ${RUNS} runs${roots.length > 1 ? ', alternating' : ''}; load average ${loadNow}`,
);
for (const r of roots) {
  const rs = results.get(r)!;
  console.log(
    `  ${r === HERE ? 'this checkout' : r}: event loop ${best(rs, 'busyUs').toFixed(2)} µs/message busy, all threads ` +
      `${best(rs, 'cpuUs').toFixed(2)} µs/message (until indexed), ${Math.round(best(rs, 'perSecond')).toLocaleString('en-US')} messages/s`,
  );
}
