/**
 * The holders: the long-lived bwrap whose namespaces every process of one conversation joins, and
 * the spare one started ahead for the next conversation. A holder's first process is the
 * conversation's file service (file-helper.mjs); the holder is sealed (seal), its namespaces are
 * opened by the daemon (openHolder) and, with egress, its network attached (network.ts) before any
 * process of the conversation may join. Their directories on the host: holder-dirs.ts.
 *
 * Why one file of this size (~530 lines): `Holders` is one state machine over one pool (start, seal,
 * take, refill, the burst rule, eviction's release, close), and its parts read and change the same
 * fields; split, each part would need the others' state passed in.
 */
import type { ChildProcess } from 'node:child_process';
import { childProcess } from '../builtins.js';
import fs from 'node:fs';
import path from 'node:path';
import { baseChildEnv } from './child-env.js';
import { FileChannel } from './files.js';
import { adoptDirs, adoptWithContents, makeStateDirs, ownWorkspace, removeStaleSpares } from './holder-dirs.js';
import { DROP_ALL, wrapCommand, type JoinTools } from './join.js';
import { attachEgress, needsRouteLocalnet, type EgressHandle, type EgressTools } from './network.js';
import { closeFd, firstChild, killTree, lastError, signalPid, exited } from './processes.js';
import { VISIBLE_WORKSPACE, type MappedDir, type SandboxSettings } from './settings.js';
import { FILE_HELPER_INSIDE, HELPER_NODE_FLAGS, viewArgs } from './view.js';

/**
 * A holder not ready by then is killed (its joiners get an error). Generous: on a machine at load
 * 20, ten holders starting at once (node, slirp4netns and nft each) took several seconds apiece.
 */
const HOLDER_START_MS = 30_000;

/**
 * How long after a spare was taken the next one starts. A holder's start is a node (the file
 * service), bwrap, slirp4netns and nft, started from the daemon's main thread (a spawn blocks it
 * until the child has exec'd): begun 50 ms after the take, as it was, it competed on a 2-core
 * machine with what the conversation that took the spare does next — its shell's start, its first
 * command, the LLM's answer taken up, some 20–60 ms. A conversation that comes back (or begins)
 * within this plus a holder's start of another starts a holder of its own, as it would find the
 * spare still starting anyway.
 */
const REFILL_MS = 1000;

/**
 * A burst: conversations begun faster than spares come. After a conversation had to start a holder of
 * its own (no spare ready), for this long the next spare starts as soon as that holder is ready and
 * again right after each take, rather than REFILL_MS later: the next conversation is likely to come
 * sooner, and a spare's start (~0.2 s) is then shorter than its wait would be. Conversations begun back
 * to back took a holder of their own each (first turn 178 vs 66 ms with a ready spare, bench-sandbox).
 */
const BURST_MS = 10_000;

/** What the probe found, that every holder is built with. */
export interface HolderSetup {
  /** The settings in force (egress may have fallen back to none). */
  settings: SandboxSettings;
  workspaceRoot: string;
  bwrap: string;
  join: JoinTools;
  /** Whether a cgroup bounds the sandboxes (without one, the rlimits do). */
  hasCgroups: boolean;
  /** systemArgs() and extraArgs() of view.ts. */
  system: string[];
  extra: string[];
  mapped: MappedDir[];
  /** SANDBOX_NETWORK=egress in force: the tools network.ts found, and the sandbox's resolv.conf. */
  egress: { tools: EgressTools; version: string; resolvConf: string } | null;
}

/** The long-lived bwrap whose namespaces every process of a conversation joins. */
export interface Holder {
  proc: ChildProcess;
  /** SANDBOX_NETWORK=egress: the user-mode network of its namespace (closed with it). */
  egress: EgressHandle | null;
  /** The conversation's file service: the holder's first process (file-helper.mjs), on its stdin/stdout. */
  files: FileChannel;
  /** Host pid of the namespace's init (bwrap's pid 1), from --info-fd. */
  init: number | null;
  /** The daemon's fds on the namespace files, the root and /workspace (joiners open /proc/<daemon>/fd/<n>). */
  fds: HolderFds | null;
  /** Resolves when joiners may start; rejects with the reason when the holder failed. */
  ready: Promise<void>;
  dead: boolean;
  /** Joiners started against this holder and not yet exited: the fds stay open while any is alive. */
  users: Set<ChildProcess>;
  /** Called once it has exited. */
  onDead: (() => void) | null;
  /** The host directories it binds: the workspace and the state directory (tmp, home, io, outputs). */
  workspace: string;
  state: string;
}

