/**
 * Load test of the hot path, `POST /api/conversations/{id}/events` (docs/architecture.md, "One
 * request's path"), against its physical limit, on one node or several.
 *
 *   npm run loadtest -- [--conversations 50] [--concurrency 64] [--duration 10] [--warmup 2]
 *                       [--rounds 3] [--subscribers N|all] [--fanout 1] [--gen-procs 1] [--auth] [--profile] [--keep-data]
 *                       [--setups sqlite,pg,pg-nats-2,pg-nats-3] [--pg-url URL] [--nats-url URL]
 *
 * Every option can also come from the environment: LOADTEST_CONVERSATIONS, LOADTEST_CONCURRENCY,
 * LOADTEST_DURATION, LOADTEST_WARMUP, LOADTEST_ROUNDS, LOADTEST_SUBSCRIBERS, LOADTEST_FANOUT, LOADTEST_GEN_PROCS, LOADTEST_AUTH=1,
 * LOADTEST_PROFILE=1, LOADTEST_KEEP_DATA=1, LOADTEST_TIMEOUT_MS, LOADTEST_DAEMON_ENTRY,
 * LOADTEST_SETUPS, LOADTEST_PG_URL, LOADTEST_NATS_URL (flags win).
 *
 * What it does, all on 127.0.0.1, for each setup in turn (default: one node on SQLite):
 *  1. starts the setup's daemons (as `npm start` runs them: `node <start's flags> scripts/start.mjs`, the build, temp DATA_DIR, LOG_LEVEL=warn;
 *     PostgreSQL setups get a database of their own on --pg-url, dropped after; NATS setups share
 *     --nats-url with subjects of their own) and creates N conversations, conversation i through
 *     node i mod nodes (its writer);
 *  2. opens a WebSocket subscriber on S of them (F on each with --fanout F: one topic, F sockets), each
 *     on the next node after its writer (with several nodes, every event a subscriber receives crossed nodes);
 *  3. drives the hot path from separate load-generator processes (scripts/loadtest/generator.ts:
 *     C keep-alive connections spread over the nodes, each writing the conversations of its node)
 *     for warmup + T seconds, then the identical load against `scripts/bare-server.ts` (one bare uWS
 *     route that reads the body, parses the JSON and answers {"success":true}: the physical limit),
 *     and repeats the pair R times (rounds): the bare route's own rate drifts by a third within minutes
 *     on a shared machine, so each round's ratio compares two runs seconds apart, and the report gives
 *     every round and their median;
 *  4. verifies every 200 of every round was committed (`GET .../events/count?kind=MessageEvent&source=user`,
 *     read on the subscriber's node) and published (MessageEvents received by the subscribers, seq in
 *     order and gap-free), and reads from the daemons' metrics how many events each store commit
 *     carried;
 * then prints the report (scripts/loadtest/report.ts): req/s, p50/p95/p99 latency, errors, CPU of each
 * process during the measured window (of the median round), and each setup's ratio to the bare route
 * per round and their median. Exits 1 when a verification failed.
 *
 * `--profile` runs the daemon under `--cpu-prof` and prints where its CPU time went during the
 * measured window (self and inclusive time by function, self time by module).
 *
 * Bounded: every phase has a deadline; children are killed on exit, on SIGINT/SIGTERM and on error.
 * Exit codes: 0 ok, 1 verification failed, 2 setup or run failure, 130 interrupted.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { now, sleep } from './loadtest/common.js';
import type { GenTarget } from './loadtest/generator.js';
import { BARE_LABEL, medianRound, report, summariseProfile, verified, type Round, type SetupResult } from './loadtest/report.js';
import {
  closeSubscriber,
  countAll,
  createConversations,
  createDatabase,
  installCleanup,
  interrupted,
  killAllNow,
  runLoad,
  storeCommits,
  startBare,
  NPM_START,
  startDaemon,
  stopChild,
  subscribe,
  useTmpDir,
  withDeadline,
  type RunStats,
  type Server,
} from './loadtest/runner.js';

// ================================================================================================
// Options
// ================================================================================================

/** A Parley setup to measure: its nodes, its store, whether NATS joins them. */
interface Setup {
  name: string;
  label: string;
  nodes: number;
  postgres: boolean;
  nats: boolean;
}

