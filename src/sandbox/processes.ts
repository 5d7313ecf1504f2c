/** Small process and fd chores of the sandbox launcher (host side). */
import fs from 'node:fs';
import { signalGroup } from '../process-group.js';
import type { Readable, Writable } from 'node:stream';

/** What the code that starts a sandbox's program uses of a child process (a ChildProcess is one). */
export interface ProcessLike {
  readonly pid?: number | undefined;
  readonly exitCode: number | null;
  readonly signalCode: NodeJS.Signals | null;
  readonly stdio: ReadonlyArray<unknown>;
  readonly stdin: Writable | null;
  readonly stdout: Readable | null;
  readonly stderr: Readable | null;
  kill(signal?: NodeJS.Signals): boolean;
  once(event: 'exit' | 'close', listener: (code: number | null, signal: NodeJS.Signals | null) => void): this;
  once(event: 'error', listener: (err: Error) => void): this;
  removeListener(event: 'exit', listener: (code: number | null, signal: NodeJS.Signals | null) => void): this;
}

export function killTree(p: ProcessLike): void {
  if (!p.pid || signalGroup(p.pid, 'SIGKILL')) return;
  try {
    process.kill(p.pid, 'SIGKILL');
  } catch {
    /* gone */
  }
}

export function signalPid(pid: number): void {
  try {
    process.kill(pid, 'SIGKILL');
  } catch {
    /* gone */
  }
}

export function exited(p: ProcessLike, ms: number): Promise<void> {
  return new Promise<void>((resolve) => {
    if (p.exitCode !== null || p.signalCode !== null) return resolve();
    const t = setTimeout(resolve, ms);
    p.once('exit', () => {
      clearTimeout(t);
      resolve();
    });
  });
}

export function closeFd(fd: number): void {
  try {
    fs.closeSync(fd);
  } catch {
    /* closed */
  }
}

/** The line of a failed process's stderr that says why: the last error line (node prints its version after the error), else the last line. */
export function lastError(stderr: string): string {
  const lines = stderr
    .trim()
    .split('\n')
    .map((l) => l.trim())
    .filter(Boolean);
  return [...lines].reverse().find((l) => /^(bwrap|Error|[A-Za-z]*Error)( \[[A-Z_]+\])?:|rror:/.test(l)) ?? lines.at(-1) ?? '';
}

/**
 * The short-lived programs the sandboxes are set up with (mkfs, mount, e2fsck, unshare, nsenter,
 * nft…), while they run: a stop ends those a start in progress left running, and waits for them,
 * so the daemon exits only once every process it started is gone.
 */
const helpers = new Set<ProcessLike>();

export function helper<T extends ProcessLike>(p: T): T {
  if (p.exitCode !== null || p.signalCode !== null) return p;
  helpers.add(p);
  const done = () => helpers.delete(p);
  p.once('exit', done);
  p.once('error', done);
  return p;
}

/** Kills every helper still running and waits (at most `ms`) until they are gone. */
export async function endHelpers(ms: number): Promise<void> {
  const running = [...helpers];
  for (const p of running) killTree(p);
  await Promise.all(running.map((p) => exited(p, ms)));
}

/**
 * This process's descendants on the host now (parent links of /proc/<pid>/stat) below the children it
 * started detached (each the leader of a session of its own, as every spawn of the sandbox, the
 * terminal, git and MCP is): what a stop waits for at its end, whatever path each was started by and
 * whichever cgroup it was in (a process that left its cgroup on its way out is still exiting). A child
 * in this process's own session is someone else's (a host that embeds the daemon: a test runner's
 * compiler service) and is not waited for.
 */
export function descendantsOfSelf(): number[] {
  const parent = new Map<number, number>();
  const leaders = new Set<number>();
  let names: string[] = [];
  try {
    names = fs.readdirSync('/proc');
  } catch {
    return [];
  }
  for (const d of names) {
    if (d.charCodeAt(0) > 57) continue;
    const f = statFields(d);
    if (!f) continue; // gone meanwhile
    parent.set(Number(d), Number(f[1]));
    if (Number(f[3]) === Number(d)) leaders.add(Number(d));
  }
  const out: number[] = [];
  for (const pid of parent.keys()) {
    // up to this process's child: one of ours when it leads a session
    let child = pid;
    for (let p = parent.get(pid), hops = 0; p !== undefined && p > 1 && hops < 64; child = p, p = parent.get(p), hops++) {
      if (p === process.pid) {
        if (leaders.has(child)) out.push(pid);
        break;
      }
    }
  }
  return out;
}

/**
 * The fields of /proc/<pid>/stat after the command name (which may hold spaces and parentheses):
 * [0] state, [1] ppid, [2] pgrp, [3] session, …; null when it is gone.
 */
export function statFields(pid: number | string): string[] | null {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  } catch {
    return null;
  }
}

/** Whether `pid` is gone or a zombie (it has exited; its parent has not reaped it yet). */
function ended(pid: number): boolean {
  const state = statFields(pid)?.[0];
  return state === undefined || state === 'Z' || state === 'X';
}

/**
 * Resolves once every pid has ended (at most `ms`): a killed process leaves its cgroup before it has
 * finished exiting, and a stop is clean only once it has.
 */
export async function allEnded(pids: Iterable<number>, ms: number): Promise<void> {
  let left = [...pids];
  const until = Date.now() + ms;
  while ((left = left.filter((p) => !ended(p))).length > 0 && Date.now() < until) await new Promise((r) => setTimeout(r, 10));
}
