/**
 * The spawner (src/sandbox/spawner.ts, spawner-process.pl): the process that starts the sandboxes'
 * host-side programs off the daemon's event loop. What it starts behaves as a child process would
 * (stdio both ways, exit codes and signals, a failed start); a program that ends at once is still
 * reported; many programs started at once with a channel each get their own; a daemon's fd reaches
 * the program; a program holds no fd but its slots'; nothing it started outlives it, nor it the
 * process that owns it (judged from the host); and in a real daemon every holder's processes are its
 * forker's children, not the daemon's.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { Socket } from 'node:net';
import { describe, test } from 'node:test';
import { ROOT, startDaemon, waitFor } from './support/daemon.js';
import { readySpare, spareShells } from './support/holders.js';
import { isAlive, livingProcesses } from './support/processes.js';
import { which } from '../src/sandbox/programs.js';
import { Spawner, type RemoteChild, type Slot } from '../src/sandbox/spawner.js';
import { callNumbers } from '../src/sandbox/seccomp.js';

const setpriv = which('setpriv');

/** What a program wrote on stdout and stderr, and how it ended. */
function outcome(c: RemoteChild): Promise<{ out: string; err: string; code: number | null; signal: NodeJS.Signals | null }> {
  let out = '';
  let err = '';
  c.stdout?.on('data', (d: Buffer) => (out += d.toString('utf8')));
  c.stderr?.on('data', (d: Buffer) => (err += d.toString('utf8')));
  return new Promise((resolve) => c.once('close', (code: number | null, signal: NodeJS.Signals | null) => resolve({ out, err, code, signal })));
}

const cmdline = (pid: number): string[] => {
  try {
    return fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
  } catch {
    return [];
  }
};