const SETUPS: Record<string, Setup> = {
  sqlite: { name: 'sqlite', label: '1 node, SQLite', nodes: 1, postgres: false, nats: false },
  pg: { name: 'pg', label: '1 node, PostgreSQL', nodes: 1, postgres: true, nats: false },
  'pg-nats-2': { name: 'pg-nats-2', label: '2 nodes, PostgreSQL + NATS', nodes: 2, postgres: true, nats: true },
  'pg-nats-3': { name: 'pg-nats-3', label: '3 nodes, PostgreSQL + NATS', nodes: 3, postgres: true, nats: true },
};

interface Options {
  conversations: number;
  concurrency: number;
  duration: number;
  warmup: number;
  rounds: number;
  subscribers: number | 'all';
  /** Subscribers on each subscribed conversation. */
  fanout: number;
  genProcs: number;
  timeoutMs: number;
  auth: boolean;
  profile: boolean;
  keepData: boolean;
  /** An entry file to run instead of the daemon as `npm start` runs it (null). */
  daemonEntry: string | null;
  setups: Setup[];
  pgUrl: string;
  natsUrl: string;
}

const USAGE = `usage: npm run loadtest -- [options]
  -n, --conversations N   conversations to spread the load over (default 50)
  -c, --concurrency C     concurrent keep-alive connections (default 64)
  -d, --duration T        measured seconds, decimals allowed (default 10; at least 0.1)
  -w, --warmup S          warmup seconds before measuring (default 2)
  -r, --rounds R          Parley-then-bare pairs per setup; the ratio reported is their median (default 3)
      --subscribers S     conversations with WebSocket subscribers: a number or "all" (default all)
      --fanout F          WebSocket subscribers on each of those conversations (default 1)
      --gen-procs K       load-generator processes sharing the C connections (default 1)
      --timeout MS        per-request timeout (default 10000)
      --auth              configure SESSION_API_KEY on the daemon and send it (auth on the hot path)
      --profile           run the daemon under --cpu-prof and print where its time went (one node)
      --keep-data         keep the temp DATA_DIR (and the profile)
      --daemon-entry F    run this entry file (through tsx when .ts) instead of the daemon as \`npm start\` runs it, for experiments
      --setups LIST       comma-separated, measured in turn in one run (default sqlite):
                          ${Object.values(SETUPS)
                            .map((s) => `${s.name} (${s.label})`)
                            .join(', ')}
      --pg-url URL        PostgreSQL server for the pg setups (a database is created and dropped;
                          default postgres://postgres@127.0.0.1:5432/postgres)
      --nats-url URL      NATS server for the nats setups (default nats://127.0.0.1:4222)
Environment: LOADTEST_<OPTION> (upper case, - as _; LOADTEST_TIMEOUT_MS for --timeout; 1 for a
switch), e.g. LOADTEST_SETUPS=sqlite,pg; flags win.`;

const OPTION_SPEC = {
  conversations: { type: 'string', short: 'n' },
  concurrency: { type: 'string', short: 'c' },
  duration: { type: 'string', short: 'd' },
  warmup: { type: 'string', short: 'w' },
  rounds: { type: 'string', short: 'r' },
  subscribers: { type: 'string' },
  fanout: { type: 'string' },
  'gen-procs': { type: 'string' },
  timeout: { type: 'string' },
  auth: { type: 'boolean' },
  profile: { type: 'boolean' },
  'keep-data': { type: 'boolean' },
  'daemon-entry': { type: 'string' },
  setups: { type: 'string' },
  'pg-url': { type: 'string' },
  'nats-url': { type: 'string' },
  help: { type: 'boolean', short: 'h' },
} as const;

