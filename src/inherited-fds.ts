/**
 * The file descriptors a process inherited from whatever started it. An fd that was open without
 * close-on-exec in the parent (a terminal's pipe, a supervisor's or an editor's socket, a shell's
 * `exec 9<file`) is open in the daemon, and every process the daemon starts inherits it in turn:
 * its sandboxes' shells, file services and MCP servers would hold a host object that no bind mount
 * or namespace shows them. Node marks the lowest of them close-on-exec as it starts, not the rest
 * (Node 20: up to fd 16).
 *
 * The daemon closes them as it starts. What Node itself opens is always close-on-exec, so an fd
 * without the flag past stdin, stdout and stderr is one nobody in this process asked for, except
 * the IPC channel of a parent that forked it (`keep`).
 */
import fs from 'node:fs';

/** O_CLOEXEC as /proc/<pid>/fdinfo shows it in `flags` (octal) when the fd is close-on-exec. */
const O_CLOEXEC = 0o2000000;

/** The fds above stderr that are open across exec, from /proc (empty where there is no /proc). */
export function inheritedFds(pid: number | 'self' = 'self'): number[] {
  let names: string[];
  try {
    names = fs.readdirSync(`/proc/${pid}/fd`);
  } catch {
    return [];
  }
  const found: number[] = [];
  for (const name of names) {
    const fd = Number(name);
    if (!(fd > 2)) continue;
    let info: string;
    try {
      info = fs.readFileSync(`/proc/${pid}/fdinfo/${fd}`, 'latin1');
    } catch {
      continue; // closed meanwhile (readdir's own fd among them)
    }
    const flags = /^flags:\s+([0-7]+)/m.exec(info);
    if (flags && (Number.parseInt(flags[1]!, 8) & O_CLOEXEC) === 0) found.push(fd);
  }
  return found.sort((a, b) => a - b);
}

/** Closes every inherited fd (`inheritedFds`) but those in `keep`; returns the ones it closed. */
export function closeInheritedFds(keep: readonly number[] = []): number[] {
  const closed: number[] = [];
  for (const fd of inheritedFds()) {
    if (keep.includes(fd)) continue;
    try {
      fs.closeSync(fd);
      closed.push(fd);
    } catch {
      /* already closed */
    }
  }
  return closed;
}
