/**
 * The processes the daemon relies on inside a sandbox — its file service (pid 2) and bwrap's init
 * (pid 1) — attacked the way a prompt-injected agent would, from inside a real sandbox, judged from
 * the host: ptrace attach, pidfd_getfd of the service's socket, process_vm_readv, /proc/<pid>/mem
 * for reading and writing, signals (0, SIGSTOP, SIGKILL), its fds and environment
 * (test/support/attack.ts REACH_PROBE). Each attempt is also made on a child of the agent's own, so
 * the probe is seen to reach a process where the kernel allows it. Two layers hold separately: the
 * seccomp filter every agent process runs under (ptrace, pidfd_getfd and process_vm_* refused
 * whatever the target), and the file service's other uid (the kernel's ptrace access rule and the
 * signal rule): the probe run in the sandbox without the filter (entered from the host) is still
 * refused on the service and init, and reaches its own child on every call.
 *
 * Also what the sandbox sees of the host: its PATH and environment are its own, its cgroup view
 * names neither the daemon nor the conversation.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import { after, before, describe, test } from 'node:test';
import { REACH_PROBE, ROOT_RUN, reachResult } from './support/attack.js';
import { type Harness, harness, hostProcess, nsOf, pidsInNs } from './support/sandbox-harness.js';

const ATTEMPTS = ['ptrace', 'pidfd_getfd', 'process_vm_readv', 'mem_read', 'mem_write', 'fd_link', 'environ', 'kill'];
/** What seccomp refuses whatever the target; the rest is the kernel's permission checks. */
const FILTERED = ['ptrace', 'pidfd_getfd', 'process_vm_readv'];

const status = (pid: number) => fs.readFileSync(`/proc/${pid}/status`, 'utf8');
/** The host pid of the process that is `inner` in the pid namespace `ns`. */
const hostPidOf = (ns: string, inner: number) => pidsInNs(ns).find((p) => new RegExp(`^NSpid:\\s+\\d+\\s+${inner}$`, 'm').test(status(p)));

