/**
 * The per-conversation sandbox launcher: every process the agent causes (the terminal's shell,
 * setup.sh, git, stdio MCP servers, /api/bash) is started through `spawn()`, and every file
 * operation for a conversation goes through `files()` (its file service, inside its sandbox).
 *
 * bwrap mode: ONE sandbox per conversation, held by a long-lived holder (holders.ts) that owns all
 * of the conversation's namespaces and mounts its view once (view.ts). Every process of the
 * conversation joins all of them (join.ts: nsenter with the daemon's fds on the namespace files,
 * setsid, setpriv with every capability dropped). As root the sandbox is SANDBOX_UID, never root.
 * All processes of one conversation share one cgroup under one parent (cgroup.ts), so the limits
 * are per conversation and in sum. The holder lives while the conversation uses it: it is closed by
 * interrupt, DELETE, shutdown, SANDBOX_MAX_LIVE (the least recently used idle one), going over
 * SANDBOX_DISK_MB (disk-quota.ts), or after SANDBOX_IDLE_CLOSE_MS with no process started through
 * the launcher; the next use starts a new one.
 *
 * The probe (bwrap, the joiners, cgroups, egress, then a real holder) runs after the daemon listens:
 * `ready` says when it decided.
 *
 * none mode: plain processes in their own process group, with the same built environment (never
 * the daemon's) and the same kill-all bookkeeping; the file service is a plain process too.
 *
 * Paths: callers pass host paths (cwd, environment values under a mapped directory) or the
 * conversation's; they are translated to what the sandbox sees.
 *
 * Why one file of this size: it holds the per-conversation state (live processes, holder, cgroup, idle
 * timer) and the transitions between them; the probe (probe.ts), holders (holders.ts), eviction rule
 * (eviction.ts), joiner arguments (join.ts), file services (files.ts, plain-files.ts) are their own modules.
 */
import type { ChildProcess, StdioOptions } from 'node:child_process';
import { childProcess } from '../builtins.js';
import fs from 'node:fs';
import path from 'node:path';
import { baseChildEnv } from './child-env.js';
import { conversationIdHex, removeTree, workspacePath } from './workspace-dir.js';
import type { CgroupBackend, ConversationCgroup } from './cgroup.js';
import { DiskQuota } from './disk-quota.js';
import { evictionVictims, liveCap, type EvictionCandidate } from './eviction.js';
import { ChannelFiles, FileOpError, translatingFiles, type FileChannel, type WorkspaceFiles } from './files.js';
import type { Holder, Holders } from './holders.js';
import { joinArgs, wrapCommand, type JoinTools } from './join.js';
import { EGRESS_NET, formatAllowedNet } from './network.js';
import { PathView } from './path-view.js';
import { exited, killTree, signalPid } from './processes.js';
import { PlainFileServices } from './plain-files.js';
import { probeTools } from './probe.js';
import {
  DEFAULT_SANDBOX_SETTINGS,
  SandboxUnavailableError,
  VISIBLE_HOME,
  VISIBLE_IO,
  VISIBLE_OUTPUTS,
  VISIBLE_WORKSPACE,
  totalMemoryMb,
  type MappedDir,
  type SandboxInfo,
  type SandboxOpenOptions,
  type SandboxSettings,
  type SandboxSpawnOptions,
} from './settings.js';
import type { ProcessLauncher, ShellDirs, ShellSandbox } from './types.js';

export * from './settings.js';

/** Why a conversation's processes were stopped for disk (onDiskQuota). */
export type DiskStop = 'quota' | 'disk-full';

