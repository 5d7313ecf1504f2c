/**
 * `terminal` tool: a persistent bash per conversation, driven through pipes.
 * See session.ts (beside it) for how the shell is run; this file holds the tool semantics
 * (timeouts, input keys, refusing a second command, truncation, redaction).
 *
 * Why one file of this size: the tool's rules for one call (soft and hard timeouts, input keys, a second
 * command refused, truncation to a file, redaction) act on one call's state together.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { z } from 'zod';
import { TERMINAL, terminalParameters, type TerminalObservation } from '../../events/tool-catalog.js';
import type { Tool, ToolContext } from '../types.js';
import { cleanTerminalOutput, truncateMiddle } from './output.js';
import { type RunningCommand, ShellSession, shellQuote, type ShellState } from './session.js';
import { VISIBLE_OUTPUTS } from '../../sandbox/settings.js';
import type { ShellSandbox } from '../../sandbox/types.js';

/** What starting a conversation's shell needs of a tool call's context. */
export type ShellContext = Pick<ToolContext, 'conversationId' | 'workspaceDir' | 'env'>;

interface TerminalToolOptions {
  /** Return (exit_code -1) when a command prints nothing new for this long. Default 30 s. */
  noOutputTimeoutMs?: number;
  /** Longest output text returned to the LLM; longer output is cut in the middle. Default 30,000. */
  maxOutputChars?: number;
  /** Close a conversation's shell after this long without tool calls. Default 10 min. */
  idleCloseMs?: number;
  /** Directory for full outputs of truncated observations. Default: os.tmpdir()/parley-output/<conversationId>. */
  outputDir?: (conversationId: string) => string;
  /**
   * Return early (exit_code -1) when the command's newest output does not end with a newline and
   * nothing more arrives for this long: the program is most likely showing a prompt and waiting for
   * input (`Name: `, `>>> `, `[Y/n] `). Default 3 s (never more than noOutputTimeoutMs).
   */
  inputWaitMs?: number;
  /**
   * Longest a call waits for a command without a `timeout` that keeps printing (e.g. `yes`), so a
   * chatty command cannot block the agent forever. Default 4 x noOutputTimeoutMs.
   */
  maxCallMs?: number;
  /** Where shells run: the conversation's sandbox, or plain processes (`Sandbox.none()`). */
  sandbox: ShellSandbox;
}

type TerminalParams = z.output<typeof terminalParameters>;
export type { TerminalObservation };

function describe(noOutputMs: number, maxChars: number): string {
  return `Run a bash command in a persistent shell (one per conversation, started in the workspace).
* State persists between calls: working directory, exported variables, functions, an activated Python venv.
* There is no terminal (TTY): programs that insist on one may not work; prefer non-interactive flags (e.g. \`-y\`, \`--no-pager\`). A plain \`python3\` or \`python\` starts a REPL that reads the lines you send with is_input=true.
* Long-running commands: a call returns when the command finishes, or (with exit_code -1) after ${secondsText(noOutputMs)} without new output, or earlier when the program seems to wait for input. The command keeps running: send "" to wait for more output, is_input=true to type into it, or "C-c" with is_input=true to interrupt it. Only one command can run at a time. Use \`timeout\` for a hard limit, and run servers in the background (\`cmd > log 2>&1 &\`).
* Output longer than ${maxChars} characters is cut in the middle; the full output is saved to a file whose path is given.`;
}

/** Escape sequences for keys that are sent as bytes to the program's stdin. */
const KEY_BYTES: Record<string, string> = {
  ENTER: '\n',
  TAB: '\t',
  ESC: '\x1b',
  BS: '\x7f',
  UP: '\x1b[A',
  DOWN: '\x1b[B',
  RIGHT: '\x1b[C',
  LEFT: '\x1b[D',
  HOME: '\x1b[H',
  END: '\x1b[F',
  PGUP: '\x1b[5~',
  PGDN: '\x1b[6~',
};

