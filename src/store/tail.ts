import { keepStoredJson, type ParleyEvent } from '../events/types.js';

/**
 * A waiting event: its seq and where its JSON text (the text its frame and its subscribers got) lies in
 * its frame's payload. The tail holds ~250 ms of events under load. As objects (an event is 6–10 of
 * them) they outlived the young generation's collections and were copied and marked by each; as one
 * string each (~300 bytes for a short message) the scavenger still copied every one twice, into the
 * survivor space and then into the old generation, and the full collections marked them there. The
 * payload's bytes lie outside the JS heap (journal.ts `journalFrame`), shared with the writer thread, so
 * what the collector sees of a waiting event is this small record. Reads of the tail decode and parse
 * the ones they ask for (`events`), which only the last quarter-second of a conversation costs.
 */
class TailEntry {
  constructor(
    readonly seq: number,
    readonly payload: Buffer,
    readonly start: number,
    readonly end: number,
  ) {}

  text(): string {
    return this.payload.toString('utf8', this.start, this.end);
  }
}

/** One event taken from the tail by a read: parsed, with the length of its stored text in bytes. */
export interface TailRead {
  event: ParleyEvent;
  bytes: number;
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

  /** A committed event: its JSON text is `payload`'s bytes from `start` to `end`. */
  push(seq: number, payload: Buffer, start: number, end: number): void {
    this.items.push(new TailEntry(seq, payload, start, end));
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
      const json = entry.text();
      const event = JSON.parse(json) as ParleyEvent;
      if (keepJson) keepStoredJson(event, json);
      return { event, bytes: entry.end - entry.start };
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
      const entry = this.items[i]!;
      if (!entry.payload.subarray(entry.start, entry.end).includes(id)) continue;
      const ev = JSON.parse(entry.text()) as ParleyEvent;
      if (ev.id === id) return ev;
    }
    return undefined;
  }
}
