/**
 * The per-conversation sandbox launcher: every process the agent causes (the terminal's shell,
 * setup.sh, git after the clone, stdio MCP servers) is started through `spawn()`.
 *
 * bwrap mode: ONE sandbox per conversation. A long-lived "holder" bwrap owns the conversation's
 * namespaces: a new user and pid namespace (its init is bwrap's reaper, pid 1; pid 2 is a `cat`
 * reading a pipe the daemon holds), plus ipc, uts and, with SANDBOX_NETWORK=none, net. Every process
 * of the conversation is a further bwrap that JOINS the holder's user and pid namespaces
 * (`--userns 3 --pidns 4`, the namespace files the daemon keeps open, reached through
 * /proc/<daemon>/fd), so `ps` in the shell shows the MCP servers and setup.sh's background jobs, and
 * killing the holder's init ends the pid namespace with everything in it. Each joining bwrap builds
 * the same view (the system read-only, the workspace read-write at /workspace, its own /proc, a new
 * ipc and uts namespace, a loopback-only network namespace with SANDBOX_NETWORK=none) and binds the
 * conversation's /tmp and HOME from per-conversation host directories (`<WORKSPACE_ROOT>/.sandbox/
 * <id>/{tmp,home}`, 0700, never shown to another conversation, removed on DELETE), so a file setup.sh
 * writes to /tmp is seen by the shell. --die-with-parent everywhere: after the daemon's death (kill -9
 * included) the holder's init and every joined process get SIGKILL, and the namespace ends.
 * All processes of one conversation share one cgroup (memory, pids), so the limits are per
 * conversation. The holder lives while the conversation uses it: it is closed by interrupt, DELETE,
 * shutdown, SANDBOX_MAX_LIVE (least recently used idle one) or after IDLE_CLOSE_MS with no process
 * started through the launcher; the next spawn starts a new one.
 *
 * none mode: plain processes in their own process group, with the same built environment (never
 * the daemon's) and the same kill-all bookkeeping.
 *
 * Paths: callers pass host paths (cwd, environment values under a mapped directory); they are
 * translated to what the sandbox sees.
 */
import { spawn as spawnChild, type ChildProcess, type StdioOptions } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import type { Logger } from 'pino';
import { baseChildEnv } from '../workspace/child-env.js';
import { conversationIdHex, removeTree, workspacePath } from '../workspace/workspace.js';
import { detectCgroups, type CgroupBackend, type ConversationCgroup } from './cgroup.js';
import { PathView } from './path-view.js';
import type { ProcessLauncher } from './types.js';
import { signalGroup } from '../process-group.js';

export type SandboxModeSetting = 'auto' | 'bwrap' | 'none';

export interface SandboxSettings {
  mode: SandboxModeSetting;
  network: 'host' | 'none';
  memoryMb: number;
  pids: number;
  fileSizeMb: number;
  /** Most conversations with a live sandbox; the least recently used idle one is closed. */
  maxLive: number;
  /** A sandbox with no process started through the launcher is closed after this long (default 10 min). */
  idleCloseMs?: number;
  /** Keep a holder started ahead for the next conversation (default true; false: benchmarks of the cold path). */
  spareHolder?: boolean;
  /** The bwrap binary (BWRAP_PATH), else `bwrap` from PATH. */
  bwrapPath?: string;
  /** Extra host directories mounted read-only at the same path (SANDBOX_RO_BINDS). */
  roBinds: string[];
}

export const DEFAULT_SANDBOX_SETTINGS: SandboxSettings = {
  mode: 'none',
  network: 'host',
  memoryMb: 4096,
  pids: 512,
  fileSizeMb: 1024,
  maxLive: 64,
  roBinds: [],
};

/** A host directory shown inside every sandbox (read-only) at `inside`. */
export interface MappedDir {
  host: string;
  inside: string;
}

export interface Bind {
  host: string;
  inside: string;
  rw?: boolean;
}

export interface SandboxSpawnOptions {
  /** Working directory as a host path (inside the workspace) or a visible path. Default: the workspace. */
  cwd?: string;
  /** The complete environment (build it with `sandbox.env()`); host paths of mapped dirs are translated. */
  env: Record<string, string>;
  stdio?: StdioOptions;
  /** The workspace on the host; default: the conversation's directory under WORKSPACE_ROOT. */
  workspaceDir?: string;
  /** Extra per-process mounts (e.g. the terminal's FIFO directory). */
  binds?: Bind[];
  /**
   * bwrap leaves the namespace fds it joined through open (fds 3 and 4) in the command; they give
   * nothing the process does not have (it is in those namespaces already), but by default an `sh`
   * closes them before the command (a few ms). True: the command closes them itself (the terminal's
   * bash does in its init script), saving that exec where the start time matters.
   */
  commandClosesFds?: boolean;
}

