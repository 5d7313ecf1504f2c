/**
 * One persistent bash process for one conversation, driven through pipes (no pty).
 *
 * How it works
 * - bash runs as an *interactive* shell (`bash --norc --noprofile --noediting -i`) whose stdin is a pipe that
 *   only carries our command lines. Interactive mode matters for Ctrl-C: on SIGINT an interactive
 *   bash aborts the whole running command line (loops included) and keeps its state, where a
 *   non-interactive bash either exits or carries on with the loop. Without a terminal bash disables
 *   job control, so every process it starts stays in its process group (= its session, since it is
 *   spawned detached). Background jobs (`cmd &`) are started with SIGINT ignored.
 * - Each command is sent as one line: `{ eval '<command>'; } <fifo >&63 2>&63`. `eval` keeps
 *   syntax errors from killing the shell; the braces keep `cd`/`export`/venv activation in the shell
 *   itself; fd 63 is a copy of the original stdout so a command's `exec >file` cannot hide later
 *   output; stderr is merged into stdout, like a terminal shows it.
 * - The command's stdin is a fresh named pipe (FIFO), one per command (made ahead, a few at a time). `is_input` writes to it,
 *   and `C-d` closes our end so the program sees end-of-file while the shell itself is untouched.
 *   The next command gets a new FIFO, so unread input never leaks into it.
 * - Completion is detected with PROMPT_COMMAND (read-only, so commands cannot replace it), which
 *   bash runs before every prompt - also after a line aborted by Ctrl-C. When the line set the
 *   per-command random nonce, it prints `\x1ePARLEY:<nonce>:<exit code>:<pwd>\x1f` to fd 63.
 *   The nonce is never shown to the agent, so program output cannot fake the end of a command.
 * - Interactive programs over pipes: `read -p` does not show its prompt when stdin is not a terminal,
 *   so `read` is wrapped to print the prompt when reading from the command's FIFO; `python`/`python3`
 *   started without a script get `-i -u` when reading from the FIFO, so the REPL prompts and runs
 *   each line as it arrives (plain `python3` would wait for end-of-file). PYTHONUNBUFFERED is set.
 *
 * Beside it: shell-script.ts (the init script, the restore lines, quoting), command.ts (one command and
 * its bounded output), fifos.ts (the commands' stdin FIFOs). This file is the process, the protocol
 * over its pipes (the marks, output parsing), waiting, input and signals.
 */
import type { ChildProcess, ChildProcessWithoutNullStreams } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { StringDecoder } from 'node:string_decoder';
import { isAlive, signalGroup, trackGroup, untrackGroup } from '../../process-group.js';
import { childrenOf, foregroundProcesses, shellProcesses, signalPid } from './procs.js';
import { interrupt } from './interrupt.js';
import { childProcess } from '../../builtins.js';
import { RunningCommand } from './command.js';
import { CommandFifos } from './fifos.js';
import { BEGIN, END, envScript, INIT_SCRIPT, MARK, OUT_FD, printBegin, restoreScript, shellQuote, type ShellState } from './shell-script.js';
import type { StartedProcess } from '../../sandbox/types.js';

export { RunningCommand } from './command.js';
export { shellQuote, type ShellState } from './shell-script.js';

/**
 * How bash is started. --noediting: no readline, which reads our lines a byte at a time and echoes each
 * to stderr (7–18 ms of a new shell's start, its init script being 1.6 KB; no terminal to edit on anyway).
 */
export const SHELL_ARGV = ['bash', '--norc', '--noprofile', '--noediting', '-i'];

/**
 * Starts the shell: `argv` with the given environment (sandbox/launcher.ts), or gives one started ahead
 * with another environment (a spare sandbox's) and the variables it lacks of this one.
 */
type ShellLauncher = (argv: string[], opts: { cwd: string; env: Record<string, string> }) => ChildProcess | StartedProcess;

interface ShellSessionOptions {
  conversationId: string;
  cwd: string;
  env: Record<string, string | undefined>;
  /** In-memory cap on one command's not-yet-returned output (characters). */
  bufferCap?: number;
  /** How to start bash (default: a plain detached process). */
  launch?: ShellLauncher;
  /**
   * A directory of the conversation's own for the FIFOs (`host`) and where the shell sees it
   * (`inside`), e.g. a sandbox's /parley/io; `owner`: the uid and gid the FIFOs are given (the
   * sandbox's, when it is not the daemon's). Default: a new directory under os.tmpdir(), seen at its
   * host path.
   */
  io?: { host: string; inside: string; owner?: { uid: number; gid: number } | null; makeFifos?: (paths: string[]) => Promise<void> };
  /** A previous shell's state to take up (ShellSession.snapshot): its exported variables and directory. */
  restore?: ShellState;
}

