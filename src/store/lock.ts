/**
 * One daemon per DATA_DIR. A second one would hand out the seqs the first also hands out, and its
 * start-up would index and remove the journal file the first is still writing. The lock is a
 * file holding the owner's pid; one left by a process that is gone (kill -9) is taken over.
 */
import fs from 'node:fs';
import path from 'node:path';

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Takes the lock or throws a one-line error naming the owner; returns the release. */
export function lockDataDir(dir: string): () => void {
  const file = path.join(dir, 'parley.pid');
  for (let attempt = 0; attempt < 3; attempt++) {
    try {
      fs.writeFileSync(file, `${process.pid}\n`, { flag: 'wx', mode: 0o600 });
      return () => {
        try {
          if (fs.readFileSync(file, 'utf8').trim() === String(process.pid)) fs.rmSync(file, { force: true });
        } catch {
          // already gone
        }
      };
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      let owner = NaN;
      try {
        owner = Number(fs.readFileSync(file, 'utf8').trim());
      } catch {
        continue; // removed meanwhile: try again
      }
      if (Number.isInteger(owner) && owner > 0 && alive(owner)) throw new Error(`${dir} is in use by another Parley process (pid ${owner})`);
      fs.rmSync(file, { force: true }); // its owner is gone
    }
  }
  throw new Error(`cannot lock ${dir}: ${file} keeps reappearing`);
}
