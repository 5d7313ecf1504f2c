/**
 * The sandbox's start-up checks, before a real holder is tried (launcher.ts does that with its own
 * spawn): bwrap, the util-linux joiners and `ip`, the cgroups, egress (slirp4netns and nft), and the
 * holder setup built from them. Each failure is one actionable line; the launcher decides whether it
 * is fatal (SANDBOX=bwrap) or a fallback to plain processes (auto).
 */
import fs from 'node:fs';
import path from 'node:path';
import { detectCgroups, type CgroupBackend } from './cgroup.js';
import { Disks, findDiskTools, probeImages, unmountAll } from './disk-image.js';
import { Holders } from './holders.js';
import type { JoinTools } from './join.js';
import { EGRESS_RESOLV_CONF, probeEgress, type EgressTools } from './network.js';
import { findProgram, which } from './programs.js';
import { seccompProgram, seccompSupported } from './seccomp.js';
import { Spawner } from './spawner.js';
import { sandboxIds, totalMemoryMb, type MappedDir, type SandboxIds, type SandboxOpenOptions, type SandboxSettings } from './settings.js';
import { extraArgs, HIDDEN_PATHS, systemArgs } from './view.js';

/** What the checks found: the parts the launcher runs sandboxes with. */
export interface ProbedTools {
  bwrap: string;
  join: JoinTools;
  /** Root daemon: the agent's and the file service's host ids. */
  ids: SandboxIds | null;
  cgroups: CgroupBackend | null;
  /** Per-conversation disks (root daemon, not cluster mode, SANDBOX_DISK=image): null when measured. */
  disks: Disks | null;
  holders: Holders;
  /** What starts the holders' host-side programs (spawner.ts). */
  spawner: Spawner;
  /** slirp4netns's version when egress is in force. */
  egressVersion: string | null;
  /** The settings in force: egress falls back to none when it cannot work. */
  settings: SandboxSettings;
  /** Why a limit is not enforced (no cgroup, SANDBOX_LIMITS=unenforced or SANDBOX=auto), for /server_info. */
  unenforced?: string;
  /** What fell back (egress to none, limits to rlimits, disks to measured), each logged already. */
  warnings: string[];
}

/** The one line a bwrap daemon without cgroups stops with (SANDBOX_LIMITS=enforced). */
const NO_CGROUP =
  "no cgroup can be made for the sandboxes' limits (memory, processes, CPU): run the daemon as root, " +
  'give it a delegated cgroup (systemd: Delegate=yes), or set SANDBOX_LIMITS=unenforced to run without them';

/**
 * Runs the checks; `{ fail }` names what is missing and how to fix it. The caller owns what it gets
 * (closes `holders`, `cgroups` and `spawner` when its own probe of a real holder fails).
 */
export async function probeTools(settings: SandboxSettings, opts: SandboxOpenOptions, mapped: MappedDir[]): Promise<ProbedTools | { fail: string }> {
  const bwrap = which(settings.bwrapPath ?? 'bwrap');
  if (!bwrap) {
    return {
      fail: settings.bwrapPath
        ? `BWRAP_PATH=${settings.bwrapPath} does not exist: install bubblewrap (apt-get install bubblewrap) or fix BWRAP_PATH`
        : 'bwrap was not found on PATH: install bubblewrap (apt-get install bubblewrap) or set BWRAP_PATH',
    };
  }
  if (!seccompSupported()) return { fail: `this machine's architecture (${process.arch}) has no seccomp filter for the agents (x86_64 and aarch64 have)` };
  let ids: SandboxIds | null;
  try {
    ids = sandboxIds(settings);
  } catch (e) {
    return { fail: (e as Error).message };
  }
  // what runs inside a sandbox: in the system's directories, which it shows (not the daemon's PATH)
  const inside = { perl: findProgram('perl', '') };
  if (!inside.perl)
    return { fail: 'perl was not found in the system directories: every process of a sandbox loads its seccomp filter with it (apt-get install perl-base)' };
  // (unshare: what the egress probe makes its throwaway namespaces with)
  const tools = { nsenter: which('nsenter'), setpriv: which('setpriv'), unshare: which('unshare') };
  const missing = Object.entries(tools)
    .filter(([, p]) => !p)
    .map(([name]) => name);
  if (missing.length > 0) {
    return { fail: `${missing.join(', ')} (util-linux) not found on PATH: processes join their conversation's sandbox with them (apt-get install util-linux)` };
  }
  const warnings: string[] = [];
  const warn = (tag: string, line: string) => {
    warnings.push(line);
    opts.log?.warn({ sandbox: tag }, line);
  };
  const limits = await probeLimits(settings, warn);
  if ('fail' in limits) return limits;
  const { cgroups, unenforced } = limits;
  // (from here on the caller owns what is made: the spawner's process starts with its first program)
  const spawner = new Spawner(tools.setpriv);
  const disks = await probeDisks(settings, opts, ids, spawner, warn);
  const hidden = [...(opts.hidden ?? []), opts.workspaceRoot, ...HIDDEN_PATHS];
  // a holder mounts what exists when it starts (the spare: at start-up), and a mapped directory
  // (the askpass helper's) may be written to only later
  for (const m of mapped) fs.mkdirSync(m.host, { recursive: true, mode: 0o700 });
  const egress = await probeNetwork(settings, opts, ids, spawner, warn);
  const inForce = settings.network === 'egress' && !egress ? { ...settings, network: 'none' as const } : settings;
  const join: JoinTools = {
    nsenter: tools.nsenter!,
    setpriv: tools.setpriv!,
    inside: { perl: inside.perl! },
  };
  const agent = seccompProgram();
  const holders = new Holders(
    {
      settings: inForce,
      ids,
      workspaceRoot: opts.workspaceRoot,
      bwrap,
      join,
      cgroups,
      seccomp: { agent, holder: seccompProgram({ holder: true }) },
      system: systemArgs(),
      extra: extraArgs(settings.roBinds, hidden),
      mapped,
      egress,
      fileService: opts.fileService,
      spawner,
      log: opts.log,
    },
    disks,
  );
  return {
    bwrap,
    join,
    ids,
    cgroups,
    disks,
    holders,
    spawner,
    egressVersion: egress?.version ?? null,
    settings: inForce,
    ...(unenforced ? { unenforced } : {}),
    warnings,
  };
}