export class ShellSession {
  readonly conversationId: string;
  readonly proc: ChildProcessWithoutNullStreams;
  /** The process the daemon started (bash, or the nsenter of a sandboxed shell). */
  readonly pid: number;
  /** The shell's process group (sandboxed: bash inside the sandbox, a session leader). */
  groupPid: number;
  /** bash itself: the foreground command's processes are its descendants. */
  shellPid: number;
  cwd: string;
  running: RunningCommand | null = null;
  exited: { code: number | null; signal: NodeJS.Signals | null } | null = null;
  /** Why the session was killed by us (reset, close, restart), if it was. */
  killReason: string | null = null;
  /** Values of ctx.env keys as last exported into the shell. */
  appliedEnv: Record<string, string> = {};

  /** The FIFOs its commands read their stdin from (fifos.ts). */
  readonly fifos: CommandFifos;
  private readonly decoder = new StringDecoder('utf8');
  private readonly bufferCap: number;
  private idleOutput = '';
  private scanTail = '';
  private sentinel: string | null = null;
  private expectedNonce: string | null = null;
  private readyNonce: string | null;
  private readyResolve: (() => void) | null = null;
  private readonly listeners = new Set<() => void>();
  private stderrTail = '';
  /** bash's stderr after its last complete line (begin marks are whole lines). */
  private stderrLine = '';
  /** A SIGINT was sent to the shell's group (interrupt.ts) since it last settled: the next command waits for it (settle). */
  interruptSent = false;
  /** The token of the settling line sent last, until bash prints it. */
  private settleToken: string | null = null;
  /** The nonce of the command that ended last: a copy of its end mark is dropped (feed). */
  private endedNonce: string | null = null;
  /** bash's stderr has ended: every writer is gone and all it wrote has been read. */
  private stderrEnded = false;
  private exitPromise: Promise<void>;

  private readonly ioDir: string;
  /** The environment the shell started with (or is given first: envLines). */
  private readonly startEnv: Record<string, string>;
  /** A shell started ahead: the lines that give it the environment it lacks, run before anything else of ours. */
  private readonly envLines: string;

  private constructor(opts: ShellSessionOptions, fifoDir: string) {
    this.conversationId = opts.conversationId;
    this.cwd = opts.cwd;
    this.fifos = new CommandFifos(fifoDir, !opts.io, opts.io?.owner ?? null, () => !this.alive, opts.io?.makeFifos);
    this.ioDir = opts.io ? opts.io.inside : fifoDir;
    this.bufferCap = opts.bufferCap ?? 20_000_000;
    const env: Record<string, string> = {};
    for (const [k, v] of Object.entries(opts.env)) if (v !== undefined) env[k] = v;
    this.startEnv = env;
    for (const k of ['PROMPT_COMMAND', 'PS0', 'PS1', 'PS2', 'BASH_ENV', 'ENV', 'HISTFILE']) delete env[k];
    const argv = SHELL_ARGV;
    const launched = opts.launch
      ? opts.launch(argv, { cwd: opts.cwd, env })
      : childProcess().spawn(argv[0]!, argv.slice(1), { cwd: opts.cwd, env, stdio: ['pipe', 'pipe', 'pipe'], detached: true });
    const started = 'missing' in launched ? launched : null;
    this.proc = (started ? started.proc : launched) as ChildProcessWithoutNullStreams;
    this.envLines = started ? envScript(started.missing) : '';
    if (opts.io && started?.fifos) this.fifos.take(started.fifos); // made ahead for its first commands
    if (this.proc.pid === undefined) throw new Error('failed to start bash');
    this.pid = this.proc.pid;
    this.groupPid = this.pid;
    this.shellPid = this.pid;
    trackGroup(this.pid);
    this.readyNonce = randomBytes(8).toString('hex');
    this.expectedNonce = this.readyNonce;

    this.proc.stdout.on('data', (chunk: Buffer) => this.onStdout(chunk));
    // bash's own stderr carries its prompts, echoes of our command lines and the commands' begin
    // marks (run): a tail is kept for diagnostics
    this.proc.stderr.on('data', (chunk: Buffer) => this.onStderr(chunk.toString('utf8')));
    this.proc.stderr.once('end', () => {
      this.stderrEnded = true;
      this.notify();
    });
    this.proc.stdin.on('error', () => {
      /* EPIPE when the shell died: reported through the exit event. */
    });
    this.exitPromise = new Promise<void>((resolve) => {
      this.proc.once('exit', (code, signal) => {
        this.exited = { code, signal };
        untrackGroup(this.pid);
        // Kill whatever the shell left behind (background jobs) so nothing is orphaned.
        this.killAllProcesses();
        // Give the last output a moment to arrive before declaring the command finished.
        setTimeout(() => {
          this.finishOnExit();
          resolve();
        }, 50);
      });
    });
    this.proc.once('error', () => {
      if (!this.exited) this.exited = { code: null, signal: null };
      this.notify();
    });
  }

