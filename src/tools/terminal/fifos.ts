/**
 * The named pipes (FIFOs) a shell's commands read their stdin from, one per command (session.ts says
 * why): made ahead a batch at a time, opened as they are made, handed out one per command, kept for
 * the conversation's next shell after an idle close, and removed by name when the shell ends.
 */
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { childProcess } from '../../builtins.js';
import type { KeptFifo } from './shell-script.js';

const execFileAsync = (file: string, args: string[]) => promisify(childProcess().execFile)(file, args);

/** FIFOs made at once for the stdin of the next commands (see `next`). */
const FIFO_BATCH = 16;

function closeQuietly(fd: number): void {
  try {
    fs.closeSync(fd);
  } catch {
    /* closed */
  }
}

/** A FIFO made and opened for a command's stdin. */
interface OpenFifo {
  path: string;
  fd: number;
}

export class CommandFifos {
  /** FIFOs are named `<prefix><n>` (unique per shell in a shared io directory). */
  private readonly prefix = `stdin-${randomBytes(6).toString('hex')}-`;
  /** FIFOs made and not yet removed (their names: nothing else in the directory is ever removed). */
  private readonly made = new Set<string>();
  private readonly spare: OpenFifo[] = [];
  private seq = 0;
  /** The batch being made (one at a time: a command waits for the batch the start began). */
  private batch: Promise<void> | null = null;

  constructor(
    /** The directory on the host. */
    readonly dir: string,
    /** `dir` was made for this shell (removed with it), else it is the conversation's io directory. */
    private readonly ownDir: boolean,
    /** The uid and gid the FIFOs are given (the sandbox's, when it is not the daemon's). */
    private readonly owner: { uid: number; gid: number } | null,
    /** The shell has ended: no FIFO is made for it any more. */
    private readonly ended: () => boolean,
    /** Makes FIFOs (mode 600) at these paths: a sandbox's spawner's `mkfifo`, or one forked by the daemon. */
    private readonly mkfifo: (paths: string[]) => Promise<unknown> = (paths) => execFileAsync('mkfifo', ['-m', '600', ...paths]),
  ) {}

  /** FIFOs made and not handed out yet. */
  get spareCount(): number {
    return this.spare.length;
  }

  /**
   * A fresh FIFO for the next command's stdin, already opened. They are made FIFO_BATCH at a time:
   * one `mkfifo` process for that many commands (spawning from the daemon costs milliseconds, most
   * of an `echo` step; a sandbox's spawner starts it off the daemon's event loop). Each is opened when made (O_RDWR: opening does not block, and the shell's
   * `<fifo` open finds a writer at once), so whatever a command does to the directory later (it is
   * the shell's too) cannot change what we write to. The directory is named by the daemon (no
   * component the sandbox can replace); in it only the last component is the sandbox's to touch,
   * and the kernel never follows a symlink there: mknod fails on anything that exists, the open has
   * O_NOFOLLOW, and the type check refuses anything but a FIFO.
   */
  async next(): Promise<OpenFifo> {
    while (this.spare.length === 0) {
      if (this.ended()) throw new Error('shell is not running');
      await this.make();
    }
    return this.spare.shift()!;
  }

  /**
   * Makes the next FIFO_BATCH FIFOs (see `next`). The first batch is begun with the shell's start,
   * so a new shell's first command does not wait for a `mkfifo` process. A batch finished after the
   * shell ended is closed and removed at once.
   */
  make(): Promise<void> {
    this.batch ??= (async () => {
      const paths = Array.from({ length: FIFO_BATCH }, () => path.join(this.dir, `${this.prefix}${++this.seq}`));
      for (const p of paths) this.made.add(p);
      try {
        await this.mkfifo(paths);
        for (const p of paths) {
          const fd = fs.openSync(p, fs.constants.O_RDWR | fs.constants.O_NONBLOCK | fs.constants.O_NOFOLLOW);
          if (!fs.fstatSync(fd).isFIFO()) {
            fs.closeSync(fd);
            throw new Error(`${p} is not the FIFO made for a command's input`);
          }
          // the shell reads it as the sandbox's uid
          if (this.owner) fs.fchownSync(fd, this.owner.uid, this.owner.gid);
          this.spare.push({ path: p, fd });
        }
      } finally {
        if (this.ended()) {
          this.closeSpare();
          await this.remove();
        }
      }
    })().finally(() => (this.batch = null));
    return this.batch;
  }

  /**
   * The FIFOs made and never used, for the conversation's next shell (an idle close): closed here,
   * left in the conversation's io directory, no longer removed with this shell. None when the
   * FIFOs are in a directory of the shell's own (removed with it).
   */
  keep(): KeptFifo[] {
    if (this.ownDir) return [];
    const kept: KeptFifo[] = [];
    for (const f of this.spare) {
      try {
        const st = fs.fstatSync(f.fd);
        kept.push({ path: f.path, dev: st.dev, ino: st.ino });
        this.made.delete(f.path);
      } catch {
        /* removed with the shell */
      }
    }
    this.closeSpare();
    return kept;
  }

  /**
   * Takes up the FIFOs an earlier shell of the conversation left (`keep`), each opened as a new
   * one is (`next`: O_NOFOLLOW, not blocking, a FIFO) and only when it is still the very inode
   * that was made; anything else at its name is removed (unlink does not follow it) and not used.
   */
  take(kept: KeptFifo[]): void {
    for (const k of kept) {
      if (path.dirname(k.path) !== this.dir) continue;
      let fd: number | null = null;
      try {
        fd = fs.openSync(k.path, fs.constants.O_RDWR | fs.constants.O_NONBLOCK | fs.constants.O_NOFOLLOW);
        const st = fs.fstatSync(fd);
        if (!st.isFIFO() || st.dev !== k.dev || st.ino !== k.ino) throw new Error('not the FIFO that was made');
        if (this.owner) fs.fchownSync(fd, this.owner.uid, this.owner.gid);
        this.made.add(k.path);
        this.spare.push({ path: k.path, fd });
      } catch {
        if (fd !== null) closeQuietly(fd);
        fs.promises.unlink(k.path).catch(() => {});
      }
    }
  }

  /** A used FIFO goes (its command is done). */
  discard(fifoPath: string): void {
    this.made.delete(fifoPath);
    fs.promises.unlink(fifoPath).catch(() => {});
  }

  /** Removes what this shell made: its own directory, or its FIFOs by name (unlink never follows the last component). */
  async remove(): Promise<void> {
    if (this.ownDir) {
      await fs.promises.rm(this.dir, { recursive: true, force: true }).catch(() => {});
      return;
    }
    const names = [...this.made];
    this.made.clear();
    await Promise.all(names.map((p) => fs.promises.unlink(p).catch(() => {})));
  }

  closeSpare(): void {
    for (const { fd } of this.spare.splice(0)) closeQuietly(fd);
  }
}