function parseOptions(argv: string[]): Options {
  let values: Record<string, string | boolean | undefined>;
  try {
    values = parseArgs({ args: argv, options: OPTION_SPEC, strict: true, allowPositionals: false }).values;
  } catch (err) {
    throw new Error(`${(err as Error).message}\n${USAGE}`);
  }
  if (values.help) {
    process.stdout.write(`${USAGE}\n`);
    process.exit(0);
  }
  const raw = (flag: keyof typeof OPTION_SPEC): string | undefined => {
    const v = values[flag];
    if (v !== undefined) return String(v);
    const envName = `LOADTEST_${flag === 'timeout' ? 'TIMEOUT_MS' : flag.toUpperCase().replace(/-/g, '_')}`;
    const e = process.env[envName];
    return e === undefined || e === '' ? undefined : e;
  };
  /** A number option within [min, max]: whole, or with decimals where `decimals` (the suite measures 0.3 s rounds). */
  const bounded =
    (decimals: boolean) =>
    (flag: keyof typeof OPTION_SPEC, def: number, min: number, max: number): number => {
      const v = raw(flag);
      if (v === undefined) return def;
      const form = decimals ? /^\d+(\.\d+)?$/ : /^\d+$/;
      if (!form.test(v) || Number(v) < min || Number(v) > max)
        throw new Error(`--${flag} must be ${decimals ? 'a number of seconds' : 'a whole number'} between ${min} and ${max} (got "${v}")`);
      return Number(v);
    };
  const int = bounded(false);
  const seconds = bounded(true);
  const bool = (flag: keyof typeof OPTION_SPEC) => ['true', '1'].includes(raw(flag) ?? '');
  const conversations = int('conversations', 50, 1, 10_000);
  const subsRaw = raw('subscribers') ?? 'all';
  if (subsRaw !== 'all' && !/^\d+$/.test(subsRaw)) throw new Error(`--subscribers must be a number or "all" (got "${subsRaw}")`);
  const concurrency = int('concurrency', 64, 1, 4096);
  const genProcs = int('gen-procs', 1, 1, 16);
  if (genProcs > concurrency) throw new Error('--gen-procs cannot exceed --concurrency');
  const setups = (raw('setups') ?? 'sqlite').split(',').map((name) => {
    const s = SETUPS[name.trim()];
    if (!s) throw new Error(`--setups: unknown setup "${name}" (known: ${Object.keys(SETUPS).join(', ')})`);
    return s;
  });
  const profile = bool('profile');
  if (profile && setups.some((s) => s.nodes > 1)) throw new Error('--profile profiles one daemon: use it with one-node setups');
  return {
    conversations,
    concurrency,
    duration: seconds('duration', 10, 0.1, 600),
    warmup: int('warmup', 2, 0, 120),
    rounds: int('rounds', 3, 1, 50),
    subscribers: subsRaw === 'all' ? 'all' : Math.min(Number(subsRaw), conversations),
    fanout: int('fanout', 1, 1, 100),
    genProcs,
    timeoutMs: int('timeout', 10_000, 100, 120_000),
    auth: bool('auth'),
    profile,
    keepData: bool('keep-data'),
    daemonEntry: raw('daemon-entry') ?? null,
    setups,
    pgUrl: raw('pg-url') ?? 'postgres://postgres@127.0.0.1:5432/postgres',
    natsUrl: raw('nats-url') ?? 'nats://127.0.0.1:4222',
  };
}

// ================================================================================================
// One setup: start its nodes, load them, verify
// ================================================================================================

/** One run of the identical load against the bare route, on the given conversation ids' paths. */
type BareRun = (ids: string[]) => Promise<RunStats>;

