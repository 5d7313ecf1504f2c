/**
 * Starting one holder: the long-lived bwrap whose namespaces every process of one conversation
 * joins, its first process the conversation's file service (file-service.pl). holders.ts keeps the
 * pool (the spare, takes, refills); this file says how one is made and what keeps the agent off it.
 *
 * What the agent cannot reach, and by which rule of the kernel:
 * - The file service runs as another uid inside the conversation's user namespace (root daemon).
 *   The daemon makes that namespace before bwrap, as the sandbox uid (so the egress tool, which runs
 *   as that uid, may configure its network), and writes both maps itself (only a process with
 *   CAP_SETUID over the parent namespace may map two ids): uid and gid 0 inside are SANDBOX_UID and
 *   SANDBOX_GID outside (the agent, as before), 1 inside is SANDBOX_SERVICE_UID/GID. The service starts
 *   as 1 with CAP_SETUID and CAP_SETGID (ambient, nothing else) and sets only its effective ids to 0
 *   (file-service.pl): it reads and writes as the agent does, while its real and saved ids stay 1.
 *   The kernel then refuses the agent ptrace, pidfd_getfd, process_vm_* and /proc/<pid>/mem and
 *   /fd (its ids are not all the agent's; it holds capabilities the agent lacks; changing its
 *   effective id made it non-dumpable) and every signal (neither its real nor its saved uid is the
 *   agent's).
 * - A daemon that is not root cannot map a second id: there the service is the agent's uid, holding
 *   CAP_SETUID and CAP_SETGID in the sandbox's user namespace (one id mapped: they change nothing),
 *   which alone denies the ptrace family and /proc/<pid>/mem to a process without them. Signals
 *   still reach it: an agent can end its own file service (its sandbox then restarts).
 * - The service's channel to the daemon is a socket on fd 6 of bwrap, made its stdin and stdout by
 *   bwrap's first process (service-start.ts): bwrap's pid 1 closes every fd but 0-2 (here /dev/null
 *   and the stderr pipe), so the sandbox's init, the agent's uid when the daemon is not root, holds
 *   nothing of it. That process first writes a byte on fd 9 (bwrap has set the sandbox up: its root
 *   and mounts are the sandbox's) and closes it with the channel's copy: a conversation's own holder
 *   is then sealed and opened, and joiners start, while the service starts (a spare's, once the
 *   service has answered); the daemon sends the service nothing before the seal either.
 * - Every process of the sandbox runs under seccomp.ts's filter: bwrap installs it on its init and
 *   first process (--seccomp; with a root daemon the variant that still lets the first process enter
 *   the conversation's user namespace), and each joined process loads it itself (join.ts).
 * - Every process is in the sandbox's cgroup from its first instruction: the supervising `sh` joins
 *   it before bwrap starts (join.ts), and bwrap's --unshare-cgroup roots the sandbox's cgroup view
 *   there (its /proc/self/cgroup names neither the daemon nor the conversation).
 */
import { HOLDER_START_MS } from './types.js';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import type { Readable, Writable } from 'node:stream';
import type { CgroupBackend, ConversationCgroup } from './cgroup.js';
import { SANDBOX_PATH } from './child-env.js';
import { FileChannel } from './files.js';
import { niceNewSession } from './priority.js';
import { seal } from './seal.js';
import { serviceStart } from './service-start.js';
import { userNamespace } from './user-namespace.js';
import { wrapCommand, type HolderFds, type JoinTools } from './join.js';
import { attachEgress, needsRouteLocalnet, type EgressHandle, type EgressTools } from './network.js';
import { closeFd, killTree, lastError, signalPid, type ProcessLike } from './processes.js';
import type { Spawner } from './spawner.js';
import type { AheadFifo } from './types.js';
import { VISIBLE_WORKSPACE, type MappedDir, type SandboxIds, type SandboxOpenOptions, type SandboxSettings } from './settings.js';
import { FILE_SERVICE, serviceInside, serviceProgram, viewArgs, type ViewDirs } from './view.js';

/**
 * bwrap's fds: the info it writes, its options, the seccomp program, the service's channel, the
 * namespaces it enters, and where its command says that bwrap has set the sandbox up (`setUp`).
 */
const FD = { info: 3, args: 4, seccomp: 5, channel: 6, userns: 7, netns: 8, setUp: 9 } as const;

