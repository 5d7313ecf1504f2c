/** Stuck detection over the events of the current run (since the last user message). */
import type { EventOf, ParleyEvent } from '../events/schema.js';

export type StuckVerdict = { stuck: false; nudge?: string } | { stuck: true; reason: string };

type ActionEv = EventOf<'ActionEvent'>;
type ResultEv = EventOf<'ObservationEvent'> | EventOf<'AgentErrorEvent'>;

const actionKey = (a: ActionEv) => `${a.tool_name}:${a.action ? JSON.stringify(a.action) : a.tool_call.arguments}`;
function resultKey(r: ResultEv | undefined): string {
  if (!r) return 'none';
  if (r.kind === 'AgentErrorEvent') return `error:${r.error}`;
  const o = r.observation;
  const exit = o.kind === 'TerminalObservation' ? o.exit_code : undefined;
  return `obs:${o.is_error}:${exit}:${o.content.map((c) => (c.type === 'text' ? c.text : '')).join('')}`;
}
const isError = (r: ResultEv | undefined) => r?.kind === 'AgentErrorEvent' || (r?.kind === 'ObservationEvent' && r.observation.is_error);
/** A terminal command still running (exit_code -1) or an empty "keep waiting" command is polling, not looping. */
function isPolling(a: ActionEv, r: ResultEv | undefined): boolean {
  if (a.action?.kind !== 'TerminalAction') return false;
  return a.action.command === '' || (r?.kind === 'ObservationEvent' && r.observation.kind === 'TerminalObservation' && r.observation.exit_code === -1);
}

export function detectStuck(events: ParleyEvent[], nudged: boolean): StuckVerdict {
  let start = 0;
  for (let i = events.length - 1; i >= 0; i--) {
    const e = events[i]!;
    if (e.kind === 'MessageEvent' && e.source === 'user') {
      start = i + 1;
      break;
    }
  }
  const run = events.slice(start);
  const results = new Map<string, ResultEv>();
  for (const e of run) if ((e.kind === 'ObservationEvent' || e.kind === 'AgentErrorEvent') && e.tool_call_id) results.set(e.tool_call_id, e);
  const steps = run
    .filter((e): e is ActionEv => e.kind === 'ActionEvent')
    .map((a) => {
      const r = results.get(a.tool_call_id);
      return { a, r, key: `${actionKey(a)}→${resultKey(r)}` };
    });

  // the same action with the same observation 4 times in a row
  if (steps.length >= 4) {
    const last4 = steps.slice(-4);
    if (last4.every((s) => s.key === last4[0]!.key) && !last4.some((s) => isPolling(s.a, s.r))) {
      return { stuck: true, reason: `The same action (${last4[0]!.a.tool_name}) produced the same result 4 times in a row.` };
    }
  }
  // the same error 3 times: nudge once, then stuck
  const errors = steps.filter((s) => isError(s.r));
  if (errors.length >= 3) {
    const last3 = steps.slice(-3);
    const k = resultKey(last3[0]!.r);
    if (last3.every((s) => resultKey(s.r) === k && isError(s.r))) {
      if (nudged) return { stuck: true, reason: 'The same error occurred 3 times in a row, even after a hint to change approach.' };
      return { stuck: false, nudge: 'The same error has occurred 3 times in a row. Stop repeating that call: read the error, then try a different approach.' };
    }
  }
  // A/B alternation six steps long
  if (steps.length >= 6) {
    const k = steps.slice(-6).map((s) => s.key);
    if (k[0] !== k[1] && k[0] === k[2] && k[2] === k[4] && k[1] === k[3] && k[3] === k[5]) {
      return { stuck: true, reason: 'The agent is alternating between the same two actions with the same results.' };
    }
  }
  // three agent messages in a row with no user input
  let agentMessages = 0;
  for (let i = events.length - 1; i >= 0; i--) {
    const e = events[i]!;
    if (e.kind === 'MessageEvent') {
      if (e.source === 'agent') agentMessages += 1;
      else break;
    } else if (e.kind === 'ActionEvent') break;
  }
  if (agentMessages >= 3) return { stuck: true, reason: 'The agent sent 3 messages in a row without user input.' };
  return { stuck: false };
}

/**
 * The events stuck detection looks at, kept as they are appended: those after the newest user
 * message, at most the last `MAX` (the checks read the last six steps and the messages at the end).
 */
export class StuckWindow {
  private static readonly MAX = 400;
  private events: ParleyEvent[] = [];

  add(events: ParleyEvent[]): void {
    for (const e of events) {
      if (e.kind === 'MessageEvent' && e.source === 'user') this.events = [];
      else this.events.push(e);
    }
    if (this.events.length > StuckWindow.MAX) this.events = this.events.slice(-StuckWindow.MAX / 2);
  }

  verdict(nudged: boolean): StuckVerdict {
    return detectStuck(this.events, nudged);
  }
}