export interface HolderFds {
  user: number;
  pid: number;
  mnt: number;
  ipc: number;
  uts: number;
  /** Only when the holder's differs from the daemon's (--unshare-cgroup-try) or the network is none. */
  cgroup: number | null;
  net: number | null;
  root: number;
  cwd: number;
}

export class Holders {
  /** A holder started ahead for the next conversation (see take). */
  private spare: Holder | null = null;
  private spareSeq = 0;
  private closed = false;
  /** When (performance.now) a conversation last started a holder of its own for want of a spare. */
  private lastCold = -Infinity;
  private refillTimer: NodeJS.Timeout | null = null;

  constructor(private readonly s: HolderSetup) {
    removeStaleSpares(path.join(s.workspaceRoot, '.sandbox'));
  }

  /** Starts the spare holder if there is none; resolves once it is ready (benchmarks wait for it). */
  async warm(): Promise<void> {
    if (this.closed || this.s.settings.spareHolder === false) return;
    if (this.needsSpare()) this.spare = this.startSpare();
    await this.spare!.ready.catch(() => {});
  }

  /**
   * A holder for a conversation. The spare one (started ahead, ready by now, so a new conversation's
   * first process only waits for its own join) binds directories of its own under
   * `.sandbox/.spare-<pid>-<n>/`: it is adopted by renaming them to the conversation's workspace and
   * state directory — bind mounts follow the directory, not its name (adoptDirs: the workspace is
   * missing or empty and the state directory is missing, a new conversation). A conversation whose
   * directories exist with content (its sandbox was closed while idle, evicted, or the daemon
   * restarted) takes it too: their top-level entries are moved into the spare's directories
   * (adoptWithContents). Only when that cannot be done (a workspace elsewhere, too many entries, a
   * rename refused) does a new holder bind the conversation's directories, and the spare waits for
   * the next one. A spare is in no conversation's cgroup: only its init and `cat` are, which never
   * fork; everything that joins it enters the conversation's cgroup first, and its egress network
   * (made with it) and the disk bound (per live conversation) need nothing at adoption.
   */
  take(workspace: string, state: string): Holder {
    const spare = this.spare && !this.spare.dead && this.spare.fds ? this.spare : null;
    if (spare && (adoptDirs(spare, workspace, state) || (this.mayMoveInto(workspace) && this.adoptWithContents(spare, workspace, state)))) {
      this.spare = null;
      this.refill(performance.now() - this.lastCold < BURST_MS ? 0 : undefined);
      return this.track(workspace, spare);
    }
    ownWorkspace(workspace, this.s.settings.runAs);
    makeStateDirs(state, this.s.settings.runAs);
    const own = this.start(workspace, state);
    if (this.spareSeq > 0 && this.needsSpare()) {
      // the spare was taken and the next is not started yet: a burst (BURST_MS); the next spare starts
      // once this holder is ready, not beside its start (the probe's holder, before any spare, is none)
      this.lastCold = performance.now();
      void own.ready.catch(() => {}).then(() => this.refill(0));
    }
    return this.track(workspace, own);
  }

  /**
   * The next spare, `delayMs` from now (default REFILL_MS, or the spareRefillMs setting: the
   * conversation that took the last one goes first); a refill already due is moved to this time.
   */
  private refill(delayMs = this.s.settings.spareRefillMs ?? REFILL_MS): void {
    if (this.refillTimer) clearTimeout(this.refillTimer);
    this.refillTimer = setTimeout(() => {
      this.refillTimer = null;
      if (this.needsSpare()) this.spare = this.startSpare();
    }, delayMs);
    this.refillTimer.unref();
  }

  /** Spares are on and there is none alive (taken, never made, or dead). */
  private needsSpare(): boolean {
    return !this.closed && this.s.settings.spareHolder !== false && (!this.spare || this.spare.dead);
  }

