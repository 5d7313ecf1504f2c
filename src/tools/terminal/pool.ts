/**
 * The terminal's shells: one per conversation, started on first use (in the conversation's sandbox
 * when it has one), the tool's calls for a conversation run one at a time, closed after
 * SANDBOX_IDLE_CLOSE_MS without a command (its directory and exported variables kept for the next
 * shell, which a run may start ahead: `prewarm`), and closed with the conversation. What a call does
 * with its shell (timeouts, input, observations) is the tool's (tool.ts).
 */
import fs from 'node:fs';
import { mark } from '../../events/turn-trace.js';
import { HOLDER_START_MS, type ShellSandbox } from '../../sandbox/types.js';
import type { SandboxSpawnOptions } from '../../sandbox/settings.js';
import type { ToolContext } from '../types.js';
import { SHELL_ARGV, ShellSession, shellQuote, type ShellState } from './session.js';
import { settableEnv } from './shell-script.js';

/** Every shell's environment, besides the sandbox's own and the conversation's (its secrets, its git credentials). */
const SHELL_ENV = { TERM: 'dumb', PAGER: 'cat', GIT_PAGER: 'cat', PYTHONUNBUFFERED: '1' };

/**
 * How long bash may take to start. A sandboxed shell joins its conversation's holder, which may still be
 * starting (HOLDER_START_MS), and its time counts from the spawn: on a loaded machine 37 of 40 holders
 * started at once took longer than this alone, and their shells failed while the holders were still in time.
 */
const SHELL_START_MS = 10_000;

/** What starting a conversation's shell needs of a tool call's context. */
export type ShellContext = Pick<ToolContext, 'conversationId' | 'workspaceDir' | 'env'>;

/** A shell closed after SANDBOX_IDLE_CLOSE_MS: what the next one takes up, and when it was closed. */
interface IdleClosed {
  state: ShellState;
  at: number;
}

export function secondsText(ms: number): string {
  const s = ms / 1000;
  return `${Number.isInteger(s) ? s : s.toFixed(1)} second${s === 1 ? '' : 's'}`;
}

/** One conversation's place in the pool: its shell, the one starting, its queue of calls, what an idle close kept. */
class ConversationShell {
  session: ShellSession | null = null;
  idleTimer: NodeJS.Timeout | null = null;
  starting: Promise<ShellSession> | null = null;
  /** The last call queued on it (calls run one at a time). */
  queue: Promise<unknown> | null = null;
  /** Its shell was closed for being idle: the next shell takes this state up. */
  idleClosed: IdleClosed | null = null;
  /** What a shell started ahead (`prewarm`) has to tell the command that first uses it. */
  prewarmNotes: string[] | null = null;

  constructor(readonly conversationId: string) {}

  /** Nothing is kept for the conversation: the pool may forget it. */
  get empty(): boolean {
    return !this.session && !this.starting && !this.queue && !this.idleClosed && !this.prewarmNotes;
  }

  /** Forgets `session` if it is this conversation's shell (it ended or is being killed). */
  detach(session: ShellSession): boolean {
    if (this.session !== session) return false;
    this.session = null;
    if (this.idleTimer) clearTimeout(this.idleTimer);
    this.idleTimer = null;
    return true;
  }
}

interface ShellPoolOptions {
  /** Where shells run: the conversation's sandbox, or plain processes (`Sandbox.none()`). */
  sandbox: ShellSandbox;
  /** Close a conversation's shell after this long without tool calls. Default 10 min. */
  idleCloseMs?: number;
}

export class ShellPool {
  readonly sandbox: ShellSandbox;
  readonly idleCloseMs: number;
  /** The conversations that have a shell, one starting, calls queued, or an idle shell's state kept. */
  private readonly shells = new Map<string, ConversationShell>();

  constructor(opts: ShellPoolOptions) {
    this.sandbox = opts.sandbox;
    this.idleCloseMs = opts.idleCloseMs ?? 10 * 60_000;
    // a spare sandbox starts the shell of its conversation ahead (its conversation's variables are set at the take)
    opts.sandbox.prestart?.(SHELL_ARGV, SHELL_ENV);
  }

  /** The live shell of a conversation, if any. */
  session(conversationId: string): ShellSession | undefined {
    const s = this.shells.get(conversationId)?.session;
    return s?.alive ? s : undefined;
  }

  /** The conversation has a shell running or starting (its processes live). */
  running(conversationId: string): boolean {
    const e = this.shells.get(conversationId);
    return !!e && (!!e.starting || !!e.session?.alive);
  }

  /** The working directory of the conversation's shell (live or not), if it has one. */
  cwd(conversationId: string): string | undefined {
    return this.shells.get(conversationId)?.session?.cwd;
  }

