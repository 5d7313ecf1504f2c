/**
 * The sandbox's modes and what runs it: keyless daemons, setup.sh and the prompt, DATA_DIR under a shown
 * directory, SANDBOX_MAX_LIVE, an unprivileged daemon, the systemd unit's restrictions, the modes at start.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { allEvents, waitStatus } from './support/conversation-api.js';
import { daemonArgs, ROOT, startDaemon, tempDir, waitFor, type DaemonHandle } from './support/daemon.js';
import { startScriptedLlm, type ScriptedLlm } from './support/scripted-llm.js';
import { startGitServer } from './support/git-server.js';
import { hostPid } from './support/processes.js';
import { Sandbox, DEFAULT_SANDBOX_SETTINGS } from '../src/sandbox/launcher.js';
import { fileURLToPath } from 'node:url';

import {
  SESSION,
  LLM_KEY,
  SECRET_KEY,
  CANARIES,
  H,
  rev,
  hostProcesses,
  hostProcess,
  nsOf,
  pidsInNs,
  descendants,
  alive,
  TSX_LOADER,
  STDIO_SERVER,
  Harness,
  harness,
} from './support/sandbox-harness.js';

describe('sandbox: the daemon API from inside a sandbox without a session key', { timeout: 180_000 }, () => {
  const httpGet = (port: number, url: string) =>
    `exec 3<>/dev/tcp/127.0.0.1/${port} && printf 'GET ${url} HTTP/1.1\\r\\nHost: 127.0.0.1\\r\\nConnection: close\\r\\n\\r\\n' >&3 && cat <&3 || echo NO-CONNECTION`;

  test('SANDBOX_NETWORK=none: another conversation cannot be read through the keyless API', async () => {
    const h = await harness({ SESSION_API_KEY: '', SANDBOX_NETWORK: 'none' });
    try {
      const victim = await h.create();
      await h.sh(victim, 'echo VICTIM-MARKER-3131');
      const a = await h.create();
      // from the host the keyless API answers (control) …
      assert.match((await fetch(`http://127.0.0.1:${h.d.port}/api/conversations/${victim}/events/search?limit=100`)).status.toString(), /^200$/);
      // … from the sandbox it cannot even be reached
      const r = await h.sh(a, httpGet(h.d.port, `/api/conversations/${victim}/events/search?limit=100`));
      assert.match(r.text, /NO-CONNECTION/);
      assert.doesNotMatch(r.text, /VICTIM-MARKER|HTTP\/1\.1 200/);
      assert.ok(!h.d.output.some((l) => l.includes('api-reachable')), 'no warning with network none');
    } finally {
      await h.close();
    }
  });

  test('SANDBOX=auto, SANDBOX_NETWORK=host without a key: the daemon warns at start that agents reach its API (the documented gap; SANDBOX=bwrap refuses it, see "modes at start")', async () => {
    const h = await harness({ SESSION_API_KEY: '', SANDBOX: 'auto', SANDBOX_NETWORK: 'host' });
    try {
      // logged when the probe decides (after the port opened), once
      await waitFor(() => h.d.output.some((l) => l.includes('"sandbox":"api-reachable"')), 'the warning', 30_000);
      const warnings = h.d.output.filter((l) => l.includes('"sandbox":"api-reachable"'));
      assert.equal(warnings.length, 1, h.d.output.join('\n'));
      assert.match(warnings[0]!, /set SESSION_API_KEY or SANDBOX_NETWORK=none/);
      // what the warning is about: the keyless API answers a sandboxed process (README, Trust model)
      const a = await h.create();
      const r = await h.sh(a, httpGet(h.d.port, '/alive'));
      assert.match(r.text, /HTTP\/1\.1 200/);
    } finally {
      await h.close();
    }
  });
});

describe('sandbox: setup.sh and the system prompt', { timeout: 120_000 }, () => {
  test('a cloned repository\'s setup.sh runs in the sandbox; the prompt says "sandboxed"', async () => {
    const git = await startGitServer({ token: 'gh-SANDBOX-token-1234' });
    // the agent's own git reaches the git server on the host's loopback: that one port is allowed
    const h = await harness({ SANDBOX_ALLOW_NETS: `127.0.0.1:${new URL(git.url).port}` });
    const tag = `setup-escape-${process.pid}-${Date.now()}`;
    try {
      await git.createRepo('acme/sbx', {
        'README.md': '# sbx\n',
        '.openhands/setup.sh': [
          'echo "PWD=$(pwd)"',
          `ls ${h.d.dataDir} >/dev/null 2>&1 && echo DATADIR-VISIBLE`,
          `cat /proc/${h.d.proc.pid}/environ >/dev/null 2>&1 && echo DAEMON-ENV-VISIBLE`,
          'env | rev > .env-rev',
          `touch /tmp/${tag}`,
          'echo "UID=$(id -u)"',
          'echo SETUP-DONE',
          '',
        ].join('\n'),
      }, { private: true });
      assert.equal((await h.req('POST', '/api/add-git-providers', { provider_tokens: { github: { token: 'gh-SANDBOX-token-1234', host: git.url } } })).status, 200);
      const r = await h.req('POST', '/api/conversations', { repository: 'acme/sbx', git_provider: 'github' });
      const id = r.body.conversation_id;
      await waitFor(async () => ['ready', 'error'].includes((await h.req('GET', `/api/conversations/${id}`)).body.setup?.phase), 'prepared', 60_000);
      const evs = await allEvents(h.req, id);
      const out = evs.find((e) => e.key === 'setup_script')?.value.output ?? '';
      assert.match(out, /SETUP-DONE/, out);
      assert.match(out, /^PWD=\/workspace$/m);
      assert.match(out, new RegExp(`^UID=${process.getuid!()}$`, 'm'));
      assert.doesNotMatch(out, /DATADIR-VISIBLE|DAEMON-ENV-VISIBLE/);
      assert.ok(!fs.existsSync(`/tmp/${tag}`), 'setup.sh wrote to the host /tmp');
      const dumped = fs.readFileSync(path.join(h.ws(id), '.env-rev'), 'utf8');
      for (const c of CANARIES) assert.ok(!dumped.includes(rev(c)), `${c} reached setup.sh`);
      // the cloned files belong to the sandbox's uid (SANDBOX_UID as root, else the daemon's user)
      assert.equal(fs.statSync(path.join(h.ws(id), 'README.md')).uid, process.getuid!() === 0 ? 65533 : process.getuid!());
      const obs = await h.sh(id, 'cat README.md');
      assert.match(obs.text, /# sbx/);
      // the agent's git authenticates through the askpass helper shown read-only in the sandbox
      const fetched = await h.sh(id, 'echo "$GIT_ASKPASS"; git fetch origin && git ls-remote origin >/dev/null && echo FETCH-OK');
      assert.match(fetched.text, /^\/parley\/helpers\//m);
      assert.match(fetched.text, /FETCH-OK/, fetched.text);
      const sys = (await allEvents(h.req, id)).find((e) => e.kind === 'SystemPromptEvent');
      assert.match(sys.system_prompt.text, /sandboxed workspace/);
      assert.match(sys.system_prompt.text, /working directory is \/workspace\b/);
    } finally {
      await git.close();
      await h.close();
    }
  });

  test('SANDBOX=none: still a built environment; the prompt does not claim a sandbox', async () => {
    const h = await harness({ SANDBOX: 'none' });
    try {
      assert.equal((await h.req('GET', '/server_info')).body.sandbox.mode, 'none');
      const id = await h.create();
      await h.sh(id, 'env | rev > env-rev.txt');
      const dumped = fs.readFileSync(path.join(h.ws(id), 'env-rev.txt'), 'utf8');
      for (const c of CANARIES) assert.ok(!dumped.includes(rev(c)), `${c} reached the shell`);
      const sys = (await allEvents(h.req, id)).find((e) => e.kind === 'SystemPromptEvent');
      assert.doesNotMatch(sys.system_prompt.text, /sandbox/i);
    } finally {
      await h.close();
    }
  });
});

describe('sandbox: DATA_DIR under a directory the sandbox shows', { timeout: 120_000 }, () => {
  test('DATA_DIR inside a SANDBOX_RO_BINDS directory stays invisible (masked), the rest of it is shown', async () => {
    const outer = tempDir('parley-sbx-outer-');
    // a directory shown to the sandboxes is readable by their uid (as a toolchain under /opt is)
    fs.chmodSync(outer, 0o755);
    fs.writeFileSync(path.join(outer, 'visible.txt'), 'SHOWN', { mode: 0o644 });
    const dataDir = path.join(outer, 'data');
    const llm = await startScriptedLlm();
    // (keyless: with SANDBOX=bwrap that needs SANDBOX_NETWORK=none; the network plays no part here)
    const d = await startDaemon({ LLM_MODEL: 'openai/scripted', LLM_BASE_URL: llm.url, LLM_API_KEY: LLM_KEY, SANDBOX: 'bwrap', SANDBOX_NETWORK: 'none', SANDBOX_RO_BINDS: outer }, dataDir);
    try {
      const id = (await d.req('POST', '/api/conversations', {})).body.conversation_id;
      await waitStatus(d.req, id, 'idle');
      llm.push({ toolCalls: [{ name: 'terminal', arguments: { command: `cat ${outer}/visible.txt; echo; ls -A ${dataDir} | wc -l; cat ${dataDir}/secret.key ${dataDir}/parley.pid; ls ${dataDir}/workspaces` } }] }, { text: 'done' });
      await d.req('POST', `/api/conversations/${id}/events`, { content: [{ text: 'go' }], run: true });
      await waitStatus(d.req, id, 'finished');
      const evs = await allEvents(d.req, id);
      const text = evs.find((e) => e.kind === 'ObservationEvent').observation.content[0].text as string;
      assert.match(text, /^SHOWN$/m);
      assert.match(text, /^0$/m, 'DATA_DIR is an empty directory inside');
      assert.match(text, /No such file or directory/);
      assert.ok(fs.existsSync(path.join(dataDir, 'parley.pid')), 'the host DATA_DIR is intact');
      assert.ok(!text.includes(fs.readFileSync(path.join(dataDir, 'parley.pid'), 'utf8').trim() + '\n'), 'parley.pid not read');
    } finally {
      await d.stop();
      await llm.close();
      fs.rmSync(outer, { recursive: true, force: true });
    }
  });
});

describe('sandbox: SANDBOX_MAX_LIVE', { timeout: 120_000 }, () => {
  test('beyond the cap the least recently used idle sandbox is closed; its shell comes back on the next command', async () => {
    const h = await harness({ SANDBOX_MAX_LIVE: '2', METRICS_PORT: '0' });
    try {
      const ids = [await h.create(), await h.create(), await h.create()];
      const marker = `7575${process.pid % 1000}`;
      await h.sh(ids[0]!, `(sleep ${marker}0 &); echo one`);
      await h.sh(ids[1]!, `(sleep ${marker}1 &); echo two`);
      await waitFor(() => hostProcesses(`sleep ${marker}0`).length === 1 && hostProcesses(`sleep ${marker}1`).length === 1, 'two sandboxes live', 10_000);
      await h.sh(ids[2]!, `(sleep ${marker}2 &); echo three`);
      // the first (least recently used, idle) one was closed, background job included
      await waitFor(() => hostProcesses(`sleep ${marker}0`).length === 0, 'the LRU sandbox closed', 10_000);
      assert.equal(hostProcesses(`sleep ${marker}1`).length, 1);
      assert.equal(hostProcesses(`sleep ${marker}2`).length, 1);
      const port = Number(/"metrics_port":(\d+)/.exec(h.d.output.join('\n'))?.[1]);
      const metrics = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
      assert.match(metrics, /^parley_sandboxes\{mode="bwrap"\} 2$/m);
      const again = await h.sh(ids[0]!, 'echo back');
      assert.match(again.text, /back/);
      assert.match(again.text, /new shell was started/);
    } finally {
      await h.close();
    }
  });
});

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

describe('sandbox: an unprivileged daemon (as under the systemd unit)', { timeout: 120_000, skip: process.getuid?.() !== 0 && 'needs root to switch to nobody' }, () => {
  test('as nobody, with no capabilities and no_new_privs: bwrap works, limits fall back to rlimits, files stay the user\'s', async () => {
    const llm = await startScriptedLlm();
    const dir = tempDir();
    fs.chmodSync(dir, 0o755);
    fs.chownSync(dir, 65534, 65534);
    const data = path.join(dir, 'data');
    fs.mkdirSync(data);
    fs.chownSync(data, 65534, 65534);
    // what User=… CapabilityBoundingSet= NoNewPrivileges=yes give the daemon
    const app = appDir();
    const p = spawn('unshare', ['--mount', '--propagation', 'private', 'sh', '-c', AS_APP, 'sh', ROOT, app, 'setpriv', '--reuid=65534', '--regid=65534', '--clear-groups', '--bounding-set=-all', '--inh-caps=-all', '--no-new-privs', process.execPath, ...(await daemonArgs())], {
      cwd: ROOT,
      env: { PATH: '/usr/local/bin:/usr/bin:/bin', HOME: dir, PORT: '0', DATA_DIR: data, SANDBOX: 'bwrap', SESSION_API_KEY: SESSION, LOG_LEVEL: 'info', LLM_MODEL: 'openai/scripted', LLM_BASE_URL: llm.url, LLM_API_KEY: LLM_KEY, SANDBOX_MEMORY_MB: '256' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    p.stdout.on('data', (c: Buffer) => (out += c.toString('utf8')));
    p.stderr.on('data', (c: Buffer) => (out += c.toString('utf8')));
    const exited = new Promise((r) => p.on('exit', r));
    try {
      const port = Number((await waitFor(() => /"port":(\d+).*listening on/.exec(out), 'listening', 30_000))![1]);
      const call = async (m: string, u: string, b?: unknown) => {
        const r = await fetch(`http://127.0.0.1:${port}${u}`, { method: m, headers: { ...H, ...(b ? { 'content-type': 'application/json' } : {}) }, body: b ? JSON.stringify(b) : undefined });
        return r.json() as Promise<any>;
      };
      // the probe runs once the port is open: /server_info says probing until it decided
      const info = await waitFor(async () => {
        const i = await call('GET', '/server_info');
        return i.sandbox.mode === 'probing' ? null : i;
      }, 'the sandbox probe', 60_000);
      assert.equal(info.sandbox.mode, 'bwrap');
      assert.equal(info.sandbox.limits.enforced_by, 'rlimit');
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
    } finally {
      p.kill('SIGTERM');
      await exited;
      await llm.close();
      fs.rmSync(dir, { recursive: true, force: true });
      fs.rmdirSync(app);
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

describe('sandbox: scripts/parley.service', { timeout: 180_000 }, () => {
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

  test('systemd-analyze verify accepts the unit (and does flag a broken copy); the offline security check passes the sandbox settings', { skip: !hasAnalyze && 'no systemd-analyze' }, async () => {
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

  test('every namespace, socket family and system call the sandboxes used (strace) is allowed by the unit', { skip: (!hasAnalyze || !fs.existsSync('/usr/bin/strace')) && 'needs strace and systemd-analyze' }, async () => {
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
      const text = fs.readdirSync(traces).map((f) => fs.readFileSync(path.join(traces, f), 'utf8')).join('\n');
      const calls = new Set([...text.matchAll(/^(?:<\.\.\. )?([a-z_][a-z0-9_]*)(?:\(| resumed>)/gm)].map((m) => m[1]!));
      assert.ok(calls.has('pivot_root') && calls.has('setns') && calls.has('chroot') && calls.has('execve'), [...calls].join(' '));
      assert.ok(fs.readdirSync(traces).some((f) => f.startsWith('n.')), 'the joining processes were traced');
      // SystemCallFilter=~…: none of the denied groups' calls was made
      const groups = /^SystemCallFilter=~(.*)$/m.exec(unit)![1]!.trim().split(/\s+/);
      const listed = (await run('systemd-analyze', ['syscall-filter', '--no-pager', ...groups])).out;
      const denied = new Set(listed.split('\n').map((l) => l.trim()).filter((l) => /^[a-z_][a-z0-9_]*$/.test(l)));
      assert.ok(denied.has('ptrace') && denied.has('reboot'), 'the groups were listed');
      assert.deepEqual([...calls].filter((c) => denied.has(c)), [], 'calls the unit would refuse');
      // RestrictNamespaces=: the namespaces created or joined
      const allowed = /^RestrictNamespaces=(.*)$/m.exec(unit)![1]!.trim().split(/\s+/);
      const names: Record<string, string> = { NS: 'mnt', USER: 'user', PID: 'pid', IPC: 'ipc', UTS: 'uts', NET: 'net', CGROUP: 'cgroup', TIME: 'time' };
      const used = new Set([...text.matchAll(/CLONE_NEW([A-Z]+)/g)].map((m) => names[m[1]!] ?? m[1]!));
      assert.ok(used.has('user') && used.has('pid') && used.has('mnt'), [...used].join(' '));
      assert.deepEqual([...used].filter((n) => !allowed.includes(n)), [], 'namespaces the unit would refuse');
      // RestrictAddressFamilies=
      const families = /^RestrictAddressFamilies=(.*)$/m.exec(unit)![1]!.trim().split(/\s+/);
      const opened = new Set([...text.matchAll(/^socket\((AF_[A-Z0-9]+)/gm)].map((m) => m[1]!));
      assert.deepEqual([...opened].filter((f) => !families.includes(f)), [], 'socket families the unit would refuse');
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
      ['--mount', '--propagation', 'private', 'sh', '-c', UNIT_EMULATION, 'sh', state, tunables, ROOT, app, 'env', '-i', 'PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin', ...env, 'PORT=0', `SESSION_API_KEY=${SESSION}`, 'LOG_LEVEL=info', 'LLM_MODEL=openai/scripted', `LLM_BASE_URL=${llm.url}`, `LLM_API_KEY=${LLM_KEY}`, ...exec],
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

  test('under the unit\'s emulated restrictions (nobody, no capabilities, no_new_privs, UMask, read-only system, private /tmp, ProtectHome, ProtectProc=invisible) the sandbox works', { skip: process.getuid?.() !== 0 && 'needs root to emulate the unit' }, async () => {
    const u = await emulated('no');
    try {
      const port = Number((await waitFor(() => /"port":(\d+).*listening on/.exec(u.output()), 'listening', 60_000).catch(() => {
        throw new Error(u.output());
      }))![1]);
      const call = async (m: string, url: string, b?: unknown) => {
        const r = await fetch(`http://127.0.0.1:${port}${url}`, { method: m, headers: { ...H, ...(b ? { 'content-type': 'application/json' } : {}) }, body: b ? JSON.stringify(b) : undefined });
        return r.json() as Promise<any>;
      };
      const info = await waitFor(async () => {
        const i = await call('GET', '/server_info');
        return i.sandbox.mode === 'probing' ? null : i;
      }, 'the sandbox probe', 60_000);
      assert.equal(info.sandbox.mode, 'bwrap', u.output());
      const id = (await call('POST', '/api/conversations', {})).conversation_id;
      await waitFor(async () => (await call('GET', `/api/conversations/${id}`)).execution_status === 'idle', 'idle', 20_000);
      // (the locked directories: what a non-root daemon must still be able to remove on DELETE)
      u.llm.push({ toolCalls: [{ name: 'terminal', arguments: { command: 'id -u; pwd; echo shared > /tmp/t; touch mine.txt; mkdir -p /tmp/locked/in locked/in; touch /tmp/locked/in/f locked/in/f; chmod 0 /tmp/locked/in /tmp/locked locked/in locked' } }] }, { text: 'done' });
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

  test('why ProtectKernelTunables=no: with /proc/sys read-only bwrap cannot mount /proc and SANDBOX=bwrap exits 1 with one line', { skip: process.getuid?.() !== 0 && 'needs root to emulate the unit' }, async () => {
    const u = await emulated('yes');
    try {
      assert.equal(await u.exited, 1, u.output());
      assert.match(u.output(), /^parley: SANDBOX=bwrap but the bwrap probe failed: .*Can't mount proc/m);
    } finally {
      await u.close();
    }
  });
});

describe('sandbox: modes at start', { timeout: 170_000 }, () => {
  /**
   * Starts the daemon; once it listens (or prints `stopAt`) it is stopped (SIGTERM), unless `failing`: the probe that
   * decides SANDBOX=bwrap cannot be honoured runs after the port is open, so such a daemon is left
   * to exit by itself (killed after 60 s if it does not).
   */
  const run = async (env: Record<string, string>, failing = false, stopAt = /"port":\d+.*listening on/) => {
    const daemon = await daemonArgs();
    return new Promise<{ code: number | null; stderr: string; stdout: string }>((resolve) => {
      const dir = tempDir();
      const p = spawn(process.execPath, daemon, {
        cwd: ROOT,
        env: { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: dir, PORT: '0', DATA_DIR: dir, SESSION_API_KEY: SESSION, ...env },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let stderr = '';
      let stdout = '';
      p.stderr.on('data', (c: Buffer) => (stderr += c.toString('utf8')));
      p.stdout.on('data', (c: Buffer) => {
        stdout += c.toString('utf8');
        if (!failing && stopAt.test(stdout)) p.kill('SIGTERM');
      });
      const stuck = failing ? setTimeout(() => p.kill('SIGKILL'), 60_000) : null;
      p.on('exit', (code) => {
        if (stuck) clearTimeout(stuck);
        fs.rmSync(dir, { recursive: true, force: true });
        resolve({ code, stderr, stdout });
      });
    });
  };

  test('SANDBOX=bwrap with BWRAP_PATH pointing nowhere exits 1 with one line', async () => {
    const r = await run({ SANDBOX: 'bwrap', BWRAP_PATH: '/nonexistent/bwrap' }, true);
    assert.equal(r.code, 1);
    const lines = r.stderr.trim().split('\n');
    assert.equal(lines.length, 1, r.stderr);
    assert.match(lines[0]!, /^parley: SANDBOX=bwrap but BWRAP_PATH=\/nonexistent\/bwrap does not exist: install bubblewrap/);
  });

  test('SANDBOX=bwrap with no bwrap on PATH exits 1 with one line', async () => {
    const r = await run({ SANDBOX: 'bwrap', PATH: '/nonexistent' }, true);
    assert.equal(r.code, 1);
    assert.equal(r.stderr.trim().split('\n').length, 1, r.stderr);
    assert.match(r.stderr, /bwrap was not found on PATH/);
  });

  test('SANDBOX=bwrap with the host network and no session key exits 1 with one line (agents would reach the keyless API); with SANDBOX_NETWORK=none it starts', async () => {
    const r = await run({ SANDBOX: 'bwrap', SESSION_API_KEY: '', SANDBOX_NETWORK: 'host' }, true);
    assert.equal(r.code, 1);
    assert.equal(r.stderr.trim().split('\n').length, 1, r.stderr);
    assert.match(r.stderr, /^parley: invalid configuration: SESSION_API_KEY: required with SANDBOX=bwrap and SANDBOX_NETWORK=host .*set a key or SANDBOX_NETWORK=none/);
    const none = await run({ SANDBOX: 'bwrap', SESSION_API_KEY: '', SANDBOX_NETWORK: 'none' });
    assert.match(none.stdout, /"port":\d+.*listening on/, none.stderr);
  });

  test('SANDBOX=bwrap with bwrap but without nsenter (util-linux) exits 1 with one line naming it', async () => {
    const dir = tempDir();
    try {
      fs.symlinkSync('/usr/bin/bwrap', path.join(dir, 'bwrap'));
      const r = await run({ SANDBOX: 'bwrap', PATH: dir }, true);
      assert.equal(r.code, 1);
      assert.equal(r.stderr.trim().split('\n').length, 1, r.stderr);
      assert.match(r.stderr, /^parley: SANDBOX=bwrap but nsenter, setsid, setpriv, unshare \(util-linux\) not found on PATH/);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  test('SANDBOX=auto without bwrap warns once and starts with plain processes', async () => {
    // the probe decides after the port opens: stopped once it warned
    const r = await run({ SANDBOX: 'auto', BWRAP_PATH: '/nonexistent/bwrap' }, false, /UNSANDBOXED/);
    assert.match(r.stdout, /"port":\d+.*listening on/, r.stderr);
    const warnings = r.stdout.split('\n').filter((l) => /UNSANDBOXED/.test(l));
    assert.equal(warnings.length, 1, r.stdout);
    assert.match(warnings[0]!, /"level":40/);
  });
});
