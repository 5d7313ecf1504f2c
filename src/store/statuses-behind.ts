/**
 * The execution statuses a SQLite store has committed but not yet stored in its conversations
 * table. A status event sets its conversation's status in the commit that writes it to the
 * journal; the row itself is updated by the index (journal.ts `journalIndexer`), in the transaction
 * that indexes the event, off the event loop (at a restart too, from the journal). Until then the
 * status is held here, and a read of the conversations stores what is behind first: none sees an
 * older status than the log's. (An UPDATE per status event on the event loop, between the commit
 * and the publish, took ~0.2–0.5 ms of each of a text turn's two.)
 */
import type { ParleyEvent } from '../events/types.js';
import { executionStatusOf } from './types.js';

export class StatusesBehind {
  private readonly behind = new Map<string, [status: string, timestamp: string, seq: number]>();

  /** `store`: one conversation's status and its time into its row (`updated_at` not taken back). */
  constructor(private readonly store: (status: string, timestamp: string, conversationId: string) => void) {}

  /** A committed event (or one of a frame read back at start): the last status per conversation is kept. */
  note(conversationId: string, event: ParleyEvent): void {
    const status = executionStatusOf(event);
    if (status) this.behind.set(conversationId, [status, event.timestamp, event.seq!]);
  }

  /** The index holds the events up to `newest` seq per conversation, the statuses among them stored. */
  indexed(newest: Map<string, number>): void {
    for (const [id, seq] of newest) {
      const b = this.behind.get(id);
      if (b && b[2] <= seq) this.behind.delete(id);
    }
  }

  /** Stores what is behind, before a read. One that fails (a busy database) stays: the index stores it, or the next read tries again. */
  apply(): void {
    for (const [id, [status, ts]] of this.behind) {
      try {
        this.store(status, ts, id);
      } catch {
        return;
      }
      this.behind.delete(id);
    }
  }
}
