/**
 * What the egress tests need and nothing on the machine shares (root only):
 *
 * - `createTestNet(uid)`: "the world", a network namespace of the test's own joined to the host by a
 *   veth pair, holding a public-looking address (198.18.N.2, from the benchmarking range) and
 *   addresses the sandbox must NOT reach (169.254.169.254, 10.x, 172.16.x, 192.168.x, 100.64.x, a
 *   ULA), each with TCP and UDP servers that log who connected; also the host's IPv4 resolvers, each
 *   answered by a DNS server there. The routes to it are in a table of the test's own that only
 *   `uid` uses (ip rule uidrange): slirp4netns runs as that uid, so its sockets go there, while
 *   every other process of the machine (the metadata address included) is routed as before.
 *   Nothing leaves the machine.
 * - `startSandbox(uid)`: a sandbox built the way the launcher builds one — an unprivileged bwrap
 *   holder (user, pid, net, ipc, uts namespaces, uid 0 inside mapped to `uid`) started under
 *   setpriv as `uid` — and a way to run the agent's processes in it: nsenter into its namespaces as
 *   `uid`, then setpriv with no_new_privs and every capability dropped.
 *
 * Everything is removed by `remove()`/`close()`, by an exit hook when the test process ends early,
 * and by the next run's sweep when it was killed (netns names carry the pid and the route table).
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const NET_PROBE = fileURLToPath(new URL('./net-probe.mjs', import.meta.url));
/** Where a test sandbox (startSandbox) sees the probe: a copy any uid can read, under its own /tmp. */
export const PROBE_INSIDE = '/tmp/net-probe.mjs';
const NAME_PREFIX = 'parley-egress-';
/** The ports every server of the world listens on. */
export const WORLD_PORTS = [7001, 7002] as const;

export interface ProbeResult {
  ok: boolean;
  banner?: string;
  code?: string;
}

export interface ProbeAttempt {
  id: string;
  kind: 'tcp' | 'udp' | 'dns';
  host?: string;
  port?: number;
  name?: string;
}

export interface Seen {
  proto: 'tcp' | 'udp' | 'dns';
  local: string;
  remote: string;
}

export interface TestNet {
  name: string;
  /** The host's end of the veth: what the world sees a connection of the host come from. */
  hostSide: string;
  /** Public-looking addresses (the sandbox reaches them through egress). */
  public: string;
  public6: string;
  /** Addresses in ranges the sandbox must not reach; the world answers on them too. */
  blocked: { metadata: string; ten: string; oneSevenTwo: string; oneNineTwo: string; cgnat: string; ula: string };
  /** The host's IPv4 resolvers (from /etc/resolv.conf, not loopback), answered here for `uid`. */
  resolvers: string[];
  /** What the world's DNS servers answer to every A query. */
  dnsAnswer: string;
  /** Every connection and datagram the world's servers saw, in order. */
  seen: Seen[];
  remove(): Promise<void>;
}

function ip(args: string[]): void {
  const r = spawnSync('ip', args, { encoding: 'utf8', timeout: 10_000 });
  if (r.status !== 0) throw new Error(`ip ${args.join(' ')}: ${(r.stderr || r.error?.message || '').trim()}`);
}

function ipQuiet(args: string[]): void {
  spawnSync('ip', args, { stdio: 'ignore', timeout: 10_000 });
}

/** Removes what a run with route table `table` and namespace `name` left (each step may find nothing). */
function removeTestNet(name: string, table: number): void {
  ipQuiet(['rule', 'del', 'pref', String(table)]);
  ipQuiet(['-6', 'rule', 'del', 'pref', String(table)]);
  ipQuiet(['route', 'flush', 'table', String(table)]);
  ipQuiet(['-6', 'route', 'flush', 'table', String(table)]);
  // the host's end of the veth goes with its peer
  ipQuiet(['netns', 'del', name]);
  ipQuiet(['link', 'del', hostIface(table)]);
}

function hostIface(table: number): string {
  return `pe${table}h`;
}

