import { readdirSync, readFileSync } from 'node:fs';

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
