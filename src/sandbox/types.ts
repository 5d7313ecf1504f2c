import type { ChildProcess, StdioOptions } from 'node:child_process';

/**
 * Starts processes for one conversation (its sandbox, or plain processes): what setup.sh, git and
 * MCP servers are given instead of `child_process.spawn`. `cwd` is a host path inside the workspace.
 */
export interface ProcessLauncher {
  /**
   * `hostNetwork`: the process keeps the daemon's network instead of the sandbox's (only for what the
   * daemon itself reaches for the conversation, e.g. the clone from an allowed host, before any of
   * the conversation's own processes runs).
   */
  spawn(argv: string[], opts: { cwd: string; env: Record<string, string>; stdio?: StdioOptions; hostNetwork?: boolean }): ChildProcess;
  /** A built environment (never the daemon's) plus `extra`. */
  env(extra?: Record<string, string | undefined>): Record<string, string>;
}