/** What /server_info reports. */
export interface SandboxInfo {
  mode: 'bwrap' | 'none';
  requested: SandboxModeSetting;
  network: 'host' | 'none';
  workspace: string;
  limits: {
    enforced_by: 'cgroup-v2' | 'cgroup-v1' | 'rlimit' | 'none';
    memory_mb: number | null;
    pids: number | null;
    file_size_mb: number | null;
  };
  /** Why auto fell back to plain processes. */
  warning?: string;
}

export class SandboxUnavailableError extends Error {
  override name = 'SandboxUnavailableError';
}

export const VISIBLE_WORKSPACE = '/workspace';
const VISIBLE_HOME = '/home/agent';

/** How long a sandbox with no process started through the launcher stays up (its background jobs with it). */
const IDLE_CLOSE_MS = 10 * 60_000; // SandboxSettings.idleCloseMs
/** A holder not ready by then is killed (its joiners get an error). */
const HOLDER_START_MS = 10_000;

/** The long-lived bwrap whose namespaces every process of a conversation joins. */
interface Holder {
  proc: ChildProcess;
  /** Host pid of the namespace's init (bwrap's pid 1), from --info-fd. */
  init: number | null;
  /** The daemon's fds on the namespace files (joiners open /proc/<daemon>/fd/<n>). */
  fds: { user: number; pid: number } | null;
  /** Resolves when joiners may start; rejects with the reason when the holder failed. */
  ready: Promise<void>;
  dead: boolean;
  /** Joiners started against this holder and not yet exited: the fds stay open while any is alive. */
  users: Set<ChildProcess>;
  /** Called once it has exited. */
  onDead: (() => void) | null;
}

interface Live {
  procs: Set<ChildProcess>;
  busy: boolean;
  lastUsed: number;
  cgroup: ConversationCgroup | null;
  holder: Holder | null;
  idleTimer: NodeJS.Timeout | null;
}

function which(name: string): string | null {
  if (name.includes('/')) return fs.existsSync(name) ? path.resolve(name) : null;
  for (const dir of (process.env.PATH ?? '/usr/local/bin:/usr/bin:/bin').split(':')) {
    if (!dir) continue;
    const p = path.join(dir, name);
    try {
      fs.accessSync(p, fs.constants.X_OK);
      return p;
    } catch {
      /* next */
    }
  }
  return null;
}

function killTree(p: ChildProcess): void {
  if (!p.pid || signalGroup(p.pid, 'SIGKILL')) return;
  try {
    process.kill(p.pid, 'SIGKILL');
  } catch {
    /* gone */
  }
}

function signalPid(pid: number): void {
  try {
    process.kill(pid, 'SIGKILL');
  } catch {
    /* gone */
  }
}

function exited(p: ChildProcess, ms: number): Promise<void> {
  return new Promise<void>((resolve) => {
    if (p.exitCode !== null || p.signalCode !== null) return resolve();
    const t = setTimeout(resolve, ms);
    p.once('exit', () => {
      clearTimeout(t);
      resolve();
    });
  });
}

function closeFd(fd: number): void {
  try {
    fs.closeSync(fd);
  } catch {
    /* closed */
  }
}

/** A name for per-conversation directories: the id's 32 hex digits, or a safe form of other ids (probes, tests). */
function stateName(conversationId: string): string {
  try {
    return conversationIdHex(conversationId);
  } catch {
    return `x-${conversationId.replace(/[^A-Za-z0-9_-]/g, '_').slice(0, 64)}`;
  }
}

/** The stdio of a joiner: the caller's three, then fd 3 = the pipe that carries the namespace fd numbers. */
function joinerStdio(stdio: StdioOptions | undefined): StdioOptions {
  if (Array.isArray(stdio) && stdio.length > 3) throw new Error('a sandboxed process gets stdin, stdout and stderr only (fd 3 carries the sandbox)');
  const base = stdio === undefined || typeof stdio === 'string' ? [stdio ?? 'pipe', stdio ?? 'pipe', stdio ?? 'pipe'] : [...stdio];
  while (base.length < 3) base.push('pipe');
  return [...base, 'pipe'] as StdioOptions;
}

export class Sandbox {
  readonly mode: 'bwrap' | 'none';
  private readonly live = new Map<string, Live>();
  private readonly evictListeners = new Set<(conversationId: string) => void>();
  private readonly holderMounts = programArgs();
  /** A holder started ahead for the next conversation (see takeHolder). */
  private spare: Holder | null = null;
  private closed = false;