type WaitReason = 'done' | 'soft_timeout' | 'input_wait' | 'max_wait' | 'hard_timeout' | 'aborted';

/** A command its shell never began (ShellSession.neverBegan): what the try took, for the next one. */
class NotBegun {
  constructor(
    /** Output the try took from the old shell (a previous command's rest, background output). */
    readonly prefix: string,
    /** How the shell ended, for the note: " (SIGKILL)", " with code 1". */
    readonly how: string,
  ) {}
}

function sanitizeId(id: string): string {
  const s = id.replace(/[^A-Za-z0-9._-]/g, '_').replace(/^\.+/, '_');
  return s.length > 0 ? s.slice(0, 200) : '_';
}

function secondsText(ms: number): string {
  const s = ms / 1000;
  return `${Number.isInteger(s) ? s : s.toFixed(1)} second${s === 1 ? '' : 's'}`;
}

interface SessionEntry {
  session: ShellSession;
  idleTimer: NodeJS.Timeout | null;
}

/** A shell closed after SANDBOX_IDLE_CLOSE_MS: what the next one takes up, and when it was closed. */
interface IdleClosed {
  state: ShellState;
  at: number;
}

class TerminalManager {
  readonly noOutputTimeoutMs: number;
  readonly maxOutputChars: number;
  readonly idleCloseMs: number;
  readonly inputWaitMs: number;
  readonly maxCallMs: number;
  private readonly outputDirFor: (conversationId: string) => string;
  private readonly entries = new Map<string, SessionEntry>();
  private readonly starting = new Map<string, Promise<ShellSession>>();
  private readonly locks = new Map<string, Promise<unknown>>();
  /** Conversations whose shell was closed for being idle: the next shell takes its state up. */
  private readonly idleClosed = new Map<string, IdleClosed>();
  /** What a shell started ahead (`prewarm`) has to tell the command that first uses it. */
  private readonly prewarmNotes = new Map<string, string[]>();
  private outputSeq = 0;
  readonly sandbox: ShellSandbox;

  constructor(opts: TerminalToolOptions) {
    this.sandbox = opts.sandbox;
    this.noOutputTimeoutMs = opts.noOutputTimeoutMs ?? 30_000;
    this.maxOutputChars = opts.maxOutputChars ?? 30_000;
    this.idleCloseMs = opts.idleCloseMs ?? 10 * 60_000;
    this.inputWaitMs = Math.min(opts.inputWaitMs ?? 3000, this.noOutputTimeoutMs);
    this.maxCallMs = Math.max(opts.maxCallMs ?? 4 * this.noOutputTimeoutMs, this.noOutputTimeoutMs);
    this.outputDirFor = opts.outputDir ?? ((id: string) => path.join(os.tmpdir(), 'parley-output', sanitizeId(id)));
  }

  /** The live shell of a conversation, if any (for inspection and tests). */
  getSession(conversationId: string): ShellSession | undefined {
    const s = this.entries.get(conversationId)?.session;
    return s?.alive ? s : undefined;
  }

  /** Runs one tool call. Calls for the same conversation are serialised. */
  execute(params: TerminalParams, ctx: ToolContext): Promise<TerminalObservation> {
    const id = ctx.conversationId;
    const prev = this.locks.get(id) ?? Promise.resolve();
    const next = prev.catch(() => {}).then(() => this.executeLocked(params, ctx));
    this.locks.set(id, next);
    const cleanup = () => {
      if (this.locks.get(id) === next) this.locks.delete(id);
    };
    next.then(cleanup, cleanup);
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
    const id = ctx.conversationId;
    const idle = this.idleClosed.get(id);
    if (!idle || this.entries.has(id) || this.starting.has(id)) return;
    const prev = this.locks.get(id) ?? Promise.resolve();
    const next = prev
      .catch(() => {})
      .then(async () => {
        if (this.entries.has(id) || this.idleClosed.get(id) !== idle) return; // a command got there first
        try {
          const got = await this.getOrStart(ctx);
          if (got.notes.length) this.prewarmNotes.set(id, got.notes);
          this.touch(id, false);
        } catch {
          if (!this.entries.has(id) && !this.idleClosed.has(id)) this.idleClosed.set(id, idle);
        }
      });
    this.locks.set(id, next);
    void next.then(() => {
      if (this.locks.get(id) === next) this.locks.delete(id);
    });
  }

