import { keepStoredJson, type ParleyEvent } from '../events/types.js';

/**
 * A waiting event as its JSON text (the text its frame and its subscribers got), with its seq. The
 * tail holds ~250 ms of events under load: as objects (an event is 6–10 of them) they outlived the
 * young generation's collections and were copied and marked by each; as one flat string each they cost
 * the collector next to nothing. Reads of the tail parse the ones they ask for (`events`), which only
 * the last quarter-second of a conversation costs.
 */
/** One event taken from the tail by a read: parsed, with the length of its stored text. */
export interface TailRead {
  event: ParleyEvent;
  bytes: number;
}

class TailEntry {
  constructor(
    readonly seq: number,
    readonly json: string,
  ) {}
}

/**
 * One conversation's committed events the index has not acknowledged yet, in seq order. Each
 * acknowledged frame takes about one event per conversation off the front: splicing the array each
 * time moved the whole tail (O(n) per frame, the store's event loop's third cost under load), so
 * the front is an index, and the array is cut once at least half of it is gone.
 */
export class TailQueue {
  private items: TailEntry[] = [];
  private head = 0;

  get size(): number {
    return this.items.length - this.head;
  }

  /** The seq of the oldest event still waiting (where SQLite's part of a read ends). */
  get firstSeq(): number | undefined {
    return this.items[this.head]?.seq;
  }

  /** A committed event, given with its JSON text (the text is what is kept). */
  push(seq: number, json: string): void {
    // the text is built by concatenation, a tree of pieces in V8 until something reads it as a whole:
    // reading a character makes it one string (its pieces are garbage now, not kept for 250 ms)
    json.charCodeAt(0);
    this.items.push(new TailEntry(seq, json));
  }

  /** Takes every event up to seq `upto` off the front; answers how many left. */
  dropThrough(upto: number): number {
    const { items } = this;
    let k = this.head;
    while (k < items.length && items[k]!.seq <= upto) k++;
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

  /**
   * The waiting events with a seq above `after` and below `before` (null: no bound), oldest first or
   * (`desc`) newest first, each parsed only when the caller takes it: a read that stops at its limit or
   * its byte bound never parses (nor holds) the rest. Objects of the caller's own; `keepJson`: each with
   * its text kept for a transport (`eventJson`). `bytes` is the length of its stored text.
   */
  *events(after: number | null, before: number | null, keepJson: boolean, desc: boolean): Generator<TailRead> {
    const { items, head } = this;
    const inRange = (seq: number) => (after === null || seq > after) && (before === null || seq < before);
    const read = (entry: TailEntry): TailRead => {
      const event = JSON.parse(entry.json) as ParleyEvent;
      if (keepJson) keepStoredJson(event, entry.json);
      return { event, bytes: entry.json.length };
    };
    if (desc) {
      for (let i = items.length - 1; i >= head; i--) {
        const entry = items[i]!;
        if (after !== null && entry.seq <= after) return;
        if (inRange(entry.seq)) yield read(entry);
      }
      return;
    }
    for (let i = head; i < items.length; i++) {
      const entry = items[i]!;
      if (before !== null && entry.seq >= before) return;
      if (inRange(entry.seq)) yield read(entry);
    }
  }

  /** How many waiting events have a seq above `after` and below `before` (null: no bound); none is parsed. */
  count(after: number | null, before: number | null): number {
    let n = 0;
    for (let i = this.head; i < this.items.length; i++) {
      const { seq } = this.items[i]!;
      if ((after === null || seq > after) && (before === null || seq < before)) n += 1;
    }
    return n;
  }

  /** The waiting event whose id is `id` (parsed), if any. */
  find(id: string): ParleyEvent | undefined {
    for (let i = this.head; i < this.items.length; i++) {
      const { json } = this.items[i]!;
      if (!json.includes(id)) continue;
      const ev = JSON.parse(json) as ParleyEvent;
      if (ev.id === id) return ev;
    }
    return undefined;
  }
}