/** What the probe found, that every holder is built with. */
export interface HolderSetup {
  /** The settings in force (egress may have fallen back to none). */
  settings: SandboxSettings;
  /** Root daemon: the agent's and the service's host ids; null: the daemon's own uid for both. */
  ids: SandboxIds | null;
  workspaceRoot: string;
  bwrap: string;
  join: JoinTools;
  cgroups: CgroupBackend | null;
  /** seccomp.ts's programs: the agent's (every process) and the holder's (a root daemon's first process). */
  seccomp: { agent: Buffer; holder: Buffer };
  /** systemArgs() and extraArgs() of view.ts. */
  system: string[];
  extra: string[];
  mapped: MappedDir[];
  /** SANDBOX_NETWORK=egress in force: the tools network.ts found, and the sandbox's resolv.conf. */
  egress: { tools: EgressTools; version: string; resolvConf: string } | null;
  /** The file service's script on the host (default file-service.pl; a test's stand-in). */
  fileService?: string;
  /** What starts its host-side programs, off the daemon's event loop (spawner.ts). */
  spawner: Spawner;
  /** Where a holder that could not start says why (the reason may name host paths: never the client's). */
  log?: SandboxOpenOptions['log'];
}

/** The long-lived bwrap whose namespaces every process of a conversation joins. */
export class Holder {
  /** The supervising `sh` (bwrap runs under it); null until what bwrap needs is made (the user namespace, the disk). */
  proc: ProcessLike | null = null;
  /** SANDBOX_NETWORK=egress: the user-mode network of its namespace (closed with it). */
  egress: EgressHandle | null = null;
  /** The conversation's file service (its first process); null until bwrap is started. */
  files: FileChannel | null = null;
  /** Host pid of the namespace's init (bwrap's pid 1), from --info-fd. */
  init: number | null = null;
  /** The daemon's fds on the namespace files, the root and /workspace (joiners open /proc/<daemon>/fd/<n>). */
  fds: HolderFds | null = null;
  /** Resolves when joiners may start; rejects with the reason when the holder failed. */
  readonly ready: Promise<void>;
  dead = false;
  /** Joiners started against this holder and not yet exited: the fds stay open while any is alive. */
  readonly users = new Set<object>();
  /** Called once it has ended (after `ready` rejected, or its bwrap exited). */
  onDead: (() => void) | null = null;
  /** Its file service broke the protocol or missed a deadline (file-channel.ts), once: set by whoever knows its conversation. */
  onFault: ((reason: string) => void) | null = null;
  /** Resolves when its processes are gone: its bwrap exited, or it never started one. */
  readonly gone: Promise<void>;
  private endedResolve!: () => void;
  /** Resolves when what it held is given back too (its cgroup removed, its disk unmounted): set by the pool. */
  released: Promise<void>;
  /** Its workspace, /tmp and HOME are on a disk of the conversation's own (disk-image.ts). */
  image = false;
  /** The nice value its processes start with (a spare's: priority.ts). */
  nice = 0;
  /**
   * A spare's process started ahead for its conversation's first use (Holders.prestartWith), until taken;
   * `fifos`: made for its first commands' stdin in the spare's io directory, by path and inode.
   */
  started: { proc: ProcessLike | null; argv: string[]; env: Record<string, string>; fifos?: AheadFifo[] } | null = null;
  /** Root daemon: the daemon's fds on the user and network namespaces made for it. */
  private ns: { user: number; net: number | null } | null = null;

  /**
   * Starts one (see the header). `dirs`: the host directories it binds; `prepare`: what must be done
   * before bwrap starts (the conversation's disk mounted), run first; `cgroup`: every process of it
   * joins that one (null: no cgroup, rlimits only).
   */
  constructor(
    private readonly s: HolderSetup,
    public dirs: ViewDirs,
    /** The host directory of its state (tmp, home, io, outputs; the disk image): renamed with a spare's adoption. */
    public state: string,
    readonly cgroup: ConversationCgroup | null,
    prepare: () => Promise<void>,
    /**
     * A spare's: ready once its file service has answered too (nothing waits on a spare, and one taken is
     * then whole). A conversation's own is ready once sealed: its first processes start beside its service's.
     */
    private readonly whole = false,
  ) {
    this.gone = new Promise((r) => (this.endedResolve = r));
    this.released = this.gone;
    this.ready = this.start(prepare);
    this.ready.catch(() => {});
  }

  /** The host directory bound at /workspace. */
  get workspace(): string {
    return this.dirs.workspace;
  }

