/**
 * What the run loop writes besides a step: the condensation of an older half of the history into a
 * summary, the answers an interrupt leaves for the tool calls it cut short, and the actions still
 * waiting for confirmation.
 */
import type { EventLog } from '../events/log.js';
import type { EventOf, ExecutionStatus, ParleyEvent } from '../events/schema.js';
import type { EventDraft } from '../events/types.js';
import type { LlmClient } from '../llm/types.js';
import { eventsToMessages } from './prompt.js';

/** The tool calls answered in `events` (an observation, an error, a rejection). */
function answeredCalls(events: ParleyEvent[]): Set<string> {
  const answered = new Set<string>();
  for (const e of events)
    if ((e.kind === 'ObservationEvent' || e.kind === 'AgentErrorEvent' || e.kind === 'UserRejectObservation') && e.tool_call_id) answered.add(e.tool_call_id);
  return answered;
}

/** Tool calls recorded with a runnable action and not answered yet (waiting for confirmation). */
export async function pendingActions(events: Pick<EventLog, 'after'>, id: string): Promise<EventOf<'ActionEvent'>[]> {
  const all = await events.after(id);
  const answered = answeredCalls(all);
  return all.filter((e): e is EventOf<'ActionEvent'> => e.kind === 'ActionEvent' && e.action !== null && !answered.has(e.tool_call_id));
}

/** After an interrupt: every tool call left without a result gets an AgentErrorEvent; then InterruptEvent, status paused. */
export async function recordInterrupt(
  eventLog: Pick<EventLog, 'after' | 'append'>,
  conversations: { setStatus(id: string, status: ExecutionStatus, along?: EventDraft[]): Promise<void> },
  id: string,
): Promise<void> {
  const events = await eventLog.after(id);
  const answered = answeredCalls(events);
  for (const a of events) {
    if (a.kind === 'ActionEvent' && !answered.has(a.tool_call_id)) {
      await eventLog.append(id, {
        kind: 'AgentErrorEvent',
        source: 'agent',
        tool_name: a.tool_name,
        tool_call_id: a.tool_call_id,
        error: 'Tool call interrupted before completion. The conversation was paused.',
      });
    }
  }
  await eventLog.append(id, { kind: 'InterruptEvent', source: 'user' });
  await conversations.setStatus(id, 'paused');
}

/** Summarise the older half of the history into a Condensation event. False when nothing can be condensed. */
export async function condenseHistory(
  eventLog: Pick<EventLog, 'append'>,
  id: string,
  llm: LlmClient,
  events: ParleyEvent[],
  signal: AbortSignal,
): Promise<boolean> {
  let previous: EventOf<'Condensation'> | undefined;
  for (const e of events) if (e.kind === 'Condensation') previous = e;
  const already = new Set(previous?.forgotten_event_ids ?? []);
  const candidates = events.filter(
    (e) => !already.has(e.id) && e.kind !== 'SystemPromptEvent' && e.kind !== 'Condensation' && e.kind !== 'ConversationStateUpdateEvent',
  );
  if (candidates.length < 4) return false;
  let cut = Math.floor(candidates.length / 2);
  // never split an action from its result: move the cut past any ObservationEvent
  const answersACall = (e: ParleyEvent) =>
    e.kind === 'ObservationEvent' || e.kind === 'UserRejectObservation' || (e.kind === 'AgentErrorEvent' && !!e.tool_call_id);
  while (cut < candidates.length && answersACall(candidates[cut]!)) cut++;
  const forget = candidates.slice(0, cut);
  const { messages } = eventsToMessages([...(previous ? [previous] : []), ...forget]);
  const transcript = JSON.stringify(messages).slice(0, Math.floor(llm.contextWindow * 2));
  const res = await llm.complete({
    system:
      'You summarise the history of a coding agent session. Keep: the user goals and requirements, decisions made, files changed, ' +
      'commands run and their important results, and what remains to do. Be concise and factual.',
    messages: [{ role: 'user', content: [{ type: 'text', text: `Summarise this session history:\n${transcript}` }] }],
    tools: [],
    signal,
  });
  await eventLog.append(id, {
    kind: 'Condensation',
    source: 'environment',
    forgotten_event_ids: [...already, ...forget.map((e) => e.id)],
    summary: res.text,
  });
  return true;
}
