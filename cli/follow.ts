/**
 * Following a conversation until its run ends, over the typed client's `events` subscription.
 *
 * Exactness comes from the subscription: every committed event is tracked by its seq, and when
 * the connection drops (the daemon restarts, the network hiccups) the client reconnects and the
 * daemon resumes after the last seq it delivered (`lastEventId`). Here events at or below the last
 * seq shown are dropped besides, so nothing is shown twice whatever the transport does.
 *
 * When it ends: the conversation's status is known at the start (`from`). A conversation that is
 * running, or about to run (`pending`: `parley run` before the run starts, a preparation under
 * way), is followed until a status event says the run ended: finished, error, stuck, paused or
 * waiting_for_confirmation. One that is not is shown up to the seq it had at the start and left
 * with the code of its status, unless a run starts meanwhile.
 */
import type { ParleyClient, ParleyEvent, ParleyStreamItem } from '../src/client.js';
import { CliFailure, describeFailure, EXIT, exitForStatus, type ExitCode, type FailureContext } from './failure.js';
import type { EventSink } from './render.js';

const RUN_ENDS = new Set(['finished', 'error', 'stuck', 'paused', 'waiting_for_confirmation']);
/** How long the daemon may stay unreachable while following before the command gives up. */
const RECONNECT_LIMIT_MS = 120_000;
/**
 * Output waiting for a slow reader (`parley attach … | slow-program`) beyond which the stream is
 * left until the output drains, then resumed after the last seq shown: what the command holds stays
 * bounded, as the daemon bounds what it holds for a slow subscriber.
 */
const MAX_BACKLOG_BYTES = 1024 * 1024;

export interface FollowOptions {
  client: ParleyClient;
  id: string;
  /** Show events after this seq (0: from the start). */
  afterSeq: number;
  /** The conversation's status and last seq when following began. */
  from: { status: string; lastSeq: number; pending: boolean };
  sink: EventSink;
  /** Ctrl-C interrupts the agent first (a second Ctrl-C detaches at once). */
  interruptOnCtrlC: boolean;
  failure: FailureContext;
  /** Diagnostics (reconnecting, detached): never the events. */
  note(line: string): void;
}

/**
 * Shows the conversation's events until it stops, reconnecting when the stream drops; the exit
 * code says how it ended. Long: the subscription, the Ctrl-C handling and the lost-connection
 * timer share the state of one follow, so they live in one closure.
 */
export function follow(o: FollowOptions): Promise<ExitCode> {
  let status = o.from.status;
  let pending = o.from.pending;
  let lastSeq = o.afterSeq;
  let interrupting = false;
  let lost = false;
  let lostTimer: NodeJS.Timeout | null = null;

  // long for the same reason as follow itself: one closure over the state of one follow
  return new Promise<ExitCode>((resolve, reject) => {
    let sub: { unsubscribe(): void } | null = null;
    let done = false;
    const finish = (code: ExitCode | Error) => {
      if (done) return; // unsubscribing completes the subscription, which calls back here
      done = true;
      process.off('SIGINT', onSigint);
      if (lostTimer) clearTimeout(lostTimer);
      sub?.unsubscribe();
      sub = null;
      o.sink.close();
      if (code instanceof Error) reject(code);
      else resolve(code);
    };
    const active = () => status === 'running' || (pending && status === 'idle');
    const check = () => {
      if (lastSeq < o.from.lastSeq) return; // still showing what was there at the start
      if (pending || status === 'running') return;
      finish(exitForStatus(status));
    };

    const onEvent = (e: ParleyEvent) => {
      if (e.seq !== undefined) {
        if (e.seq <= lastSeq) return; // already shown (a replay overlapping a reconnection)
        lastSeq = e.seq;
      }
      o.sink.event(e);
      if (o.sink.backlog() > MAX_BACKLOG_BYTES) holdUntilDrained();
      if (e.kind === 'ConversationStateUpdateEvent' && e.key === 'execution_status' && e.seq !== undefined && e.seq > o.from.lastSeq) {
        const wasActive = active();
        status = String(e.value);
        if (status !== 'idle') pending = false;
        if (wasActive && RUN_ENDS.has(status)) return finish(exitForStatus(status));
      }
      if (e.seq !== undefined) check();
    };

    const onSigint = () => {
      if (o.interruptOnCtrlC && !interrupting && active()) {
        interrupting = true;
        o.note(`interrupting ${o.id} (Ctrl-C again to detach)`);
        o.client.interrupt.mutate({ conversation_id: o.id }).catch((err) => finish(describeFailure(err, o.failure)));
        return;
      }
      o.note(`detached from ${o.id} at seq ${lastSeq}; the conversation goes on: parley attach ${o.id} --after ${lastSeq}`);
      finish(EXIT.detached);
    };
    process.on('SIGINT', onSigint);

    let holding = false;
    const holdUntilDrained = () => {
      if (holding) return;
      holding = true;
      const old = sub;
      generation++; // what the old subscription still delivers is dropped: it comes again after lastSeq
      sub = null;
      old?.unsubscribe();
      void o.sink.drained().then(() => {
        holding = false;
        if (!done) subscribe();
      });
    };

    /** Callbacks of a subscription this one replaced (see holdUntilDrained, TOO_MANY_REQUESTS) are ignored. */
    let generation = 0;
    const subscribe = () => {
      const mine = ++generation;
      const current = () => mine === generation && !done;
      sub = o.client.events.subscribe(
        { conversation_id: o.id, after_seq: lastSeq },
        {
          onData: (d) => current() && onEvent(unwrap(d)),
          onConnectionStateChange: (s) => {
            if (!current()) return;
            if (s.state === 'connecting' && s.error && !lost) {
              lost = true;
              o.note(`lost the connection to ${o.failure.url}; reconnecting…`);
              lostTimer = setTimeout(
                () =>
                  finish(
                    new CliFailure(
                      `lost the daemon at ${o.failure.url} for ${RECONNECT_LIMIT_MS / 1000} s while following ${o.id} (last seq ${lastSeq})`,
                      EXIT.unreachable,
                    ),
                  ),
                RECONNECT_LIMIT_MS,
              );
            } else if (s.state === 'pending' && lost) {
              lost = false;
              if (lostTimer) clearTimeout(lostTimer);
              lostTimer = null;
              o.note(`reconnected; resuming after seq ${lastSeq}`);
            }
          },
          onError: (err) => {
            if (!current()) return;
            const data = (err as { data?: { code?: string } }).data;
            if (data?.code === 'TOO_MANY_REQUESTS') {
              // this terminal read too slowly and the daemon ended the stream: resume after what was shown
              o.note(`fell behind the event stream; resuming after seq ${lastSeq}`);
              const old = sub;
              subscribe();
              old?.unsubscribe();
              return;
            }
            if (data?.code === 'NOT_FOUND') return finish(new CliFailure(`conversation ${o.id} was deleted`, EXIT.notFound));
            finish(describeFailure(err, { ...o.failure, conversationId: o.id }));
          },
          onComplete: () => current() && finish(new CliFailure(`the daemon ended the event stream of ${o.id}`, EXIT.refused)),
        },
      );
    };
    subscribe();
    // nothing to wait for: a conversation at rest, already shown up to where it was
    check();
  });
}

/** A tracked event arrives as `{ id: seq, data: event }`, a live-only one as the event itself. */
const unwrap = (d: ParleyStreamItem): ParleyEvent => ('kind' in d ? d : d.data);
