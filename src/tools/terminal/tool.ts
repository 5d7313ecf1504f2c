/**
 * `terminal` tool: what one call does with the conversation's persistent bash (its shell from the
 * pool: pool.ts; how the shell is driven: session.ts): the soft and hard timeouts, input and special
 * keys, a second command refused while one runs, a shell that never began a command, and the
 * observation (observation.ts: truncation to a saved file, redaction).
 */
import os from 'node:os';
import path from 'node:path';
import type * as z from 'zod';
import { TERMINAL, terminalParameters, type TerminalObservation } from '../../events/tool-catalog.js';
import type { ShellSandbox } from '../../sandbox/types.js';
import type { Tool, ToolContext } from '../types.js';
import type { RunningCommand } from './command.js';
import { type CallBase, Observations } from './observation.js';
import { cleanTerminalOutput } from './output.js';
import { envPrefix, secondsText, type ShellContext, ShellPool } from './pool.js';
import type { ShellSession } from './session.js';

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
* There is no terminal (TTY): programs that insist on one may not work; prefer non-interactive flags (e.g. \`-y\`, \`--no-pager\`). \
A plain \`python3\` or \`python\` starts a REPL that reads the lines you send with is_input=true.
* Long-running commands: a call returns when the command finishes, or (with exit_code -1) after ${secondsText(noOutputMs)} without new output, \
or earlier when the program seems to wait for input. The command keeps running: send "" to wait for more output, \
is_input=true to type into it, or "C-c" with is_input=true to interrupt it. Only one command can run at a time. \
Use \`timeout\` for a hard limit, and run servers in the background (\`cmd > log 2>&1 &\`).
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

class TerminalCalls {
  readonly noOutputTimeoutMs: number;
  readonly inputWaitMs: number;
  readonly maxCallMs: number;
  readonly observations: Observations;

  constructor(
    readonly pool: ShellPool,
    opts: Omit<TerminalToolOptions, 'sandbox' | 'idleCloseMs'>,
  ) {
    this.noOutputTimeoutMs = opts.noOutputTimeoutMs ?? 30_000;
    this.inputWaitMs = Math.min(opts.inputWaitMs ?? 3000, this.noOutputTimeoutMs);
    this.maxCallMs = Math.max(opts.maxCallMs ?? 4 * this.noOutputTimeoutMs, this.noOutputTimeoutMs);
    const outputDirFor = opts.outputDir ?? ((id: string) => path.join(os.tmpdir(), 'parley-output', sanitizeId(id)));
    this.observations = new Observations(pool.sandbox, opts.maxOutputChars ?? 30_000, outputDirFor);
  }

  /** Runs one tool call. Calls for the same conversation are serialised. */
  execute(params: TerminalParams, ctx: ToolContext): Promise<TerminalObservation> {
    return this.pool.queued(ctx.conversationId, () => this.executeLocked(params, ctx));
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
      await this.pool.reset(ctx.conversationId);
      notes.push('The terminal was reset: the old shell and all its processes were killed and a new shell was started.');
    }

    // a second try only for a command its shell never began (handle): once, in a new shell
    let retried: NotBegun | null = null;
    for (;;) {
      let session: ShellSession;
      try {
        const got = await this.pool.acquire(ctx);
        session = got.session;
        if (!params.reset || retried) notes.push(...got.notes);
      } catch (err) {
        return this.errorObs(base, `Could not start the shell: ${(err as Error).message}`);
      }
      this.pool.busy(ctx.conversationId, session, true);
      try {
        const out = await this.handle(session, params, ctx, command, isInput, timeoutSec, notes, retried);
        if (!(out instanceof NotBegun)) return out;
        retried = out;
        notes.push(`The shell exited${out.how} before it began the command, so the command was run in a new shell.`);
      } finally {
        this.pool.busy(ctx.conversationId, session, false);
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
      return this.observations.result(base, { output: '', notes, exitCode: null, cwd: session.cwd });
    }

    if (!busy) {
      // A command that finished after its last observation: give the agent its remaining output.
      let prefix = '';
      if (rc?.done) {
        const rest = cleanTerminalOutput(session.takeOutput(rc));
        session.clearFinished();
        if (isEmpty && !isInput) {
          const idle = cleanTerminalOutput(session.takeIdleOutput());
          return this.observations.result(base, {
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
        if (prefix) return this.observations.result(base, { output: prefix, notes, exitCode: null, cwd: session.cwd });
        // (with what the shell's start said: the one before was killed, say, once this call's came back)
        return this.errorObs(base, [...notes, 'No command is running, so there is no output to wait for.'].join('\n'), session.cwd);
      }
      let started: RunningCommand;
      try {
        started = await session.run(command, envPrefix(session, ctx.env));
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
        void session.interrupt(rc);
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
    base: CallBase,
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
      if (rc.done.shellExited) this.pool.forget(session);
      return this.observations.result(base, { output, notes, exitCode: rc.done.exitCode, cwd: rc.done.cwd, isError, timedOut });
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
    return this.observations.result(base, { output, notes, exitCode: -1, cwd: session.cwd, isError, timedOut: true });
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
    // (once the shell has begun the command: see interrupt.ts; not again: SIGKILL follows)
    await session.interrupt(rc, false);
    if (await session.waitDone(rc, fast ? 300 : 1000)) return ' (SIGINT)';
    session.killForeground();
    if (await session.waitDone(rc, fast ? 500 : 1500)) return ' (SIGKILL)';
    this.pool.forget(session);
    await session.terminate('restart');
    await session.waitDone(rc, 500);
    return ' (the shell had to be killed)';
  }

  private errorObs(base: CallBase, message: string, cwd?: string): TerminalObservation {
    return this.observations.error(base, message, cwd ?? this.pool.cwd(base.ctx.conversationId) ?? base.ctx.workspaceDir);
  }
}

export type TerminalTool = Tool<TerminalParams, TerminalObservation> & {
  /** The conversations' shells. */
  readonly pool: ShellPool;
  /** A run begins: a shell closed for being idle starts again now (ShellPool.prewarm). */
  prewarm(ctx: ShellContext): void;
  closeConversation(conversationId: string, reason?: string): Promise<void>;
  closeAll(): Promise<void>;
};

/** The terminal tool over its own pool of shells (`pool`), or the one given. */
export function createTerminalTool(opts: TerminalToolOptions & { pool?: ShellPool }): TerminalTool {
  const pool = opts.pool ?? new ShellPool({ sandbox: opts.sandbox, idleCloseMs: opts.idleCloseMs });
  const calls = new TerminalCalls(pool, opts);
  return {
    name: TERMINAL.name,
    kind: TERMINAL.kind,
    actionKind: TERMINAL.actionKind,
    description: describe(calls.noOutputTimeoutMs, calls.observations.maxOutputChars),
    parameters: terminalParameters,
    pool,
    execute: (params, ctx) => calls.execute(params, ctx),
    prewarm: (ctx) => pool.prewarm(ctx),
    closeConversation: (id: string, reason?: string) => pool.close(id, reason),
    closeAll: () => pool.closeAll(),
  };
}
