/**
 * The seccomp loader (src/sandbox/seccomp.ts) forks each joined process and waits for it; the child asks
 * for SIGKILL when that parent dies. A child whose parent died before it asked must not run its command
 * with nothing waiting for it (the daemon killed it, or timed it out, just then). The window is a few
 * instructions wide: a pause is put in it here (the loader's text, changed as the fd test changes it), the
 * parent is killed there, and the host sees whether the command ran. Run on the host, no namespaces.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after, describe, test } from 'node:test';
import { findProgram } from '../src/sandbox/programs.js';
import { callNumbers, seccompLoader, seccompProgram } from '../src/sandbox/seccomp.js';
import { removeDir, tempDir, waitFor } from './support/daemon.js';

const dir = tempDir('parley-loader-');
after(() => removeDir(dir));

const perl = findProgram('perl')!;
const hex = seccompProgram().toString('hex');
const SETSID = `syscall(${callNumbers().setsid})`;
/** The loader with a second's pause in its child, right after the fork, before it asks for SIGKILL. */
const paused = (loader: string) => {
  assert.ok(loader.includes(SETSID), 'the child starts with its setsid');
  return loader.replace(SETSID, `select(undef, undef, undef, 1); ${SETSID}`);
};
const CHECK = /my \$pp = getppid\(\);.*?is gone\\n";/;

const state = (pid: string) => {
  try {
    return fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]![0]!;
  } catch {
    return 'gone';
  }
};

/** Runs `loader` with a command that leaves `marker`, kills its parent once it has forked: whether the command ran. */
async function runsOrphaned(loader: string, marker: string): Promise<boolean> {
  const p = spawn(perl, ['-e', loader, hex, '/bin/sh', '-c', `echo ran > ${marker}`], { stdio: 'ignore', detached: true });
  const exited = new Promise((resolve) => p.once('exit', resolve));
  const parent = p.pid!;
  const kid = await waitFor(() => {
    try {
      return fs.readFileSync(`/proc/${parent}/task/${parent}/children`, 'utf8').trim().split(' ')[0] || '';
    } catch {
      return '';
    }
  }, 'the fork');
  process.kill(parent, 'SIGKILL');
  await exited;
  // the child wakes up an orphan; it ends either way (a zombie until its new parent reaps it)
  await waitFor(() => ['gone', 'Z'].includes(state(kid)), 'the orphan ended', 30_000);
  return fs.existsSync(marker);
}

describe("the loader's child and its parent's death", { timeout: 120_000 }, () => {
  test('a child whose parent died before it asked for SIGKILL does not run its command', async () => {
    assert.equal(await runsOrphaned(paused(seccompLoader()), path.join(dir, 'checked')), false);
  });

  test('without the check the same child runs it (the test can fail)', async () => {
    const unchecked = seccompLoader().replace(CHECK, '');
    assert.notEqual(unchecked, seccompLoader());
    assert.equal(await runsOrphaned(paused(unchecked), path.join(dir, 'unchecked')), true);
  });

  test('with its parent alive, the command runs and its status is the parent’s', async () => {
    const marker = path.join(dir, 'alive');
    const p = spawn(perl, ['-e', paused(seccompLoader()), hex, '/bin/sh', '-c', `echo ran > ${marker}; exit 7`], { stdio: 'ignore' });
    const code = await new Promise((resolve) => p.once('exit', (c, s) => resolve(s ?? c)));
    assert.equal(code, 7);
    assert.ok(fs.existsSync(marker));
  });

  test('a child killed by a signal: the parent ends by the same signal', async () => {
    const p = spawn(perl, ['-e', seccompLoader(), hex, '/bin/sh', '-c', 'kill -TERM $$'], { stdio: 'ignore' });
    const signal = await new Promise((resolve) => p.once('exit', (c, s) => resolve(s ?? c)));
    assert.equal(signal, 'SIGTERM');
  });
});
