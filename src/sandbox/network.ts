/**
 * Egress for a sandbox's own network namespace (SANDBOX_NETWORK=egress): the agent reaches the
 * internet, never the host.
 *
 * The tool is slirp4netns, not pasta. Both turn the namespace's packets into ordinary sockets of a
 * host process, so both can reach whatever that process can; what decides is which one can be
 * pinned to never reach the host, with the versions Debian bookworm ships (slirp4netns 1.2.0,
 * passt 0.0~git20230309):
 * - slirp4netns has one way to the host's loopback (its gateway 10.0.2.2), closed by
 *   --disable-host-loopback. pasta has two (the gateway mapping, and the "spliced" path from the
 *   namespace's own loopback, -T/-U, default `auto` in that version) and, by default, forwards
 *   every port bound in the namespace to the host's addresses (-t/-u auto): the agent's servers
 *   would be published on the host's network. Each can be pinned off, but its defaults have changed
 *   between versions, and a missed one opens the host.
 * - slirp4netns's addresses are fixed (10.0.2.0/24: gateway .2, DNS forwarder .3, namespace .100);
 *   pasta copies the host's addresses and routes into the namespace (the agent learns them, and
 *   the host's own address looks local). A fixed network makes the filter below a fixed list.
 * - slirp4netns confines itself: --enable-sandbox (its own mount namespace with only /etc and /run,
 *   read-only; every capability dropped but CAP_NET_BIND_SERVICE, and that only in the sandbox's
 *   user namespace), --enable-seccomp, and --exit-fd (it ends with the daemon).
 * pasta is faster; throughput does not matter for git clone and package installs.
 *
 * How it is attached. The sandbox's user and network namespaces are created by an unprivileged bwrap
 * (as the daemon's uid, or as SANDBOX_UID under setpriv when the daemon is root). slirp4netns runs as
 * that same uid (never host root: spawn sets the gid, clears the groups, sets the uid), joined to
 * the sandbox's USER namespace only (by the spawner's forker before the exec, with its ids unchanged,
 * as nsenter --preserve-credentials would: uid 0 there, no host privilege), so it may open the tap
 * device in the network namespace; its sockets stay in the host's network namespace. The namespaces
 * are passed as open fds (/proc/self/fd/N in the tool), never by pid: a reused pid cannot attach
 * another namespace. (slirp4netns 1.2.0 joins the user namespace itself only when given a pid: with
 * --netns-type=path its --enable-sandbox fails, hence the join before it starts.)
 *
 * A packet filter is installed INSIDE the namespace while the tool starts (nftables, table inet
 * parley_egress, by the same uid entering the user namespace as its root, so it has CAP_NET_ADMIN
 * there; `create table`: a namespace gets one, a second attach cannot replace it). The agent's
 * processes join later with every capability dropped: they cannot change it, add an address or a
 * route, or open raw or packet sockets. On every interface but the namespace's loopback it refuses
 * (reject, so a client fails at once) every destination in 0.0.0.0/8, 10/8 (the tool's network
 * included: the gateway, and the DNS forwarder on any port but 53; it and 255.255.255.255, which
 * libslirp also maps to the host's loopback, even when an allowed entry covers them), 100.64/10, 127/8, 169.254/16
 * (the metadata address), 172.16/12, 192.168/16, multicast, 240/4 and broadcast, ::, ::1, ::/96,
 * ::ffff:0:0/96, 64:ff9b::/96, 64:ff9b:1::/48 (NAT64 leads into IPv4 private space), fc00::/7,
 * fe80::/10, ff00::/8, and every address of the host's interfaces (read when attaching). Accepted:
 * the namespace's loopback (the agent's own servers), the DNS forwarder 10.0.2.3 on port 53 (TCP and
 * UDP), and the SANDBOX_ALLOW_NETS entries (with their port when given). Everything else — the
 * internet — is reached through slirp4netns, seen from outside as a connection of the host. One
 * service on the host's loopback can be allowed as 127.0.0.1:PORT: slirp4netns then runs without
 * --disable-host-loopback and the sandbox reaches it at 10.0.2.2:PORT; the filter alone keeps every
 * other port of the gateway closed (one layer instead of two).
 *
 * Lifetime: slirp4netns holds the namespace open; the caller closes the handle when the sandbox ends.
 * It dies with the daemon (--exit-fd is a socket only the daemon holds).
 *
 * Known limits: addresses the host gains after attaching are not in that sandbox's filter; the
 * namespace has IPv4 only (slirp4netns's IPv6 is experimental: no IPv6 route, IPv6 entries of
 * SANDBOX_ALLOW_NETS take no effect); neighbours of the host on a public on-link network are
 * "the internet"; DNS goes to the host's resolver, whatever it is; 10.0.2.0/24 itself is never an
 * outside network; a memory-safety bug in libslirp that the agent can trigger gives the attacker
 * slirp4netns's own position: the sandbox's uid on the host's network, its loopback included, under
 * slirp4netns's seccomp filter, without capability, seeing only /etc and /run.
 *
 * Why one file of this size: the egress tool's arguments, the nft filter and the parsing of
 * SANDBOX_ALLOW_NETS describe one boundary; most of the length is this comment and the rule set.
 */