async function measureSetup(
  setup: Setup,
  opts: Options,
  tmpDir: string,
  apiKey: string | null,
  profileDir: string | null,
  bareRun: BareRun,
): Promise<SetupResult> {
  const headers: Record<string, string> = apiKey ? { 'x-session-api-key': apiKey } : {};
  const db = setup.postgres ? await createDatabase(opts.pgUrl) : null;
  const nodes: Server[] = [];
  try {
    const shared: Record<string, string> = {};
    if (db)
      Object.assign(shared, {
        DATABASE_URL: db.url,
        SECRET_KEY: crypto.randomBytes(24).toString('hex'),
        WORKSPACE_ROOT: path.join(tmpDir, `${setup.name}-workspaces`),
      });
    if (setup.nats) Object.assign(shared, { NATS_URL: opts.natsUrl, NATS_PREFIX: `parley_loadtest_${crypto.randomBytes(4).toString('hex')}` });
    for (let i = 0; i < setup.nodes; i++) {
      const env = { ...shared, ...(setup.nodes > 1 ? { NODE_ID: `node-${i + 1}` } : {}) };
      nodes.push(
        await startDaemon(
          setup.nodes > 1 ? `daemon ${i + 1}` : 'daemon',
          opts.daemonEntry ? [opts.daemonEntry] : NPM_START,
          path.join(tmpDir, `${setup.name}-data-${i + 1}`),
          apiKey,
          profileDir,
          env,
        ),
      );
    }
    process.stdout.write(`${setup.label}: daemon pid ${nodes.map((n) => `${n.child.proc.pid} on :${n.port}`).join(', ')}\n`);
    const writer = (i: number) => nodes[i % nodes.length]!;
    const reader = (i: number) => nodes[(i + 1) % nodes.length]!;

    const ids = await createConversations(opts.conversations, (i) => writer(i).port, headers);
    const countOnReaders = () => Promise.all(ids.map((id, i) => countAll(reader(i).port, headers, [id]).then((c) => c[0]!)));
    const baseline = await countOnReaders();

    // subscribers, before any load, each on another node than its conversation's writer
    const subCount = opts.subscribers === 'all' ? ids.length : opts.subscribers;
    /** Each subscriber with the index of its conversation. */
    const subbed = Array.from({ length: subCount * opts.fanout }, (_, k) => Math.floor(k / opts.fanout));
    const subs = subbed.map((i) => subscribe(reader(i).port, headers, ids[i]!));
    await withDeadline(Promise.all(subs.map((s) => s.ready)), 15_000, 'subscribers did not receive their full_state snapshot');
    process.stdout.write(`${ids.length} conversations created, ${subs.length} WebSocket subscribers ready\n`);

    const targets: GenTarget[] = nodes.map((n, k) => {
      const mine = ids.map((_id, i) => i).filter((i) => i % nodes.length === k);
      return { port: n.port, paths: mine.map((i) => `/api/conversations/${ids[i]}/events`), convs: mine };
    });
    const logs0 = nodes.map((n) => ({ warn: n.child.warnLines, error: n.child.errorLines }));
    const commits0 = await storeCommits(nodes, headers);
    const label = opts.setups.length === 1 ? 'Parley POST /api/conversations/{id}/events' : `Parley, ${setup.label}`;
    const rounds: Round[] = [];
    const expected = ids.map(() => 0);
    for (let r = 1; r <= opts.rounds; r++) {
      if (opts.rounds > 1) process.stdout.write(`round ${r} of ${opts.rounds}\n`);
      const stats = await runLoad(label, nodes, targets, opts, headers);
      for (const n of nodes) {
        if (n.child.proc.exitCode !== null || n.child.proc.signalCode !== null)
          throw new Error(
            `${n.child.name} died during the load (${n.child.proc.signalCode ?? `exit code ${n.child.proc.exitCode}`}); ${stats.errors} errors: ` +
              `${stats.errorDetail}`,
          );
      }
      for (const [i, n] of stats.okPerConv.entries()) expected[i]! += n;
      rounds.push({ parley: stats, bare: await bareRun(ids) });
    }
    const totalOk = expected.reduce((a, b) => a + b, 0);

    // verification over every round: committed (as another node sees it) and published (across nodes)
    const waitUntil = now() + 30_000;
    let lastProgress = now();
    let lastSum = -1;
    for (;;) {
      const sum = subs.reduce((a, s) => a + s.messages, 0);
      if (subs.every((s, k) => s.messages >= expected[subbed[k]!]!)) break;
      if (sum !== lastSum) {
        lastSum = sum;
        lastProgress = now();
      }
      if (now() > waitUntil || now() - lastProgress > 5000) break;
      await sleep(50);
    }
    const counts = await countOnReaders();
    const commits = (await storeCommits(nodes, headers)) - commits0;
    const committedPerConv = counts.map((c, i) => c - baseline[i]!);
    const committed = committedPerConv.reduce((a, b) => a + b, 0);
    subs.forEach(closeSubscriber);
    const median = medianRound(rounds);
    return {
      label: setup.label,
      nodes: nodes.length,
      stats: median.parley,
      bare: median.bare,
      rounds,
      totalOk,
      conversations: ids.length,
      subscribers: subCount,
      fanout: opts.fanout,
      committed,
      committedBad: committedPerConv.filter((c, i) => c !== expected[i]).length,
      published: subs.reduce((a, s) => a + s.messages, 0),
      publishedExpected: subs.reduce((a, _s, k) => a + expected[subbed[k]!]!, 0),
      publishedBad: subs.filter((s, k) => s.messages !== expected[subbed[k]!]).length,
      orderViolations: subs.reduce((a, s) => a + s.orderViolations, 0),
      closedEarly: subs.filter((s) => s.closedEarly !== null).map((s) => s.closedEarly!),
      warnLines: nodes.reduce((n, d, k) => n + d.child.warnLines - logs0[k]!.warn, 0),
      errorLines: nodes.reduce((n, d, k) => n + d.child.errorLines - logs0[k]!.error, 0),
      eventsPerCommit: committed / commits,
    };
  } finally {
    // the daemon writes its profile on a clean exit
    await Promise.all(nodes.map((n) => stopChild(n.child, 12_000)));
    await db?.drop().catch((err) => process.stderr.write(`loadtest: could not drop the setup's database: ${(err as Error).message}\n`));
  }
}