/** What runs of this test killed before their cleanup left behind. */
function sweepStale(): void {
  for (const line of spawnSync('ip', ['netns', 'list'], { encoding: 'utf8' }).stdout?.split('\n') ?? []) {
    const m = new RegExp(`^(${NAME_PREFIX}(\\d+)-(\\d+))\\b`).exec(line);
    if (!m) continue;
    const pid = Number(m[2]);
    if (pid !== process.pid && !fs.existsSync(`/proc/${pid}`)) removeTestNet(m[1]!, Number(m[3]));
  }
}

function resolvConfServers(): string[] {
  try {
    return fs
      .readFileSync('/etc/resolv.conf', 'utf8')
      .split('\n')
      .map((l) => /^\s*nameserver\s+(\d+\.\d+\.\d+\.\d+)\s*$/.exec(l)?.[1])
      .filter((a): a is string => !!a && !a.startsWith('127.'));
  } catch {
    return [];
  }
}

export async function createTestNet(uid: number): Promise<TestNet> {
  sweepStale();
  const table = 20000 + Math.floor(Math.random() * 10000);
  const n = 1 + Math.floor(Math.random() * 254);
  const name = `${NAME_PREFIX}${process.pid}-${table}`;
  const hostIf = hostIface(table);
  const worldIf = `pe${table}w`;
  const net: Omit<TestNet, 'seen' | 'remove'> = {
    name,
    hostSide: `198.18.${n}.1`,
    public: `198.18.${n}.2`,
    public6: `2001:db8:213:${n}::2`,
    blocked: {
      metadata: '169.254.169.254',
      ten: `10.213.${n}.7`,
      oneSevenTwo: `172.31.${n}.7`,
      oneNineTwo: `192.168.${n}.7`,
      cgnat: `100.64.${n}.7`,
      ula: `fd99:213:${n}::7`,
    },
    resolvers: resolvConfServers(),
    dnsAnswer: `198.18.${n}.2`,
  };
  let removed = false;
  const cleanup = () => {
    if (removed) return;
    removed = true;
    removeTestNet(name, table);
  };
  process.once('exit', cleanup);
  let world: ChildProcess | null = null;
  try {
    ip(['netns', 'add', name]);
    ip(['link', 'add', hostIf, 'type', 'veth', 'peer', 'name', worldIf, 'netns', name]);
    // no prefix route in the main table: only `uid` is routed to the world
    ip(['addr', 'add', `${net.hostSide}/24`, 'dev', hostIf, 'noprefixroute']);
    ip(['-6', 'addr', 'add', `2001:db8:213:${n}::1/64`, 'dev', hostIf, 'nodad', 'noprefixroute']);
    ip(['link', 'set', hostIf, 'up']);
    const inWorld = (args: string[]) => ip(['-n', name, ...args]);
    inWorld(['link', 'set', 'lo', 'up']);
    inWorld(['link', 'set', worldIf, 'up']);
    inWorld(['addr', 'add', `${net.public}/24`, 'dev', worldIf]);
    inWorld(['-6', 'addr', 'add', `${net.public6}/64`, 'dev', worldIf, 'nodad']);
    const extra4 = [net.blocked.metadata, net.blocked.ten, net.blocked.oneSevenTwo, net.blocked.oneNineTwo, net.blocked.cgnat, ...net.resolvers];
    for (const a of extra4) inWorld(['addr', 'add', `${a}/32`, 'dev', 'lo']);
    inWorld(['-6', 'addr', 'add', `${net.blocked.ula}/128`, 'dev', 'lo', 'nodad']);
    inWorld(['route', 'add', 'default', 'via', net.hostSide]);
    inWorld(['-6', 'route', 'add', 'default', 'via', `2001:db8:213:${n}::1`]);
    const t = String(table);
    ip(['route', 'add', `198.18.${n}.0/24`, 'dev', hostIf, 'src', net.hostSide, 'table', t]);
    for (const a of extra4) ip(['route', 'add', `${a}/32`, 'via', net.public, 'dev', hostIf, 'src', net.hostSide, 'table', t]);
    ip(['-6', 'route', 'add', `2001:db8:213:${n}::/64`, 'dev', hostIf, 'table', t]);
    ip(['-6', 'route', 'add', `${net.blocked.ula}/128`, 'via', net.public6, 'dev', hostIf, 'table', t]);
    ip(['rule', 'add', 'pref', t, 'uidrange', `${uid}-${uid}`, 'lookup', t]);
    ip(['-6', 'rule', 'add', 'pref', t, 'uidrange', `${uid}-${uid}`, 'lookup', t]);

    const v4 = [net.public, net.blocked.metadata, net.blocked.ten, net.blocked.oneSevenTwo, net.blocked.oneNineTwo, net.blocked.cgnat];
    const v6 = [net.public6, net.blocked.ula];
    const config = {
      tcp: [...v4, ...v6].flatMap((h) => WORLD_PORTS.map((p) => [h, p])),
      udp: [...v4, ...v6].flatMap((h) => WORLD_PORTS.map((p) => [h, p])),
      dns: { hosts: net.resolvers, answer: net.dnsAnswer },
    };
    world = spawn('ip', ['netns', 'exec', name, process.execPath, NET_PROBE, 'world', JSON.stringify(config)], {
      stdio: ['pipe', 'pipe', 'pipe'],
      env: { PATH: process.env.PATH ?? '/usr/sbin:/usr/bin:/sbin:/bin' },
    });
    const seen: Seen[] = [];
    let stderr = '';
    world.stderr!.on('data', (d: Buffer) => (stderr += d.toString('utf8')));
    await new Promise<void>((resolve, reject) => {
      let buf = '';
      const timer = setTimeout(() => reject(new Error(`the world's servers did not start: ${stderr.trim()}`)), 20_000);
      world!.stdout!.on('data', (d: Buffer) => {
        buf += d.toString('utf8');
        let i: number;
        while ((i = buf.indexOf('\n')) >= 0) {
          const line = buf.slice(0, i);
          buf = buf.slice(i + 1);
          if (line === 'listening') {
            clearTimeout(timer);
            resolve();
          } else if (line.startsWith('{')) seen.push(JSON.parse(line) as Seen);
        }
      });
      world!.once('exit', (code) => {
        clearTimeout(timer);
        reject(new Error(`the world's servers exited (${code}): ${stderr.trim()}`));
      });
    });
    const w = world;
    return {
      ...net,
      seen,
      remove: async () => {
        w.stdin!.end();
        if (w.exitCode === null && w.signalCode === null) {
          const exited = new Promise((r) => w.once('exit', r));
          w.kill('SIGKILL');
          await exited;
        }
        cleanup();
        process.removeListener('exit', cleanup);
      },
    };
  } catch (e) {
    world?.kill('SIGKILL');
    cleanup();
    process.removeListener('exit', cleanup);
    throw e;
  }
}

