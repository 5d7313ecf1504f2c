/**
 * Free space on the filesystem that holds DATA_DIR, and the "disk pressure" reported when it runs
 * short. The store's own writes (journal, index, records) need room there, and agents whose
 * workspaces share that filesystem can take all of it.
 *
 * Pressure starts when a sample (statfs: every `idleIntervalMs`, every `intervalMs` while under
 * pressure) finds less than `lowBytes` free, or at once when one of the store's writes meets a full
 * disk (`report`). While it lasts every subscriber hears of it at each sample, with the bytes free,
 * so that whoever can free space (the sandbox: stop the conversation using the most disk) can act
 * again if the last step was not enough. It ends when a sample finds twice `lowBytes` free (the
 * margin keeps it from flapping around the threshold), and subscribers hear that once.
 *
 * The watch only observes and tells: it never deletes or stops anything itself.
 */
import fs from 'node:fs';
import type { Logger } from 'pino';

interface DiskPressure {
  /** true while DATA_DIR's filesystem is short of space (repeated at every sample); false once when it has room again. */
  full: boolean;
  /** Bytes free to unprivileged users on that filesystem at this report (statfs f_bavail × f_bsize; null before the first sample). */
  freeBytes: number | null;
  /** The filesystem's size in bytes (null before the first sample). */
  totalBytes: number | null;
  /** Why: "less than N bytes free", or the write that met the full disk and its error, or "space returned". */
  reason: string;
}

export type DiskPressureListener = (p: DiskPressure) => void;

interface DiskWatchOptions {
  /** Below this many free bytes the filesystem is under pressure (default: 5 % of its size, at most 256 MiB). */
  lowBytes?: number;
  /** Sampling period while under pressure (default 1 s). */
  intervalMs?: number;
  /** Sampling period otherwise (default 5 s). */
  idleIntervalMs?: number;
  /** Where the start and the end of a pressure are logged (a warning, then an info line). */
  log?: Logger;
}

/** Errors (fs and SQLite) that mean "no room to write": a full disk or an exhausted quota. */
export function isDiskFull(err: unknown): boolean {
  const code = (err as { code?: unknown })?.code;
  return code === 'ENOSPC' || code === 'EDQUOT' || code === 'SQLITE_FULL';
}

/**
 * An error's text without the path a Node fs error ends with ("ENOSPC: no space left on device, open '/…'" → "ENOSPC: no space
 * left on device"): error details name no host path.
 */
export function errorText(err: unknown): string {
  const e = err as { code?: unknown; syscall?: unknown; message?: unknown };
  const message = typeof e?.message === 'string' ? e.message : String(err);
  if (typeof e?.code === 'string' && typeof e.syscall === 'string') return message.replace(/, \w+ '.*$/s, '');
  return message;
}

export class DiskWatch {
  private readonly listeners = new Set<DiskPressureListener>();
  private readonly fixedLow: number | undefined;
  private readonly intervalMs: number;
  private readonly idleIntervalMs: number;
  private readonly log: Logger | undefined;
  private timer: NodeJS.Timeout | null = null;
  /** The reason of the pressure in force (null: none). */
  private pressure: string | null = null;
  private free: number | null = null;
  private total: number | null = null;
  private sampling = false;
  private closed = false;

  constructor(
    readonly dir: string,
    opts: DiskWatchOptions = {},
  ) {
    this.fixedLow = opts.lowBytes;
    this.intervalMs = opts.intervalMs ?? 1000;
    this.idleIntervalMs = opts.idleIntervalMs ?? 5000;
    this.log = opts.log;
    this.schedule(0);
  }

  /** Calls `listener` at every pressure report; returns the unsubscribe. */
  subscribe(listener: DiskPressureListener): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** Whether DATA_DIR's filesystem is under pressure now. */
  get underPressure(): boolean {
    return this.pressure !== null;
  }

  /** The threshold below which the filesystem is under pressure. */
  get lowBytes(): number {
    return this.fixedLow ?? Math.min(256 * 1024 * 1024, Math.floor((this.total ?? 0) * 0.05));
  }

  /** The free bytes of the last sample (null before the first). */
  get freeBytes(): number | null {
    return this.free;
  }

  /** A write of the daemon met a full disk: pressure starts now (subscribers hear it at once) and the next sample comes at once. */
  report(source: string, err: unknown): void {
    if (this.closed) return;
    if (this.pressure === null) this.begin(`${source}: ${errorText(err)}`);
    this.schedule(0);
  }

  /** Samples now; resolves with the free bytes (the sample also moves the pressure state). */
  async sample(): Promise<number> {
    const s = await fs.promises.statfs(this.dir);
    this.free = s.bavail * s.bsize;
    this.total = s.blocks * s.bsize;
    if (this.closed) return this.free;
    const low = this.lowBytes;
    if (this.free < low && this.pressure === null) {
      this.begin(`less than ${low} bytes free`);
    } else if (this.pressure !== null && this.free >= 2 * low) {
      this.pressure = null;
      this.log?.info({ free_bytes: this.free }, 'disk pressure over: DATA_DIR has room again');
      this.emit(false, 'space returned');
    } else if (this.pressure !== null) {
      this.emit(true, this.pressure);
    }
    return this.free;
  }

  close(): void {
    this.closed = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    this.listeners.clear();
  }

  private schedule(ms: number): void {
    if (this.closed) return;
    if (this.timer) clearTimeout(this.timer);
    this.timer = setTimeout(() => void this.tick(), ms);
    this.timer.unref();
  }

  private async tick(): Promise<void> {
    this.timer = null;
    if (this.sampling || this.closed) return;
    this.sampling = true;
    try {
      await this.sample();
    } catch {
      // DATA_DIR unreadable for a moment: the next sample tells
    } finally {
      this.sampling = false;
    }
    if (!this.timer) this.schedule(this.pressure !== null ? this.intervalMs : this.idleIntervalMs);
  }

  private begin(reason: string): void {
    this.pressure = reason;
    this.log?.warn({ free_bytes: this.free, reason }, 'disk pressure: DATA_DIR is short of space');
    this.emit(true, reason);
  }

  private emit(full: boolean, reason: string): void {
    const p: DiskPressure = { full, freeBytes: this.free, totalBytes: this.total, reason };
    for (const l of this.listeners) {
      try {
        l(p);
      } catch {
        // a listener's failure is its own
      }
    }
  }
}
