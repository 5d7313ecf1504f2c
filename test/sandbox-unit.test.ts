/**
 * What runs the daemon as the systemd unit does: an unprivileged daemon (nobody, no capabilities,
 * no_new_privs) with a working sandbox, and scripts/parley.service itself (verified, its filters
 * checked against what the sandboxes used, its restrictions emulated). Split from sandbox-modes.test.ts
 * so the two run side by side.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { describe, test } from 'node:test';
import { daemonArgs, ROOT, tempDir, waitFor } from './support/daemon.js';
import { startScriptedLlm } from './support/scripted-llm.js';
import { SESSION, LLM_KEY, H, harness } from './support/sandbox-harness.js';
import { REACH_PROBE, reachResult } from './support/attack.js';

/**
 * Where an unprivileged daemon finds the code: the checkout bind-mounted (in the daemon's private
 * mount namespace only) on an empty directory under /var/lib, as the unit's WorkingDirectory would
 * be. The checkout itself may sit where nobody cannot go (a 0700 temporary directory, /root) or
 * where the unit's PrivateTmp/ProtectHome would hide it (/tmp, /home).
 */
function appDir(): string {
  const app = fs.mkdtempSync('/var/lib/parley-unit-app-');
  fs.chmodSync(app, 0o755);
  return app;
}

/** sh -c AS_APP sh <checkout> <app dir> cmd…: runs cmd in <app dir> with the checkout mounted there. */
const AS_APP = 'mount --bind "$1" "$2" && cd "$2" && shift 2 && exec "$@"';

/** JSON calls to a daemon on `port` with the session key. */
function caller(port: number) {
  return async (m: string, url: string, b?: unknown) => {
    const r = await fetch(`http://127.0.0.1:${port}${url}`, {
      method: m,
      headers: { ...H, ...(b ? { 'content-type': 'application/json' } : {}) },
      body: b ? JSON.stringify(b) : undefined,
    });
    return r.json() as Promise<any>;
  };
}

/** /server_info once the sandbox probe decided (it runs once the port is open: "probing" until then). */
function probed(call: ReturnType<typeof caller>) {
  return waitFor(
    async () => {
      const i = await call('GET', '/server_info');
      return i.sandbox.mode === 'probing' ? null : i;
    },
    'the sandbox probe',
    60_000,
  );
}

/**
 * A daemon as nobody, with no capabilities and no_new_privs (what User=… CapabilityBoundingSet=
 * NoNewPrivileges=yes give it), its data in a directory of nobody's; the checkout mounted where
 * nobody can read it. `out()` is its stdout and stderr so far.
 */