  /** Ends the conversation's shell; `reason` is what the running command's observation says. */
  async closeConversation(conversationId: string, reason = 'closed'): Promise<void> {
    for (const f of this.idleClosed.get(conversationId)?.state.fifos ?? []) await fs.promises.unlink(f.path).catch(() => {});
    this.idleClosed.delete(conversationId);
    this.prewarmNotes.delete(conversationId);
    const entry = this.entries.get(conversationId);
    this.entries.delete(conversationId);
    const starting = this.starting.get(conversationId);
    if (entry) {
      if (entry.idleTimer) clearTimeout(entry.idleTimer);
      await entry.session.terminate(reason);
    }
    if (starting) {
      const s = await starting.catch(() => null);
      if (s) await s.terminate(reason);
    }
  }

  async closeAll(): Promise<void> {
    const ids = new Set([...this.entries.keys(), ...this.starting.keys()]);
    await Promise.all([...ids].map((id) => this.closeConversation(id)));
  }

  // ------------------------------------------------------------------ internals

  private touch(conversationId: string, active: boolean): void {
    const entry = this.entries.get(conversationId);
    if (!entry) return;
    if (entry.idleTimer) clearTimeout(entry.idleTimer);
    entry.idleTimer = null;
    if (active) return;
    entry.idleTimer = setTimeout(() => void this.closeIdle(conversationId, entry), this.idleCloseMs);
    entry.idleTimer.unref();
  }

  /**
   * SANDBOX_IDLE_CLOSE_MS without a command: the shell's exported variables and directory are kept
   * (in memory) for the next shell, the shell is closed, and so is the conversation's sandbox when
   * nothing else of it runs: an idle conversation costs no process.
   */
  private async closeIdle(conversationId: string, entry: SessionEntry): Promise<void> {
    if (this.entries.get(conversationId) !== entry) return;
    const state = await entry.session.snapshot().catch(() => null);
    if (this.entries.get(conversationId) !== entry) return;
    this.entries.delete(conversationId);
    // the FIFOs it made for later commands stay for the next shell (no process to make them then)
    if (state) this.idleClosed.set(conversationId, { state: { ...state, fifos: entry.session.keepFifos() }, at: Date.now() });
    await entry.session.terminate('idle');
    await this.sandbox.closeIfIdle(conversationId);
  }

