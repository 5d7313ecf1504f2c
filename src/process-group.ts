/**
 * Process groups. A child spawned with `detached: true` leads its own group, so one signal to the
 * group reaches it and everything it started (a shell's jobs, git's helpers, an MCP server's
 * children). Groups registered with `trackGroup` are SIGKILLed when the daemon's process exits, so
 * none is orphaned by a crash or a hard stop.
 */

/** Signals the whole group `pgid`; false when it is gone (or `pgid` is missing). */
export function signalGroup(pgid: number | undefined, signal: NodeJS.Signals = 'SIGKILL'): boolean {
  if (!pgid) return false;
  try {
    process.kill(-pgid, signal);
    return true;
  } catch {
    return false; // ESRCH: the group is gone
  }
}

/** True while `pid` exists (EPERM: it does, another user's). */
export function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

const live = new Set<number>();
let exitHookInstalled = false;

/** Kill this group when the daemon exits (until `untrackGroup`). */
export function trackGroup(pgid: number): void {
  live.add(pgid);
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  process.once('exit', () => {
    for (const g of live) signalGroup(g, 'SIGKILL');
  });
}

export function untrackGroup(pgid: number): void {
  live.delete(pgid);
}
