/**
 * SANDBOX_DISK_MB: the disk one conversation may use (its workspace, /tmp and HOME together).
 *
 * Measured, not enforced by the kernel (a per-conversation file system or project quota would
 * need root and a file system that has them; neither is given): the conversation's own file
 * service (inside its sandbox, so a link can only lead to what it sees) walks those directories,
 * counting allocated blocks once per inode and staying on their file system. A conversation over
 * the bound has every process stopped (its sandbox is closed) and is told why. It may then delete
 * files and go on: while it stays over the bound it is stopped again whenever its use has grown
 * since it was last stopped (a `rm` that frees space is let through; more writing is not).
 *
 * How often: every POLL_MS while the sandbox has a process the daemon started (a command, setup,
 * an MCP server), every IDLE_POLL_MS otherwise (what background jobs write), and never more often
 * than WALK_FACTOR times the last walk took (a large tree is walked less often). The worst
 * overshoot is what the conversation writes in one interval plus one walk, bounded per file by
 * SANDBOX_FILE_SIZE_MB (RLIMIT_FSIZE); docs/security.md ("Disk") states the rule for users.
 */
import type { FileChannel } from './files.js';

export const POLL_MS = 2_000;
const IDLE_POLL_MS = 30_000;
const WALK_FACTOR = 10;
/** A walk that takes longer answers what it counted so far (incomplete, still counted against the bound). */
const WALK_MS = 10_000;

export interface QuotaTarget {
  id: string;
  channel: FileChannel;
  /** A process the daemon started is running (checked every POLL_MS rather than IDLE_POLL_MS). */
  active: boolean;
}

export class DiskQuota {
  private timer: NodeJS.Timeout | null = null;
  private readonly next = new Map<string, number>();
  /** What a conversation used when it was last stopped (kept across its sandbox's restarts). */
  private readonly stoppedAt = new Map<string, number>();
  private stopped = false;

  constructor(
    private readonly limitBytes: number,
    /** The directories to count, as the sandbox sees them. */
    private readonly paths: string[],
    private readonly targets: () => QuotaTarget[],
    private readonly onOver: (id: string, usedBytes: number) => void,
  ) {}

  start(): void {
    if (this.limitBytes <= 0 || this.timer || this.stopped) return;
    this.schedule();
  }

  stop(): void {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
  }

  /** A conversation's sandbox closed: its next one is checked from the start. */
  forget(id: string): void {
    this.next.delete(id);
  }

  /** A conversation was deleted: nothing of it is kept. */
  remove(id: string): void {
    this.next.delete(id);
    this.stoppedAt.delete(id);
  }

  private schedule(): void {
    if (this.stopped) return;
    this.timer = setTimeout(() => void this.round(), POLL_MS);
    this.timer.unref();
  }

  /** One pass over the sandboxes due, one walk at a time (a walk is one process's work, inside its sandbox). */
  private async round(): Promise<void> {
    try {
      const now = Date.now();
      for (const t of this.targets()) {
        if (this.stopped) return;
        if ((this.next.get(t.id) ?? 0) > now || !t.channel.usable) continue;
        const started = Date.now();
        let used: number;
        try {
          const r = await t.channel.request({ op: 'usage', paths: this.paths, ms: WALK_MS }, null);
          used = Number(r.header.bytes) || 0;
        } catch {
          continue; // the sandbox is going: nothing to stop
        }
        const took = Date.now() - started;
        this.next.set(t.id, Date.now() + Math.max(t.active ? POLL_MS : IDLE_POLL_MS, took * WALK_FACTOR));
        const before = this.stoppedAt.get(t.id);
        if (used <= this.limitBytes) this.stoppedAt.delete(t.id);
        else if (before === undefined || used > before) {
          this.stoppedAt.set(t.id, used);
          this.next.delete(t.id);
          this.onOver(t.id, used);
        }
      }
    } finally {
      this.schedule();
    }
  }
}