import fs from 'node:fs';
import { isIPv4, isIPv6 } from 'node:net';
import os from 'node:os';
import type { Readable, Writable } from 'node:stream';
import { childProcess } from '../builtins.js';
import { signalGroup, trackGroup, untrackGroup } from '../process-group.js';
import { helper, type ProcessLike } from './processes.js';
import { launch, type SpawnSpec, type Spawner } from './spawner.js';
import { findProgram } from './programs.js';
import type { AllowedNet } from '../sandbox-settings.js';

/** The network slirp4netns gives the namespace (its defaults, pinned on its command line). */
export const EGRESS_NET = {
  cidr: '10.0.2.0/24',
  iface: 'tap0',
  address: '10.0.2.100',
  gateway: '10.0.2.2',
  dns: '10.0.2.3',
  mtu: 65520,
} as const;

/** The sandbox's /etc/resolv.conf: the forwarder, which sends queries to the host's resolver. */
export const EGRESS_RESOLV_CONF = `nameserver ${EGRESS_NET.dns}\n`;

/** Destinations refused whatever SANDBOX_ALLOW_NETS says, before the tool's network (see the header). */
const BLOCKED_V4 = [
  '0.0.0.0/8',
  '10.0.0.0/8',
  '100.64.0.0/10',
  '127.0.0.0/8',
  '169.254.0.0/16',
  '172.16.0.0/12',
  '192.168.0.0/16',
  '224.0.0.0/4',
  '240.0.0.0/4',
];
const BLOCKED_V6 = ['::/96', '::ffff:0:0/96', '64:ff9b::/96', '64:ff9b:1::/48', 'fc00::/7', 'fe80::/10', 'ff00::/8'];

/** A bound on the whole attach: it takes ~0.2 s on a machine at load 20 (scripts/bench-egress.ts). */
const ATTACH_TIMEOUT_MS = 10_000;

// ------------------------------------------------------------------ SANDBOX_ALLOW_NETS

// AllowedNet and its parser and printer live in the base layer (src/sandbox-settings.ts): config.ts parses the variable.
export { formatAllowedNet, parseAllowNets, type AllowedNet } from '../sandbox-settings.js';

/** An entry for the host's loopback (127.0.0.1:PORT): the tool's gateway maps to it for that port only. */
function isHostLoopback(a: AllowedNet): boolean {
  return a.family === 4 && a.address.startsWith('127.');
}

// ------------------------------------------------------------------ the filter

/**
 * The nftables ruleset installed in the namespace (see the header). `hostAddresses`: every address
 * of the host's interfaces. One transaction, refused as a whole when the table exists.
 */