  /**
   * adoptWithContents, and a spare that could not be given its directories back whole (a rename
   * undone failed) is retired: killed, never handed to another conversation, its directory kept
   * under a name no clean-up removes (`.kept.spare-…`).
   */
  private adoptWithContents(spare: Holder, workspace: string, state: string): boolean {
    const r = adoptWithContents(spare, workspace, state);
    if (r !== 'stuck') return r === 'adopted';
    const dir = path.dirname(spare.state);
    this.spare = null;
    spare.state = '';
    try {
      fs.renameSync(dir, path.join(path.dirname(dir), `.kept${path.basename(dir)}`));
    } catch {
      /* stays as it is */
    }
    if (spare.init) signalPid(spare.init);
    killTree(spare.proc);
    this.refill();
    return false;
  }

  /** The conversations' holders that have not exited yet, by workspace (see mayMoveInto). */
  private readonly running = new Map<string, Holder>();

  private track(workspace: string, h: Holder): Holder {
    this.running.set(workspace, h);
    h.proc.once('exit', () => {
      if (this.running.get(workspace) === h) this.running.delete(workspace);
    });
    return h;
  }

  /**
   * Whether a workspace's contents may be moved into the spare's: it is a conversation's own
   * (`WORKSPACE_ROOT/<id hex>`, never a directory the daemon was given), and no earlier holder of it
   * is still ending — its processes die with its pid namespace, and until its bwrap has exited one
   * of them could still write there.
   */
  private mayMoveInto(workspace: string): boolean {
    if (path.dirname(workspace) !== path.resolve(this.s.workspaceRoot)) return false;
    const prev = this.running.get(workspace);
    return !prev || prev.proc.exitCode !== null || prev.proc.signalCode !== null;
  }

  private startSpare(): Holder {
    const dir = path.join(this.s.workspaceRoot, '.sandbox', `.spare-${process.pid}-${++this.spareSeq}`);
    ownWorkspace(path.join(dir, 'workspace'), this.s.settings.runAs);
    makeStateDirs(path.join(dir, 'state'), this.s.settings.runAs);
    const h = this.start(path.join(dir, 'workspace'), path.join(dir, 'state'));
    h.ready.then(
      () => warmService(h),
      () => {},
    );
    // a spare that dies or is closed before a conversation adopted it leaves nothing behind
    h.proc.once('exit', () => {
      if (path.dirname(h.state) === dir) fs.rmSync(dir, { recursive: true, force: true });
    });
    return h;
  }

