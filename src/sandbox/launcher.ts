/**
 * The per-conversation sandbox launcher: every process the agent causes (the terminal's shell,
 * setup.sh, git after the clone, stdio MCP servers) is started through `spawn()`.
 *
 * bwrap mode: ONE sandbox per conversation. A long-lived "holder" bwrap owns all of the
 * conversation's namespaces: user, pid (its init is bwrap's reaper, pid 1; pid 2 is a `cat` reading a
 * pipe the daemon holds), mount, ipc, uts, cgroup and, with SANDBOX_NETWORK=none, net. The holder
 * builds the conversation's view once: the system read-only, its own /proc and /dev, the workspace
 * read-write at /workspace, /tmp, /var/tmp and HOME from per-conversation host directories
 * (`<WORKSPACE_ROOT>/.sandbox/<id>/{tmp,home}`, 0700, never shown to another conversation, removed
 * on DELETE), the terminal's FIFOs and saved outputs under /parley. Every process of the
 * conversation JOINS all of those namespaces (util-linux `nsenter` with the namespace files, root and
 * working directory the daemon keeps open, reached through /proc/<daemon>/fd) and then runs under
 * `setsid` (a new session, as bwrap's --new-session) and `setpriv` (no_new_privs, every capability
 * dropped, SIGKILL when its parent dies, as bwrap's --die-with-parent). So `ps` in the shell shows the
 * MCP servers and setup.sh's background jobs, a server one of them starts on the sandbox's loopback
 * is reached by the others, System V IPC and the hostname are shared, and killing the holder's init
 * ends the pid namespace with everything in it. The holder has --die-with-parent: after the daemon's
 * death (kill -9 included) its init gets SIGKILL, and the namespace ends.
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
import os from 'node:os';
import path from 'node:path';
import type { Logger } from 'pino';
import { baseChildEnv } from '../workspace/child-env.js';
import { conversationIdHex, removeTree, workspacePath } from '../workspace/workspace.js';
import { detectCgroups, type CgroupBackend, type ConversationCgroup } from './cgroup.js';
import { fileURLToPath } from 'node:url';
import { ChannelFiles, FileChannel, FileOpError, type WorkspaceFiles } from './files.js';
import { findProgram } from './programs.js';
import { DiskQuota } from './disk-quota.js';
import { attachEgress, EGRESS_NET, EGRESS_RESOLV_CONF, formatAllowedNet, needsRouteLocalnet, probeEgress, type AllowedNet, type EgressHandle, type EgressTools } from './network.js';
import { PathView } from './path-view.js';
import type { ProcessLauncher } from './types.js';
import { isAlive, signalGroup } from '../process-group.js';

export type SandboxModeSetting = 'auto' | 'bwrap' | 'none';

export type SandboxNetwork = 'egress' | 'host' | 'none';

export interface SandboxSettings {
  mode: SandboxModeSetting;
  /** egress: its own namespace with user-mode networking to the outside only (network.ts); none: loopback only; host: the host's. */
  network: SandboxNetwork;
  /** SANDBOX_ALLOW_NETS: what egress may reach besides the internet. */
  allowNets?: AllowedNet[];
  memoryMb: number;
  /** All sandboxes together (SANDBOX_TOTAL_MEMORY_MB); default half of the machine's memory. */
  totalMemoryMb?: number;
  /** CPUs one conversation may use (SANDBOX_CPU); absent: no quota. */
  cpus?: number | null;
  /** Disk one conversation may use, its workspace, /tmp and HOME together (SANDBOX_DISK_MB); absent or 0: no bound. */
  diskMb?: number;
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
  /**
   * The host uid and gid sandboxes run as when the daemon is root (SANDBOX_UID/SANDBOX_GID); null
   * or absent: the daemon's own (a daemon that is not root cannot change uid).
   */
  runAs?: { uid: number; gid: number } | null;
}

