import type { ParleyEvent } from '../events/types.js';

/**
 * One conversation's committed events the index has not acknowledged yet, in seq order. Each
 * acknowledged frame takes about one event per conversation off the front: splicing the array each
 * time moved the whole tail (O(n) per frame, the store's event loop's third cost under load), so
 * the front is an index, and the array is cut once at least half of it is gone.
 */
export class TailQueue {
  private items: ParleyEvent[] = [];
  private head = 0;

  get size(): number {
    return this.items.length - this.head;
  }

  /** The oldest event still waiting (its seq is where SQLite's part of a read ends). */
  get first(): ParleyEvent | undefined {
    return this.items[this.head];
  }

  push(ev: ParleyEvent): void {
    this.items.push(ev);
  }

  /** Takes every event up to seq `upto` off the front; answers how many left. */
  dropThrough(upto: number): number {
    const { items } = this;
    let k = this.head;
    while (k < items.length && items[k]!.seq! <= upto) k++;
    const dropped = k - this.head;
    this.head = k;
    if (k === items.length) {
      this.items = [];
      this.head = 0;
    } else if (k >= 32 && k * 2 >= items.length) {
      this.items = items.slice(k);
      this.head = 0;
    }
    return dropped;
  }

  /** The waiting events, oldest first (a copy once some have left the front: the caller may keep it). */
  events(): ParleyEvent[] {
    return this.head === 0 ? this.items.slice() : this.items.slice(this.head);
  }

  find(pred: (ev: ParleyEvent) => boolean): ParleyEvent | undefined {
    for (let i = this.head; i < this.items.length; i++) if (pred(this.items[i]!)) return this.items[i];
    return undefined;
  }
}