  /**
   * Starts a holder: setpriv → `sh` (rlimits; stays as the group's supervisor, see wrap) → bwrap with
   * new namespaces and the conversation's whole view,
   * --info-fd 3 (the host pid of its init) → `sh -c 'echo; exec cat'` (the line says the sandbox is
   * set up; `cat` reads a pipe only the daemon writes, so it ends with the daemon). bwrap reads its
   * options from fd 4 (--args): as pid 1 of the sandbox its command line is what `ps` shows inside,
   * and the host paths of the conversation's directories are none of the agent's business.
   */
  private start(workspace: string, state: string): Holder {
    const runAs = this.s.settings.runAs;
    const j = this.s.join;
    // as root, bwrap sets the view up with the daemon's rights (every source path resolves), and its
    // first process becomes the sandbox uid at once, then makes the conversation's user namespace
    // (uid 0 inside = runAs outside) in which every process of the conversation lives
    // the first process is the conversation's file service: its stdin is a pipe only the daemon
    // writes, so it (and with it the sandbox) ends with the daemon
    const service = [process.execPath, ...HELPER_NODE_FLAGS, FILE_HELPER_INSIDE, '--root', VISIBLE_WORKSPACE];
    const command = runAs
      ? [
          j.setpriv,
          `--reuid=${runAs.uid}`,
          `--regid=${runAs.gid}`,
          '--clear-groups',
          '--',
          j.unshare,
          '--user',
          '--map-root-user',
          ...(this.ownNetwork ? ['--net'] : []),
          '--',
          j.setpriv,
          ...DROP_ALL,
          ...service,
        ]
      : service;
    const argv = wrapCommand(this.s, null, [this.s.bwrap, '--args', '4', '--', ...command], 'supervise');
    const proc = childProcess().spawn(argv[0]!, argv.slice(1), {
      env: { PATH: baseChildEnv().PATH! },
      stdio: ['pipe', 'pipe', 'pipe', 'pipe', 'pipe'],
      detached: true,
    });
    // as root, bwrap enters the first process's directory with its capabilities dropped: the workspace is the sandbox uid's
    const chdir = runAs ? '/' : VISIBLE_WORKSPACE;
    const options = [
      ...this.namespaceArgs(),
      '--info-fd',
      '3',
      ...viewArgs({ system: this.s.system, extra: this.s.extra, mapped: this.s.mapped, resolvConf: this.s.egress?.resolvConf ?? null }, workspace, state),
      '--chdir',
      chdir,
    ];
    const args = proc.stdio[4] as import('node:stream').Writable | null;
    args?.on('error', () => {
      /* bwrap is gone: its exit says why */
    });
    args?.end(options.map((o) => `${o}\0`).join(''));
    const holder: Holder = {
      proc,
      egress: null,
      // a service that hangs or lies ends its sandbox (the next use starts a new one)
      files: new FileChannel(proc.stdin!, proc.stdout!, () => {
        if (!holder.dead && holder.init) signalPid(holder.init);
        killTree(proc);
      }),
      init: null,
      fds: null,
      ready: Promise.resolve(),
      dead: false,
      users: new Set(),
      onDead: null,
      workspace,
      state,
    };
    holder.ready = new Promise<void>((resolve, reject) => {
      let info = '';
      let stderr = '';
      let up = false;
      const timer = setTimeout(() => {
        if (holder.fds || holder.dead) return;
        killTree(proc);
        fail(`the conversation's sandbox did not start within ${HOLDER_START_MS / 1000} s`);
      }, HOLDER_START_MS);
      timer.unref();
      const fail = (why: string) => {
        clearTimeout(timer);
        holder.dead = true;
        reject(new Error(why));
      };
      let sealing = false;
      const check = () => {
        if (holder.dead || !up || holder.init === null || holder.fds || sealing) return;
        sealing = true;
        const init = holder.init;
        // the process whose user namespace the conversation's processes join: bwrap's own (init) when
        // unprivileged, the first process's (pid 2) when bwrap ran as root
        const owner = this.s.settings.runAs ? firstChild(init) : init;
        if (owner === null) {
          killTree(proc);
          return fail("the conversation's sandbox has no process");
        }
        this.seal(init, owner).then(
          () => {
            if (holder.dead) return;
            let fds: HolderFds;
            try {
              fds = this.openHolder(init, owner);
            } catch (e) {
              killTree(proc);
              return fail(`the conversation's sandbox could not be opened (${(e as Error).message})`);
            }
            // egress (the filter in, the tool up) before any process of the conversation can run
            const network = this.s.egress && fds.net !== null ? this.attachNetwork(fds) : Promise.resolve(null);
            network.then(
              (egress) => {
                if (holder.dead) {
                  void egress?.close();
                  for (const fd of Object.values(fds)) if (fd !== null) closeFd(fd);
                  return;
                }
                holder.egress = egress;
                holder.fds = fds;
                clearTimeout(timer);
                resolve();
              },
              (e: Error) => {
                for (const fd of Object.values(fds)) if (fd !== null) closeFd(fd);
                killTree(proc);
                fail(`the conversation's sandbox could not get its network (${e.message})`);
              },
            );
          },
          (e: Error) => {
            killTree(proc);
            fail(`the conversation's sandbox could not be sealed (${e.message})`);
          },
        );
      };
      (proc.stdio[3] as import('node:stream').Readable).on('data', (d: Buffer) => {
        info += d.toString('utf8');
        const m = /"child-pid":\s*(\d+)/.exec(info);
        if (m && holder.init === null) {
          holder.init = Number(m[1]);
          check();
        }
      });
      holder.files.ready.then(
        () => {
          up = true;
          check();
        },
        () => {
          /* the exit says why */
        },
      );
      proc.stderr!.on('data', (d: Buffer) => (stderr = (stderr + d.toString('utf8')).slice(-2000)));
      proc.stdin!.on('error', () => {
        /* gone */
      });
      proc.once('error', (e) => fail(`bwrap could not be started (${e.message})`));

      proc.once('exit', (code, signal) => {
        let ended = false;
        const end = () => {
          if (ended) return;
          ended = true;
          void holder.egress?.close();
          fail(lastError(stderr) || `the sandbox ended (${signal ?? `exit code ${code}`})`);
          this.release(holder);
          if (this.spare === holder) this.spare = null;
          holder.onDead?.();
        };
        // once stderr is read to its end (at most a second): bwrap's own words say why it failed
        if (proc.stderr!.readableEnded) return end();
        proc.stderr!.once('end', end);
        setTimeout(end, 1000).unref();
      });
    });
    holder.ready.catch(() => {});
    return holder;
  }

