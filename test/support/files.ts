import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

/**
 * Every regular file below `dir` (for "the canary is in no file" checks). A conversation's disk image
 * (`disk.img`, a sparse ext4 file of a root daemon's) is read through its files, not as bytes: its
 * contents are copied out with debugfs (the image is not mounted, the daemon has stopped) into
 * `disk.img.contents/` beside it, and those files are walked in its place.
 */
export function walkFiles(dir: string): string[] {
  const out: string[] = [];
  for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) out.push(...walkFiles(p));
    else if (e.isFile() && e.name === 'disk.img') out.push(...walkFiles(extractImage(p)));
    else if (e.isFile()) out.push(p);
  }
  return out;
}

function extractImage(image: string): string {
  const to = `${image}.contents`;
  fs.rmSync(to, { recursive: true, force: true });
  fs.mkdirSync(to);
  execFileSync('debugfs', ['-R', `rdump / ${to}`, image], { stdio: ['ignore', 'ignore', 'pipe'], env: { PATH: '/usr/sbin:/usr/bin:/sbin:/bin' } });
  return to;
}
