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

  /** A committed frame's events of one conversation, in seq order (as the frame encoded them: no copy on the way to the append's answer). */
  add(conversationId: string, encoded: readonly { event: ParleyEvent }[]): void {
    let t = this.byConversation.get(conversationId);
    if (!t) this.byConversation.set(conversationId, (t = new TailQueue()));
    for (const e of encoded) t.push(e.event);
    this.size += encoded.length;
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

  /** The conversation's events, and the seq below which the database answers. */
  of(conversationId: string): TailView {
    const t = this.byConversation.get(conversationId);
    return t ? { events: t.events(), below: t.first!.seq! } : { events: [], below: null };
  }

  find(conversationId: string, eventId: string): ParleyEvent | undefined {
    return this.byConversation.get(conversationId)?.find((e) => e.id === eventId);
  }

  /** A deleted conversation: whatever of it still waits is not to be seen. */
  forget(conversationId: string): void {
    this.size -= this.byConversation.get(conversationId)?.size ?? 0;
    this.byConversation.delete(conversationId);
  }
}
