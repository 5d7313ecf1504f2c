/**
 * The embedded store's committed events that its index has not acknowledged yet (the "tail"), per
 * conversation in seq order, with what bounds them: how many events and bytes of journal frames
 * wait, and since when. Reads merge them with the database (sqlite-reads.ts); appends wait once
 * they reach the store's bound.
 */
import type { ParleyEvent } from '../events/types.js';
import type { TailView } from './sqlite-reads.js';
import { TailQueue } from './tail.js';

export class UnindexedEvents {
  private readonly byConversation = new Map<string, TailQueue>();
  /** Commit time and size of each frame the index has not acknowledged yet, oldest first. */
  private readonly frames: { at: number; bytes: number }[] = [];
  /** Events waiting, in every conversation. */
  size = 0;
  /** Bytes of the journal frames waiting. */
  bytes = 0;

  constructor(
    private readonly maxEvents: number,
    private readonly maxBytes: number,
  ) {}

  /** At the bound: appends wait for the index (or are refused while it cannot write). */
  get full(): boolean {
    return this.size >= this.maxEvents || this.bytes >= this.maxBytes;
  }

  /** Seconds since the oldest frame the index has not acknowledged was committed (0: none waiting). */
  get lagSeconds(): number {
    const oldest = this.frames[0];
    return oldest === undefined ? 0 : (performance.now() - oldest.at) / 1000;
  }

  /**
   * A committed frame's events of one conversation, in seq order: `events[j]`'s JSON text is the bytes of
   * `payload` (the frame's) in the span `first + j` of `spans` (journal.ts `eventSpans`). What is kept is
   * where the text lies, not the text.
   */
  add(conversationId: string, payload: Buffer, spans: readonly number[], first: number, events: readonly { event: ParleyEvent }[]): void {
    let t = this.byConversation.get(conversationId);
    if (!t) this.byConversation.set(conversationId, (t = new TailQueue()));
    for (let j = 0; j < events.length; j++) t.push(events[j]!.event.seq!, payload, spans[2 * (first + j)]!, spans[2 * (first + j) + 1]!);
    this.size += events.length;
  }

  /** A frame of `bytes` went to the index. */
  frameSent(bytes: number): void {
    this.frames.push({ at: performance.now(), bytes });
    this.bytes += bytes;
  }

  /** The index holds the oldest frame: its events leave (up to `newest` seq per conversation). */
  frameIndexed(newest: Map<string, number>): void {
    for (const [id, upto] of newest) {
      const t = this.byConversation.get(id);
      if (!t) continue;
      this.size -= t.dropThrough(upto);
      if (t.size === 0) this.byConversation.delete(id);
    }
    this.bytes -= this.frames.shift()?.bytes ?? 0;
  }

  /**
   * The conversation's events (those of `q`'s seq range, read lazily in the order asked, with their JSON
   * text kept when `q` asks), and the seq below which the database answers.
   */
  of(conversationId: string, q: { afterSeq?: number | null; beforeSeq?: number | null; keepJson?: boolean } = {}): TailView {
    const t = this.byConversation.get(conversationId);
    if (!t) return { read: () => [], count: () => 0, below: null };
    const after = q.afterSeq ?? null;
    const before = q.beforeSeq ?? null;
    return { read: (desc) => t.events(after, before, q.keepJson === true, desc), count: () => t.count(after, before), below: t.firstSeq! };
  }

  find(conversationId: string, eventId: string): ParleyEvent | undefined {
    return this.byConversation.get(conversationId)?.find(eventId);
  }

  /** A deleted conversation: whatever of it still waits is not to be seen. */
  forget(conversationId: string): void {
    this.size -= this.byConversation.get(conversationId)?.size ?? 0;
    this.byConversation.delete(conversationId);
  }
}
