/** Stuck detection over the events of the current run (since the last user message). */
import type { EventOf, ParleyEvent } from '../events/schema.js';

type StuckVerdict = { stuck: false; nudge?: string } | { stuck: true; reason: string };

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

type Step = { a: ActionEv; r: ResultEv | undefined };

/** The verdict on a run's steps (oldest first; only the last six matter) and the agent messages at its end. */
function judge(steps: Step[], agentMessages: number, nudged: boolean): StuckVerdict {
  const keyed = steps.slice(-6).map((s) => ({ ...s, key: `${actionKey(s.a)}→${resultKey(s.r)}` }));
  // the same action with the same observation 4 times in a row
  if (keyed.length >= 4) {
    const last4 = keyed.slice(-4);
    if (last4.every((s) => s.key === last4[0]!.key) && !last4.some((s) => isPolling(s.a, s.r))) {
      return { stuck: true, reason: `The same action (${last4[0]!.a.tool_name}) produced the same result 4 times in a row.` };
    }
  }
  // the same error 3 times in a row: nudge once, then stuck
  if (keyed.length >= 3) {
    const last3 = keyed.slice(-3);
    const k = resultKey(last3[0]!.r);
    if (last3.every((s) => resultKey(s.r) === k && isError(s.r))) {
      if (nudged) return { stuck: true, reason: 'The same error occurred 3 times in a row, even after a hint to change approach.' };
      return { stuck: false, nudge: 'The same error has occurred 3 times in a row. Stop repeating that call: read the error, then try a different approach.' };
    }
  }
  // A/B alternation six steps long
  if (keyed.length >= 6) {
    const k = keyed.map((s) => s.key);
    if (k[0] !== k[1] && k[0] === k[2] && k[2] === k[4] && k[1] === k[3] && k[3] === k[5]) {
      return { stuck: true, reason: 'The agent is alternating between the same two actions with the same results.' };
    }
  }
  // three agent messages in a row with no user input
  if (agentMessages >= 3) return { stuck: true, reason: 'The agent sent 3 messages in a row without user input.' };
  return { stuck: false };
}

/**
 * What stuck detection looks at, kept as events are appended: the last six steps of the current run
 * (since the newest user message) with their results, and the agent messages at its end. Taking an
 * event costs the same at any length of the log.
 */
export class StuckWindow {
  private static readonly STEPS = 6;
  /** Results of the run's recent tool calls, by call id (bounded: an old call is no longer among the last steps). */
  private static readonly RESULTS = 256;
  private steps: Step[] = [];
  private results = new Map<string, ResultEv>();
  private agentMessages = 0;

  add(events: ParleyEvent[]): void {
    for (const e of events) {
      if (e.kind === 'MessageEvent') {
        if (e.source === 'user') {
          this.steps = [];
          this.results = new Map();
        }
        this.agentMessages = e.source === 'agent' ? this.agentMessages + 1 : 0;
      } else if (e.kind === 'ActionEvent') {
        this.agentMessages = 0;
        this.steps.push({ a: e, r: this.results.get(e.tool_call_id) });
        if (this.steps.length > StuckWindow.STEPS) this.steps.shift();
      } else if ((e.kind === 'ObservationEvent' || e.kind === 'AgentErrorEvent') && e.tool_call_id) {
        this.results.delete(e.tool_call_id); // re-inserted: the newest result of a call counts
        this.results.set(e.tool_call_id, e);
        if (this.results.size > StuckWindow.RESULTS) this.results.delete(this.results.keys().next().value!);
        for (const s of this.steps) if (s.a.tool_call_id === e.tool_call_id) s.r = e;
      }
    }
  }

  verdict(nudged: boolean): StuckVerdict {
    return judge(this.steps, this.agentMessages, nudged);
  }
}
