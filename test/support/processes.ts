import { readdirSync, readFileSync, readlinkSync } from 'node:fs';

/** Alive = exists and is not a zombie (a reparented zombie may linger if PID 1 does not reap). */
export function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2)[0] !== 'Z';
  } catch {
    return false;
  }
}

/**
 * The host pid a test MCP server reported (tools.ts `pid`, `spawn_child`): a number, or `ns:<token>`
 * from inside a sandbox, found in the host's /proc by the token in the command line (0: none).
 */
export function hostPid(reported: string): number {
  if (!reported.startsWith('ns:')) return Number(reported);
  const token = reported.slice(3);
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      if (readFileSync(`/proc/${d}/cmdline`, 'utf8').includes(token)) return Number(d);
    } catch {
      /* gone */
    }
  }
  return 0;
}

/** Living (not zombie) host processes: pid → parent pid, read from /proc/<pid>/stat. */
export function livingProcesses(): Map<number, number> {
  const parent = new Map<number, number>();
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const stat = readFileSync(`/proc/${d}/stat`, 'utf8');
      const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      if (f[0] !== 'Z' && f[0] !== 'X') parent.set(Number(d), Number(f[1]));
    } catch {
      /* gone */
    }
  }
  return parent;
}

/** Every living descendant of `root` on the host (through the parent links in /proc/<pid>/stat). */
export function descendants(root: number): number[] {
  const parent = livingProcesses();
  return [...parent.keys()].filter((pid) => {
    for (let p = parent.get(pid), hops = 0; p !== undefined && p > 1 && hops < 64; p = parent.get(p), hops++) if (p === root) return true;
    return false;
  });
}

/** A process's memory in KiB from /proc: its proportional share (PSS) and what is its own (USS: private pages); 0 when gone. */
export function memoryKiB(pid: number): { pss: number; uss: number } {
  let t: string;
  try {
    t = readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8');
  } catch {
    return { pss: 0, uss: 0 };
  }
  const kb = (k: string) => Number(new RegExp(`^${k}:\\s+(\\d+) kB`, 'm').exec(t)?.[1] ?? 0);
  return { pss: kb('Pss'), uss: kb('Private_Clean') + kb('Private_Dirty') };
}

/** A process's CPU time so far, all its threads (ms, from /proc/<pid>/task/<tid>/schedstat: ns); 0 once it is gone. */
export function threadsCpuMs(pid: number): number {
  let ns = 0;
  try {
    for (const t of readdirSync(`/proc/${pid}/task`)) {
      try {
        ns += Number(readFileSync(`/proc/${pid}/task/${t}/schedstat`, 'utf8').split(' ')[0]);
      } catch {
        // the thread ended
      }
    }
  } catch {
    // the process ended
  }
  return ns / 1e6;
}

/** Every process but this one that holds one of `files` (paths, or `pipe:[N]`-style fd targets) open: "pid comm fd N → target". */
export function fdHolders(...files: string[]): string[] {
  const found: string[] = [];
  for (const pid of readdirSync('/proc').filter((n) => /^\d+$/.test(n) && Number(n) !== process.pid)) {
    let fds: string[];
    try {
      fds = readdirSync(`/proc/${pid}/fd`);
    } catch {
      continue;
    }
    for (const fd of fds) {
      let target = '';
      try {
        target = readlinkSync(`/proc/${pid}/fd/${fd}`);
      } catch {
        continue;
      }
      if (files.includes(target)) {
        let comm = '?';
        try {
          comm = readFileSync(`/proc/${pid}/comm`, 'utf8').trim();
        } catch {
          /* gone */
        }
        found.push(`${pid} ${comm} fd ${fd} → ${target}`);
      }
    }
  }
  return found;
}
