/**
 * The processes that start, hold and serve a sandbox, attacked the way a prompt-injected agent would from
 * its shell in a real sandbox, and judged from the host's /proc: the daemon, its spawner and forker
 * (spawner-process.pl, spawner-forker.pl), the holder's supervising `sh` and bwrap, bwrap's init, the
 * file service, slirp4netns, and the joiner (nsenter, then the seccomp loader's parent, outside the
 * sandbox's pid namespace) that each joined process (the agent's shell among them) is the child of.
 *
 * The agent tries ptrace (attach, seize), pidfd_getfd of fds 0-20 (writing a marker through any it
 * gets), the helpers' /proc entries (environ, mem, fd, root…; every readable one searched for the
 * daemon's secrets) and SIGSTOP, then SIGSEGV and SIGKILL, on every pid it sees, on 1-500 and on the
 * helpers' host pids (handed to it). A decoy of its own is the control: what the kernel lets the agent
 * reach, the probe reaches and the host sees. Afterwards every helper is the same process (pid and
 * start time), not traced, not stopped, and the conversation still runs commands and edits files.
 *
 * Then two attacks through the join chain: the agent stops and resumes its own shell (its joiner,
 * outside the sandbox, must not stay stopped), and an agent that steps every new joined process with
 * SIGSTOP/SIGCONT writes into its memory through /proc/<pid>/mem once it has dropped its capabilities,
 * before it loads its seccomp filter (the filter it loads must still be the sandbox's).
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { ROOT_RUN } from './support/attack.js';
import { waitFor } from './support/daemon.js';
import { fdHolders } from './support/processes.js';
import { CANARIES, type Harness, harness, hostProcess, nsOf, pidsInNs, rev, sandboxTmp } from './support/sandbox-harness.js';

/**
 * The agent's attack (python3 in the sandbox): `attack.py PHASE MARKER HOSTPIDS REVERSED_CANARIES`. Every
 * pid it sees but its own ancestors, 1-500 and the host pids: ptrace attach and seize, pidfd_getfd of
 * fds 0-20, then SIGSTOP (`stop`), SIGSEGV and SIGKILL (`kill`) or none; for the pids it sees, first the
 * sensitive /proc entries and every readable one searched for the canaries. Prints one JSON line.
 */
const ATTACK = `
import ctypes, errno, json, os, signal, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
PTRACE = {'x86_64': 101, 'aarch64': 117}[os.uname().machine]
phase, marker = sys.argv[1], sys.argv[2].encode()
hosts, canaries = [int(p) for p in sys.argv[3].split(',')], [c[::-1].encode() for c in sys.argv[4].split(',')]
SENSITIVE = ('environ', 'mem', 'auxv', 'maps', 'stack', 'syscall', 'io', 'fd', 'fdinfo', 'map_files', 'root', 'cwd', 'exe')
def name(n): return errno.errorcode.get(n, str(n))
def parent(p): return int(open('/proc/%d/stat' % p).read().rsplit(')', 1)[1].split()[1])
own, p = set(), os.getpid()
while p > 0: own.add(p); p = parent(p)
leaks = []
def proc(pid, r):
    base = '/proc/%d/' % pid
    for f in SENSITIVE:
        try:
            if f in ('fd', 'fdinfo', 'map_files', 'root', 'cwd'): os.listdir(base + f)
            elif f == 'exe': os.readlink(base + f)
            else: os.close(os.open(base + f, os.O_RDONLY))
            r[f] = 'reached'
        except OSError as x: r[f] = name(x.errno)
    for f in os.listdir(base):
        try:
            with open(base + f, 'rb') as h: data = h.read(1 << 16)
        except OSError: continue
        leaks.extend(base + f for c in canaries if c in data)
    r['uid'] = [l.split()[1] for l in open(base + 'status') if l.startswith('Uid:')][0]
def attempt(pid, r):
    for req, key in ((16, 'attach'), (0x4206, 'seize')):
        if libc.syscall(PTRACE, req, pid, 0, 0) == 0: r[key] = 'reached'; libc.syscall(PTRACE, 17, pid, 0, 0)
        else: r[key] = name(ctypes.get_errno())
    pfd = libc.syscall(434, pid, 0)
    if pfd < 0: r['pidfd_getfd'] = 'pidfd_open ' + name(ctypes.get_errno())
    else:
        got, why = [], ''
        for n in range(21):
            fd = libc.syscall(438, pfd, n, 0)
            if fd < 0: why = name(ctypes.get_errno()); continue
            got.append(n)
            try: os.write(fd, marker)
            except OSError: pass
            os.close(fd)
        r['pidfd_getfd'] = 'reached %s' % got if got else why
        os.close(pfd)
    for s in {'stop': (signal.SIGSTOP,), 'kill': (signal.SIGSEGV, signal.SIGKILL)}.get(phase, ()):
        try: os.kill(pid, s); r[s.name] = 'reached'
        except OSError as x: r[s.name] = name(x.errno)
visible = {int(d) for d in os.listdir('/proc') if d.isdigit()}
out, hidden, targets = {}, [], sorted((visible | set(range(1, 501)) | set(hosts)) - own)
for pid in targets:
    r = {}
    if pid in visible:
        try: proc(pid, r)
        except OSError: pass
    attempt(pid, r)
    if pid in visible: out[pid] = r
    else: hidden.extend('%d %s %s' % (pid, k, v) for k, v in r.items() if v.startswith('reached'))
print('ATTACK ' + json.dumps({'visible': out, 'hidden_reached': hidden, 'tried': len(targets), 'leaks': leaks}))
`;