  private entry(conversationId: string): ConversationShell {
    let e = this.shells.get(conversationId);
    if (!e) this.shells.set(conversationId, (e = new ConversationShell(conversationId)));
    return e;
  }

  private forgetIfEmpty(e: ConversationShell): void {
    if (e.empty && this.shells.get(e.conversationId) === e) this.shells.delete(e.conversationId);
  }

  /** Runs `fn` after the conversation's earlier calls (one call at a time per conversation). */
  queued<T>(conversationId: string, fn: () => Promise<T>): Promise<T> {
    const e = this.entry(conversationId);
    const next = (e.queue ?? Promise.resolve()).catch(() => {}).then(fn);
    e.queue = next;
    const settle = () => {
      if (e.queue !== next) return;
      e.queue = null;
      this.forgetIfEmpty(e);
    };
    next.then(settle, settle);
    return next;
  }

  /**
   * A run begins for a conversation whose shell was closed for being idle: the next shell (its
   * directory and exported variables taken up) starts now, while the LLM answers, so the command
   * that uses it does not wait for it; the note that the shell had been idle goes with that
   * command's observation. Queued like a command of the conversation; a shell that cannot start is
   * left to that command, which starts it and says why it could not.
   */
  prewarm(ctx: ShellContext): void {
    const e = this.shells.get(ctx.conversationId);
    const idle = e?.idleClosed;
    if (!e || !idle || e.session || e.starting) return;
    void this.queued(ctx.conversationId, async () => {
      if (e.session || e.idleClosed !== idle) return; // a command got there first
      try {
        const got = await this.acquire(ctx);
        if (got.notes.length) e.prewarmNotes = got.notes;
        this.touch(ctx.conversationId, false);
      } catch {
        if (!e.session && !e.idleClosed) e.idleClosed = idle;
      }
    });
  }

  /** Ends the conversation's shell; `reason` is what the running command's observation says. */
  async close(conversationId: string, reason = 'closed'): Promise<void> {
    const e = this.shells.get(conversationId);
    if (!e) return;
    for (const f of e.idleClosed?.state.fifos ?? []) await fs.promises.unlink(f.path).catch(() => {});
    e.idleClosed = null;
    e.prewarmNotes = null;
    const session = e.session;
    if (session) e.detach(session);
    const starting = e.starting;
    this.forgetIfEmpty(e);
    if (session) await session.terminate(reason);
    if (starting) {
      const s = await starting.catch(() => null);
      if (s) await s.terminate(reason);
    }
  }

  async closeAll(): Promise<void> {
    await Promise.all([...this.shells.keys()].map((id) => this.close(id)));
  }

  /** `reset`: the conversation's shell and all its processes are killed (the next command starts a new one). */
  async reset(conversationId: string): Promise<void> {
    const session = this.shells.get(conversationId)?.session;
    if (session && this.shells.get(conversationId)!.detach(session)) await session.terminate('reset');
  }

  /** The shell ended (its exit was reported, or it is being killed): the next command starts another. */
  forget(session: ShellSession): void {
    this.shells.get(session.conversationId)?.detach(session);
  }

  /**
   * A call runs on the conversation's shell (`active`), or has returned: its shell is closed after
   * idleCloseMs without another. A command still running keeps the sandbox from being closed as
   * idle (SANDBOX_MAX_LIVE).
   */
  busy(conversationId: string, session: ShellSession, active: boolean): void {
    this.sandbox.setBusy(conversationId, active || (!!session.running && !session.running.done));
    if (this.shells.get(conversationId)?.session === session) this.touch(conversationId, active);
  }

  private touch(conversationId: string, active: boolean): void {
    const e = this.shells.get(conversationId);
    if (!e?.session) return;
    if (e.idleTimer) clearTimeout(e.idleTimer);
    e.idleTimer = null;
    if (active) return;
    const session = e.session;
    e.idleTimer = setTimeout(() => void this.closeIdle(e, session), this.idleCloseMs);
    e.idleTimer.unref();
  }

  /**
   * SANDBOX_IDLE_CLOSE_MS without a command: the shell's exported variables and directory are kept
   * (in memory) for the next shell, the shell is closed, and so is the conversation's sandbox when
   * nothing else of it runs: an idle conversation costs no process.
   */
  private async closeIdle(e: ConversationShell, session: ShellSession): Promise<void> {
    if (e.session !== session) return;
    const state = await session.snapshot().catch(() => null);
    if (e.session !== session) return;
    e.detach(session);
    // the FIFOs it made for later commands stay for the next shell (no process to make them then)
    if (state) e.idleClosed = { state: { ...state, fifos: session.fifos.keep() }, at: Date.now() };
    this.forgetIfEmpty(e);
    await session.terminate('idle');
    await this.sandbox.closeIfIdle(e.conversationId);
  }