  /** Attaches the egress network to a sandbox's namespaces (the daemon's fds on them). */
  private attachNetwork(fds: HolderFds): Promise<EgressHandle> {
    return attachEgress({
      userns: fds.user,
      netns: fds.net!,
      runAs: this.s.settings.runAs ?? undefined,
      allow: this.s.settings.allowNets ?? [],
      tools: this.s.egress!.tools,
    });
  }

  /**
   * Seals a new sandbox before anything of the conversation runs in it: no process in it may make
   * a user namespace (user.max_user_namespaces=0 in the conversation's own, which only a process
   * with CAP_SYS_RESOURCE there could raise again: none has one), and /proc/sys and
   * /proc/sysrq-trigger are read-only mounts (a sysctl cannot be written, not even to its current
   * value). Done from outside: as root, the limit through the host's /proc from inside the user
   * namespace only and the mounts in the mount namespace with the host's rights (bwrap made it as
   * root); otherwise both as the owner of the user namespace that owns the mount namespace.
   */
  private seal(init: number, owner: number): Promise<void> {
    const j = this.s.join;
    const limit = 'echo 0 > /proc/sys/user/max_user_namespaces';
    const mounts =
      'for p in /proc/sys /proc/sysrq-trigger; do [ -e "$p" ] || continue; mount -n -c --bind "$p" "$p" && mount -n -c -o remount,bind,ro,nosuid,nodev,noexec "$p" || exit 1; done';
    const q = (a: string[]) => a.map((x) => `'${x}'`).join(' ');
    // as root the network namespace is the first process's, made by `unshare`: its loopback is down
    const lo = this.ownNetwork && this.s.settings.runAs ? ` && ${q([j.ip!, 'link', 'set', 'lo', 'up'])}` : '';
    // egress with a 127.0.0.1:PORT entry: packets from the sandbox's loopback address may leave (network.ts)
    const localnet = this.s.egress && needsRouteLocalnet(this.s.settings.allowNets ?? []) ? ' && echo 1 > /proc/sys/net/ipv4/conf/all/route_localnet' : '';
    const net = this.ownNetwork ? [`--net=/proc/${owner}/ns/net`] : [];
    const script = this.s.settings.runAs
      ? `${q([j.nsenter, `--user=/proc/${owner}/ns/user`, ...net, '--', '/bin/sh', '-c', limit + lo + localnet])} && ${q([j.nsenter, `--mount=/proc/${init}/ns/mnt`, '--', '/bin/sh', '-c', mounts])}`
      : q([
          j.nsenter,
          `--user=/proc/${owner}/ns/user`,
          '--preserve-credentials',
          ...net,
          `--mount=/proc/${init}/ns/mnt`,
          '--',
          '/bin/sh',
          '-c',
          `${limit}${localnet} && ${mounts}`,
        ]);
    return new Promise<void>((resolve, reject) => {
      const p = childProcess().spawn('/bin/sh', ['-c', script], { env: { PATH: baseChildEnv().PATH! }, stdio: ['ignore', 'ignore', 'pipe'] });
      let err = '';
      p.stderr!.on('data', (d: Buffer) => (err = (err + d.toString('utf8')).slice(-1000)));
      p.once('error', (e) => reject(e));
      p.once('close', (code) => (code === 0 ? resolve() : reject(new Error(err.trim().split('\n').pop() || `exit code ${code}`))));
    });
  }