  private constructor(
    readonly settings: SandboxSettings,
    readonly workspaceRoot: string,
    private readonly bwrap: string | null,
    private readonly cgroups: CgroupBackend | null,
    private readonly mapped: MappedDir[],
    private readonly systemArgs: string[],
    private readonly extraArgs: string[] = [],
    readonly warning?: string,
  ) {
    this.mode = bwrap ? 'bwrap' : 'none';
  }

  /** Plain processes, no probe (unit tests, tools used outside the daemon). */
  static none(workspaceRoot = '/'): Sandbox {
    return new Sandbox({ ...DEFAULT_SANDBOX_SETTINGS, mode: 'none' }, workspaceRoot, null, null, [], []);
  }

  /**
   * Probes bwrap once with the options it will use. `bwrap` mode: throws SandboxUnavailableError
   * (one actionable line) when the probe fails. `auto`: falls back to plain processes with a warning.
   */
  /**
   * @param opts.hidden host paths never visible inside, even under a mounted system directory
   *   (DATA_DIR: e.g. /opt/parley/data would otherwise show through the /opt mount)
   */
  /**
   * @param opts.apiOpenOnLoopback the daemon answers loopback requests without a key: with the
   *   host network a sandboxed agent can call it too (README, Trust model), which is logged once
   */
  static async open(
    settings: SandboxSettings,
    opts: { workspaceRoot: string; mapped?: MappedDir[]; hidden?: string[]; log?: Logger; apiOpenOnLoopback?: boolean },
  ): Promise<Sandbox> {
    const mapped = (opts.mapped ?? []).map((m) => ({ host: path.resolve(m.host), inside: m.inside }));
    if (settings.mode === 'none') return new Sandbox(settings, opts.workspaceRoot, null, null, mapped, []);
    const fail = (why: string): Sandbox => {
      if (settings.mode === 'bwrap') throw new SandboxUnavailableError(`SANDBOX=bwrap but ${why}`);
      const warning = `SANDBOX=auto: ${why}; agent processes run UNSANDBOXED as the daemon's user (set SANDBOX=none to silence this, or fix bwrap)`;
      opts.log?.warn({ sandbox: 'none' }, warning);
      return new Sandbox(settings, opts.workspaceRoot, null, null, mapped, [], [], warning);
    };
    const bwrap = which(settings.bwrapPath ?? 'bwrap');
    if (!bwrap) {
      return fail(
        settings.bwrapPath
          ? `BWRAP_PATH=${settings.bwrapPath} does not exist: install bubblewrap (apt-get install bubblewrap) or fix BWRAP_PATH`
          : 'bwrap was not found on PATH: install bubblewrap (apt-get install bubblewrap) or set BWRAP_PATH',
      );
    }
    const limits = { memoryBytes: settings.memoryMb * 1024 * 1024, pids: settings.pids };
    const cgroups = detectCgroups(limits);
    const hidden = [...(opts.hidden ?? []), opts.workspaceRoot, ...HIDDEN_PATHS];
    const sb = new Sandbox(settings, opts.workspaceRoot, bwrap, cgroups, mapped, systemArgs(), extraArgs(settings.roBinds, hidden));
    const probeDir = fs.mkdtempSync(path.join(opts.workspaceRoot, '.probe-'));
    try {
      const err = await sb.probe(probeDir);
      if (err) return fail(err);
    } finally {
      fs.rmSync(probeDir, { recursive: true, force: true });
    }
    // the first conversation finds a holder ready too
    void sb.warm();
    const i = sb.info();
    opts.log?.info({ sandbox: i }, `sandbox: bwrap (${bwrap}), network ${i.network}, limits by ${i.limits.enforced_by}`);
    if (opts.apiOpenOnLoopback && settings.network === 'host') {
      opts.log?.warn(
        { sandbox: 'api-reachable' },
        "no SESSION_API_KEY and SANDBOX_NETWORK=host: agents' sandboxed processes can call this daemon's API on loopback (every conversation, every file); set SESSION_API_KEY or SANDBOX_NETWORK=none",
      );
    }
    return sb;
  }

