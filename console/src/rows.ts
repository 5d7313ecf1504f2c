/**
 * Events → the rows of the conversation page. One row per event, except the answers to a tool
 * call (ObservationEvent, UserRejectObservation, an AgentErrorEvent naming the call), which are
 * shown inside the row of their ActionEvent. Built incrementally: an event costs O(1).
 */
import type { ParleyEvent } from './api.js';

export type ActionEventT = Extract<ParleyEvent, { kind: 'ActionEvent' }>;
export type ResultEventT = Extract<ParleyEvent, { kind: 'ObservationEvent' | 'UserRejectObservation' | 'AgentErrorEvent' }>;

export interface Row {
  event: ParleyEvent;
  /** The answer to an ActionEvent's call, once it came. */
  result?: ResultEventT;
  /** Bumped when the row changes (its result came): the row component renders again. */
  version: number;
}

export class Rows {
  readonly list: Row[] = [];
  /** Answers to tool calls so far: a file may have changed with each. */
  results = 0;
  private readonly byAction = new Map<string, Row>();
  private readonly byCall = new Map<string, Row>();

  add(events: ParleyEvent[]): void {
    for (const ev of events) this.addOne(ev);
  }

  private addOne(ev: ParleyEvent): void {
    let owner: Row | undefined;
    if (ev.kind === 'ObservationEvent' || ev.kind === 'UserRejectObservation') owner = this.byAction.get(ev.action_id) ?? this.byCall.get(ev.tool_call_id);
    else if (ev.kind === 'AgentErrorEvent' && ev.tool_call_id) owner = this.byCall.get(ev.tool_call_id);
    if (owner && !owner.result) {
      owner.result = ev as ResultEventT;
      owner.version += 1;
      this.results += 1;
      return;
    }
    const row: Row = { event: ev, version: 0 };
    this.list.push(row);
    if (ev.kind === 'ActionEvent') {
      this.byAction.set(ev.id, row);
      this.byCall.set(ev.tool_call_id, row);
    }
  }

  /** Action rows without an answer after the last one that has one: what waits for confirmation. */
  pendingActions(): Row[] {
    const out: Row[] = [];
    for (let i = this.list.length - 1; i >= 0; i--) {
      const row = this.list[i]!;
      if (row.event.kind !== 'ActionEvent') continue;
      if (row.result) break;
      out.unshift(row);
    }
    return out;
  }
}