export function egressRuleset(allow: readonly AllowedNet[], hostAddresses: readonly string[]): string {
  const v4 = [...BLOCKED_V4, ...hostAddresses.filter((a) => isIPv4(a))];
  const v6 = [...BLOCKED_V6, ...hostAddresses.map((a) => a.replace(/%.*$/, '')).filter((a) => isIPv6(a))];
  const ports = 'meta l4proto { tcp, udp } th dport';
  const reject = 'counter reject with icmpx admin-prohibited';
  const rules = [
    'oif "lo" accept',
    `ip daddr ${EGRESS_NET.dns} ${ports} 53 accept`,
    ...allow.filter(isHostLoopback).map((a) => `ip daddr ${EGRESS_NET.gateway} ${ports} ${a.port} accept`),
    // before the allowed entries, which cannot open them: libslirp maps the gateway, and 255.255.255.255
    // (UDP broadcast), to the host's loopback when it is not disabled
    `ip daddr { ${EGRESS_NET.cidr}, 255.255.255.255 } ${reject}`,
    ...allow
      .filter((a) => !isHostLoopback(a))
      .map((a) => `${a.family === 4 ? 'ip' : 'ip6'} daddr ${a.address}/${a.prefix}${a.port === null ? '' : ` ${ports} ${a.port}`} accept`),
    `ip daddr @blocked4 ${reject}`,
    `ip6 daddr @blocked6 ${reject}`,
  ];
  const set = (name: string, type: string, elements: string[]) =>
    `  set ${name} {\n    type ${type}\n    flags interval\n    auto-merge\n    elements = { ${elements.join(', ')} }\n  }`;
  // 127.0.0.1:PORT entries: the sandbox names them as the host does (a clone's origin, a mirror's
  // URL), and they go to the gateway, which slirp4netns maps to the host's loopback (the sandbox's
  // loopback address is kept as the source until it leaves: route_localnet, set by the launcher)
  const loopbackPorts = allow.filter(isHostLoopback).map((a) => a.port);
  const nat =
    loopbackPorts.length === 0
      ? []
      : [
          '  chain host_loopback {',
          '    type nat hook output priority -100; policy accept;',
          `    ip daddr 127.0.0.1 ${ports} { ${loopbackPorts.join(', ')} } dnat ip to ${EGRESS_NET.gateway}`,
          '  }',
          '  chain host_loopback_source {',
          '    type nat hook postrouting priority 100; policy accept;',
          `    oifname "${EGRESS_NET.iface}" ip saddr 127.0.0.0/8 snat ip to ${EGRESS_NET.address}`,
          '  }',
        ];
  return [
    // `create` fails when the namespace has one already: a second attach cannot replace the first's
    'create table inet parley_egress',
    'table inet parley_egress {',
    set('blocked4', 'ipv4_addr', v4),
    set('blocked6', 'ipv6_addr', v6),
    '  chain output {',
    '    type filter hook output priority filter; policy accept;',
    ...rules.map((r) => `    ${r}`),
    '  }',
    ...nat,
    '}',
    '',
  ].join('\n');
}

/** Whether an egress namespace needs net.ipv4.conf.all.route_localnet=1 (a 127.0.0.1:PORT entry: see egressRuleset). */
export function needsRouteLocalnet(allow: readonly AllowedNet[]): boolean {
  return allow.some(isHostLoopback);
}

/** Every address of the host's interfaces, as this process sees them now. */
function hostAddresses(): string[] {
  return Object.values(os.networkInterfaces()).flatMap((list) => (list ?? []).map((i) => i.address));
}

// ------------------------------------------------------------------ tools and the probe

/** The programs egress runs, as absolute paths. */
export interface EgressTools {
  slirp4netns: string;
  /** `slirp4netns --version`'s number, e.g. 1.2.0 ('' when not asked). */
  version: string;
  nft: string;
  nsenter: string;
  unshare: string;
}

/** The uid and gid the sandbox's user namespace belongs to (SANDBOX_UID/SANDBOX_GID when the daemon is root). */
export interface RunAs {
  uid: number;
  gid: number;
}

export type EgressProbe = { usable: true; tool: 'slirp4netns'; version: string; tools: EgressTools; warning?: string } | { usable: false; reason: string };

