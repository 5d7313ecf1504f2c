import type { EncodedEvent } from './types.js';

export type Listener = (ev: EncodedEvent) => void;

/**
 * Per-conversation topics. `publish` hands one EncodedEvent (encoded lazily, once) to every
 * listener synchronously; listeners own their bounded queues, so a slow one cannot delay others.
 * `end` tells every subscriber the conversation is gone. The cluster bus (src/cluster/bus.ts)
 * implements the same methods across nodes.
 */
export class EventBus {
  /** Each listener with what to call when its conversation ends. */
  private topics = new Map<string, Map<Listener, (() => void) | undefined>>();

  subscribe(conversationId: string, listener: Listener, onEnd?: () => void): () => void {
    let set = this.topics.get(conversationId);
    if (!set) this.topics.set(conversationId, (set = new Map()));
    set.set(listener, onEnd);
    return () => {
      set!.delete(listener);
      if (set!.size === 0 && this.topics.get(conversationId) === set) this.topics.delete(conversationId);
    };
  }

  subscriberCount(conversationId: string): number {
    return this.topics.get(conversationId)?.size ?? 0;
  }

  /** Conversations with at least one subscriber. */
  subscribed(): IterableIterator<string> {
    return this.topics.keys();
  }

  publish(conversationId: string, ev: EncodedEvent): void {
    const set = this.topics.get(conversationId);
    if (!set) return;
    for (const listener of set.keys()) {
      try {
        listener(ev);
      } catch {
        // a listener's failure is its own: it never affects the publisher or other listeners
      }
    }
  }

  /** The conversation was deleted: every subscriber is told and removed. */
  end(conversationId: string): void {
    const set = this.topics.get(conversationId);
    if (!set) return;
    this.topics.delete(conversationId);
    for (const onEnd of set.values()) {
      try {
        onEnd?.();
      } catch {
        // as in publish
      }
    }
  }
}
