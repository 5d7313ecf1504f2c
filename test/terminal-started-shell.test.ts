/**
 * A shell started ahead with another environment (a spare sandbox's: pool.ts, holders.ts) is given the
 * one its conversation asks for by lines of its own before anything else runs (shell-script.ts
 * envScript): its commands see exactly the variables a shell started with that environment would,
 * values with quotes and newlines included, and those it must not have are unset. Names bash reads
 * only when it starts, or keeps read-only, are refused (settableEnv): such a shell is spawned instead.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { test } from 'node:test';
import { ShellSession } from '../src/tools/terminal/session.js';
import { settableEnv } from '../src/tools/terminal/shell-script.js';
import { tempDir } from './support/daemon.js';

const PATH = process.env.PATH ?? '/usr/bin:/bin';

test('a shell started ahead takes up the environment it lacks: set, changed and unset variables', { timeout: 60_000 }, async () => {
  const cwd = tempDir();
  const ahead = { PATH, KEPT: 'same', CHANGED: 'before', GONE: 'spare only' };
  const wanted = { PATH, KEPT: 'same', CHANGED: 'it\'s "new"\nsecond line $HOME `x`', ADDED: 'a b' };
  const session = await ShellSession.start({
    conversationId: 'started-ahead',
    cwd,
    env: wanted,
    launch: (argv) => ({
      proc: spawn(argv[0]!, argv.slice(1), { cwd, env: ahead, stdio: ['pipe', 'pipe', 'pipe'], detached: true }),
      missing: { CHANGED: wanted.CHANGED, ADDED: wanted.ADDED, GONE: null },
    }),
  });
  try {
    const rc = await session.run(`node -e 'const e = process.env; console.log(JSON.stringify([e.KEPT, e.CHANGED, e.ADDED, "GONE" in e]))'`);
    assert.ok(await session.waitDone(rc, 30_000));
    assert.deepEqual(JSON.parse(session.takeOutput(rc).trim()), ['same', wanted.CHANGED, 'a b', false]);
  } finally {
    await session.terminate('test');
  }
});

test('names a running shell cannot take up as its start would are refused', () => {
  assert.equal(settableEnv({ GITHUB_TOKEN: 't', OLD: null }), true);
  for (const name of ['SHELLOPTS', 'BASHOPTS', 'SHLVL', 'UID', 'EUID', 'PPID', 'BASH_ENV', 'not-a-name', '1X']) {
    assert.equal(settableEnv({ [name]: 'x' }), false, name);
  }
});
