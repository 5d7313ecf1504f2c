/**
 * Runs git as a child process: arguments as an array (never a shell string), its own process
 * group (so an abort or timeout kills git and its helpers such as git-remote-http), a bounded
 * capture of stdout/stderr, and an environment built from scratch (see child-env.ts).
 */
import { childProcess } from '../builtins.js';
import { signalGroup } from '../process-group.js';
import type { ProcessLauncher } from '../sandbox/types.js';

export interface GitResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
  aborted: boolean;
  timedOut: boolean;
}

export interface GitRunOptions {
  cwd?: string;
  env: Record<string, string>;
  signal?: AbortSignal;
  timeoutMs?: number;
  /** Runs git in the conversation's sandbox (src/sandbox/) instead of as a plain process. */
  launch?: ProcessLauncher;
  /** With `launch`: git keeps the daemon's network (the clone; ProcessLauncher.spawn). */
  hostNetwork?: boolean;
}

const MAX_CAPTURE = 1024 * 1024;

export function runGit(args: string[], opts: GitRunOptions): Promise<GitResult> {
  return new Promise((resolve, reject) => {
    if (opts.signal?.aborted) {
      resolve({ code: null, signal: null, stdout: '', stderr: '', aborted: true, timedOut: false });
      return;
    }
    const child = opts.launch
      ? opts.launch.spawn(['git', ...args], { cwd: opts.cwd ?? '.', env: opts.env, stdio: ['ignore', 'pipe', 'pipe'], hostNetwork: opts.hostNetwork })
      : childProcess().spawn('git', args, {
          cwd: opts.cwd,
          env: opts.env,
          detached: true,
          stdio: ['ignore', 'pipe', 'pipe'],
        });
    let stdout = '';
    let stderr = '';
    let aborted = false;
    let timedOut = false;
    child.stdout!.setEncoding('utf8');
    child.stderr!.setEncoding('utf8');
    child.stdout!.on('data', (d: string) => {
      if (stdout.length < MAX_CAPTURE) stdout += d;
    });
    child.stderr!.on('data', (d: string) => {
      if (stderr.length < MAX_CAPTURE) stderr += d;
    });
    const onAbort = () => {
      aborted = true;
      signalGroup(child.pid);
    };
    opts.signal?.addEventListener('abort', onAbort, { once: true });
    const timer =
      opts.timeoutMs && opts.timeoutMs > 0
        ? setTimeout(() => {
            timedOut = true;
            signalGroup(child.pid);
          }, opts.timeoutMs)
        : null;
    child.on('error', (err) => {
      if (timer) clearTimeout(timer);
      opts.signal?.removeEventListener('abort', onAbort);
      reject(err);
    });
    child.on('close', (code, signal) => {
      if (timer) clearTimeout(timer);
      opts.signal?.removeEventListener('abort', onAbort);
      resolve({ code, signal, stdout, stderr, aborted, timedOut });
    });
  });
}