/**
 * Whether egress works here, with the tools found: the programs (slirp4netns ≥ 1.0, nft, and
 * util-linux's nsenter and unshare), /dev/net/tun, and then for real: a throwaway user and
 * network namespace (unshare, as `runAs` when given) gets the tool and the filter attached and
 * closed. `reason` is one line; the launcher then falls back to SANDBOX_NETWORK=none with it as the
 * warning.
 */
export async function probeEgress(opts: { runAs?: RunAs; timeoutMs?: number; spawner?: Spawner } = {}): Promise<EgressProbe> {
  const tools = await findEgressTools();
  if (typeof tools === 'string') return { usable: false, reason: tools };
  if (!fs.existsSync('/dev/net/tun'))
    return { usable: false, reason: 'there is no /dev/net/tun (slirp4netns needs the tun module or the device in the container)' };
  const who = checkRunAs(opts.runAs);
  if (typeof who === 'string') return { usable: false, reason: who };
  let warning: string | undefined;
  try {
    const real = fs.realpathSync('/etc/resolv.conf');
    if (!real.startsWith('/etc/') && !real.startsWith('/run/'))
      warning = `/etc/resolv.conf leads to ${real}, outside /etc and /run: slirp4netns's sandbox cannot read it, DNS will not work`;
  } catch {
    warning = 'there is no /etc/resolv.conf: the DNS forwarder has no resolver to forward to';
  }
  const holder = childProcess().spawn(tools.unshare, ['--user', '--map-root-user', '--net', '--', '/bin/sh', '-c', 'echo; exec cat'], {
    stdio: ['pipe', 'pipe', 'pipe'],
    env: {},
    detached: true,
    ...credentials(who),
  });
  holder.stdin!.on('error', () => {});
  try {
    await new Promise<void>((resolve, reject) => {
      let stderr = '';
      holder.stderr!.on('data', (d: Buffer) => (stderr += d.toString('utf8')));
      holder.stdout!.once('data', () => resolve());
      holder.once('error', (e) => reject(new Error(`unshare could not be started (${e.message})`)));
      holder.once('exit', () => reject(new Error(`a user and network namespace could not be created (${lastLine(stderr) || 'unshare failed'})`)));
    });
    const egress = await attachEgress({
      userns: `/proc/${holder.pid}/ns/user`,
      netns: `/proc/${holder.pid}/ns/net`,
      runAs: who ?? undefined,
      allow: [],
      tools,
      timeoutMs: opts.timeoutMs,
      spawner: opts.spawner,
    });
    await egress.close();
    return { usable: true, tool: 'slirp4netns', version: tools.version, tools, ...(warning ? { warning } : {}) };
  } catch (e) {
    return { usable: false, reason: (e as Error).message.replace(/^egress: /, '') };
  } finally {
    holder.stdin!.end();
    signalGroup(holder.pid);
  }
}

/** The tools and slirp4netns's version, or one line saying what is missing or too old. */
async function findEgressTools(): Promise<EgressTools | string> {
  const tools = locateEgressTools();
  if (typeof tools === 'string') return tools;
  const out = await new Promise<string>((resolve) => {
    childProcess().execFile(tools.slirp4netns, ['--version'], { env: {}, timeout: 5000 }, (_err, stdout) => resolve(String(stdout)));
  });
  const m = /slirp4netns version (\d+)\.(\d+)\.(\d+)/.exec(out);
  if (!m) return `${tools.slirp4netns} --version did not say its version`;
  if (Number(m[1]) < 1) return `slirp4netns ${m[1]}.${m[2]}.${m[3]} is too old (1.0 or later: --netns-type, --enable-sandbox, --enable-seccomp)`;
  return { ...tools, version: `${m[1]}.${m[2]}.${m[3]}` };
}

/** The programs' paths (no version: what attach needs when it is not handed the probe's). */
function locateEgressTools(): EgressTools | string {
  const slirp4netns = findProgram('slirp4netns');
  if (!slirp4netns) return 'slirp4netns was not found (apt-get install slirp4netns)';
  const nft = findProgram('nft');
  if (!nft) return 'nft was not found (apt-get install nftables)';
  const util = { nsenter: findProgram('nsenter'), unshare: findProgram('unshare') };
  const missing = Object.entries(util)
    .filter(([, p]) => !p)
    .map(([n]) => n);
  if (missing.length > 0) return `${missing.join(', ')} (util-linux) not found (apt-get install util-linux)`;
  return { slirp4netns, version: '', nft, ...(util as { nsenter: string; unshare: string }) };
}

