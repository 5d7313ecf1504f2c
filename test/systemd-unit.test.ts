/**
 * scripts/parley.service run by a real systemd: the host's systemd booted as PID 1 of private
 * namespaces (test/support/systemd-container.ts), the unit installed verbatim as its header says
 * (/etc/systemd/system/parley.service, a `parley` account, /etc/parley/parley.env, the code on
 * /opt/parley), started and stopped with systemctl, and judged from the host: the daemon's port,
 * its /proc status, its cgroup, a conversation whose terminal runs in the bwrap sandbox.
 * This is where systemd itself applies what the emulation in sandbox.test.ts cannot: the
 * SystemCallFilter= seccomp filter, RestrictNamespaces=, PrivateDevices=, ProtectClock=,
 * ProtectKernelModules=, ProtectHostname=, LockPersonality=, RestrictRealtime=, Delegate=yes,
 * KillMode=mixed.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { after, before, describe, test } from 'node:test';
import { ROOT, freePort, waitFor } from './support/daemon.js';
import { startScriptedLlm, type ScriptedLlm } from './support/scripted-llm.js';
import { isAlive } from './support/processes.js';
import { bootSystemdContainer, systemdContainerUnsupported, type SystemdContainer } from './support/systemd-container.js';

const SESSION = 'sess-SYSTEMDUNIT-4711';
const H = { 'X-Session-API-Key': SESSION };
const UNIT = fs.readFileSync(new URL('../scripts/parley.service', import.meta.url), 'utf8');
const SYSCTLS = ['fs/file-max', 'fs/nr_open', 'net/unix/max_dgram_qlen', 'kernel/hostname'];

/** A uid no host account has (the `parley` account exists only in the container's /etc/passwd). */
function freeUid(): number {
  const used = new Set(
    fs
      .readFileSync('/etc/passwd', 'utf8')
      .split('\n')
      .map((l) => Number(l.split(':')[2])),
  );
  let uid = 61000;
  while (used.has(uid)) uid++;
  return uid;
}

/** Fields of /proc/<pid>/status. */
function status(pid: number): Record<string, string> {
  const out: Record<string, string> = {};
  for (const line of fs.readFileSync(`/proc/${pid}/status`, 'utf8').split('\n')) {
    const i = line.indexOf(':');
    if (i > 0) out[line.slice(0, i)] = line.slice(i + 1).trim();
  }
  return out;
}

const unsupported = systemdContainerUnsupported() ?? (!fs.existsSync('/usr/bin/bwrap') && 'no bwrap (apt-get install bubblewrap)');

