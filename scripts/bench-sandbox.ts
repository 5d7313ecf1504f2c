/**
 * What the bubblewrap sandbox costs, measured against plain processes in the same run.
 *
 *   npx tsx scripts/bench-sandbox.ts [--shells 40] [--turns 20]
 *
 * 1. Shell creation: `ShellSession.start` (the terminal's persistent bash: spawn, init script, ready
 *    marker) for a NEW conversation each time, through the launcher in bwrap mode (the conversation's
 *    sandbox from the spare holder, then cgroup join + sh + bwrap joining it + sh + bash) and in none
 *    mode (bash alone), `--shells` times each, alternating; median and min in ms, and the added ms.
 *    Before each, the spare holder is let come up (the daemon starts the next one 50 ms after a
 *    conversation took one), so the figure is what a conversation's first shell costs. "cold":
 *    the same without a spare (conversations created in a burst): holder, then the joining bwrap.
 * 2. Agent turns: a real daemon (SANDBOX=bwrap, then SANDBOX=none) and the scripted LLM; each turn
 *    is a user message → a terminal tool call (`echo`) → an answer, timed from the POST until the
 *    agent's MessageEvent. The first turn of a conversation starts its shell; the others reuse it.
 *    A first conversation warms the daemon up and is not counted; then 6 conversations begun back to
 *    back, then 6 begun 1.5 s apart (one turn each: with the spare holder ready, as conversations
 *    begun seconds apart find it).
 * The machine's load average is printed: absolute figures move with it, the ratios less.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { Sandbox, DEFAULT_SANDBOX_SETTINGS } from '../src/sandbox/launcher.js';
import { ShellSession } from '../src/tools/terminal/session.js';
import { startDaemon, waitFor } from '../test/support/daemon.js';
import { startScriptedLlm } from '../test/support/scripted-llm.js';

const { values: args } = parseArgs({ options: { shells: { type: 'string', default: '40' }, turns: { type: 'string', default: '20' } } });
const SHELLS = Number(args.shells);
const TURNS = Number(args.turns);

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

console.log(
  `machine: ${os.cpus().length} CPUs, load average ${os
    .loadavg()
    .map((x) => x.toFixed(1))
    .join(' ')}`,
);
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