/** How long a sandbox with no process started through the launcher stays up (its background jobs with it). */
const IDLE_CLOSE_MS = 10 * 60_000; // SandboxSettings.idleCloseMs
interface Live {
  procs: Set<ChildProcess>;
  busy: boolean;
  lastUsed: number;
  cgroup: ConversationCgroup | null;
  holder: Holder | null;
  idleTimer: NodeJS.Timeout | null;
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

export class Sandbox implements ShellSandbox {
  /** probing: the start-up probe runs (after the daemon listens); then what it decided. */
  private state: 'probing' | 'bwrap' | 'none' = 'probing';
  /** The probe's outcome: see `ready`. */
  private readonly probed: Promise<void>;
  private readonly live = new Map<string, Live>();
  private readonly evictListeners = new Set<(conversationId: string) => void>();
  private readonly quotaListeners = new Set<(conversationId: string, usedBytes: number, why: DiskStop) => void>();
  private readonly faultListeners = new Set<(conversationId: string, reason: string) => void>();
  private diskQuota: DiskQuota | null = null;
  private closed = false;
  /** What the probe found: the util-linux joiners, the cgroups, and the holders built with them (bwrap). */
  private join: JoinTools | null = null;
  private cgroups: CgroupBackend | null = null;
  private holders: Holders | null = null;
  /** SANDBOX_NETWORK=egress in force: slirp4netns's version (the rest is the holders'). */
  private egressVersion: string | null = null;
  /** Why auto fell back to plain processes, or egress to no network. */
  warning?: string;
  /** The settings in force (egress may fall back to none). */
  settings: SandboxSettings;

  private readonly log: SandboxOpenOptions['log'];
  /** The probe has decided (ready settled): until then /server_info says probing, also while a holder is tried. */
  private decided = false;
  /** Opens the gate of a deferred probe. */
  private releaseProbe: (() => void) | null = null;

  private constructor(
    settings: SandboxSettings,
    readonly workspaceRoot: string,
    private readonly mapped: MappedDir[],
    opts: SandboxOpenOptions | null,
  ) {
    this.settings = settings;
    this.log = opts?.log;
    if (!opts || settings.mode === 'none') {
      this.state = 'none';
      this.decided = true;
      this.probed = Promise.resolve();
    } else {
      const gate = opts.deferProbe ? new Promise<void>((resolve) => (this.releaseProbe = resolve)) : Promise.resolve();
      this.probed = gate.then(() => this.probeAll(opts)).finally(() => (this.decided = true));
      this.probed.catch(() => {});
    }
  }

  /**
   * Resolves once the probe decided (bwrap, or plain processes under SANDBOX=auto); rejects with a
   * SandboxUnavailableError when SANDBOX=bwrap cannot be honoured. Whatever starts a process or
   * touches files waits for it; asking for it starts a deferred probe at once (something needs the
   * sandbox now).
   */
  get ready(): Promise<void> {
    this.startProbe();
    return this.probed;
  }

  /** The probe's outcome without starting a deferred probe (the daemon exits when it fails). */
  get outcome(): Promise<void> {
    return this.probed;
  }

