/**
 * What attaching SANDBOX_NETWORK=egress to a sandbox costs, against starting the sandbox itself in
 * the same run.
 *
 *   npx tsx scripts/bench-egress.ts [--rounds 20]
 *
 * Each round starts a sandbox holder as the launcher does (an unprivileged bwrap with user, pid and
 * net namespaces; as root under setpriv as a dedicated uid) and times, in ms: the holder until it is
 * up, `attachEgress` (slirp4netns started, tap0 configured, the nftables filter loaded), and the
 * handle's `close` (slirp4netns killed and reaped). The tools come from one `probeEgress`, as in the
 * launcher. Medians and minima, and attach as a ratio of the
 * holder's start. The machine's load average is printed: absolute figures move with it.
 */
import os from 'node:os';
import { parseArgs } from 'node:util';
import { attachEgress, parseAllowNets, probeEgress } from '../src/sandbox/network.js';
import { startSandbox } from '../test/support/netns.js';

const { values: args } = parseArgs({ options: { rounds: { type: 'string', default: '20' } } });
const ROUNDS = Number(args.rounds);
const root = process.getuid?.() === 0;
const uid = root ? 1_900_000_000 + Math.floor(Math.random() * 90_000_000) : process.getuid!();
const runAs = root ? { uid, gid: uid } : undefined;
// a realistic allow list: one private mirror, one host loopback service
const allow = parseAllowNets('10.20.30.0/24:3128, 127.0.0.1:9418');

// as the launcher does: probe once at start-up, hand the tools found to every attach
const probe = await probeEgress({ runAs });
if (!probe.usable) throw new Error(`egress is not usable here: ${probe.reason}`);
const tools = probe.tools;

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};
const times = { holder: [] as number[], attach: [] as number[], close: [] as number[] };
const load = () =>
  os
    .loadavg()
    .map((l) => l.toFixed(2))
    .join(' ');
const loadBefore = load();
for (let i = 0; i < ROUNDS + 1; i++) {
  const t0 = performance.now();
  const sb = await startSandbox(uid);
  const t1 = performance.now();
  const egress = await attachEgress({ userns: sb.userns, netns: sb.netns, runAs, allow, tools });
  const t2 = performance.now();
  await egress.close();
  const t3 = performance.now();
  await sb.close();
  // the first round warms the page cache and is not counted
  if (i === 0) continue;
  times.holder.push(t1 - t0);
  times.attach.push(t2 - t1);
  times.close.push(t3 - t2);
}
const line = (name: string, xs: number[]) =>
  `${name.padEnd(8)} median ${median(xs).toFixed(1).padStart(7)} ms   min ${Math.min(...xs)
    .toFixed(1)
    .padStart(7)} ms`;
console.log(
  `npx tsx scripts/bench-egress.ts --rounds ${ROUNDS}   (${root ? `root, sandboxes as uid ${uid}` : `uid ${uid}`}; load average before ` +
    `${loadBefore}, after ${load()}; ${os.cpus().length} cpus)`,
);
console.log(line('holder', times.holder));
console.log(line('attach', times.attach));
console.log(line('close', times.close));
console.log(`attach / holder start: ${(median(times.attach) / median(times.holder)).toFixed(2)}`);
