/**
 * Two host-side chores of the sandbox, against the real machine: finding the programs it runs
 * (src/sandbox/programs.ts) and killing everything in a conversation's cgroup, a fork bomb
 * included (src/sandbox/cgroup.ts), judged by reading the cgroup and /proc from here.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { describe, test } from 'node:test';
import { detectCgroups } from '../src/sandbox/cgroup.js';
import { findProgram, which } from '../src/sandbox/programs.js';
import { tempDir, waitFor } from './support/daemon.js';

describe('sandbox: finding programs', { timeout: 60_000 }, () => {
  test('the first executable file on the path wins; a missing one, a directory, a non-executable file and a file as a path entry are passed over', () => {
    const d = tempDir();
    const [a, b, c, notDir] = ['a', 'b', 'c', 'file'].map((n) => path.join(d, n));
    for (const x of [a!, b!, c!]) fs.mkdirSync(x);
    fs.writeFileSync(notDir!, '');
    fs.writeFileSync(path.join(a!, 'tool'), '#!/bin/sh\n', { mode: 0o644 }); // not executable
    fs.mkdirSync(path.join(b!, 'tool')); // a directory of that name
    fs.writeFileSync(path.join(c!, 'tool'), '#!/bin/sh\n', { mode: 0o755 });
    const searchPath = [path.join(d, 'missing'), notDir, a, `${b}/`, `${c}//`].join(':');
    assert.equal(findProgram('tool', searchPath), path.join(c!, 'tool'));
    assert.equal(findProgram('no-such-tool-here', searchPath), null);
    // as given, with a slash: only when it is an executable file
    assert.equal(findProgram(path.join(c!, 'tool'), ''), path.join(c!, 'tool'));
    assert.equal(findProgram(path.join(a!, 'tool'), ''), null);
    assert.equal(findProgram(path.join(b!, 'tool'), ''), null);
  });

  test('findProgram falls back to the system directories; which looks on PATH alone', () => {
    const sh = fs.realpathSync('/bin/sh') === fs.realpathSync('/usr/bin/sh') ? ['/usr/bin/sh', '/bin/sh'] : ['/bin/sh'];
    assert.ok(sh.includes(findProgram('sh', '')!), `findProgram('sh', '') found ${findProgram('sh', '')}`);
    const saved = process.env.PATH;
    try {
      process.env.PATH = tempDir();
      assert.equal(which('sh'), null);
      process.env.PATH = `/nonexistent:${path.dirname(findProgram('sh', '')!)}`;
      assert.equal(which('sh'), findProgram('sh', ''));
    } finally {
      process.env.PATH = saved;
    }
  });
});

/** Whether `pid` runs (exists and is not a zombie waiting to be reaped). */
function running(pid: number): boolean {
  try {
    return !/\) Z /.test(fs.readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return false;
  }
}

describe('sandbox: killing a conversation cgroup', { timeout: 120_000 }, () => {
  test('killAll leaves no process in the cgroup, of a fork bomb forking while it is killed (20 rounds)', async () => {
    const backend = await detectCgroups({ memoryBytes: 256 * 1024 * 1024, pids: 64, totalMemoryBytes: 1024 * 1024 * 1024, cpus: null });
    assert.ok(backend, 'this test runs as root, where the daemon manages cgroups');
    for (let round = 0; round < 20; round++) {
      const cg = backend.create(`test-kill-${process.pid}-${round}`);
      await cg.make();
      try {
        // stopped until it is in the cgroup, then it forks sleepers as fast as it can, up to the pids limit
        const bomb = spawn('sh', ['-c', 'kill -STOP $$; while :; do sleep 1000 & done'], { stdio: 'ignore', detached: true });
        await waitFor(() => fs.readFileSync(`/proc/${bomb.pid}/stat`, 'utf8').split(') ')[1]!.startsWith('T'), 'the bomb stopped itself');
        assert.ok(await cg.add(bomb.pid!), 'the bomb joined the cgroup');
        process.kill(bomb.pid!, 'SIGCONT');
        await waitFor(() => cg.pids().length >= 10, 'the bomb forked', 20_000);
        const seen = new Set(cg.pids());
        cg.killAll();
        await waitFor(
          () => {
            for (const p of cg.pids()) seen.add(p);
            return cg.pids().length === 0;
          },
          'the cgroup emptied',
          20_000,
        );
        // none of what was in it lives on elsewhere (a process leaves its cgroup as it exits)
        await waitFor(() => [...seen].every((p) => !running(p)), 'all gone');
      } finally {
        cg.killAll();
        await waitFor(() => cg.remove(), 'the cgroup removed');
      }
    }
  });
});
