/**
 * Once the arrivals stopped, the spares held ready for the next burst (held): as many as the latest
 * one had takes, at most MAX_HELD, for HOLD_MS after its last take. An idle spare holds ~2.5 MiB and
 * no CPU.
 */
const HOLD_MS = 5 * 60_000;
const MAX_HELD = 24;

/**
 * How often conversations take a holder: what the spare holders are sized from (holders.ts). A take
 * is a conversation's first sandboxed work; `cold` marks one that found no spare ready and waits for
 * a holder of its own.
 *
 * The time between takes is smoothed (an EWMA), quick to follow arrivals that come faster (a burst
 * begins: the spares it needs are started at once, not after several takes) and slow to follow ones
 * that slow down. Two gaps are not counted: one longer than `quietMs` (the arrivals stopped; the rate
 * is forgotten), and the gap after a cold take — a client that runs its conversations one after
 * another begins the next once the last is done, so that gap holds the cold one's wait for its holder
 * and, counted, would lower the spares asked for just as they ran out.
 */
export class Arrivals {
  /** The smoothed time between takes (ms); null: no recent burst. */
  interval: number | null = null;
  /** When (performance.now) a conversation last took a holder. */
  lastTake = -Infinity;
  /** When a take last found no spare ready. */
  lastCold = -Infinity;
  /** Takes in the latest run of takes each within `quietMs` of the one before: a burst's size (1: a lone take). */
  runTakes = 0;

  constructor(private readonly quietMs: () => number) {}

  /** A take at `now`. */
  take(now: number): void {
    const gap = now - this.lastTake;
    const afterCold = this.lastCold === this.lastTake;
    this.lastTake = now;
    if (gap > this.quietMs()) {
      this.interval = null;
      this.runTakes = 0;
    } else if (!afterCold) this.interval = this.interval === null ? gap : Math.min(gap, 0.5 * this.interval + 0.5 * gap);
    this.runTakes++;
  }

  /**
   * The spares to hold ready once the arrivals stopped: as many as the latest burst had takes, until
   * `holdMs` after its last take (0 after). Bursts recur (a team's morning, a CI fan-out): the next
   * one then finds its spares started while the machine was quiet, instead of their starts competing
   * with its turns for the CPU.
   */
  held(now: number, holdMs = HOLD_MS): number {
    return now - this.lastTake <= holdMs ? Math.min(MAX_HELD, this.runTakes) : 0;
  }

  /** The take at `now` (just counted by `take`) found no spare ready. */
  cold(now: number): void {
    this.lastCold = now;
  }

  /** The arrivals stopped: the rate is forgotten (the burst's size is not: held). */
  forget(): void {
    this.interval = null;
  }

  /**
   * How long after one spare's start the next may start, when several are needed at once: the time
   * between arrivals, at most `maxMs`. Started together, their starts compete for the CPU and all are
   * ready at once, late, so the conversations that come meanwhile find none; staggered, they are ready
   * one after another, as the conversations come.
   */
  staggerMs(maxMs: number): number {
    return Math.min(this.interval ?? 0, maxMs);
  }
}