export const DEFAULT_SANDBOX_SETTINGS: SandboxSettings = {
  mode: 'none',
  network: 'none',
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

export interface SandboxSpawnOptions {
  /** Working directory as a host path (inside the workspace) or a visible path. Default: the workspace. */
  cwd?: string;
  /** The complete environment (build it with `sandbox.env()`); host paths of mapped dirs are translated. */
  env: Record<string, string>;
  stdio?: StdioOptions;
  /** The workspace on the host; default: the conversation's directory under WORKSPACE_ROOT. */
  workspaceDir?: string;
  /** Keep the daemon's network namespace (ProcessLauncher.spawn). */
  hostNetwork?: boolean;
}

/** A per-conversation host directory and where the conversation's processes see it. */
export interface SandboxDir {
  host: string;
  inside: string;
}

/** What /server_info reports. */
export interface SandboxInfo {
  /** probing: the start-up probe has not decided yet (requests that need a sandbox wait for it). */
  mode: 'probing' | 'bwrap' | 'none';
  requested: SandboxModeSetting;
  /** The network in force (egress falls back to none, never to host). */
  network: SandboxNetwork;
  /** With egress: the tool, what it may reach besides the internet, the DNS forwarder. */
  egress?: { tool: string; version: string; allow: string[]; dns: string; ipv6: false };
  workspace: string;
  /** The host uid and gid the sandboxes' processes have (never 0). */
  user: { uid: number; gid: number } | null;
  limits: {
    enforced_by: 'cgroup-v2' | 'cgroup-v1' | 'rlimit' | 'none';
    memory_mb: number | null;
    /** All sandboxes together (a cgroup over all of them); null without one. */
    total_memory_mb: number | null;
    pids: number | null;
    /** CPUs per conversation (a cgroup quota); null: none (equal shares under contention with a cgroup). */
    cpus: number | null;
    file_size_mb: number | null;
    /** Disk per conversation (workspace, /tmp, HOME; measured, see README). */
    disk_mb: number | null;
    /** Conversations with a live sandbox at most (SANDBOX_MAX_LIVE; with rlimits only, also what keeps all of them within the total). */
    max_live: number;
  };
  /** Why auto fell back to plain processes. */
  warning?: string;
}

export interface SandboxOpenOptions {
  workspaceRoot: string;
  mapped?: MappedDir[];
  /** Host paths never visible inside, even under a mounted system directory (DATA_DIR: e.g. /opt/parley/data would otherwise show through the /opt mount). */
  hidden?: string[];
  log?: Logger;
  /** The daemon answers loopback requests without a key: with the host network a sandboxed agent can call it too (README, Trust model), which is logged once. */
  apiOpenOnLoopback?: boolean;
}

export class SandboxUnavailableError extends Error {
  override name = 'SandboxUnavailableError';
}

export const VISIBLE_WORKSPACE = '/workspace';
const VISIBLE_HOME = '/home/agent';
/** The terminal's FIFO directories (read-write) and its saved full outputs (read-only). */
const VISIBLE_IO = '/parley/io';
export const VISIBLE_OUTPUTS = '/parley/outputs';
/** Subdirectories of a conversation's state directory, each bound into its sandbox. */
const STATE_DIRS = ['tmp', 'home', 'io', 'outputs'];

/** SANDBOX_TOTAL_MEMORY_MB, default half of the machine's memory. */
export function totalMemoryMb(settings: Pick<SandboxSettings, 'totalMemoryMb'>): number {
  return settings.totalMemoryMb ?? Math.floor(os.totalmem() / 2 / 1024 / 1024);
}

/** SANDBOX=none: a conversation's file service process ends after this long unused. */
const PLAIN_FILES_IDLE_MS = 60_000;
/** How long a sandbox with no process started through the launcher stays up (its background jobs with it). */
const IDLE_CLOSE_MS = 10 * 60_000; // SandboxSettings.idleCloseMs
/** A holder not ready by then is killed (its joiners get an error). */
const HOLDER_START_MS = 10_000;

/** The long-lived bwrap whose namespaces every process of a conversation joins. */
interface Holder {
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

interface HolderFds {
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

/** The stdio of a joiner: the caller's three, then fd 3 = the pipe that carries the holder's fd numbers. */
function joinerStdio(stdio: StdioOptions | undefined): StdioOptions {
  if (Array.isArray(stdio) && stdio.length > 3) throw new Error('a sandboxed process gets stdin, stdout and stderr only (fd 3 carries the sandbox)');
  const base = stdio === undefined || typeof stdio === 'string' ? [stdio ?? 'pipe', stdio ?? 'pipe', stdio ?? 'pipe'] : [...stdio];
  while (base.length < 3) base.push('pipe');
  return [...base, 'pipe'] as StdioOptions;
}

export class Sandbox {
  /** probing: the start-up probe runs (after the daemon listens); then what it decided. */
  private state: 'probing' | 'bwrap' | 'none' = 'probing';
  /**
   * Resolves once the probe decided (bwrap, or plain processes under SANDBOX=auto); rejects with a
   * SandboxUnavailableError when SANDBOX=bwrap cannot be honoured. Whatever starts a process or
   * touches files waits for it.
   */
  readonly ready: Promise<void>;
  private readonly live = new Map<string, Live>();
  private readonly evictListeners = new Set<(conversationId: string) => void>();
  private readonly quotaListeners = new Set<(conversationId: string, usedBytes: number) => void>();
  private diskQuota: DiskQuota | null = null;
  /** A holder started ahead for the next conversation (see takeHolder). */
  private spare: Holder | null = null;
  private spareSeq = 0;
  private closed = false;
  /** What the probe found: bwrap, the util-linux joiners, the cgroups, the mounts, egress. */
  private bwrap: string | null = null;
  private join: JoinTools | null = null;
  private cgroups: CgroupBackend | null = null;
  private systemArgs: string[] = [];
  private extraArgs: string[] = [];
  /** Why auto fell back to plain processes, or egress to no network. */
  warning?: string;
  /** SANDBOX_NETWORK=egress in force: the tools network.ts found, and where the sandbox's resolv.conf is. */
  private egress: { tools: EgressTools; version: string; resolvConf: string } | null = null;
  /** The settings in force (egress may fall back to none). */
  settings: SandboxSettings;

  private constructor(
    settings: SandboxSettings,
    readonly workspaceRoot: string,
    private readonly mapped: MappedDir[],
    opts: SandboxOpenOptions | null,
  ) {
    this.settings = settings;
    if (!opts || settings.mode === 'none') {
      this.state = 'none';
      this.ready = Promise.resolve();
    } else {
      this.ready = this.probeAll(opts);
      this.ready.catch(() => {});
    }
  }

  /** bwrap or none, once the probe decided; probing before. */
  get mode(): 'probing' | 'bwrap' | 'none' {
    return this.state;
  }

  /** The live sandboxes the disk bound watches. */
  private quotaTargets() {
    const out: { id: string; channel: FileChannel; active: boolean }[] = [];
    for (const [id, l] of this.live) {
      const h = l.holder;
      if (h && !h.dead && h.fds) out.push({ id, channel: h.files, active: l.busy || l.procs.size > 0 });
    }
    return out;
  }

  /** A conversation over SANDBOX_DISK_MB: its listeners are told why, then every process of it is stopped. */
  private overQuota(conversationId: string, usedBytes: number): void {
    for (const fn of this.quotaListeners) fn(conversationId, usedBytes);
    void this.closeConversation(conversationId);
  }

  /** Called when a conversation goes over SANDBOX_DISK_MB, just before its processes are stopped. */
  onDiskQuota(fn: (conversationId: string, usedBytes: number) => void): () => void {
    this.quotaListeners.add(fn);
    return () => this.quotaListeners.delete(fn);
  }

  /** Plain processes, no probe (unit tests, tools used outside the daemon). */
  static none(workspaceRoot = '/'): Sandbox {
    return new Sandbox({ ...DEFAULT_SANDBOX_SETTINGS, mode: 'none' }, workspaceRoot, [], null);
  }

  /**
   * The sandbox, its probe started in the background (the daemon listens meanwhile: `ready`).
   * `bwrap` mode: `ready` rejects with a SandboxUnavailableError (one actionable line) when the probe
   * fails; `auto` falls back to plain processes with a warning; egress falls back to no network.
   */
  static start(settings: SandboxSettings, opts: SandboxOpenOptions): Sandbox {
    const mapped = (opts.mapped ?? []).map((m) => ({ host: path.resolve(m.host), inside: m.inside }));
    return new Sandbox(settings, opts.workspaceRoot, mapped, opts);
  }

  /** `start`, then its probe: a sandbox ready to use (SandboxUnavailableError thrown). */
  static async open(settings: SandboxSettings, opts: SandboxOpenOptions): Promise<Sandbox> {
    const sb = Sandbox.start(settings, opts);
    await sb.ready;
    return sb;
  }

  /** The probe (see `start`): the checks, the tools, the cgroups, egress, then a real holder. */
  private async probeAll(opts: SandboxOpenOptions): Promise<void> {
    const settings = this.settings;
    const fail = (why: string): void => {
      if (settings.mode === 'bwrap') throw new SandboxUnavailableError(`SANDBOX=bwrap but ${why}`);
      this.warning = `SANDBOX=auto: ${why}; agent processes run UNSANDBOXED as the daemon's user (set SANDBOX=none to silence this, or fix bwrap)`;
      opts.log?.warn({ sandbox: 'none' }, this.warning);
      this.state = 'none';
    };
    const bwrap = which(settings.bwrapPath ?? 'bwrap');
    if (!bwrap) {
      return fail(
        settings.bwrapPath
          ? `BWRAP_PATH=${settings.bwrapPath} does not exist: install bubblewrap (apt-get install bubblewrap) or fix BWRAP_PATH`
          : 'bwrap was not found on PATH: install bubblewrap (apt-get install bubblewrap) or set BWRAP_PATH',
      );
    }
    const tools = { nsenter: which('nsenter'), setsid: which('setsid'), setpriv: which('setpriv'), unshare: which('unshare') };
    const missing = Object.entries(tools).filter(([, p]) => !p).map(([name]) => name);
    const ip = findProgram('ip');
    if (settings.runAs && settings.network !== 'host' && !ip) return fail("ip (iproute2) not found: a sandbox's own network is set up with it (apt-get install iproute2)");
    if (missing.length > 0) {
      return fail(`${missing.join(', ')} (util-linux) not found on PATH: processes join their conversation's sandbox with them (apt-get install util-linux)`);
    }
    this.cgroups = detectCgroups({
      memoryBytes: settings.memoryMb * 1024 * 1024,
      pids: settings.pids,
      totalMemoryBytes: totalMemoryMb(settings) * 1024 * 1024,
      cpus: settings.cpus ?? null,
    });
    const hidden = [...(opts.hidden ?? []), opts.workspaceRoot, ...HIDDEN_PATHS];
    // a holder mounts what exists when it starts (the spare: at start-up), and a mapped directory
    // (the askpass helper's) may be written to only later
    for (const m of this.mapped) fs.mkdirSync(m.host, { recursive: true, mode: 0o700 });
    // egress where it works; else no network (never the host's), with one warning
    if (settings.network === 'egress') {
      const probe = await probeEgress({ runAs: settings.runAs ?? undefined });
      if (probe.usable) {
        const resolvConf = path.join(opts.workspaceRoot, '.sandbox', 'resolv.conf');
        fs.mkdirSync(path.dirname(resolvConf), { recursive: true, mode: 0o700 });
        fs.writeFileSync(resolvConf, EGRESS_RESOLV_CONF, { mode: 0o644 });
        fs.chmodSync(resolvConf, 0o644);
        this.egress = { tools: probe.tools, version: probe.version, resolvConf };
      } else {
        this.warning = `SANDBOX_NETWORK=egress: ${probe.reason}; sandboxes get no network (none)`;
        opts.log?.warn({ sandbox: 'network-none' }, this.warning);
        this.settings = { ...settings, network: 'none' };
      }
    }
    this.bwrap = bwrap;
    this.join = { ...(tools as Omit<JoinTools, 'ip'>), ip };
    this.systemArgs = systemArgs();
    this.extraArgs = extraArgs(settings.roBinds, hidden);
    this.state = 'bwrap';
    removeStaleSpares(path.join(opts.workspaceRoot, '.sandbox'));
    const probeDir = fs.mkdtempSync(path.join(opts.workspaceRoot, '.probe-'));
    try {
      const err = await this.probe(probeDir);
      if (err) {
        this.state = 'probing';
        this.bwrap = null;
        this.cgroups?.close();
        this.cgroups = null;
        return fail(err);
      }
    } finally {
      fs.rmSync(probeDir, { recursive: true, force: true });
    }
    const diskBytes = (settings.diskMb ?? 0) * 1024 * 1024;
    if (diskBytes > 0) {
      this.diskQuota = new DiskQuota(diskBytes, [VISIBLE_WORKSPACE, '/tmp', VISIBLE_HOME], () => this.quotaTargets(), (id, used) => this.overQuota(id, used));
      this.diskQuota.start();
    }
    // the first conversation finds a holder ready too
    void this.warm();
    const i = this.info();
    opts.log?.info({ sandbox: i }, `sandbox: bwrap (${bwrap}), network ${i.network}, limits by ${i.limits.enforced_by}`);
    if (opts.apiOpenOnLoopback && this.settings.network === 'host') {
      opts.log?.warn(
        { sandbox: 'api-reachable' },
        "no SESSION_API_KEY and SANDBOX_NETWORK=host: agents' sandboxed processes can call this daemon's API on loopback (every conversation, every file); set SESSION_API_KEY or SANDBOX_NETWORK=none",
      );
    }
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
      network: on || this.mode === 'probing' ? this.settings.network : 'host',
      ...(on && this.egress
        ? { egress: { tool: 'slirp4netns', version: this.egress.version, allow: (this.settings.allowNets ?? []).map(formatAllowedNet), dns: EGRESS_NET.dns, ipv6: false as const } }
        : {}),
      workspace: on ? VISIBLE_WORKSPACE : 'host path',
      user: on ? (this.settings.runAs ?? { uid: process.getuid?.() ?? -1, gid: process.getgid?.() ?? -1 }) : null,
      limits: {
        enforced_by: by,
        memory_mb: by === 'none' ? null : this.settings.memoryMb,
        total_memory_mb: this.cgroups ? totalMemoryMb(this.settings) : null,
        // RLIMIT_NPROC counts every process of the user, not of the conversation: not a pids limit
        pids: this.cgroups ? this.settings.pids : null,
        cpus: this.cgroups?.cpu ? (this.settings.cpus ?? null) : null,
        file_size_mb: on ? this.settings.fileSizeMb : null,
        disk_mb: on && this.settings.diskMb ? this.settings.diskMb : null,
        max_live: this.maxLive,
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
   * The conversation's sandbox, started (or taken from the spare) when it has none, and the
   * per-conversation directories its processes see: the terminal puts its FIFO directories under
   * `io` and its saved outputs under `outputs`. bwrap mode only.
   */
  prepare(conversationId: string): ReturnType<Sandbox['dirs']> {
    if (!this.enabled) throw new Error('prepare: the sandbox is off');
    if (this.closed) throw new Error('the sandbox launcher is closed');
    this.holderFor(conversationId, this.enter(conversationId), this.hostWorkspace(conversationId));
    return this.dirs(conversationId);
  }

  /** The directories `prepare` returns, without starting anything; `owner`: the uid and gid files made there for the sandbox get. */
  dirs(conversationId: string): { io: SandboxDir; outputs: SandboxDir; owner: SandboxSettings['runAs'] } {
    const state = this.stateDir(conversationId);
    return {
      io: { host: path.join(state, 'io'), inside: VISIBLE_IO },
      outputs: { host: path.join(state, 'outputs'), inside: VISIBLE_OUTPUTS },
      owner: this.settings.runAs ?? null,
    };
  }

  /**
   * Starts `argv` for the conversation. Returns the child (in bwrap mode the process on the host that
   * joins the sandbox, whose exit status is the command's); its stdio is the command's. In bwrap
   * mode the process joins the conversation's sandbox (started here when there is none); until the
   * sandbox is ready the child waits in its `sh`.
   */
  spawn(conversationId: string, argv: string[], opts: SandboxSpawnOptions): ChildProcess {
    if (this.closed) throw new Error('the sandbox launcher is closed');
    if (this.state === 'probing') throw new Error('the sandbox is still being set up (await sandbox.ready first)');
    if (argv.length === 0) throw new Error('empty command');
    const host = opts.workspaceDir ?? this.hostWorkspace(conversationId);
    const live = this.enter(conversationId);
    let child: ChildProcess;
    if (!this.enabled) {
      // workspaces are created on first use (a conversation that never runs anything has none)
      fs.mkdirSync(host, { recursive: true, mode: 0o700 });
      child = spawnChild(argv[0]!, argv.slice(1), {
        cwd: opts.cwd ?? host,
        env: opts.env,
        stdio: opts.stdio ?? 'pipe',
        detached: true,
      });
    } else {
      const holder = this.holderFor(conversationId, live, host);
      const view = this.pathView(holder.workspace);
      const cwd = opts.cwd ? view.toVisible(opts.cwd) : VISIBLE_WORKSPACE;
      // joiners start in /workspace (the holder's); elsewhere a `cd` resolved inside the sandbox
      const inner = cwd === VISIBLE_WORKSPACE ? argv : ['/bin/sh', '-c', 'cd -- "$0" || exit 125; exec "$@"', cwd, ...argv];
      const full = this.wrap(live.cgroup, [...this.joinArgs(), ...inner], opts.hostNetwork ? 'join-host-network' : 'join');
      child = spawnChild(full[0]!, full.slice(1), {
        env: this.translateEnv(opts.env),
        stdio: joinerStdio(opts.stdio),
        detached: true,
      });
      holder.users.add(child);
      const control = child.stdio[3] as import('node:stream').Writable | null;
      control?.on('error', () => {
        /* the child is gone */
      });
      holder.ready.then(
        () => {
          const f = holder.fds;
          if (!f) return control?.end();
          control?.end(`${f.user} ${f.pid} ${f.mnt} ${f.ipc} ${f.uts} ${f.root} ${f.cwd} ${f.cgroup ?? 'x'} ${f.net ?? 'x'}\n`);
        },
        () => control?.end(),
      );
      const release = () => {
        holder.users.delete(child);
        this.releaseHolderFds(holder);
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

  /** The live holder of the conversation, or a new one (its directories created or moved in place). */
  private holderFor(conversationId: string, live: Live, workspace: string): Holder {
    if (live.holder && !live.holder.dead) return live.holder;
    const h = (live.holder = this.takeHolder(workspace, this.stateDir(conversationId)));
    // everything that joined it dies with the namespace
    h.onDead = () => {
      if (this.live.get(conversationId) === live && live.holder === h) this.scheduleIdle(conversationId, live);
    };
    if (h.dead) h.onDead();
    return h;
  }

  /** Starts the spare holder if there is none; resolves once it is ready (benchmarks wait for it). */
  async warm(): Promise<void> {
    if (!this.enabled || this.closed || this.settings.spareHolder === false) return;
    if (!this.spare || this.spare.dead) this.spare = this.startSpare();
    await this.spare.ready.catch(() => {});
  }

  /**
   * A holder for a conversation. The spare one (started ahead, ready by now, so a new conversation's
   * first process only waits for its own join) binds directories of its own under
   * `.sandbox/.spare-<pid>-<n>/`: it is adopted by renaming them to the conversation's workspace and
   * state directory — bind mounts follow the directory, not its name. That works while the workspace
   * is missing or empty and the state directory is missing (a new conversation, or one whose
   * workspace nothing has written to yet); otherwise (a cloned repository, a sandbox started again
   * for a conversation with its /tmp and HOME) a new holder binds the conversation's directories and
   * the spare waits for the next one. A spare is in no conversation's cgroup: only its init and
   * `cat` are, which never fork; everything that joins it enters the conversation's cgroup first.
   */
  private takeHolder(workspace: string, state: string): Holder {
    const spare = this.spare && !this.spare.dead && this.spare.fds ? this.spare : null;
    if (spare && adoptDirs(spare, workspace, state)) {
      this.spare = null;
      const timer = setTimeout(() => {
        if (!this.closed && !this.spare && this.settings.spareHolder !== false) this.spare = this.startSpare();
      }, 50);
      timer.unref();
      return spare;
    }
    ownWorkspace(workspace, this.settings.runAs);
    makeStateDirs(state, this.settings.runAs);
    return this.startHolder(workspace, state);
  }

  private startSpare(): Holder {
    const dir = path.join(this.workspaceRoot, '.sandbox', `.spare-${process.pid}-${++this.spareSeq}`);
    ownWorkspace(path.join(dir, 'workspace'), this.settings.runAs);
    makeStateDirs(path.join(dir, 'state'), this.settings.runAs);
    const h = this.startHolder(path.join(dir, 'workspace'), path.join(dir, 'state'));
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
  private startHolder(workspace: string, state: string): Holder {
    const runAs = this.settings.runAs;
    const j = this.join!;
    // as root, bwrap sets the view up with the daemon's rights (every source path resolves), and its
    // first process becomes the sandbox uid at once, then makes the conversation's user namespace
    // (uid 0 inside = runAs outside) in which every process of the conversation lives
    // the first process is the conversation's file service: its stdin is a pipe only the daemon
    // writes, so it (and with it the sandbox) ends with the daemon
    const service = [process.execPath, ...HELPER_NODE_FLAGS, FILE_HELPER_INSIDE, '--root', VISIBLE_WORKSPACE];
    const command = runAs
      ? [j.setpriv, `--reuid=${runAs.uid}`, `--regid=${runAs.gid}`, '--clear-groups', '--', j.unshare, '--user', '--map-root-user', ...(this.ownNetwork ? ['--net'] : []), '--', j.setpriv, ...DROP_ALL, ...service]
      : service;
    const argv = this.wrap(null, [this.bwrap!, '--args', '4', '--', ...command], 'supervise');
    const proc = spawnChild(argv[0]!, argv.slice(1), {
      env: { PATH: baseChildEnv().PATH! },
      stdio: ['pipe', 'pipe', 'pipe', 'pipe', 'pipe'],
      detached: true,
    });
    // as root, bwrap enters the first process's directory with its capabilities dropped: the workspace is the sandbox uid's
    const chdir = runAs ? '/' : VISIBLE_WORKSPACE;
    const options = [...this.namespaceArgs(), '--info-fd', '3', ...this.viewArgs(workspace, state), '--chdir', chdir];
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
        const owner = this.settings.runAs ? firstChild(init) : init;
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
            const network = this.egress && fds.net !== null ? this.attachNetwork(fds) : Promise.resolve(null);
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
        void holder.egress?.close();
        fail(lastError(stderr) || `the sandbox ended (${signal ?? `exit code ${code}`})`);
        this.releaseHolderFds(holder);
        if (this.spare === holder) this.spare = null;
        holder.onDead?.();
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
      runAs: this.settings.runAs ?? undefined,
      allow: this.settings.allowNets ?? [],
      tools: this.egress!.tools,
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
    const j = this.join!;
    const limit = 'echo 0 > /proc/sys/user/max_user_namespaces';
    const mounts = 'for p in /proc/sys /proc/sysrq-trigger; do [ -e "$p" ] || continue; mount -n -c --bind "$p" "$p" && mount -n -c -o remount,bind,ro,nosuid,nodev,noexec "$p" || exit 1; done';
    const q = (a: string[]) => a.map((x) => `'${x}'`).join(' ');
    // as root the network namespace is the first process's, made by `unshare`: its loopback is down
    const lo = this.ownNetwork && this.settings.runAs ? ` && ${q([j.ip!, 'link', 'set', 'lo', 'up'])}` : '';
    // egress with a 127.0.0.1:PORT entry: packets from the sandbox's loopback address may leave (network.ts)
    const localnet = this.egress && needsRouteLocalnet(this.settings.allowNets ?? []) ? ' && echo 1 > /proc/sys/net/ipv4/conf/all/route_localnet' : '';
    const net = this.ownNetwork ? [`--net=/proc/${owner}/ns/net`] : [];
    const script = this.settings.runAs
      ? `${q([j.nsenter, `--user=/proc/${owner}/ns/user`, ...net, '--', '/bin/sh', '-c', limit + lo + localnet])} && ${q([j.nsenter, `--mount=/proc/${init}/ns/mnt`, '--', '/bin/sh', '-c', mounts])}`
      : q([j.nsenter, `--user=/proc/${owner}/ns/user`, '--preserve-credentials', ...net, `--mount=/proc/${init}/ns/mnt`, '--', '/bin/sh', '-c', `${limit}${localnet} && ${mounts}`]);
    return new Promise<void>((resolve, reject) => {
      const p = spawnChild('/bin/sh', ['-c', script], { env: { PATH: baseChildEnv().PATH! }, stdio: ['ignore', 'ignore', 'pipe'] });
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
  private releaseHolderFds(h: Holder): void {
    if (!h.dead || h.users.size > 0 || !h.fds) return;
    for (const fd of Object.values(h.fds)) if (fd !== null) closeFd(fd);
    h.fds = null;
  }

  /**
   * The conversation's files, through its file service: in its sandbox (started, or taken from the
   * spare, when it has none), or a plain process of the daemon's user without one. Paths as the
   * conversation sees them (`visibleWorkspace`); a host path of the workspace is translated.
   */
  files(conversationId: string, workspaceDir = this.hostWorkspace(conversationId)): WorkspaceFiles {
    const view = this.pathView(workspaceDir);
    const inner = new ChannelFiles(view.visibleRoot, () => this.fileChannel(conversationId, workspaceDir));
    return translatingFiles(inner, view);
  }

  private async fileChannel(conversationId: string, workspaceDir: string): Promise<FileChannel> {
    if (this.closed) throw new FileOpError('UNAVAILABLE', 'the sandbox launcher is closed');
    await this.ready.catch(() => {
      throw new FileOpError('UNAVAILABLE', 'the sandbox could not be set up');
    });
    if (!this.enabled) return this.plainChannel(conversationId, workspaceDir);
    const live = this.enter(conversationId);
    const holder = this.holderFor(conversationId, live, workspaceDir);
    try {
      await holder.ready;
    } catch {
      // (what bwrap said may name host paths: it is the holder's to log, not the caller's to see)
      throw new FileOpError('UNAVAILABLE', "the conversation's sandbox could not start");
    }
    live.lastUsed = Date.now();
    this.scheduleIdle(conversationId, live);
    return holder.files;
  }

  /** SANDBOX=none: a file service per conversation as a plain process, closed after a minute unused. */
  private readonly plain = new Map<string, { proc: ChildProcess; channel: FileChannel; timer: NodeJS.Timeout | null }>();

  private plainChannel(conversationId: string, workspaceDir: string): Promise<FileChannel> {
    let p = this.plain.get(conversationId);
    if (!p || !p.channel.usable) {
      fs.mkdirSync(workspaceDir, { recursive: true, mode: 0o700 });
      const proc = spawnChild(process.execPath, [...HELPER_NODE_FLAGS, FILE_HELPER, '--root', workspaceDir], {
        cwd: workspaceDir,
        env: { PATH: baseChildEnv().PATH! },
        stdio: ['pipe', 'pipe', 'ignore'],
        detached: true,
      });
      const entry: { proc: ChildProcess; channel: FileChannel; timer: NodeJS.Timeout | null } = {
        proc,
        channel: new FileChannel(proc.stdin!, proc.stdout!, () => killTree(proc)),
        timer: null,
      };
      proc.once('error', () => entry.channel.break('the file service could not be started'));
      proc.once('exit', () => {
        entry.channel.break('the file service ended');
        if (this.plain.get(conversationId) === entry) this.plain.delete(conversationId);
      });
      this.plain.set(conversationId, entry);
      p = entry;
    }
    const entry = p;
    if (entry.timer) clearTimeout(entry.timer);
    entry.timer = setTimeout(() => killTree(entry.proc), PLAIN_FILES_IDLE_MS);
    entry.timer.unref();
    return entry.channel.ready.then(
      () => entry.channel,
      (e: Error) => {
        throw new FileOpError('UNAVAILABLE', e.message);
      },
    );
  }

  /** The launcher of one conversation, for code that only starts processes (setup.sh, git, MCP servers). */
  forConversation(conversationId: string): ProcessLauncher {
    return {
      spawn: (argv, o) => this.spawn(conversationId, argv, { cwd: o.cwd, env: o.env, stdio: o.stdio, hostNetwork: o.hostNetwork }),
      env: (extra) => this.env(extra),
    };
  }

  /** Kills every process of the conversation (background ones included: the pid namespace ends) and frees its cgroup. */
  async closeConversation(conversationId: string): Promise<void> {
    const plain = this.plain.get(conversationId);
    if (plain) {
      this.plain.delete(conversationId);
      if (plain.timer) clearTimeout(plain.timer);
      killTree(plain.proc);
      await exited(plain.proc, 3000);
    }
    const l = this.live.get(conversationId);
    if (!l) return;
    this.live.delete(conversationId);
    this.diskQuota?.forget(conversationId);
    if (l.idleTimer) clearTimeout(l.idleTimer);
    const h = l.holder;
    // the init first: the kernel kills everything in its pid namespace
    if (h && !h.dead && h.init) signalPid(h.init);
    if (h) killTree(h.proc);
    for (const p of l.procs) killTree(p);
    l.cgroup?.killAll();
    await Promise.all([...l.procs, ...(h ? [h.proc] : [])].map((p) => exited(p, 3000)));
    await h?.egress?.close();
    if (l.cgroup) await this.removeCgroup(conversationId, l.cgroup);
  }

  /** DELETE: closes the sandbox and removes the conversation's /tmp and HOME from the host. */
  async removeConversation(conversationId: string): Promise<void> {
    await this.closeConversation(conversationId);
    await removeTree(this.stateDir(conversationId)).catch(() => {});
  }

  async close(): Promise<void> {
    this.closed = true;
    this.diskQuota?.stop();
    const spare = this.spare;
    this.spare = null;
    if (spare) {
      if (!spare.dead && spare.init) signalPid(spare.init);
      killTree(spare.proc);
    }
    await Promise.all([...new Set([...this.live.keys(), ...this.plain.keys()])].map((id) => this.closeConversation(id)));
    if (spare) {
      await exited(spare.proc, 3000);
      await spare.egress?.close();
    }
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

  /**
   * SANDBOX_MAX_LIVE; with rlimits only (no cgroup to bound all sandboxes together), also no more
   * live sandboxes than the total memory holds at SANDBOX_MEMORY_MB each.
   */
  get maxLive(): number {
    const max = this.settings.maxLive;
    if (!this.enabled || this.cgroups) return max;
    const fit = Math.max(1, Math.floor(totalMemoryMb(this.settings) / this.settings.memoryMb));
    return max <= 0 ? fit : Math.min(max, fit);
  }

  private evictIfNeeded(except: string): void {
    const max = this.maxLive;
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
   * One `sh` around a joiner or a holder: the file size limit (ulimit -f, 512-byte blocks in POSIX sh), the
   * data limit when there is no cgroup (ulimit -d, KiB), and the cgroup join before exec, so every
   * process of the sandbox is counted from its first fork. A joiner (`join`) then reads the numbers of
   * the daemon's fds on the holder from fd 3 (written once the holder is ready; nothing when it
   * failed) and execs `nsenter` with them (/proc/<daemon>/fd/<n>: the holder's pid is never looked up
   * again, so a reused pid cannot put a process in another sandbox).
   *
   * A holder (`supervise`) is not exec'd but run under the `sh`, which stays as the supervisor of its
   * process group: bwrap's first child waits on an eventfd until bwrap's parent has set it up, so a
   * bwrap parent that dies early (SIGKILL by its --die-with-parent when the daemon dies, SIGPIPE
   * writing --info-fd to a dead daemon) leaves that child blocked forever, with a pid namespace and
   * no parent. The supervisor gets SIGTERM when the daemon dies (setpriv --pdeathsig; a daemon gone
   * before that was set shows as a changed $PPID), and when bwrap exits for any reason it kills the
   * whole group, that child included (before its setsid it is in the group).
   */
  private wrap(cgroup: ConversationCgroup | null, argv: string[], mode: 'join' | 'join-host-network' | 'supervise'): string[] {
    let script = `ulimit -f ${this.settings.fileSizeMb * 2048} || exit 125; `;
    if (!this.cgroups) script += `ulimit -d ${this.settings.memoryMb * 1024} || exit 125; `;
    script += 'n=$1; shift; while [ "$n" -gt 0 ]; do echo $$ > "$1" || exit 125; shift; n=$((n-1)); done; ';
    if (mode !== 'supervise') {
      const d = `/proc/${process.pid}/fd`;
      script +=
        'read -r u p m i t r w c n <&3 || { echo "parley: the conversation\'s sandbox is not running" >&2; exit 125; }; exec 3<&-; ' +
        `o="--user=${d}/$u --pid=${d}/$p --mount=${d}/$m --ipc=${d}/$i --uts=${d}/$t --root=${d}/$r --wd=${d}/$w"; ` +
        `[ "$c" = x ] || o="$o --cgroup=${d}/$c"; ${mode === 'join' ? `[ "$n" = x ] || o="$o --net=${d}/$n"; ` : ''}` +
        `exec ${this.join!.nsenter} $o "$@"`;
    } else {
      // (an asynchronous command's stdin is /dev/null before its redirections: pass the pipe on fd 9)
      // (umask 022 for bwrap: the directories it makes on the way to a mount point must be enterable
      // by the sandbox's uid; the conversation's own processes keep the daemon's 077)
      script += `[ "$PPID" = ${process.pid} ] || exit 125; trap 'kill -KILL 0' TERM; umask 022; exec 9<&0; "$@" <&9 9<&- & exec 9<&-; wait $!; kill -KILL 0`;
    }
    const files = cgroup?.procsFiles ?? [];
    const sh = ['/bin/sh', '-c', script, 'sh', String(files.length), ...files, ...argv];
    return mode === 'supervise' ? [this.join!.setpriv, '--pdeathsig', 'TERM', '--', ...sh] : sh;
  }

  /**
   * nsenter's arguments after the namespaces, then the command: the daemon's uid, which is 0 inside
   * (--preserve-credentials: nsenter would otherwise set it itself), `setsid` starts a new session
   * (no terminal of the host's to inject into), `setpriv` sets no_new_privs, SIGKILL when nsenter
   * dies, and drops every capability entering the user namespace gave (uid 0 would keep them
   * across exec).
   */
  private joinArgs(): string[] {
    const j = this.join!;
    // as root, nsenter clears the groups and becomes uid 0 of the user namespace: runAs on the host
    const creds = this.settings.runAs ? [] : ['--preserve-credentials'];
    return [...creds, '--', j.setsid, j.setpriv, '--pdeathsig', 'KILL', ...DROP_ALL];
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
    return this.settings.network !== 'host';
  }

  private namespaceArgs(): string[] {
    // as root: no user namespace of bwrap's; its command keeps only what it needs to become runAs
    const user = this.settings.runAs
      ? ['--cap-drop', 'ALL', '--cap-add', 'CAP_SETUID', '--cap-add', 'CAP_SETGID']
      : ['--unshare-user', '--uid', '0', '--gid', '0', '--cap-drop', 'ALL'];
    return [
      ...user,
      '--unshare-pid',
      '--unshare-ipc',
      '--unshare-uts',
      '--unshare-cgroup-try',
      ...(this.ownNetwork && !this.settings.runAs ? ['--unshare-net'] : []),
      '--die-with-parent',
      '--new-session',
      '--hostname',
      'sandbox',
    ];
  }

  /** The conversation's view, mounted once by its holder. */
  private viewArgs(hostWorkspace: string, state: string): string[] {
    const tmp = path.join(state, 'tmp');
    const a = [
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
      path.join(state, 'io'),
      VISIBLE_IO,
      '--ro-bind',
      path.join(state, 'outputs'),
      VISIBLE_OUTPUTS,
      '--bind',
      hostWorkspace,
      VISIBLE_WORKSPACE,
    ];
    for (const m of this.mapped) if (fs.existsSync(m.host)) a.push('--ro-bind', m.host, m.inside);
    a.push('--ro-bind', FILE_HELPER, FILE_HELPER_INSIDE);
    // egress: the tool's DNS forwarder (on the host's resolv.conf's target, when it is a link into /run)
    const resolv = resolvConfTarget();
    if (this.egress && resolv) a.push('--ro-bind', this.egress.resolvConf, resolv);
    return withParentDirs(a);
  }
}

/** bwrap's mount operations and how many arguments each takes (the destination is the last). */
const MOUNT_OPS: Record<string, number> = { '--ro-bind': 2, '--bind': 2, '--symlink': 2, '--tmpfs': 1, '--proc': 1, '--dev': 1 };

/**
 * The mount operations with the directories on the way to each destination made first, 0755:
 * bwrap makes missing ones 0700 and the daemon's (root's) when it runs as root, which the
 * sandbox's uid could not enter (/parley, /home, the parents of a SANDBOX_RO_BINDS directory).
 */
function withParentDirs(ops: string[]): string[] {
  const made = new Set<string>(['/']);
  const out: string[] = [];
  for (let i = 0; i < ops.length; ) {
    const op = ops[i]!;
    const n = MOUNT_OPS[op];
    if (n === undefined) throw new Error(`withParentDirs: unexpected bwrap option ${op}`);
    const dest = ops[i + n]!;
    const parents: string[] = [];
    for (let p = path.posix.dirname(dest); !made.has(p); p = path.posix.dirname(p)) parents.unshift(p);
    for (const p of parents) {
      out.push('--perms', '0755', '--dir', p);
      made.add(p);
    }
    out.push(...ops.slice(i, i + n + 1));
    made.add(dest);
    i += n + 1;
  }
  return out;
}

/** How a process joins its conversation's sandbox (util-linux). */
interface JoinTools {
  nsenter: string;
  setsid: string;
  setpriv: string;
  /** As root: the holder makes the conversation's user namespace with it. */
  unshare: string;
  /** As root with a network of the sandbox's own: its loopback is brought up with it (iproute2). */
  ip: string | null;
}

/** setpriv's options that leave a process no capability and no way to gain one. */
const DROP_ALL = ['--no-new-privs', '--inh-caps=-all', '--ambient-caps=-all', '--bounding-set=-all', '--'];
/** The holder's first process: a line once it runs (the view is mounted), then `cat` on a pipe only the daemon writes, so it ends with the daemon. */
/** file-helper.mjs in the checkout, or next to the build (scripts/build.mjs copies it into dist/). */
const FILE_HELPER = fileURLToPath(new URL('./file-helper.mjs', import.meta.url));
/** Where a sandbox sees it. */
const FILE_HELPER_INSIDE = '/parley/file-helper.mjs';

/** The file service's node: small heaps (what it holds is one request's bytes, outside the heap). */
const HELPER_NODE_FLAGS = ['--max-old-space-size=64', '--max-semi-space-size=1'];

/** The only child of `pid` (host pid namespace), or null. */
function firstChild(pid: number): number | null {
  try {
    const first = fs.readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/)[0];
    return first ? Number(first) : null;
  } catch {
    return null;
  }
}

/**
 * A conversation's state directory: its /tmp, HOME, the terminal's FIFOs and saved outputs (0700
 * each). With a sandbox uid (the daemon is root), /tmp and HOME are that uid's; the FIFO and output
 * directories stay the daemon's, which the sandbox may only enter (it cannot put anything there).
 */
function makeStateDirs(state: string, runAs: SandboxSettings['runAs']): void {
  for (const d of ['', ...STATE_DIRS]) fs.mkdirSync(path.join(state, d), { recursive: true, mode: 0o700 });
  if (!runAs) return;
  for (const d of ['tmp', 'home']) fs.lchownSync(path.join(state, d), runAs.uid, runAs.gid);
  for (const d of ['io', 'outputs']) fs.chmodSync(path.join(state, d), 0o711);
}

/** The workspace directory (not what is in it) belongs to the sandbox uid, so its processes can write there. */
function ownWorkspace(dir: string, runAs: SandboxSettings['runAs']): void {
  fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
  if (runAs) fs.lchownSync(dir, runAs.uid, runAs.gid);
}

/**
 * Gives a spare holder's directories to a conversation: its workspace renamed onto the
 * conversation's (missing, or an empty directory: rename replaces it), its state directory onto the
 * conversation's (missing). False, with everything as it was, when either is in use.
 */
function adoptDirs(spare: Holder, workspace: string, state: string): boolean {
  const dir = path.dirname(spare.state);
  try {
    fs.mkdirSync(path.dirname(workspace), { recursive: true, mode: 0o700 });
    fs.renameSync(spare.workspace, workspace);
  } catch {
    return false;
  }
  try {
    if (fs.existsSync(state)) throw new Error('in use');
    fs.renameSync(spare.state, state);
  } catch {
    try {
      fs.renameSync(workspace, spare.workspace);
      fs.mkdirSync(workspace, { mode: 0o700 });
    } catch {
      /* the spare's workspace stays the conversation's: the spare is not reused */
    }
    return false;
  }
  spare.workspace = workspace;
  spare.state = state;
  fs.rmSync(dir, { recursive: true, force: true });
  return true;
}

/** Spare holders' directories of daemons that are gone (a crash leaves them). */
function removeStaleSpares(dir: string): void {
  let names: string[];
  try {
    names = fs.readdirSync(dir);
  } catch {
    return;
  }
  for (const name of names) {
    const m = /^\.spare-(\d+)-\d+$/.exec(name);
    if (!m) continue;
    const pid = Number(m[1]);
    if (pid !== process.pid && !isAlive(pid)) fs.rmSync(path.join(dir, name), { recursive: true, force: true });
  }
}

/** /usr and the /bin, /lib… entries as they are on the host. */
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
  // the file service runs on the daemon's node: shown where it is when no mount above shows it
  const node = fs.realpathSync(process.execPath);
  if (!['/usr/', '/bin/', '/sbin/', '/lib', '/opt/'].some((root) => node.startsWith(root))) a.push('--ro-bind', node, process.execPath);
  return a;
}

/** Where /etc/resolv.conf leads on the host (systemd-resolved's stub in /run, usually); null without one (nothing to cover). */
function resolvConfTarget(): string | null {
  try {
    return fs.realpathSync('/etc/resolv.conf');
  } catch {
    return null;
  }
}

/** Read-only system mounts: /usr, /etc, /opt and the /bin, /lib… entries as they are on the host. */
function systemArgs(): string[] {
  const a = programArgs();
  // /sys read-only (tools read the machine's shape there; nothing in it is written)
  for (const dir of ['/etc', '/opt', '/sys']) if (fs.existsSync(dir)) a.push('--ro-bind', dir, dir);
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

/**
 * Accepts host paths of the workspace too (callers that name files by the workspace's host path,
 * e.g. the side channels' clients) and translates them to what the conversation sees; answers
 * carry the conversation's paths.
 */
function translatingFiles(inner: WorkspaceFiles, view: PathView): WorkspaceFiles {
  const t = (p: string) => view.toVisible(p);
  return {
    root: inner.root,
    visible: (p) => t(p),
    stat: (p) => inner.stat(t(p)),
    realpath: (p) => inner.realpath(t(p)),
    read: (p, max) => inner.read(t(p), max),
    head: (p, max) => inner.head(t(p), max),
    write: (p, data, opts) => inner.write(t(p), data, opts),
    remove: (p) => inner.remove(t(p)),
    mkdirs: (p) => inner.mkdirs(t(p)),
    list: (p, opts) => inner.list(t(p), opts),
    usage: (paths) => inner.usage(paths.map(t)),
    clear: (p) => inner.clear(t(p)),
  };
}

/** The line of a failed process's stderr that says why: the last error line (node prints its version after the error), else the last line. */
function lastError(stderr: string): string {
  const lines = stderr.trim().split('\n').map((l) => l.trim()).filter(Boolean);
  return [...lines].reverse().find((l) => /^(bwrap|Error|[A-Za-z]*Error):|rror:/.test(l)) ?? lines.at(-1) ?? '';
}
