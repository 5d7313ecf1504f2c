/**
 * The sandbox's holders in-process (the launcher with real bwrap) and with SANDBOX_NETWORK=none, a
 * shutdown and kill -9 of the daemon, judged from the host.
 */
import assert from 'node:assert/strict';
import type { ChildProcess } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { describe, test } from 'node:test';
import { sleep, tempDir, waitFor } from './support/daemon.js';
import { Sandbox, DEFAULT_SANDBOX_SETTINGS } from '../src/sandbox/launcher.js';

import { hostProcesses, nsOf, holdNs, pidsInNs, descendants, alive, harness } from './support/sandbox-harness.js';

describe('sandbox: the launcher (in-process, real bwrap)', { timeout: 300_000 }, () => {
  test('background jobs outlive the process that started them until the idle sandbox is closed; joined processes keep no namespace fds', async () => {
    const root = tempDir();
    const sb = await Sandbox.open({ ...DEFAULT_SANDBOX_SETTINGS, mode: 'bwrap', idleCloseMs: 1500 }, { workspaceRoot: root });
    const id = crypto.randomUUID();
    const m = `7373${process.pid % 1000}`;
    const out = (argv: string[]) =>
      new Promise<string>((resolve) => {
        const c = sb.spawn(id, argv, { env: sb.env(), stdio: ['ignore', 'pipe', 'pipe'] });
        let text = '';
        c.stdout!.on('data', (d: Buffer) => (text += d.toString('utf8')));
        c.stderr!.on('data', (d: Buffer) => (text += d.toString('utf8')));
        c.on('close', () => resolve(text));
      });
    try {
      assert.equal(sb.enabled, true);
      // like setup.sh starting a server: the script ends, the job stays in the conversation's sandbox
      await out(['sh', '-c', `(sleep ${m} >/dev/null 2>&1 &); echo started`]);
      const [job] = (await waitFor(() => (hostProcesses(`sleep ${m}`).length === 1 ? hostProcesses(`sleep ${m}`) : null), 'the job runs', 10_000))!;
      const fds = await out(['sh', '-c', 'ls /proc/$$/fd; true']); // sh's own fds (true: sh does not exec ls)
      const open = fds.trim().split(/\s+/);
      assert.ok(open.includes('2') && !open.includes('3') && !open.includes('4'), `fds of a joined process: ${open.join(' ')}`);
      assert.equal(sb.liveCount, 1);
      assert.equal(sb.processCount, 0);
      assert.ok(nsOf(job!), 'still running after the script ended');
      // nothing started through the launcher for idleCloseMs: the sandbox closes, the job with it
      await waitFor(() => hostProcesses(`sleep ${m}`).length === 0, 'the idle sandbox closed', 15_000);
      assert.equal(sb.liveCount, 0);
      assert.ok(fs.existsSync(sb.stateDir(id)), '/tmp and HOME stay until DELETE');
      await sb.removeConversation(id);
      assert.ok(!fs.existsSync(sb.stateDir(id)));
    } finally {
      await sb.close();
      fs.rmSync(root, { recursive: true, force: true });
    }
  });
});

