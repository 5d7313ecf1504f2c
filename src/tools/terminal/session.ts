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
 * Why one file of this size: the shell protocol (command line, nonce, FIFOs, prompt detection, signals)
 * is one state machine over one process; most of the length is this comment.
 */
import type { ChildProcess, ChildProcessWithoutNullStreams } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { StringDecoder } from 'node:string_decoder';
import { promisify } from 'node:util';
import { isAlive, signalGroup, trackGroup, untrackGroup } from '../../process-group.js';
import { childrenOf, foregroundProcesses, shellProcesses, signalPid } from './procs.js';
import { childProcess } from '../../builtins.js';

const execFileAsync = (file: string, args: string[]) => promisify(childProcess().execFile)(file, args);

const OUT_FD = 63;
/** FIFOs made at once for the stdin of the next commands (see nextFifo). */
const FIFO_BATCH = 16;
const MARK = '\x1ePARLEY:';
const END = '\x1f';
/** A command's begin mark, on bash's own stderr: BEGIN, the command's nonce, a newline (run). */
const BEGIN = '\x1eB';

function closeQuietly(fd: number): void {
  try {
    fs.closeSync(fd);
  } catch {
    /* closed */
  }
}

export function shellQuote(s: string): string {
  return `'${s.replace(/'/g, `'\\''`)}'`;
}

const INIT_SCRIPT = String.raw`
set +H +o history 2>/dev/null; unset HISTFILE MAILCHECK PROMPT_COMMAND; PS1=''; PS2=''; PS0=''; PS4='+ '
exec ${OUT_FD}>&1
__parley_n=''
__parley_fifo=''
__parley_pc() {
  local __parley_ec=$?
  if [ -n "$__parley_n" ]; then
    printf '\036PARLEY:%s:%s:%s\037\n' "$__parley_n" "$__parley_ec" "$PWD" >&${OUT_FD}
    __parley_n=''
  fi
}
declare -r PROMPT_COMMAND=__parley_pc
__parley_stdin_is_terminal() { [ -n "$__parley_fifo" ] && [ /dev/stdin -ef "$__parley_fifo" ]; }
read() {
  local __parley_o __parley_p='' OPTIND=1 OPTARG OPTERR=0
  while getopts ':ad:ei:n:N:p:rst:u:' __parley_o; do
    if [ "$__parley_o" = p ]; then __parley_p=$OPTARG; fi
  done
  if [ -n "$__parley_p" ] && __parley_stdin_is_terminal; then printf '%s' "$__parley_p" >&2; fi
  builtin read "$@"
}
__parley_py_repl() {
  local a
  for a in "$@"; do
    case "$a" in -c*|-m*|-) return 1 ;; -*) ;; *) return 1 ;; esac
  done
  __parley_stdin_is_terminal
}
python3() { if __parley_py_repl "$@"; then command python3 -i -u "$@"; else command python3 "$@"; fi; }
python() { if __parley_py_repl "$@"; then command python -i -u "$@"; else command python "$@"; fi; }
`;

/** Caps memory use for a command that prints a lot: keeps the head and a rolling tail. */
class OutputBuffer {
  private head: string | null = null;
  private buf = '';
  private dropped = 0;
  constructor(private readonly cap: number) {}

  get length(): number {
    return (this.head?.length ?? 0) + this.buf.length;
  }

  append(text: string): void {
    this.buf += text;
    const half = Math.floor(this.cap / 2);
    if (this.head === null) {
      if (this.buf.length <= this.cap) return;
      this.head = this.buf.slice(0, half);
      this.buf = this.buf.slice(half);
    }
    // Trim the rolling tail only once it is 25% over its size, so the copying stays amortised.
    if (this.buf.length > half + Math.floor(half / 4)) {
      const excess = this.buf.length - half;
      this.dropped += excess;
      this.buf = this.buf.slice(excess);
    }
  }

  /** Removes the last `n` characters (used when the start of the end marker was already appended). */
  trimEnd(n: number): void {
    this.buf = this.buf.slice(0, Math.max(0, this.buf.length - n));
  }

  endsWithNewline(): boolean {
    return this.buf.length === 0 ? (this.head ?? '').endsWith('\n') : this.buf.endsWith('\n');
  }

  take(): string {
    const text =
      this.head === null
        ? this.buf
        : `${this.head}\n[... ${this.dropped} characters of output were dropped here because the command printed too much ...]\n${this.buf}`;
    this.head = null;
    this.buf = '';
    this.dropped = 0;
    return text;
  }
}

interface CommandResult {
  exitCode: number;
  cwd: string;
  /** Set when the shell itself exited or was killed while (or instead of) finishing the command. */
  shellExited?: { code: number | null; signal: NodeJS.Signals | null; reason: string };
}

export class RunningCommand {
  readonly startedAt = Date.now();
  lastOutputAt = Date.now();
  /** Absolute time (ms) at which the command is killed, or null. */
  deadline: number | null = null;
  timeoutSeconds: number | null = null;
  stdinFd: number | null;
  done: CommandResult | null = null;
  /** The shell began it: its begin mark came (run). */
  began = false;
  readonly output: OutputBuffer;

  constructor(
    readonly command: string,
    readonly nonce: string,
    readonly fifoPath: string,
    stdinFd: number,
    bufferCap: number,
  ) {
    this.stdinFd = stdinFd;
    this.output = new OutputBuffer(bufferCap);
  }

  get hasUnreturnedOutput(): boolean {
    return this.output.length > 0;
  }
}

/** Starts the shell: `argv` with the given environment (sandbox/launcher.ts). */
type ShellLauncher = (argv: string[], opts: { cwd: string; env: Record<string, string> }) => ChildProcess;

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
  io?: { host: string; inside: string; owner?: { uid: number; gid: number } | null };
  /** A previous shell's state to take up (ShellSession.snapshot): its exported variables and directory. */
  restore?: ShellState;
}

/** What a shell keeps between commands that a new shell can take up (after an idle close). */
export interface ShellState {
  cwd: string;
  /** `declare -x NAME="value"` lines as `export -p` prints them (bash quotes the values). */
  exports: string[];
  /** FIFOs the old shell made and never used, left in the conversation's io directory (keepFifos). */
  fifos?: KeptFifo[];
}

/** A FIFO made for a command's input, by its host path and the inode it was made as. */
export interface KeptFifo {
  path: string;
  dev: number;
  ino: number;
}

/** Exported names a restored shell does not take from the old one (the shell's own, or set anew at start). */
const NOT_RESTORED = new Set(['PWD', 'OLDPWD', 'SHLVL', '_', 'PS0', 'PS1', 'PS2', 'PS4', 'PROMPT_COMMAND', 'BASH_ENV', 'ENV', 'HISTFILE', 'TERM']);

/**
 * The lines of `state` a new shell runs to take it up: every export but those above and those the
 * new shell's environment sets itself (the conversation's secrets are set anew, never an old value),
 * then the directory (the workspace when it is gone).
 */
function restoreScript(state: ShellState, env: Record<string, string>): string {
  const lines: string[] = [];
  for (const line of state.exports) {
    const m = /^declare -x ([A-Za-z_][A-Za-z0-9_]*)(=|$)/.exec(line);
    if (!m || NOT_RESTORED.has(m[1]!) || (m[1]! in env && m[1] !== 'PATH')) continue;
    lines.push(line);
  }
  lines.push(`builtin cd -- ${shellQuote(state.cwd)} 2>/dev/null || true`);
  return lines.join('\n');
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

  /** The FIFOs' directory on the host; `ownFifoDir`: made for this session (removed with it), else the conversation's io directory. */
  private readonly fifoDir: string;
  private readonly ownFifoDir: boolean;
  /** FIFOs are named `<fifoPrefix><n>` (unique per session in a shared io directory). */
  private readonly fifoPrefix = `stdin-${randomBytes(6).toString('hex')}-`;
  private readonly fifoOwner: { uid: number; gid: number } | null;
  /** FIFOs made and not yet removed (their names: nothing else in the directory is ever removed). */
  private readonly fifos = new Set<string>();
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
  /** bash's stderr has ended: every writer is gone and all it wrote has been read. */
  private stderrEnded = false;
  private seq = 0;
  private readonly spareFifos: { path: string; fd: number }[] = [];
  private exitPromise: Promise<void>;

  private readonly ioDir: string;
  /** The environment the shell started with. */
  private readonly startEnv: Record<string, string>;

  private constructor(opts: ShellSessionOptions, fifoDir: string) {
    this.conversationId = opts.conversationId;
    this.cwd = opts.cwd;
    this.fifoDir = fifoDir;
    this.ownFifoDir = !opts.io;
    this.fifoOwner = opts.io?.owner ?? null;
    this.ioDir = opts.io ? opts.io.inside : fifoDir;
    this.bufferCap = opts.bufferCap ?? 20_000_000;
    const env: Record<string, string> = {};
    for (const [k, v] of Object.entries(opts.env)) if (v !== undefined) env[k] = v;
    this.startEnv = env;
    for (const k of ['PROMPT_COMMAND', 'PS0', 'PS1', 'PS2', 'BASH_ENV', 'ENV', 'HISTFILE']) delete env[k];
    // --noediting: no readline, which reads our lines a byte at a time and echoes each to stderr
    // (7–18 ms of a new shell's start, its init script being 1.6 KB; no terminal to edit on anyway)
    const argv = ['bash', '--norc', '--noprofile', '--noediting', '-i'];
    this.proc = (
      opts.launch
        ? opts.launch(argv, { cwd: opts.cwd, env })
        : childProcess().spawn(argv[0]!, argv.slice(1), { cwd: opts.cwd, env, stdio: ['pipe', 'pipe', 'pipe'], detached: true })
    ) as ChildProcessWithoutNullStreams;
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
    session.proc.stdin.write(`${INIT_SCRIPT}\n${restore}__parley_n=${session.readyNonce}\n`);
    // the first commands' FIFOs: those the old shell left (opened again, no process), or a batch
    // made while bash starts (the first command waits for it; one that failed is made again then)
    if (opts.io) session.takeKeptFifos(opts.restore?.fifos ?? []);
    if (session.spareFifos.length === 0) session.makeFifos().catch(() => {});
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
    const rc = this.running;
    if (rc && !rc.began && lines.some((l) => l.endsWith(`${BEGIN}${rc.nonce}`))) {
      rc.began = true;
      this.notify();
    }
  }

  private feed(text: string): void {
    let rest = text;
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
    const { path: fifoPath, fd } = await this.nextFifo();
    const rc = new RunningCommand(command, nonce, fifoPath, fd, this.bufferCap);
    this.running = rc;
    this.scanTail = '';
    this.expectedNonce = nonce;
    // the begin mark goes to bash's own stderr, which no command writes to: a shell that ends without
    // having printed it never began the command (neverBegan)
    const line =
      `${envPrefix}__parley_fifo=${shellQuote(path.join(this.ioDir, path.basename(fifoPath)))}; __parley_n=${nonce}; ` +
      `printf '\\036B%s\\n' "$__parley_n" >&2; ` +
      `{ eval ${shellQuote(command.replace(/\0/g, ''))}; } <"$__parley_fifo" >&${OUT_FD} 2>&${OUT_FD}\n`;
    this.proc.stdin.write(line);
    return rc;
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

  /**
   * A fresh FIFO for the next command's stdin, already opened. They are made FIFO_BATCH at a time:
   * one `mkfifo` process for that many commands (spawning from the daemon costs milliseconds, most
   * of an `echo` step). Each is opened when made (O_RDWR: opening does not block, and the shell's
   * `<fifo` open finds a writer at once), so whatever a command does to the directory later (it is
   * the shell's too) cannot change what we write to. The directory is named by the daemon (no
   * component the sandbox can replace); in it only the last component is the sandbox's to touch,
   * and the kernel never follows a symlink there: mknod fails on anything that exists, the open has
   * O_NOFOLLOW, and the type check refuses anything but a FIFO.
   */
  private async nextFifo(): Promise<{ path: string; fd: number }> {
    while (this.spareFifos.length === 0) {
      if (!this.alive) throw new Error('shell is not running');
      await this.makeFifos();
    }
    return this.spareFifos.shift()!;
  }

  /** The batch of FIFOs being made (one at a time: a command waits for the batch the start began). */
  private fifoBatch: Promise<void> | null = null;

  /**
   * Makes the next FIFO_BATCH FIFOs (see nextFifo). The first batch is begun with the shell's start
   * (start), so a new shell's first command does not wait for a `mkfifo` process. A batch finished
   * after the session ended is closed and removed at once.
   */
  private makeFifos(): Promise<void> {
    this.fifoBatch ??= (async () => {
      const paths = Array.from({ length: FIFO_BATCH }, () => path.join(this.fifoDir, `${this.fifoPrefix}${++this.seq}`));
      for (const p of paths) this.fifos.add(p);
      try {
        await execFileAsync('mkfifo', ['-m', '600', ...paths]);
        for (const p of paths) {
          const fd = fs.openSync(p, fs.constants.O_RDWR | fs.constants.O_NONBLOCK | fs.constants.O_NOFOLLOW);
          if (!fs.fstatSync(fd).isFIFO()) {
            fs.closeSync(fd);
            throw new Error(`${p} is not the FIFO made for a command's input`);
          }
          // the shell reads it as the sandbox's uid
          if (this.fifoOwner) fs.fchownSync(fd, this.fifoOwner.uid, this.fifoOwner.gid);
          this.spareFifos.push({ path: p, fd });
        }
      } finally {
        if (this.exited !== null || this.killReason !== null) {
          this.closeSpareFifos();
          await this.removeFifos();
        }
      }
    })().finally(() => (this.fifoBatch = null));
    return this.fifoBatch;
  }

  /**
   * The FIFOs made and never used, for the conversation's next shell (an idle close): closed here,
   * left in the conversation's io directory, no longer removed with this session. None when the
   * FIFOs are in a directory of the session's own (removed with it).
   */
  keepFifos(): KeptFifo[] {
    if (this.ownFifoDir) return [];
    const kept: KeptFifo[] = [];
    for (const f of this.spareFifos) {
      try {
        const st = fs.fstatSync(f.fd);
        kept.push({ path: f.path, dev: st.dev, ino: st.ino });
        this.fifos.delete(f.path);
      } catch {
        /* removed with the session */
      }
    }
    this.closeSpareFifos();
    return kept;
  }

  /**
   * Takes up the FIFOs an earlier shell of the conversation left (keepFifos), each opened as a new
   * one is (nextFifo: O_NOFOLLOW, not blocking, a FIFO) and only when it is still the very inode
   * that was made; anything else at its name is removed (unlink does not follow it) and not used.
   */
  private takeKeptFifos(kept: KeptFifo[]): void {
    for (const k of kept) {
      if (path.dirname(k.path) !== this.fifoDir) continue;
      let fd: number | null = null;
      try {
        fd = fs.openSync(k.path, fs.constants.O_RDWR | fs.constants.O_NONBLOCK | fs.constants.O_NOFOLLOW);
        const st = fs.fstatSync(fd);
        if (!st.isFIFO() || st.dev !== k.dev || st.ino !== k.ino) throw new Error('not the FIFO that was made');
        if (this.fifoOwner) fs.fchownSync(fd, this.fifoOwner.uid, this.fifoOwner.gid);
        this.fifos.add(k.path);
        this.spareFifos.push({ path: k.path, fd });
      } catch {
        if (fd !== null) closeQuietly(fd);
        fs.promises.unlink(k.path).catch(() => {});
      }
    }
  }

  /** Removes what this session made: its own directory, or its FIFOs by name (unlink never follows the last component). */
  private async removeFifos(): Promise<void> {
    if (this.ownFifoDir) {
      await fs.promises.rm(this.fifoDir, { recursive: true, force: true }).catch(() => {});
      return;
    }
    const names = [...this.fifos];
    this.fifos.clear();
    await Promise.all(names.map((p) => fs.promises.unlink(p).catch(() => {})));
  }

  private closeSpareFifos(): void {
    for (const { fd } of this.spareFifos.splice(0)) {
      try {
        fs.closeSync(fd);
      } catch {
        /* already closed */
      }
    }
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
    if (unlink) {
      this.fifos.delete(rc.fifoPath);
      fs.promises.unlink(rc.fifoPath).catch(() => {});
    }
  }

  // ---------------------------------------------------------------- signals

  /** C-c: SIGINT to the shell's process group (bash aborts the command line), and wake stopped processes. */
  interrupt(): void {
    signalGroup(this.groupPid, 'SIGINT');
    for (const p of foregroundProcesses(this.shellPid)) if (p.state === 'T' || p.state === 't') signalPid(p.pid, 'SIGCONT');
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
    this.closeSpareFifos();
    void this.removeFifos();
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
    this.closeSpareFifos();
    await this.removeFifos();
  }
}
