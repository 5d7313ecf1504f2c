/**
 * An idle daemon has not loaded V8's optimizing compiler. Its first use maps ~3.6 MiB of the node
 * binary's pages into the process (the compiler's own code and the builtins it calls), which stay
 * resident: a tenth of what the daemon holds beyond a bare server at rest. The start alone (the
 * sandbox's probe and first spare: program lookups over PATH, directories, cgroups, the spare's
 * FIFOs) used to call Node's path and validation helpers often enough for V8 to optimize two of
 * them before the first request. `npm start` runs node with a later tier-up (`--interrupt-budget`,
 * package.json), so only code that keeps running hot (a busy conversation, the load test) is
 * optimized, and a daemon that started and ran a text turn has optimized nothing.
 *
 * How it sees: node's `--trace-opt` prints a line for each function it marks for optimization. The
 * built daemon runs with `npm start`'s flags and that one until its sandbox probe has decided and
 * its start's work is done (its first spare made), then through a text turn against the scripted
 * LLM; and, as the control that shows the trace is read, the same start with a budget a quarter of
 * V8's default, which must optimize something by then.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { type DaemonHandle, ensureBuilt, sleep, startDaemon, startFlags, tempDir, waitFor } from './support/daemon.js';
import { threadsCpuMs } from './support/processes.js';
import { startScriptedLlm, type ScriptedLlm } from './support/scripted-llm.js';

let llm: ScriptedLlm;
before(async () => {
  await ensureBuilt();
  llm = await startScriptedLlm();
});
after(async () => {
  await llm?.close();
});

/** Lines of `--trace-opt` that mark a function for optimization (or start an optimized compile). */
const OPTIMIZING = /^\[(?:marking|compiling method|completed compiling) /;

/** The built daemon with `flags` and --trace-opt, once its probe has decided and its start's work is done. */
async function start(flags: string[]): Promise<DaemonHandle> {
  // (startDaemon keeps the test runner's PATH, npm's with node_modules/.bin directories: the start looks programs up on it)
  const d = await startDaemon({ LOG_LEVEL: 'info', LLM_MODEL: 'openai/scripted', LLM_BASE_URL: llm.url, LLM_API_KEY: 'sk-test' }, tempDir(), {
    nodeArgs: [...flags, '--trace-opt'],
  });
  try {
    const info = await d.req('GET', '/server_info');
    assert.equal(info.body.sandbox.mode, 'bwrap', 'the sandbox is on: its start is what the daemon does before the first request');
    // the start's work done (the first spare made): the daemon's threads used under 5 ms of CPU in the
    // last half second. Not asked through /metrics: its first scrape loads the metrics library (~90
    // modules resolved), work no start does
    let before = threadsCpuMs(d.proc.pid!);
    await waitFor(
      async () => {
        await sleep(500);
        const now = threadsCpuMs(d.proc.pid!);
        const quiet = now - before < 5;
        before = now;
        return quiet;
      },
      'the daemon to be idle after its start',
      60_000,
    );
  } catch (e) {
    await d.stop();
    throw e;
  }
  return d;
}

test("an idle daemon, and one that ran a text turn, optimized nothing (V8's optimizing compiler stays unloaded)", async () => {
  const flags = startFlags();
  assert.ok(
    flags.some((f) => f.startsWith('--interrupt-budget=')),
    `npm start sets the tier-up budget: ${flags.join(' ')}`,
  );

  // the control: with a quarter of V8's default budget the same start optimizes (the trace is read)
  const eager = await start([...flags, '--interrupt-budget=16896']);
  try {
    assert.ok(
      eager.output.some((l) => OPTIMIZING.test(l)),
      `the control optimized something:\n${eager.output.slice(-20).join('\n')}`,
    );
  } finally {
    await eager.stop();
  }

  const d = await start(flags);
  try {
    const early = d.output.filter((l) => OPTIMIZING.test(l));
    assert.deepEqual(early, [], 'optimized before the first request');

    const created = await d.req('POST', '/api/conversations', {});
    assert.equal(created.status, 200, created.text);
    const id = created.body.conversation_id as string;
    llm.push({ text: 'hello' });
    const sent = await d.req('POST', `/api/conversations/${id}/events`, { role: 'user', content: [{ type: 'text', text: 'say hello' }], run: true });
    assert.equal(sent.status, 200, sent.text);
    await waitFor(async () => (await d.req('GET', `/api/conversations/${id}`)).body.execution_status === 'finished', 'the text turn to finish', 60_000);
    assert.equal(llm.requests.length, 1, 'the turn reached the LLM');
    const byTurn = d.output.filter((l) => OPTIMIZING.test(l));
    assert.deepEqual(byTurn, [], 'optimized by the start and a text turn');
  } finally {
    await d.stop();
  }
});
