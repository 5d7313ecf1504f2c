/**
 * The turn trace (src/events/turn-trace.ts) that scripts/bench-turn.ts reads: with LOG_LEVEL=trace a
 * daemon logs, when a turn ends, one line with the turn's phases in the order they happened (the user's
 * message appended and published, the run started, the LLM request built and sent, the answer read,
 * the events committed and published); at any other level it logs none. A real daemon and the
 * scripted LLM over HTTP.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { startDaemon, waitFor, type DaemonHandle } from './support/daemon.js';
import { startScriptedLlm, type ScriptedLlm } from './support/scripted-llm.js';

let llm: ScriptedLlm;
before(async () => {
  llm = await startScriptedLlm();
});
after(() => llm?.close());

/** One text turn in a new conversation; resolves once it finished. */
async function turn(d: DaemonHandle): Promise<string> {
  const id = (await d.req('POST', '/api/conversations', {})).body.conversation_id as string;
  llm.push({ text: 'hello' });
  assert.equal((await d.req('POST', `/api/conversations/${id}/events`, { content: [{ type: 'text', text: 'say hello' }], run: true })).status, 200);
  await waitFor(async () => (await d.req('GET', `/api/conversations/${id}`)).body.execution_status === 'finished', 'the turn finished', 30_000);
  return id;
}

const traceLines = (d: DaemonHandle, id: string) => d.output.filter((l) => l.includes('"turn trace"') && l.includes(id));

describe('the turn trace', () => {
  test('LOG_LEVEL=trace: one line per turn, its phases in order, times and CPU never going back', async (t) => {
    const d = await startDaemon({ LLM_MODEL: 'openai/scripted', LLM_BASE_URL: llm.url, LLM_API_KEY: 'k', LOG_LEVEL: 'trace', SANDBOX: 'none' });
    t.after(() => d.stop());
    const id = await turn(d);
    const line = await waitFor(() => traceLines(d, id)[0], 'the turn trace line');
    const marks = (JSON.parse(line) as { marks: [string, number, number][] }).marks;
    const names = marks.map((m) => m[0]);
    const order = [
      'append MessageEvent',
      'published MessageEvent',
      'run started',
      'run set up',
      'prompt built',
      'LLM request body built',
      'LLM answer headers',
      'LLM answer ended',
      'LLM answered',
      'published execution_status=finished',
    ];
    let at = -1;
    for (const name of order) {
      const i = names.indexOf(name, at + 1);
      assert.ok(i > at, `${name} after the phases before it in ${names.join(', ')}`);
      at = i;
    }
    assert.equal(names[names.length - 1], 'published execution_status=finished', 'the line is written when the turn ends');
    for (let i = 1; i < marks.length; i++) {
      assert.ok(marks[i]![1] >= marks[i - 1]![1], `the wall clock goes on at ${marks[i]![0]}`);
      assert.ok(marks[i]![2] >= marks[i - 1]![2], `the CPU time goes on at ${marks[i]![0]}`);
    }
    // the next turn of the same conversation is a line of its own
    llm.push({ text: 'again' });
    await d.req('POST', `/api/conversations/${id}/events`, { content: [{ type: 'text', text: 'once more' }], run: true });
    await waitFor(() => traceLines(d, id).length === 2, 'a second line for the second turn');
    const second = (JSON.parse(traceLines(d, id)[1]!) as { marks: [string, number, number][] }).marks;
    assert.ok(second[0]![1] > marks[marks.length - 1]![1], 'the second line holds only the second turn');
  });

  test('at any other level no turn is traced', async (t) => {
    const d = await startDaemon({ LLM_MODEL: 'openai/scripted', LLM_BASE_URL: llm.url, LLM_API_KEY: 'k', LOG_LEVEL: 'debug', SANDBOX: 'none' });
    t.after(() => d.stop());
    const id = await turn(d);
    // the log is written in order: a line logged after the turn ended (a later conversation's preparation)
    // comes after a trace line the turn's end would have written
    const later = (await d.req('POST', '/api/conversations', {})).body.conversation_id as string;
    await waitFor(() => d.output.some((l) => l.includes('workspace preparation ended') && l.includes(later)), 'a line logged after the turn');
    assert.deepEqual(traceLines(d, id), []);
    assert.ok(!d.output.some((l) => l.includes('"turn trace"')));
  });
});
