/**
 * The host command runner (src/sandbox/host-commands.ts): the one `sh` that runs the daemon's short
 * host commands (mkfs, mount, mkfifo, a sandbox's seal). Each command's own status and stderr, even
 * with hundreds at once; nothing in an argument is the shell's; a command past its timeout is killed
 * with what it started (judged from /proc); a runner that dies fails what it ran and is started again;
 * a stop leaves no runner behind.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, describe, test } from 'node:test';
import { endHostCommands, hostCommand, runOnHost, shellCommand } from '../src/sandbox/host-commands.js';
import { waitFor } from './support/daemon.js';

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'parley-host-commands-'));
after(async () => {
  await endHostCommands(5000);
  fs.rmSync(dir, { recursive: true, force: true });
});

/** Whether `pid` is gone or a zombie. */
function ended(pid: number): boolean {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    return /^[ZX]/.test(stat.slice(stat.lastIndexOf(')') + 2));
  } catch {
    return true;
  }
}

/** The runners of this process now: its children running the runner's loop. */
function runners(): number[] {
  const out: number[] = [];
  for (const d of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const stat = fs.readFileSync(`/proc/${d}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      if (ppid === process.pid && fs.readFileSync(`/proc/${d}/cmdline`, 'utf8').includes('read -r l') && !ended(Number(d))) out.push(Number(d));
    } catch {
      /* gone */
    }
  }
  return out;
}

describe('host command runner', { timeout: 120_000 }, () => {
  test("each command's exit status and stderr; its stdout is not read", async () => {
    assert.deepEqual(await hostCommand(shellCommand(['true'])), { code: 0, stderr: '' });
    const r = await hostCommand(shellCommand(['sh', '-c', 'echo to stdout; echo first >&2; echo "why: $1" >&2; exit 3', '_', 'it broke']));
    assert.deepEqual(r, { code: 3, stderr: 'first\nwhy: it broke' });
    await assert.rejects(runOnHost(['sh', '-c', 'echo "mkfs: no space" >&2; exit 1']), /^Error: sh: mkfs: no space$/);
    await assert.rejects(runOnHost(['/nonexistent/program']), /^Error: program: .*not found/);
  });

  test('nothing in an argument is run by the shell', async () => {
    const marker = path.join(dir, 'injected');
    const hostile = [`'; touch ${marker}; '`, `$(touch ${marker})`, `\`touch ${marker}\``, `"; touch ${marker} #`, '\\', "'", '$HOME *'];
    for (const arg of hostile) {
      const r = await hostCommand(shellCommand(['sh', '-c', 'printf %s "$1" >&2; exit 1', '_', arg]));
      assert.deepEqual(r, { code: 1, stderr: arg.trim() });
    }
    assert.equal(fs.existsSync(marker), false, 'no argument ran a command');
  });

  test('300 commands at once: each gets its own status and stderr', async () => {
    const n = 300;
    const results = await Promise.all(
      Array.from({ length: n }, (_, i) => hostCommand(shellCommand(['sh', '-c', 'echo "n$1" >&2; exit $(($1 % 5))', '_', String(i)]))),
    );
    for (const [i, r] of results.entries()) assert.deepEqual(r, i % 5 === 0 ? { code: 0, stderr: '' } : { code: i % 5, stderr: `n${i}` }, `command ${i}`);
  });

  test('a command past its timeout is killed with the processes it started', async () => {
    const pidFile = path.join(dir, 'pids');
    const t = Date.now();
    const r = await hostCommand(shellCommand(['sh', '-c', 'sleep 300 & echo $! > "$1"; echo $$ >> "$1"; wait', '_', pidFile]), 1500);
    assert.deepEqual(r, { code: -1, stderr: 'timed out' });
    assert.ok(Date.now() - t < 60_000, 'it resolved at its timeout, not at its end');
    await waitFor(() => fs.existsSync(pidFile) && fs.readFileSync(pidFile, 'utf8').trim().split('\n').length === 2, 'the command wrote its pids');
    const pids = fs.readFileSync(pidFile, 'utf8').trim().split('\n').map(Number);
    await waitFor(() => pids.every(ended), `the command and its sleep are gone (${pids.join(' ')})`);
    // the runner goes on
    assert.equal((await hostCommand(shellCommand(['true']))).code, 0);
  });

  test('a command with a newline in it runs too (spawned on its own)', async () => {
    assert.deepEqual(await hostCommand(shellCommand(['sh', '-c', 'echo "$1" >&2; exit 4', '_', 'two\nlines'])), { code: 4, stderr: 'two\nlines\n' });
  });

  test('a runner that dies fails what it was running; the next command starts a new one', async () => {
    const started = Date.now();
    const running = hostCommand(shellCommand(['sleep', '300']));
    await waitFor(() => runners().length === 1, 'the runner runs');
    const [first] = runners();
    process.kill(-first!, 'SIGKILL');
    assert.deepEqual(await running, { code: -1, stderr: 'the host command runner ended' });
    assert.ok(Date.now() - started < 60_000);
    assert.deepEqual(await hostCommand(shellCommand(['sh', '-c', 'exit 7'])), { code: 7, stderr: '' });
    const [second] = runners();
    assert.ok(second && second !== first, 'a new runner');
  });

  test('a graceful stop lets a command finish; no runner is left', async () => {
    const file = path.join(dir, 'finished');
    const running = hostCommand(shellCommand(['sh', '-c', 'sleep 0.5; touch "$1"', '_', file]));
    await waitFor(() => runners().length === 1, 'the runner runs');
    await endHostCommands(10_000, true);
    assert.deepEqual(await running, { code: 0, stderr: '' });
    assert.ok(fs.existsSync(file));
    assert.deepEqual(runners(), []);
  });

  test('a stop kills the commands still running; no runner or command is left', async () => {
    const pidFile = path.join(dir, 'stopped');
    const running = hostCommand(shellCommand(['sh', '-c', 'echo $$ > "$1"; exec sleep 300', '_', pidFile]));
    await waitFor(() => fs.existsSync(pidFile) && fs.readFileSync(pidFile, 'utf8').endsWith('\n'), 'the command runs');
    const pid = Number(fs.readFileSync(pidFile, 'utf8'));
    await endHostCommands(10_000);
    assert.equal((await running).code, -1);
    await waitFor(() => ended(pid), 'the command is gone');
    assert.deepEqual(runners(), []);
  });
});