describe('systemd: scripts/parley.service under a real systemd (PID 1 of private namespaces)', { skip: unsupported || false }, () => {
  const uid = freeUid();
  const hostSysctls = Object.fromEntries(SYSCTLS.map((s) => [s, fs.readFileSync(`/proc/sys/${s}`, 'utf8')]));
  let c: SystemdContainer;
  let llm: ScriptedLlm;
  let port: number;
  const systemctl = async (...args: string[]) => {
    const r = await c.exec(['systemctl', '--no-pager', ...args]);
    return { ...r, out: r.out.trim() };
  };
  const call = async (method: string, url: string, body?: unknown) => {
    const r = await fetch(`http://127.0.0.1:${port}${url}`, {
      method,
      headers: { ...H, ...(body ? { 'content-type': 'application/json' } : {}) },
      body: body ? JSON.stringify(body) : undefined,
    });
    return { status: r.status, body: (await r.json()) as any };
  };
  const withJournal = async <T>(p: Promise<T>): Promise<T> =>
    p.catch(async (e) => {
      throw new Error(`${(e as Error).message}\n--- journal of parley.service:\n${await c.journal('parley')}`);
    });

  before(async () => {
    llm = await startScriptedLlm();
    port = await freePort();
    c = await bootSystemdContainer({
      checkout: ROOT,
      appName: 'parley',
      user: { name: 'parley', uid },
      files: [
        // the unit exactly as the repository has it, installed as its header says
        { path: '/etc/systemd/system/parley.service', content: UNIT },
        { path: '/etc/parley', mode: 0o750 },
        {
          path: '/etc/parley/parley.env',
          mode: 0o640,
          group: 'parley',
          content: [
            `PORT=${port}`,
            `SESSION_API_KEY=${SESSION}`,
            'LOG_LEVEL=info',
            // this machine's only cgroup v2 hierarchy has no memory or pids controller to delegate:
            // the site accepts the limits as unenforced (without it the daemon refuses to start)
            'SANDBOX_LIMITS=unenforced',
            'LLM_MODEL=openai/scripted',
            `LLM_BASE_URL=${llm.url}`,
            'LLM_API_KEY=sk-SYSTEMDUNIT-0815',
            '',
          ].join('\n'),
        },
      ],
    });
  });

  after(async () => {
    await c?.close();
    await llm?.close();
  });

  test('booting systemd left the host alone: its sysctls and hostname are as before', { timeout: 10_000 }, () => {
    for (const s of SYSCTLS) assert.equal(fs.readFileSync(`/proc/sys/${s}`, 'utf8'), hostSysctls[s], s);
  });

  test('systemctl start: the daemon answers with sandbox mode bwrap, as the unprivileged user with no capabilities, no_new_privs, the seccomp ' +
    'filters, ProtectProc and PrivateDevices, in a delegated cgroup', {
    timeout: 60_000,
  }, async () => {
    const started = await systemctl('start', 'parley');
    assert.equal(started.code, 0, started.out);
    const info = await withJournal(
      waitFor(
        async () => {
          const r = await call('GET', '/server_info').catch(() => null);
          return r?.status === 200 && r.body.sandbox.mode !== 'probing' ? r.body : null;
        },
        'the daemon to answer and its sandbox probe to decide',
        45_000,
      ),
    );
    assert.equal(info.sandbox.mode, 'bwrap', JSON.stringify(info));
    assert.equal(info.sandbox.network, 'egress', `/dev/net/tun is there for slirp4netns: ${JSON.stringify(info.sandbox)}`);
    // without a delegated memory and pids controller the limits are not enforced, and it says so
    assert.match(info.sandbox.limits.unenforced, /^SANDBOX_LIMITS=unenforced: no cgroup/, JSON.stringify(info.sandbox));
    assert.match(await c.journal('parley'), /"sandbox":"limits-unenforced"/);
    const mainPid = Number((await systemctl('show', '--value', '-p', 'MainPID', 'parley')).out);
    const pid = c.hostPidOf(mainPid);
    assert.ok(pid, `host pid of MainPID ${mainPid}`);
    assert.match(
      fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8'),
      /^\/usr\/bin\/node\0--max-semi-space-size=2\0--v8-pool-size=1\0--interrupt-budget=270336\0--import\0tsx\0bridge\/main\.ts\0$/,
      'node is the main process (ExecStart=)',
    );
    const st = status(pid);
    assert.equal(st.Uid, `${uid}\t${uid}\t${uid}\t${uid}`, 'User=parley');
    assert.equal(st.CapBnd, '0000000000000000', 'CapabilityBoundingSet=');
    assert.equal(st.CapEff, '0000000000000000');
    assert.equal(st.NoNewPrivs, '1', 'NoNewPrivileges=yes');
    assert.equal(st.Seccomp, '2', 'SystemCallFilter= and friends: seccomp filters loaded');
    assert.ok(Number(st.Seccomp_filters) >= 5, `filters: ${st.Seccomp_filters}`);
    // the service's own mount namespace, seen through its /proc/<pid>
    const mounts = fs.readFileSync(`/proc/${pid}/mountinfo`, 'utf8');
    assert.match(mounts, / \/proc \S+ .*- proc \S+ \S*hidepid=invisible/, 'ProtectProc=invisible');
    const dev = fs.readdirSync(`/proc/${pid}/root/dev`);
    assert.ok(dev.includes('null') && dev.includes('urandom'), dev.join(' '));
    assert.ok(!dev.includes('console'), `PrivateDevices=yes: the container's /dev/console is not in the service's /dev (${dev.join(' ')})`);
    assert.notEqual(fs.readlinkSync(`/proc/${pid}/ns/mnt`), fs.readlinkSync(`/proc/${c.pid}/ns/mnt`), 'a mount namespace of its own');
    // Delegate=yes: the service's cgroup (v2) belongs to the parley user
    const cg = `${c.cgroup}/system.slice/parley.service`;
    for (const f of ['', '/cgroup.procs', '/cgroup.subtree_control']) assert.equal(fs.statSync(cg + f).uid, uid, `Delegate=yes: ${cg}${f}`);
    assert.ok(c.pidsIn('system.slice/parley.service').includes(pid));
  });

  test("a conversation's terminal runs its command in the bwrap sandbox, under the unit's filters", { timeout: 60_000 }, async () => {
    const info = (await call('GET', '/server_info')).body;
    const created = await call('POST', '/api/conversations', {});
    assert.equal(created.status, 200, JSON.stringify(created.body));
    const id = created.body.conversation_id as string;
    await waitFor(async () => (await call('GET', `/api/conversations/${id}`)).body.execution_status === 'idle', 'idle', 20_000);
    const strace = fs.existsSync('/usr/bin/strace');
    const command = [
      'id -u',
      'pwd',
      "grep -E '^(NoNewPrivs|Seccomp):' /proc/self/status",
      // SystemCallFilter=~@debug: ptrace is refused (an unprivileged strace of its own child works elsewhere)
      strace ? 'strace -o /dev/null true 2>&1 | head -1; echo "strace exit ${PIPESTATUS[0]}"' : 'echo no strace',
      'sleep 300 & echo SANDBOXED',
    ].join('; ');
    llm.push({ toolCalls: [{ name: 'terminal', arguments: { command } }] }, { text: 'done' });
    const sent = await call('POST', `/api/conversations/${id}/events`, { content: [{ text: 'go' }], run: true });
    assert.equal(sent.status, 200, JSON.stringify(sent.body));
    await withJournal(waitFor(async () => (await call('GET', `/api/conversations/${id}`)).body.execution_status === 'finished', 'finished', 40_000));
    const evs = (await call('GET', `/api/conversations/${id}/events/search?limit=100`)).body.items;
    const obs = evs.find((e: any) => e.kind === 'ObservationEvent');
    const text = obs?.observation?.content?.[0]?.text as string;
    assert.match(text, /SANDBOXED/, JSON.stringify(obs));
    const lines = text.split('\n');
    assert.equal(lines[0], '0', `uid 0 of the sandbox's user namespace (parley outside, below): ${text}`);
    assert.equal(lines[1], info.sandbox.workspace, text);
    assert.match(text, /^NoNewPrivs:\s+1$/m, text);
    assert.match(text, /^Seccomp:\s+2$/m, text);
    if (strace) {
      assert.match(text, /Operation not permitted/, text);
      assert.match(text, /^strace exit [1-9]/m, text);
    }
    // the sandbox's processes: in the unit's cgroup, in a pid namespace of their own
    const daemonNs = fs.readlinkSync(`/proc/${c.hostPidOf(Number((await systemctl('show', '--value', '-p', 'MainPID', 'parley')).out))}/ns/pid`);
    const sleeper = c.pidsIn('system.slice/parley.service').find((p) => {
      try {
        return fs.readFileSync(`/proc/${p}/cmdline`, 'utf8') === 'sleep\u0000300\u0000';
      } catch {
        return false;
      }
    });
    assert.ok(sleeper, "the background job is in parley.service's cgroup");
    assert.notEqual(fs.readlinkSync(`/proc/${sleeper}/ns/pid`), daemonNs);
    const st = status(sleeper);
    assert.equal(st.Uid?.split('\t')[0], String(uid), 'the parley user on the host');
    assert.equal(st.CapEff, '0000000000000000');
    assert.equal(st.CapBnd, '0000000000000000');
    assert.equal(st.NoNewPrivs, '1');
    assert.equal(st.Seccomp, '2');
  });

  test('systemctl stop: SIGTERM reaches the daemon (KillMode=mixed), it exits 0, and no process is left', { timeout: 60_000 }, async () => {
    const before = c.pidsIn('system.slice/parley.service');
    assert.ok(before.length >= 2, `the daemon and its sandbox: ${before.join(' ')}`);
    const stopped = await systemctl('stop', 'parley');
    assert.equal(stopped.code, 0, stopped.out);
    // `systemctl stop` returns when the stop job is done: the cgroup is empty by then
    assert.deepEqual(c.pidsIn('system.slice/parley.service'), []);
    assert.deepEqual(before.filter(isAlive), [], 'every process of the service has ended');
    const show = (await systemctl('show', '-p', 'ActiveState', '-p', 'Result', '-p', 'ExecMainCode', '-p', 'ExecMainStatus', 'parley')).out;
    assert.match(show, /^ActiveState=inactive$/m, show);
    assert.match(show, /^Result=success$/m, show);
    assert.match(show, /^ExecMainStatus=0$/m, show);
    const journal = await c.journal('parley');
    assert.match(journal, /"signal":"SIGTERM".*"msg":"shutting down"/, journal);
    const ours = c.pidsIn('').filter((p) => {
      try {
        return status(p).Uid?.split('\t')[0] === String(uid);
      } catch {
        return false;
      }
    });
    assert.deepEqual(ours, [], 'no process of the parley user anywhere in the container');
  });

  test("why ProtectHostname=no: with ProtectHostname=yes systemd refuses sethostname() even in bwrap's own UTS namespace, and SANDBOX=bwrap exits 1", {
    timeout: 60_000,
  }, async () => {
    const dropIn = '/run/systemd/system/parley.service.d/protect-hostname.conf';
    const w = await c.exec([
      'sh',
      '-c',
      `mkdir -p ${dropIn.replace(/\/[^/]*$/, '')} && printf '[Service]\\nProtectHostname=yes\\n' > ${dropIn} && systemctl daemon-reload`,
    ]);
    assert.equal(w.code, 0, w.out);
    try {
      assert.equal((await systemctl('start', 'parley')).code, 0);
      const journal = String(
        await waitFor(
          async () => {
            const j = await c.journal('parley');
            return /bwrap probe failed/.test(j) ? j : null;
          },
          'the start to fail',
          45_000,
        ),
      );
      assert.match(journal, /^parley: SANDBOX=bwrap but the bwrap probe failed: bwrap: Can't set hostname to \S+: Operation not permitted/m, journal);
    } finally {
      await systemctl('stop', 'parley');
      await c.exec(['sh', '-c', `rm -f ${dropIn} && systemctl daemon-reload && systemctl reset-failed parley; true`]);
    }
    assert.deepEqual(c.pidsIn('system.slice/parley.service'), []);
  });
});