  /** Starts bash in `cwd` and waits until it has run the setup script. */
  static async start(opts: ShellSessionOptions, startTimeoutMs = 10_000): Promise<ShellSession> {
    // a sandbox's io directory is the conversation's own; its processes may add to it (as the
    // daemon's user) but never see where it is on the host: no directory of ours is made in it
    const fifoDir = opts.io ? opts.io.host : await fs.promises.mkdtemp(path.join(os.tmpdir(), 'parley-sh-'));
    let session: ShellSession;
    try {
      session = new ShellSession(opts, fifoDir);
    } catch (err) {
      if (!opts.io) await fs.promises.rm(fifoDir, { recursive: true, force: true });
      throw err;
    }
    const ready = new Promise<void>((resolve) => {
      session.readyResolve = resolve;
    });
    const restore = opts.restore ? `${restoreScript(opts.restore, session.startEnv)}\n` : '';
    session.proc.stdin.write(`${INIT_SCRIPT}\n${session.envLines}${restore}__parley_n=${session.readyNonce}\n`);
    // the first commands' FIFOs: those the old shell left (opened again, no process), or a batch
    // made while bash starts (the first command waits for it; one that failed is made again then)
    if (opts.io) session.fifos.take(opts.restore?.fifos ?? []);
    if (session.fifos.spareCount === 0) session.fifos.make().catch(() => {});
    let timer: NodeJS.Timeout | undefined;
    const outcome = await Promise.race([
      ready.then(() => 'ready' as const),
      session.exitPromise.then(() => 'exited' as const),
      new Promise<'timeout'>((resolve) => {
        timer = setTimeout(() => resolve('timeout'), startTimeoutMs);
      }),
    ]);
    clearTimeout(timer);
    if (outcome !== 'ready') {
      const detail = session.stderrTail.trim();
      await session.terminate('startup failed');
      throw new Error(`bash did not start (${outcome})${detail ? `: ${detail}` : ''}`);
    }
    return session;
  }

  get alive(): boolean {
    return this.exited === null && this.killReason === null;
  }

  // ---------------------------------------------------------------- output parsing

  private onStdout(chunk: Buffer): void {
    const text = this.decoder.write(chunk);
    if (text) this.feed(text);
  }

  private onStderr(text: string): void {
    this.stderrTail = (this.stderrTail + text).slice(-4000);
    const lines = (this.stderrLine + text).split('\n');
    this.stderrLine = lines.pop()!.slice(-1000);
    const token = this.settleToken;
    if (token !== null && lines.some((l) => l.endsWith(`${BEGIN}${token}`))) {
      this.settleToken = null;
      this.notify();
    }
    const rc = this.running;
    if (rc && !rc.began && lines.some((l) => l.endsWith(`${BEGIN}${rc.nonce}`))) {
      rc.began = true;
      this.notify();
    }
  }