/**
 * The agent's stepper (python3 in the sandbox, in the background): every new joined process (the loader's
 * child, then the seccomp loader it execs) is stopped and resumed in a loop, so it advances a little at
 * a time; once it has dropped its capabilities and has no filter yet, its /proc/<pid>/mem is opened for
 * writing and the filter it is about to load (found by the hex on its command line, binary or not yet
 * decoded) gets "allow everything" as its first instruction. Logs one line per process.
 */
const STEPPER = String.raw`
import os, signal, sys
ALLOW = bytes.fromhex('060000000000ff7f')
log = open(sys.argv[1], 'a', buffering=1)
def patch(pid):
    args = open('/proc/%d/cmdline' % pid, 'rb').read().split(b'\0')
    hexarg = args[args.index(b'--') + 1][:48]
    m, n = os.open('/proc/%d/mem' % pid, os.O_RDWR), 0
    for line in open('/proc/%d/maps' % pid):
        f = line.split()
        a, b = (int(x, 16) for x in f[0].split('-'))
        if f[1][1] != 'w' or b - a > 64 << 20: continue
        try: mem = os.pread(m, b - a, a)
        except OSError: continue
        for needle, repl in ((bytes.fromhex(hexarg.decode()), ALLOW), (hexarg, ALLOW.hex().encode())):
            i = mem.find(needle)
            while i >= 0: os.pwrite(m, repl, a + i); n += 1; i = mem.find(needle, i + 1)
    os.close(m)
    return n
def step(pid):
    st, ss, steps = os.open('/proc/%d/stat' % pid, os.O_RDONLY), os.open('/proc/%d/status' % pid, os.O_RDONLY), 0
    try:
        while True:
            try: os.kill(pid, signal.SIGSTOP)
            except PermissionError: continue
            while os.pread(st, 512, 0).rsplit(b')', 1)[1][1:2] != b'T': pass
            s = dict(l.split(b':', 1) for l in os.pread(ss, 4096, 0).splitlines() if b':' in l)
            steps += 1
            if int(s[b'Seccomp']) != 0: return 'filtered %d' % steps
            if int(s[b'CapEff'], 16) == 0 and b'parley: seccomp' in open('/proc/%d/cmdline' % pid, 'rb').read():
                try: return 'patched %d' % patch(pid)
                except OSError as e: return 'refused ' + e.strerror
            os.kill(pid, signal.SIGCONT)
    except (OSError, IndexError, ValueError): return 'gone %d' % steps
    finally:
        os.close(st); os.close(ss)
        try: os.kill(pid, signal.SIGCONT)
        except OSError: pass
seen = set(os.listdir('/proc'))
log.write('ready\n')
while True:
    for d in os.listdir('/proc'):
        if d in seen or not d.isdigit(): continue
        try: cmd = open('/proc/%s/cmdline' % d, 'rb').read()
        except OSError: continue
        if b'parley: seccomp' in cmd: seen.add(d); log.write('%s %s\n' % (d, step(int(d))))
`;

