/**
 * A run's first step reads the repository's instructions (AGENTS.md, .cursorrules, the microagents)
 * through the conversation's file service in its sandbox. This times that read with the files asked
 * for ahead of the one being handled (as the daemon does) against one request at a time, alternating,
 * in the same sandbox and run.
 *
 *   npx tsx scripts/bench-instructions.ts [--microagents 20] [--rounds 200]
 *
 * Runs bwrap as the daemon would (as root, files as the sandbox uid 65533). Figures move with the
 * machine's load (printed).
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { DEFAULT_SANDBOX_SETTINGS, Sandbox } from '../src/sandbox/launcher.js';
import { loadRepoInstructions } from '../src/workspace/instructions.js';

const { values: args } = parseArgs({ options: { microagents: { type: 'string', default: '20' }, rounds: { type: 'string', default: '200' } } });
const N = Number(args.microagents);
const ROUNDS = Number(args.rounds);

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const p90 = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length * 0.9)]!;

const root = fs.mkdtempSync(path.join(os.tmpdir(), 'parley-bench-instructions-'));
const runAs = process.getuid?.() === 0 ? { uid: 65533, gid: 65533 } : null;
const sb = await Sandbox.open({ ...DEFAULT_SANDBOX_SETTINGS, mode: 'bwrap', network: 'none', runAs }, { workspaceRoot: root });
try {
  const id = crypto.randomUUID();
  // the files written inside the sandbox, as the agent or a clone would: they are the sandbox uid's
  const write =
    'echo "Use pnpm." > AGENTS.md && echo "Small functions." > .cursorrules && mkdir -p .openhands/microagents && ' +
    `for i in $(seq 1 ${N}); do printf -- "---\\nname: m$i\\ntriggers: [word$i]\\n---\\n%s\\n" "$(head -c 600 /dev/zero | tr '\\0' x)" ` +
    '> .openhands/microagents/m$i.md; done';
  const sh = sb.spawn(id, ['/bin/sh', '-c', write], { env: sb.env(), stdio: 'ignore' });
  await new Promise((r) => sh.on('close', r));
  const files = sb.files(id, sb.hostWorkspace(id));
  const read = async (readAhead?: number) => {
    const t0 = performance.now();
    const r = await loadRepoInstructions(files, readAhead ? { readAhead } : {});
    const dt = performance.now() - t0;
    if (r.triggered.length !== N || r.always.length !== 2) throw new Error(`read ${r.always.length} + ${r.triggered.length} instructions, not 2 + ${N}`);
    return dt;
  };
  const times: Record<'ahead' | 'one', number[]> = { ahead: [], one: [] };
  for (let i = 0; i < 20; i++) await read(1).then(() => read());
  for (let i = 0; i < ROUNDS; i++) {
    // alternating which goes first
    if (i % 2) {
      times.one.push(await read(1));
      times.ahead.push(await read());
    } else {
      times.ahead.push(await read());
      times.one.push(await read(1));
    }
  }
  console.log(
    `bench-instructions: AGENTS.md, .cursorrules and ${N} microagents through the file service, ${ROUNDS} rounds, load average ${os
      .loadavg()
      .map((l) => l.toFixed(2))
      .join(' ')}, ${runAs ? 'as root (sandbox uid 65533)' : 'unprivileged'}`,
  );
  const line = (name: string, xs: number[]) => `  ${name.padEnd(34)} ${median(xs).toFixed(2)} ms (p90 ${p90(xs).toFixed(2)})`;
  console.log(line('one request at a time', times.one));
  console.log(line("read ahead (the daemon's)", times.ahead));
  console.log(`  ratio (read ahead / one at a time): ${(median(times.ahead) / median(times.one)).toFixed(2)}`);
} finally {
  await sb.close();
  fs.rmSync(root, { recursive: true, force: true });
}