  /**
   * Opens what a joiner enters, from the holder's init before anything of the conversation ran in
   * it: its namespace files, its root and /workspace under that root (the joiner's working
   * directory). The cgroup namespace only when bwrap made one (--unshare-cgroup-try), the network
   * one only with SANDBOX_NETWORK=none: otherwise they are the daemon's.
   */
  private openHolder(init: number, owner: number): HolderFds {
    const opened: number[] = [];
    const open = (p: string) => {
      const fd = fs.openSync(p, 'r');
      opened.push(fd);
      return fd;
    };
    try {
      const ns = (kind: string) => open(`/proc/${init}/ns/${kind}`);
      const own = (kind: string) => fs.readlinkSync(`/proc/${init}/ns/${kind}`) !== fs.readlinkSync(`/proc/self/ns/${kind}`);
      return {
        user: open(`/proc/${owner}/ns/user`),
        pid: ns('pid'),
        mnt: ns('mnt'),
        ipc: ns('ipc'),
        uts: ns('uts'),
        cgroup: own('cgroup') ? ns('cgroup') : null,
        net: this.ownNetwork ? open(`/proc/${owner}/ns/net`) : null,
        root: open(`/proc/${init}/root`),
        cwd: open(`/proc/${init}/root${VISIBLE_WORKSPACE}`),
      };
    } catch (e) {
      for (const fd of opened) closeFd(fd);
      throw e;
    }
  }

  /** The holder's fds go once the holder is gone and no joiner started against it can still open them. */
  release(h: Holder): void {
    if (!h.dead || h.users.size > 0 || !h.fds) return;
    for (const fd of Object.values(h.fds)) if (fd !== null) closeFd(fd);
    h.fds = null;
  }

  /**
   * The holder's namespaces: the conversation's, joined by every process of it. Inside, uid and gid
   * 0 of the conversation's user namespace, mapped to the daemon's user (files on the host are the
   * daemon's), without a capability (as root in a rootless container). Not the daemon's own uid:
   * unprivileged bwrap then makes a second user namespace inside the first (uid 0 in the outer one
   * for mounting devpts) and leaves no process in the outer one, which owns the mount, ipc, uts and
   * pid namespaces — nothing could join those.
   */
  /**
   * Whether a sandbox has a network namespace of its own (egress, none). As root it is made with the
   * conversation's user namespace (by the first process's `unshare`), so it is that namespace's: the
   * egress tool and its filter, which run as the sandbox's uid, may configure it; otherwise bwrap
   * makes it, in its own user namespace.
   */
  private get ownNetwork(): boolean {
    return this.s.settings.network !== 'host';
  }

  private namespaceArgs(): string[] {
    // as root: no user namespace of bwrap's; its command keeps only what it needs to become runAs
    const user = this.s.settings.runAs
      ? ['--cap-drop', 'ALL', '--cap-add', 'CAP_SETUID', '--cap-add', 'CAP_SETGID']
      : ['--unshare-user', '--uid', '0', '--gid', '0', '--cap-drop', 'ALL'];
    return [
      ...user,
      '--unshare-pid',
      '--unshare-ipc',
      '--unshare-uts',
      '--unshare-cgroup-try',
      ...(this.ownNetwork && !this.s.settings.runAs ? ['--unshare-net'] : []),
      '--die-with-parent',
      '--new-session',
      '--hostname',
      'sandbox',
    ];
  }

  /** Kills the spare (the live ones are the launcher's to close) and waits for it. */
  async close(): Promise<void> {
    this.closed = true;
    const spare = this.spare;
    this.spare = null;
    if (!spare) return;
    if (!spare.dead && spare.init) signalPid(spare.init);
    killTree(spare.proc);
    await exited(spare.proc, 3000);
    await spare.egress?.close();
  }
}

/**
 * A ready spare's file service answers the kinds of request a conversation's run begins with (its
 * repository instructions: a listing of /workspace, a stat, a read), so their code is compiled
 * before it is taken: a new service's first listing took 4–10 ms at load 7–20, about 1 ms once
 * warm. Nothing is written; what it answers is not used.
 */
function warmService(h: Holder): void {
  const ignore = () => {};
  const missing = `${VISIBLE_WORKSPACE}/.openhands/microagents`;
  for (const header of [
    { op: 'list', path: VISIBLE_WORKSPACE, depth: 1, max: 1000, hidden: false },
    { op: 'stat', path: missing },
    { op: 'read', path: `${missing}/repo.md`, max: 1 },
  ]) {
    h.files.request(header, null, 1).then(ignore, ignore);
  }
}