const read = (p: string) => fs.readFileSync(p, 'utf8');
const status = (pid: number) => read(`/proc/${pid}/status`);
const field = (pid: number, key: string) => new RegExp(`^${key}:\\s*(.*)$`, 'm').exec(status(pid))?.[1] ?? '';
/** What `f` reads of a process, or `gone` when it has ended meanwhile (another test's processes come and go). */
const orGone = <T>(f: () => T, gone: T): T => {
  try {
    return f();
  } catch {
    return gone;
  }
};
const ppid = (pid: number) => orGone(() => Number(field(pid, 'PPid')), -1);
const cmdline = (pid: number) => orGone(() => read(`/proc/${pid}/cmdline`).replace(/\0/g, ' '), '');
/** Field 22 of /proc/<pid>/stat: with the pid, which process it is (a pid reused by another has another). */
const startTime = (pid: number) => read(`/proc/${pid}/stat`).split(') ')[1]!.split(' ')[19]!;
const hostPids = () =>
  fs
    .readdirSync('/proc')
    .filter((d) => /^\d+$/.test(d))
    .map(Number);
/** The host pid of the process that is `inner` in the pid namespace `ns`. */
const hostPidOf = (ns: string, inner: number) => pidsInNs(ns).find((p) => new RegExp(`^NSpid:\\s+\\d+\\s+${inner}$`, 'm').test(status(p)));
/** Its pid in the innermost namespace it is in. */
const innerPid = (pid: number) => Number(field(pid, 'NSpid').split(/\s+/).pop());
const childOf = (parent: number, marker: string) => hostPids().find((p) => ppid(p) === parent && cmdline(p).includes(marker));

type Attack = { visible: Record<string, Record<string, string>>; hidden_reached: string[]; tried: number; leaks: string[] };
function attackResult(text: string): Attack {
  const line = text.split('\n').find((l) => l.startsWith('ATTACK '));
  assert.ok(line, `the attack answered: ${text.slice(0, 3000)}`);
  return JSON.parse(line!.slice(7));
}

