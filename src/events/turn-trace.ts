/**
 * Where a turn's time goes, for `scripts/bench-turn.ts`: the time of each phase of a conversation's
 * turn (its message appended and committed, the run started, the LLM request sent, its answer's first
 * byte and end, each event appended, committed and published), logged as one line when the turn ends
 * (its terminal `execution_status` is published). On only when the daemon logs at `trace`; off, a mark
 * is one test of a module variable, so the call sites stay on the hot path.
 *
 * Times are `performance.timeOrigin + performance.now()`: the wall clock with sub-millisecond
 * resolution, which the benchmark reads the same way in its own process; beside each, the process's
 * CPU time, which a busy machine does not stretch as it stretches the wall clock.
 */

/** A phase, when it happened (ms, the wall clock) and the process's CPU time then (ms, all threads). */
type TraceMark = [phase: string, at: number, cpu: number];

export type TraceSink = (conversationId: string, marks: TraceMark[]) => void;

/** Conversations whose turn never ends (a create without a run) are dropped past this many. */
const MAX_OPEN = 1000;
const ENDS = new Set(['finished', 'error', 'paused', 'stuck', 'waiting_for_confirmation']);

let sink: TraceSink | null = null;
const open = new Map<string, TraceMark[]>();

/** Turns on tracing: each turn's marks go to `out` when it ends. */
export function traceTurns(out: TraceSink | null): void {
  sink = out;
  open.clear();
}

export function tracing(): boolean {
  return sink !== null;
}

/** Records that `phase` of the conversation's turn happened now. */
export function mark(conversationId: string, phase: string): void {
  if (sink === null) return;
  let marks = open.get(conversationId);
  if (!marks) {
    if (open.size >= MAX_OPEN) open.delete(open.keys().next().value!);
    open.set(conversationId, (marks = []));
  }
  const cpu = process.cpuUsage();
  marks.push([phase, performance.timeOrigin + performance.now(), (cpu.user + cpu.system) / 1000]);
}

/** An event was published: a terminal status ends the turn, whose marks go to the sink. */
export function published(conversationId: string, event: { kind: string }): void {
  if (sink === null) return;
  const { kind, key, value } = event as { kind: string; key?: unknown; value?: unknown };
  mark(conversationId, kind === 'ConversationStateUpdateEvent' ? `published ${String(key)}=${String(value)}` : `published ${kind}`);
  if (kind !== 'ConversationStateUpdateEvent' || key !== 'execution_status' || !ENDS.has(value as string)) return;
  const marks = open.get(conversationId)!;
  open.delete(conversationId);
  sink(conversationId, marks);
}
