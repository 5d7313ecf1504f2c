/** Stuck detection over the events of the current run (since the last user message). */
import type { ParleyEvent } from '../events/types.js';

export type StuckVerdict = { stuck: false; nudge?: string } | { stuck: true; reason: string };

const actionKey = (a: ParleyEvent) => `${a.tool_name}:${JSON.stringify(a.action ?? null)}`;
function resultKey(r: ParleyEvent | undefined): string {
  if (!r) return 'none';
  if (r.kind === 'AgentErrorEvent') return `error:${String(r.error)}`;
  const o = r.observation as { content?: { text?: string }[]; exit_code?: number; is_error?: boolean } | undefined;
  return `obs:${o?.is_error}:${o?.exit_code}:${(o?.content ?? []).map((c) => c.text ?? '').join('')}`;
}
/** A terminal command still running (exit_code -1) or an empty "keep waiting" command is polling, not looping. */
function isPolling(a: ParleyEvent, r: ParleyEvent | undefined): boolean {
  if (a.tool_name !== 'terminal') return false;
  const act = a.action as { command?: string } | undefined;
  const obs = r?.observation as { exit_code?: number } | undefined;
  return act?.command === '' || obs?.exit_code === -1;
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
  const results = new Map<string, ParleyEvent>();
  for (const e of run) if ((e.kind === 'ObservationEvent' || e.kind === 'AgentErrorEvent') && e.tool_call_id) results.set(String(e.tool_call_id), e);
  const steps = run
    .filter((e) => e.kind === 'ActionEvent')
    .map((a) => ({ a, r: results.get(String(a.tool_call_id)), key: `${actionKey(a)}→${resultKey(results.get(String(a.tool_call_id)))}` }));

  // the same action with the same observation 4 times in a row
  if (steps.length >= 4) {
    const last4 = steps.slice(-4);
    if (last4.every((s) => s.key === last4[0]!.key) && !last4.some((s) => isPolling(s.a, s.r))) {
      return { stuck: true, reason: `The same action (${last4[0]!.a.tool_name}) produced the same result 4 times in a row.` };
    }
  }
  // the same error 3 times: nudge once, then stuck
  const errors = steps.filter((s) => s.r?.kind === 'AgentErrorEvent' || (s.r?.observation as { is_error?: boolean } | undefined)?.is_error);
  if (errors.length >= 3) {
    const last3 = steps.slice(-3);
    const k = resultKey(last3[0]!.r);
    if (last3.every((s) => resultKey(s.r) === k && (s.r?.kind === 'AgentErrorEvent' || (s.r?.observation as { is_error?: boolean })?.is_error))) {
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