  /** Host pids of its processes when it was killed (the pool waits for them to have ended). */
  readonly killed = new Set<number>();

  /** kill() was called: its end, or its start's failure, is the daemon's doing. */
  stopped = false;
  /** Its file service answered its first frame. */
  served = false;
  /** Why it ended (its start's failure, or bwrap's last words): for the log, it may name host paths. */
  endReason: string | null = null;

  /** SIGKILL to everything of it (a start in progress stops where it is); `exited()` says when it is gone. */
  kill(): void {
    this.stopped = true;
    this.fail('the sandbox was closed');
    for (const p of this.pids()) this.killed.add(p);
    if (this.proc) {
      if (this.proc.pid) this.killed.add(this.proc.pid);
      if (this.init) signalPid(this.init);
      killTree(this.proc);
    }
    this.cgroup?.killAll();
  }

  /** Resolves once its bwrap has exited (at once when it never started), or after `ms`. */
  exited(ms = 3000): Promise<void> {
    return Promise.race([this.gone, new Promise<void>((r) => setTimeout(r, ms).unref())]);
  }

  /** Whether its bwrap has not exited yet (it may still write into the directories it binds). */
  get running(): boolean {
    return this.proc !== null && this.proc.exitCode === null && this.proc.signalCode === null;
  }

  /** Ends a start that has not finished yet, with the reason (nothing once it is ready). */
  private fail: (why: string) => void = () => {};

  /**
   * It is ending (its start failed, or its bwrap exited): once. Its fds go now unless a joiner still
   * may open them (then when the last one exits): the one on its /workspace holds the conversation's
   * disk image mounted, its loop device attached and a deleted image's blocks allocated.
   */
  private markDead(): void {
    if (this.dead) return;
    this.dead = true;
    this.release();
    this.onDead?.();
  }

  private async start(prepare: () => Promise<void>): Promise<void> {
    let why: string | null = null;
    const failure = new Promise<never>((_, reject) => {
      this.fail = (w) => {
        why ??= w;
        reject(new Error(w));
      };
    });
    failure.catch(() => {});
    const t0 = performance.now();
    const late = `the conversation's sandbox did not start within ${HOLDER_START_MS / 1000} s`;
    const timer = setTimeout(() => this.fail(late), HOLDER_START_MS);
    timer.unref();
    const step = <T>(p: Promise<T>) => Promise.race([p, failure]);
    try {
      // (root daemon: the user namespace is made while the directories and the cgroup are)
      const made = this.s.ids ? userNamespace(this.s.spawner, this.s.join.inside.perl, this.s.ids, this.s.settings.network !== 'host') : null;
      made?.catch(() => {});
      if (made) {
        try {
          await step(prepare());
          this.ns = await step(made);
        } catch (e) {
          // failed or stopped meanwhile: what it makes later is closed
          void made.then(
            (ns) => {
              closeFd(ns.user);
              if (ns.net !== null) closeFd(ns.net);
            },
            () => {},
          );
          throw e;
        }
      } else await step(prepare());
      if (why !== null) throw new Error(why);
      const spawning = this.spawn();
      try {
        await step(spawning);
      } catch (e) {
        // stopped meanwhile: a bwrap that starts later is ended at once
        void spawning.then(
          () => this.proc && killTree(this.proc),
          () => {},
        );
        throw e;
      }
      await step(this.setUp());
      if (this.whole) await step(this.files!.ready.catch(() => new Promise<never>(() => {})));
      await step(
        seal({
          spawner: this.s.spawner,
          perl: this.s.join.inside.perl,
          init: this.init!,
          ns: this.nsPaths(),
          ownNetwork: this.s.settings.network !== 'host',
          localnet: !!this.s.egress && needsRouteLocalnet(this.s.settings.allowNets ?? []),
        }),
      );
      this.fds = openHolder(this.init!, this.ns, this.ownNetwork);
      this.releaseNamespaces();
      // egress (the filter in, the tool up) before any process of the conversation can run
      if (this.s.egress && this.fds.net !== null) {
        const attached = attachNetwork(this.s, this.fds);
        try {
          this.egress = await step(attached);
        } catch (e) {
          void attached.then(
            (h) => h.close(),
            () => {},
          );
          throw e;
        }
        // the tool's memory and CPU are the conversation's (what it costs follows the agent's traffic)
        if (this.cgroup && this.egress.pid) await this.cgroup.add(this.egress.pid);
      }
      if (why !== null) throw new Error(why);
      // ready: its file service's first frame is still part of its start (`late` ends a service that never answers)
      const rest = setTimeout(() => this.served || this.dead || this.endUnserved(late), HOLDER_START_MS - (performance.now() - t0));
      rest.unref();
      this.files!.ready.then(
        () => clearTimeout(rest),
        () => clearTimeout(rest),
      );
    } catch (e) {
      why ??= (e as Error).message;
      this.endReason ??= why;
      if (this.proc) {
        // the exit ends it (`gone`), once bwrap is gone; joiners waiting for it are told and exit
        if (this.init) signalPid(this.init);
        killTree(this.proc);
      } else this.endedResolve();
      this.releaseNamespaces();
      void this.egress?.close();
      this.markDead();
      throw new Error(why);
    } finally {
      clearTimeout(timer);
      this.fail = () => {};
    }
  }

