/**
 * The sandboxes of one daemon, host-wide: the start-up probe and readiness, what /server_info says,
 * the holders' pool, which live sandbox to close to make room (SANDBOX_MAX_LIVE), the disk bound
 * and disk relief, and shutdown. Each conversation's sandbox is a handle (conversation-sandbox.ts:
 * spawn, files, env, paths, close); the methods taking a conversation id below reach it through
 * `conversation(id)`.
 *
 * bwrap mode: one sandbox per conversation, held by a long-lived holder (holders.ts,
 * holder-launch.ts) that owns all of the conversation's namespaces, its cgroup and (root daemon)
 * its disk, and mounts its view once (view.ts); every process of the conversation joins it
 * (join.ts). As root the sandbox is SANDBOX_UID (its file service SANDBOX_SERVICE_UID), never root.
 * A holder lives while the conversation uses it: it is closed by interrupt, DELETE, shutdown,
 * SANDBOX_MAX_LIVE (the least recently used idle one), the disk bound, or SANDBOX_IDLE_CLOSE_MS with
 * no process started through it; the next use starts a new one.
 *
 * The probe (probe.ts: bwrap, the joiners, cgroups, disks, egress; then a real holder here) runs
 * after the daemon listens: `ready` says when it decided.
 *
 * none mode: plain processes in their own process group, with the same built environment (never
 * the daemon's); the file service is a plain process too.
 */