  private feed(text: string): void {
    // a SIGINT that cuts the prompt's function short after it printed a command's end has it print that end
    // again (a C-c's later SIGINTs can reach the shell then): the copy is not output
    let rest = this.endedNonce === null ? text : withoutMarks(text, `${MARK}${this.endedNonce}:`);
    while (rest.length > 0) {
      if (this.sentinel !== null) {
        this.sentinel += rest;
        rest = '';
        const end = this.sentinel.indexOf(END);
        if (end < 0) {
          if (this.sentinel.length > 65_536) {
            // Not a real end marker after all: give the text back as output.
            const back = MARK + this.sentinel;
            this.sentinel = null;
            this.appendOutput(back);
          }
          return;
        }
        const body = this.sentinel.slice(0, end);
        rest = this.sentinel.slice(end + END.length);
        if (rest.startsWith('\n')) rest = rest.slice(1);
        this.sentinel = null;
        this.onSentinel(body);
        continue;
      }
      const nonce = this.expectedNonce;
      if (nonce === null) {
        this.appendOutput(rest);
        return;
      }
      const marker = `${MARK}${nonce}:`;
      const combined = this.scanTail + rest;
      const idx = combined.indexOf(marker);
      const fromTail = this.scanTail.length;
      if (idx < 0) {
        this.appendOutput(rest);
        this.scanTail = combined.slice(-(marker.length - 1));
        return;
      }
      if (idx < fromTail) this.trimOutput(fromTail - idx);
      else this.appendOutput(combined.slice(fromTail, idx));
      this.scanTail = '';
      this.sentinel = '';
      rest = combined.slice(idx + marker.length);
    }
  }

  private onSentinel(body: string): void {
    // body = "<exit code>:<pwd>"
    const colon = body.indexOf(':');
    const exitCode = Number(body.slice(0, colon));
    const cwd = body.slice(colon + 1);
    if (cwd) this.cwd = cwd;
    if (this.readyNonce !== null && this.expectedNonce === this.readyNonce) {
      this.findShell();
      this.readyNonce = null;
      this.expectedNonce = null;
      this.readyResolve?.();
      this.notify();
      return;
    }
    const rc = this.running;
    this.endedNonce = this.expectedNonce;
    this.expectedNonce = null;
    if (rc && !rc.done) {
      rc.done = { exitCode: Number.isFinite(exitCode) ? exitCode : -1, cwd: this.cwd };
      this.releaseStdin(rc);
    }
    this.notify();
  }

  private appendOutput(text: string): void {
    if (!text) return;
    const rc = this.running;
    if (rc && !rc.done) {
      rc.output.append(text);
      rc.lastOutputAt = Date.now();
    } else {
      this.idleOutput = (this.idleOutput + text).slice(-20_000);
    }
    this.notify();
  }

  private trimOutput(n: number): void {
    const rc = this.running;
    if (rc && !rc.done) rc.output.trimEnd(n);
    else this.idleOutput = this.idleOutput.slice(0, Math.max(0, this.idleOutput.length - n));
  }

  /**
   * A sandboxed shell joins its conversation's sandbox: nsenter (on the host) → bash (nsenter's
   * child, in the conversation's namespaces, a session leader: setsid). Signals go to bash's group
   * and descendants, never to nsenter (whose death kills bash: setpriv --pdeathsig).
   */
  private findShell(): void {
    const bash = childrenOf(this.pid)[0];
    if (bash === undefined) return; // bash itself (no sandbox): it has no child yet
    this.groupPid = bash;
    this.shellPid = bash;
  }

  /**
   * The shell's state for a later shell (`restore`): its exported variables and directory, asked
   * with a command of our own while none of the agent's runs (null when one runs or it fails).
   */
  async snapshot(timeoutMs = 5000): Promise<ShellState | null> {
    if (!this.alive || (this.running && !this.running.done)) return null;
    const rc = await this.run('builtin export -p');
    if (!(await this.waitDone(rc, timeoutMs))) return null;
    const out = this.takeOutput(rc);
    this.clearFinished();
    return { cwd: rc.done!.cwd, exports: out.split('\n').filter((l) => l.startsWith('declare -x ')) };
  }

  /** Output printed (by background processes) while no command was running; cleared by the call. */
  takeIdleOutput(): string {
    const out = this.idleOutput;
    this.idleOutput = '';
    return out;
  }

  // ---------------------------------------------------------------- waiting

  private notify(): void {
    for (const l of [...this.listeners]) l();
  }