  private async getOrStart(ctx: ShellContext): Promise<{ session: ShellSession; notes: string[] }> {
    const notes: string[] = this.prewarmNotes.get(ctx.conversationId) ?? [];
    this.prewarmNotes.delete(ctx.conversationId);
    const entry = this.entries.get(ctx.conversationId);
    if (entry) {
      if (entry.session.alive) return { session: entry.session, notes };
      this.entries.delete(ctx.conversationId);
      if (entry.idleTimer) clearTimeout(entry.idleTimer);
      await entry.session.terminate('gone');
      notes.push(
        'The previous shell had exited, so a new shell was started in the workspace: the working directory and ' +
          'environment variables from before are gone.',
      );
    }
    const sandbox = this.sandbox;
    await sandbox.ready;
    // workspaces are created on first use (with the sandbox on, by the sandbox: its spare's moved in)
    if (!sandbox.enabled) await fs.promises.mkdir(ctx.workspaceDir, { recursive: true, mode: 0o700 });
    const dirs = sandbox.enabled ? sandbox.prepare(ctx.conversationId) : null;
    const io = dirs ? { ...dirs.io, owner: dirs.owner } : undefined;
    const idle = this.idleClosed.get(ctx.conversationId);
    this.idleClosed.delete(ctx.conversationId);
    if (idle) {
      notes.push(
        `The shell had been idle for ${secondsText(Date.now() - idle.at + this.idleCloseMs)} and was stopped with everything it ran in the background; ` +
          'a new shell started in the same working directory with the same exported variables.',
      );
    }
    const startP = ShellSession.start({
      conversationId: ctx.conversationId,
      cwd: ctx.workspaceDir,
      restore: idle?.state,
      // built from scratch, never the daemon's environment (its keys stay out of the shell)
      env: sandbox.env({ TERM: 'dumb', PAGER: 'cat', GIT_PAGER: 'cat', PYTHONUNBUFFERED: '1', ...ctx.env }),
      launch: (argv, o) =>
        sandbox.spawn(ctx.conversationId, argv, {
          workspaceDir: ctx.workspaceDir,
          cwd: o.cwd,
          env: o.env,
          stdio: ['pipe', 'pipe', 'pipe'],
        }),
      io,
    });
    this.starting.set(ctx.conversationId, startP);
    try {
      const session = await startP;
      session.appliedEnv = { ...ctx.env };
      if (this.starting.get(ctx.conversationId) !== startP) {
        // closeConversation ran while the shell was starting.
        await session.terminate('closed');
        throw new Error('The terminal was closed while it was starting.');
      }
      this.entries.set(ctx.conversationId, { session, idleTimer: null });
      return { session, notes };
    } finally {
      if (this.starting.get(ctx.conversationId) === startP) this.starting.delete(ctx.conversationId);
    }
  }

