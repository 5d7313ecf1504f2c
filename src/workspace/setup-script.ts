/**
 * Runs the repository's `.openhands/setup.sh` (when present) with bash, in the workspace, in its
 * own process group.
 *
 * - Environment: a minimal base (PATH, HOME, locale, proxies…; see child-env.ts) plus `env`; the
 *   daemon's own environment (SECRET_KEY, LLM keys…) is NOT inherited.
 * - At the timeout (default 600 s) or on abort, the whole group gets SIGTERM, then SIGKILL after
 *   `killGraceMs`. When the script exits normally, anything it left running in its group is
 *   killed too (setup.sh prepares the workspace; long-running services are the agent's job), so
 *   nothing outlives the setup holding the output pipes.
 * - Output (stdout and stderr interleaved) is redacted line by line, so a secret is never split
 *   across two chunks, then passed to `onOutput` and collected (the last `maxOutputBytes` kept).
 * - A symlinked setup.sh pointing outside the repository is not run (the file service says so).
 */
import { childProcess } from '../builtins.js';
import { posix } from 'node:path';
import type { WorkspaceFiles } from '../sandbox/files.js';
import { signalGroup } from '../process-group.js';
import { baseChildEnv } from '../sandbox/child-env.js';
import type { ProcessLauncher } from '../sandbox/types.js';

const SETUP_SCRIPT_PATH = '.openhands/setup.sh';

export interface SetupScriptOptions {
  env?: Record<string, string>;
  timeoutMs?: number;
  signal?: AbortSignal;
  onOutput?: (chunk: string) => void;
  redact?: (s: string) => string;
  killGraceMs?: number;
  maxOutputBytes?: number;
  /** Runs the script in the conversation's sandbox (src/sandbox/) instead of as a plain process. */
  launch?: ProcessLauncher;
}

export interface SetupScriptResult {
  ran: boolean;
  exitCode: number | null;
  /** The signal that ended the script, if any. */
  signal: string | null;
  timedOut: boolean;
  aborted: boolean;
  output: string;
}

const DEFAULT_SETUP_TIMEOUT_MS = 600_000;

/**
 * Runs the workspace's setup script. `files`: the conversation's file service (the script is looked
 * at through it, inside the sandbox: a link leading out of the workspace is not run).
 */
export async function runSetupScript(files: WorkspaceFiles, opts: SetupScriptOptions = {}): Promise<SetupScriptResult> {
  const notRun: SetupScriptResult = { ran: false, exitCode: null, signal: null, timedOut: false, aborted: false, output: '' };
  const root = files.root;
  const st = await files.stat(posix.join(root, SETUP_SCRIPT_PATH)).catch(() => null);
  if (st?.type !== 'file') return notRun;
  if (opts.signal?.aborted) return { ...notRun, aborted: true };

  const redact = opts.redact ?? ((s: string) => s);
  const timeoutMs = opts.timeoutMs ?? DEFAULT_SETUP_TIMEOUT_MS;
  const graceMs = opts.killGraceMs ?? 2000;
  const maxOutput = opts.maxOutputBytes ?? 256 * 1024;

  return new Promise((resolvePromise, reject) => {
    const child = opts.launch
      ? opts.launch.spawn(['bash', SETUP_SCRIPT_PATH], { cwd: root, env: opts.launch.env(opts.env ?? {}), stdio: ['ignore', 'pipe', 'pipe'] })
      : childProcess().spawn('bash', [SETUP_SCRIPT_PATH], { cwd: root, env: baseChildEnv(opts.env ?? {}), detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    let dropped = false;
    let pending = '';
    let timedOut = false;
    let aborted = false;
    let killTimer: NodeJS.Timeout | null = null;

    const emit = (text: string) => {
      if (!text) return;
      const clean = redact(text);
      output += clean;
      if (output.length > maxOutput) {
        output = output.slice(output.length - maxOutput);
        dropped = true;
      }
      opts.onOutput?.(clean);
    };
    const onData = (d: string) => {
      pending += d;
      const nl = pending.lastIndexOf('\n');
      if (nl >= 0) {
        emit(pending.slice(0, nl + 1));
        pending = pending.slice(nl + 1);
      }
      // A very long line without a newline is flushed anyway.
      if (pending.length > 64 * 1024) {
        emit(pending);
        pending = '';
      }
    };
    child.stdout!.setEncoding('utf8');
    child.stderr!.setEncoding('utf8');
    child.stdout!.on('data', onData);
    child.stderr!.on('data', onData);

    const stop = () => {
      signalGroup(child.pid, 'SIGTERM');
      killTimer = setTimeout(() => signalGroup(child.pid, 'SIGKILL'), graceMs);
    };
    const timer = setTimeout(() => {
      timedOut = true;
      stop();
    }, timeoutMs);
    const onAbort = () => {
      aborted = true;
      stop();
    };
    opts.signal?.addEventListener('abort', onAbort, { once: true });

    let exit: { code: number | null; signal: NodeJS.Signals | null } | null = null;
    let settled = false;
    const finish = () => {
      if (settled || !exit) return;
      settled = true;
      clearTimeout(timer);
      if (killTimer) clearTimeout(killTimer);
      opts.signal?.removeEventListener('abort', onAbort);
      signalGroup(child.pid, 'SIGKILL');
      child.stdout!.destroy();
      child.stderr!.destroy();
      emit(pending);
      pending = '';
      if (dropped) output = `[earlier output dropped]\n${output}`;
      if (timedOut) output += `\n[setup script timed out after ${timeoutMs} ms and was killed]\n`;
      resolvePromise({ ran: true, exitCode: exit.code, signal: exit.signal, timedOut, aborted, output });
    };
    child.on('error', (err) => {
      clearTimeout(timer);
      if (killTimer) clearTimeout(killTimer);
      opts.signal?.removeEventListener('abort', onAbort);
      reject(err);
    });
    child.on('exit', (code, signal) => {
      exit = { code, signal };
      // Leftover processes in the group hold the pipes open: kill them, then collect.
      signalGroup(child.pid, 'SIGKILL');
      setTimeout(finish, 200);
    });
    child.on('close', () => {
      if (exit) finish();
    });
  });
}
