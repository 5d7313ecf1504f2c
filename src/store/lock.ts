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

/** What SQLite answers for a file that is not a database (left by an older version, another tool). */
const FOREIGN = new Set(['SQLITE_NOTADB', 'SQLITE_CORRUPT']);

/**
 * Takes the lock or throws a one-line error naming the owner; returns the release. A `parley.lock`
 * that is not the lock's format is emptied in place (an empty file is an empty database) and the lock
 * taken on it: no Parley can hold a lock on a file SQLite cannot read, and emptying keeps the inode,
 * so two daemons starting at once still lock the same file and one of them gets SQLITE_BUSY.
 */
export function lockDataDir(dir: string): () => void {
  const pidFile = path.join(dir, 'parley.pid');
  const lockFile = path.join(dir, 'parley.lock');
  let db: Database.Database;
  for (let attempt = 0; ; attempt++) {
    db = new Database(lockFile, { timeout: 0 });
    try {
      // the default rollback journal: BEGIN EXCLUSIVE takes the file's exclusive lock at once
      db.pragma('journal_mode = DELETE');
      db.exec('BEGIN EXCLUSIVE');
      break;
    } catch (err) {
      db.close();
      const code = (err as { code?: string }).code ?? '';
      if (FOREIGN.has(code) && attempt === 0) {
        emptyInPlace(lockFile);
        continue;
      }
      if (code !== 'SQLITE_BUSY') throw err;
      let owner = 'unknown';
      try {
        owner = fs.readFileSync(pidFile, 'utf8').trim() || owner;
      } catch {
        // the owner has not written it yet
      }
      throw new Error(`${dir} is in use by another Parley process (pid ${owner})`);
    }
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

/** Truncates a regular file without following a link planted in its place. */
function emptyInPlace(file: string): void {
  const fd = fs.openSync(file, fs.constants.O_WRONLY | fs.constants.O_NOFOLLOW | fs.constants.O_NONBLOCK);
  try {
    if (!fs.fstatSync(fd).isFile()) throw new Error(`${file} is not a regular file: remove it`);
    fs.ftruncateSync(fd, 0);
  } finally {
    fs.closeSync(fd);
  }
}
