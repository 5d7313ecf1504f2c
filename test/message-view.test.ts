/**
 * The agent's incremental view of a conversation: taking the log a few events at a time gives the
 * same prompt messages as reading it whole (tool results that arrive after their group was closed,
 * parallel calls, notes, system messages), and a condensation or a call answered twice marks the view
 * stale so it is built again from the whole log. Stuck detection, kept as events arrive, finds each
 * pattern however long the run was before it, and a user message starts it over.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { MessageView, eventsToMessages } from '../src/agent/prompt.js';
import { StuckWindow } from '../src/agent/stuck.js';
import type { EventDraft, ParleyEvent } from '../src/events/schema.js';

let seq = 0;
const ev = (draft: EventDraft): ParleyEvent => {
  seq += 1;
  return { ...draft, id: `e${seq}`, seq, timestamp: new Date(1_700_000_000_000 + seq).toISOString() } as ParleyEvent;
};
const user = (text: string) => ev({ kind: 'MessageEvent', source: 'user', llm_message: { role: 'user', content: [{ type: 'text', text }] } });
const action = (call: string, response: string, command: string) =>
  ev({
    kind: 'ActionEvent',
    source: 'agent',
    tool_name: 'think',
    tool_call_id: call,
    llm_response_id: response,
    thought: [],
    action: { kind: 'ThinkAction', thought: command },
    tool_call: { id: call, name: 'think', arguments: JSON.stringify({ thought: command }), origin: 'completion' },
  } as EventDraft);
const observation = (call: string, text: string) =>
  ev({
    kind: 'ObservationEvent',
    source: 'environment',
    tool_name: 'think',
    tool_call_id: call,
    action_id: 'x',
    observation: { kind: 'ThinkObservation', content: [{ type: 'text', text }], is_error: false },
  } as EventDraft);
const state = () => ev({ kind: 'ConversationStateUpdateEvent', source: 'environment', key: 'llm_retry', value: { attempt: 1 } });

function log(): ParleyEvent[] {
  seq = 0;
  return [
    user('first'),
    ev({ kind: 'MessageEvent', source: 'user', llm_message: { role: 'system', content: [{ type: 'text', text: 'a system note' }] } }),
    action('c1', 'r1', 'a'),
    action('c2', 'r1', 'b'), // parallel with c1
    observation('c1', 'A'),
    state(), // closes the group before c2's result arrives
    observation('c2', 'B'),
    ev({ kind: 'AgentErrorEvent', source: 'environment', error: 'a note' }),
    action('c3', 'r2', 'c'),
    user('second'),
    observation('c3', 'C'), // answered after a message closed its group
    ev({ kind: 'MessageEvent', source: 'agent', llm_message: { role: 'assistant', content: [{ type: 'text', text: 'done' }] } }),
    action('c4', 'r3', 'd'), // still open at the end
  ];
}

describe('MessageView', () => {
  test('taken a few events at a time, it gives what the whole log gives', () => {
    const events = log();
    const whole = eventsToMessages(events);
    for (const chunk of [1, 2, 3, 5]) {
      const view = MessageView.of([]);
      for (let i = 0; i < events.length; i += chunk) {
        view.add(events.slice(i, i + chunk));
        // a build in the middle must not change what later builds give
        view.build();
      }
      const built = view.build();
      assert.deepEqual(built.messages, whole.messages, `chunks of ${chunk}`);
      assert.deepEqual(built.systemNotes, whole.systemNotes);
      assert.equal(built.chars, JSON.stringify(whole.messages).length);
      assert.equal(view.stale, false);
    }
  });

  test('a condensation or a second result for one call makes it stale', () => {
    const events = log();
    const view = MessageView.of(events);
    view.add([ev({ kind: 'Condensation', source: 'environment', forgotten_event_ids: ['e1', 'e2'], summary: 'earlier' })]);
    assert.equal(view.stale, true);
    const again = MessageView.of(events);
    again.add([observation('c1', 'A again')]);
    assert.equal(again.stale, true);
    // built from the whole log, the condensation applies
    const condensed = MessageView.of([
      ...events,
      ev({ kind: 'Condensation', source: 'environment', forgotten_event_ids: ['e1', 'e2'], summary: 'earlier' }),
    ]).build();
    assert.match(JSON.stringify(condensed.messages[0]), /earlier/);
  });
});

describe('StuckWindow', () => {
  const err = (call: string, text: string) => ev({ kind: 'AgentErrorEvent', source: 'agent', tool_name: 'think', tool_call_id: call, error: text });
  const agentSays = (text: string) => ev({ kind: 'MessageEvent', source: 'agent', llm_message: { role: 'assistant', content: [{ type: 'text', text }] } });
  /** The verdict after each event, the events taken `chunk` at a time. */
  function verdicts(events: ParleyEvent[], chunk: number, nudged = false) {
    const window = new StuckWindow();
    const out: ReturnType<StuckWindow['verdict']>[] = [];
    for (let i = 0; i < events.length; i += chunk) {
      window.add(events.slice(i, i + chunk));
      out.push(window.verdict(nudged));
    }
    return out;
  }

  test('the same action and result 4 times is stuck, also after 500 different steps', () => {
    seq = 0;
    const events: ParleyEvent[] = [user('go')];
    for (let i = 0; i < 500; i++) events.push(action(`s${i}`, `r${i}`, `step ${i}`), observation(`s${i}`, `out ${i}`));
    for (let i = 0; i < 3; i++) events.push(action(`l${i}`, `rl${i}`, 'same'), observation(`l${i}`, 'same'));
    for (const chunk of [1, 2, 7])
      assert.ok(
        verdicts(events, chunk).every((v) => !v.stuck),
        `chunks of ${chunk}`,
      );
    events.push(action('l3', 'rl3', 'same'), state(), observation('l3', 'same'));
    assert.match(String((verdicts(events, 5).at(-1) as { reason?: string }).reason), /same action \(think\).*4 times/);
    // a user message starts the run over
    events.push(user('try again'), action('l4', 'rl4', 'same'), observation('l4', 'same'));
    assert.deepEqual(verdicts(events, 3).at(-1), { stuck: false });
  });

  test('the same error 3 times: a nudge, then stuck once nudged', () => {
    seq = 0;
    const events: ParleyEvent[] = [user('go')];
    for (let i = 0; i < 300; i++) events.push(action(`s${i}`, `r${i}`, `step ${i}`), observation(`s${i}`, `out ${i}`));
    for (let i = 0; i < 3; i++) events.push(action(`e${i}`, `re${i}`, `try ${i}`), err(`e${i}`, 'boom'));
    assert.match(String((verdicts(events, 4).at(-1) as { nudge?: string }).nudge), /same error/);
    assert.equal(verdicts(events, 4, true).at(-1)!.stuck, true);
  });

  test('A/B alternation six steps long is stuck; three agent messages in a row are stuck', () => {
    seq = 0;
    const events: ParleyEvent[] = [user('go')];
    for (let i = 0; i < 300; i++) events.push(action(`s${i}`, `r${i}`, `step ${i}`), observation(`s${i}`, `out ${i}`));
    for (let i = 0; i < 5; i++) events.push(action(`ab${i}`, `rab${i}`, i % 2 ? 'B' : 'A'), observation(`ab${i}`, i % 2 ? 'b' : 'a'));
    assert.equal(verdicts(events, 3).at(-1)!.stuck, false);
    events.push(action('ab5', 'rab5', 'B'), observation('ab5', 'b'));
    assert.match(String((verdicts(events, 3).at(-1) as { reason?: string }).reason), /alternating/);

    seq = 0;
    const talk: ParleyEvent[] = [user('go'), action('t0', 'r0', 'x'), observation('t0', 'x'), agentSays('one'), agentSays('two')];
    assert.equal(verdicts(talk, 2).at(-1)!.stuck, false);
    talk.push(state(), agentSays('three'));
    assert.match(String((verdicts(talk, 2).at(-1) as { reason?: string }).reason), /3 messages/);
  });
});
