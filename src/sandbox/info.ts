/** What /server_info says of the sandbox (launcher.ts's `info`). */
import { EGRESS_NET, formatAllowedNet } from './network.js';
import type { ProbedTools } from './probe.js';
import { totalMemoryMb, VISIBLE_WORKSPACE, type SandboxInfo, type SandboxSettings } from './settings.js';

/** What the launcher knows that /server_info reports. */
export interface InfoSource {
  mode: 'probing' | 'bwrap' | 'none';
  /** The probe has decided: until then the mode is reported as probing. */
  decided: boolean;
  settings: SandboxSettings;
  found: ProbedTools | null;
  warning?: string;
  maxLive: number;
}

export function sandboxInfo(s: InfoSource): SandboxInfo {
  const on = s.mode === 'bwrap';
  const f = s.found;
  const by = !on ? 'none' : f?.cgroups ? f.cgroups.kind : 'rlimit';
  return {
    mode: s.decided ? s.mode : 'probing',
    requested: s.settings.mode,
    network: on || s.mode === 'probing' ? s.settings.network : 'host',
    ...(on && f?.egressVersion
      ? {
          egress: {
            tool: 'slirp4netns',
            version: f.egressVersion,
            allow: (s.settings.allowNets ?? []).map(formatAllowedNet),
            dns: EGRESS_NET.dns,
            ipv6: false as const,
          },
        }
      : {}),
    workspace: on ? VISIBLE_WORKSPACE : 'host path',
    user: on ? (f?.ids?.agent ?? { uid: process.getuid?.() ?? -1, gid: process.getgid?.() ?? -1 }) : null,
    limits: {
      enforced_by: by,
      memory_mb: by === 'none' ? null : s.settings.memoryMb,
      total_memory_mb: f?.cgroups ? totalMemoryMb(s.settings) : null,
      // RLIMIT_NPROC counts every process of the user, not of the conversation: not a pids limit
      pids: f?.cgroups ? s.settings.pids : null,
      cpus: f?.cgroups?.cpu ? (s.settings.cpus ?? null) : null,
      file_size_mb: on ? s.settings.fileSizeMb : null,
      disk_mb: on && s.settings.diskMb ? s.settings.diskMb : null,
      disk: on && s.settings.diskMb ? (f?.disks ? 'image' : 'measured') : null,
      ...(on && f?.unenforced ? { unenforced: f.unenforced } : {}),
      max_live: s.maxLive,
    },
    ...(s.warning ? { warning: s.warning } : {}),
  };
}