/** null: run as the daemon's own (unprivileged) uid; a RunAs to switch to; a string: why not. */
function checkRunAs(runAs: RunAs | undefined): RunAs | null | string {
  if (runAs) {
    if (!Number.isInteger(runAs.uid) || !Number.isInteger(runAs.gid) || runAs.uid <= 0 || runAs.gid <= 0) {
      return `egress runs as the sandbox's unprivileged uid and gid, not ${runAs.uid}:${runAs.gid}`;
    }
    return runAs.uid === process.getuid?.() && runAs.gid === process.getgid?.() ? null : runAs;
  }
  if (process.getuid?.() === 0) return "the daemon runs as root: egress needs the sandbox's unprivileged uid and gid (SANDBOX_UID) to run as";
  return null;
}

/**
 * spawn's options to start a process as `who` (Node sets the gid, clears the supplementary groups,
 * then sets the uid, before exec: no extra process to start); none for the daemon's own uid.
 */
function credentials(who: RunAs | null): { uid?: number; gid?: number } {
  return who ? { uid: who.uid, gid: who.gid } : {};
}

// ------------------------------------------------------------------ attaching

export interface AttachEgressOptions {
  /** The sandbox's user namespace: a path (/proc/<pid>/ns/user, /proc/<daemon>/fd/<n>) or an open fd. */
  userns: string | number;
  /** Its network namespace, likewise. It must be owned by that user namespace. */
  netns: string | number;
  /** The uid and gid that created the sandbox (required when the daemon is root). */
  runAs?: RunAs;
  /** SANDBOX_ALLOW_NETS. */
  allow: readonly AllowedNet[];
  /** From probeEgress; looked up when missing. */
  tools?: EgressTools;
  /** For the whole attach (default 10 s). */
  timeoutMs?: number;
  /** What starts the tool and the filter (none: this process). */
  spawner?: Spawner | null;
}

export interface EgressHandle {
  /** slirp4netns's host pid. */
  pid: number;
  /** Resolves when slirp4netns has exited (close, or it died: the sandbox then has no network). */
  exited: Promise<void>;
  /** Kills slirp4netns and waits for it. Idempotent. */
  close(): Promise<void>;
}

/**
 * Gives the sandbox egress: installs the filter in its network namespace and starts slirp4netns for
 * it (as `runAs`, confined) at the same time. Resolves once both are done: the filter in, tap0 with
 * its address and default route, the forwarder up. Start the agent's processes only then. Rejects
 * with one line, leaving no process behind, when anything fails or takes longer than `timeoutMs`;
 * the namespace may then hold the filter (closed, never open): discard the sandbox. The caller
 * closes the handle when the sandbox ends (slirp4netns holds the namespace; it also exits when the
 * daemon does: its --exit-fd is a socket the daemon holds).
 */
