/**
 * The daemon's sandbox holders as seen from the host's /proc (tests and bench-idle): their file
 * services, what each has at /workspace, and whether a spare one is ready to be taken.
 */
import fs from 'node:fs';
import { descendants, livingProcesses } from './processes.js';

const argv = (pid: number): string[] => {
  try {
    return fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
  } catch {
    return [];
  }
};

/** The file services of the daemon's holders (bwrap's and its supervisor's command lines name it too: the perl process is it). */
export function fileServices(daemon: number): number[] {
  return descendants(daemon).filter((p) => {
    const a = argv(p);
    // (or a test's stand-in for it, a node program)
    return (
      (/\/perl$/.test(a[0] ?? '') && a.some((x) => x.endsWith('/file-service.pl'))) || (/\/node$/.test(a[0] ?? '') && a.includes('/parley/file-service.mjs'))
    );
  });
}

/** The names in a holder's /workspace (sorted; not UTF-8 bytes as U+FFFD), null when it is gone. */
export function workspaceOf(pid: number): string[] | null {
  try {
    return fs.readdirSync(`/proc/${pid}/root/workspace`).sort();
  } catch {
    return null;
  }
}

/**
 * The file service of a spare holder ready to be taken: its workspace empty, its view sealed
 * (/proc/sys read-only, the holders' last step before the daemon opens them) and, with egress,
 * every holder's slirp4netns running.
 */
export function readySpare(daemon: number, egress = false): number | undefined {
  return readySpares(daemon, egress)[0];
}

/** Every ready spare's file service (the daemon keeps more than one while conversations come faster than holders start). */
export function readySpares(daemon: number, egress = false): number[] {
  if (egress) {
    const tools = descendants(daemon).filter((p) => /\/slirp4netns$/.test(argv(p)[0] ?? '')).length;
    if (tools < fileServices(daemon).length) return [];
  }
  return fileServices(daemon).filter((p) => workspaceOf(p)?.length === 0 && sealed(p));
}

/** A holder's view is sealed (/proc/sys read-only): the last step of its start before the daemon opens it. */
function sealed(fileService: number): boolean {
  try {
    return fs
      .readFileSync(`/proc/${fileService}/mountinfo`, 'utf8')
      .split('\n')
      .some((l) => l.split(' ')[4] === '/proc/sys' && /(^|,)ro(,|$)/.test(l.split(' ')[5] ?? ''));
  } catch {
    return false;
  }
}

/**
 * The file service of a holder whose /workspace holds `name` (a conversation's own), once its view is
 * sealed and the service has started: it waits for a request (asleep reading its channel, a socket; a
 * node stand-in's event loop in epoll_wait).
 */
export function readyHolderWith(daemon: number, name: string): number | undefined {
  return fileServices(daemon).find((p) => workspaceOf(p)?.includes(name) && sealed(p) && waiting(p));
}

function waiting(pid: number): boolean {
  try {
    return /^(unix_stream_read_generic|pipe_read|.*epoll_wait)/.test(fs.readFileSync(`/proc/${pid}/wchan`, 'utf8'));
  } catch {
    return false;
  }
}

const pidNamespace = (pid: number): string | null => {
  try {
    return fs.readlinkSync(`/proc/${pid}/ns/pid`);
  } catch {
    return null;
  }
};

/**
 * The shells the daemon's ready spares started ahead for their conversations (bash in a spare's pid
 * namespace), each with the nsenter on the host it runs under: processes of no conversation yet.
 */
/**
 * A joiner: what each process that enters a sandbox runs under on the host (util-linux nsenter, which
 * execs perl's seccomp loader; the loader's parent stays, outside the sandbox's pid namespace).
 */
export function isJoiner(args: string[]): boolean {
  return /(^|\/)perl$/.test(args[0] ?? '') && args[1] === '-e' && (args[2] ?? '').includes('parley: seccomp');
}

export function spareShells(daemon: number): number[] {
  const spares = new Set(readySpares(daemon).map(pidNamespace));
  const parent = livingProcesses();
  const out: number[] = [];
  for (const p of descendants(daemon)) {
    if (argv(p).slice(0, 2).join(' ') !== 'bash --norc' || !spares.has(pidNamespace(p))) continue;
    out.push(p);
    const up = parent.get(p);
    if (up !== undefined && isJoiner(argv(up))) out.push(up);
  }
  return out;
}