  /** Ends a ready holder whose file service has not answered: its start failed (not the daemon's doing: `stopped` stays false). */
  private endUnserved(why: string): void {
    this.endReason ??= why;
    // (dead before its channel says so: whoever waits on the service starts another holder, not this one)
    this.markDead();
    this.files?.break(why);
    if (this.init) signalPid(this.init);
    if (this.proc) killTree(this.proc);
  }

  /** The paths a process of the daemon opens the namespaces it made by (root daemon). */
  private nsPaths(): { user: string; net: string | null } | null {
    if (!this.ns) return null;
    const d = `/proc/${process.pid}/fd`;
    return { user: `${d}/${this.ns.user}`, net: this.ns.net === null ? null : `${d}/${this.ns.net}` };
  }

  private releaseNamespaces(): void {
    if (!this.ns) return;
    closeFd(this.ns.user);
    if (this.ns.net !== null) closeFd(this.ns.net);
    this.ns = null;
  }

  /** Whether the sandbox has a network namespace of its own (egress, none). */
  private get ownNetwork(): boolean {
    return this.s.settings.network !== 'host';
  }

  /**
   * `sh` (rlimits, the cgroup; stays as the supervisor of its process group, see join.ts; SIGTERM when its parent dies)
   * → bwrap with its options on fd 4 (as pid 1 of the sandbox its command line is what `ps` shows
   * inside, and the host paths of the conversation's directories are none of the agent's business).
   */
  private async spawn(): Promise<void> {
    const s = this.s;
    const ns = this.ns;
    // as root, bwrap enters the first process's directory with its capabilities dropped: the workspace is the sandbox uid's
    const options = [
      ...namespaceArgs(s),
      '--seccomp',
      String(FD.seccomp),
      '--info-fd',
      String(FD.info),
      ...viewArgs({ system: s.system, extra: s.extra, mapped: s.mapped, resolvConf: s.egress?.resolvConf ?? null, fileService: s.fileService }, this.dirs),
      '--chdir',
      s.ids ? '/' : VISIBLE_WORKSPACE,
    ];
    const args = { data: Buffer.from(options.map((o) => `${o}\0`).join('')) };
    const seccomp = { data: s.ids ? s.seccomp.holder : s.seccomp.agent };
    const proc = await s.spawner.spawn((parent) => {
      const argv = wrapCommand(
        { settings: s.settings, join: s.join, hasCgroups: s.cgroups !== null },
        this.cgroup,
        [s.bwrap, '--args', String(FD.args), '--', ...serviceCommand(s)],
        'supervise',
        parent,
      );
      return {
        file: argv[0]!,
        args: argv.slice(1),
        // (what the file service is started with: the sandbox's PATH, nothing else)
        env: { PATH: SANDBOX_PATH },
        // the channel is a socket of the daemon's own: the service's requests and answers pass nothing else
        stdio: ['ignore', 'ignore', 'pipe', 'pipe', args, seccomp, 'direct', ns ? ns.user : 'ignore', ns?.net ?? 'ignore', 'pipe'],
        nice: this.nice,
        // the supervisor's SIGTERM when the forker dies (join.ts)
        pdeathsig: 'SIGTERM',
      };
    });
    this.proc = proc;
    const stdio = proc.stdio as (Readable & Writable)[];
    const channel = stdio[FD.channel]!;
    // a service that hangs or lies ends its sandbox (the next use starts a new one)
    this.files = new FileChannel(channel, channel, () => {
      if (!this.dead && this.init) signalPid(this.init);
      killTree(proc);
    });
    this.files.onFault = (why) => this.onFault?.(why);
    this.files.ready.then(
      () => (this.served = true),
      () => {},
    );
    let stderr = '';
    proc.stderr!.on('data', (d: Buffer) => (stderr = (stderr + d.toString('utf8')).slice(-2000)));
    proc.once('error', (e) => this.fail(`bwrap could not be started (${e.message})`));
    proc.once('exit', (code, signal) => {
      let done = false;
      const end = () => {
        if (done) return;
        done = true;
        this.endReason ??= lastError(stderr) || `the sandbox ended (${signal ?? `exit code ${code}`})`;
        this.fail(this.endReason);
        this.files?.ended('the sandbox ended');
        this.releaseNamespaces();
        void this.egress?.close();
        this.endedResolve();
        this.markDead();
      };
      // once stderr is read to its end (at most a second): bwrap's own words say why it failed
      if (proc.stderr!.readableEnded) return end();
      proc.stderr!.once('end', end);
      setTimeout(end, 1000).unref();
    });
  }