import type { ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { baseChildEnv } from './child-env.js';
import type { CgroupBackend } from './cgroup.js';
import { ConversationSandbox, sandboxEnv, shellDirs, stateDirOf, type SandboxHost } from './conversation-sandbox.js';
import { copyWorkspaceOut, imageBytes, type Disks } from './disk-image.js';
import { DiskQuota, unlinkedBytes, walkedBytes, type QuotaTarget } from './disk-quota.js';
import { evictionVictims, liveCap, type EvictionCandidate } from './eviction.js';
import { ChannelFiles, FileOpError, translatingFiles, type WorkspaceFiles } from './files.js';
import type { Holders } from './holders.js';
import { PathView } from './path-view.js';
import { PlainFileServices } from './plain-files.js';
import { allEnded, descendantsOfSelf, endHelpers } from './processes.js';
import { sandboxInfo } from './info.js';
import { probeTools, type ProbedTools } from './probe.js';
import { DEFAULT_SANDBOX_SETTINGS, SandboxUnavailableError, VISIBLE_HOME, VISIBLE_WORKSPACE, totalMemoryMb } from './settings.js';
import type { MappedDir, SandboxInfo, SandboxOpenOptions, SandboxSettings, SandboxSpawnOptions } from './settings.js';
import type { ProcessLauncher, ShellDirs, ShellSandbox, StartedProcess } from './types.js';
import { removeTree, workspacePath } from './workspace-dir.js';

export * from './settings.js';
export { ConversationSandbox } from './conversation-sandbox.js';

/** Why a conversation's processes were stopped for disk (onDiskQuota). */
export type DiskStop = 'quota' | 'disk-full';

/** What a conversation's processes see of its disk, counted by the walk. */
const MEASURED_PATHS = [VISIBLE_WORKSPACE, '/tmp', VISIBLE_HOME];

export class Sandbox implements ShellSandbox, SandboxHost {
  /** probing: the start-up probe runs (after the daemon listens); then what it decided. */
  private state: 'probing' | 'bwrap' | 'none' = 'probing';
  /** The probe's outcome: see `ready`. */
  private readonly probed: Promise<void>;
  private readonly live = new Map<string, ConversationSandbox>();
  private readonly evictListeners = new Set<(conversationId: string) => void>();
  private readonly quotaListeners = new Set<(conversationId: string, usedBytes: number, why: DiskStop) => void>();
  private readonly faultListeners = new Set<(conversationId: string, reason: string) => void>();
  private diskQuota: DiskQuota | null = null;
  private closed = false;
  /** What the probe found (bwrap). */
  private found: ProbedTools | null = null;
  /** Why auto fell back to plain processes, or what else fell back (one line). */
  warning?: string;
  /** The settings in force (egress may fall back to none). */
  settings: SandboxSettings;
  readonly log: SandboxOpenOptions['log'];
  /** The probe has decided (ready settled): until then /server_info says probing, also while a holder is tried. */
  private decided = false;
  /** Opens the gate of a deferred probe. */
  private releaseProbe: (() => void) | null = null;
  /** SANDBOX=none: a file service per conversation as a plain process. */
  readonly plain: PlainFileServices;
  private relieving = false;

  private constructor(
    settings: SandboxSettings,
    readonly workspaceRoot: string,
    readonly mapped: MappedDir[],
    private readonly opts: SandboxOpenOptions | null,
  ) {
    this.settings = settings;
    this.log = opts?.log;
    // a daemon's (not `none()`'s) starts a file service ahead for the next conversation
    this.plain = new PlainFileServices((id, why) => this.sandboxFault(id, why), opts ? path.join(workspaceRoot, '.sandbox') : null);
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

  get enabled(): boolean {
    return this.mode === 'bwrap';
  }

  get isClosed(): boolean {
    return this.closed;
  }

  /** bwrap mode: how processes join a holder, and the holders (SandboxHost). */
  get bwrap(): SandboxHost['bwrap'] {
    const f = this.found;
    if (!f || this.state !== 'bwrap') return null;
    return { holders: f.holders, ids: f.ids, spawner: f.spawner };
  }

  private get holders(): Holders | null {
    return this.found?.holders ?? null;
  }

  private get cgroups(): CgroupBackend | null {
    return this.found?.cgroups ?? null;
  }

  private get disks(): Disks | null {
    return this.found?.disks ?? null;
  }

  /** The probe (see `start`): the checks, the tools, the cgroups, disks, egress (probe.ts), then a real holder. */
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
    this.found = found;
    this.settings = found.settings;
    if (found.warnings.length > 0) this.warning = found.warnings.join('; ');
    this.state = 'bwrap';
    const probeDir = fs.mkdtempSync(path.join(opts.workspaceRoot, '.probe-'));
    try {
      const err = await this.probe(probeDir);
      if (err) {
        this.state = 'probing';
        await found.holders.close();
        found.cgroups?.close();
        await found.spawner.close();
        this.found = null;
        return fail(err);
      }
    } finally {
      fs.rmSync(probeDir, { recursive: true, force: true });
    }
    const diskBytes = (settings.diskMb ?? 0) * 1024 * 1024;
    if (diskBytes > 0) {
      this.diskQuota = new DiskQuota(
        diskBytes,
        () => this.measuredTargets(),
        (id, used) => void this.overQuota(id, used),
      );
      this.diskQuota.start();
    }
    // the first conversation finds a holder ready too
    void this.warm();
    this.decided = true;
    const i = this.info();
    opts.log?.info(
      { sandbox: i },
      `sandbox: bwrap (${found.bwrap}), network ${i.network}, limits by ${i.limits.enforced_by}, disk ${i.limits.disk ?? 'unbounded'}`,
    );
    if (opts.apiOpenOnLoopback && this.settings.network === 'host') {
      opts.log?.warn(
        { sandbox: 'api-reachable' },
        "no SESSION_API_KEY and SANDBOX_NETWORK=host: agents' sandboxed processes can call this daemon's API on loopback " +
          '(every conversation, every file); set SESSION_API_KEY or SANDBOX_NETWORK=none',
      );
    }
  }

  /** Starts a holder, runs `true` joined to it and waits for its file service, built like the real ones (cgroup, seccomp filter); an error line or null. */
  private async probe(dir: string): Promise<string | null> {
    const id = `probe-${process.pid}`;
    try {
      const child = this.spawn(id, ['true'], {
        env: { PATH: baseChildEnv().PATH! },
        stdio: ['ignore', 'ignore', 'pipe'],
        workspaceDir: dir,
        firstHolderOnly: true,
      });
      let stderr = '';
      child.stderr!.on('data', (d: Buffer) => (stderr += d.toString('utf8')));
      const holder = this.live.get(id)?.holder;
      const holderFailed = holder?.ready
        .then(() => holder.files!.ready)
        .then(
          () => null,
          (e: Error) => holder.gone.then(() => holder.endReason ?? e.message),
        );
      return await new Promise<string | null>((resolve) => {
        child.on('error', (e) => resolve(`bwrap could not be started (${e.message})`));
        child.on('close', async (code) => {
          const failed = await holderFailed;
          if (code === 0 && !failed) return resolve(null);
          const line = failed ?? stderr.trim().split('\n').pop() ?? '';
          let hint = '';
          if (/user namespace|Operation not permitted|setting up uid map|No permissions|Permission denied/i.test(line)) {
            hint =
              ' (unprivileged user namespaces are disabled or blocked: sysctl kernel.unprivileged_userns_clone=1, ' +
              'or an AppArmor profile for bwrap on Ubuntu 24.04+, or systemd RestrictNamespaces)';
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

  info(): SandboxInfo {
    return sandboxInfo({ mode: this.mode, decided: this.decided, settings: this.settings, found: this.found, warning: this.warning, maxLive: this.maxLive });
  }

  // ------------------------------------------------------------------ conversations

  /** The conversation's sandbox, made (and counted against SANDBOX_MAX_LIVE) when it has none. */
  conversation(conversationId: string): ConversationSandbox {
    let c = this.live.get(conversationId);
    if (!c) {
      c = new ConversationSandbox(this, conversationId);
      this.live.set(conversationId, c);
      this.evictIfNeeded(conversationId);
    }
    c.lastUsed = Date.now();
    return c;
  }

  /** A handle with nothing left to close, or closing: no longer the conversation's. */
  forget(c: ConversationSandbox): void {
    if (this.live.get(c.id) === c) this.live.delete(c.id);
  }

  /** A handle that took a holder again after it was forgotten: the conversation's again, counted against SANDBOX_MAX_LIVE. */
  remember(c: ConversationSandbox): void {
    if (this.live.has(c.id) || this.closed) return;
    this.live.set(c.id, c);
    this.evictIfNeeded(c.id);
  }

  /** The workspace on the host. */
  hostWorkspace(conversationId: string): string {
    return workspacePath(this.workspaceRoot, conversationId);
  }

  /** The conversation's /tmp and HOME on the host (outside its workspace; created with its sandbox). */
  stateDir(conversationId: string): string {
    return stateDirOf(this.workspaceRoot, conversationId);
  }

  /** Where the conversation's processes see their workspace. */
  visibleWorkspace(hostWorkspaceDir: string): string {
    return this.enabled ? VISIBLE_WORKSPACE : hostWorkspaceDir;
  }

  /** The file view of a workspace (file_editor and anything else using agent-chosen paths). */
  pathView(hostWorkspaceDir: string): PathView {
    return new PathView(hostWorkspaceDir, this.visibleWorkspace(hostWorkspaceDir));
  }

  /** A built environment (child-env.ts): the sandbox's own in bwrap mode, never the daemon's, plus `extra`. */
  env(extra: Record<string, string | undefined> = {}): Record<string, string> {
    return sandboxEnv(this, extra);
  }

  prepare(conversationId: string): ShellDirs {
    return this.conversation(conversationId).prepare();
  }

  dirs(conversationId: string): ShellDirs {
    return shellDirs(this, conversationId);
  }

  spawn(conversationId: string, argv: string[], opts: SandboxSpawnOptions): ChildProcess {
    if (this.closed) throw new Error('the sandbox launcher is closed');
    if (this.state === 'probing') throw new Error('the sandbox is still being set up (await sandbox.ready first)');
    return this.conversation(conversationId).spawn(argv, opts);
  }

  /**
   * The conversation's files, through its file service: in its sandbox (the live one, or one
   * started for it), or a plain process of the daemon's user without one. Paths as the conversation
   * sees them (`visibleWorkspace`); a host path of the workspace is translated.
   */
  files(conversationId: string, workspaceDir = this.hostWorkspace(conversationId)): WorkspaceFiles {
    const view = this.pathView(workspaceDir);
    const inner = new ChannelFiles(view.visibleRoot, async () => {
      if (this.closed) throw new FileOpError('UNAVAILABLE', 'the sandbox launcher is closed');
      await this.ready.catch(() => {
        throw new FileOpError('UNAVAILABLE', 'the sandbox could not be set up');
      });
      if (!this.enabled) return this.plain.channel(conversationId, workspaceDir);
      return this.conversation(conversationId).fileChannel(workspaceDir);
    });
    return translatingFiles(inner, view);
  }

  /** The launcher of one conversation, for code that only starts processes (setup.sh, git, MCP servers). */
  forConversation(conversationId: string): ProcessLauncher {
    return {
      spawn: (argv, o) => this.spawn(conversationId, argv, { cwd: o.cwd, env: o.env, stdio: o.stdio, hostNetwork: o.hostNetwork }),
      env: (extra) => this.env(extra),
    };
  }

  /** Marks the conversation busy (a command runs) or idle; idle sandboxes may be closed (LRU). */
  setBusy(conversationId: string, busy: boolean): void {
    if (this.closed) return;
    const c = busy ? this.conversation(conversationId) : this.live.get(conversationId);
    c?.setBusy(busy);
  }

  /** Kills every process of the conversation (background ones included) and waits until they are gone. */
  async closeConversation(conversationId: string): Promise<void> {
    this.diskQuota?.forget(conversationId);
    await this.plain.close(conversationId);
    await this.live.get(conversationId)?.close();
  }

  /** Closes the conversation's sandbox now when no process started through it runs (the terminal's shell was closed for being idle). */
  async closeIfIdle(conversationId: string): Promise<void> {
    await this.live.get(conversationId)?.closeIfIdle();
  }

  prestart(argv: string[], extra: Record<string, string>): void {
    // (once the probe has decided, without starting a deferred one)
    const apply = () => this.enabled && !this.closed && this.holders?.prestartWith({ argv, env: this.env(extra) });
    this.outcome.then(apply, () => {});
  }

  takeStarted(
    conversationId: string,
    argv: string[],
    opts: SandboxSpawnOptions,
    accept: (missing: Record<string, string | null>) => boolean,
  ): StartedProcess | null {
    if (!this.enabled || this.closed) return null;
    return this.live.get(conversationId)?.takeStarted(argv, opts, accept) ?? null;
  }

  /** SANDBOX=none (the daemon's, not `none()`'s): starts the conversation's file service while its shell starts, not at its first file operation. */
  prewarmFiles(conversationId: string, workspaceDir: string): void {
    if (this.mode === 'none' && this.opts && !this.closed) this.plain.channel(conversationId, workspaceDir).catch(() => {});
  }

  /** Starts the conversation's sandbox in the background when it has none (a run begins); `ifRoom`: only if one more fits under SANDBOX_MAX_LIVE. */
  prewarm(conversationId: string, opts: { ifRoom?: boolean } = {}): void {
    const full = opts.ifRoom && this.maxLive > 0 && this.liveCount >= this.maxLive;
    if (!this.enabled || this.closed || full || this.live.get(conversationId)?.holder) return;
    // (a conversation that never ran anything has no workspace: its first command takes the spare; no handle is made for it)
    if (this.live.has(conversationId) || fs.existsSync(this.hostWorkspace(conversationId))) this.conversation(conversationId).prewarm();
  }

  /**
   * DELETE: closes the sandbox and removes the conversation's state directory from the host (its
   * /tmp and HOME, its disk image). With KEEP_WORKSPACES a workspace on a disk of its own is copied
   * out first, to a plain directory at its host path.
   */
  async removeConversation(conversationId: string): Promise<void> {
    this.diskQuota?.remove(conversationId);
    await this.closeConversation(conversationId);
    const state = this.stateDir(conversationId);
    const disks = this.disks;
    if (disks?.has(state) && this.opts?.keepWorkspaces) await this.copyOut(disks, state, conversationId).catch(() => {});
    await removeTree(state).catch(() => {});
  }

  /** KEEP_WORKSPACES: the workspace out of the conversation's image, into a plain directory at its host path. */
  private async copyOut(disks: Disks, state: string, conversationId: string): Promise<void> {
    const workspace = this.hostWorkspace(conversationId);
    const key = await disks.acquire(state);
    const kept = `${state}.kept`;
    try {
      fs.mkdirSync(kept, { mode: 0o700 });
      await copyWorkspaceOut(state, kept);
      fs.rmSync(workspace, { force: true });
      fs.renameSync(kept, workspace);
    } finally {
      await disks.release(key, state);
      fs.rmSync(kept, { recursive: true, force: true });
    }
  }

  /** Number of conversations with a live sandbox (its holder, or processes in none mode; metrics). */
  get liveCount(): number {
    return [...this.live.values()].filter((c) => c.active).length;
  }

  /** Number of live sandboxed processes started through the launcher (their children not counted). */
  get processCount(): number {
    return [...this.live.values()].reduce((n, c) => n + c.procs.size, 0);
  }

  /** bwrap mode: the spare holders, alive and of those ready (tests, benchmarks). */
  get spares(): { alive: number; ready: number } {
    return { alive: this.holders?.spareCount ?? 0, ready: this.holders?.readySpares ?? 0 };
  }

  /** Starts a spare holder if there is none; resolves once it is ready (benchmarks wait for it). */
  async warm(): Promise<void> {
    if (this.closed) return;
    if (this.mode === 'none') await this.plain.warm();
    await this.holders?.warm();
  }

  /**
   * Called when a conversation's file service broke the protocol or missed a deadline (file-channel.ts):
   * its sandbox is closed right after (the next use starts a new one); `reason` is the daemon's words.
   */
  onSandboxFault(fn: (conversationId: string, reason: string) => void): () => void {
    this.faultListeners.add(fn);
    return () => this.faultListeners.delete(fn);
  }

  /** What comes out of a sandbox is hostile input: a violation ends that sandbox only, and its conversation is told. */
  sandboxFault(conversationId: string, reason: string): void {
    this.log?.warn({ conversation_id: conversationId, reason }, "a conversation's sandbox broke the file service's protocol: it is closed");
    for (const fn of this.faultListeners) fn(conversationId, reason);
    void this.closeConversation(conversationId);
  }

  // ------------------------------------------------------------------ eviction

  /** Called when a conversation's sandbox is closed to stay under SANDBOX_MAX_LIVE. */
  onEvict(fn: (conversationId: string) => void): () => void {
    this.evictListeners.add(fn);
    return () => this.evictListeners.delete(fn);
  }

  /** SANDBOX_MAX_LIVE, bounded by what the memory holds when no cgroup bounds the sandboxes together. */
  get maxLive(): number {
    if (!this.enabled) return this.settings.maxLive;
    return liveCap(this.settings.maxLive, this.cgroups !== null, totalMemoryMb(this.settings), this.settings.memoryMb);
  }

  private evictIfNeeded(except: string): void {
    const candidates = [...this.live.entries()].map(([id, c]) => [id, { busy: c.busy, lastUsed: c.lastUsed, active: c.active }] as [string, EvictionCandidate]);
    for (const id of evictionVictims(candidates, except, this.maxLive)) {
      // listeners first (e.g. MCP managers detach quietly), then the processes are killed
      for (const fn of this.evictListeners) fn(id);
      void this.closeConversation(id);
    }
  }

  // ------------------------------------------------------------------ disk

  /**
   * Called when a conversation's processes are stopped for disk: over SANDBOX_DISK_MB (`quota`,
   * where it is measured), or as the one holding the most of a disk that is full (`disk-full`),
   * just before they are stopped.
   */
  onDiskQuota(fn: (conversationId: string, usedBytes: number, why: DiskStop) => void): () => void {
    this.quotaListeners.add(fn);
    return () => this.quotaListeners.delete(fn);
  }

  /** A conversation over SANDBOX_DISK_MB (or the largest on a full disk): its listeners are told why, then every process of it is stopped. */
  private overQuota(conversationId: string, usedBytes: number, why: DiskStop = 'quota'): Promise<void> {
    for (const fn of this.quotaListeners) fn(conversationId, usedBytes, why);
    return this.closeConversation(conversationId).then(() => this.diskQuota?.settle(conversationId));
  }

  /** What a live sandbox holds of the data disk, measured (walk inside, unlinked files from the host). */
  private async measure(c: ConversationSandbox, walkMs: number): Promise<number> {
    const h = c.holder!;
    const walked = await walkedBytes(h.files!, MEASURED_PATHS, walkMs);
    let dev: number;
    try {
      dev = fs.statSync(this.workspaceRoot).dev;
    } catch {
      return walked;
    }
    return walked + unlinkedBytes(h.pids(), dev);
  }

  /** The live sandboxes whose disk is measured (no image of their own: the kernel bounds those). */
  private measuredTargets(): QuotaTarget[] {
    const out: QuotaTarget[] = [];
    for (const c of this.live.values()) {
      const h = c.holder;
      if (!h || h.dead || !h.fds || h.image) continue;
      out.push({ id: c.id, usable: !!h.files?.usable, active: c.busy || c.procs.size > 0, measure: (ms) => this.measure(c, ms) });
    }
    return out;
  }

  /**
   * The disk the daemon shares with the sandboxes is full (the store's disk watch says so, once a
   * second while it lasts): the live conversation holding the most of it is stopped, so the agents'
   * writes go before the daemon's own (its journal has a reserve for the meantime). What one holds:
   * its image's blocks on the host, or measured (files it unlinked while open count either way).
   */
  async relieveDisk(): Promise<void> {
    if (this.relieving || !this.enabled) return;
    this.relieving = true;
    try {
      let top: { id: string; bytes: number } | null = null;
      for (const c of [...this.live.values()]) {
        const h = c.holder;
        if (!h || h.dead || !h.fds) continue;
        const bytes = h.image ? imageBytes(h.state) : await this.measure(c, 5000).catch(() => 0);
        if (!top || bytes > top.bytes) top = { id: c.id, bytes };
      }
      // (waited for: until what it held is freed, the disk stays full, and the next look would stop another)
      if (top && top.bytes > 0) await this.overQuota(top.id, top.bytes, 'disk-full');
    } finally {
      this.relieving = false;
    }
  }

  // ------------------------------------------------------------------ shutdown

  /** Stops everything it started and waits until it is gone: the sandboxes, the spare, the plain file services; then unmounts the disks. */
  async close(): Promise<void> {
    // every process started so far, however: the stop ends when each has finished exiting
    const started = descendantsOfSelf();
    this.closed = true;
    this.startProbe(); // a deferred probe that never started ends at once (ready resolves: nothing to run)
    this.diskQuota?.stop();
    await this.probed.catch(() => {});
    this.disks?.stop();
    const spare = this.holders?.close();
    const plainSpare = this.plain.stop();
    await Promise.all([...new Set([...this.live.keys(), ...this.plain.ids()])].map((id) => this.closeConversation(id)));
    await Promise.all([spare, plainSpare]);
    // what a holder's start in progress runs (mkfs, mount, unshare…), even asked for and not yet started: ended, then its disk unmounted
    await this.found?.spawner.answered(5000);
    await endHelpers(5000);
    await this.disks?.unmountStale();
    this.holders?.removeSpareDirs();
    this.cgroups?.close();
    await this.found?.spawner.close();
    await allEnded(started, 5000);
  }
}