  /**
   * Starts a holder and runs `true` joined to it, built exactly like the real ones (with the
   * conversation's cgroup: the probe proves it can be joined); an error line or null.
   */
  private async probe(dir: string): Promise<string | null> {
    const id = `probe-${process.pid}`;
    try {
      const child = this.spawn(id, ['true'], { env: { PATH: baseChildEnv().PATH! }, stdio: ['ignore', 'ignore', 'pipe'], workspaceDir: dir });
      let stderr = '';
      child.stderr!.on('data', (d: Buffer) => (stderr += d.toString('utf8')));
      const live = this.live.get(id);
      const holderFailed = live?.holder?.ready.then(() => null, (e: Error) => e.message);
      return await new Promise<string | null>((resolve) => {
        child.on('error', (e) => resolve(`bwrap could not be started (${e.message})`));
        child.on('close', async (code) => {
          if (code === 0) return resolve(null);
          const line = (await holderFailed) ?? stderr.trim().split('\n').pop() ?? '';
          let hint = '';
          if (/user namespace|Operation not permitted|setting up uid map|No permissions|Permission denied/i.test(line)) {
            hint = ' (unprivileged user namespaces are disabled or blocked: sysctl kernel.unprivileged_userns_clone=1, or an AppArmor profile for bwrap on Ubuntu 24.04+, or systemd RestrictNamespaces)';
          }
          resolve(`the bwrap probe failed: ${line || `exit code ${code}`}${hint}`);
        });
      });
    } catch (e) {
      return `bwrap could not be started (${(e as Error).message})`;
    } finally {
      await this.removeConversation(id);
    }
  }

  get enabled(): boolean {
    return this.mode === 'bwrap';
  }

  info(): SandboxInfo {
    const on = this.enabled;
    const by = !on ? 'none' : this.cgroups ? this.cgroups.kind : 'rlimit';
    return {
      mode: this.mode,
      requested: this.settings.mode,
      network: on ? this.settings.network : 'host',
      workspace: on ? VISIBLE_WORKSPACE : 'host path',
      limits: {
        enforced_by: by,
        memory_mb: by === 'none' ? null : this.settings.memoryMb,
        // RLIMIT_NPROC counts every process of the user, not of the conversation: not a pids limit
        pids: by === 'cgroup-v1' || by === 'cgroup-v2' ? this.settings.pids : null,
        file_size_mb: on ? this.settings.fileSizeMb : null,
      },
      ...(this.warning ? { warning: this.warning } : {}),
    };
  }

  /** The workspace on the host. */
  hostWorkspace(conversationId: string): string {
    return workspacePath(this.workspaceRoot, conversationId);
  }

  /** The conversation's /tmp and HOME on the host (outside its workspace; created with its sandbox). */
  stateDir(conversationId: string): string {
    return path.join(this.workspaceRoot, '.sandbox', stateName(conversationId));
  }

  /** Where the conversation's processes see their workspace. */
  visibleWorkspace(hostWorkspaceDir: string): string {
    return this.enabled ? VISIBLE_WORKSPACE : hostWorkspaceDir;
  }

  /** The file view of a workspace (file_editor and anything else using agent-chosen paths). */
  pathView(hostWorkspaceDir: string): PathView {
    return new PathView(hostWorkspaceDir, this.visibleWorkspace(hostWorkspaceDir));
  }

  /**
   * The environment of a sandboxed process: PATH, locale, proxies, CA bundles (see child-env.ts),
   * HOME and TMPDIR of the sandbox, plus `extra` (the conversation's secrets, tool settings).
   * Never the daemon's own environment.
   */
  env(extra: Record<string, string | undefined> = {}): Record<string, string> {
    const sandboxed = this.enabled ? { HOME: VISIBLE_HOME, TMPDIR: '/tmp', USER: 'agent', LOGNAME: 'agent' } : {};
    const env = baseChildEnv({ ...sandboxed, ...extra });
    return env;
  }

  /** Number of conversations with a live sandbox (its holder, or processes in none mode; metrics). */
  get liveCount(): number {
    let n = 0;
    for (const l of this.live.values()) if (l.procs.size > 0 || (l.holder && !l.holder.dead)) n++;
    return n;
  }

  /** Number of live sandboxed processes started through the launcher (their children not counted). */
  get processCount(): number {
    let n = 0;
    for (const l of this.live.values()) n += l.procs.size;
    return n;
  }

  /** Called when a conversation's sandbox is closed to stay under SANDBOX_MAX_LIVE. */
  onEvict(fn: (conversationId: string) => void): () => void {
    this.evictListeners.add(fn);
    return () => this.evictListeners.delete(fn);
  }

  /** Marks the conversation busy (a command runs) or idle; idle sandboxes may be closed (LRU). */
  setBusy(conversationId: string, busy: boolean): void {
    if (this.closed) return;
    const l = busy ? this.enter(conversationId) : this.live.get(conversationId);
    if (!l) return;
    l.busy = busy;
    l.lastUsed = Date.now();
    this.scheduleIdle(conversationId, l);
  }

