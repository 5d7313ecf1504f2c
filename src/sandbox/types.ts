import type { ChildProcess, StdioOptions } from 'node:child_process';
import type { ProcessLike } from './processes.js';
import type { SandboxDir, SandboxSpawnOptions } from './settings.js';

/**
 * A holder not ready by then is killed (its joiners get an error). Generous: on a machine at load
 * 20, ten holders starting at once (node, slirp4netns and nft each) took several seconds apiece.
 * A process that joins the holder waits for it, so a shell's start allows this much more.
 */
export const HOLDER_START_MS = 30_000;

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

/** A conversation's per-conversation directories for the terminal, and the uid files made there get. */
export interface ShellDirs {
  /** Where the terminal makes its commands' FIFOs. */
  io: SandboxDir;
  /** Where saved outputs go (read-only for the shell). */
  outputs: SandboxDir;
  /** The host uid and gid of the sandbox when the daemon is root; null when it runs as the daemon. */
  owner: { uid: number; gid: number } | null;
  /** Makes FIFOs in `io` (mode 600) off the daemon's event loop, by the sandbox's spawner (bwrap mode). */
  makeFifos?: (paths: string[]) => Promise<void>;
}

/** A process a spare sandbox started ahead (ShellSandbox.prestart), taken by its conversation's first use. */
export interface StartedProcess {
  proc: ProcessLike;
  /** The variables to set in it (null: to unset) for it to have the environment it was asked with. */
  missing: Record<string, string | null>;
  /** FIFOs made ahead for its first commands' stdin, in the conversation's io directory (the terminal checks each). */
  fifos?: AheadFifo[];
}

/** A FIFO made ahead: its path, and the inode it was made as (a taker opens it only when it is still that one). */
export interface AheadFifo {
  path: string;
  dev: number;
  ino: number;
}

/**
 * What the terminal needs of a sandbox: wait for the start-up probe, start the conversation's sandbox,
 * run the shell in it, and say when it is busy or may be closed. Implemented by sandbox/launcher's
 * `Sandbox`; the terminal knows nothing else of it.
 */
export interface ShellSandbox {
  readonly ready: Promise<void>;
  /** bwrap in force (false: plain processes). */
  readonly enabled: boolean;
  /** Starts the conversation's sandbox if it has none; its directories (bwrap only). */
  prepare(conversationId: string): ShellDirs;
  /** The directories `prepare` returns, without starting anything. */
  dirs(conversationId: string): ShellDirs;
  /** A built environment (never the daemon's) plus `extra`. */
  env(extra?: Record<string, string | undefined>): Record<string, string>;
  spawn(conversationId: string, argv: string[], opts: SandboxSpawnOptions): ChildProcess;
  /**
   * bwrap: every spare sandbox, once ready, starts `argv` in its /workspace with `env(extra)`, for its
   * conversation's first `takeStarted`: a new conversation's shell is then already running. Takes
   * effect once the start-up probe has decided (it does not start a deferred probe).
   */
  prestart?(argv: string[], extra: Record<string, string>): void;
  /**
   * The process the conversation's sandbox started ahead (`prestart`), when it is `argv` in the
   * workspace and `accept` takes the variables it lacks of `opts.env`; null: spawn.
   */
  takeStarted?(
    conversationId: string,
    argv: string[],
    opts: SandboxSpawnOptions,
    accept: (missing: Record<string, string | null>) => boolean,
  ): StartedProcess | null;
  /** Starts the conversation's file service in the background when it has none (plain processes: a file operation often follows the first shell). */
  prewarmFiles?(conversationId: string, workspaceDir: string): void;
  setBusy(conversationId: string, busy: boolean): void;
  /** Closes the conversation's sandbox if nothing of it runs. */
  closeIfIdle(conversationId: string): Promise<void>;
}
