/**
 * Which live sandboxes to close so a new one fits under the cap (SANDBOX_MAX_LIVE, or what the
 * machine's memory holds when nothing bounds the sandboxes together): the least recently used idle
 * ones. A busy sandbox (a command runs) is never chosen, so the cap can be exceeded while every live
 * sandbox is busy; the next one to go idle is closed first when another conversation needs room.
 */

export interface EvictionCandidate {
  /** A command runs in it. */
  busy: boolean;
  /** When it last started a process, ran a file operation or changed busy (ms since the epoch). */
  lastUsed: number;
  /** It holds something to close (a process or a holder); bookkeeping alone costs nothing. */
  active: boolean;
}

/**
 * The conversations to close, least recently used first, so that `except` (the one entering) fits
 * under `max` live sandboxes; `max <= 0` means no cap.
 */
export function evictionVictims(live: Iterable<[string, EvictionCandidate]>, except: string, max: number): string[] {
  if (max <= 0) return [];
  const others = [...live].filter(([id, l]) => id !== except && l.active);
  const over = others.length + 1 - max;
  if (over <= 0) return [];
  return others
    .filter(([, l]) => !l.busy)
    .sort((a, b) => a[1].lastUsed - b[1].lastUsed)
    .slice(0, over)
    .map(([id]) => id);
}

/**
 * The cap on live sandboxes: SANDBOX_MAX_LIVE (`configured`, 0 = none); when the sandboxes have no
 * cgroup bounding them together (rlimits only), also no more than the total memory holds at each
 * one's limit, so the sum of the limits cannot pass what the machine was given.
 */
export function liveCap(configured: number, boundedTogether: boolean, totalMemoryMb: number, memoryMb: number): number {
  if (boundedTogether) return configured;
  const fit = Math.max(1, Math.floor(totalMemoryMb / memoryMb));
  return configured <= 0 ? fit : Math.min(configured, fit);
}