describe("the sandbox's file service and init are out of the agent's reach", {
  skip: !ROOT_RUN && 'needs root: a sandbox whose file service has a uid of its own (a daemon that is not root: sandbox-unit.test.ts)',
  timeout: 170_000,
}, () => {
  let h: Harness;
  let id: string;
  let ns: string;
  let service: number;
  let init: number;
  before(async () => {
    h = await harness({ SANDBOX_NETWORK: 'none' });
    id = await h.create();
    const marker = `5151${process.pid % 1000}`;
    const b64 = Buffer.from(REACH_PROBE).toString('base64');
    const r = await h.sh(
      id,
      `echo ${b64} | base64 -d > /tmp/reach.py && echo served > /workspace/served.txt && (sleep ${marker} > /dev/null 2>&1 &) && echo written`,
    );
    assert.match(r.text, /written/);
    ns = nsOf(await hostProcess(`sleep ${marker}`))!;
    service = hostPidOf(ns, 2)!;
    init = hostPidOf(ns, 1)!;
    assert.ok(service && init, 'the sandbox has its init and file service');
    assert.match(fs.readFileSync(`/proc/${service}/cmdline`, 'utf8'), /file-service\.pl/);
  });
  after(async () => {
    await h?.close();
  });

  test("the file service: another real and saved uid than the agent, the agent's effective one; CAP_SETUID and CAP_SETGID only; no_new_privs; seccomp", () => {
    const s = status(service);
    assert.match(s, /^Uid:\s+65532\s+65533\s+65532\s+65533$/m, 'real and saved 65532 (SANDBOX_SERVICE_UID), effective and fs 65533 (the agent)');
    assert.match(s, /^Gid:\s+65532\s+65533\s+65532\s+65533$/m);
    assert.match(s, /^CapEff:\s+0+c0$/m);
    assert.match(s, /^CapBnd:\s+0+c0$/m);
    assert.match(s, /^NoNewPrivs:\s+1$/m);
    assert.match(s, /^Seccomp:\s+2$/m);
    assert.match(status(init), /^Seccomp:\s+2$/m, "bwrap's init runs under a filter too");
  });

  test('the file service holds its channel (stdin and stdout) and stderr only: not the namespaces it was started into', () => {
    const fds = fs
      .readdirSync(`/proc/${service}/fd`)
      .map(Number)
      .sort((a, b) => a - b);
    assert.deepEqual(fds, [0, 1, 2], fds.map((fd) => `${fd} ${fs.readlinkSync(`/proc/${service}/fd/${fd}`)}`).join(', '));
    assert.equal(fs.readlinkSync(`/proc/${service}/fd/0`), fs.readlinkSync(`/proc/${service}/fd/1`), 'one socket, both ways');
    assert.match(fs.readlinkSync(`/proc/${service}/fd/0`), /^socket:/);
  });

  test('every attempt on the file service and on init is refused; its own child is reached where the filter allows; nothing happened to either', async () => {
    const r = reachResult((await h.sh(id, 'python3 /tmp/reach.py --hard 2 1 2>&1')).text);
    for (const target of ['2', '1']) {
      for (const a of [...ATTEMPTS, 'stopped', 'killed']) assert.notEqual(r[target]![a], 'reached', `${a} on pid ${target}: ${JSON.stringify(r[target])}`);
    }
    // the control: the filter refuses the debugger's calls on any process, the kernel allows the rest on its own
    for (const a of FILTERED) assert.equal(r.own![a], 'EPERM', `${a} on its own child: ${JSON.stringify(r.own)}`);
    for (const a of ATTEMPTS.filter((x) => !FILTERED.includes(x))) assert.equal(r.own![a], 'reached', `${a} on its own child: ${JSON.stringify(r.own)}`);
    // judged from the host: both still run, not stopped; the daemon and the file service answer
    for (const p of [service, init]) assert.match(status(p), /^State:\s+[SR]/m, `pid ${p} runs`);
    assert.equal((await h.req('GET', '/alive')).status, 200);
    const down = await h.req('GET', `/api/file/download?conversation_id=${id}&path=${encodeURIComponent('/workspace/served.txt')}`);
    assert.equal(down.status, 200, down.text);
    assert.equal(down.text, 'served\n');
    assert.equal(hostPidOf(ns, 2), service, 'the same file service served it');
  });

  test('no seccomp (probe entered from host as the agent): the uid rule alone refuses all attempts on service and init; its own child always reached', () => {
    const agent = pidsInNs(ns).find((p) => /^Uid:\s+65533\s+65533/m.test(status(p)) && /bash/.test(fs.readFileSync(`/proc/${p}/cmdline`, 'utf8')))!;
    assert.ok(agent, "an agent's process to enter by");
    const drop = ['--no-new-privs', '--inh-caps=-all', '--ambient-caps=-all', '--bounding-set=-all'];
    const p = spawnSync(
      'nsenter',
      ['-t', String(agent), '-U', '-p', '-m', '-i', '-u', '-n', '-r', '-w', '--', 'setpriv', ...drop, '--', 'python3', '/tmp/reach.py', '--hard', '2', '1'],
      {
        encoding: 'utf8',
        env: { PATH: '/usr/bin:/bin' },
        timeout: 60_000,
      },
    );
    const r = reachResult(p.stdout + p.stderr);
    for (const target of ['2', '1']) {
      for (const a of [...ATTEMPTS, 'stopped', 'killed'])
        assert.notEqual(r[target]![a], 'reached', `${a} on pid ${target} (no filter): ${JSON.stringify(r[target])}`);
    }
    for (const a of ATTEMPTS) assert.equal(r.own![a], 'reached', `${a} on its own child (no filter): ${JSON.stringify(r.own)}`);
    assert.match(status(service), /^State:\s+[SR]/m);
  });

  test("the sandbox's view names nothing of the host: PATH and environment are its own, its cgroup view names neither daemon nor conversation", async () => {
    const r = await h.sh(id, 'echo "PATH=$PATH"; env; echo ---; cat /proc/self/cgroup; echo ---; cat /proc/2/cgroup 2>&1');
    assert.match(r.text, /^PATH=\/usr\/local\/sbin:\/usr\/local\/bin:\/usr\/sbin:\/usr\/bin:\/sbin:\/bin$/m);
    const hex = id.replace(/-/g, '');
    for (const hostName of ['node_modules', '/root', 'pyenv', 'cargo', h.d.dataDir, String(h.d.proc.pid), hex, id]) {
      assert.ok(!r.text.includes(hostName), `the sandbox's view names ${hostName}:\n${r.text}`);
    }
    const cgroups = r.text.split('---')[1]!.trim().split('\n');
    assert.ok(
      cgroups.length > 0 && cgroups.every((l) => /^\d+:[^:]*:\/$/.test(l)),
      `every hierarchy's view is rooted at the sandbox's cgroup:\n${cgroups.join('\n')}`,
    );
    // judged from the host: the sandbox's cgroup is not the daemon's, and bwrap's init is in it
    const own = fs.readFileSync(`/proc/${init}/cgroup`, 'utf8');
    assert.notEqual(own, fs.readFileSync(`/proc/${h.d.proc.pid}/cgroup`, 'utf8'));
  });
});
