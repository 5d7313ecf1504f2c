import type { ChildProcess, StdioOptions } from 'node:child_process';

/**
 * Starts processes for one conversation (its sandbox, or plain processes): what setup.sh, git and
 * MCP servers are given instead of `child_process.spawn`. `cwd` is a host path inside the workspace.
 */
export interface ProcessLauncher {
  spawn(argv: string[], opts: { cwd: string; env: Record<string, string>; stdio?: StdioOptions }): ChildProcess;
  /** A built environment (never the daemon's) plus `extra`. */
  env(extra?: Record<string, string | undefined>): Record<string, string>;
}