/**
 * The cgroups the limits are enforced with. None: SANDBOX=bwrap refuses to start (SANDBOX_LIMITS
 * enforced, the default), or it is said (SANDBOX_LIMITS=unenforced, SANDBOX=auto): limits are never
 * dropped in silence.
 */
async function probeLimits(
  settings: SandboxSettings,
  warn: (tag: string, line: string) => void,
): Promise<{ cgroups: CgroupBackend | null; unenforced?: string } | { fail: string }> {
  const cgroups = await detectCgroups({
    memoryBytes: settings.memoryMb * 1024 * 1024,
    pids: settings.pids,
    totalMemoryBytes: totalMemoryMb(settings) * 1024 * 1024,
    cpus: settings.cpus ?? null,
  });
  if (cgroups) return { cgroups };
  if (settings.mode === 'bwrap' && settings.limits !== 'unenforced') return { fail: NO_CGROUP };
  const unenforced =
    settings.limits === 'unenforced'
      ? 'SANDBOX_LIMITS=unenforced: no cgroup, so no per-conversation memory, process or CPU limit and no total (only per-process rlimits)'
      : 'SANDBOX=auto without a cgroup: no per-conversation memory, process or CPU limit and no total (only per-process rlimits); ' +
        'run as root, give the daemon a delegated cgroup (systemd: Delegate=yes), or set SANDBOX_LIMITS=unenforced to accept this';
  warn('limits-unenforced', unenforced);
  return { cgroups: null, unenforced };
}

/** SANDBOX_NETWORK=egress where it works (its tools and the sandbox's resolv.conf); else null, with one warning: no network then, never the host's. */
async function probeNetwork(
  settings: SandboxSettings,
  opts: SandboxOpenOptions,
  ids: SandboxIds | null,
  spawner: Spawner,
  warn: (tag: string, line: string) => void,
): Promise<{ tools: EgressTools; version: string; resolvConf: string } | null> {
  if (settings.network !== 'egress') return null;
  const probe = await probeEgress({ runAs: ids?.agent, spawner });
  if (!probe.usable) {
    warn('network-none', `SANDBOX_NETWORK=egress: ${probe.reason}; sandboxes get no network (none)`);
    return null;
  }
  const resolvConf = path.join(opts.workspaceRoot, '.sandbox', 'resolv.conf');
  fs.mkdirSync(path.dirname(resolvConf), { recursive: true, mode: 0o700 });
  fs.writeFileSync(resolvConf, EGRESS_RESOLV_CONF, { mode: 0o644 });
  fs.chmodSync(resolvConf, 0o644);
  return { tools: probe.tools, version: probe.version, resolvConf };
}

/**
 * Per-conversation disks where they can be had (disk-image.ts): SANDBOX_DISK=image (the default), a
 * bound (SANDBOX_DISK_MB), a root daemon, a WORKSPACE_ROOT of this node alone, the tools, and a
 * small image made and mounted for real. Otherwise the bound is measured (with a warning when
 * images were asked for and cannot be had). What a killed daemon left mounted is unmounted first.
 */
async function probeDisks(
  settings: SandboxSettings,
  opts: SandboxOpenOptions,
  ids: SandboxIds | null,
  spawner: Spawner,
  warn: (tag: string, line: string) => void,
): Promise<Disks | null> {
  if (settings.disk === 'measured' || !settings.diskMb) return null;
  if (opts.sharedWorkspaceRoot) {
    warn(
      'disk-measured',
      'SANDBOX_DISK_MB is measured, not enforced by the kernel: in cluster mode WORKSPACE_ROOT is shared by the nodes (an image could be mounted by two)',
    );
    return null;
  }
  const tools = findDiskTools(spawner);
  if (typeof tools === 'string') {
    warn('disk-measured', `SANDBOX_DISK_MB is measured, not enforced by the kernel: ${tools}`);
    return null;
  }
  const sandboxes = path.join(opts.workspaceRoot, '.sandbox');
  fs.mkdirSync(sandboxes, { recursive: true, mode: 0o700 });
  await unmountAll(tools, sandboxes);
  const failed = await probeImages(tools, sandboxes);
  if (failed) {
    warn('disk-measured', `SANDBOX_DISK_MB is measured, not enforced by the kernel: a disk image could not be made and mounted (${failed})`);
    return null;
  }
  return new Disks(tools, settings.diskMb, ids?.agent ?? null, opts.workspaceRoot);
}
