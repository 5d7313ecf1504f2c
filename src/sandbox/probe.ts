/**
 * The sandbox's start-up checks, before a real holder is tried (launcher.ts does that with its own
 * spawn): bwrap, the util-linux joiners and `ip`, the cgroups, egress (slirp4netns and nft), and the
 * holder setup built from them. Each failure is one actionable line; the launcher decides whether it
 * is fatal (SANDBOX=bwrap) or a fallback to plain processes (auto).
 */
import fs from 'node:fs';
import path from 'node:path';
import { detectCgroups, type CgroupBackend } from './cgroup.js';
import { Holders } from './holders.js';
import type { JoinTools } from './join.js';
import { EGRESS_RESOLV_CONF, probeEgress, type EgressTools } from './network.js';
import { which } from './processes.js';
import { findProgram } from './programs.js';
import { totalMemoryMb, type MappedDir, type SandboxOpenOptions, type SandboxSettings } from './settings.js';
import { extraArgs, HIDDEN_PATHS, systemArgs } from './view.js';

/** What the checks found: the parts the launcher runs sandboxes with. */
export interface ProbedTools {
  bwrap: string;
  join: JoinTools;
  cgroups: CgroupBackend | null;
  holders: Holders;
  /** slirp4netns's version when egress is in force. */
  egressVersion: string | null;
  /** The settings in force: egress falls back to none when it cannot work. */
  settings: SandboxSettings;
  /** Why egress fell back (logged already). */
  warning?: string;
}

/**
 * Runs the checks; `{ fail }` names what is missing and how to fix it. The caller owns what it gets
 * (closes `holders` and `cgroups` when its own probe of a real holder fails).
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
  const tools = { nsenter: which('nsenter'), setsid: which('setsid'), setpriv: which('setpriv'), unshare: which('unshare') };
  const missing = Object.entries(tools)
    .filter(([, p]) => !p)
    .map(([name]) => name);
  const ip = findProgram('ip');
  if (settings.runAs && settings.network !== 'host' && !ip)
    return { fail: "ip (iproute2) not found: a sandbox's own network is set up with it (apt-get install iproute2)" };
  if (missing.length > 0) {
    return { fail: `${missing.join(', ')} (util-linux) not found on PATH: processes join their conversation's sandbox with them (apt-get install util-linux)` };
  }
  const cgroups = detectCgroups({
    memoryBytes: settings.memoryMb * 1024 * 1024,
    pids: settings.pids,
    totalMemoryBytes: totalMemoryMb(settings) * 1024 * 1024,
    cpus: settings.cpus ?? null,
  });
  const hidden = [...(opts.hidden ?? []), opts.workspaceRoot, ...HIDDEN_PATHS];
  // a holder mounts what exists when it starts (the spare: at start-up), and a mapped directory
  // (the askpass helper's) may be written to only later
  for (const m of mapped) fs.mkdirSync(m.host, { recursive: true, mode: 0o700 });
  // egress where it works; else no network (never the host's), with one warning
  let inForce = settings;
  let warning: string | undefined;
  let egress: { tools: EgressTools; version: string; resolvConf: string } | null = null;
  if (settings.network === 'egress') {
    const probe = await probeEgress({ runAs: settings.runAs ?? undefined });
    if (probe.usable) {
      const resolvConf = path.join(opts.workspaceRoot, '.sandbox', 'resolv.conf');
      fs.mkdirSync(path.dirname(resolvConf), { recursive: true, mode: 0o700 });
      fs.writeFileSync(resolvConf, EGRESS_RESOLV_CONF, { mode: 0o644 });
      fs.chmodSync(resolvConf, 0o644);
      egress = { tools: probe.tools, version: probe.version, resolvConf };
    } else {
      warning = `SANDBOX_NETWORK=egress: ${probe.reason}; sandboxes get no network (none)`;
      opts.log?.warn({ sandbox: 'network-none' }, warning);
      inForce = { ...settings, network: 'none' };
    }
  }
  const join: JoinTools = { ...(tools as Omit<JoinTools, 'ip'>), ip };
  const holders = new Holders({
    settings: inForce,
    workspaceRoot: opts.workspaceRoot,
    bwrap,
    join,
    hasCgroups: cgroups !== null,
    system: systemArgs(),
    extra: extraArgs(settings.roBinds, hidden),
    mapped,
    egress,
  });
  return { bwrap, join, cgroups, holders, egressVersion: egress?.version ?? null, settings: inForce, ...(warning ? { warning } : {}) };
}
