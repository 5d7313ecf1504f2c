/**
 * One conversation's sandbox, the handle the rest of the daemon holds: it starts the conversation's
 * processes (`spawn`), serves its files (`files`), builds its environment (`env`), names its paths,
 * and closes it (`close`: everything of it stopped, its resources given back). The host-wide part —
 * the probe, the holders' pool, eviction, the disk bound and relief, shutdown — is launcher.ts's.
 *
 * bwrap mode: the conversation's processes all join one holder (holders.ts, holder-launch.ts), taken
 * from the spare or started on first use, which owns its namespaces, cgroup and (root daemon) disk.
 * A process joins with util-linux nsenter on the daemon's fds on the holder (join.ts), then perl's
 * loader: its own session, every capability dropped, and the seccomp filter loaded last. none mode: plain
 * processes in their own process group, with the same built environment.
 *
 * Whether it may be closed for idleness follows its processes: while one started through it runs,
 * no; once none does (and no command is marked running), it is closed after SANDBOX_IDLE_CLOSE_MS,
 * its background jobs with it.
 */
import type { ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import type { Logger } from 'pino';
import { childProcess } from '../builtins.js';
import { sandboxChildEnv, baseChildEnv, envChanges } from './child-env.js';
import { FileOpError, type FileChannel } from './files.js';
import type { Holder, Holders } from './holders.js';
import { joinHolder, translateEnv } from './join.js';
import { PathView } from './path-view.js';
import { exited, killTree, type ProcessLike } from './processes.js';
import type { Spawner } from './spawner.js';
import {
  VISIBLE_HOME,
  VISIBLE_IO,
  VISIBLE_OUTPUTS,
  VISIBLE_WORKSPACE,
  type MappedDir,
  type SandboxIds,
  type SandboxSettings,
  type SandboxSpawnOptions,
} from './settings.js';
import type { ProcessLauncher, ShellDirs, StartedProcess } from './types.js';
import { conversationIdHex, workspacePath } from './workspace-dir.js';

/** How long a sandbox with no process started through it stays up (its background jobs with it). */
const IDLE_CLOSE_MS = 10 * 60_000; // SandboxSettings.idleCloseMs

/** How long closing waits for the sandbox's processes to be gone (SIGKILL: they go in milliseconds). */
const CLOSE_WAIT_MS = 10_000;

/** What a conversation's sandbox needs of the host-wide part (launcher.ts's Sandbox). */
export interface SandboxHost {
  readonly settings: SandboxSettings;
  readonly enabled: boolean;
  readonly isClosed: boolean;
  readonly workspaceRoot: string;
  readonly mapped: MappedDir[];
  readonly log?: Logger;
  /** The probe's outcome (what starts a process or touches a file waits for it). */
  readonly ready: Promise<void>;
  /** bwrap mode, once probed: how processes join a holder, and the holders. */
  readonly bwrap: { holders: Holders; ids: SandboxIds | null; spawner: Spawner } | null;
  /** The handle has nothing left to close (no process, no holder): the host may forget it. */
  forget(h: ConversationSandbox): void;
  /** The handle has a holder again (one that failed was replaced): the host knows it, unless it has another by now. */
  remember(h: ConversationSandbox): void;
  /** Its file service broke the protocol or missed a deadline: the conversation is told, the sandbox closed. */
  sandboxFault(conversationId: string, reason: string): void;
}

/** A name for per-conversation directories: the id's 32 hex digits, or a safe form of other ids (probes, tests). */
function stateName(conversationId: string): string {
  try {
    return conversationIdHex(conversationId);
  } catch {
    return `x-${conversationId.replace(/[^A-Za-z0-9_-]/g, '_').slice(0, 64)}`;
  }
}

/** The conversation's state directory on the host: its /tmp and HOME (or its disk image), FIFOs and saved outputs. */
export function stateDirOf(workspaceRoot: string, conversationId: string): string {
  return path.join(workspaceRoot, '.sandbox', stateName(conversationId));
}

/** A built environment: the sandbox's own (child-env.ts) in bwrap mode, never the daemon's, plus `extra`. */
export function sandboxEnv(host: Pick<SandboxHost, 'enabled' | 'settings'>, extra: Record<string, string | undefined>): Record<string, string> {
  if (!host.enabled) return baseChildEnv(extra);
  return sandboxChildEnv({ HOME: VISIBLE_HOME, TMPDIR: '/tmp', USER: 'agent', LOGNAME: 'agent', ...extra }, host.settings.roBinds);
}

/** The terminal's directories of a conversation (FIFOs, saved outputs) and the uid files made there get. */
export function shellDirs(host: Pick<SandboxHost, 'workspaceRoot' | 'bwrap'>, conversationId: string): ShellDirs {
  const state = stateDirOf(host.workspaceRoot, conversationId);
  return {
    io: { host: path.join(state, 'io'), inside: VISIBLE_IO },
    outputs: { host: path.join(state, 'outputs'), inside: VISIBLE_OUTPUTS },
    owner: host.bwrap?.ids?.agent ?? null,
    // FIFOs made by the spawner itself (mkfifo(2)): no program forked by the daemon or the spawner
    ...(host.bwrap ? { makeFifos: host.bwrap.spawner.mkfifo.bind(host.bwrap.spawner) } : {}),
  };
}

export class ConversationSandbox implements ProcessLauncher {
  /** Processes started through it that have not exited (their children not counted). */
  readonly procs = new Set<ProcessLike>();
  /** A command runs (the terminal says so): never closed to make room for another. */
  busy = false;
  lastUsed = Date.now();
  holder: Holder | null = null;
  private idleTimer: NodeJS.Timeout | null = null;
  private closing: Promise<void> | null = null;

  constructor(
    private readonly host: SandboxHost,
    readonly id: string,
  ) {}

  /** It holds something to close: a process, or a live holder. */
  get active(): boolean {
    return this.procs.size > 0 || (this.holder !== null && !this.holder.dead);
  }

  /** The workspace on the host (a link into its disk when it has one). */
  get hostWorkspace(): string {
    return workspacePath(this.host.workspaceRoot, this.id);
  }

  /** The conversation's /tmp and HOME (or its disk), FIFOs and saved outputs on the host, outside its workspace. */
  get stateDir(): string {
    return stateDirOf(this.host.workspaceRoot, this.id);
  }

  /** The file view of a workspace (file_editor and anything else using agent-chosen paths). */
  pathView(hostWorkspaceDir = this.hostWorkspace): PathView {
    return new PathView(hostWorkspaceDir, this.host.enabled ? VISIBLE_WORKSPACE : hostWorkspaceDir);
  }

  /** The sandbox's own environment (child-env.ts), never the daemon's, plus `extra`. */
  env(extra: Record<string, string | undefined> = {}): Record<string, string> {
    return sandboxEnv(this.host, extra);
  }

  /** The directories `prepare` returns, without starting anything; `owner`: the uid and gid files made there for the sandbox get. */
  dirs(): ShellDirs {
    return shellDirs(this.host, this.id);
  }

  /** Starts its sandbox when it has none (bwrap mode); its directories. */
  prepare(): ShellDirs {
    if (!this.host.enabled) throw new Error('prepare: the sandbox is off');
    if (this.host.isClosed) throw new Error('the sandbox launcher is closed');
    this.holderFor(this.hostWorkspace);
    return this.dirs();
  }

  /**
   * Starts `argv`. Returns the child (in bwrap mode the process on the host that joins the sandbox,
   * whose exit status is the command's); its stdio is the command's. In bwrap mode it joins the
   * conversation's sandbox (started here when there is none); until that is ready the child waits.
   */
  spawn(argv: string[], opts: SandboxSpawnOptions): ChildProcess {
    if (this.host.isClosed) throw new Error('the sandbox launcher is closed');
    if (argv.length === 0) throw new Error('empty command');
    const host = opts.workspaceDir ?? this.hostWorkspace;
    const child = this.host.enabled ? this.join(argv, opts, host) : this.plainProcess(argv, opts, host);
    this.own(child);
    return child;
  }

  /** A process of the conversation's: the sandbox is not idle while it runs. */
  private own(child: ProcessLike): void {
    this.procs.add(child);
    this.clearIdle();
    const forget = () => {
      this.procs.delete(child);
      this.lastUsed = Date.now();
      this.scheduleIdle();
    };
    child.once('exit', forget);
    child.once('error', forget);
  }

  private plainProcess(argv: string[], opts: SandboxSpawnOptions, host: string): ChildProcess {
    // workspaces are created on first use (a conversation that never runs anything has none)
    fs.mkdirSync(host, { recursive: true, mode: 0o700 });
    return childProcess().spawn(argv[0]!, argv.slice(1), { cwd: opts.cwd ?? host, env: opts.env, stdio: opts.stdio ?? 'pipe', detached: true });
  }

  /** A process that joins the holder: it waits in its `sh` for the holder's fd numbers (written once the holder is ready). */
  private join(argv: string[], opts: SandboxSpawnOptions, host: string): ChildProcess {
    const holder = this.holderFor(host);
    const cwd = opts.cwd ? this.pathView(host).toVisible(opts.cwd) : VISIBLE_WORKSPACE;
    // joiners start in /workspace (the holder's); elsewhere a `cd` resolved inside the sandbox
    const inner = cwd === VISIBLE_WORKSPACE ? argv : ['/bin/sh', '-c', 'cd -- "$0" || exit 125; exec "$@"', cwd, ...argv];
    return joinHolder(
      this.host.bwrap!.holders.joining,
      holder,
      inner,
      { env: translateEnv(opts.env, this.host.mapped), stdio: opts.stdio, hostNetwork: opts.hostNetwork },
      // a holder that failed to start: the joiner, which has entered nothing yet, joins the next one
      () => (opts.firstHolderOnly || this.host.isClosed || this.closing ? null : this.holderFor(host)),
    );
  }

  /**
   * The process its holder started ahead (a spare's: Holders.prestartWith), when that is `argv` in the
   * workspace, still alive, and `accept` takes the variables it lacks of `env` (null: to unset): it
   * becomes one of the sandbox's processes, as if spawned now. Null otherwise, the process killed: the
   * caller spawns.
   */
  takeStarted(argv: string[], opts: SandboxSpawnOptions, accept: (missing: Record<string, string | null>) => boolean): StartedProcess | null {
    const h = this.holder;
    const s = h?.started;
    if (!h || !s) return null;
    h.started = null;
    const missing = envChanges(s.env, translateEnv(opts.env, this.host.mapped));
    const host = opts.workspaceDir ?? this.hostWorkspace;
    const inWorkspace = !opts.cwd || this.pathView(host).toVisible(opts.cwd) === VISIBLE_WORKSPACE;
    // (one still being started is killed once it is: Holders.startAhead)
    const proc = s.proc;
    const alive = !h.dead && proc !== null && proc.exitCode === null && proc.signalCode === null;
    // (the spare's io directory is the conversation's now)
    const fifos = s.fifos?.map((f) => ({ ...f, path: path.join(this.stateDir, 'io', path.basename(f.path)) }));
    if (!alive || !inWorkspace || argv.join('\0') !== s.argv.join('\0') || !accept(missing)) {
      if (proc) killTree(proc);
      for (const f of fifos ?? []) fs.promises.unlink(f.path).catch(() => {});
      return null;
    }
    this.own(proc);
    return { proc, missing, fifos };
  }

  /** The live holder, or a new one (taken from the spare, or started for its directories). */
  private holderFor(workspace: string): Holder {
    if (this.holder && !this.holder.dead) return this.holder;
    const h = this.host.bwrap!.holders.take(workspace, this.stateDir);
    this.holder = h;
    this.host.remember(this);
    // (also once the holder died: a service that ended in the middle of an answer is told after its exit)
    h.onFault = (why) => {
      if (this.holder === h) this.host.sandboxFault(this.id, why);
    };
    // everything that joined it dies with the namespace
    h.onDead = () => {
      if (this.holder === h) this.scheduleIdle();
    };
    if (h.dead) h.onDead();
    return h;
  }

  /**
   * The channel to its file service in its sandbox (started, or taken from the spare, when it has
   * none), once that is ready: a holder that died starting is replaced once. bwrap mode (the probe
   * decided).
   */
  async fileChannel(workspaceDir = this.hostWorkspace): Promise<FileChannel> {
    for (let attempt = 0; ; attempt++) {
      const holder = this.holderFor(workspaceDir);
      try {
        await holder.ready;
        // (its service starts after the holder is ready: one that ended first is a holder that failed)
        await holder.files!.ready;
      } catch (e) {
        if (attempt === 0 && !this.host.isClosed) continue;
        // (what bwrap said may name host paths: the log has it, not the caller)
        this.host.log?.warn({ conversation_id: this.id, err: (e as Error).message }, "a conversation's sandbox could not start");
        throw new FileOpError('UNAVAILABLE', "the conversation's sandbox could not start");
      }
      this.lastUsed = Date.now();
      this.scheduleIdle();
      return holder.files!;
    }
  }

  /** Marks a command running (or not): a running one is never closed to make room (LRU eviction). */
  setBusy(busy: boolean): void {
    this.busy = busy;
    this.lastUsed = Date.now();
    this.scheduleIdle();
  }

  private clearIdle(): void {
    if (this.idleTimer) clearTimeout(this.idleTimer);
    this.idleTimer = null;
  }

  /**
   * With no process started through it and nothing running: without a live holder its bookkeeping
   * goes at once; a sandbox is closed after the idle time (its background jobs, e.g. what setup.sh
   * started, live until then).
   */
  private scheduleIdle(): void {
    this.clearIdle();
    if (this.busy || this.procs.size > 0 || this.closing) return;
    if (!this.holder || this.holder.dead) {
      this.host.forget(this);
      return;
    }
    this.idleTimer = setTimeout(() => {
      if (!this.busy && this.procs.size === 0) void this.close();
    }, this.host.settings.idleCloseMs ?? IDLE_CLOSE_MS);
    this.idleTimer.unref();
  }

  /** Closes it now when no process started through it runs (its background jobs go with it). */
  async closeIfIdle(): Promise<void> {
    if (this.busy || this.procs.size > 0) return;
    await this.close();
  }

  /** Starts the holder in the background when there is none (a run begins: it comes up while the LLM answers). */
  prewarm(): void {
    // (a conversation that never ran anything has no workspace: its first command takes the spare)
    if (!this.host.enabled || this.host.isClosed || this.holder || !fs.existsSync(this.hostWorkspace)) return;
    this.holderFor(this.hostWorkspace);
    this.scheduleIdle();
  }

  /**
   * Stops every process of the conversation — background ones included: its pid namespace ends, and
   * whatever else is in its cgroup is killed — and waits until they are gone and what its holder held
   * (cgroup, disk) is given back.
   */
  close(): Promise<void> {
    this.closing ??= (async () => {
      this.clearIdle();
      this.host.forget(this);
      const h = this.holder;
      // closed here: what its file service does from now on is no fault of it
      h?.files?.break("the conversation's sandbox was closed");
      h?.kill();
      for (const p of this.procs) killTree(p);
      const wait = (p: Promise<unknown>) => Promise.race([p, new Promise((r) => setTimeout(r, CLOSE_WAIT_MS).unref())]);
      await Promise.all([...[...this.procs].map((p) => exited(p, CLOSE_WAIT_MS)), h ? wait(h.released) : null]);
      await h?.egress?.close();
    })();
    return this.closing;
  }
}