export async function attachEgress(opts: AttachEgressOptions): Promise<EgressHandle> {
  const fail = (why: string) => new Error(`egress: ${why}`);
  const tools = opts.tools ?? locateEgressTools();
  if (typeof tools === 'string') throw fail(tools);
  const who = checkRunAs(opts.runAs);
  if (typeof who === 'string') throw fail(who);
  const deadline = Date.now() + (opts.timeoutMs ?? ATTACH_TIMEOUT_MS);
  const as = credentials(who);
  // the tool sees the namespaces as fds 3 (user) and 4 (net)
  const ns = '/proc/self/fd';
  const opened: number[] = [];
  const fdOf = (p: string | number, what: string): number => {
    if (typeof p === 'number') return p;
    try {
      opened.push(fs.openSync(p, 'r'));
    } catch (e) {
      throw fail(`the sandbox's ${what} namespace could not be opened (${(e as NodeJS.ErrnoException).code ?? (e as Error).message})`);
    }
    return opened[opened.length - 1]!;
  };
  try {
    const userFd = fdOf(opts.userns, 'user');
    const netFd = fdOf(opts.netns, 'network');
    const loopback = opts.allow.some(isHostLoopback);
    const args = [
      '--configure',
      `--mtu=${EGRESS_NET.mtu}`,
      `--cidr=${EGRESS_NET.cidr}`,
      // with a 127.0.0.1:PORT entry the gateway maps to the host's loopback: the filter keeps it to those ports
      ...(loopback ? [] : ['--disable-host-loopback']),
      '--enable-sandbox',
      '--enable-seccomp',
      '--netns-type=path',
      '--ready-fd=5',
      '--exit-fd=6',
      `${ns}/4`,
      EGRESS_NET.iface,
    ];
    // the filter goes in while the tool starts (it names no interface but lo): no agent process
    // runs before both are done, and the two process starts, the bulk of the cost, overlap
    const spawner = opts.spawner ?? null;
    const filter = installFilter(spawner, tools, as, userFd, netFd, egressRuleset(opts.allow, hostAddresses()), deadline);
    // (it may fail while the tool is still being started: read below either way)
    filter.catch(() => {});
    let proc: ProcessLike;
    try {
      // (a helper until it is ready: a stop while it attaches ends it; then its handle's close does)
      proc = helper(
        await inUserNamespace(spawner, tools, false, {
          file: tools.slirp4netns,
          args,
          stdio: ['ignore', 'ignore', 'pipe', userFd, netFd, 'pipe', 'pipe'],
          env: {},
          ...as,
        }),
      );
    } catch (e) {
      await filter.then(
        () => {},
        () => {},
      );
      throw fail(`slirp4netns could not be started (${(e as Error).message})`);
    }
    const tool = new Tool(proc);
    const [up, filtered] = await Promise.allSettled([tool.ready(deadline), filter]);
    if (up.status === 'rejected' || filtered.status === 'rejected') {
      await tool.close();
      throw fail(((up.status === 'rejected' ? up.reason : (filtered as PromiseRejectedResult).reason) as Error).message);
    }
    return { pid: tool.pid, exited: tool.exited, close: () => tool.close() };
  } finally {
    for (const fd of opened) fs.closeSync(fd);
  }
}

/** A running slirp4netns: its readiness, its last words, its end. */
class Tool {
  readonly pid: number;
  readonly exited: Promise<void>;
  private stderr = '';
  private closing: Promise<void> | null = null;

  /** fd 5 of the tool (--ready-fd) and fd 6 (--exit-fd), the daemon's ends. */
  private readonly readyEnd: Readable | null;
  private readonly exitEnd: Writable | null;

  constructor(private readonly proc: ProcessLike) {
    this.pid = proc.pid ?? 0;
    const stdio = proc.stdio as Array<Readable | Writable | null | undefined>;
    this.readyEnd = (stdio[5] as Readable | undefined) ?? null;
    this.exitEnd = (stdio[6] as Writable | undefined) ?? null;
    trackGroup(this.pid);
    proc.stderr!.on('data', (d: Buffer) => (this.stderr = (this.stderr + d.toString('utf8')).slice(-2000)));
    this.exited = new Promise<void>((resolve) => {
      proc.once('exit', () => {
        untrackGroup(this.pid);
        resolve();
      });
    });
    // the daemon's end of --exit-fd: slirp4netns ends when it is closed (or the daemon dies)
    this.exitEnd?.on('error', () => {});
  }