// ================================================================================================
// Main
// ================================================================================================

async function main(): Promise<number> {
  const opts = parseOptions(process.argv.slice(2));
  installCleanup();
  const tmpDir = fs.mkdtempSync(path.join(os.tmpdir(), 'parley-loadtest-'));
  useTmpDir(tmpDir, opts.keepData);
  const profileDir = opts.profile ? path.join(tmpDir, 'profile') : null;
  const apiKey = opts.auth ? crypto.randomBytes(24).toString('hex') : null;
  const headers: Record<string, string> = apiKey ? { 'x-session-api-key': apiKey } : {};
  const cpus = os.cpus();
  const started = new Date();
  const subsText = opts.subscribers === 'all' ? opts.conversations : opts.subscribers;
  process.stdout.write(
    `parley load test: ${opts.conversations} conversations, ${opts.concurrency} connections, ${opts.warmup} s warmup + ${opts.duration} s, ` +
      `${subsText} subscribers${opts.fanout > 1 ? ` × ${opts.fanout} per conversation` : ''}, ${opts.genProcs} generator process(es), auth ` +
      `${opts.auth ? 'on' : 'off'}${opts.profile ? ', daemon profiled' : ''}` +
      `${opts.setups.length > 1 || opts.setups[0]!.name !== 'sqlite' ? `; setups: ${opts.setups.map((s) => s.label).join(' | ')}` : ''}\n` +
      `daemon: ${opts.daemonEntry ? `entry ${opts.daemonEntry}` : `node ${NPM_START.join(' ')} (as \`npm start\` runs it, without npm)`}\n` +
      `machine: ${cpus.length} × ${cpus[0]?.model.trim() ?? '?'}, Node ${process.version}, load average ${os.loadavg()[0]!.toFixed(2)}, temp dir ${tmpDir}\n`,
  );

  // the physical limit: the identical load on one bare route, after each round of each setup
  const bare = await startBare();
  process.stdout.write(`bare server pid ${bare.child.proc.pid} on :${bare.port}\n`);
  const bareRun: BareRun = (ids) =>
    runLoad(BARE_LABEL, [bare], [{ port: bare.port, paths: ids.map((id) => `/api/conversations/${id}/events`), convs: ids.map((_id, i) => i) }], opts, headers);
  const results: SetupResult[] = [];
  try {
    for (const setup of opts.setups) results.push(await measureSetup(setup, opts, tmpDir, apiKey, profileDir, bareRun));
  } finally {
    await stopChild(bare.child, 3000);
  }

  process.stdout.write(`${report({ started, ...opts, conversations: opts.conversations }, results)}\n`);

  if (profileDir) {
    const files = fs.existsSync(profileDir) ? fs.readdirSync(profileDir).filter((f) => f.endsWith('.cpuprofile')) : [];
    if (files.length === 0) process.stdout.write('\nno daemon CPU profile was written (did the daemon exit cleanly?)\n');
    else {
      // one profile per V8 isolate: the main thread and tsx's module-hooks thread; show the busy one
      const summaries = files.map((f) => ({ file: path.join(profileDir, f), ...summariseProfile(path.join(profileDir, f), results[0]!.stats.windowUs) }));
      summaries.sort((x, y) => y.active - x.active);
      const { file, text } = summaries[0]!;
      process.stdout.write(`\n${text}\n`);
      if (opts.keepData) process.stdout.write(`profile kept at ${file}\n`);
    }
  }
  const ok = results.every(verified);
  if (!ok) process.stderr.write('\nloadtest: VERIFICATION FAILED: the committed / published counts differ from the 200 responses\n');
  return ok ? 0 : 1;
}

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