  /**
   * A conversation with no process started through the launcher and nothing running: in none mode
   * (no holder) its bookkeeping goes at once; a sandbox is closed after IDLE_CLOSE_MS (its
   * background jobs, e.g. what setup.sh started, live until then).
   */
  private scheduleIdle(conversationId: string, l: Live): void {
    if (l.idleTimer) clearTimeout(l.idleTimer);
    l.idleTimer = null;
    if (l.busy || l.procs.size > 0 || this.live.get(conversationId) !== l) return;
    if (!l.holder || l.holder.dead) {
      this.live.delete(conversationId);
      if (l.cgroup) void this.removeCgroup(conversationId, l.cgroup);
      return;
    }
    l.idleTimer = setTimeout(() => {
      if (this.live.get(conversationId) === l && !l.busy && l.procs.size === 0) void this.closeConversation(conversationId);
    }, this.settings.idleCloseMs ?? IDLE_CLOSE_MS);
    l.idleTimer.unref();
  }

  private readonly removing = new Set<Promise<void>>();

  /** The kernel empties a cgroup a moment after its last process was reaped: retry for a while. */
  private removeCgroup(conversationId: string, cg: ConversationCgroup): Promise<void> {
    if (cg.remove()) return Promise.resolve();
    const p = (async () => {
      for (let i = 0; i < 40; i++) {
        await new Promise((r) => setTimeout(r, 50));
        if (this.live.has(conversationId)) return; // in use again: the same directory serves it
        if (cg.pids().length > 0) cg.killAll();
        if (cg.remove()) return;
      }
    })();
    this.removing.add(p);
    void p.finally(() => this.removing.delete(p));
    return p;
  }

  /**
   * Starts `argv` for the conversation. Returns the child (the outer bwrap in bwrap mode); its
   * stdio is the command's. In bwrap mode the process joins the conversation's sandbox (started
   * here when there is none); until the sandbox is ready the child waits in its `sh`.
   */
  spawn(conversationId: string, argv: string[], opts: SandboxSpawnOptions): ChildProcess {
    if (this.closed) throw new Error('the sandbox launcher is closed');
    if (argv.length === 0) throw new Error('empty command');
    const host = opts.workspaceDir ?? this.hostWorkspace(conversationId);
    // workspaces are created on first use (a conversation that never runs anything has none)
    fs.mkdirSync(host, { recursive: true, mode: 0o700 });
    const live = this.enter(conversationId);
    let child: ChildProcess;
    if (!this.enabled) {
      child = spawnChild(argv[0]!, argv.slice(1), {
        cwd: opts.cwd ?? host,
        env: opts.env,
        stdio: opts.stdio ?? 'pipe',
        detached: true,
      });
    } else {
      const state = this.stateDir(conversationId);
      let holder = live.holder && !live.holder.dead ? live.holder : null;
      if (!holder) {
        fs.mkdirSync(path.dirname(state), { recursive: true, mode: 0o700 });
        for (const d of ['', 'tmp', 'home']) fs.mkdirSync(path.join(state, d), { recursive: true, mode: 0o700 });
        holder = live.holder = this.takeHolder();
        const h = holder;
        // everything that joined it dies with the namespace
        h.onDead = () => {
          if (this.live.get(conversationId) === live && live.holder === h) this.scheduleIdle(conversationId, live);
        };
        if (h.dead) h.onDead();
      }
      const view = this.pathView(host);
      const cwd = opts.cwd ? view.toVisible(opts.cwd) : VISIBLE_WORKSPACE;
      const inner = opts.commandClosesFds ? argv : ['/bin/sh', '-c', 'exec 3<&- 4<&-; exec "$@"', 'sh', ...argv];
      const full = this.wrap(live.cgroup, [...this.bwrapArgs(host, cwd, opts.binds ?? [], state), '--', ...inner], true);
      child = spawnChild(full[0]!, full.slice(1), {
        env: this.translateEnv(opts.env),
        stdio: joinerStdio(opts.stdio),
        detached: true,
      });
      const joined = holder;
      holder.users.add(child);
      const control = child.stdio[3] as import('node:stream').Writable | null;
      control?.on('error', () => {
        /* the child is gone */
      });
      joined.ready.then(
        () => control?.end(`${joined.fds!.user} ${joined.fds!.pid}\n`),
        () => control?.end(),
      );
      const release = () => {
        joined.users.delete(child);
        this.releaseHolderFds(joined);
      };
      child.once('exit', release);
      child.once('error', release);
    }
    live.procs.add(child);
    if (live.idleTimer) clearTimeout(live.idleTimer);
    live.idleTimer = null;
    const forget = () => {
      live.procs.delete(child);
      live.lastUsed = Date.now();
      this.scheduleIdle(conversationId, live);
    };
    child.once('exit', forget);
    child.once('error', forget);
    return child;
  }

  /** Starts the spare holder if there is none; resolves once it is ready (benchmarks wait for it). */
  async warm(): Promise<void> {
    if (!this.enabled || this.closed || this.settings.spareHolder === false) return;
    if (!this.spare || this.spare.dead) this.spare = this.startHolder();
    await this.spare.ready.catch(() => {});
  }

