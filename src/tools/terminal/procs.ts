/**
 * Small Linux process helpers for the terminal tool: find the processes that belong to a
 * shell (its descendants and the members of its session / process group) by reading /proc,
 * and signal them. Everything is best-effort: a process may exit between the scan and the kill.
 */
import fs from 'node:fs';

interface ProcInfo {
  pid: number;
  ppid: number;
  pgrp: number;
  session: number;
  /** Single-letter state from /proc/<pid>/stat (R, S, T, Z, ...). */
  state: string;
  /** When it started (clock ticks after boot): with the pid, names one process though pids are reused. */
  start: string;
  /**
   * The page faults of the children it has waited for (cminflt): it grows with each child the process
   * reaps, however short-lived (one that a scan of its children never sees).
   */
  reapedFaults: number;
  /** The CPU time it has used, user and system, in clock ticks (100 a second). */
  cpuTicks: number;
}

/** Reads /proc/<pid>/stat (null when the process is gone). The command name may contain spaces and parentheses, so parse after the last ')'. */
export function readStat(pid: number): ProcInfo | null {
  let raw: string;
  try {
    raw = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return null;
  }
  const close = raw.lastIndexOf(')');
  if (close < 0) return null;
  const fields = raw.slice(close + 2).split(' ');
  // fields[0] = state, [1] = ppid, [2] = pgrp, [3] = session, [8] = cminflt, [11] = utime, [12] = stime, [19] = starttime
  const ppid = Number(fields[1]);
  const pgrp = Number(fields[2]);
  const session = Number(fields[3]);
  if (!Number.isFinite(ppid) || !Number.isFinite(pgrp)) return null;
  const cpuTicks = Number(fields[11]) + Number(fields[12]);
  return { pid, ppid, pgrp, session, state: fields[0] ?? '?', start: fields[19] ?? '', reapedFaults: Number(fields[8]), cpuTicks };
}

/**
 * The last scan of /proc, kept until the event loop's next turn. A scan reads every process's stat
 * file (tens of µs each, far more on a loaded machine), and many shells end at once: a stop of 40
 * conversations asked for 160 scans, 1.1 s of the daemon's CPU on an idle machine and most of 14 s
 * at load 16. The exits of many children come in one turn, and so do timers set together: they
 * share one scan. Within a turn nothing else of the daemon runs, so the scan is as fresh as a new
 * one would be for what the daemon does with it (a process that forks meanwhile is the race every
 * scan has, and what the later kill passes are for).
 */
let lastScan: ProcInfo[] | null = null;

function listProcesses(): ProcInfo[] {
  if (lastScan) return lastScan;
  lastScan = scanProcesses();
  setImmediate(() => {
    lastScan = null;
  });
  return lastScan;
}

function scanProcesses(): ProcInfo[] {
  let names: string[];
  try {
    names = fs.readdirSync('/proc');
  } catch {
    return [];
  }
  const out: ProcInfo[] = [];
  for (const name of names) {
    if (!/^\d+$/.test(name)) continue;
    const info = readStat(Number(name));
    if (info) out.push(info);
  }
  return out;
}

/** Direct children of `pid` (/proc/<pid>/task/<pid>/children; a scan of /proc where that file is missing). */
export function childrenOf(pid: number): number[] {
  try {
    return fs.readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').split(' ').filter(Boolean).map(Number);
  } catch {
    return listProcesses()
      .filter((p) => p.ppid === pid)
      .map((p) => p.pid);
  }
}

/** All descendants of `rootPid` (not including it), found through the parent links. */
function descendantsOf(rootPid: number, procs: ProcInfo[] = listProcesses()): ProcInfo[] {
  const children = new Map<number, ProcInfo[]>();
  for (const p of procs) {
    const list = children.get(p.ppid);
    if (list) list.push(p);
    else children.set(p.ppid, [p]);
  }
  const out: ProcInfo[] = [];
  const stack = [rootPid];
  const seen = new Set<number>([rootPid]);
  while (stack.length > 0) {
    const pid = stack.pop()!;
    for (const child of children.get(pid) ?? []) {
      if (seen.has(child.pid)) continue;
      seen.add(child.pid);
      out.push(child);
      stack.push(child.pid);
    }
  }
  return out;
}

/**
 * Every process that belongs to the shell started as the leader of session/group `leaderPid`:
 * its descendants plus anything still in its session or process group (e.g. orphans that were
 * re-parented to init). Does not include the leader itself.
 */
export function shellProcesses(leaderPid: number): ProcInfo[] {
  const procs = listProcesses();
  const byPid = new Map<number, ProcInfo>();
  for (const p of descendantsOf(leaderPid, procs)) byPid.set(p.pid, p);
  for (const p of procs) {
    if (p.pid !== leaderPid && (p.pgrp === leaderPid || p.session === leaderPid)) byPid.set(p.pid, p);
  }
  return [...byPid.values()];
}

const MASK_LINES = { SigIgn: /^SigIgn:\s*([0-9a-fA-F]+)/m, SigBlk: /^SigBlk:\s*([0-9a-fA-F]+)/m };

/** A signal mask of the process from /proc/<pid>/status (bit n-1 for signal n); 0 when it is gone. */
function signalMask(pid: number, field: keyof typeof MASK_LINES): bigint {
  try {
    const m = MASK_LINES[field].exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? BigInt(`0x${m[1]}`) : 0n;
  } catch {
    return 0n;
  }
}

/** Whether the process blocks SIGCHLD: it is not told of its children's ends, and reaps them only when it waits for them. */
export function blocksChildSignal(pid: number): boolean {
  return (signalMask(pid, 'SigBlk') & (1n << 16n)) !== 0n; // SIGCHLD is 17
}

/**
 * True when the process ignores both SIGINT and SIGQUIT: bash starts background jobs (`cmd &`)
 * like that when job control is off, and their children inherit it.
 */
export function isBackgroundJob(pid: number): boolean {
  return (signalMask(pid, 'SigIgn') & 6n) === 6n; // bits for signals 2 (SIGINT) and 3 (SIGQUIT)
}

/**
 * The processes of the command currently running in the foreground of the shell: descendants of
 * the shell that are not background jobs (see isBackgroundJob).
 */
export function foregroundProcesses(shellPid: number): ProcInfo[] {
  return descendantsOf(shellPid).filter((p) => p.state !== 'Z' && !isBackgroundJob(p.pid));
}

/** The faults of the children `pid` has reaped (see ProcInfo.reapedFaults), or null when it is gone. */
export function reapedFaultsOf(pid: number): number | null {
  const n = readStat(pid)?.reapedFaults;
  return n !== undefined && Number.isFinite(n) ? n : null;
}

/** The process's start time (see ProcInfo.start), or null when there is none. */
export function startOf(pid: number): string | null {
  return readStat(pid)?.start ?? null;
}

/** True while the process that started at `start` as `pid` exists and is not a zombie. */
export function isRunning(pid: number, start: string): boolean {
  const info = readStat(pid);
  return info !== null && info.start === start && info.state !== 'Z';
}

export function signalPid(pid: number, signal: NodeJS.Signals): boolean {
  try {
    process.kill(pid, signal);
    return true;
  } catch {
    return false;
  }
}
