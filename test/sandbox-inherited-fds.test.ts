/**
 * An fd the daemon's parent left open across exec (a terminal's pipe, a supervisor's socket, a
 * shell's `exec 77<file`) reaches no process the daemon starts: the daemon closes what it inherited
 * as it starts, and a joined process's loader closes every fd past stderr before its command runs.
 * Judged from the host: which processes hold the host's file and FIFO, read from /proc.
 */
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { inheritedFds } from '../src/inherited-fds.js';
import { findProgram } from '../src/sandbox/programs.js';
import { seccompLoader, seccompProgram } from '../src/sandbox/seccomp.js';
import { removeDir, tempDir } from './support/daemon.js';
import { fdHolders as holders } from './support/processes.js';
import { terminalTurn, useScriptedDaemon } from './support/scripted-daemon.js';

const CANARY = 'HOST-ONLY-CANARY-4f1c2b';
const dir = tempDir('parley-fds-');
const secret = path.join(dir, 'host-secret.txt');
const fifo = path.join(dir, 'host.fifo');
fs.writeFileSync(secret, `${CANARY}\n`);
execFileSync('mkfifo', [fifo]);
after(() => removeDir(dir));

for (const mode of ['bwrap', 'none'] as const) {
  describe(`SANDBOX=${mode}: a daemon started with the host's file on fd 77 and a FIFO on fd 240`, { timeout: 240_000 }, () => {
    const s = useScriptedDaemon({ SANDBOX: mode }, { redirects: `77<"${secret}" 240<>"${fifo}"` });
    let out = '';
    let during: string[] = [];
    before(async () => {
      const r = await s.d.req('POST', '/api/conversations', {});
      assert.equal(r.status, 200, r.text);
      const id = r.body.conversation_id as string;
      // the shell stays up after its command: its fds are looked at from the host while it lives
      out = await terminalTurn(s, id, 'ls -l /proc/self/fd/ /proc/$$/fd/; cat <&77; cat /proc/self/fd/77; echo x >&240; echo end');
      during = holders(secret, fifo);
    });

    test('its log says which fds it closed; the agent reads neither', () => {
      assert.ok(
        s.d.output.some((l) => l.includes('inherited open from the parent') && l.includes('77') && l.includes('240')),
        s.d.output.join('\n'),
      );
      assert.ok(!out.includes(CANARY), out);
      assert.ok(!out.includes('host-secret') && !out.includes('host.fifo'), out);
      assert.match(out, /end/);
    });

    test('from the host: no process holds the file or the FIFO, the daemon and its children among them', () => {
      assert.deepEqual(during, []);
      assert.deepEqual(holders(secret, fifo), []);
      assert.deepEqual(inheritedFds(s.d.proc.pid!), [], "the daemon's fds open across exec");
    });
  });
}

describe('the loader of a joined process', () => {
  const perl = findProgram('perl')!;
  const hex = seccompProgram().toString('hex');
  /** The fds the command sees (their targets), run through the loader from a bash that opened 77 and 240 first. */
  const seen = (loader: string) => {
    const r = spawnSync(
      '/bin/bash',
      [
        '-c',
        `exec 77<"${secret}" 240<>"${fifo}"; exec "$@"`,
        'sh',
        perl,
        '-e',
        loader,
        hex,
        '/bin/sh',
        '-c',
        'for f in /proc/$$/fd/*; do readlink "$f"; done; true',
      ],
      { encoding: 'utf8' },
    );
    assert.equal(r.status, 0, r.stderr);
    return r.stdout.trim().split('\n');
  };

  test('closes every fd past stderr before the command', () => {
    const fds = seen(seccompLoader());
    assert.ok(fds.length >= 3 && fds.length <= 4, fds.join('\n')); // stdin, stdout, stderr (and the glob's own)
    assert.ok(!fds.some((t) => t === secret || t === fifo), fds.join('\n'));
  });

  test('closes them one by one where the kernel has no close_range (436 swapped for a number no kernel has)', () => {
    const old = seccompLoader().replace('syscall(436,', 'syscall(100000,');
    assert.notEqual(old, seccompLoader());
    const fds = seen(old);
    assert.ok(!fds.some((t) => t === secret || t === fifo), fds.join('\n'));
  });

  test('without it, the same command sees both (the probe can fail)', () => {
    const r = spawnSync('/bin/bash', ['-c', `exec 77<"${secret}" 240<>"${fifo}"; exec /bin/sh -c 'for f in /proc/$$/fd/*; do readlink "$f"; done; true'`], {
      encoding: 'utf8',
    });
    assert.ok(r.stdout.includes(secret) && r.stdout.includes(fifo), r.stdout);
  });
});

describe('closeInheritedFds', () => {
  test("closes an fd open across exec, keeps the ones it is told to and the process's own", () => {
    const a = fs.openSync(secret, 'r');
    const b = fs.openSync(secret, 'r');
    // node opens its own fds close-on-exec: these two are not inherited until made so by a child
    assert.ok(!inheritedFds().includes(a));
    const r = spawnSync(
      process.execPath,
      [
        '--import',
        'tsx',
        '-e',
        `import { closeInheritedFds, inheritedFds } from ${JSON.stringify(path.resolve('src/inherited-fds.ts'))};
         const before = inheritedFds(); const closed = closeInheritedFds([78]);
         console.log(JSON.stringify({ before, closed, after: inheritedFds() }));`,
      ],
      { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe', ...Array(74).fill('ignore'), a, b] },
    );
    fs.closeSync(a);
    fs.closeSync(b);
    assert.equal(r.status, 0, r.stderr);
    const got = JSON.parse(r.stdout.trim().split('\n').pop()!);
    assert.ok(got.before.includes(77) && got.before.includes(78), r.stdout);
    assert.ok(got.closed.includes(77) && !got.closed.includes(78), r.stdout);
    assert.deepEqual(got.after, [78]);
  });
});