  /**
   * A holder for a conversation: the spare one started after the previous take (ready by now, so a
   * new conversation's first process only waits for its own bwrap), else a new one. Holders bind
   * nothing of a conversation (no workspace, no /tmp), so a spare fits any conversation. A spare is
   * in no conversation's cgroup: only its init and `cat` are, which never fork; everything that
   * joins it enters the conversation's cgroup first.
   */
  private takeHolder(): Holder {
    const spare = this.spare && !this.spare.dead ? this.spare : null;
    this.spare = null;
    const timer = setTimeout(() => {
      if (!this.closed && !this.spare && this.settings.spareHolder !== false) this.spare = this.startHolder();
    }, 50);
    timer.unref();
    return spare ?? this.startHolder();
  }

  /**
   * Starts a holder: `sh` (rlimits) → bwrap with new namespaces, --info-fd 3 (the host pid of its
   * init) → `sh -c 'echo; exec cat'` (the line says the namespaces are set up; `cat` reads a pipe
   * only the daemon writes, so it ends with the daemon).
   */
  private startHolder(): Holder {
    const argv = this.wrap(null, [
      ...this.namespaceArgs(),
      '--info-fd',
      '3',
      ...this.holderMounts,
      '--',
      '/bin/sh',
      '-c',
      'echo; exec cat',
    ]);
    const proc = spawnChild(argv[0]!, argv.slice(1), {
      env: { PATH: baseChildEnv().PATH! },
      stdio: ['pipe', 'pipe', 'pipe', 'pipe'],
      detached: true,
    });
    const holder: Holder = { proc, init: null, fds: null, ready: Promise.resolve(), dead: false, users: new Set(), onDead: null };
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
      const check = () => {
        if (holder.dead || !up || holder.init === null || holder.fds) return;
        try {
          const user = fs.openSync(`/proc/${holder.init}/ns/user`, 'r');
          let pid: number;
          try {
            pid = fs.openSync(`/proc/${holder.init}/ns/pid`, 'r');
          } catch (e) {
            closeFd(user);
            throw e;
          }
          holder.fds = { user, pid };
          clearTimeout(timer);
          resolve();
        } catch (e) {
          killTree(proc);
          fail(`the conversation's sandbox could not be opened (${(e as Error).message})`);
        }
      };
      (proc.stdio[3] as import('node:stream').Readable).on('data', (d: Buffer) => {
        info += d.toString('utf8');
        const m = /"child-pid":\s*(\d+)/.exec(info);
        if (m && holder.init === null) {
          holder.init = Number(m[1]);
          check();
        }
      });
      proc.stdout!.once('data', () => {
        up = true;
        check();
      });
      proc.stderr!.on('data', (d: Buffer) => (stderr = (stderr + d.toString('utf8')).slice(-2000)));
      proc.stdin!.on('error', () => {
        /* gone */
      });
      proc.once('error', (e) => fail(`bwrap could not be started (${e.message})`));

      proc.once('exit', (code, signal) => {
        fail(stderr.trim().split('\n').pop() || `the sandbox ended (${signal ?? `exit code ${code}`})`);
        this.releaseHolderFds(holder);
        if (this.spare === holder) this.spare = null;
        holder.onDead?.();
      });
    });
    holder.ready.catch(() => {});
    return holder;
  }

  /** The namespace fds go once the holder is gone and no joiner started against it can still open them. */
  private releaseHolderFds(h: Holder): void {
    if (!h.dead || h.users.size > 0 || !h.fds) return;
    closeFd(h.fds.user);
    closeFd(h.fds.pid);
    h.fds = null;
  }

  /** The launcher of one conversation, for code that only starts processes (setup.sh, git, MCP servers). */
  forConversation(conversationId: string): ProcessLauncher {
    return {
      spawn: (argv, o) => this.spawn(conversationId, argv, { cwd: o.cwd, env: o.env, stdio: o.stdio }),
      env: (extra) => this.env(extra),
    };
  }

  /** Kills every process of the conversation (background ones included: the pid namespace ends) and frees its cgroup. */
  async closeConversation(conversationId: string): Promise<void> {
    const l = this.live.get(conversationId);
    if (!l) return;
    this.live.delete(conversationId);
    if (l.idleTimer) clearTimeout(l.idleTimer);
    const h = l.holder;
    // the init first: the kernel kills everything in its pid namespace
    if (h && !h.dead && h.init) signalPid(h.init);
    if (h) killTree(h.proc);
    for (const p of l.procs) killTree(p);
    l.cgroup?.killAll();
    await Promise.all([...l.procs, ...(h ? [h.proc] : [])].map((p) => exited(p, 3000)));
    if (l.cgroup) await this.removeCgroup(conversationId, l.cgroup);
  }

  /** DELETE: closes the sandbox and removes the conversation's /tmp and HOME from the host. */
  async removeConversation(conversationId: string): Promise<void> {
    await this.closeConversation(conversationId);
    await removeTree(this.stateDir(conversationId)).catch(() => {});
  }

  async close(): Promise<void> {
    this.closed = true;
    const spare = this.spare;
    this.spare = null;
    if (spare) {
      if (!spare.dead && spare.init) signalPid(spare.init);
      killTree(spare.proc);
    }
    await Promise.all([...this.live.keys()].map((id) => this.closeConversation(id)));
    if (spare) await exited(spare.proc, 3000);
    await Promise.all([...this.removing]);
    this.cgroups?.close();
  }

  // ------------------------------------------------------------------ internals

  private enter(conversationId: string): Live {
    let l = this.live.get(conversationId);
    if (!l) {
      let cgroup: ConversationCgroup | null = null;
      if (this.enabled && this.cgroups) cgroup = this.cgroups.create(conversationId);
      l = { procs: new Set(), busy: false, lastUsed: Date.now(), cgroup, holder: null, idleTimer: null };
      this.live.set(conversationId, l);
      this.evictIfNeeded(conversationId);
    }
    l.lastUsed = Date.now();
    return l;
  }

  private evictIfNeeded(except: string): void {
    const max = this.settings.maxLive;
    if (max <= 0) return;
    const withProcs = [...this.live.entries()].filter(([id, l]) => id !== except && (l.procs.size > 0 || (l.holder && !l.holder.dead)));
    let over = withProcs.length + 1 - max;
    if (over <= 0) return;
    const idle = withProcs.filter(([, l]) => !l.busy).sort((a, b) => a[1].lastUsed - b[1].lastUsed);
    for (const [id] of idle) {
      if (over-- <= 0) break;
      // listeners first (e.g. MCP managers detach quietly), then the processes are killed
      for (const fn of this.evictListeners) fn(id);
      void this.closeConversation(id);
    }
  }

  private translateEnv(env: Record<string, string>): Record<string, string> {
    if (this.mapped.length === 0) return env;
    const out: Record<string, string> = {};
    for (const [k, v] of Object.entries(env)) {
      let val = v;
      for (const m of this.mapped) if (val === m.host || val.startsWith(m.host + '/')) val = m.inside + val.slice(m.host.length);
      out[k] = val;
    }
    return out;
  }

  /**
   * One `sh` around bwrap: the file size limit (ulimit -f, 512-byte blocks in POSIX sh), the data
   * limit when there is no cgroup (ulimit -d, KiB), and the cgroup join before exec, so every process
   * of the sandbox is counted from its first fork. A joiner (`join`) then reads the numbers of the
   * daemon's namespace fds from fd 3 (written once the holder is ready; nothing when it failed) and
   * opens them as fds 3 and 4 for `bwrap --userns 3 --pidns 4`. One exec more than bwrap alone.
   */
  private wrap(cgroup: ConversationCgroup | null, bwrapArgs: string[], join = false): string[] {
    let script = `ulimit -f ${this.settings.fileSizeMb * 2048} || exit 125; `;
    if (!this.cgroups) script += `ulimit -d ${this.settings.memoryMb * 1024} || exit 125; `;
    script += 'n=$1; shift; while [ "$n" -gt 0 ]; do echo $$ > "$1" || exit 125; shift; n=$((n-1)); done; ';
    if (join) {
      script +=
        'read -r u p <&3 || { echo "parley: the conversation\'s sandbox is not running" >&2; exit 125; }; ' +
        `exec 3</proc/${process.pid}/fd/$u 4</proc/${process.pid}/fd/$p || exit 125; `;
    }
    script += 'exec "$@"';
    const files = cgroup?.procsFiles ?? [];
    return ['/bin/sh', '-c', script, 'sh', String(files.length), ...files, this.bwrap!, ...bwrapArgs];
  }

  /** The holder's namespaces (a joiner adds its own mount, ipc, uts and, with network none, net namespace). */
  private namespaceArgs(): string[] {
    return ['--unshare-user', '--unshare-pid', ...this.ownNamespaceArgs()];
  }

  /** What the holder and every joiner create for themselves, and how they run. */
  private ownNamespaceArgs(): string[] {
    return [
      '--unshare-ipc',
      '--unshare-uts',
      '--unshare-cgroup-try',
      ...(this.settings.network === 'none' ? ['--unshare-net'] : []),
      '--die-with-parent',
      '--new-session',
      '--cap-drop',
      'ALL',
      '--hostname',
      'sandbox',
    ];
  }

  private bwrapArgs(hostWorkspace: string, cwd: string, binds: Bind[], state: string): string[] {
    const tmp = path.join(state, 'tmp');
    const a = [
      '--userns',
      '3',
      '--pidns',
      '4',
      ...this.ownNamespaceArgs(),
      ...this.systemArgs,
      '--proc',
      '/proc',
      '--dev',
      '/dev',
      '--bind',
      tmp,
      '/tmp',
      '--bind',
      tmp,
      '/var/tmp',
      ...this.extraArgs,
      '--bind',
      path.join(state, 'home'),
      VISIBLE_HOME,
      '--bind',
      hostWorkspace,
      VISIBLE_WORKSPACE,
    ];
    for (const m of this.mapped) if (fs.existsSync(m.host)) a.push('--ro-bind', m.host, m.inside);
    for (const b of binds) a.push(b.rw ? '--bind' : '--ro-bind', b.host, b.inside);
    a.push('--chdir', cwd);
    return a;
  }
}

