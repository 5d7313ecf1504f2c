/**
 * The CPU priority of a spare holder: it starts at a lower priority (a nice value) than the
 * conversations running beside it, so that on a busy machine its start (a node, bwrap, the egress
 * tool) takes the CPU the running turns leave, not theirs; its processes get the normal priority back
 * when a conversation takes it. Giving it back (lowering a nice value) needs CAP_SYS_NICE: only a
 * root daemon lowers it in the first place.
 *
 * Where the kernel groups processes by session (autogroups, /proc/sys/kernel/sched_autogroup_enabled,
 * on by default in many kernels), a process's nice value only orders it among the processes of its
 * own session, and the sessions are weighed against one another by the group's nice value. Every
 * sandbox process starts a session of its own, so a spare at nice 10 in a group at nice 0 took as much
 * CPU beside the daemon as at nice 0: the group's value is set with the processes' (`setGroupNice`).
 */
import fs from 'node:fs';
import os from 'node:os';
import { statFields } from './processes.js';

/** A spare's nice value while no conversation has it. */
export const SPARE_NICE = 10;

/** Whether spares may start at a lower priority (the daemon can give the priority back). */
export function canRenice(): boolean {
  return process.getuid?.() === 0;
}

/**
 * The daemon's own session's group ("/autogroup-N"), never reniced from here; '' when the daemon is in
 * the root group (no session group of its own: started by an init without a session of its own, as
 * under some supervisors and CI runners); null where the kernel has no autogroups.
 */
let ownGroup: string | null | undefined;

/**
 * What /proc/<pid>/autogroup says: the session group's name and nice value; 'root' when the file is
 * empty (the process is in the root group, which has no nice value of its own to set).
 */
export function parseGroup(text: string): { name: string; nice: number } | 'root' {
  const m = /^(\S+) nice (-?\d+)/.exec(text);
  return m ? { name: m[1]!, nice: Number(m[2]) } : 'root';
}

/** A group's name; '' for the root group, which no session group is named. */
const nameOf = (g: { name: string } | 'root'): string => (g === 'root' ? '' : g.name);

/** The group of `pid`; null when it cannot be read (gone, or a kernel without autogroups). */
function groupOf(pid: number | 'self'): ReturnType<typeof parseGroup> | null {
  try {
    return parseGroup(fs.readFileSync(`/proc/${pid}/autogroup`, 'utf8'));
  } catch {
    return null;
  }
}

/**
 * Sets the nice value of the session group (autogroup) `pid` belongs to, unless it is the daemon's own
 * group; nothing where the kernel has none, or the process is gone.
 */
export function setGroupNice(pid: number, nice: number): void {
  if (ownGroup === undefined) {
    const own = groupOf('self');
    ownGroup = own === null ? null : nameOf(own);
  }
  if (ownGroup === null) return;
  const g = groupOf(pid);
  if (!g || g === 'root' || g.name === ownGroup || g.nice === nice) return;
  try {
    fs.writeFileSync(`/proc/${pid}/autogroup`, String(nice));
  } catch {
    /* gone, or not ours to set */
  }
}

/**
 * Sets the nice value of every thread of each process (Linux keeps one per thread), and of each one's
 * session group (`setGroupNice`); gone ones are skipped.
 */
export function setNice(pids: number[], nice: number): void {
  for (const pid of pids) {
    setGroupNice(pid, nice);
    let tids: string[];
    try {
      tids = fs.readdirSync(`/proc/${pid}/task`);
    } catch {
      continue;
    }
    for (const t of tids) {
      try {
        os.setPriority(Number(t), nice);
      } catch {
        /* gone */
      }
    }
  }
}

/**
 * Gives `nice` to the session group `pid` makes once it leads a session other than `outer`'s (bwrap's
 * --new-session makes one for the sandbox's init a few ms after its pid is known, and a new group is at
 * nice 0 whatever its processes' nice values). Looks every 2 ms until then, for at most `ms`, or until `done()`.
 */
export function niceNewSession(pid: number, outer: number, nice: number, done: () => boolean, ms = 2000): void {
  const from = groupOf(outer);
  if (from === null || nice === 0) return;
  const until = performance.now() + ms;
  const look = () => {
    if (done() || performance.now() > until) return;
    const g = groupOf(pid);
    if (g === null) return;
    if (g !== 'root' && g.name !== nameOf(from)) return setGroupNice(pid, nice);
    setTimeout(look, 2).unref();
  };
  look();
}

/** Whether `pid` leads its session (its session is its own pid); false when it is gone. */
const leadsSession = (pid: number): boolean => Number(statFields(pid)?.[3]) === pid;

/**
 * Gives `nice` to the session groups of `pids()` that lead a session at another value: a process that
 * joins a holder makes sessions of its own (setsid) as it starts, each a group at nice 0 whatever its
 * processes' values. Looked at after 2 ms, then twice as long each time, for `ms`, or until `done()`
 * (ten seconds: on a machine busy with other sandboxes' starts, a joined process's chain of programs can
 * take more than one before its session exists; the looks past the first second are a dozen).
 */
export function niceJoinedSession(pids: () => number[], nice: number, done: () => boolean, ms = 10_000): void {
  if (nice === 0) return;
  const until = performance.now() + ms;
  const look = (wait: number) => {
    if (done()) return;
    for (const pid of pids()) {
      const g = groupOf(pid);
      if (g !== null && g !== 'root' && g.nice !== nice && leadsSession(pid)) setGroupNice(pid, nice);
    }
    if (performance.now() + wait <= until) setTimeout(() => look(wait * 2), wait).unref();
  };
  setTimeout(() => look(4), 2).unref();
}
