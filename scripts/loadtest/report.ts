/**
 * The report of scripts/loadtest.ts: one Markdown table (the bare route, then each Parley setup),
 * each setup's ratio to the bare route, the verification (committed = published), CPU notes and,
 * with --profile, where the daemon's CPU time went.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fmtInt, fmtMs, ROOT } from './common.js';
import type { RunStats } from './runner.js';

const fmtCores = (n: number) => (Number.isFinite(n) ? `${(n * 100).toFixed(0)} %` : 'n/a');

const roundsNote = (rounds: number) =>
  rounds === 1 ? 'one round (Parley, then the bare route)' : `${rounds} rounds of Parley then the bare route, the table shows the round with the median ratio`;

export const BARE_LABEL = 'bare uWS route (read body, JSON.parse, 200)';

/** One round: the load on a Parley setup, then the identical load on the bare route. */
export interface Round {
  parley: RunStats;
  bare: RunStats;
}

const ratioOf = (r: Round) => r.parley.rps / r.bare.rps;
const cpuPerRequest = (s: RunStats) => ((s.serverCores * 1e6) / s.rps).toFixed(1);

/** The round whose ratio is the median (of an even count, the lower of the middle two). */
export function medianRound(rounds: Round[]): Round {
  const sorted = [...rounds].sort((a, b) => ratioOf(a) - ratioOf(b));
  return sorted[Math.floor((sorted.length - 1) / 2)]!;
}

/** What one Parley setup measured and verified. */
export interface SetupResult {
  label: string;
  nodes: number;
  /** The median round's two runs (the table and the CPU figures), and every round. */
  stats: RunStats;
  bare: RunStats;
  rounds: Round[];
  /** 200 responses over every round (what the verification expects committed). */
  totalOk: number;
  conversations: number;
  /** Conversations with subscribers, and the sockets on each. */
  subscribers: number;
  fanout: number;
  committed: number;
  committedBad: number;
  published: number;
  publishedExpected: number;
  publishedBad: number;
  orderViolations: number;
  closedEarly: string[];
  /** Log lines of the daemons during the run. */
  warnLines: number;
  errorLines: number;
  /** Events per store commit (journal frame or PostgreSQL statement) during the run, from the daemons' metrics. */
  eventsPerCommit: number;
}

export const verified = (r: SetupResult) =>
  r.committed === r.totalOk &&
  r.committedBad === 0 &&
  r.published === r.publishedExpected &&
  r.publishedBad === 0 &&
  r.orderViolations === 0 &&
  r.closedEarly.length === 0;

export interface ReportHeader {
  started: Date;
  conversations: number;
  concurrency: number;
  genProcs: number;
  duration: number;
  warmup: number;
  rounds: number;
  auth: boolean;
  profile: boolean;
}

const RATIO_FLOOR = 0.28;