describe('sandbox: a holder whose bwrap dies early', { timeout: 300_000 }, () => {
  test('a deferred probe starts nothing until startProbe() or a use of `ready`; waiting on `outcome` does not start it', async () => {
    // the daemon defers its probe until shortly after it listens (its forks would delay the first
    // requests), unless something needs the sandbox first: `ready` is what every user awaits
    const dir = tempDir();
    const fake = path.join(dir, 'bwrap');
    fs.writeFileSync(fake, `#!/bin/sh\necho started >> ${dir}/started\nexec /usr/bin/bwrap "$@"\n`, { mode: 0o755 });
    const sb = Sandbox.start({ ...DEFAULT_SANDBOX_SETTINGS, mode: 'bwrap', bwrapPath: fake, spareHolder: false }, { workspaceRoot: dir, deferProbe: true });
    try {
      const outcome = sb.outcome.then(
        () => 'decided',
        () => 'decided',
      );
      assert.equal(await Promise.race([outcome, sleep(500).then(() => 'waiting')]), 'waiting', 'the probe decided without being started');
      assert.equal(sb.mode, 'probing');
      assert.equal(fs.existsSync(path.join(dir, 'started')), false, 'bwrap ran before the probe was started');
      await sb.ready; // a user of the sandbox: the probe starts now
      assert.equal(await outcome, 'decided');
      assert.equal(sb.mode, 'bwrap');
      assert.ok(fs.existsSync(path.join(dir, 'started')), 'the probe ran bwrap');
    } finally {
      await sb.close();
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  test('conversations outpacing spares: after one started its own holder, the next spares start once it is ready, the next conversation gets one', async () => {
    const dir = tempDir();
    const fake = path.join(dir, 'bwrap');
    // counts bwrap's starts; the refill delay outside a burst is ten minutes, so only the burst rule can start a spare here
    fs.writeFileSync(fake, `#!/bin/sh\necho started >> ${dir}/starts\nexec /usr/bin/bwrap "$@"\n`, { mode: 0o755 });
    const sb = await Sandbox.open({ ...DEFAULT_SANDBOX_SETTINGS, mode: 'bwrap', bwrapPath: fake, spareRefillMs: 600_000 }, { workspaceRoot: dir });
    const starts = () => (fs.existsSync(path.join(dir, 'starts')) ? fs.readFileSync(path.join(dir, 'starts'), 'utf8').trim().split('\n').length : 0);
    const run = (id: string) =>
      new Promise<number | null>((resolve) => {
        const c = sb.spawn(id, ['true'], { workspaceDir: path.join(dir, id.replace(/-/g, '')), env: sb.env(), stdio: 'ignore' });
        c.on('close', resolve);
      });
    /**
     * The spares' workspaces (inodes): a conversation that took a spare has one of them as its workspace. (A spare
     * still being made, its directory there before its workspace, is not one yet: the burst starts the next ones.)
     */
    const spareWorkspaces = () =>
      fs
        .readdirSync(path.join(dir, '.sandbox'))
        .filter((n) => n.startsWith('.spare-'))
        .flatMap((n) => {
          const st = fs.statSync(path.join(dir, '.sandbox', n, 'workspace'), { throwIfNoEntry: false });
          return st ? [st.ino] : [];
        });
    try {
      await sb.warm();
      const s0 = starts();
      assert.equal(await run(crypto.randomUUID()), 0, 'the first conversation runs in the spare');
      assert.equal(starts(), s0, 'it took the spare: no bwrap started for it');
      assert.equal(await run(crypto.randomUUID()), 0, 'the second, with no spare, runs in a holder of its own');
      await waitFor(() => starts() >= s0 + 2, 'the next spares to start without waiting the refill delay (a burst)', 30_000);
      await sb.warm(); // the oldest is ready: warm only waits for it
      const spares = spareWorkspaces();
      const third = crypto.randomUUID();
      assert.equal(await run(third), 0);
      const ino = fs.statSync(path.join(dir, third.replace(/-/g, ''))).ino;
      assert.ok(spares.includes(ino), `the third conversation took a spare (its workspace is a spare's directory): ${ino} of ${spares.join(' ')}`);
      // still a burst: the spares after it are there or starting, without the refill delay
      await waitFor(() => sb.spares.alive >= 1, 'a spare after it', 30_000);
    } finally {
      await sb.close();
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  test('what bwrap leaves in its process group when it exits (its first child, blocked until bwrap lets it go on) is killed with it', async () => {
    // a bwrap that, from its second start on (the first is the probe's), leaves a child behind and
    // exits, as a real one killed between its clone and its go-ahead (by --die-with-parent when the
    // daemon dies, or by SIGPIPE on --info-fd) leaves its first child blocked, forever
    const dir = tempDir();
    const marker = `8181${process.pid % 1000}`;
    const fake = path.join(dir, 'bwrap');
    fs.writeFileSync(
      fake,
      `#!/bin/sh\nn=$(cat ${dir}/count 2>/dev/null || echo 0); echo $((n + 1)) > ${dir}/count\n` +
        `if [ "$n" -ge 1 ]; then sleep ${marker} & exit 1; fi\nexec /usr/bin/bwrap "$@"\n`,
      { mode: 0o755 },
    );
    const sb = await Sandbox.open({ ...DEFAULT_SANDBOX_SETTINGS, mode: 'bwrap', bwrapPath: fake, spareHolder: false }, { workspaceRoot: dir });
    try {
      assert.equal(sb.enabled, true, 'the probe passed (the real bwrap)');
      const c = sb.spawn(crypto.randomUUID(), ['true'], { env: sb.env(), stdio: ['ignore', 'ignore', 'pipe'] });
      let stderr = '';
      c.stderr!.on('data', (d: Buffer) => (stderr += d.toString('utf8')));
      const code = await new Promise<number | null>((resolve) => c.on('close', resolve));
      assert.notEqual(code, 0, 'the process could not join a sandbox that died');
      assert.match(stderr, /sandbox is not running/);
      // the probe's bwrap, the conversation's, and the one it was given in its place (once)
      assert.equal(fs.readFileSync(path.join(dir, 'count'), 'utf8').trim(), '3');
      await waitFor(() => hostProcesses(`sleep ${marker}`).length === 0, 'nothing of the failed holder left', 10_000).catch(() => {
        throw new Error(`left behind: ${hostProcesses(`sleep ${marker}`).join(',')}`);
      });
    } finally {
      for (const p of hostProcesses(`sleep ${marker}`)) process.kill(p, 'SIGKILL');
      await sb.close();
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  test('a handle that takes a sandbox again after it was let go counts against SANDBOX_MAX_LIVE: the least recently used idle one is closed', async () => {
    const root = tempDir();
    const sb = await Sandbox.open({ ...DEFAULT_SANDBOX_SETTINGS, mode: 'bwrap', maxLive: 1, spareHolder: false }, { workspaceRoot: root });
    const [a, b] = [crypto.randomUUID(), crypto.randomUUID()];
    const [ma, mb] = [`5151${process.pid % 1000}`, `5252${process.pid % 1000}`];
    type Opts = Parameters<typeof sb.spawn>[2];
    const run = (spawn: (argv: string[], opts: Opts) => ChildProcess, argv: string[]) =>
      new Promise<number | null>((resolve) => spawn(argv, { env: sb.env(), stdio: 'ignore' }).on('close', resolve));
    // (a process of the namespace may be gone by the time it is killed: its init was killed first)
    const kill = (pid: number) => {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {}
    };
    const job = (m: string) => ['sh', '-c', `(sleep ${m} >/dev/null 2>&1 &); true`];
    try {
      assert.equal(await run((argv, o) => sb.spawn(a, argv, o), job(ma)), 0);
      const handleA = sb.conversation(a);
      // A's sandbox killed from the host: nothing of A is left, so its handle is let go
      const [jobA] = (await waitFor(() => (hostProcesses(`sleep ${ma}`).length === 1 ? hostProcesses(`sleep ${ma}`) : null), "A's job runs", 10_000))!;
      for (const p of pidsInNs(nsOf(jobA!)!)) kill(p);
      await waitFor(() => sb.liveCount === 0, "A's handle let go", 10_000);
      // B becomes the one live sandbox, idle, its job running
      assert.equal(await run((argv, o) => sb.spawn(b, argv, o), job(mb)), 0);
      const [jobB] = (await waitFor(() => (hostProcesses(`sleep ${mb}`).length === 1 ? hostProcesses(`sleep ${mb}`) : null), "B's job runs", 10_000))!;
      assert.equal(sb.liveCount, 1);
      // A's old handle starts a process: it takes a sandbox again, and B, over the cap, is closed
      assert.equal(await run((argv, o) => handleA.spawn(argv, o), ['true']), 0);
      await waitFor(() => alive([jobB!]).length === 0, "B's sandbox closed (its job gone, judged from the host)", 20_000);
      assert.equal(sb.liveCount, 1, 'one live sandbox: A');
    } finally {
      for (const p of [...hostProcesses(`sleep ${ma}`), ...hostProcesses(`sleep ${mb}`)]) kill(p);
      await sb.close();
      fs.rmSync(root, { recursive: true, force: true });
    }
  });

  test("the start-up probe judges one holder's start: a bwrap that cannot start one is tried once, not twice", async () => {
    const dir = tempDir();
    const fake = path.join(dir, 'bwrap');
    fs.writeFileSync(
      fake,
      `#!/bin/sh\nn=$(cat ${dir}/count 2>/dev/null || echo 0); echo $((n + 1)) > ${dir}/count\n` +
        `echo 'bwrap: No permissions to create new namespace' >&2\nexit 1\n`,
      { mode: 0o755 },
    );
    try {
      await assert.rejects(
        Sandbox.open({ ...DEFAULT_SANDBOX_SETTINGS, mode: 'bwrap', bwrapPath: fake, spareHolder: false }, { workspaceRoot: dir }),
        /SANDBOX=bwrap but .*No permissions/,
      );
      assert.equal(fs.readFileSync(path.join(dir, 'count'), 'utf8').trim(), '1', 'bwrap was started once');
      fs.rmSync(path.join(dir, 'count'));
      const sb = await Sandbox.open({ ...DEFAULT_SANDBOX_SETTINGS, mode: 'auto', bwrapPath: fake, spareHolder: false }, { workspaceRoot: dir });
      try {
        assert.equal(sb.enabled, false, 'auto fell back to plain processes');
        assert.match(sb.info().warning ?? '', /SANDBOX=auto: .*No permissions/);
        assert.equal(fs.readFileSync(path.join(dir, 'count'), 'utf8').trim(), '1', 'bwrap was started once');
      } finally {
        await sb.close();
      }
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('sandbox: one set of namespaces per conversation (in-process launcher, real bwrap)', { timeout: 300_000 }, () => {
  test("SANDBOX_NETWORK=none: one process's loopback server is reached by the next, System V IPC is shared; another conversation reaches neither", async () => {
    const root = tempDir();
    // a mapped directory (as the askpass helper's) that nothing has written to yet
    const helpers = path.join(root, 'helpers');
    const sb = await Sandbox.open(
      { ...DEFAULT_SANDBOX_SETTINGS, mode: 'bwrap', network: 'none' },
      { workspaceRoot: root, mapped: [{ host: helpers, inside: '/parley/helpers' }] },
    );
    const a = crypto.randomUUID();
    const b = crypto.randomUUID();
    const port = 20000 + (process.pid % 20000);
    const out = (id: string, script: string) =>
      new Promise<string>((resolve) => {
        const c = sb.spawn(id, ['sh', '-c', script], { env: sb.env(), stdio: ['ignore', 'pipe', 'pipe'] });
        let text = '';
        c.stdout!.on('data', (d: Buffer) => (text += d.toString('utf8')));
        c.stderr!.on('data', (d: Buffer) => (text += d.toString('utf8')));
        c.on('close', () => resolve(text));
      });
    const connect =
      `node -e "require('net').connect(${port}, '127.0.0.1')` +
      `.on('data', (d) => console.log(String(d)))` +
      `.on('error', (e) => console.log('ERR', e.code))"`;
    try {
      // like setup.sh starting a dev server: the script ends, the server stays
      await out(
        a,
        `(node -e "require('net').createServer((s) => s.end('pong-${port}')).listen(${port}, '127.0.0.1', () => console.log('up'))" > /tmp/server.log 2>&1 &)`,
      );
      const log = path.join(sb.stateDir(a), 'tmp', 'server.log');
      await waitFor(() => fs.existsSync(log) && fs.readFileSync(log, 'utf8').includes('up'), 'the server listens', 20_000);
      const [server] = hostProcesses(`pong-${port}`);
      assert.ok(server, 'the server runs');
      assert.notEqual(nsOf(server!, 'net'), nsOf(process.pid, 'net'), "its own network namespace, not the host's");
      // the host does not reach it (its loopback is the sandbox's), the same conversation does
      const fromHost = await new Promise<string>((resolve) => {
        const s = net.connect(port, '127.0.0.1');
        s.on('data', (d) => resolve(String(d)));
        s.on('error', (e: NodeJS.ErrnoException) => resolve(`ERR ${e.code}`));
      });
      assert.match(fromHost, /^ERR ECONNREFUSED$/);
      assert.match(await out(a, connect), new RegExp(`^pong-${port}$`, 'm'), 'the next process of the conversation reaches it');
      assert.match(await out(b, connect), /^ERR ECONNREFUSED$/m, 'another conversation does not');
      // System V IPC: a queue made by one process is seen by the next, not by another conversation
      assert.match(await out(a, `ipcmk -Q -p 0600 >/dev/null && ipcs -q`), /0x[0-9a-f]+/);
      const listedA = await out(a, 'ipcs -q');
      const listedB = await out(b, 'ipcs -q');
      assert.equal((listedA.match(/^0x[0-9a-f]+ /gm) ?? []).length, 1, listedA);
      assert.equal((listedB.match(/^0x[0-9a-f]+ /gm) ?? []).length, 0, listedB);
      // the mapped directory is shown in a sandbox that started before anything was written there
      // (b's holder was the spare, started with the launcher)
      // (as the askpass helper's directory is made: 0755, the sandbox uid enters it)
      fs.chmodSync(helpers, 0o755);
      fs.writeFileSync(path.join(helpers, 'askpass'), 'ASKPASS-SHOWN\n', { mode: 0o644 });
      assert.match(await out(b, 'cat /parley/helpers/askpass'), /^ASKPASS-SHOWN$/m);
    } finally {
      await sb.removeConversation(a);
      await sb.removeConversation(b);
      await sb.close();
      fs.rmSync(root, { recursive: true, force: true });
    }
  });
});

describe('sandbox: SANDBOX_NETWORK=none and kill -9 of the daemon', { timeout: 300_000 }, () => {
  test('no network: not even the daemon port is reachable', async () => {
    const h = await harness({ SANDBOX_NETWORK: 'none' });
    try {
      assert.equal((await h.req('GET', '/server_info')).body.sandbox.network, 'none');
      const id = await h.create();
      const r = await h.sh(
        id,
        `(exec 3<>/dev/tcp/127.0.0.1/${h.d.port}) 2>/dev/null && echo CONNECTED || echo REFUSED; ` +
          `ip -o link 2>/dev/null | grep -v ' lo:' | wc -l; cat /proc/net/dev | tail -n +3 | cut -d: -f1`,
      );
      assert.match(r.text, /REFUSED/);
      assert.doesNotMatch(r.text, /CONNECTED/);
      assert.doesNotMatch(r.text, /eth|ens|wlan|docker/);
    } finally {
      await h.close();
    }
  });

  test('a daemon shutdown (SIGTERM) leaves no sandboxed process, background jobs included', async () => {
    const h = await harness();
    try {
      const id = await h.create();
      const marker = `8686${process.pid % 1000}`;
      await h.sh(id, `(sleep ${marker} &); setsid sleep ${marker}1 & echo started`);
      await waitFor(() => hostProcesses(`sleep ${marker}`).length === 2, 'sleeps running', 10_000);
      // everything the daemon started: shells, the conversation's holder (its init and pid 2), the spare holder
      const started = descendants(h.d.proc.pid!);
      const held = holdNs(hostProcesses(`sleep ${marker}`)[0]!);
      try {
        const { ns } = held;
        assert.ok(pidsInNs(ns).length >= 4, 'init, pid 2, bash, the sleeps');
        assert.equal(await h.d.stop('SIGTERM'), 0);
        const ws = path.join(h.d.dataDir, 'workspaces');
        await waitFor(
          () => hostProcesses(`sleep ${marker}`).length === 0 && hostProcesses(ws).length === 0 && pidsInNs(ns).length === 0 && alive(started).length === 0,
          'nothing left after shutdown',
          10_000,
        );
      } finally {
        held.release();
      }
    } finally {
      await h.close();
    }
  });

  test('after kill -9 of the daemon no sandboxed process survives', async () => {
    const h = await harness();
    try {
      const id = await h.create();
      const marker = `6464${process.pid % 1000}`;
      await h.sh(id, `(sleep ${marker} &); nohup sleep ${marker}1 >/dev/null 2>&1 & setsid sleep ${marker}2 & echo started`);
      await waitFor(() => hostProcesses(`sleep ${marker}`).length === 3, 'sleeps running', 10_000);
      const started = descendants(h.d.proc.pid!);
      const held = holdNs(hostProcesses(`sleep ${marker}`)[0]!);
      try {
        h.d.proc.kill('SIGKILL');
        await h.d.exited;
        // nothing in the sandbox (sleeps, shells, its init), no bwrap of this daemon (its argv names the
        // workspace), nothing the daemon had started (the spare holder included)
        const ws = path.join(h.d.dataDir, 'workspaces');
        const left = () => [...hostProcesses(`sleep ${marker}`), ...hostProcesses(ws), ...pidsInNs(held.ns), ...alive(started)];
        await waitFor(() => left().length === 0, 'no sandboxed process left', 10_000).catch(() => {
          throw new Error(`left over: ${left().join(',')}`);
        });
      } finally {
        held.release();
      }
    } finally {
      await h.close();
    }
  });
});
