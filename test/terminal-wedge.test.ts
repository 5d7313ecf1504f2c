/**
 * C-c and a shell that a SIGINT wedged: spinning at full CPU with SIGCHLD blocked beside a child it
 * never reaps (what bash 5.2 does when a SIGINT comes as it swaps its SIGINT handler). Played here by a
 * perl process that does just that; the shells that are not wedged are played the same way, each
 * missing one of the signs. Judged by whether the terminal kills it, with the process seen from /proc.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';
import type { RunningCommand } from '../src/tools/terminal/command.js';
import { interrupt, type Interruptible } from '../src/tools/terminal/interrupt.js';
import { waitFor } from './support/daemon.js';
import { isAlive } from './support/processes.js';
import { makeCtx, run, textOf, tool, useTerminalTool } from './support/terminal-harness.js';

useTerminalTool();

/** A perl "shell": SIGINT handled (it stays), SIGCHLD blocked or not, a child that ends at once, then `rest` (spin or sleep). */
function fakeShell(blockChld: boolean, rest: 'spin' | 'sleep'): Promise<ChildProcess> {
  const script = [
    'use POSIX;',
    '$| = 1; $SIG{INT} = sub {};',
    blockChld ? 'sigprocmask(SIG_BLOCK, POSIX::SigSet->new(SIGCHLD));' : '',
    'my $pid = fork(); POSIX::_exit(0) if $pid == 0;',
    'print "ready\\n";',
    rest === 'spin' ? '1 while 1;' : 'sleep 60 while 1;',
  ].join(' ');
  const p = spawn('perl', ['-e', script], { detached: true, stdio: ['ignore', 'pipe', 'inherit'] });
  return new Promise((resolve, reject) => {
    p.once('error', reject);
    p.stdout!.once('data', () => resolve(p));
  });
}

/** The shell as C-c sees it; `wedged` counts the kills asked for (and kills it). */
function interruptible(p: ChildProcess, rc: { done: object | null }): Interruptible & { wedges: number } {
  return {
    groupPid: p.pid!,
    shellPid: p.pid!,
    exited: null,
    interruptSent: false,
    wedges: 0,
    async waitDone(_rc, ms) {
      await sleep(ms);
      return rc.done !== null;
    },
    waitForChange: (ms) => sleep(ms),
    wedged() {
      this.wedges++;
      process.kill(-p.pid!, 'SIGKILL');
    },
  };
}

async function withShell(blockChld: boolean, rest: 'spin' | 'sleep', fn: (s: ReturnType<typeof interruptible>) => Promise<void>) {
  const p = await fakeShell(blockChld, rest);
  const rc = { began: true, done: null as object | null };
  const s = interruptible(p, rc);
  try {
    await interrupt(s, rc as unknown as RunningCommand);
    await fn(s);
  } finally {
    rc.done = {}; // ends the watch
    try {
      process.kill(-p.pid!, 'SIGKILL');
    } catch {
      /* gone */
    }
  }
}

describe('C-c and a shell a SIGINT wedged', { timeout: 60_000 }, () => {
  it('kills a shell that spins with SIGCHLD blocked beside a child it does not reap', async () => {
    await withShell(true, 'spin', async (s) => {
      await waitFor(() => s.wedges > 0, 'the wedged shell to be killed', 20_000);
      assert.equal(s.wedges, 1);
      await waitFor(() => !isAlive(s.shellPid), 'the shell to be gone');
    });
  });

  for (const [blockChld, rest, what] of [
    [true, 'sleep', 'rests (waiting, not spinning) with SIGCHLD blocked and a zombie child'],
    [false, 'spin', 'spins with a zombie child but is told of its end (SIGCHLD not blocked)'],
  ] as const) {
    it(`leaves alone a shell that ${what}`, async () => {
      await withShell(blockChld, rest, async (s) => {
        // four times the time a wedge takes to be seen, the SIGINT sent again meanwhile
        await sleep(4000);
        assert.equal(s.wedges, 0);
        assert.ok(isAlive(s.shellPid));
      });
    });
  }

  it('a shell killed as wedged after the call that sent C-c returned: the next call says what became of the command', async () => {
    const ctx = makeCtx();
    const loop = await run(ctx, { command: 'while true; do /bin/true; done' });
    assert.equal(loop.exit_code, -1);
    const shell = tool.pool.session(ctx.conversationId)!;
    shell.wedged();
    await waitFor(() => !isAlive(shell.pid), 'the shell to be killed');
    const next = await run(ctx, { command: '' });
    assert.match(textOf(next), /The previous command "while true; do \/bin\/true; done" could not be stopped, so the whole shell was killed/);
    assert.match(textOf(next), /No command is running/);
    assert.match(textOf(await run(ctx, { command: 'echo still-here' })), /^still-here\n/);
  });
});