  /**
   * Resolves when slirp4netns wrote to --ready-fd. It does so only after its child configured tap0
   * in the namespace (up, 10.0.2.100/24, the default route via 10.0.2.2; a failure there ends it)
   * and libslirp, the DNS forwarder included, runs: no second look from inside is needed.
   */
  ready(deadline: number): Promise<void> {
    const readyFd = this.readyEnd;
    if (!readyFd) return Promise.reject(new Error('slirp4netns has no --ready-fd'));
    return new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => done(new Error('slirp4netns was not ready in time')), Math.max(0, deadline - Date.now()));
      const done = (err: Error | null) => {
        clearTimeout(timer);
        readyFd.removeAllListeners('data');
        this.proc.removeListener('exit', onExit);
        readyFd.destroy();
        if (err) reject(err);
        else resolve();
      };
      const onExit = (code: number | null, signal: NodeJS.Signals | null) => {
        const report = () => done(new Error(`slirp4netns exited (${this.lastWords() || signal || `exit code ${code}`})`));
        // its last words may still be in the pipe
        if (this.proc.stderr!.closed) report();
        else this.proc.stderr!.once('close', report);
      };
      readyFd.on('data', (d: Buffer) => {
        if (d.includes('1')) done(null);
      });
      this.proc.once('exit', onExit);
    });
  }

  /** The last line of its stderr that says why (not its seccomp warning, not "child failed(1)"). */
  private lastWords(): string {
    return lastLine(
      this.stderr
        .split('\n')
        .filter((l) => !/^(WARNING: Support for seccomp|child failed|parent failed|do_slirp failed)/.test(l.trim()))
        .join('\n'),
    );
  }

  close(): Promise<void> {
    this.closing ??= (async () => {
      if (this.proc.exitCode === null && this.proc.signalCode === null) {
        if (!signalGroup(this.pid)) this.proc.kill('SIGKILL');
      }
      this.exitEnd?.destroy();
      await this.exited;
    })();
    return this.closing;
  }
}

/**
 * Starts `spec` in the sandbox's user namespace (fd 3 of the program), and its network namespace (fd
 * 4) when `net`, with its ids unchanged: uid 0 of the user namespace, which the sandbox's uid owns.
 * The spawner's forker enters them before the exec; with no spawner (the egress probe's), util-linux
 * `nsenter --preserve-credentials` does.
 */
function inUserNamespace(spawner: Spawner | null, tools: EgressTools, net: boolean, spec: SpawnSpec): Promise<ProcessLike> {
  if (spawner) return spawner.spawn({ ...spec, enter: [{ fd: 3, ns: 'user' }, ...(net ? [{ fd: 4, ns: 'net' as const }] : [])] });
  const nsenter = ['--preserve-credentials', '--user=/proc/self/fd/3', ...(net ? ['--net=/proc/self/fd/4'] : []), '--'];
  return launch(null, { ...spec, file: tools.nsenter, args: [...nsenter, spec.file, ...spec.args] });
}

/**
 * Loads the ruleset in the namespace as the user namespace's root (started as `as`, the sandbox's
 * uid): one process, one nft transaction.
 */
async function installFilter(
  spawner: Spawner | null,
  tools: EgressTools,
  as: { uid?: number; gid?: number },
  userFd: number,
  netFd: number,
  ruleset: string,
  deadline: number,
): Promise<void> {
  let proc: ProcessLike;
  try {
    proc = helper(
      await inUserNamespace(spawner, tools, true, {
        file: tools.nft,
        args: ['-f', '-'],
        stdio: [{ data: Buffer.from(ruleset) }, 'ignore', 'pipe', userFd, netFd],
        env: {},
        ...as,
      }),
    );
  } catch (e) {
    throw new Error(`nft could not be started (${(e as Error).message})`);
  }
  return new Promise<void>((resolve, reject) => {
    let stderr = '';
    let late = false;
    // killed, then reported once it is gone: an attach that failed leaves no process
    const timer = setTimeout(
      () => {
        late = true;
        if (!signalGroup(proc.pid)) proc.kill('SIGKILL');
      },
      Math.max(0, deadline - Date.now()),
    );
    proc.stderr!.on('data', (d: Buffer) => (stderr = (stderr + d.toString('utf8')).slice(-2000)));
    proc.once('close', (code, signal) => {
      clearTimeout(timer);
      if (code === 0) return resolve();
      if (late) return reject(new Error('the filter was not installed in time'));
      reject(new Error(`the filter could not be installed in the sandbox (${lastLine(stderr) || signal || `exit code ${code}`})`));
    });
  });
}

function lastLine(text: string): string {
  return (
    text
      .split('\n')
      .map((l) => l.trim())
      .filter(Boolean)
      .pop() ?? ''
  );
}