  /**
   * Resolves once bwrap said its init's pid and its command that the sandbox is set up (its mounts
   * made, the root pivoted: what is sealed and opened next is the sandbox's). The file service starts
   * from there: its perl is its own start, which joiners do not wait for (its first frame is
   * `files.ready`; a request written before waits in the channel).
   */
  private setUp(): Promise<void> {
    const info = this.proc!.stdio[FD.info] as Readable;
    const pid = new Promise<void>((resolve) => {
      let text = '';
      info.on('data', (d: Buffer) => {
        text += d.toString('utf8');
        const m = /"child-pid":\s*(\d+)/.exec(text);
        if (m && this.init === null) {
          this.init = Number(m[1]);
          // a spare's file service starts in that session: at the spare's priority, not a running conversation's
          const nice = this.nice;
          if (this.proc?.pid) niceNewSession(this.init, this.proc.pid, nice, () => this.dead || this.nice !== nice);
          resolve();
        }
      });
    });
    // (a command that ended before saying so: its bwrap's exit says why, `fail` with bwrap's words)
    const setUp = new Promise<void>((resolve) => (this.proc!.stdio[FD.setUp] as Readable).once('data', () => resolve()));
    return Promise.all([pid, setUp]).then(() => {});
  }

  /** Host pids of its processes: its cgroup's, or without one its pid namespace's. */
  pids(): number[] {
    if (this.cgroup) return this.cgroup.pids();
    if (this.init === null) return [];
    let ns: string;
    try {
      ns = fs.readlinkSync(`/proc/${this.init}/ns/pid`);
    } catch {
      return [];
    }
    const out: number[] = [];
    for (const d of fs.readdirSync('/proc')) {
      if (!/^\d+$/.test(d)) continue;
      try {
        if (fs.readlinkSync(`/proc/${d}/ns/pid`) === ns) out.push(Number(d));
      } catch {
        /* gone, or not ours to look at */
      }
    }
    return out;
  }

  /** The holder's fds go once it is gone and no joiner started against it can still open them. */
  release(): void {
    if (!this.dead || this.users.size > 0 || !this.fds) return;
    for (const fd of Object.values(this.fds)) if (fd !== null) closeFd(fd);
    this.fds = null;
  }
}

/**
 * What bwrap runs: perl (service-start.ts) signals on fd 9, makes the channel (fd 6) the service's
 * stdin and stdout and, for a root daemon, becomes the agent's uid (the owner of the conversation's
 * user namespace), enters that namespace and its network namespace (fds 7 and 8), and becomes uid 1
 * keeping CAP_SETUID and CAP_SETGID only (ambient, so they survive the exec; bounding set and
 * no_new_privs: nothing else can come back); then the service runs and sets its effective ids to 0
 * (`--as`). A daemon that is not root: bwrap gives the service those two capabilities.
 */
function serviceCommand(s: HolderSetup): string[] {
  const script = s.fileService ?? FILE_SERVICE;
  const service = [...serviceProgram(s.join.inside.perl, serviceInside(script)), '--root', VISIBLE_WORKSPACE];
  const start = [s.join.inside.perl, '-e', serviceStartProgram()];
  if (!s.ids) return [...start, '', '', '0', ...service];
  const { agent } = s.ids;
  return [...start, String(agent.uid), String(agent.gid), s.settings.network !== 'host' ? '1' : '0', ...service, '--as', '0:0'];
}

