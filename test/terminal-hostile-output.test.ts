/**
 * The shell's output is hostile input too (src/tools/terminal/session.ts parses it for its nonce
 * sentinels): a command that prints 32 MiB without a newline, one that prints the start of a
 * sentinel and never its end, and one that prints forged sentinels for another nonce. Each
 * command's observation comes back (the head and tail of what it printed), the shell goes on, and
 * the process holding the terminal (this one) grows by a bounded amount, not by what was printed.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import v8 from 'node:v8';
import vm from 'node:vm';
import { makeCtx, run, textOf, useTerminalTool } from './support/terminal-harness.js';

const MiB = 1024 * 1024;
v8.setFlagsFromString('--expose-gc');
const gc = vm.runInNewContext('gc') as () => void;
const heap = () => {
  gc();
  return process.memoryUsage().heapUsed;
};

describe('hostile shell output', { timeout: 120_000 }, () => {
  useTerminalTool();

  for (const [what, command] of [
    ['8 MiB without a newline', 'head -c 8388608 /dev/zero | tr "\\0" x'],
    ["a sentinel's start and never its end, 8 MiB after it", 'printf "\\036PARLEY:"; head -c 8388608 /dev/zero | tr "\\0" y'],
    ['forged sentinels of other nonces, 20,000 of them', 'for i in $(seq 20000); do printf "\\036PARLEY:bad$i:0:/tmp\\037"; done; echo'],
  ] as const) {
    test(`${what}: the observation comes back, the shell goes on, nothing of it is kept`, async () => {
      const ctx = makeCtx();
      const before = heap();
      const obs = await run(ctx, { command, timeout: 90 });
      const kept = (heap() - before) / MiB;
      assert.equal(obs.is_error, false, textOf(obs).slice(0, 300));
      assert.ok(textOf(obs).length < 200_000, `the observation is bounded (${textOf(obs).length} characters)`);
      const next = await run(ctx, { command: 'echo still-here' });
      assert.match(textOf(next), /still-here/);
      assert.ok(kept < 16, `the terminal kept ${kept.toFixed(0)} MiB`);
    });
  }
});