describe('sandbox: the spawner', { timeout: 120_000 }, () => {
  test('stdio both ways, exit codes and signals, a failed start, a fd of this process', async () => {
    const s = new Spawner(setpriv);
    try {
      const c = await s.spawn({
        file: '/bin/sh',
        args: ['-c', 'read x; echo "out $x"; echo err >&2; exit 7'],
        env: { PATH: '/usr/bin:/bin' },
        stdio: ['pipe', 'pipe', 'pipe'],
      });
      c.stdin!.end('hello\n');
      assert.deepEqual(await outcome(c), { out: 'out hello\n', err: 'err\n', code: 7, signal: null });
      assert.equal(c.exitCode, 7);

      const killed = await s.spawn({ file: '/bin/sleep', args: ['60'], env: {}, stdio: ['ignore', 'pipe', 'pipe'] });
      const ended = outcome(killed);
      assert.ok(isAlive(killed.pid));
      assert.equal(killed.kill('SIGKILL'), true);
      assert.deepEqual(await ended, { out: '', err: '', code: null, signal: 'SIGKILL' });

      await assert.rejects(s.spawn({ file: '/nonexistent/program', args: [], env: {}, stdio: ['ignore', 'ignore', 'ignore'] }), (e: NodeJS.ErrnoException) => {
        assert.equal(e.code, 'ENOENT');
        return true;
      });

      // an environment too large for one request is refused with why; the spawner goes on (100 KiB is not)
      const big = (kib: number) => ({ BIG: 'x'.repeat(kib << 10) });
      await assert.rejects(s.spawn({ file: '/bin/true', args: [], env: big(300), stdio: ['ignore', 'ignore', 'ignore'] }), /more than 200 KiB/);
      const env = await s.spawn({ file: '/bin/sh', args: ['-c', 'echo ${#BIG}'], env: big(100), stdio: ['ignore', 'pipe', 'pipe'] });
      assert.equal((await outcome(env)).out.trim(), String(100 << 10));

      // bytes given with the start: the program reads them, then their end
      const fed = await s.spawn({ file: '/bin/cat', args: [], env: {}, stdio: [{ data: Buffer.from('fed at the start') }, 'pipe', 'pipe'] });
      assert.equal((await outcome(fed)).out, 'fed at the start');

      // the nice value asked for, else 0, whatever the spawner's own (a root daemon raises its priority)
      const niceOf = (pid: number) => Number(fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ')[16]);
      const plain = await s.spawn({ file: '/bin/sleep', args: ['60'], env: {}, stdio: ['ignore', 'ignore', 'ignore'] });
      const low = await s.spawn({ file: '/bin/sleep', args: ['60'], env: {}, stdio: ['ignore', 'ignore', 'ignore'], nice: 7 });
      assert.equal(niceOf(plain.pid), 0);
      assert.equal(niceOf(low.pid), 7);
      if (process.getuid?.() === 0) assert.equal(niceOf(s.pid), -5, "the spawner's own priority");
      plain.kill('SIGKILL');
      low.kill('SIGKILL');

      // a fd of this process (a namespace file) is the program's fd 3: the same namespace
      const fd = fs.openSync('/proc/self/ns/uts', 'r');
      try {
        const r = await s.spawn({ file: '/bin/readlink', args: ['/proc/self/fd/3'], env: {}, stdio: ['ignore', 'pipe', 'pipe', fd] });
        assert.equal((await outcome(r)).out.trim(), fs.readlinkSync('/proc/self/ns/uts'));
      } finally {
        fs.closeSync(fd);
      }
    } finally {
      await s.close();
    }
  });

  test('enter: the namespaces are entered after the change of ids, as that uid (a user namespace it does not own is refused); pdeathsig is set', {
    skip: process.getuid?.() !== 0 && 'needs root (ids to change to)',
  }, async () => {
    const s = new Spawner(setpriv);
    // a user and network namespace owned by uid 65534, held by a sleep
    const holder = spawn(setpriv!, ['--reuid=65534', '--regid=65534', '--clear-groups', '--', 'unshare', '-Urn', 'sleep', '600'], { stdio: 'ignore' });
    const fds: number[] = [];
    try {
      await waitFor(
        () => holder.pid !== undefined && fs.readlinkSync(`/proc/${holder.pid}/ns/user`) !== fs.readlinkSync('/proc/self/ns/user'),
        'the namespaces',
      );
      const user = fs.readlinkSync(`/proc/${holder.pid}/ns/user`);
      const net = fs.readlinkSync(`/proc/${holder.pid}/ns/net`);
      for (const kind of ['user', 'net']) fds.push(fs.openSync(`/proc/${holder.pid}/ns/${kind}`, 'r'));
      // it says where it is, then waits: its ids are read from the host
      const probe = 'readlink /proc/self/ns/user /proc/self/ns/net; id -u; exec sleep 600';
      const c = await s.spawn({
        file: '/bin/sh',
        args: ['-c', probe],
        env: { PATH: '/usr/bin:/bin' },
        stdio: ['ignore', 'pipe', 'pipe', fds[0]!, fds[1]!],
        uid: 65534,
        gid: 65534,
        enter: [
          { fd: 3, ns: 'user' },
          { fd: 4, ns: 'net' },
        ],
      });
      const r = outcome(c);
      let out = '';
      c.stdout!.on('data', (d: Buffer) => (out += d.toString('utf8')));
      await waitFor(() => out.split('\n').length > 3, 'what the program says');
      assert.deepEqual(out.trim().split('\n'), [user, net, '0'], 'in both namespaces, uid 0 there');
      const st = fs.readFileSync(`/proc/${c.pid}/status`, 'utf8');
      assert.match(st, /^Uid:\s+65534\s+65534\s+65534\s+65534$/m, 'the host sees uid 65534: no host privilege kept');
      assert.match(st, /^Groups:\s*$/m);
      c.kill('SIGKILL');
      await r;
      // another uid does not own it: refused, nothing started
      await assert.rejects(
        s.spawn({
          file: '/bin/true',
          args: [],
          env: {},
          stdio: ['ignore', 'ignore', 'ignore', fds[0]!],
          uid: 65533,
          gid: 65533,
          enter: [{ fd: 3, ns: 'user' }],
        }),
        (e: NodeJS.ErrnoException) => e.code === 'EPERM',
      );
      // the parent-death signal, read by the program itself after its ids changed (PR_GET_PDEATHSIG)
      const prctl = callNumbers().prctl;
      const read = `my $s = "\\0" x 4; syscall(${prctl}, 2, $s) == 0 or die $!; print unpack(q(l), $s)`;
      for (const [pdeathsig, want] of [
        ['SIGTERM', '15'],
        [undefined, '0'],
      ] as const) {
        const p = await s.spawn({ file: '/usr/bin/perl', args: ['-e', read], env: {}, stdio: ['ignore', 'pipe', 'pipe'], uid: 65534, gid: 65534, pdeathsig });
        assert.equal((await outcome(p)).out, want);
      }
    } finally {
      for (const fd of fds) fs.closeSync(fd);
      holder.kill('SIGKILL');
      await s.close();
    }
  });

  test('programs that end at once are reported, and each of many started at once gets its own channel', async () => {
    const s = new Spawner(setpriv);
    try {
      // (their 'spawned' and their end can arrive in one read: the end must still reach the listener attached after the await)
      const quick = await Promise.all(
        Array.from({ length: 40 }, () => s.spawn({ file: '/bin/true', args: [], env: {}, stdio: ['ignore', 'ignore', 'pipe'] }).then(outcome)),
      );
      assert.ok(quick.every((q) => q.code === 0));
      // a channel is a socket of this process's own: what each program says on fd 3 and what it reads back
      const talks = await Promise.all(
        Array.from({ length: 12 }, async (_, i) => {
          const c = await s.spawn({
            file: '/bin/sh',
            args: ['-c', `echo "hi ${i}" >&3; read y <&3; echo "$y"`],
            env: { PATH: '/usr/bin:/bin' },
            stdio: ['ignore', 'pipe', 'pipe', 'direct'],
          });
          const channel = c.stdio[3] as Socket;
          channel.once('data', (d: Buffer) => channel.write(`back ${d.toString('utf8').trim()}\n`));
          return (await outcome(c)).out.trim();
        }),
      );
      assert.deepEqual(
        talks,
        Array.from({ length: 12 }, (_, i) => `back hi ${i}`),
      );
    } finally {
      await s.close();
    }
  });

  test("a program holds its slots' fds and no other (not the channel, not another program's, not the spawner's) and no signal ignored", async () => {
    const s = new Spawner(setpriv);
    try {
      // others running with sockets of every kind, and a fd of this process
      const ns = fs.openSync('/proc/self/ns/uts', 'r');
      const busy = await Promise.all(
        Array.from({ length: 3 }, () => s.spawn({ file: '/bin/sleep', args: ['60'], env: {}, stdio: ['pipe', 'pipe', 'pipe', 'direct', ns] })),
      );
      fs.closeSync(ns);
      try {
        const fdsOf = async (stdio: Slot[]) => {
          // (the shell's fds, listed by another program: a listing holds its own)
          const c = await s.spawn({ file: '/bin/sh', args: ['-c', 'ls /proc/$$/fd'], env: { PATH: '/usr/bin:/bin' }, stdio });
          return (await outcome(c)).out.trim().split('\n').join(' ');
        };
        assert.equal(await fdsOf(['ignore', 'pipe', 'pipe']), '0 1 2');
        // slots past stderr, 'ignore' among them: closed there, whatever this process has at that number
        assert.equal(await fdsOf(['ignore', 'pipe', 'pipe', 'ignore', 'direct', { data: Buffer.from('x') }]), '0 1 2 4 5');
        // no signal ignored nor blocked by what started it (the spawner ignores SIGPIPE)
        const sigs = await s.spawn({ file: '/bin/grep', args: ['^Sig\\(Ign\\|Blk\\)', '/proc/self/status'], env: {}, stdio: ['ignore', 'pipe', 'pipe'] });
        assert.deepEqual((await outcome(sigs)).out.trim().split('\n'), ['SigBlk:\t0000000000000000', 'SigIgn:\t0000000000000000']);
      } finally {
        for (const b of busy) b.kill('SIGKILL');
      }
    } finally {
      await s.close();
    }
  });

  test('answered: every spawn asked for has been answered (and what it started can be registered) when it resolves', async () => {
    const s = new Spawner(setpriv);
    try {
      const settled: boolean[] = [];
      const asked = Array.from({ length: 8 }, (_, i) =>
        s.spawn({ file: i % 2 ? '/nonexistent/program' : '/bin/sleep', args: ['60'], env: {}, stdio: ['ignore', 'ignore', 'ignore'] }).then(
          (c) => {
            settled[i] = true;
            return c;
          },
          () => {
            settled[i] = true;
            return null;
          },
        ),
      );
      await s.answered(30_000);
      assert.deepEqual(settled, Array(8).fill(true));
      for (const c of await Promise.all(asked)) c?.kill('SIGKILL');
    } finally {
      await s.close();
    }
  });

  test('mkfifo: FIFOs of mode 600 made by the spawner itself; a name taken (a symlink, a file) fails it without following it', async () => {
    const s = new Spawner(setpriv);
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'parley-spawner-fifo-'));
    try {
      const paths = ['a', 'b', 'c'].map((n) => path.join(dir, n));
      await s.mkfifo(paths);
      for (const p of paths) {
        const st = fs.lstatSync(p);
        assert.ok(st.isFIFO(), `${p} is a FIFO`);
        assert.equal(st.mode & 0o777, 0o600);
        assert.equal(st.uid, process.getuid!());
      }
      // a hostile name in the directory: a symlink to where a FIFO must not appear, a file
      const target = path.join(dir, 'target');
      fs.symlinkSync(target, path.join(dir, 'link'));
      fs.writeFileSync(path.join(dir, 'file'), 'x');
      const asked = ['link', 'd', 'file', 'e'].map((n) => path.join(dir, n));
      await assert.rejects(s.mkfifo(asked), (e: Error) => /cannot create fifo '.*link': File exists/.test(e.message));
      assert.equal(fs.existsSync(target), false, 'the symlink was not followed');
      assert.ok(fs.lstatSync(path.join(dir, 'link')).isSymbolicLink());
      assert.equal(fs.readFileSync(path.join(dir, 'file'), 'utf8'), 'x');
      for (const n of ['d', 'e']) assert.ok(fs.lstatSync(path.join(dir, n)).isFIFO(), `${n} was made all the same`);
      // no program was started for them: the spawner's forker has no child left, and none was reported
      const forkerChildren = fs.readFileSync(`/proc/${s.pid}/task/${s.pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean);
      assert.equal(forkerChildren.length, 1, 'the spawner has its forker only');
      const grandchildren = fs.readFileSync(`/proc/${forkerChildren[0]}/task/${forkerChildren[0]}/children`, 'utf8').trim();
      assert.equal(grandchildren, '', 'the forker started nothing');
      // its end rejects a request still waiting
      const pending = s.mkfifo([path.join(dir, 'f')]);
      process.kill(s.pid, 'SIGKILL');
      await pending.then(
        () => {},
        (e: Error) => assert.match(e.message, /spawner ended/),
      );
    } finally {
      await s.close();
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  test('its end kills what it started; the next spawn starts another; closing it ends both', async () => {
    const s = new Spawner(setpriv);
    try {
      const first = s.pid;
      const c = await s.spawn({ file: '/bin/sleep', args: ['600'], env: {}, stdio: ['ignore', 'ignore', 'ignore'] });
      const ended = outcome(c);
      process.kill(first, 'SIGKILL');
      assert.deepEqual(await ended, { out: '', err: '', code: null, signal: 'SIGKILL' });
      await waitFor(() => !isAlive(c.pid), 'the program killed with its spawner', 10_000);
      const again = await s.spawn({ file: '/bin/sleep', args: ['600'], env: {}, stdio: ['ignore', 'ignore', 'ignore'] });
      assert.notEqual(s.pid, first, 'a new spawner');
      await s.close();
      await waitFor(() => !isAlive(again.pid), 'closing the spawner ended its program', 10_000);
    } finally {
      await s.close();
    }
  });

  test('a daemon killed with SIGKILL leaves neither its spawner nor what that started', async () => {
    const owner = spawn(process.execPath, ['--import', 'tsx', path.join(ROOT, 'test/support/spawner-owner.ts')], {
      cwd: ROOT,
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    try {
      const line = await new Promise<string>((resolve, reject) => {
        let text = '';
        owner.stdout!.on('data', (d: Buffer) => {
          text += d.toString('utf8');
          if (text.includes('\n')) resolve(text.trim());
        });
        owner.once('exit', (code) => reject(new Error(`the owner exited (${code}) before it said its pids`)));
      });
      const [spawnerPid, childPid] = line.split(' ').map(Number) as [number, number];
      assert.ok(isAlive(spawnerPid) && isAlive(childPid));
      owner.kill('SIGKILL');
      await waitFor(() => !isAlive(spawnerPid) && !isAlive(childPid), 'the spawner and its program gone with their owner', 15_000);
    } finally {
      owner.kill('SIGKILL');
    }
  });

  test("in a daemon, a holder's processes are the spawner's forker's children; the daemon's only child is the spawner", async () => {
    const d = await startDaemon({ SANDBOX: 'bwrap' });
    try {
      const daemon = d.proc.pid!;
      const service = await waitFor(() => readySpare(daemon, true), 'a spare holder ready', 60_000);
      // (and the shell a spare starts ahead for its conversation, the spawner's too)
      await waitFor(() => spareShells(daemon).length === 2, "the spare's shell", 60_000);
      const parent = livingProcesses();
      const children = [...parent].filter(([, pp]) => pp === daemon).map(([p]) => p);
      assert.equal(children.length, 1, `the daemon's children: ${children.map((p) => cmdline(p).join(' ')).join(' | ')}`);
      const spawner = children[0]!;
      assert.ok(
        cmdline(spawner).some((a) => a.endsWith('/spawner-process.pl')),
        cmdline(spawner).join(' '),
      );
      // the file service's line of ancestors reaches the spawner's forker, then the spawner, then the daemon
      const line: number[] = [];
      for (let p = parent.get(service!); p !== undefined && p > 1 && line.length < 16; p = parent.get(p)) line.push(p);
      const at = line.indexOf(spawner);
      assert.ok(at >= 1 && at === line.indexOf(daemon) - 1, `ancestors: ${line.join(' ')}`);
      assert.ok(
        cmdline(line[at - 1]!).some((a) => a.endsWith('/spawner-forker.pl')),
        `the spawner's forker: ${cmdline(line[at - 1]!).join(' ')}`,
      );
    } finally {
      await d.stop();
    }
  });
});
