/**
 * What a stop waits for (src/sandbox/processes.ts): the processes below the children this process
 * started detached (the daemon's every spawn), their own children included, and not a child in this
 * process's own session (someone else's, when the daemon is embedded: a test runner's compiler service).
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { describe, test } from 'node:test';
import { descendantsOfSelf } from '../src/sandbox/processes.js';
import { waitFor } from './support/daemon.js';

describe('sandbox processes: what a stop waits for', { timeout: 60_000 }, () => {
  test("a detached child and its child are the daemon's; a child in its own session is not", async () => {
    const ours = spawn('/bin/sh', ['-c', 'sleep 40.1 & echo $!; wait'], { detached: true, stdio: ['ignore', 'pipe', 'ignore'] });
    const foreign = spawn('sleep', ['40.2'], { stdio: 'ignore' });
    try {
      let grandchild = 0;
      ours.stdout!.on('data', (d: Buffer) => (grandchild = Number(String(d).trim())));
      await waitFor(() => grandchild > 0, "the detached child's child runs");
      const seen = descendantsOfSelf();
      assert.ok(seen.includes(ours.pid!), 'the detached child');
      assert.ok(seen.includes(grandchild), "the detached child's child");
      assert.ok(!seen.includes(foreign.pid!), `not the child in this process's session: ${seen.join(' ')}`);
    } finally {
      process.kill(-ours.pid!, 'SIGKILL');
      foreign.kill('SIGKILL');
    }
  });
});