export function report(h: ReportHeader, setups: SetupResult[]): string {
  const cpus = os.cpus();
  const row = (s: RunStats) =>
    `| ${s.label.padEnd(44)} | ${fmtInt(s.rps).padStart(8)} | ${fmtMs(s.p50).padStart(6)} | ${fmtMs(s.p95).padStart(6)} | ` +
    `${fmtMs(s.p99).padStart(6)} | ${String(s.errors).padStart(6)} | ${fmtCores(s.serverCores).padStart(10)} | ` +
    `${fmtCores(s.genCores).padStart(13)} | ${fmtCores(s.otherCores).padStart(9)} |`;
  const subscribers = setups.map((s) => s.subscribers * s.fanout).join('/');
  const lines = [
    '',
    `### Load test: POST /api/conversations/{id}/events (${h.started.toISOString().slice(0, 16).replace('T', ' ')} UTC)`,
    '',
    `${cpus.length} × ${cpus[0]?.model.trim() ?? '?'}, Node ${process.version}, ${os.platform()} ${os.arch()}; ` +
      `${h.conversations} conversations, ${h.concurrency} keep-alive connections (${h.genProcs} generator process${h.genProcs > 1 ? 'es' : ''}, no ` +
      `pipelining), ` +
      `${h.duration} s measured after ${h.warmup} s warmup, ${subscribers} WebSocket subscribers, auth ` +
      `${h.auth ? 'on' : 'off'}${h.profile ? ', daemon under --cpu-prof' : ''}; ` +
      `${roundsNote(h.rounds)}.`,
    '',
    '| target                                       |    req/s | p50 ms | p95 ms | p99 ms | errors | server CPU | generator CPU | other CPU |',
    '|----------------------------------------------|---------:|-------:|-------:|-------:|-------:|-----------:|--------------:|----------:|',
    ...setups.flatMap((s) => [row(s.bare), row(s.stats)]),
    '',
  ];
  const one = setups.length === 1;
  for (const r of setups) {
    const ratio = ratioOf({ parley: r.stats, bare: r.bare });
    const of = one ? '' : ` (${r.label})`;
    // the 0.50 target was withdrawn on 2-core machines (the design's measured ceiling there is ~0.6);
    // the hot path must not regress below 0.28 with subscribers
    const each = r.rounds.length > 1 ? `median of ${r.rounds.length} rounds, ` : '';
    lines.push(`real/bare${of}: ${ratio.toFixed(3)} (${each}floor >= ${RATIO_FLOOR.toFixed(2)}: ${ratio >= RATIO_FLOOR ? 'held' : 'BELOW'})`);
    if (r.rounds.length > 1) {
      const each = r.rounds.map(
        (x, i) => `${i + 1}: ${fmtInt(x.parley.rps)} / ${fmtInt(x.bare.rps)} = ${ratioOf(x).toFixed(3)} (${cpuPerRequest(x.parley)} µs)`,
      );
      lines.push(
        `  rounds (Parley / bare req/s = ratio, daemon CPU per request): ${each.join('; ')}; ` +
          `${r.rounds.filter((x) => ratioOf(x) >= RATIO_FLOOR).length} of ${r.rounds.length} at or above the floor`,
      );
    }
    // steadier than the ratio on a shared machine, where the bare route's own rate swings between runs
    if (r.stats.rps > 0) lines.push(`  daemon CPU per request${of}: ${cpuPerRequest(r.stats)} µs (all its threads, from /proc)`);
    lines.push(
      `committed: ${r.committed}/${r.totalOk}, published: ${r.published}/${r.publishedExpected} ` +
        `(${r.subscribers} of ${r.conversations} conversations ` +
        `subscribed${r.fanout > 1 ? `, ${r.fanout} sockets each` : ''}${r.nodes > 1 ? ', each on another node than its writer' : ''}; seq order ` +
        `${r.orderViolations === 0 ? 'gap-free' : `VIOLATED ${r.orderViolations}×`})`,
    );
    if (Number.isFinite(r.eventsPerCommit)) lines.push(`  events per store commit: ${r.eventsPerCommit.toFixed(1)}`);
    if (r.committedBad) lines.push(`  ${r.committedBad} conversation(s) whose committed count differs from their 200 responses`);
    if (r.publishedBad) lines.push(`  ${r.publishedBad} subscriber(s) whose received MessageEvents differ from their conversation's 200 responses`);
    if (r.closedEarly.length) lines.push(`  ${r.closedEarly.length} subscriber(s) closed during the run: ${r.closedEarly.slice(0, 3).join('; ')}`);
    if (r.stats.unknownOutcome) lines.push(`  ${r.stats.unknownOutcome} request(s) had an unknown outcome (connection lost or timed out in flight)`);
  }
  for (const s of setups.flatMap((r) => r.rounds.flatMap((x) => [x.bare, x.parley]))) if (s.errors) lines.push(`  errors (${s.label}): ${s.errorDetail}`);
  const bare = setups[0]!.bare;
  lines.push(
    '',
    'CPU = cores used during the measured window (100 % = one core): server from /proc/<pid>/stat (all Parley nodes of the setup), generator ' +
      'from its process.cpuUsage(),',
    '"other" = whole machine minus server, generator and the orchestrator (WebSocket subscribers): other processes on the machine ' +
      '(PostgreSQL and NATS included).',
    `generator event-loop utilisation: bare ${bare.genElu.toFixed(2)}, ` +
      `${setups.map((r) => `${one ? 'real' : r.label} ${r.stats.genElu.toFixed(2)}`).join(', ')}; ` +
      `orchestrator (subscribers) CPU ${setups.map((r) => fmtCores(r.stats.orchestratorCores)).join('/')}; ` +
      `daemon log lines after start-up: ${setups.reduce((n, r) => n + r.warnLines, 0)} warn, ${setups.reduce((n, r) => n + r.errorLines, 0)} error.`,
  );
  if (bare.genElu >= 0.85 || bare.genCores >= 0.85) {
    lines.push(
      `note: the load generator was near saturation during the bare run (event loop ${Math.round(bare.genElu * 100)} % busy): ` +
        'the bare figure is a lower bound of what the route can do here, so the ratio above is, if anything, optimistic.',
    );
  }
  const other = Math.max(bare.otherCores, ...setups.filter((r) => r.nodes === 1 && !/PostgreSQL/.test(r.label)).map((r) => r.stats.otherCores));
  if (other >= 0.25) lines.push(`note: other processes used up to ${fmtCores(other)} of a core during a measured window: expect noise; repeat the run.`);
  return lines.join('\n');
}

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number; columnNumber: number };
  children?: number[];
}

export function summariseProfile(file: string, windowUs: [number, number]): { active: number; text: string } {
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
    else if (s.startsWith(`${ROOT}/`)) s = s.slice(ROOT.length + 1);
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