  /** The conversation's shell, started when it has none (or it exited); `notes` say what the command should know of it. */
  async acquire(ctx: ShellContext): Promise<{ session: ShellSession; notes: string[] }> {
    const e = this.entry(ctx.conversationId);
    const notes: string[] = e.prewarmNotes ?? [];
    e.prewarmNotes = null;
    const current = e.session;
    if (current) {
      if (current.alive) return { session: current, notes };
      e.detach(current);
      // (killed as `restart`: by C-c, when the shell was wedged, after the call that sent it had returned)
      const killed = current.killReason === 'restart';
      await current.terminate('gone');
      notes.push(
        (killed
          ? `The previous command "${current.running?.command ?? ''}" could not be stopped, so the whole shell was killed and a new one was started`
          : 'The previous shell had exited, so a new shell was started') +
          ' in the workspace: the working directory and environment variables from before are gone.',
      );
    }
    const sandbox = this.sandbox;
    await sandbox.ready;
    const idle = e.idleClosed;
    e.idleClosed = null;
    if (idle) {
      notes.push(
        `The shell had been idle for ${secondsText(Date.now() - idle.at + this.idleCloseMs)} and was stopped with everything it ran in the background; ` +
          'a new shell started in the same working directory with the same exported variables.',
      );
    }
    const startP = this.startShell(ctx, idle?.state);
    e.starting = startP;
    try {
      const session = await startP;
      mark(ctx.conversationId, 'shell: ready');
      session.appliedEnv = { ...ctx.env };
      if (e.starting !== startP) {
        // close() ran while the shell was starting.
        await session.terminate('closed');
        throw new Error('The terminal was closed while it was starting.');
      }
      e.session = session;
      return { session, notes };
    } finally {
      if (e.starting === startP) e.starting = null;
    }
  }

  /** Starts the conversation's shell (in its sandbox, started or taken when it has none): once it has run its setup. */
  private startShell(ctx: ShellContext, restore: ShellState | undefined): Promise<ShellSession> {
    const sandbox = this.sandbox;
    // workspaces are created on first use (with the sandbox on, by the sandbox: its spare's moved in)
    const made = sandbox.enabled ? Promise.resolve() : fs.promises.mkdir(ctx.workspaceDir, { recursive: true, mode: 0o700 });
    return made.then(() => {
      const dirs = sandbox.enabled ? sandbox.prepare(ctx.conversationId) : null;
      // (the turn trace, LOG_LEVEL=trace: where a first shell's start goes)
      mark(ctx.conversationId, 'shell: sandbox taken');
      const io = dirs ? { ...dirs.io, owner: dirs.owner, makeFifos: dirs.makeFifos } : undefined;
      return ShellSession.start(
        {
          conversationId: ctx.conversationId,
          cwd: ctx.workspaceDir,
          restore,
          // built from scratch, never the daemon's environment (its keys stay out of the shell)
          env: sandbox.env({ ...SHELL_ENV, ...ctx.env }),
          launch: (argv, o) => {
            const spawn: SandboxSpawnOptions = { workspaceDir: ctx.workspaceDir, cwd: o.cwd, env: o.env, stdio: ['pipe', 'pipe', 'pipe'] };
            // (the turn trace: a spare's shell, started ahead)
            const started = sandbox.takeStarted?.(ctx.conversationId, argv, spawn, settableEnv);
            if (started) {
              mark(ctx.conversationId, 'shell: taken ready');
              return started;
            }
            const child = sandbox.spawn(ctx.conversationId, argv, spawn);
            // (plain processes: the file service starts beside bash, which is starting anyway, rather than
            // at the conversation's first file operation, which often comes next; a sandbox's is its holder's)
            mark(ctx.conversationId, 'shell: spawned');
            sandbox.prewarmFiles?.(ctx.conversationId, ctx.workspaceDir);
            return child;
          },
          io,
        },
        sandbox.enabled ? HOLDER_START_MS + SHELL_START_MS : SHELL_START_MS,
      );
    });
  }
}

/** Shell code exporting ctx.env values that changed since the shell started (e.g. a new secret). */
export function envPrefix(session: ShellSession, env: Record<string, string>): string {
  let out = '';
  for (const [k, v] of Object.entries(env)) {
    if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(k) || session.appliedEnv[k] === v) continue;
    out += `export ${k}=${shellQuote(v)}; `;
    session.appliedEnv[k] = v;
  }
  for (const k of Object.keys(session.appliedEnv)) {
    if (!(k in env) && /^[A-Za-z_][A-Za-z0-9_]*$/.test(k)) {
      out += `unset ${k}; `;
      delete session.appliedEnv[k];
    }
  }
  return out;
}
