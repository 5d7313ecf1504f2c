/**
 * MCP stdio client transport that owns its process group.
 *
 * The SDK's StdioClientTransport spawns the server in the daemon's process group and only signals
 * that one pid, so anything the server starts (npx → sh → node, a helper process) can outlive it.
 * This transport starts the server as the leader of a new process group (`detached: true`, i.e.
 * setsid) and stops it by signalling the whole group: stdin EOF, then SIGTERM, then SIGKILL.
 * Process groups still alive when the daemon exits are SIGKILLed from a `process.on('exit')` hook.
 */
import type { ChildProcess } from 'node:child_process';
import { childProcess } from '../../builtins.js';
import { ReadBuffer, serializeMessage } from '@modelcontextprotocol/sdk/shared/stdio.js';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import type { JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js';
import { signalGroup, trackGroup, untrackGroup } from '../../process-group.js';

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
  private readonly buffer = new ReadBuffer();
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
        // Stdout may still be draining; deliver the close after it (or shortly after exit if a
        // grandchild keeps the pipe open).
        const t = setTimeout(() => this.finish(), 100);
        t.unref();
        child.stdout?.once('close', () => {
          clearTimeout(t);
          this.finish();
        });
      });
      child.stdout?.on('data', (chunk: Buffer) => {
        try {
          this.buffer.append(chunk);
          for (;;) {
            const msg = this.buffer.readMessage();
            if (msg === null) break;
            this.onmessage?.(msg);
          }
        } catch (err) {
          this.onerror?.(err instanceof Error ? err : new Error(String(err)));
        }
      });
      child.stderr?.on('data', (chunk: Buffer) => {
        this.stderrTail = (this.stderrTail + chunk.toString('utf8')).slice(-STDERR_TAIL_BYTES);
      });
      child.stdin?.on('error', (err) => this.onerror?.(err));
      child.stdout?.on('error', (err) => this.onerror?.(err));
    });
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
    this.buffer.clear();
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
