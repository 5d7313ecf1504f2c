/**
 * The tRPC `events` subscription, as exact as the WebSocket: every committed event after the
 * resume point (`lastEventId`, which tRPC's client sends when it reconnects, else `after_seq`),
 * then live ones, each tracked by its seq; live-only events (streamed text, setup output) in
 * between, untracked. Its queue is bounded like the socket's (WS_MAX_BUFFERED_BYTES): a subscriber
 * that falls that far behind is ended with an error that says how to resume; a deleted conversation ends it with NOT_FOUND.
 */
import { TRPCError, tracked } from '@trpc/server';
import type { Core } from '../core.js';
import type { EncodedEvent } from '../events/types.js';
import { resumePoint } from './resume.js';

/** Bytes (of event JSON) a subscriber may have waiting before it is ended as too slow, unless the caller says otherwise. */
const DEFAULT_MAX_QUEUED_BYTES = 8 * 1024 * 1024;

interface EventStreamInput {
  conversation_id: string;
  after_seq?: number | null;
  /** The id (seq) of the last event received, sent by tRPC's client when it resubscribes. */
  lastEventId?: string | null;
}

export async function* eventStream(
  core: Pick<Core, 'conversations' | 'events'>,
  input: EventStreamInput,
  signal: AbortSignal | undefined,
  maxQueuedBytes = DEFAULT_MAX_QUEUED_BYTES,
) {
  const id = input.conversation_id;
  core.conversations.watched(await core.conversations.require(id));
  const from = resumePoint(input);
  const resumeAt = from.kind === 'after' ? from.seq : null;
  const since = from.kind === 'since' ? from.timestamp : null;
  const queue: EncodedEvent[] = [];
  let queuedBytes = 0;
  let wake: (() => void) | null = null;
  let drainWaiters: (() => void)[] = [];
  let end: 'too_slow' | 'deleted' | null = null;
  let lastSeq = resumeAt;
  let replaying = resumeAt !== null || since !== null;
  const stop = (why: 'too_slow' | 'deleted') => {
    end ??= why;
    wake?.();
  };
  const feed = core.events.follow(
    id,
    {
      send(ev) {
        if (end) return false;
        // as on the socket: the replay waits for the queue to drain (send's false), only live events can overflow it
        if (!replaying && queuedBytes > maxQueuedBytes) {
          stop('too_slow');
          return false;
        }
        queue.push(ev);
        queuedBytes += ev.json.length;
        wake?.();
        return queuedBytes < maxQueuedBytes / 2;
      },
      drained: () => new Promise<void>((r) => drainWaiters.push(r)),
      overflow: () => stop('too_slow'),
      ended: () => stop('deleted'),
    },
    { afterSeq: resumeAt, sinceTimestamp: since },
  );
  void feed.done.then(() => (replaying = false));
  const onAbort = () => wake?.();
  signal?.addEventListener('abort', onAbort);
  try {
    while (!signal?.aborted) {
      const ev = queue.shift();
      if (ev) {
        queuedBytes -= ev.json.length;
        if (queuedBytes < maxQueuedBytes / 2 && drainWaiters.length) {
          const waiters = drainWaiters;
          drainWaiters = [];
          for (const w of waiters) w();
        }
        const e = ev.event;
        if (e.seq === undefined) yield e;
        else {
          lastSeq = e.seq;
          yield tracked(String(e.seq), e);
        }
        continue;
      }
      if (end === 'deleted') throw new TRPCError({ code: 'NOT_FOUND', message: 'Conversation deleted' });
      if (end === 'too_slow') {
        throw new TRPCError({
          code: 'TOO_MANY_REQUESTS',
          message:
            `The subscriber fell more than ${maxQueuedBytes} bytes of events behind; ` +
            `subscribe again with lastEventId (or after_seq) ${lastSeq ?? 0} to resume`,
        });
      }
      await new Promise<void>((r) => (wake = r));
      wake = null;
    }
  } finally {
    signal?.removeEventListener('abort', onAbort);
    feed.close();
    for (const w of drainWaiters) w();
  }
}