  /** Resolves on the next output/completion/exit event, after `ms`, or when `signal` aborts. */
  waitForChange(ms: number, signal?: AbortSignal): Promise<void> {
    return new Promise<void>((resolve) => {
      let timer: NodeJS.Timeout | undefined;
      const done = () => {
        clearTimeout(timer);
        this.listeners.delete(done);
        signal?.removeEventListener('abort', done);
        resolve();
      };
      this.listeners.add(done);
      if (signal) {
        if (signal.aborted) return done();
        signal.addEventListener('abort', done, { once: true });
      }
      timer = setTimeout(done, Math.max(0, ms));
    });
  }

  /** Waits up to `ms` for `rc` to finish; true when it did. */
  async waitDone(rc: RunningCommand, ms: number): Promise<boolean> {
    const until = Date.now() + ms;
    while (!rc.done) {
      const left = until - Date.now();
      if (left <= 0) return false;
      await this.waitForChange(left);
    }
    return true;
  }

  // ---------------------------------------------------------------- commands

  /** Sends `command` to the shell. `envPrefix` is shell code run first (exports of changed ctx.env). */
  async run(command: string, envPrefix = ''): Promise<RunningCommand> {
    if (!this.alive) throw new Error('shell is not running');
    if (this.running && !this.running.done) throw new Error('a command is already running');
    const nonce = randomBytes(8).toString('hex');
    const { path: fifoPath, fd } = await this.fifos.next();
    if (this.interruptSent) await this.settle();
    const rc = new RunningCommand(command, nonce, fifoPath, fd, this.bufferCap);
    this.running = rc;
    this.scanTail = '';
    this.expectedNonce = nonce;
    // the begin mark goes to bash's own stderr, which no command writes to: a shell that ends without
    // having printed it never began the command (neverBegan)
    const line =
      `${envPrefix}__parley_fifo=${shellQuote(path.join(this.ioDir, path.basename(fifoPath)))}; __parley_n=${nonce}; ` +
      `${printBegin('"$__parley_n"')}; ` +
      `{ eval ${shellQuote(command.replace(/\0/g, ''))}; } <"$__parley_fifo" >&${OUT_FD} 2>&${OUT_FD}\n`;
    this.proc.stdin.write(line);
    return rc;
  }

  /**
   * Waits until the shell has taken every SIGINT sent to it (interrupt.ts) before the next command goes. One
   * sent as a command was ending (C-c's later ones; a loaded machine) may reach bash only as it reads or
   * parses the next line, which it then aborts before the line begins: that command would run no more and
   * its end never be reported. So a line that prints a token on bash's stderr goes first, again until bash
   * prints one (a SIGINT aborts one line at most); once it has, bash has taken them all.
   */
  private async settle(): Promise<void> {
    this.interruptSent = false;
    for (let i = 1; i <= 5 && this.exited === null; i++) {
      const token = `S${randomBytes(6).toString('hex')}`;
      this.settleToken = token;
      this.proc.stdin.write(`${printBegin(token)}\n`);
      const until = Date.now() + 500 * i;
      while (this.settleToken === token && this.exited === null && Date.now() < until) await this.waitForChange(until - Date.now());
      if (this.settleToken !== token) return;
    }
    this.settleToken = null;
  }

  /**
   * Whether the shell ended before it began `rc` (it exited or was killed under it: its sandbox
   * killed, say, while the command was on its way), so the command never ran and may run in another
   * shell. True only once bash's stderr has ended without `rc`'s begin mark: everything bash wrote
   * there has been read by then. A shell this side stopped (reset, a timeout, an idle close) does not
   * count, nor does one whose stderr is still open 2 s after its end (held by a process it left).
   */
  async neverBegan(rc: RunningCommand): Promise<boolean> {
    if (rc.done?.shellExited?.reason !== 'exited') return false;
    const until = Date.now() + 2000;
    while (!this.stderrEnded && !rc.began && Date.now() < until) await this.waitForChange(until - Date.now());
    return this.stderrEnded && !rc.began;
  }

  /** Takes the command's output that has not been returned yet. */
  takeOutput(rc: RunningCommand): string {
    return rc.output.take();
  }

  /** Forgets a finished command (after its result was returned). */
  clearFinished(): void {
    if (this.running?.done) this.running = null;
  }