/** Whether the namespace, the veth or the rule of `net` is still on the machine. */
export function testNetLeft(net: TestNet): string[] {
  const left: string[] = [];
  if (spawnSync('ip', ['netns', 'list'], { encoding: 'utf8' }).stdout.includes(net.name)) left.push(`netns ${net.name}`);
  const table = net.name.split('-').pop()!;
  if (spawnSync('ip', ['link', 'show', hostIface(Number(table))], { stdio: 'ignore' }).status === 0) left.push(`link ${hostIface(Number(table))}`);
  for (const v of ['-4', '-6'])
    if (spawnSync('ip', [v, 'rule', 'show', 'pref', table], { encoding: 'utf8' }).stdout.trim()) left.push(`ip ${v} rule pref ${table}`);
  return left;
}

// ------------------------------------------------------------------ sandboxes

export interface RunResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

export interface TestSandbox {
  /** Host pid of the sandbox's init (bwrap's pid 1). */
  init: number;
  userns: string;
  netns: string;
  /** Starts `argv` as the agent's processes run: joined to the sandbox as its uid, no capability, no_new_privs. */
  spawn(argv: string[]): ChildProcess;
  run(argv: string[], timeoutMs?: number): Promise<RunResult>;
  /** Runs the probes from inside the sandbox. */
  probe(attempts: ProbeAttempt[]): Promise<Record<string, ProbeResult>>;
  /** Runs `argv` as the root of the sandbox's user namespace in its network namespace (what the daemon's filter step is). */
  admin(argv: string[]): Promise<RunResult>;
  close(): Promise<void>;
}

