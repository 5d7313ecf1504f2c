/**
 * What an idle conversation costs, with the sandbox on (SANDBOX=bwrap, egress), and
 * what its next turn pays to get its shell back.
 *
 *   npx tsx scripts/bench-idle.ts [--conversations 40] [--idle-ms 5000] [--llm-ms 0]
 *
 * 1. `--conversations` one-turn conversations (a terminal call `echo hi | tee hello-<i>.txt` in the
 *    conversation's shell, then an answer; scripted instant LLM), one after the other.
 * 2. Right after the last turn ended: the daemon's descendant processes and their summed PSS
 *    (from /proc/<pid>/smaps_rollup), per conversation — the shell and the sandbox are still up.
 * 3. After SANDBOX_IDLE_CLOSE_MS (`--idle-ms`, plus a margin): the same — the idle shells and their
 *    sandboxes are closed (only the spare holder, no conversation's, is left).
 * 4. The next turn: for 10 conversations, a turn whose shell was idle-closed (its sandbox comes back
 *    and a new shell takes up its state) against a turn whose shell is still up, alternating; median
 *    of the time from the user's message to the agent's answer (the timestamps the daemon gives
 *    them), and what the restart adds. Two ways back: the message sent at once, with no socket open
 *    (its first step waits for the sandbox: with a disk image per conversation, the root daemon's
 *    default, a holder of its own starts; with measured disks the spare takes its files), and the
 *    client's socket opened first, the message sent once the sandbox the socket started is up (seen
 *    from /proc), as a user who opens a conversation and then types. Each restart turn starts once
 *    the spare holder is ready (an empty workspace, its view sealed, its egress tool up).
 * `--llm-ms`: the scripted LLM takes that long to answer the step that asks for the command (a
 * real LLM's time to its first tool call; default 0, an instant one). A returning conversation's
 * shell starts while the LLM answers (the terminal's prewarm), so this is what that hides.
 * Figures move with the machine's load (printed).
 */
import os from 'node:os';
import { parseArgs } from 'node:util';
import { allEvents } from '../test/support/conversation-api.js';
import { startDaemon, waitFor, type DaemonHandle } from '../test/support/daemon.js';
import { readyHolderWith, readySpare } from '../test/support/holders.js';
import { descendants, memoryKiB } from '../test/support/processes.js';
import { startScriptedLlm, type ScriptedLlm } from '../test/support/scripted-llm.js';
import { connect } from '../test/support/ws-client.js';

const { values: args } = parseArgs({
  options: { conversations: { type: 'string', default: '40' }, 'idle-ms': { type: 'string', default: '5000' }, 'llm-ms': { type: 'string', default: '0' } },
});
const N = Number(args.conversations);
const IDLE_MS = Number(args['idle-ms']);
const LLM_MS = Number(args['llm-ms']);

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

/** The daemon's living descendants and their PSS (kB). */
function tree(root: number): { processes: number; pssKiB: number } {
  let processes = 0;
  let pssKiB = 0;
  for (const pid of descendants(root)) {
    processes++;
    pssKiB += memoryKiB(pid).pss;
  }
  return { processes, pssKiB };
}

/** A turn's parts (ms): message → the LLM asked, the command's step (action → observation), observation → answer. */
interface Parts {
  toLlm: number;
  step: number;
  toAnswer: number;
}

async function turn(d: DaemonHandle, llm: ScriptedLlm, id: string, command: string, parts?: Parts[]): Promise<number> {
  const before = (await allEvents(d.req, id)).length;
  let asked = 0;
  llm.push(
    () => {
      asked = Date.now();
      return { toolCalls: [{ name: 'terminal', arguments: { command } }], ...(LLM_MS > 0 ? { delayMs: LLM_MS } : {}) };
    },
    { text: 'done' },
  );
  const r = await d.req('POST', `/api/conversations/${id}/events`, { content: [{ text: 'go' }], run: true });
  if (r.status !== 200) throw new Error(r.text);
  const isAnswer = (e: { kind: string; source: string }) => e.kind === 'MessageEvent' && e.source === 'agent';
  const turnEvents = (await waitFor(
    async () => {
      const evs = (await allEvents(d.req, id)).slice(before);
      return evs.some(isAnswer) ? evs : null;
    },
    'the answer',
    120_000,
  ))!;
  // the daemon's own clock: from the user's message to the agent's answer, as the log stamps them
  // (a poll of the log would add up to its interval)
  const stamp = (e: { timestamp: string } | undefined) => Date.parse(e!.timestamp);
  const took = stamp(turnEvents.find(isAnswer)) - stamp(turnEvents.find((e) => e.kind === 'MessageEvent' && e.source === 'user'));
  const action = turnEvents.find((e) => e.kind === 'ActionEvent');
  const observation = turnEvents.find((e) => e.kind === 'ObservationEvent');
  if (parts && action && observation) {
    const user = stamp(turnEvents.find((e) => e.kind === 'MessageEvent' && e.source === 'user'));
    parts.push({ toLlm: asked - user, step: stamp(observation) - stamp(action), toAnswer: stamp(turnEvents.find(isAnswer)) - stamp(observation) });
  }
  await waitFor(async () => (await d.req('GET', `/api/conversations/${id}`)).body.execution_status !== 'running', 'the turn ended', 60_000);
  return took;
}