/** What the holder needs to run `sh` and `cat`: /usr and the /bin, /lib… entries as they are on the host. */
function programArgs(): string[] {
  const a: string[] = [];
  if (fs.existsSync('/usr')) a.push('--ro-bind', '/usr', '/usr');
  for (const dir of ['/bin', '/sbin', '/lib', '/lib32', '/lib64', '/libx32']) {
    let st: fs.Stats;
    try {
      st = fs.lstatSync(dir);
    } catch {
      continue;
    }
    if (st.isSymbolicLink()) a.push('--symlink', fs.readlinkSync(dir), dir);
    else if (st.isDirectory()) a.push('--ro-bind', dir, dir);
  }
  return a;
}

/** Read-only system mounts: /usr, /etc, /opt and the /bin, /lib… entries as they are on the host. */
function systemArgs(): string[] {
  const a = programArgs();
  for (const dir of ['/etc', '/opt']) if (fs.existsSync(dir)) a.push('--ro-bind', dir, dir);
  // /etc/resolv.conf is often a symlink into /run (systemd-resolved): mount its target
  try {
    const real = fs.realpathSync('/etc/resolv.conf');
    if (!real.startsWith('/etc/') && !real.startsWith('/usr/')) a.push('--ro-bind', real, real);
  } catch {
    /* no resolver configuration */
  }
  // host keys and password hashes are readable by root: never show them
  for (const f of ['/etc/shadow', '/etc/gshadow', '/etc/shadow-', '/etc/gshadow-']) {
    if (fs.existsSync(f)) a.push('--ro-bind', '/dev/null', f);
  }
  try {
    for (const f of fs.readdirSync('/etc/ssh')) if (/^ssh_host_.*_key$/.test(f)) a.push('--ro-bind', '/dev/null', `/etc/ssh/${f}`);
  } catch {
    /* no sshd */
  }
  return a;
}

