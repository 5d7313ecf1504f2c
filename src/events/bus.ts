import type { EncodedEvent } from './types.js';

export type Listener = (ev: EncodedEvent) => void;

/**
 * Per-conversation topics. `publish` hands one EncodedEvent (encoded lazily, once) to every
 * listener synchronously; listeners own their bounded queues, so a slow one cannot delay others.
 * A Redis-backed bus would implement the same two methods.
 */
export class EventBus {
  private topics = new Map<string, Set<Listener>>();

  subscribe(conversationId: string, listener: Listener): () => void {
    let set = this.topics.get(conversationId);
    if (!set) this.topics.set(conversationId, (set = new Set()));
    set.add(listener);
    return () => {
      set!.delete(listener);
      if (set!.size === 0 && this.topics.get(conversationId) === set) this.topics.delete(conversationId);
    };
  }

  subscriberCount(conversationId: string): number {
    return this.topics.get(conversationId)?.size ?? 0;
  }

  publish(conversationId: string, ev: EncodedEvent): void {
    const set = this.topics.get(conversationId);
    if (!set) return;
    for (const listener of set) {
      try {
        listener(ev);
      } catch {
        // a listener's failure is its own: it never affects the publisher or other listeners
      }
    }
  }
}
