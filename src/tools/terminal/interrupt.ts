/**
 * C-c for a shell session (session.ts): SIGINT to the shell's process group (bash aborts the command
 * line), and stopped processes woken.
 *
 * bash takes a child that exits normally as the signal reaches the shell for one that handled the
 * signal, and carries on with the line; in a loop of short commands that race is hit often (one C-c in
 * five with `while true; do /bin/true; done`, one in three on a loaded machine). So with the running
 * command given, while it runs (ten seconds at most): once everything that had the signal has ended, a
 * child the shell starts after it (or, where the scans miss such children, the shell reaping children
 * scan after scan, or half a second after them in which the command has not ended) shows that the shell carried
 * on, and the group gets SIGINT again. (bash breaks the line only when both it and its child have the
 * signal: SIGINT to the child alone does not.) The shell's prompt, which reports the command's end,
 * starts no process, so it is not cut short. A program that handles SIGINT and keeps running is left
 * alone.
 *
 * A command the shell has not begun yet (its line still on its way, or being read and parsed: a long
 * line, a loaded machine) is interrupted once it has: a SIGINT then would abort the line before the
 * line sets the command's nonce, so the command would run no more but its end would never be reported
 * (the prompt reports only a command whose nonce is set), and the terminal would wait for it forever.
 * For the same reason the shell's next command waits until the shell has taken every SIGINT sent
 * (ShellSession.settle): one sent as the command was ending may reach bash only with the next line.
 *
 * A SIGINT can also wedge bash for good (seen with bash 5.2 about once in two thousand C-c of that
 * loop): one that comes while bash swaps in the handler it waits for a child with, before it has noted
 * the handler to put back, makes that handler raise SIGINT again for ever. bash then spins at full CPU
 * with SIGCHLD blocked, and its child that ended stays a zombie it never reaps. After C-c, a shell seen
 * like that for WEDGED_MS is killed (the session ends as `restart`: the next command gets a new shell).
 */
import { signalGroup } from '../../process-group.js';
import type { RunningCommand } from './command.js';
import { blocksChildSignal, childrenOf, foregroundProcesses, isBackgroundJob, isRunning, reapedFaultsOf, readStat, signalPid, startOf } from './procs.js';

/** How long C-c waits for the shell to begin a command before it interrupts it all the same. */
const BEGIN_WAIT_MS = 10_000;

/** How long C-c goes on sending SIGINT again while the shell carries on with the command. */
const AGAIN_MS = 10_000;

/** How long after C-c a shell may spin with a zombie child it does not reap before it is taken as wedged (see above). */
const WEDGED_MS = 1000;
/** The least share of a CPU the shell used meanwhile, for spinning (it is given less on a loaded machine). */
const WEDGED_CPU = 0.25;

/** What C-c needs of a shell session. */
export interface Interruptible {
  /** The shell's process group. */
  readonly groupPid: number;
  /** bash itself: the foreground command's processes are its descendants. */
  readonly shellPid: number;
  readonly exited: object | null;
  /** Set at each SIGINT sent: the shell's next command waits until the shell has taken them (ShellSession.settle). */
  interruptSent: boolean;
  /** Whether `rc` is done within `ms`. */
  waitDone(rc: RunningCommand, ms: number): Promise<boolean>;
  /** Resolves at the session's next change (output, a mark, its exit), or after `ms`. */
  waitForChange(ms: number): Promise<void>;
  /** The shell is wedged (see above): it is killed with all it started. */
  wedged(): void;
}

/**
 * C-c: now, or once the shell has begun `rc` (see above); with `rc` and `again`, sent again while the shell
 * carries on with it. Resolves once the first SIGINT is sent (or is not needed: `rc` done, the shell gone).
 */
export async function interrupt(s: Interruptible, rc?: RunningCommand, again = true): Promise<void> {
  if (rc && !rc.began) {
    await untilBegun(s, rc);
    if (rc.done || s.exited !== null) return;
  }
  signalNow(s, again ? rc : undefined);
}

/** Waits until the shell has begun `rc` (its begin mark came), `rc` is done or the shell exited; BEGIN_WAIT_MS at most. */
async function untilBegun(s: Interruptible, rc: RunningCommand): Promise<void> {
  const until = Date.now() + BEGIN_WAIT_MS;
  while (!rc.began && !rc.done && s.exited === null && Date.now() < until) await s.waitForChange(until - Date.now());
}

