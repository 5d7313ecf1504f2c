/** Small process and fd chores of the sandbox launcher (host side). */
import type { ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { signalGroup } from '../process-group.js';

export function which(name: string): string | null {
  if (name.includes('/')) return fs.existsSync(name) ? path.resolve(name) : null;
  for (const dir of (process.env.PATH ?? '/usr/local/bin:/usr/bin:/bin').split(':')) {
    if (!dir) continue;
    const p = path.join(dir, name);
    try {
      fs.accessSync(p, fs.constants.X_OK);
      return p;
    } catch {
      /* next */
    }
  }
  return null;
}

export function killTree(p: ChildProcess): void {
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

export function exited(p: ChildProcess, ms: number): Promise<void> {
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

/** The only child of `pid` (host pid namespace), or null. */
export function firstChild(pid: number): number | null {
  try {
    const first = fs.readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/)[0];
    return first ? Number(first) : null;
  } catch {
    return null;
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
