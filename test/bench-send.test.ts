/**
 * scripts/bench-send.ts runs and measures what it says: every message reaches its conversation's
 * subscriber (the script fails otherwise), and it prints positive per-message figures for each checkout.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { test } from 'node:test';
import { promisify } from 'node:util';
import { ROOT } from './support/daemon.js';

test('bench-send prints the event loop and all-thread cost per message, with every message published', { timeout: 120_000 }, async () => {
  const { stdout } = await promisify(execFile)(
    process.execPath,
    ['--import', 'tsx', 'scripts/bench-send.ts', '--runs', '1', '--messages', '2000', '--conversations', '5'],
    {
      cwd: ROOT,
      timeout: 110_000,
    },
  );
  assert.match(stdout, /^sendMessage in process \(no HTTP\): 2000 messages over 5 conversations, 40 per event-loop turn/m);
  const lines = [...stdout.matchAll(/event loop ([\d.]+) µs\/message busy, all threads ([\d.]+) µs\/message \(until indexed\), ([\d,]+) messages\/s/g)];
  assert.equal(lines.length, 1, stdout);
  for (const [, busy, all, rate] of lines) {
    // both are positive; their order is not fixed: the loop's busy time is wall time, which a loaded machine
    // stretches, while the threads' figure is CPU time
    assert.ok(Number(busy) > 0 && Number(all) > 0, stdout);
    assert.ok(Number(rate!.replace(/,/g, '')) > 0, stdout);
  }
});
