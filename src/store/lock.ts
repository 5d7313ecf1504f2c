/**
 * One daemon per DATA_DIR. A second one would hand out the seqs the first also hands out, and its
 * start-up would index and remove the journal file the first is still writing.
 *
 * The lock is an exclusive SQLite transaction held open on `parley.lock`, i.e. an fcntl lock the
 * kernel drops when the process ends however it ends (kill -9, a crash, a reboot), even while the
 * dead process lingers as an unreaped zombie. Nothing is judged by pid: `parley.pid` only names the
 * owner in the error a second daemon prints (and serves operators' tools).
 */
import fs from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';

/** Takes the lock or throws a one-line error naming the owner; returns the release. */
export function lockDataDir(dir: string): () => void {
  const pidFile = path.join(dir, 'parley.pid');
  const db = new Database(path.join(dir, 'parley.lock'), { timeout: 0 });
  try {
    // the default rollback journal: BEGIN EXCLUSIVE takes the file's exclusive lock at once
    db.pragma('journal_mode = DELETE');
    db.exec('BEGIN EXCLUSIVE');
  } catch (err) {
    db.close();
    if ((err as { code?: string }).code !== 'SQLITE_BUSY') throw err;
    let owner = 'unknown';
    try {
      owner = fs.readFileSync(pidFile, 'utf8').trim() || owner;
    } catch {
      // the owner has not written it yet
    }
    throw new Error(`${dir} is in use by another Parley process (pid ${owner})`);
  }
  fs.writeFileSync(pidFile, `${process.pid}\n`, { mode: 0o600 });
  return () => {
    try {
      if (fs.readFileSync(pidFile, 'utf8').trim() === String(process.pid)) fs.rmSync(pidFile, { force: true });
    } catch {
      // already gone
    }
    db.close(); // ends the transaction: the lock is free
  };
}
