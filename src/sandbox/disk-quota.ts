/**
 * SANDBOX_DISK_MB where it is measured rather than enforced by the kernel (no disk image: a daemon
 * that is not root, cluster mode, SANDBOX_DISK=measured, a workspace made before images; see
 * disk-image.ts): what a conversation holds is what its file service counts walking its workspace,
 * /tmp and HOME inside its sandbox (allocated blocks, once per inode, on their file system; a link
 * can only lead to what the sandbox sees) plus what its processes hold in files they unlinked while
 * open (no name leads to those: the daemon counts them from the host, through /proc/<pid>/fd of the
 * sandbox's processes). A conversation over the bound has every process stopped (its sandbox is
 * closed) and is told why. It may then delete files and go on: while it stays over the bound it is
 * stopped again whenever its use has grown since it was last stopped (a `rm` that frees space is
 * let through; more writing is not). Stopping it also frees what its processes held unlinked. What
 * it held when stopped is its first measure once its processes are gone (`settle`), not the measure
 * that found it over: they kept writing until their end (a loaded machine takes a while to stop
 * them), and counting that as growth stopped the conversation's next sandbox as it started. That
 * measure comes within one interval of the next sandbox's start, so what it writes meanwhile goes into
 * the mark too: each stop lets a conversation keep about one interval's writing more, the same as
 * the overshoot every stop has (a hard bound is the kernel's, with an image per conversation).
 *
 * How often: every POLL_MS while the sandbox has a process the daemon started (a command, setup,
 * an MCP server), every IDLE_POLL_MS otherwise (what background jobs write), and never more often
 * than WALK_FACTOR times the last walk took (a large tree is walked less often). The worst
 * overshoot is what the conversation writes in one interval plus one walk, bounded per file by
 * SANDBOX_FILE_SIZE_MB (RLIMIT_FSIZE); docs/security.md ("Disk") states the rule for users.
 */
import fs from 'node:fs';
import type { FileChannel } from './files.js';

const POLL_MS = 2_000;
const IDLE_POLL_MS = 30_000;
const WALK_FACTOR = 10;
/** A walk that takes longer answers what it counted so far (incomplete, still counted against the bound). */
const WALK_MS = 10_000;

export interface QuotaTarget {
  id: string;
  /** Whether it can be measured now (its file service is up). */
  usable: boolean;
  /** What it holds, in bytes (throws when its sandbox is going). */
  measure(walkMs: number): Promise<number>;
  /** A process the daemon started is running (checked every POLL_MS rather than IDLE_POLL_MS). */
  active: boolean;
}

/** Bytes of disk the walk inside the sandbox counts (its file service). */
export async function walkedBytes(channel: FileChannel, paths: string[], ms: number): Promise<number> {
  const r = await channel.request({ op: 'usage', paths, ms }, null);
  return Number(r.header.bytes) || 0;
}

/**
 * Bytes held in files that `pids` have open after unlinking them, on the file system `dev` (the
 * data disk: files in a tmpfs are memory, bounded by the cgroup), each inode once. Read from the
 * host's /proc: a link there names the open file itself (stat follows it to that inode, whatever
 * its name was), so no path of the agent's is resolved.
 */
export function unlinkedBytes(pids: number[], dev: number): number {
  const seen = new Set<number>();
  let bytes = 0;
  for (const pid of pids) {
    let fds: string[];
    try {
      fds = fs.readdirSync(`/proc/${pid}/fd`);
    } catch {
      continue;
    }
    for (const fd of fds) {
      const link = `/proc/${pid}/fd/${fd}`;
      try {
        if (!fs.readlinkSync(link).endsWith(' (deleted)')) continue;
        const st = fs.statSync(link);
        if (st.dev !== dev || !st.isFile() || seen.has(st.ino)) continue;
        seen.add(st.ino);
        bytes += st.blocks * 512;
      } catch {
        /* closed meanwhile */
      }
    }
  }
  return bytes;
}

export class DiskQuota {
  private timer: NodeJS.Timeout | null = null;
  private readonly next = new Map<string, number>();
  /** What a conversation used when it was last stopped (kept across its sandbox's restarts). */
  private readonly stoppedAt = new Map<string, number>();
  /** Stopped, and not measured since: its next measure is what it held once stopped (`stoppedAt`), not a new stop. */
  private readonly settling = new Set<string>();
  private stopped = false;

  constructor(
    private readonly limitBytes: number,
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

  /** A conversation stopped over the bound has no process left: its next measure is what it holds now. */
  settle(id: string): void {
    if (this.stoppedAt.has(id)) this.settling.add(id);
  }

  /** A conversation was deleted: nothing of it is kept. */
  remove(id: string): void {
    this.next.delete(id);
    this.stoppedAt.delete(id);
    this.settling.delete(id);
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
        if ((this.next.get(t.id) ?? 0) > now || !t.usable) continue;
        const started = Date.now();
        let used: number;
        try {
          used = await t.measure(WALK_MS);
        } catch {
          continue; // the sandbox is going: nothing to stop
        }
        const took = Date.now() - started;
        this.next.set(t.id, Date.now() + Math.max(t.active ? POLL_MS : IDLE_POLL_MS, took * WALK_FACTOR));
        const before = this.stoppedAt.get(t.id);
        const settled = this.settling.delete(t.id);
        if (used <= this.limitBytes) this.stoppedAt.delete(t.id);
        else if (settled && before !== undefined) this.stoppedAt.set(t.id, Math.max(before, used));
        else if (before === undefined || used > before) {
          this.stoppedAt.set(t.id, used);
          this.settling.add(t.id);
          this.next.delete(t.id);
          this.onOver(t.id, used);
        }
      }
    } finally {
      this.schedule();
    }
  }
}