describe("the sandbox's helpers are out of the agent's reach", {
  skip: !ROOT_RUN && 'needs root: a sandbox whose file service has a uid of its own (a daemon that is not root: sandbox-unit.test.ts)',
  timeout: 900_000,
}, () => {
  let h: Harness;
  let id: string;
  let ns: string;
  /** name → host pid and start time, found once the conversation's sandbox runs. */
  const helpers = new Map<string, { pid: number; start: string }>();
  let decoy: number;
  /** The decoy's pid inside the sandbox. */
  let decoyInner: string;
  const marker = `PIDFD-MARKER-${process.pid}`;
  /** In the decoy's environment: the control of the search for secrets. */
  const DECOY_SECRET = `decoy-secret-${process.pid}`;

  /** What is wrong with each helper now: gone, another process, stopped, traced (empty: nothing). */
  function damaged(): string[] {
    const out: string[] = [];
    for (const [name, { pid, start }] of helpers) {
      try {
        if (startTime(pid) !== start) out.push(`${name} (${pid}) is another process`);
        const state = field(pid, 'State');
        if (/^[TtZX]/.test(state)) out.push(`${name} (${pid}) is ${state}`);
        if (field(pid, 'TracerPid') !== '0') out.push(`${name} (${pid}) is traced by ${field(pid, 'TracerPid')}`);
      } catch {
        out.push(`${name} (${pid}) is gone`);
      }
    }
    return out;
  }

  /** The conversation still runs a command, and its file service edits and serves a file. */
  async function stillWorks(word: string): Promise<void> {
    assert.match((await h.sh(id, 'echo works-$((6*7))')).text, /works-42/);
    const edited = await h.run(id, [{ name: 'file_editor', arguments: { command: 'create', path: '/workspace/served.txt', file_text: `${word}\n` } }]);
    assert.ok(!edited[0]?.is_error, JSON.stringify(edited));
    const down = await h.req('GET', `/api/file/download?conversation_id=${id}&path=${encodeURIComponent('/workspace/served.txt')}`);
    assert.equal(down.status, 200, down.text);
    assert.equal(down.text, `${word}\n`);
    assert.equal((await h.req('GET', '/alive')).status, 200);
  }

  before(async () => {
    h = await harness();
    id = await h.create();
    const tag = `4242${process.pid % 1000}`;
    const b64 = Buffer.from(ATTACK).toString('base64');
    const r = await h.sh(
      id,
      `echo ${b64} | base64 -d > /tmp/attack.py && (DECOY_SECRET=${DECOY_SECRET} sleep ${tag} </dev/null >/dev/null 2>&1 &) && echo written`,
    );
    assert.match(r.text, /written/);
    decoy = await hostProcess(`sleep ${tag}`);
    ns = nsOf(decoy)!;
    decoyInner = String(innerPid(decoy));
    const daemon = h.d.proc.pid!;
    const spawner = childOf(daemon, 'spawner-process.pl')!;
    const forker = childOf(spawner, 'spawner-forker.pl')!;
    const init = hostPidOf(ns, 1)!;
    const service = hostPidOf(ns, 2)!;
    const shell = pidsInNs(ns).find((p) => cmdline(p).startsWith('bash ') && ppid(p) !== init)!;
    const slirp = hostPids().find((p) => ppid(p) === forker && cmdline(p).includes('slirp4netns') && nsOf(p, 'user') === nsOf(service, 'user'))!;
    const found = { daemon, spawner, forker, supervisor: ppid(ppid(init)), bwrap: ppid(init), init, service, slirp4netns: slirp, joiner: ppid(shell) };
    for (const [name, pid] of Object.entries(found)) {
      assert.ok(pid > 0, `the ${name} was found: ${JSON.stringify(found)}`);
      helpers.set(name, { pid, start: startTime(pid) });
    }
    assert.equal(ppid(found.supervisor), forker, "the holder's supervisor is the forker's child");
    assert.match(cmdline(found.joiner), /parley: seccomp/, 'the shell is the child of the seccomp loader that forked it');
  });
  after(async () => {
    await h?.close();
  });

  const pid = (name: string) => helpers.get(name)!.pid;
  /** The attack run by the agent in its shell: the helpers' host pids handed to it, the canaries reversed (no redaction). */
  const attack = async (phase: string) => {
    const canaries = [...CANARIES, DECOY_SECRET].map(rev).join(',');
    const hosts = [...helpers.values()].map((x) => x.pid).join(',');
    return attackResult((await h.sh(id, `python3 /tmp/attack.py ${phase} ${marker} ${hosts} ${canaries} 2>&1`, 300)).text);
  };

  test("only bwrap's init, the file service and the agent's own processes are in the sandbox's pid namespace", () => {
    for (const name of ['daemon', 'spawner', 'forker', 'supervisor', 'bwrap', 'slirp4netns', 'joiner']) {
      assert.notEqual(nsOf(pid(name)), ns, `the ${name} is outside the sandbox's pid namespace: no pid inside names it`);
    }
    for (const p of pidsInNs(ns)) {
      if (p === pid('init') || p === pid('service')) continue;
      assert.match(status(p), /^Uid:\s+65533\s+65533\s+65533\s+65533$/m, `${p} (${cmdline(p)}) is the agent's`);
    }
    assert.match(status(pid('service')), /^Uid:\s+65532\s+65533\s+65532\s+65533$/m);
    assert.match(status(pid('slirp4netns')), /^Uid:\s+65533\s+65533\s+65533\s+65533$/m, 'slirp4netns runs as the sandbox uid');
    assert.notEqual(nsOf(pid('slirp4netns'), 'user'), nsOf(pid('daemon'), 'user'), "its capabilities are the sandbox's user namespace's");
    assert.deepEqual(damaged(), []);
  });

  test('SIGSTOP, ptrace and pidfd_getfd on every pid it sees, on 1-500 and on the helpers: none reached, the decoy stopped', async () => {
    const r = await attack('stop');
    assert.ok(r.tried >= 500, `${r.tried} pids tried`);
    assert.deepEqual(r.hidden_reached, [], 'no pid the sandbox does not show was reached');
    for (const inner of ['1', '2']) {
      const got = r.visible[inner]!;
      for (const [k, v] of Object.entries(got)) if (k !== 'uid') assert.ok(!v.startsWith('reached'), `${k} on pid ${inner}: ${JSON.stringify(got)}`);
    }
    // the control: the agent's own process is reached where the kernel allows, refused by the filter where not
    const own = r.visible[decoyInner]!;
    assert.ok(own, `the decoy was seen: ${JSON.stringify(Object.keys(r.visible))}`);
    assert.equal(own.SIGSTOP, 'reached', JSON.stringify(own));
    assert.equal(own.environ, 'reached', JSON.stringify(own));
    for (const k of ['attach', 'seize', 'pidfd_getfd']) assert.equal(own[k], 'EPERM', `${k} on its own process: ${JSON.stringify(own)}`);
    for (const [inner, got] of Object.entries(r.visible)) {
      if (inner !== '1' && inner !== '2') assert.equal(got.uid, '0', `only the agent's own processes are reached: ${inner} ${JSON.stringify(got)}`);
    }
    // judged from the host: the decoy is stopped, every helper runs as before
    await waitFor(() => /^T/.test(field(decoy, 'State')), 'the decoy stopped');
    assert.deepEqual(damaged(), []);
    assert.ok(!h.d.output.join('\n').includes(marker), "no marker reached the daemon's output");
  });

  test("no helper's environ, mem, fds or root is readable, and no /proc entry the agent reads holds the daemon's secrets", async () => {
    const r = await attack('none');
    for (const inner of ['1', '2']) {
      for (const k of ['environ', 'mem', 'auxv', 'maps', 'stack', 'syscall', 'io', 'fd', 'fdinfo', 'map_files', 'root', 'cwd', 'exe']) {
        assert.match(r.visible[inner]![k]!, /^E/, `/proc/${inner}/${k}: ${JSON.stringify(r.visible[inner])}`);
      }
    }
    // the control: the decoy's environment is the agent's to read, and the search finds its secret there
    assert.deepEqual(r.leaks, [`/proc/${decoyInner}/environ`], "no /proc entry the agent can read holds the daemon's secrets");
    assert.deepEqual(damaged(), []);
  });

  test('SIGSEGV and SIGKILL on the same pids: every helper lives on, the decoy is gone, the conversation still works', async () => {
    const r = await attack('kill');
    assert.deepEqual(r.hidden_reached, []);
    for (const inner of ['1', '2']) for (const k of ['SIGSEGV', 'SIGKILL']) assert.equal(r.visible[inner]![k], 'EPERM', `${k} on pid ${inner}`);
    assert.equal(r.visible[decoyInner]?.SIGKILL, 'reached', 'the control: its own process was killed');
    await waitFor(() => orGone(() => /^[ZX]/.test(field(decoy, 'State')), true), 'the decoy gone');
    assert.deepEqual(damaged(), []);
    await stillWorks('edited after the signals');
    assert.equal(hostPidOf(ns, 2), pid('service'), 'the same file service served it');
    assert.deepEqual(damaged(), []);
  });

  test("the agent's shell holds its stdio only, shared with no process outside the sandbox but the daemon", () => {
    const shell = pidsInNs(ns).find((p) => ppid(p) === pid('joiner'))!;
    assert.ok(shell, 'the shell is the child of its joiner');
    const links = new Map(fs.readdirSync(`/proc/${shell}/fd`).map((fd) => [Number(fd), fs.readlinkSync(`/proc/${shell}/fd/${fd}`)]));
    const shown = JSON.stringify([...links]);
    assert.deepEqual(
      [...links.keys()].sort((a, b) => a - b),
      [0, 1, 2, 63, 255],
      `stdio, the output copy (63) and bash's own (255): ${shown}`,
    );
    for (const l of links.values()) assert.match(l, /^(socket|pipe):\[\d+\]$/, shown);
    assert.equal(links.get(63), links.get(1), shown);
    assert.equal(links.get(255), links.get(2), shown);
    // (its joiner closed its own copies once it forked it)
    const allowed = new Set([pid('daemon'), ...pidsInNs(ns)]);
    const outside = fdHolders(...new Set(links.values())).filter((h) => !allowed.has(Number(h.split(' ')[0])));
    assert.deepEqual(outside, [], "no other process holds the shell's stdio");
  });

  test('the agent stops and resumes its own shell: its joiner on the host is not left stopped', async () => {
    const joiner = pid('joiner');
    const r = await h.sh(id, `sh -c 'kill -STOP $1; sleep 0.5; kill -CONT $1' _ $$; echo resumed`);
    assert.match(r.text, /resumed/);
    try {
      const running = () => (/^T/.test(field(joiner, 'State')) ? '' : field(joiner, 'State'));
      const state = await waitFor(running, 'the joiner running', 5000).catch(() => field(joiner, 'State'));
      // util-linux nsenter mirrors its child's stop onto itself and resumes only when continued: nothing outside
      // the sandbox continues it, and while it is stopped the daemon never sees the shell's exit
      assert.doesNotMatch(state, /^T/, `the joiner (host pid ${joiner}), the agent's shell's parent, is left ${state}`);
    } finally {
      process.kill(joiner, 'SIGCONT');
    }
    assert.deepEqual(damaged(), []);
  });

  test('an agent stepping every new joined process cannot rewrite the seccomp filter it is about to load', { timeout: 600_000 }, async () => {
    const b64 = Buffer.from(STEPPER).toString('base64');
    const tmp = sandboxTmp(h.d.dataDir, id);
    const log = path.join(tmp, 'stepper.log');
    const started = await h.sh(id, `echo ${b64} | base64 -d > /tmp/stepper.py && (python3 /tmp/stepper.py /tmp/stepper.log </dev/null >/dev/null 2>&1 &)`);
    assert.equal(started.exit, 0, started.text);
    await waitFor(() => fs.existsSync(log) && read(log).includes('ready'), 'the stepper runs', 30_000);
    // kcmp on itself: 0 where the kernel alone decides, EPERM under the sandbox's filter
    const probe = (i: number) =>
      `python3 -c 'import ctypes, os; l = ctypes.CDLL(None, use_errno=True); ` +
      `print("KCMP", l.syscall(312 if os.uname().machine == "x86_64" else 272, os.getpid(), os.getpid(), 0, 0, 0), ctypes.get_errno())' > /tmp/kcmp-${i}.txt`;
    // each try is a joined process the daemon starts. Idle, a try is stepped finely and the agent reaches the
    // window (no capability left, no filter yet) in one try of 4 to 80; with every core busy a try is cheap and
    // coarse, one of 50 to 200: so tries until it has reached it REACHED times (or a filter was rewritten), from
    // 30 up to 600 within the budget
    const [MIN_TRIES, MAX_TRIES, BUDGET_MS, REACHED] = [30, 600, 300_000, 10];
    const unfiltered: string[] = [];
    const unanswered: string[] = [];
    const outcomes = () =>
      read(log)
        .trim()
        .split('\n')
        .slice(1)
        .map((l) => l.split(' ')[1]!);
    const t0 = Date.now();
    let tries = 0;
    const more = () =>
      unfiltered.length === 0 &&
      tries < MAX_TRIES &&
      (tries < MIN_TRIES || (Date.now() - t0 < BUDGET_MS && outcomes().filter((o) => o !== 'filtered' && o !== 'gone').length < REACHED));
    // one joined process at a time (the stepper takes them in turn), until one runs unfiltered; each is ended at
    // its timeout, so they do not fill the sandbox's pids limit
    for (; more(); tries++) {
      const s = await h.req('POST', '/api/bash/start_bash_command', { command: probe(tries), conversation_id: id, timeout: 30 });
      assert.equal(s.status, 200, s.text);
      const answer = path.join(tmp, `kcmp-${tries}.txt`);
      const text = await waitFor(() => (fs.existsSync(answer) ? read(answer).trim() : ''), `probe ${tries} answered`, 90_000).catch(() => 'no answer');
      if (/^KCMP 0 /.test(text)) unfiltered.push(`try ${tries}: ${text}`);
      else if (text !== 'KCMP -1 1') unanswered.push(`try ${tries}: ${text}`);
    }
    const seen = outcomes();
    const counts = Object.fromEntries([...new Set(seen)].map((o) => [o, seen.filter((x) => x === o).length]));
    assert.deepEqual(
      unfiltered,
      [],
      `${tries} joined processes, stepped by the agent (${JSON.stringify(counts)}): a filter rewritten through /proc/<pid>/mem was loaded`,
    );
    assert.deepEqual(unanswered, [], 'every probe ran and answered');
    assert.ok(tries >= MIN_TRIES, `${tries} tries made`);
    // the control: the agent did reach processes in the window, and their memory was refused to it
    assert.ok((counts.refused ?? 0) >= 1, `the stepper reached the window in ${tries} tries: ${JSON.stringify(counts)}`);
  });
});