let startProgram: string | null = null;
/** service-start.ts's program, made once. */
const serviceStartProgram = () => (startProgram ??= serviceStart(FD));

/**
 * bwrap's namespaces. A root daemon's bwrap makes no user namespace (it mounts with the host's
 * rights, so every source path resolves; its first process enters the conversation's); its children
 * keep CAP_SETUID and CAP_SETGID to become the sandbox's ids. A daemon that is not root: bwrap's own
 * user namespace, uid 0 inside mapped to the daemon's user (files on the host are the daemon's).
 * Not the daemon's own uid inside: unprivileged bwrap then makes a second user namespace inside the
 * first and leaves no process in the outer one, which owns the other namespaces (nothing could join).
 */
function namespaceArgs(s: HolderSetup): string[] {
  const keep = ['--cap-drop', 'ALL', '--cap-add', 'CAP_SETUID', '--cap-add', 'CAP_SETGID'];
  const user = s.ids ? keep : ['--unshare-user', '--uid', '0', '--gid', '0', ...keep];
  return [
    ...user,
    '--unshare-pid',
    '--unshare-ipc',
    '--unshare-uts',
    '--unshare-cgroup-try',
    ...(s.settings.network !== 'host' && !s.ids ? ['--unshare-net'] : []),
    '--die-with-parent',
    '--new-session',
    '--hostname',
    'sandbox',
  ];
}

/** Attaches the egress network to a sandbox's namespaces (the daemon's fds on them). */
function attachNetwork(s: HolderSetup, fds: HolderFds): Promise<EgressHandle> {
  return attachEgress({
    userns: fds.user,
    netns: fds.net!,
    runAs: s.ids?.agent,
    allow: s.settings.allowNets ?? [],
    tools: s.egress!.tools,
    spawner: s.spawner,
  });
}

/**
 * Opens what a joiner enters, from the holder's init before anything of the conversation ran in
 * it: its namespace files (the user and network ones the daemon made, with a root daemon), its root
 * and /workspace under that root (the joiner's working directory). The cgroup namespace only when
 * bwrap made one, the network one only when the sandbox has its own.
 */
function openHolder(init: number, ns: { user: number; net: number | null } | null, ownNetwork: boolean): HolderFds {
  const opened: number[] = [];
  const open = (p: string) => {
    const fd = fs.openSync(p, 'r');
    opened.push(fd);
    return fd;
  };
  try {
    const at = (kind: string) => open(`/proc/${init}/ns/${kind}`);
    const own = (kind: string) => fs.readlinkSync(`/proc/${init}/ns/${kind}`) !== fs.readlinkSync(`/proc/self/ns/${kind}`);
    // the daemon's own fds are dup'ed: the holder closes its copies when it ends, the joiners' go with release()
    const dup = (fd: number) => open(`/proc/self/fd/${fd}`);
    return {
      user: ns ? dup(ns.user) : at('user'),
      pid: at('pid'),
      mnt: at('mnt'),
      ipc: at('ipc'),
      uts: at('uts'),
      cgroup: own('cgroup') ? at('cgroup') : null,
      net: !ownNetwork ? null : ns ? (ns.net === null ? null : dup(ns.net)) : at('net'),
      root: open(`/proc/${init}/root`),
      cwd: open(`/proc/${init}/root${VISIBLE_WORKSPACE}`),
    };
  } catch (e) {
    for (const fd of opened) closeFd(fd);
    throw new Error(`the conversation's sandbox could not be opened (${(e as Error).message})`);
  }
}

/**
 * FIFOs (mode 600) for the stdin of a shell's first commands, made in `dir` by the spawner (off the
 * event loop) and recorded by inode: the terminal opens each only while it is still that one
 * (CommandFifos.take). None when they could not be made.
 */
export async function fifosAhead(spawner: Spawner, dir: string, count: number): Promise<AheadFifo[]> {
  const tag = randomBytes(6).toString('hex');
  const paths = Array.from({ length: count }, (_, i) => path.join(dir, `stdin-${tag}-${i + 1}`));
  try {
    await spawner.mkfifo(paths);
  } catch {
    return [];
  }
  return paths.flatMap((p) => {
    try {
      const st = fs.lstatSync(p);
      return st.isFIFO() ? [{ path: p, dev: st.dev, ino: st.ino }] : [];
    } catch {
      return [];
    }
  });
}
