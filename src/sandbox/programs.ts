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
  if (name.includes('/')) return isExecutable(name) ? path.resolve(name) : null;
  for (const dir of [...searchPath.split(':'), ...SYSTEM_DIRS]) {
    if (!dir) continue;
    const p = path.join(dir, name);
    if (isExecutable(p)) return p;
  }
  return null;
}

function isExecutable(p: string): boolean {
  try {
    fs.accessSync(p, fs.constants.X_OK);
    return fs.statSync(p).isFile();
  } catch {
    return false;
  }
}