  /** Shell code exporting ctx.env values that changed since the shell started (e.g. a new secret). */
  private envPrefix(session: ShellSession, env: Record<string, string>): string {
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

  private async executeLocked(params: TerminalParams, ctx: ToolContext): Promise<TerminalObservation> {
    // Commands written with Windows line endings would give bash stray \r characters.
    const command = (params.command ?? '').replace(/\r\n/g, '\n');
    const isInput = params.is_input === true;
    const timeoutSec = typeof params.timeout === 'number' && params.timeout > 0 ? params.timeout : null;
    const base = { command, ctx };

    if (params.reset && isInput) {
      return this.errorObs(base, 'Cannot use reset=true together with is_input=true.');
    }
    if (ctx.signal.aborted) {
      return this.errorObs(base, 'The command was not run because the run was interrupted.');
    }

    const notes: string[] = [];
    if (params.reset) {
      const entry = this.entries.get(ctx.conversationId);
      if (entry) {
        this.entries.delete(ctx.conversationId);
        if (entry.idleTimer) clearTimeout(entry.idleTimer);
        await entry.session.terminate('reset');
      }
      notes.push('The terminal was reset: the old shell and all its processes were killed and a new shell was started.');
    }

    // a second try only for a command its shell never began (handle): once, in a new shell
    let retried: NotBegun | null = null;
    for (;;) {
      let session: ShellSession;
      try {
        const got = await this.getOrStart(ctx);
        session = got.session;
        if (!params.reset || retried) notes.push(...got.notes);
      } catch (err) {
        return this.errorObs(base, `Could not start the shell: ${(err as Error).message}`);
      }
      this.touch(ctx.conversationId, true);
      this.sandbox.setBusy(ctx.conversationId, true);
      try {
        const out = await this.handle(session, params, ctx, command, isInput, timeoutSec, notes, retried);
        if (!(out instanceof NotBegun)) return out;
        retried = out;
        notes.push(`The shell exited${out.how} before it began the command, so the command was run in a new shell.`);
      } finally {
        // a command still running keeps the sandbox from being closed as idle (SANDBOX_MAX_LIVE)
        this.sandbox.setBusy(ctx.conversationId, !!session.running && !session.running.done);
        if (this.entries.get(ctx.conversationId)?.session === session) this.touch(ctx.conversationId, false);
      }
    }
  }

  private async handle(
    session: ShellSession,
    params: TerminalParams,
    ctx: ToolContext,
    command: string,
    isInput: boolean,
    timeoutSec: number | null,
    notes: string[],
    retried: NotBegun | null,
  ): Promise<TerminalObservation | NotBegun> {
    const base = { command, ctx };
    const rc = session.running;
    const busy = rc !== null && rc.done === null;
    const isEmpty = command.trim() === '';

    if (params.reset && isEmpty) {
      return this.resultObs(base, { output: '', notes, exitCode: null, cwd: session.cwd });
    }

    if (!busy) {
      // A command that finished after its last observation: give the agent its remaining output.
      let prefix = '';
      if (rc?.done) {
        const rest = cleanTerminalOutput(session.takeOutput(rc));
        session.clearFinished();
        if (isEmpty && !isInput) {
          const idle = cleanTerminalOutput(session.takeIdleOutput());
          return this.resultObs(base, {
            output: rest + idle,
            notes: [...notes, ...this.shellExitNotes(rc)],
            exitCode: rc.done.exitCode,
            cwd: rc.done.cwd,
          });
        }
        prefix =
          `[The previous command "${rc.command}" finished with exit code ${rc.done.exitCode}` +
          (rest ? `; its output since your last request:]\n${rest}${rest.endsWith('\n') ? '' : '\n'}[End of that output]\n` : '.]\n');
      }
      if (isInput) {
        return this.errorObs(base, `${prefix}No command is running, so there is nothing to send input to. Run a command with is_input=false.`, session.cwd);
      }
      const idle = cleanTerminalOutput(session.takeIdleOutput());
      if (idle) {
        prefix += `[Output printed by background processes since the last command:]\n${idle}${idle.endsWith('\n') ? '' : '\n'}[End of background output]\n`;
      }
      // what the first try took from the shell that never began the command
      if (retried) prefix = retried.prefix + prefix;
      if (isEmpty) {
        if (prefix) return this.resultObs(base, { output: prefix, notes, exitCode: null, cwd: session.cwd });
        return this.errorObs(base, 'No command is running, so there is no output to wait for.', session.cwd);
      }
      let started: RunningCommand;
      try {
        started = await session.run(command, this.envPrefix(session, ctx.env));
      } catch (err) {
        return this.errorObs(base, `Could not run the command: ${(err as Error).message}`, session.cwd);
      }
      if (timeoutSec !== null) {
        started.timeoutSeconds = timeoutSec;
        started.deadline = started.startedAt + timeoutSec * 1000;
      }
      const reason = await this.waitFor(session, started, ctx.signal);
      // The shell ended before it began the command (killed under it with its sandbox, say, as the
      // command was on its way): nothing of it ran, so it is run in a new shell, once
      // (the next getOrStart finds this shell gone and starts one, with its note)
      if (reason === 'done' && !retried && (await session.neverBegan(started))) {
        const ex = started.done?.shellExited;
        return new NotBegun(prefix, ex?.code != null ? ` with code ${ex.code}` : ex?.signal ? ` (${ex.signal})` : '');
      }
      return this.report(session, started, ctx, base, notes, prefix, reason);
    }

    // A command is running.
    const running = rc!;
    if (!isInput && !isEmpty) {
      const elapsed = Math.round((Date.now() - running.startedAt) / 1000);
      return this.errorObs(
        base,
        `Your command "${command}" was NOT executed: the previous command "${running.command}" is still running ` +
          `(started ${elapsed} s ago). Only one command can run at a time. You can: send an empty command "" to wait ` +
          `for more of its output; send input to it with is_input=true (text, or a key such as "C-c" to interrupt ` +
          `it); or use reset=true to kill the shell and start a new one.`,
        session.cwd,
      );
    }
    if (timeoutSec !== null) {
      running.timeoutSeconds = timeoutSec;
      running.deadline = Date.now() + timeoutSec * 1000;
    }
    if (isInput && !isEmpty) {
      const err = this.sendInput(session, running, command, notes);
      if (err) return this.errorObs(base, err, session.cwd);
    }
    return this.report(session, running, ctx, base, notes, '', await this.waitFor(session, running, ctx.signal));
  }

  /** Delivers `is_input` text or a special key. Returns an error message, or null. */
  private sendInput(session: ShellSession, rc: RunningCommand, input: string, notes: string[]): string | null {
    switch (input) {
      case 'C-c':
        session.interrupt();
        return null;
      case 'C-d':
        if (!session.closeStdin(rc)) notes.push('The standard input of the command was already closed.');
        else notes.push('Sent end-of-file (C-d): the standard input of the running command was closed.');
        return null;
      case 'C-z': {
        // Without a terminal the shell's process group is "orphaned", and the kernel discards SIGTSTP
        // for such groups unless the program handles it: send SIGTSTP (for programs that do), then SIGSTOP.
        const n = session.signalForeground('SIGTSTP');
        session.signalForeground('SIGSTOP');
        notes.push(
          `Stopped the running program (C-z, ${n} process(es)). This shell has no terminal, hence no job control: ` +
            '`bg`/`fg` are not available and the stopped program still occupies the shell. Send "C-c" with ' +
            'is_input=true to end it (it is resumed so that it receives the interrupt).',
        );
        return null;
      }
    }
    let bytes: string;
    if (Object.hasOwn(KEY_BYTES, input)) bytes = KEY_BYTES[input]!;
    else if (/^C-[a-zA-Z]$/.test(input)) bytes = String.fromCharCode(input.toUpperCase().charCodeAt(2) - 64);
    else bytes = input.endsWith('\n') ? input : `${input}\n`;
    return session.writeInput(rc, bytes);
  }

  /** The observation of `rc` once waitFor returned `reason`. */
  private async report(
    session: ShellSession,
    rc: RunningCommand,
    ctx: ToolContext,
    base: { command: string; ctx: ToolContext },
    notes: string[],
    prefix: string,
    reason: WaitReason,
  ): Promise<TerminalObservation> {
    let isError = false;
    let timedOut = false;
    if (reason === 'hard_timeout' || reason === 'aborted') {
      isError = true;
      timedOut = reason === 'hard_timeout';
      const fast = reason === 'aborted';
      const how = await this.killCommand(session, rc, fast);
      if (reason === 'hard_timeout') {
        notes.push(`The command timed out after ${secondsText((rc.timeoutSeconds ?? 0) * 1000)} and was killed${how}.`);
      } else {
        notes.push(`The command was interrupted because the run was stopped, and was killed${how}.`);
      }
    }
    const output = prefix + cleanTerminalOutput(session.takeOutput(rc));
    if (rc.done) {
      session.clearFinished();
      notes.push(...this.shellExitNotes(rc));
      if (rc.done.shellExited && this.entries.get(ctx.conversationId)?.session === session) {
        this.entries.delete(ctx.conversationId);
      }
      return this.resultObs(base, { output, notes, exitCode: rc.done.exitCode, cwd: rc.done.cwd, isError, timedOut });
    }
    if (reason === 'soft_timeout') {
      notes.push(
        `The command has produced no new output for ${secondsText(this.noOutputTimeoutMs)} and is still running. ` +
          'To keep waiting, send an empty command "". To type into it, use is_input=true. ' +
          'To interrupt it, send "C-c" with is_input=true. For a long command you can also set `timeout` (seconds).',
      );
    } else if (reason === 'max_wait') {
      notes.push(
        `The command is still running and still printing output after ${secondsText(this.maxCallMs)}. ` +
          'Send an empty command "" to get more of its output, or "C-c" with is_input=true to interrupt it.',
      );
    } else if (reason === 'input_wait') {
      notes.push(
        'The command is still running and seems to be waiting for input (its last output line is incomplete and ' +
          'nothing more came). Send input with is_input=true (text, "ENTER", or "C-d" for end of input), send "" to ' +
          'keep waiting, or "C-c" with is_input=true to interrupt it.',
      );
    }
    return this.resultObs(base, { output, notes, exitCode: -1, cwd: session.cwd, isError, timedOut: true });
  }

  private shellExitNotes(rc: RunningCommand): string[] {
    const ex = rc.done?.shellExited;
    if (!ex) return [];
    if (ex.reason === 'exited') {
      return [
        `The shell exited${ex.code !== null ? ` with code ${ex.code}` : ex.signal ? ` (${ex.signal})` : ''}. ` +
          'A new shell will be started in the workspace for the next command; variables and the working directory ' +
          'from this one are gone.',
      ];
    }
    if (ex.reason === 'restart') {
      return [
        'The command could not be stopped, so the whole shell was killed. A new shell will be started in the ' +
          'workspace for the next command; variables and the working directory from before are gone.',
      ];
    }
    return [`The shell was closed (${ex.reason}).`];
  }

  private async waitFor(session: ShellSession, rc: RunningCommand, signal: AbortSignal): Promise<WaitReason> {
    const callStart = Date.now();
    for (;;) {
      if (rc.done) return 'done';
      if (signal.aborted) return 'aborted';
      const now = Date.now();
      if (rc.deadline !== null && now >= rc.deadline) return 'hard_timeout';
      let wake = Number.POSITIVE_INFINITY;
      if (rc.deadline !== null) {
        wake = rc.deadline;
      } else {
        const quietSince = Math.max(rc.lastOutputAt, callStart);
        if (now - quietSince >= this.noOutputTimeoutMs) return 'soft_timeout';
        if (now - callStart >= this.maxCallMs) return 'max_wait';
        wake = Math.min(quietSince + this.noOutputTimeoutMs, callStart + this.maxCallMs);
      }
      if (rc.hasUnreturnedOutput && !rc.output.endsWithNewline()) {
        if (now - rc.lastOutputAt >= this.inputWaitMs) return 'input_wait';
        wake = Math.min(wake, rc.lastOutputAt + this.inputWaitMs);
      }
      await session.waitForChange(Math.min(wake - now, 60_000), signal);
    }
  }

  /**
   * Stops the running command: SIGINT to the shell's process group (what Ctrl-C does), then SIGKILL
   * to the command's processes, and as a last resort kills and forgets the whole shell.
   * Returns a short description of what it took.
   */
  private async killCommand(session: ShellSession, rc: RunningCommand, fast: boolean): Promise<string> {
    if (rc.done) return '';
    session.interrupt();
    if (await session.waitDone(rc, fast ? 300 : 1000)) return ' (SIGINT)';
    session.killForeground();
    if (await session.waitDone(rc, fast ? 500 : 1500)) return ' (SIGKILL)';
    const id = session.conversationId;
    const entry = this.entries.get(id);
    if (entry?.session === session) {
      this.entries.delete(id);
      if (entry.idleTimer) clearTimeout(entry.idleTimer);
    }
    await session.terminate('restart');
    await session.waitDone(rc, 500);
    return ' (the shell had to be killed)';
  }

  // ------------------------------------------------------------------ observations

  private saveFullOutput(conversationId: string, text: string): string | null {
    try {
      // sandboxed: the conversation's directory its shell sees (read-only) at /parley/outputs
      const dirs = this.sandbox.enabled ? this.sandbox.dirs(conversationId) : null;
      const dir = dirs ? dirs.outputs.host : this.outputDirFor(conversationId);
      fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
      const file = path.resolve(dir, `terminal-${new Date().toISOString().replace(/[:.]/g, '-')}-${process.pid}-${++this.outputSeq}.txt`);
      // the directory is read-only inside and the daemon's (the sandbox cannot put a link there);
      // the file is readable by the sandbox's uid
      const fd = fs.openSync(file, fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_EXCL | fs.constants.O_NOFOLLOW, 0o600);
      try {
        if (dirs?.owner) fs.fchownSync(fd, dirs.owner.uid, dirs.owner.gid);
        fs.writeFileSync(fd, text);
      } finally {
        fs.closeSync(fd);
      }
      return file;
    } catch {
      return null;
    }
  }

  /** The saved output file as the shell sees it. */
  private visibleOutputPath(file: string): string {
    return this.sandbox.enabled ? path.posix.join(VISIBLE_OUTPUTS, path.basename(file)) : file;
  }

  private resultObs(
    base: { command: string; ctx: ToolContext },
    r: { output: string; notes: string[]; exitCode: number | null; cwd: string; isError?: boolean; timedOut?: boolean },
  ): TerminalObservation {
    const { ctx } = base;
    let output = ctx.redact(r.output);
    let fullPath: string | null = null;
    if (output.length > this.maxOutputChars) {
      fullPath = this.saveFullOutput(ctx.conversationId, output);
      const shown = fullPath && this.visibleOutputPath(fullPath);
      const where = shown
        ? `The full output (${output.length} characters) was saved to ${shown}; read parts of it with e.g. \`sed -n '100,200p' ${shown}\` or \`grep\`.`
        : 'The full output could not be saved.';
      output = truncateMiddle(
        output,
        this.maxOutputChars,
        (omitted) => `\n\n[... Output truncated: ${omitted} characters were removed from the middle. ${where} ...]\n\n`,
      );
    }
    const lines: string[] = [];
    if (output) lines.push(output.endsWith('\n') ? output.slice(0, -1) : output);
    for (const n of r.notes) lines.push(`[${n}]`);
    lines.push(`[Current working directory: ${r.cwd}]`);
    if (r.exitCode !== null && r.exitCode !== -1) lines.push(`[Command finished with exit code ${r.exitCode}]`);
    const obs: TerminalObservation = {
      kind: 'TerminalObservation',
      content: [{ type: 'text', text: ctx.redact(lines.join('\n')) }],
      is_error: r.isError ?? false,
      command: ctx.redact(base.command),
      exit_code: r.exitCode,
      working_dir: ctx.redact(r.cwd),
      timeout: r.timedOut ?? false,
    };
    if (fullPath) obs.full_output_path = this.visibleOutputPath(fullPath);
    return obs;
  }

  private errorObs(base: { command: string; ctx: ToolContext }, message: string, cwd?: string): TerminalObservation {
    const { ctx } = base;
    const working = cwd ?? this.entries.get(ctx.conversationId)?.session.cwd ?? ctx.workspaceDir;
    return {
      kind: 'TerminalObservation',
      content: [{ type: 'text', text: ctx.redact(message) }],
      is_error: true,
      command: ctx.redact(base.command),
      exit_code: null,
      working_dir: ctx.redact(working),
      timeout: false,
    };
  }
}

export type TerminalTool = Tool<TerminalParams, TerminalObservation> & {
  readonly manager: TerminalManager;
  /** A run begins: a shell closed for being idle starts again now (TerminalManager.prewarm). */
  prewarm(ctx: ShellContext): void;
  closeConversation(conversationId: string, reason?: string): Promise<void>;
  closeAll(): Promise<void>;
};

export function createTerminalTool(opts: TerminalToolOptions): TerminalTool {
  const manager = new TerminalManager(opts);
  return {
    name: TERMINAL.name,
    kind: TERMINAL.kind,
    actionKind: TERMINAL.actionKind,
    description: describe(manager.noOutputTimeoutMs, manager.maxOutputChars),
    parameters: terminalParameters,
    manager,
    execute: (params, ctx) => manager.execute(params, ctx),
    prewarm: (ctx) => manager.prewarm(ctx),
    closeConversation: (id: string, reason?: string) => manager.closeConversation(id, reason),
    closeAll: () => manager.closeAll(),
  };
}