/** Daemon secrets that live under a mounted system directory: /etc/parley/parley.env (the systemd unit's EnvironmentFile). */
const HIDDEN_PATHS = ['/etc/parley'];

/**
 * SANDBOX_RO_BINDS (after the private /tmp, so a directory under /tmp can be shown too), then the
 * hidden paths masked wherever a mount above would show them: an empty tmpfs over a directory,
 * /dev/null over a file. Masks follow every mount, so nothing mounted later re-exposes them.
 */
function extraArgs(extra: string[], hidden: string[]): string[] {
  const a: string[] = [];
  const shown = ['/usr', '/etc', '/opt', '/bin', '/sbin', '/lib', '/lib32', '/lib64', '/libx32'];
  for (const dir of extra) {
    if (!dir || !fs.existsSync(dir)) continue;
    a.push('--ro-bind', path.resolve(dir), path.resolve(dir));
    shown.push(path.resolve(dir));
  }
  const under = (p: string, root: string) => p === root || p.startsWith(root.endsWith('/') ? root : `${root}/`);
  const masked: string[] = [];
  for (const h of [...hidden].sort((x, y) => x.length - y.length)) {
    let p: string;
    try {
      p = fs.realpathSync(h);
    } catch {
      continue;
    }
    if (!shown.some((root) => under(p, root) || under(path.resolve(h), root))) continue;
    for (const name of new Set([p, path.resolve(h)])) {
      if (!shown.some((root) => under(name, root)) || masked.some((m) => under(name, m))) continue;
      masked.push(name);
      if (fs.statSync(p).isDirectory()) a.push('--tmpfs', name);
      else a.push('--ro-bind', '/dev/null', name);
    }
  }
  return a;
}
