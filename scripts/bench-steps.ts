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
 */
import os from 'node:os';
import { parseArgs } from 'node:util';
import { startDaemon } from '../test/support/daemon.js';
import { startScriptedLlm } from '../test/support/scripted-llm.js';

const { values } = parseArgs({ options: { steps: { type: 'string', default: '1000' }, window: { type: 'string', default: '10' }, 'cpu-prof': { type: 'string' } } });
const steps = Number(values.steps);
const window = Number(values.window);

const llm = await startScriptedLlm();
for (let i = 1; i <= steps; i++) llm.push({ toolCalls: [{ name: 'terminal', arguments: { command: `echo step ${i}` } }] });
llm.push({ toolCalls: [{ name: 'finish', arguments: { message: 'done' } }] });
const d = await startDaemon({ LLM_MODEL: 'openai/scripted', LLM_BASE_URL: llm.url, LLM_API_KEY: 'k', MAX_ITERATIONS: String(steps + 10), LLM_CONTEXT_WINDOW: '10000000', LOG_LEVEL: 'info' }, undefined, {
  nodeArgs: values['cpu-prof'] ? ['--cpu-prof', `--cpu-prof-dir=${values['cpu-prof']}`] : [],
});
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
  console.log(`steps=${steps} total=${total.toFixed(1)} s load=${os.loadavg().map((l) => l.toFixed(2)).join(' ')} (command: npx tsx scripts/bench-steps.ts --steps ${steps} --window ${window})`);
  console.log('step | median gap ms | ratio to step 10');
  for (const p of points) console.log(`${String(p).padStart(4)} | ${at(p).toFixed(2).padStart(13)} | ${(at(p) / base).toFixed(2)}`);
} catch (err) {
  console.error(`the benchmark failed: ${(err as Error).message} (${String((err as Error).cause)}; daemon exit ${d.proc.exitCode} ${d.proc.signalCode})\nlast daemon lines:\n${d.output.slice(-20).join('\n')}`);
  process.exitCode = 1;
} finally {
  await d.stop();
  await llm.close();
  const fs = await import('node:fs');
  fs.rmSync(d.dataDir, { recursive: true, force: true });
}