  /** Starts a deferred probe (`deferProbe`); nothing when it started already. */
  startProbe(): void {
    this.releaseProbe?.();
    this.releaseProbe = null;
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

  /** A conversation over SANDBOX_DISK_MB (or the largest on a full disk): its listeners are told why, then every process of it is stopped. */
  private overQuota(conversationId: string, usedBytes: number, why: DiskStop = 'quota'): void {
    for (const fn of this.quotaListeners) fn(conversationId, usedBytes, why);
    void this.closeConversation(conversationId);
  }

  /**
   * Called when a conversation's processes are stopped for disk: over SANDBOX_DISK_MB (`quota`), or
   * as the one using the most of a disk that is full (`disk-full`), just before they are stopped.
   */
  onDiskQuota(fn: (conversationId: string, usedBytes: number, why: DiskStop) => void): () => void {
    this.quotaListeners.add(fn);
    return () => this.quotaListeners.delete(fn);
  }

  /**
   * Called when a conversation's file service broke the protocol or missed a deadline (files.ts):
   * its sandbox is closed right after (the next use starts a new one); `reason` is the daemon's words.
   */
  onSandboxFault(fn: (conversationId: string, reason: string) => void): () => void {
    this.faultListeners.add(fn);
    return () => this.faultListeners.delete(fn);
  }

  /** What comes out of a sandbox is hostile input: a violation ends that sandbox only, and its conversation is told. */
  private sandboxFault(conversationId: string, reason: string): void {
    this.log?.warn({ conversation_id: conversationId, reason }, "a conversation's sandbox broke the file service's protocol: it is closed");
    for (const fn of this.faultListeners) fn(conversationId, reason);
    void this.closeConversation(conversationId);
  }

  /**
   * The disk the daemon shares with the sandboxes is full (the store's disk watch says so, once a
   * second while it lasts): the live conversation using the most disk is stopped, so the agents'
   * writes go before the daemon's own (its journal has a reserve for the meantime).
   */
  async relieveDisk(): Promise<void> {
    if (this.relieving || !this.enabled) return;
    this.relieving = true;
    try {
      let top: { id: string; bytes: number } | null = null;
      for (const t of this.quotaTargets()) {
        const r = await t.channel.request({ op: 'usage', paths: [VISIBLE_WORKSPACE, '/tmp', VISIBLE_HOME], ms: 5000 }, null).catch(() => null);
        const bytes = Number(r?.header.bytes) || 0;
        if (!top || bytes > top.bytes) top = { id: t.id, bytes };
      }
      if (top && top.bytes > 0) this.overQuota(top.id, top.bytes, 'disk-full');
    } finally {
      this.relieving = false;
    }
  }
  private relieving = false;

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

  /** The probe (see `start`): the checks, the tools, the cgroups, egress (probe.ts), then a real holder. */
  private async probeAll(opts: SandboxOpenOptions): Promise<void> {
    const settings = this.settings;
    const fail = (why: string): void => {
      if (settings.mode === 'bwrap') throw new SandboxUnavailableError(`SANDBOX=bwrap but ${why}`);
      this.warning = `SANDBOX=auto: ${why}; agent processes run UNSANDBOXED as the daemon's user (set SANDBOX=none to silence this, or fix bwrap)`;
      // a daemon stopped while it probed: the probe failed because of the stop, nothing to tell
      if (!this.closed) opts.log?.warn({ sandbox: 'none' }, this.warning);
      this.state = 'none';
    };
    if (this.closed) {
      this.state = 'none';
      return;
    }
    const found = await probeTools(settings, opts, this.mapped);
    if ('fail' in found) return fail(found.fail);
    const { bwrap } = found;
    this.cgroups = found.cgroups;
    this.join = found.join;
    this.holders = found.holders;
    this.egressVersion = found.egressVersion;
    this.settings = found.settings;
    if (found.warning) this.warning = found.warning;
    this.state = 'bwrap';
    const probeDir = fs.mkdtempSync(path.join(opts.workspaceRoot, '.probe-'));
    try {
      const err = await this.probe(probeDir);
      if (err) {
        this.state = 'probing';
        void found.holders.close();
        this.holders = null;
        this.egressVersion = null;
        this.cgroups?.close();
        this.cgroups = null;
        return fail(err);
      }
    } finally {
      fs.rmSync(probeDir, { recursive: true, force: true });
    }
    const diskBytes = (settings.diskMb ?? 0) * 1024 * 1024;
    if (diskBytes > 0) {
      this.diskQuota = new DiskQuota(
        diskBytes,
        [VISIBLE_WORKSPACE, '/tmp', VISIBLE_HOME],
        () => this.quotaTargets(),
        (id, used) => this.overQuota(id, used),
      );
      this.diskQuota.start();
    }
    // the first conversation finds a holder ready too
    void this.warm();
    this.decided = true;
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
      const holderFailed = live?.holder?.ready.then(
        () => null,
        (e: Error) => e.message,
      );
      return await new Promise<string | null>((resolve) => {
        child.on('error', (e) => resolve(`bwrap could not be started (${e.message})`));
        child.on('close', async (code) => {
          if (code === 0) return resolve(null);
          const line = (await holderFailed) ?? stderr.trim().split('\n').pop() ?? '';
          let hint = '';
          if (/user namespace|Operation not permitted|setting up uid map|No permissions|Permission denied/i.test(line)) {
            hint =
              ' (unprivileged user namespaces are disabled or blocked: sysctl kernel.unprivileged_userns_clone=1, or an AppArmor profile for bwrap on Ubuntu 24.04+, or systemd RestrictNamespaces)';
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
      mode: this.decided ? this.mode : 'probing',
      requested: this.settings.mode,
      network: on || this.mode === 'probing' ? this.settings.network : 'host',
      ...(on && this.egressVersion
        ? {
            egress: {
              tool: 'slirp4netns',
              version: this.egressVersion,
              allow: (this.settings.allowNets ?? []).map(formatAllowedNet),
              dns: EGRESS_NET.dns,
              ipv6: false as const,
            },
          }
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
  prepare(conversationId: string): ShellDirs {
    if (!this.enabled) throw new Error('prepare: the sandbox is off');
    if (this.closed) throw new Error('the sandbox launcher is closed');
    this.holderFor(conversationId, this.enter(conversationId), this.hostWorkspace(conversationId));
    return this.dirs(conversationId);
  }

  /** The directories `prepare` returns, without starting anything; `owner`: the uid and gid files made there for the sandbox get. */
  dirs(conversationId: string): ShellDirs {
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
      child = childProcess().spawn(argv[0]!, argv.slice(1), {
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
      const full = wrapCommand(
        { settings: this.settings, join: this.join!, hasCgroups: this.cgroups !== null },
        live.cgroup,
        [...joinArgs(this.settings, this.join!), ...inner],
        opts.hostNetwork ? 'join-host-network' : 'join',
      );
      child = childProcess().spawn(full[0]!, full.slice(1), {
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
        this.holders?.release(holder);
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
    const h = (live.holder = this.holders!.take(workspace, this.stateDir(conversationId)));
    // (also once the holder died: a service that ended in the middle of an answer is told after its exit)
    h.files.onFault = (why) => {
      if (live.holder === h) this.sandboxFault(conversationId, why);
    };
    // everything that joined it dies with the namespace
    h.onDead = () => {
      if (this.live.get(conversationId) === live && live.holder === h) this.scheduleIdle(conversationId, live);
    };
    if (h.dead) h.onDead();
    return h;
  }

  /** Starts the spare holder if there is none; resolves once it is ready (benchmarks wait for it). */
  async warm(): Promise<void> {
    if (this.closed) return;
    await this.holders?.warm();
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
    if (!this.enabled) return this.plain.channel(conversationId, workspaceDir);
    // a holder that died starting (or was closed meanwhile) is replaced once
    for (let attempt = 0; ; attempt++) {
      const live = this.enter(conversationId);
      const holder = this.holderFor(conversationId, live, workspaceDir);
      try {
        await holder.ready;
      } catch (e) {
        if (attempt === 0 && !this.closed) continue;
        // (what bwrap said may name host paths: the log has it, not the caller)
        this.log?.warn({ conversation_id: conversationId, err: (e as Error).message }, "a conversation's sandbox could not start");
        throw new FileOpError('UNAVAILABLE', "the conversation's sandbox could not start");
      }
      live.lastUsed = Date.now();
      this.scheduleIdle(conversationId, live);
      return holder.files;
    }
  }

  /** SANDBOX=none: a file service per conversation as a plain process. */
  private readonly plain = new PlainFileServices((id, why) => this.sandboxFault(id, why));

  /** The launcher of one conversation, for code that only starts processes (setup.sh, git, MCP servers). */
  forConversation(conversationId: string): ProcessLauncher {
    return {
      spawn: (argv, o) => this.spawn(conversationId, argv, { cwd: o.cwd, env: o.env, stdio: o.stdio, hostNetwork: o.hostNetwork }),
      env: (extra) => this.env(extra),
    };
  }

  /** Kills every process of the conversation (background ones included: the pid namespace ends) and frees its cgroup. */
  async closeConversation(conversationId: string): Promise<void> {
    await this.plain.close(conversationId);
    const l = this.live.get(conversationId);
    if (!l) return;
    this.live.delete(conversationId);
    this.diskQuota?.forget(conversationId);
    if (l.idleTimer) clearTimeout(l.idleTimer);
    const h = l.holder;
    // closed here: what its file service does from now on is no fault of it
    h?.files.break("the conversation's sandbox was closed");
    // the init first: the kernel kills everything in its pid namespace
    if (h && !h.dead && h.init) signalPid(h.init);
    if (h) killTree(h.proc);
    for (const p of l.procs) killTree(p);
    l.cgroup?.killAll();
    await Promise.all([...l.procs, ...(h ? [h.proc] : [])].map((p) => exited(p, 3000)));
    await h?.egress?.close();
    if (l.cgroup) await this.removeCgroup(conversationId, l.cgroup);
  }

  /**
   * Closes the conversation's sandbox now when no process started through the launcher runs in it
   * (the terminal's shell was closed for being idle; an MCP server would keep it): an idle
   * conversation then costs no process. Its background jobs go with it.
   */
  async closeIfIdle(conversationId: string): Promise<void> {
    const l = this.live.get(conversationId);
    if (!l || l.busy || l.procs.size > 0) return;
    await this.closeConversation(conversationId);
  }

  /**
   * Starts the conversation's sandbox in the background when it has none (a run begins: the holder
   * comes up while the LLM answers, so the first command does not wait for it).
   */
  prewarm(conversationId: string): void {
    // (a conversation that never ran anything has no workspace: its first command takes the spare)
    if (!this.enabled || this.closed || this.live.get(conversationId)?.holder || !fs.existsSync(this.hostWorkspace(conversationId))) return;
    const live = this.enter(conversationId);
    this.holderFor(conversationId, live, this.hostWorkspace(conversationId));
    this.scheduleIdle(conversationId, live);
  }

  /** DELETE: closes the sandbox and removes the conversation's /tmp and HOME from the host. */
  async removeConversation(conversationId: string): Promise<void> {
    this.diskQuota?.remove(conversationId);
    await this.closeConversation(conversationId);
    await removeTree(this.stateDir(conversationId)).catch(() => {});
  }

  async close(): Promise<void> {
    this.closed = true;
    this.startProbe(); // a deferred probe that never started ends at once (ready resolves: nothing to run)
    this.diskQuota?.stop();
    const spare = this.holders?.close();
    await Promise.all([...new Set([...this.live.keys(), ...this.plain.ids()])].map((id) => this.closeConversation(id)));
    await spare;
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

  /** SANDBOX_MAX_LIVE, bounded by what the memory holds when no cgroup bounds the sandboxes together. */
  get maxLive(): number {
    if (!this.enabled) return this.settings.maxLive;
    return liveCap(this.settings.maxLive, this.cgroups !== null, totalMemoryMb(this.settings), this.settings.memoryMb);
  }

  private evictIfNeeded(except: string): void {
    const candidates = [...this.live.entries()].map(
      ([id, l]) =>
        [id, { busy: l.busy, lastUsed: l.lastUsed, active: l.procs.size > 0 || (l.holder !== null && !l.holder.dead) }] as [string, EvictionCandidate],
    );
    for (const id of evictionVictims(candidates, except, this.maxLive)) {
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
      for (const m of this.mapped) if (val === m.host || val.startsWith(`${m.host}/`)) val = m.inside + val.slice(m.host.length);
      out[k] = val;
    }
    return out;
  }
}
