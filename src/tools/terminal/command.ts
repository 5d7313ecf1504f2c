/** One command of a conversation's shell: its output (bounded in memory), its stdin FIFO, its deadline and its result. */
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

export interface CommandResult {
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
