/**
 * MCP stdio client transport that owns its process group.
 *
 * The SDK's StdioClientTransport spawns the server in the daemon's process group and only signals
 * that one pid, so anything the server starts (npx → sh → node, a helper process) can outlive it.
 * This transport starts the server as the leader of a new process group (`detached: true`, i.e.
 * setsid) and stops it by signalling the whole group: stdin EOF, then SIGTERM, then SIGKILL.
 * Process groups still alive when the daemon exits are SIGKILLed from a `process.on('exit')` hook.
 *
 * The server runs in the conversation's sandbox, where the agent can reach it: what it writes is
 * hostile input. Its lines are read with bounded memory (received chunks kept in a list, each line
 * joined once; the SDK's ReadBuffer joined every chunk to the ones before, up to 10 MiB), a line
 * longer than MAX_LINE_BYTES or denser than MESSAGE_SHAPE (counted before JSON.parse) or not a
 * JSON-RPC message ends the server with the reason (the manager reports it: MCPServerFailed).
 */
import type { ChildProcess } from 'node:child_process';
import { childProcess } from '../../builtins.js';
import { serializeMessage } from '@modelcontextprotocol/sdk/shared/stdio.js';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import { JSONRPCMessageSchema, type JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js';
import { jsonShapeError, type ShapeLimits } from '../../body-shape.js';
import { signalGroup, trackGroup, untrackGroup } from '../../process-group.js';

/** The longest message line a server may write (the SDK's own bound; a tool's image result is base64 in one). */
const MAX_LINE_BYTES = 10 * 1024 * 1024;
/** A message's structure: a large tools/list (hundreds of tools with their schemas) has tens of thousands of values. */
const MESSAGE_SHAPE: ShapeLimits = { values: 200_000, depth: 64 };

interface StdioProcessOptions {
  command: string;
  args: string[];
  /** The complete environment of the process (nothing is inherited). */
  env: Record<string, string>;
  cwd: string;
  /** How long to wait for the server to exit after stdin EOF before SIGTERM (ms). */
  exitGraceMs?: number;
  /** Starts the process (the conversation's sandbox, src/sandbox/); default: a detached plain process. */
  launch?: (argv: string[], opts: { cwd: string; env: Record<string, string> }) => ChildProcess;
}

/** Environment variables passed from the daemon to stdio servers (values from `process.env`). */
const SAFE_ENV_KEYS = ['HOME', 'LOGNAME', 'PATH', 'SHELL', 'TERM', 'USER', 'LANG', 'LC_ALL', 'TZ', 'TMPDIR'];

export function minimalEnv(): Record<string, string> {
  const env: Record<string, string> = {};
  for (const k of SAFE_ENV_KEYS) {
    const v = process.env[k];
    if (v !== undefined && !v.startsWith('()')) env[k] = v;
  }
  return env;
}

const STDERR_TAIL_BYTES = 2048;

export class StdioProcessTransport implements Transport {
  onclose?: () => void;
  onerror?: (error: Error) => void;
  onmessage?: <T extends JSONRPCMessage>(message: T) => void;

  private child?: ChildProcess;
  /** A line being received: its chunks so far (no newline in them). */
  private partial: Buffer[] = [];
  private partialBytes = 0;
  /** Why the server was ended for what it wrote. */
  private violation: string | null = null;
  private stderrTail = '';
  private closed = false;
  private exitInfo: { code: number | null; signal: NodeJS.Signals | null } | null = null;
  private exited?: Promise<void>;

  constructor(private readonly opts: StdioProcessOptions) {}

  get pid(): number | undefined {
    return this.child?.pid;
  }

  /** Why the process is gone (`exited with code 1: <stderr tail>`), or undefined while it runs. */
  exitDescription(): string | undefined {
    if (this.violation) return `the server broke the protocol: ${this.violation}`;
    if (!this.exitInfo) return undefined;
    const how = this.exitInfo.signal ? `was killed by ${this.exitInfo.signal}` : `exited with code ${this.exitInfo.code}`;
    const tail = this.stderrTail.trim();
    return tail ? `process ${how}; stderr: ${tail}` : `process ${how}`;
  }

  start(): Promise<void> {
    if (this.child) throw new Error('StdioProcessTransport already started');
    return new Promise<void>((resolve, reject) => {
      let child: ChildProcess;
      try {
        child = this.opts.launch
          ? this.opts.launch([this.opts.command, ...this.opts.args], { cwd: this.opts.cwd, env: this.opts.env })
          : childProcess().spawn(this.opts.command, this.opts.args, {
              cwd: this.opts.cwd,
              env: this.opts.env,
              stdio: ['pipe', 'pipe', 'pipe'],
              detached: true,
              shell: false,
            });
      } catch (err) {
        reject(err);
        return;
      }
      this.child = child;
      this.exited = new Promise<void>((res) => child.once('exit', () => res()));
      let spawned = false;
      child.once('error', (err) => {
        if (!spawned) {
          this.closed = true;
          reject(new Error(`cannot start '${this.opts.command}': ${err.message}`));
        } else this.onerror?.(err);
      });
      child.once('spawn', () => {
        spawned = true;
        if (child.pid) trackGroup(child.pid);
        resolve();
      });
      child.once('exit', (code, signal) => {
        this.exitInfo = { code, signal };
        // stdout and stderr may still be draining: the close comes after both (its reason holds the
        // end of stderr), or a second after the exit when a grandchild keeps a pipe open
        const t = setTimeout(() => this.finish(), 1000);
        t.unref();
        const pipes = [child.stdout, child.stderr].filter((p) => p !== null && !p.closed);
        let open = pipes.length;
        const closed = () => {
          if (--open > 0) return;
          clearTimeout(t);
          this.finish();
        };
        if (open === 0) return closed();
        for (const p of pipes) p!.once('close', closed);
      });
      child.stdout?.on('data', (chunk: Buffer) => this.receive(chunk));
      child.stderr?.on('data', (chunk: Buffer) => {
        this.stderrTail = (this.stderrTail + chunk.toString('utf8')).slice(-STDERR_TAIL_BYTES);
      });
      child.stdin?.on('error', (err) => this.onerror?.(err));
      child.stdout?.on('error', (err) => this.onerror?.(err));
    });
  }

  /** Splits what the server wrote into lines, each joined once; nothing it writes throws out of here. */
  private receive(chunk: Buffer): void {
    if (this.violation) return;
    let start = 0;
    for (let nl = chunk.indexOf(0x0a); nl >= 0 && !this.violation; nl = chunk.indexOf(0x0a, start)) {
      const piece = chunk.subarray(start, nl);
      if (this.partialBytes + piece.length > MAX_LINE_BYTES) return this.refuse(`a line longer than ${MAX_LINE_BYTES} bytes`);
      const line = this.partial.length === 0 ? piece : Buffer.concat([...this.partial, piece]);
      this.partial = [];
      this.partialBytes = 0;
      start = nl + 1;
      this.message(line);
    }
    if (this.violation || start === chunk.length) return;
    const rest = chunk.subarray(start);
    if (this.partialBytes + rest.length > MAX_LINE_BYTES) return this.refuse(`a line longer than ${MAX_LINE_BYTES} bytes`);
    this.partial.push(rest);
    this.partialBytes += rest.length;
  }

  private message(line: Buffer): void {
    const text = line.toString('utf8').replace(/\r$/, '');
    if (text.trim() === '') return;
    const dense = jsonShapeError(text, MESSAGE_SHAPE, 'a message');
    if (dense) return this.refuse(dense.tooLarge ? 'a message with more structure than the limit' : 'a malformed message');
    let msg: JSONRPCMessage;
    try {
      msg = JSONRPCMessageSchema.parse(JSON.parse(text));
    } catch {
      return this.refuse('a line that is not a JSON-RPC message');
    }
    try {
      this.onmessage?.(msg);
    } catch (err) {
      this.onerror?.(err instanceof Error ? err : new Error(String(err)));
    }
  }

  /** The server wrote what the daemon does not read: it is ended, and says why (exitDescription). */
  private refuse(why: string): void {
    if (this.violation) return;
    this.violation = why;
    this.partial = [];
    this.partialBytes = 0;
    this.onerror?.(new Error(`the MCP server broke the protocol: ${why}`));
    void this.close();
  }

  private finishedOnce = false;
  private finish(): void {
    if (this.finishedOnce) return;
    this.finishedOnce = true;
    this.closed = true;
    const pid = this.child?.pid;
    // the leader is gone: stop whatever it left behind in its group
    if (pid) {
      signalGroup(pid, 'SIGTERM');
      setTimeout(() => signalGroup(pid, 'SIGKILL'), 500).unref();
      setTimeout(() => untrackGroup(pid), 600).unref();
    }
    this.partial = [];
    this.onclose?.();
  }

  send(message: JSONRPCMessage): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      const stdin = this.child?.stdin;
      if (!stdin || this.closed || !stdin.writable) {
        reject(new Error(this.exitDescription() ?? 'Not connected'));
        return;
      }
      if (stdin.write(serializeMessage(message))) resolve();
      else stdin.once('drain', () => resolve());
    });
  }

  /** Stops the whole process group: stdin EOF, SIGTERM, SIGKILL. Resolves once the leader exited. */
  async close(): Promise<void> {
    const child = this.child;
    if (!child?.pid) {
      this.closed = true;
      return;
    }
    const pgid = child.pid;
    const grace = this.opts.exitGraceMs ?? 500;
    const wait = (ms: number) => Promise.race([this.exited, new Promise<void>((r) => setTimeout(r, ms).unref())]);
    if (!this.exitInfo) {
      try {
        child.stdin?.end();
      } catch {
        // ignore
      }
      await wait(grace);
    }
    signalGroup(pgid, 'SIGTERM');
    if (!this.exitInfo) await wait(1000);
    signalGroup(pgid, 'SIGKILL');
    if (!this.exitInfo) await wait(1000);
    untrackGroup(pgid);
    this.finish();
  }
}
