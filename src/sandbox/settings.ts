/**
 * What the sandbox is told (SandboxSettings, from the environment: src/config.ts) and what it
 * reports (SandboxInfo, in /server_info), with the paths a conversation's processes see.
 */
import type { StdioOptions } from 'node:child_process';
import os from 'node:os';
import type { Logger } from 'pino';

// SandboxSettings is declared in the base layer (src/sandbox-settings.ts), where config.ts builds it from the environment.
import type { SandboxModeSetting, SandboxNetwork, SandboxSettings } from '../sandbox-settings.js';
export type { SandboxSettings };

export const DEFAULT_SANDBOX_SETTINGS: SandboxSettings = {
  mode: 'none',
  network: 'none',
  memoryMb: 4096,
  pids: 512,
  fileSizeMb: 1024,
  maxLive: 64,
  roBinds: [],
};

/** A host directory shown inside every sandbox (read-only) at `inside`. */
export interface MappedDir {
  host: string;
  inside: string;
}

export interface SandboxSpawnOptions {
  /** Working directory as a host path (inside the workspace) or a visible path. Default: the workspace. */
  cwd?: string;
  /** The complete environment (build it with `sandbox.env()`); host paths of mapped dirs are translated. */
  env: Record<string, string>;
  stdio?: StdioOptions;
  /** The workspace on the host; default: the conversation's directory under WORKSPACE_ROOT. */
  workspaceDir?: string;
  /** Keep the daemon's network namespace (ProcessLauncher.spawn). */
  hostNetwork?: boolean;
  /**
   * The first holder only: when it fails to start, the process is not moved to the next one (the
   * start-up probe, which judges that start, not whether a second one works).
   */
  firstHolderOnly?: boolean;
}

/** A per-conversation host directory and where the conversation's processes see it. */
export interface SandboxDir {
  host: string;
  inside: string;
}

/** What /server_info reports. */
export interface SandboxInfo {
  /** probing: the start-up probe has not decided yet (requests that need a sandbox wait for it). */
  mode: 'probing' | 'bwrap' | 'none';
  requested: SandboxModeSetting;
  /** The network in force (egress falls back to none, never to host). */
  network: SandboxNetwork;
  /** With egress: the tool, what it may reach besides the internet, the DNS forwarder. */
  egress?: { tool: string; version: string; allow: string[]; dns: string; ipv6: false };
  workspace: string;
  /** The host uid and gid the sandboxes' processes have (never 0). */
  user: { uid: number; gid: number } | null;
  limits: {
    enforced_by: 'cgroup-v2' | 'cgroup-v1' | 'rlimit' | 'none';
    memory_mb: number | null;
    /** All sandboxes together (a cgroup over all of them); null without one. */
    total_memory_mb: number | null;
    pids: number | null;
    /** CPUs per conversation (a cgroup quota); null: none (equal shares under contention with a cgroup). */
    cpus: number | null;
    file_size_mb: number | null;
    /** Disk per conversation (workspace, /tmp, HOME). */
    disk_mb: number | null;
    /** How the disk bound holds: a file system of that size per conversation (`image`), or measured. */
    disk: 'image' | 'measured' | null;
    /** Present when limits are not enforced by a cgroup: why (SANDBOX_LIMITS=unenforced, or SANDBOX=auto without a cgroup). */
    unenforced?: string;
    /** Conversations with a live sandbox at most (SANDBOX_MAX_LIVE; with rlimits only, also what keeps all of them within the total). */
    max_live: number;
  };
  /** What fell back, in one line: auto to plain processes, egress to none, limits to rlimits, disks to measured. */
  warning?: string;
}

export interface SandboxOpenOptions {
  workspaceRoot: string;
  mapped?: MappedDir[];
  /** Host paths never visible inside, even under a mounted system directory (DATA_DIR: e.g. /opt/parley/data would otherwise show through the /opt mount). */
  hidden?: string[];
  log?: Logger;
  /**
   * The probe waits for `startProbe()` or the first use of `ready` (the daemon starts it shortly after its port opens,
   * so the probe's process starts do not delay the first requests).
   */
  deferProbe?: boolean;
  /**
   * The daemon answers loopback requests without a key: with the host network a sandboxed agent can call it too
   * (docs/security.md, "Without a session key"), which is logged once.
   */
  apiOpenOnLoopback?: boolean;
  /** WORKSPACE_ROOT is shared with other nodes (cluster mode): no per-conversation disk images (each node could mount one). */
  sharedWorkspaceRoot?: boolean;
  /** KEEP_WORKSPACES: a deleted conversation's workspace stays (copied out of its disk image, as a plain directory). */
  keepWorkspaces?: boolean;
  /** The file service's script (default src/sandbox/file-service.pl): tests give a hostile stand-in, a node program (`.mjs`). */
  fileService?: string;
}

export class SandboxUnavailableError extends Error {
  override name = 'SandboxUnavailableError';
}

export const VISIBLE_WORKSPACE = '/workspace';
export const VISIBLE_HOME = '/home/agent';
/** The terminal's FIFO directories (read-write) and its saved full outputs (read-only). */
export const VISIBLE_IO = '/parley/io';
export const VISIBLE_OUTPUTS = '/parley/outputs';
/** Subdirectories of a conversation's state directory, each bound into its sandbox. */
export const STATE_DIRS = ['tmp', 'home', 'io', 'outputs'];

/** The host ids a root daemon's sandboxes run as when none are configured: ids no Debian account uses. */
const DEFAULT_SANDBOX_UID = 65533;
const DEFAULT_SERVICE_UID = 65532;

/** A root daemon's sandbox ids: the agent's processes, and each sandbox's file service (holder-launch.ts). */
export interface SandboxIds {
  agent: { uid: number; gid: number };
  service: { uid: number; gid: number };
}

/**
 * The ids a root daemon's sandboxes run as (never host root: a root daemon without SANDBOX_UID uses
 * the defaults); null when the daemon is not root (its sandboxes are its own uid).
 */
export function sandboxIds(settings: Pick<SandboxSettings, 'runAs' | 'serviceAs'>): SandboxIds | null {
  if (process.getuid?.() !== 0) return null;
  const agent = settings.runAs ?? { uid: DEFAULT_SANDBOX_UID, gid: DEFAULT_SANDBOX_UID };
  const service = settings.serviceAs ?? { uid: DEFAULT_SERVICE_UID, gid: DEFAULT_SERVICE_UID };
  if (service.uid === agent.uid || service.gid === agent.gid)
    throw new SandboxUnavailableError('SANDBOX_SERVICE_UID and SANDBOX_SERVICE_GID must differ from SANDBOX_UID and SANDBOX_GID');
  return { agent, service };
}

/** SANDBOX_TOTAL_MEMORY_MB, default half of the machine's memory. */
export function totalMemoryMb(settings: Pick<SandboxSettings, 'totalMemoryMb'>): number {
  return settings.totalMemoryMb ?? Math.floor(os.totalmem() / 2 / 1024 / 1024);
}