function signalNow(s: Interruptible, rc?: RunningCommand): void {
  const foreground = foregroundProcesses(s.shellPid);
  s.interruptSent = true;
  signalGroup(s.groupPid, 'SIGINT');
  for (const p of foreground) if (p.state === 'T' || p.state === 't') signalPid(p.pid, 'SIGCONT');
  if (rc) void interruptAgain(s, rc, new Map(foreground.map((p) => [p.pid, p.start])));
}

/** `signalled`: the processes that had the signal, by pid, with their start times (a loop's forks reuse pids fast). */
async function interruptAgain(s: Interruptible, rc: RunningCommand, signalled: Map<number, string>): Promise<void> {
  const until = Date.now() + AGAIN_MS;
  // children the shell reaped, seen by the faults it counts for them: the count when it had none
  // left in the foreground, and how many scans in a row found it grown since
  let reaped: number | null = null;
  let grown = 0;
  let sent = Date.now(); // when the last SIGINT went
  // failing both, half a second without the command's end does (scans far apart under load), counted from when
  // everything that had the signal was last seen running: a program that handled it and ran on for longer, then
  // ended, must not have its shell signalled while the shell reports that end
  let quietSince = sent;
  const wedge = new WedgeWatch(s.shellPid);
  // the shell's children are read from one /proc file every 20 ms: a loop's short commands live a
  // millisecond or less, and a scan of all of /proc would seldom find one; a wedge that the last
  // SIGINT caused is watched for until WEDGED_MS after it
  while (Date.now() < Math.max(until, sent + 2 * WEDGED_MS) && !(await s.waitDone(rc, 20)) && s.exited === null) {
    if (wedge.seen()) return s.wedged();
    if (Date.now() >= until) continue;
    if ([...signalled].some(([pid, start]) => isRunning(pid, start))) {
      quietSince = Date.now();
      continue;
    }
    let carriedOn = false;
    let foreground = 0;
    for (const pid of childrenOf(s.shellPid)) {
      const start = startOf(pid);
      if (start === null || isBackgroundJob(pid)) continue;
      foreground++;
      if (signalled.get(pid) === start) continue;
      signalled.set(pid, start);
      carriedOn = true;
    }
    // On a loaded machine the scan can miss every one of a loop's short commands for the whole wait.
    // Children the shell started and reaped between two scans still show in its fault count: grown in
    // two scans in a row, each after one that found no child of it in the foreground (not the last
    // one that had the signal, reaped once, nor a background job that ends: each grows it once).
    const faults = reapedFaultsOf(s.shellPid);
    grown = reaped !== null && faults !== null && faults > reaped ? grown + 1 : 0;
    reaped = foreground === 0 ? faults : null;
    if (grown >= 2 || Date.now() - quietSince >= 500) carriedOn = true;
    if (carriedOn) {
      grown = 0;
      sent = quietSince = Date.now();
      s.interruptSent = true;
      signalGroup(s.groupPid, 'SIGINT');
    }
  }
}

/**
 * Watches a shell for the wedge described above: a child of it a zombie, the same one at every look,
 * while the shell blocks SIGCHLD and uses the CPU, for WEDGED_MS. A shell that waits for its child
 * reaps it at once; one busy with a builtin while a child ends is told of it by SIGCHLD.
 */
class WedgeWatch {
  private zombie: { pid: number; start: string; since: number; ticks: number } | null = null;

  constructor(private readonly shellPid: number) {}

  /** Looks again: true once the shell is wedged. */
  seen(): boolean {
    const now = Date.now();
    const shell = readStat(this.shellPid);
    const z = shell && blocksChildSignal(this.shellPid) ? this.unreaped() : null;
    if (!shell || !z) {
      this.zombie = null;
      return false;
    }
    if (this.zombie?.pid !== z.pid || this.zombie.start !== z.start) {
      this.zombie = { ...z, since: now, ticks: shell.cpuTicks };
      return false;
    }
    const ms = now - this.zombie.since;
    return ms >= WEDGED_MS && (shell.cpuTicks - this.zombie.ticks) * 10 >= ms * WEDGED_CPU;
  }

  private unreaped(): { pid: number; start: string } | null {
    for (const pid of childrenOf(this.shellPid)) {
      const p = readStat(pid);
      if (p?.state === 'Z') return { pid, start: p.start };
    }
    return null;
  }
}