  /**
   * Writes `data` to the running command's stdin. Returns an error message, or null on success.
   * Never blocks: when the program does not read and the pipe is full, the rest is reported unsent.
   */
  writeInput(rc: RunningCommand, data: string): string | null {
    if (rc.stdinFd === null) {
      return 'The standard input of the running command was already closed (C-d), so it cannot receive more input.';
    }
    const buf = Buffer.from(data, 'utf8');
    let off = 0;
    try {
      while (off < buf.length) off += fs.writeSync(rc.stdinFd, buf, off, buf.length - off);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'EAGAIN') {
        return `Only ${off} of ${buf.length} bytes could be sent: the program is not reading its input (the pipe is full).`;
      }
      return `Could not send input: ${(err as Error).message}`;
    }
    return null;
  }

  /** C-d: closes our end of the command's stdin, so the program reads end-of-file. */
  closeStdin(rc: RunningCommand): boolean {
    if (rc.stdinFd === null) return false;
    this.releaseStdin(rc, false);
    return true;
  }

  private releaseStdin(rc: RunningCommand, unlink = true): void {
    if (rc.stdinFd !== null) {
      try {
        fs.closeSync(rc.stdinFd);
      } catch {
        /* already closed */
      }
      rc.stdinFd = null;
    }
    if (unlink) this.fifos.discard(rc.fifoPath);
  }

  // ---------------------------------------------------------------- signals

  /** C-c (see interrupt.ts); with `rc`, the running command, and `again`, it is sent again while the shell carries on with it. */
  interrupt(rc?: RunningCommand, again = true): Promise<void> {
    return interrupt(this, rc, again);
  }

  /** bash is wedged by a SIGINT (interrupt.ts): killed, its command ends as the shell's restart. */
  wedged(): void {
    void this.terminate('restart');
  }

  /** Sends `signal` to the foreground command's processes (not the shell, not background jobs). */
  signalForeground(signal: NodeJS.Signals): number {
    let n = 0;
    for (const p of foregroundProcesses(this.shellPid)) if (signalPid(p.pid, signal)) n++;
    return n;
  }

  /** SIGKILL to the foreground command's processes. */
  killForeground(): number {
    return this.signalForeground('SIGKILL');
  }

  private killAllProcesses(): void {
    const procs = shellProcesses(this.groupPid);
    signalGroup(this.groupPid, 'SIGKILL');
    for (const p of procs) signalPid(p.pid, 'SIGKILL');
    // sandboxed: nsenter too (bash dies with it: --pdeathsig)
    if (this.groupPid !== this.pid) signalGroup(this.pid, 'SIGKILL') || signalPid(this.pid, 'SIGKILL');
  }

  private finishOnExit(): void {
    const rc = this.running;
    if (rc && !rc.done) {
      const code = this.exited?.code ?? null;
      const signal = this.exited?.signal ?? null;
      rc.done = {
        exitCode: code ?? (signal ? 128 + (os.constants.signals[signal] ?? 0) : -1),
        cwd: this.cwd,
        shellExited: { code, signal, reason: this.killReason ?? 'exited' },
      };
      this.releaseStdin(rc);
    }
    this.fifos.closeSpare();
    void this.fifos.remove();
    this.notify();
  }

  /** Kills the shell and every process it started (whole process group and session), and cleans up. */
  async terminate(reason: string): Promise<void> {
    if (this.killReason === null) this.killReason = reason;
    if (this.exited === null) {
      this.killAllProcesses();
      // A second pass for processes forked while the first one ran.
      setTimeout(() => this.killAllProcesses(), 100).unref();
    } else {
      this.killAllProcesses();
    }
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      this.exitPromise,
      new Promise<void>((resolve) => {
        timer = setTimeout(resolve, 3000);
      }),
    ]);
    clearTimeout(timer);
    if (isAlive(this.pid)) signalPid(this.pid, 'SIGKILL');
    untrackGroup(this.pid);
    this.killAllProcesses();
    this.proc.stdin.destroy();
    this.proc.stdout.destroy();
    this.proc.stderr.destroy();
    this.fifos.closeSpare();
    await this.fifos.remove();
  }
}

/** `text` without the marks that begin with `start` (each to its END and the newline after it). */
function withoutMarks(text: string, start: string): string {
  let out = text;
  for (let i = out.indexOf(start); i >= 0; i = out.indexOf(start, i)) {
    const end = out.indexOf(END, i + start.length);
    if (end < 0) break;
    const stop = end + END.length + (out[end + END.length] === '\n' ? 1 : 0);
    out = out.slice(0, i) + out.slice(stop);
  }
  return out;
}