async function nobodyDaemon(env: Record<string, string>) {
  const llm = await startScriptedLlm();
  const dir = tempDir();
  fs.chmodSync(dir, 0o755);
  fs.chownSync(dir, 65534, 65534);
  const data = path.join(dir, 'data');
  fs.mkdirSync(data);
  fs.chownSync(data, 65534, 65534);
  const app = appDir();
  const p = spawn(
    'unshare',
    [
      '--mount',
      '--propagation',
      'private',
      'sh',
      '-c',
      AS_APP,
      'sh',
      ROOT,
      app,
      'setpriv',
      '--reuid=65534',
      '--regid=65534',
      '--clear-groups',
      '--bounding-set=-all',
      '--inh-caps=-all',
      '--no-new-privs',
      process.execPath,
      ...(await daemonArgs()),
    ],
    {
      cwd: ROOT,
      env: {
        PATH: '/usr/local/bin:/usr/bin:/bin',
        HOME: dir,
        PORT: '0',
        DATA_DIR: data,
        SANDBOX: 'bwrap',
        SESSION_API_KEY: SESSION,
        LOG_LEVEL: 'info',
        LLM_MODEL: 'openai/scripted',
        LLM_BASE_URL: llm.url,
        LLM_API_KEY: LLM_KEY,
        SANDBOX_MEMORY_MB: '256',
        ...env,
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  let out = '';
  let stderr = '';
  p.stdout.on('data', (c: Buffer) => (out += c.toString('utf8')));
  p.stderr.on('data', (c: Buffer) => {
    out += c.toString('utf8');
    stderr += c.toString('utf8');
  });
  const exited = new Promise<number | null>((r) => p.on('exit', r));
  return {
    llm,
    data,
    exited,
    out: () => out,
    stderr: () => stderr,
    port: async () => Number((await waitFor(() => /"port":(\d+).*listening on/.exec(out), 'listening', 30_000))![1]),
    async close() {
      p.kill('SIGTERM');
      await exited;
      await llm.close();
      fs.rmSync(dir, { recursive: true, force: true });
      fs.rmdirSync(app);
    },
  };
}

describe('sandbox: an unprivileged daemon (as under the systemd unit)', {
  timeout: 420_000,
  skip: process.getuid?.() !== 0 && 'needs root to switch to nobody',
}, () => {
  test('as nobody without a cgroup it can make, SANDBOX=bwrap refuses to start with one line naming the fixes (limits are refused, not dropped)', async () => {
    const d = await nobodyDaemon({});
    try {
      assert.equal(await d.exited, 1, d.out());
      const lines = d.stderr().trim().split('\n');
      assert.equal(lines.length, 1, d.stderr());
      assert.match(
        lines[0]!,
        new RegExp(
          /^parley: SANDBOX=bwrap but no cgroup can be made for the sandboxes' limits .*/.source +
            /run the daemon as root, give it a delegated cgroup \(systemd: Delegate=yes\), or set SANDBOX_LIMITS=unenforced/.source,
        ),
      );
    } finally {
      await d.close();
    }
  });

  test('SANDBOX=auto as nobody without a cgroup: bwrap with rlimits, and it says so (a warning at start, /server_info)', async () => {
    const d = await nobodyDaemon({ SANDBOX: 'auto' });
    try {
      const info = await probed(caller(await d.port()));
      assert.equal(info.sandbox.mode, 'bwrap');
      assert.equal(info.sandbox.limits.enforced_by, 'rlimit');
      assert.match(info.sandbox.limits.unenforced, /^SANDBOX=auto without a cgroup: no per-conversation memory, process or CPU limit/);
      assert.match(info.sandbox.warning, /SANDBOX_LIMITS=unenforced to accept this/);
      const warned = d
        .out()
        .split('\n')
        .filter((l) => l.includes('"sandbox":"limits-unenforced"'));
      assert.equal(warned.length, 1, d.out());
      assert.match(warned[0]!, /"level":40/);
    } finally {
      await d.close();
    }
  });

  test("nobody, SANDBOX_LIMITS=unenforced: bwrap runs on rlimits (reported), files stay the user's; file service ptrace-proof, not signal-proof", async () => {
    const d = await nobodyDaemon({ SANDBOX_LIMITS: 'unenforced' });
    const { llm, data } = d;
    try {
      const port = await d.port();
      const call = caller(port);
      // the probe runs once the port is open: /server_info says probing until it decided
      const info = await probed(call);
      assert.equal(info.sandbox.mode, 'bwrap');
      assert.equal(info.sandbox.limits.enforced_by, 'rlimit');
      assert.match(info.sandbox.limits.unenforced, /^SANDBOX_LIMITS=unenforced: no cgroup/);
      assert.ok(d.out().includes('"sandbox":"limits-unenforced"'), 'warned at start');
      assert.equal(info.sandbox.limits.pids, null, 'no per-conversation process limit is claimed without a cgroup');
      const id = (await call('POST', '/api/conversations', {})).conversation_id;
      await waitFor(async () => (await call('GET', `/api/conversations/${id}`)).execution_status === 'idle', 'idle', 20_000);
      llm.push(
        {
          toolCalls: [
            {
              name: 'terminal',
              arguments: {
                command:
                  'id -u; pwd; touch mine.txt; ulimit -f; ulimit -d; ' +
                  // no host privilege from here either: sysctls read-only (even their current value), no user namespace
                  'v=$(cat /proc/sys/vm/swappiness); echo "$v" > /proc/sys/vm/swappiness 2>/dev/null; echo "sysctl rc=$?"; ' +
                  'unshare -U true 2>/dev/null; echo "unshare rc=$?"; grep -cE " /proc/sys ro," /proc/self/mountinfo',
              },
            },
          ],
        },
        { text: 'done' },
      );
      await call('POST', `/api/conversations/${id}/events`, { content: [{ text: 'go' }], run: true });
      await waitFor(async () => (await call('GET', `/api/conversations/${id}`)).execution_status === 'finished', 'finished', 30_000);
      const evs = (await call('GET', `/api/conversations/${id}/events/search?limit=100`)).items;
      const text = evs.find((e: any) => e.kind === 'ObservationEvent').observation.content[0].text;
      // uid 0 of the conversation's user namespace (no capability), the daemon's user on the host
      assert.match(text, /^0\n\/workspace\n/, text);
      assert.match(text, new RegExp(`^${1024 * 1024}$`, 'm'), 'RLIMIT_FSIZE: 1 GiB (bash counts KiB)');
      assert.match(text, new RegExp(`^${256 * 1024}$`, 'm'), 'RLIMIT_DATA (KiB)');
      assert.match(text, /^sysctl rc=[1-9]/m, text);
      assert.match(text, /^unshare rc=[1-9]/m, text);
      assert.match(text, /^1$/m, '/proc/sys is a read-only mount');
      const st = fs.statSync(path.join(data, 'workspaces', id.replace(/-/g, ''), 'mine.txt'));
      assert.equal(st.uid, 65534);
      // one uid for the agent and its file service here: the service holds capabilities the agent
      // lacks (the kernel's ptrace rule) and the agent runs under the seccomp filter; a signal
      // reaches it. bwrap's init (no capability here) is reached through /proc/1/mem: it holds no
      // channel of the daemon's (its fds are /dev/null and bwrap's stderr), so that is the agent's own.
      llm.push(
        {
          toolCalls: [
            {
              name: 'terminal',
              arguments: { command: `echo ${Buffer.from(REACH_PROBE).toString('base64')} | base64 -d > /tmp/reach.py && python3 /tmp/reach.py 2 1` },
            },
          ],
        },
        { text: 'done' },
      );
      await call('POST', `/api/conversations/${id}/events`, { content: [{ text: 'probe' }], run: true });
      await waitFor(async () => (await call('GET', `/api/conversations/${id}`)).execution_status === 'finished', 'finished', 30_000);
      const all = (await call('GET', `/api/conversations/${id}/events/search?limit=100`)).items.filter((e: any) => e.kind === 'ObservationEvent');
      const r = reachResult(all.at(-1).observation.content[0].text);
      for (const a of ['ptrace', 'pidfd_getfd', 'process_vm_readv', 'mem_read', 'mem_write', 'fd_link', 'environ']) {
        assert.notEqual(r['2']![a], 'reached', `${a} on the file service: ${JSON.stringify(r['2'])}`);
      }
      for (const a of ['ptrace', 'pidfd_getfd', 'process_vm_readv']) assert.equal(r['1']![a], 'EPERM', `${a} on init: ${JSON.stringify(r['1'])}`);
      assert.equal(r['2']!.kill, 'reached', 'the documented gap: the agent can signal its own file service (one uid here)');
    } finally {
      await d.close();
    }
  });
});

/**
 * What the unit's restrictions do to the daemon, emulated where that is possible without systemd
 * (as root: a private mount namespace, then setpriv to nobody). Emulated: User= (nobody),
 * CapabilityBoundingSet= / AmbientCapabilities= (empty), NoNewPrivileges=yes, UMask=0077,
 * LimitNOFILE (up to the hard limit here), the unit's Environment= lines (env -i), ProtectSystem=strict
 * with ReadWritePaths/StateDirectory (every mount read-only but the state directory),
 * PrivateTmp=yes, ProtectHome=yes, ProtectProc=invisible (a proc mounted with hidepid=invisible),
 * and the relaxation ProtectKernelTunables=no (the second test shows bwrap failing without it).
 * Not emulated (need systemd or a seccomp loader): RestrictNamespaces, SystemCallFilter,
 * RestrictAddressFamilies, LockPersonality, RestrictRealtime, ProtectClock, ProtectKernelModules,
 * ProtectHostname, PrivateDevices, Delegate=yes (cgroup v2; this machine has v1 only), KillMode.
 */
const UNIT_EMULATION = String.raw`set -e
STATE=$1; TUNABLES=$2; CHECKOUT=$3; APP=$4; shift 4
mount --bind "$CHECKOUT" "$APP"
cd "$APP"
mount --bind "$STATE" "$STATE"
mount -t tmpfs -o mode=1777 tmpfs /tmp
mount -t tmpfs -o mode=1777 tmpfs /var/tmp
for d in /home /root /run/user; do if [ -d "$d" ]; then mount -t tmpfs -o ro,mode=0755 tmpfs "$d"; fi; done
findmnt -rn -o TARGET | sort -r | while read -r m; do
  case "$m" in /proc|/proc/*|/sys|/sys/*|/dev|/dev/*|"$STATE"|/tmp|/var/tmp|/home|/root|/run/user) continue;; esac
  mount -o remount,bind,ro "$m" 2>/dev/null || echo "could not make $m read-only" >&2
done
mount -t proc -o hidepid=invisible,nosuid,nodev,noexec proc /proc
if [ "$TUNABLES" = yes ]; then mount --bind /proc/sys /proc/sys; mount -o remount,bind,ro /proc/sys; fi
umask 077
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
exec setpriv --reuid=65534 --regid=65534 --clear-groups --bounding-set=-all --inh-caps=-all --no-new-privs "$@"`;

describe('sandbox: scripts/parley.service', { timeout: 420_000 }, () => {
  const unitFile = path.join(ROOT, 'scripts/parley.service');
  const unit = fs.readFileSync(unitFile, 'utf8');
  const run = (cmd: string, args: string[]) =>
    new Promise<{ code: number | null; out: string }>((resolve) => {
      const p = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'] });
      let out = '';
      p.stdout.on('data', (c: Buffer) => (out += c.toString('utf8')));
      p.stderr.on('data', (c: Buffer) => (out += c.toString('utf8')));
      p.on('error', (e) => resolve({ code: -1, out: String(e) }));
      p.on('exit', (code) => resolve({ code, out }));
    });
  const hasAnalyze = fs.existsSync('/usr/bin/systemd-analyze') || fs.existsSync('/bin/systemd-analyze');

  test('systemd-analyze verify accepts the unit (and does flag a broken copy); the offline security check passes the sandbox settings', {
    skip: !hasAnalyze && 'no systemd-analyze',
  }, async () => {
    const ok = await run('systemd-analyze', ['verify', unitFile]);
    assert.equal(ok.code, 0, ok.out);
    assert.equal(ok.out.trim(), '', `verify complained:\n${ok.out}`);
    // control: verify prints what it cannot parse (its exit code stays 0 for that)
    const dir = tempDir();
    try {
      const bad = path.join(dir, 'parley.service');
      fs.writeFileSync(bad, unit.replace(/^RestrictNamespaces=.*$/m, 'RestrictNamespaces=user mnt nonsense'));
      assert.match((await run('systemd-analyze', ['verify', bad])).out, /Failed to parse namespace type/);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
    const sec = await run('systemd-analyze', ['security', '--offline=true', '--no-pager', unitFile]);
    assert.equal(sec.code, 0, sec.out);
    assert.match(sec.out, /✓ NoNewPrivileges=/);
    assert.match(sec.out, /✓ PrivateTmp=/);
    assert.match(sec.out, /✓ ProtectHome=/);
    // the relaxation bwrap needs: user namespaces allowed
    assert.match(sec.out, /✗ RestrictNamespaces=~user/);
    const level = Number(/Overall exposure level for parley\.service: ([\d.]+)/.exec(sec.out)?.[1]);
    assert.ok(level > 0 && level < 5, `exposure ${level}`);
  });

  test('every namespace, socket family and system call the sandboxes used (strace) is allowed by the unit', {
    skip: (!hasAnalyze || !fs.existsSync('/usr/bin/strace')) && 'needs strace and systemd-analyze',
  }, async () => {
    const dir = tempDir();
    const traces = path.join(dir, 'traces');
    fs.mkdirSync(traces);
    // the holders (bwrap) and the processes joining them (nsenter, found first on PATH), traced with their children
    const wrapper = path.join(dir, 'bwrap');
    fs.writeFileSync(wrapper, `#!/bin/sh\nexec /usr/bin/strace -ff -qq -o ${traces}/t /usr/bin/bwrap "$@"\n`, { mode: 0o755 });
    const bin = path.join(dir, 'bin');
    fs.mkdirSync(bin);
    fs.writeFileSync(path.join(bin, 'nsenter'), `#!/bin/sh\nexec /usr/bin/strace -ff -qq -o ${traces}/n /usr/bin/nsenter "$@"\n`, { mode: 0o755 });
    const h = await harness({ BWRAP_PATH: wrapper, PATH: `${bin}:${process.env.PATH ?? '/usr/bin:/bin'}` });
    try {
      const id = await h.create();
      const r = await h.sh(id, 'echo hi > /tmp/x && cat /tmp/x && ps -e >/dev/null && git --version >/dev/null && echo TRACED');
      assert.match(r.text, /TRACED/);
    } finally {
      await h.close();
    }
    try {
      const text = fs
        .readdirSync(traces)
        .map((f) => fs.readFileSync(path.join(traces, f), 'utf8'))
        .join('\n');
      const calls = new Set([...text.matchAll(/^(?:<\.\.\. )?([a-z_][a-z0-9_]*)(?:\(| resumed>)/gm)].map((m) => m[1]!));
      assert.ok(calls.has('pivot_root') && calls.has('setns') && calls.has('chroot') && calls.has('execve'), [...calls].join(' '));
      assert.ok(
        fs.readdirSync(traces).some((f) => f.startsWith('n.')),
        'the joining processes were traced',
      );
      // SystemCallFilter=~…: none of the denied groups' calls was made
      const groups = /^SystemCallFilter=~(.*)$/m.exec(unit)![1]!.trim().split(/\s+/);
      const listed = (await run('systemd-analyze', ['syscall-filter', '--no-pager', ...groups])).out;
      const denied = new Set(
        listed
          .split('\n')
          .map((l) => l.trim())
          .filter((l) => /^[a-z_][a-z0-9_]*$/.test(l)),
      );
      assert.ok(denied.has('ptrace') && denied.has('reboot'), 'the groups were listed');
      assert.deepEqual(
        [...calls].filter((c) => denied.has(c)),
        [],
        'calls the unit would refuse',
      );
      // RestrictNamespaces=: the namespaces created or joined
      const allowed = /^RestrictNamespaces=(.*)$/m.exec(unit)![1]!.trim().split(/\s+/);
      const names: Record<string, string> = { NS: 'mnt', USER: 'user', PID: 'pid', IPC: 'ipc', UTS: 'uts', NET: 'net', CGROUP: 'cgroup', TIME: 'time' };
      const used = new Set([...text.matchAll(/CLONE_NEW([A-Z]+)/g)].map((m) => names[m[1]!] ?? m[1]!));
      assert.ok(used.has('user') && used.has('pid') && used.has('mnt'), [...used].join(' '));
      assert.deepEqual(
        [...used].filter((n) => !allowed.includes(n)),
        [],
        'namespaces the unit would refuse',
      );
      // RestrictAddressFamilies=
      const families = /^RestrictAddressFamilies=(.*)$/m.exec(unit)![1]!.trim().split(/\s+/);
      const opened = new Set([...text.matchAll(/^socket\((AF_[A-Z0-9]+)/gm)].map((m) => m[1]!));
      assert.deepEqual(
        [...opened].filter((f) => !families.includes(f)),
        [],
        'socket families the unit would refuse',
      );
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  const emulated = async (tunables: 'yes' | 'no') => {
    const state = fs.mkdtempSync('/var/lib/parley-unit-test-');
    fs.chmodSync(state, 0o750);
    fs.chownSync(state, 65534, 65534);
    // the unit's Environment= lines, its DATA_DIR/HOME (/var/lib/parley) moved to this test's state directory
    const env = [...unit.matchAll(/^Environment=(.*)$/gm)].map((m) => m[1]!.replaceAll('/var/lib/parley', state));
    assert.ok(env.includes('SANDBOX=bwrap') && env.includes(`DATA_DIR=${state}`), env.join(' '));
    const exec = /^ExecStart=(.*)$/m.exec(unit)![1]!.split(/\s+/);
    const llm = await startScriptedLlm();
    const app = appDir();
    const p = spawn(
      'unshare',
      [
        '--mount',
        '--propagation',
        'private',
        'sh',
        '-c',
        UNIT_EMULATION,
        'sh',
        state,
        tunables,
        ROOT,
        app,
        'env',
        '-i',
        'PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
        ...env,
        'PORT=0',
        `SESSION_API_KEY=${SESSION}`,
        'LOG_LEVEL=info',
        // no cgroup can be delegated here (cgroup v1): the limits accepted as unenforced, as such a site would
        'SANDBOX_LIMITS=unenforced',
        'LLM_MODEL=openai/scripted',
        `LLM_BASE_URL=${llm.url}`,
        `LLM_API_KEY=${LLM_KEY}`,
        ...exec,
      ],
      { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let out = '';
    p.stdout.on('data', (c: Buffer) => (out += c.toString('utf8')));
    p.stderr.on('data', (c: Buffer) => (out += c.toString('utf8')));
    const exited = new Promise<number | null>((r) => p.on('exit', r));
    return {
      state,
      llm,
      exited,
      output: () => out,
      async close() {
        p.kill('SIGTERM');
        await exited;
        await llm.close();
        fs.rmSync(state, { recursive: true, force: true });
        fs.rmdirSync(app);
      },
    };
  };

  test('the sandbox works in the emulated unit (nobody, no caps, no_new_privs, UMask, ProtectSystem, PrivateTmp, ProtectHome, ProtectProc=invisible)', {
    skip: process.getuid?.() !== 0 && 'needs root to emulate the unit',
  }, async () => {
    const u = await emulated('no');
    try {
      const port = Number(
        (await waitFor(() => /"port":(\d+).*listening on/.exec(u.output()), 'listening', 60_000).catch(() => {
          throw new Error(u.output());
        }))![1],
      );
      const call = caller(port);
      const info = await probed(call);
      assert.equal(info.sandbox.mode, 'bwrap', u.output());
      const id = (await call('POST', '/api/conversations', {})).conversation_id;
      await waitFor(async () => (await call('GET', `/api/conversations/${id}`)).execution_status === 'idle', 'idle', 20_000);
      // (the locked directories: what a non-root daemon must still be able to remove on DELETE)
      u.llm.push(
        {
          toolCalls: [
            {
              name: 'terminal',
              arguments: {
                command:
                  'id -u; pwd; echo shared > /tmp/t; touch mine.txt; mkdir -p /tmp/locked/in locked/in; ' +
                  'touch /tmp/locked/in/f locked/in/f; chmod 0 /tmp/locked/in /tmp/locked locked/in locked',
              },
            },
          ],
        },
        { text: 'done' },
      );
      await call('POST', `/api/conversations/${id}/events`, { content: [{ text: 'go' }], run: true });
      await waitFor(async () => (await call('GET', `/api/conversations/${id}`)).execution_status === 'finished', 'finished', 30_000);
      const evs = (await call('GET', `/api/conversations/${id}/events/search?limit=100`)).items;
      const text = evs.find((e: any) => e.kind === 'ObservationEvent').observation.content[0].text;
      assert.match(text, /^0\n\/workspace\n/, text);
      const hex = id.replace(/-/g, '');
      const mine = fs.statSync(path.join(u.state, 'workspaces', hex, 'mine.txt'));
      assert.equal(mine.uid, 65534);
      assert.equal(mine.mode & 0o777, 0o600, 'UMask=0077 reaches the agent');
      assert.equal(fs.readFileSync(path.join(u.state, 'workspaces', '.sandbox', hex, 'tmp', 't'), 'utf8'), 'shared\n');
      assert.equal(fs.statSync(path.join(u.state, 'secret.key')).mode & 0o077, 0, 'the key file is private');
      assert.equal(fs.statSync(path.join(u.state, 'workspaces', '.sandbox', hex, 'tmp', 'locked')).mode & 0o777, 0);
      assert.equal((await fetch(`http://127.0.0.1:${port}/api/conversations/${id}`, { method: 'DELETE', headers: H })).status, 200);
      assert.ok(!fs.existsSync(path.join(u.state, 'workspaces', '.sandbox', hex)), "the sandbox's /tmp and HOME are removed, locked directories included");
      assert.ok(!fs.existsSync(path.join(u.state, 'workspaces', hex)), 'the workspace is removed, locked directories included');
    } finally {
      await u.close();
    }
  });

  test('why ProtectKernelTunables=no: with /proc/sys read-only bwrap cannot mount /proc and SANDBOX=bwrap exits 1 with one line', {
    skip: process.getuid?.() !== 0 && 'needs root to emulate the unit',
  }, async () => {
    const u = await emulated('yes');
    try {
      assert.equal(await u.exited, 1, u.output());
      assert.match(u.output(), /^parley: SANDBOX=bwrap but the bwrap probe failed: .*Can't mount proc/m);
    } finally {
      await u.close();
    }
  });
});