const llm = await startScriptedLlm();
const d = await startDaemon({
  LLM_MODEL: 'openai/scripted',
  LLM_BASE_URL: llm.url,
  SANDBOX: 'bwrap',
  SANDBOX_IDLE_CLOSE_MS: String(IDLE_MS),
  SANDBOX_MAX_LIVE: String(Math.max(64, N + 16)),
});
try {
  const daemon = d.proc.pid!;
  const base = tree(daemon);
  const ids: string[] = [];
  for (let i = 0; i < N; i++) {
    const id = (await d.req('POST', '/api/conversations', {})).body.conversation_id as string;
    ids.push(id);
    await turn(d, llm, id, `echo hi | tee hello-${i}.txt`);
  }
  const busy = tree(daemon);
  await new Promise((r) => setTimeout(r, IDLE_MS + 5000));
  await waitFor(() => tree(daemon).processes <= base.processes + 2, 'the idle sandboxes closed', 120_000).catch(() => {});
  const idle = tree(daemon);
  const per = (t: { processes: number; pssKiB: number }) =>
    `${((t.processes - base.processes) / N).toFixed(2)} processes, ${((t.pssKiB - base.pssKiB) / 1024 / N).toFixed(2)} MiB PSS per conversation ` +
    `(${t.processes} processes, ${(t.pssKiB / 1024).toFixed(0)} MiB in all)`;
  // the next turn: shell idle-closed (the sandbox starts again) against a shell that is up
  const restart: number[] = [];
  const watched: number[] = [];
  const live: number[] = [];
  const restartParts: Parts[] = [];
  const watchedParts: Parts[] = [];
  const liveParts: Parts[] = [];
  const rounds = Math.min(10, Math.floor(N / 2));
  for (let i = 0; i < rounds; i++) {
    await waitFor(() => readySpare(daemon, true), 'the spare holder is ready', 60_000);
    restart.push(await turn(d, llm, ids[i]!, 'echo again', restartParts)); // its sandbox was closed while idle
    live.push(await turn(d, llm, ids[i]!, 'echo again', liveParts)); // its shell is up
    // its client comes back first: the socket starts the sandbox, the message follows once it is up
    await waitFor(() => readySpare(daemon, true), 'the spare holder is ready', 60_000);
    const id = ids[rounds + i]!;
    const ws = connect(`ws://127.0.0.1:${d.port}/sockets/events/${id}`);
    try {
      await ws.opened;
      await waitFor(() => readyHolderWith(daemon, `hello-${rounds + i}.txt`), 'its sandbox with its files', 60_000);
      watched.push(await turn(d, llm, id, 'echo again', watchedParts));
    } finally {
      ws.close();
    }
  }
  console.log(
    `bench-idle: ${N} one-turn conversations, SANDBOX_IDLE_CLOSE_MS=${IDLE_MS}, LLM ${LLM_MS} ms to the command, load average ${os
      .loadavg()
      .map((l) => l.toFixed(2))
      .join(' ')}`,
  );
  console.log(`  daemon alone (spare holder, egress): ${base.processes} processes, ${(base.pssKiB / 1024).toFixed(0)} MiB PSS`);
  console.log(`  right after the turns:   ${per(busy)}`);
  console.log(`  after the idle close:    ${per(idle)}`);
  console.log(
    `  next turn: shell restored ${median(restart).toFixed(1)} ms, shell up ${median(live).toFixed(1)} ms (median of ${restart.length}): ` +
      `+${(median(restart) - median(live)).toFixed(1)} ms`,
  );
  console.log(
    `  next turn after its socket opened (the sandbox started then): ${median(watched).toFixed(1)} ms (median of ${watched.length}): ` +
      `+${(median(watched) - median(live)).toFixed(1)} ms`,
  );
  const partsOf = (ps: Parts[]) => (['toLlm', 'step', 'toAnswer'] as const).map((k) => `${k} ${median(ps.map((p) => p[k])).toFixed(0)}`).join(', ');
  console.log(`  medians (ms), restored: ${partsOf(restartParts)}; socket first: ${partsOf(watchedParts)}; up: ${partsOf(liveParts)}`);
} finally {
  await d.stop();
  await llm.close();
}