const DROP_ALL = ['setpriv', '--no-new-privs', '--inh-caps=-all', '--ambient-caps=-all', '--bounding-set=-all', '--'];

/** setpriv to `uid` in front of a command (nothing when it is this process's own). */
function asUid(uid: number): string[] {
  return uid === process.getuid?.() ? [] : ['setpriv', '--reuid', String(uid), '--regid', String(uid), '--clear-groups', '--'];
}

export function collect(child: ChildProcess, timeoutMs = 30_000): Promise<RunResult> {
  return new Promise((resolve) => {
    let stdout = '';
    let stderr = '';
    child.stdout?.on('data', (d: Buffer) => (stdout += d.toString('utf8')));
    child.stderr?.on('data', (d: Buffer) => (stderr += d.toString('utf8')));
    const timer = setTimeout(() => {
      stderr += `\n(killed after ${timeoutMs} ms)`;
      if (child.pid) {
        try {
          process.kill(-child.pid, 'SIGKILL');
        } catch {
          child.kill('SIGKILL');
        }
      }
    }, timeoutMs);
    child.once('error', (e) => (stderr += e.message));
    child.once('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

/**
 * `uid`'s sandbox. `resolvConf`: the content bound over its /etc/resolv.conf (as the launcher
 * binds EGRESS_RESOLV_CONF).
 */
export async function startSandbox(uid: number, opts: { resolvConf?: string } = {}): Promise<TestSandbox> {
  let dir: string | null = null;
  const binds: string[] = [];
  if (opts.resolvConf !== undefined) {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'parley-egress-'));
    fs.chmodSync(dir, 0o755);
    fs.writeFileSync(path.join(dir, 'resolv.conf'), opts.resolvConf, { mode: 0o644 });
    binds.push('--ro-bind', path.join(dir, 'resolv.conf'), '/etc/resolv.conf');
  }
  // the probe where the sandbox's uid can read it (the checkout may be where it cannot: a 0700 mktemp directory, or under /tmp)
  binds.push('--ro-bind', readableProbe(), PROBE_INSIDE);
  const namespaces = '--unshare-user --uid 0 --gid 0 --unshare-pid --unshare-net --unshare-ipc --unshare-uts --die-with-parent --new-session --cap-drop ALL';
  const view = '--ro-bind / / --proc /proc --dev /dev --tmpfs /tmp';
  const argv = [...asUid(uid), 'bwrap', ...namespaces.split(' '), ...view.split(' '), ...binds, '--info-fd', '3', '--', '/bin/sh', '-c', 'echo; exec cat'];
  const holder = spawn(argv[0]!, argv.slice(1), {
    stdio: ['pipe', 'pipe', 'pipe', 'pipe'],
    cwd: '/',
    env: { PATH: process.env.PATH ?? '/usr/bin:/bin' },
    detached: true,
  });
  holder.stdin!.on('error', () => {});
  const removeDir = () => {
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  };
  let init = 0;
  try {
    init = await new Promise<number>((resolve, reject) => {
      let info = '';
      let stderr = '';
      let up = false;
      const check = () => {
        const m = /"child-pid":\s*(\d+)/.exec(info);
        if (m && up) resolve(Number(m[1]));
      };
      const timer = setTimeout(() => reject(new Error(`the sandbox did not start: ${stderr}`)), 20_000);
      (holder.stdio[3] as NodeJS.ReadableStream).on('data', (d: Buffer) => {
        info += d.toString('utf8');
        check();
      });
      holder.stdout!.once('data', () => {
        up = true;
        check();
      });
      holder.stderr!.on('data', (d: Buffer) => (stderr += d.toString('utf8')));
      holder.once('exit', (code) => {
        clearTimeout(timer);
        reject(new Error(`the sandbox exited (${code}): ${stderr.trim()}`));
      });
    });
  } catch (e) {
    if (holder.pid) process.kill(-holder.pid, 'SIGKILL');
    removeDir();
    throw e;
  }
  const ns = (kind: string) => `/proc/${init}/ns/${kind}`;
  const join = [
    'nsenter',
    '--preserve-credentials',
    `--user=${ns('user')}`,
    `--net=${ns('net')}`,
    `--pid=${ns('pid')}`,
    `--mount=${ns('mnt')}`,
    `--ipc=${ns('ipc')}`,
    `--uts=${ns('uts')}`,
    '--',
  ];
  const sbSpawn = (cmd: string[]) => {
    const full = [...asUid(uid), ...join, ...DROP_ALL, ...cmd];
    return spawn(full[0]!, full.slice(1), {
      stdio: ['pipe', 'pipe', 'pipe'],
      cwd: '/',
      env: { PATH: '/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin' },
      detached: true,
    });
  };
  const run = (cmd: string[], timeoutMs?: number) => {
    const c = sbSpawn(cmd);
    c.stdin!.end();
    return collect(c, timeoutMs);
  };
  return {
    init,
    userns: ns('user'),
    netns: ns('net'),
    spawn: sbSpawn,
    run,
    probe: async (attempts) => {
      const r = await run([process.execPath, PROBE_INSIDE, 'probe', JSON.stringify(attempts)]);
      if (r.code !== 0) throw new Error(`the probe failed in the sandbox (${r.code}): ${r.stderr.trim()}`);
      return JSON.parse(r.stdout) as Record<string, ProbeResult>;
    },
    admin: (cmd) => {
      const full = [...asUid(uid), 'nsenter', '--preserve-credentials', `--user=${ns('user')}`, `--net=${ns('net')}`, '--', ...cmd];
      const c = spawn(full[0]!, full.slice(1), { stdio: ['ignore', 'pipe', 'pipe'], cwd: '/', env: { PATH: '/usr/sbin:/usr/bin:/sbin:/bin' }, detached: true });
      return collect(c);
    },
    close: async () => {
      holder.stdin!.end();
      if (holder.exitCode === null && holder.signalCode === null) {
        const exited = new Promise((r) => holder.once('exit', r));
        try {
          process.kill(-holder.pid!, 'SIGKILL');
        } catch {
          /* gone */
        }
        await exited;
      }
      removeDir();
    },
  };
}

let probeCopy: string | null = null;
/**
 * The probe script where any uid can read it: the checkout may sit in a directory only its owner
 * can enter (a `mktemp -d`). One copy per test process, removed at exit.
 */
function readableProbe(): string {
  if (probeCopy) return probeCopy;
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'parley-net-probe-'));
  fs.chmodSync(dir, 0o755);
  const file = path.join(dir, 'net-probe.mjs');
  fs.copyFileSync(NET_PROBE, file);
  fs.chmodSync(file, 0o644);
  process.once('exit', () => fs.rmSync(dir, { recursive: true, force: true }));
  return (probeCopy = file);
}

