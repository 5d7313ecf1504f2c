import fs from 'node:fs';
import path from 'node:path';

/**
 * Where system tools live when PATH lacks them: a daemon started by an ordinary user (or under a
 * unit with a short PATH) often has no /usr/sbin on PATH, where Debian puts nft and ip.
 */
const SYSTEM_DIRS = ['/usr/local/sbin', '/usr/local/bin', '/usr/sbin', '/usr/bin', '/sbin', '/bin'];

/**
 * The absolute path of the executable `name`: checked as given when it has a slash, else looked up
 * on PATH and then in the system directories; null when there is none.
 */
export function findProgram(name: string, searchPath = process.env.PATH ?? ''): string | null {
  return lookUp(name, [...searchPath.split(':'), ...SYSTEM_DIRS]);
}

/** The same on PATH alone (a shell's `command -v`), for tools the daemon's PATH must provide. */
export function which(name: string): string | null {
  return lookUp(name, (process.env.PATH ?? '/usr/local/bin:/usr/bin:/bin').split(':'));
}

/**
 * The directories are tried with a stat that returns nothing for a missing file rather than
 * throwing: the start looks up a dozen programs in ~15 directories each, mostly misses. Each
 * directory once (findProgram's system directories are mostly on PATH already), and each candidate
 * joined by hand, only the one found normalized: path.join normalizes every one, and those ~200 were
 * a quarter of the start's path work, which is what made V8 load its optimizing compiler into an
 * idle daemon (test/daemon-idle-tiering.test.ts).
 */
function lookUp(name: string, dirs: string[]): string | null {
  if (name.includes('/')) return isExecutable(name) ? path.resolve(name) : null;
  for (const dir of new Set(dirs)) {
    if (!dir) continue;
    if (isExecutable(dir.endsWith('/') ? dir + name : `${dir}/${name}`)) return path.join(dir, name);
  }
  return null;
}

function isExecutable(p: string): boolean {
  try {
    if (!fs.statSync(p, { throwIfNoEntry: false })?.isFile()) return false;
    fs.accessSync(p, fs.constants.X_OK);
    return true;
  } catch {
    // not a directory, not searchable, not executable
    return false;
  }
}