/** Runs the probes on the host (no namespace) as `uid`: the path slirp4netns's sockets take. */
export async function probeFromHost(uid: number, attempts: ProbeAttempt[]): Promise<Record<string, ProbeResult>> {
  const argv = [...asUid(uid), process.execPath, readableProbe(), 'probe', JSON.stringify(attempts)];
  const c = spawn(argv[0]!, argv.slice(1), { stdio: ['ignore', 'pipe', 'pipe'], cwd: '/', env: { PATH: '/usr/bin:/bin' }, detached: true });
  const r = await collect(c);
  if (r.code !== 0) throw new Error(`the probe failed on the host (${r.code}): ${r.stderr.trim()}`);
  return JSON.parse(r.stdout) as Record<string, ProbeResult>;
}

/** Host processes running as `uid` (its real uid), with their command lines. */
export function processesOf(uid: number): { pid: number; cmd: string }[] {
  const out: { pid: number; cmd: string }[] = [];
  for (const d of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const status = fs.readFileSync(`/proc/${d}/status`, 'utf8');
      const real = /^Uid:\s+(\d+)/m.exec(status)?.[1];
      const state = /^State:\s+(\S)/m.exec(status)?.[1];
      if (Number(real) !== uid || state === 'Z') continue;
      out.push({ pid: Number(d), cmd: fs.readFileSync(`/proc/${d}/cmdline`, 'utf8').replace(/\0/g, ' ').trim() });
    } catch {
      /* gone */
    }
  }
  return out;
}
