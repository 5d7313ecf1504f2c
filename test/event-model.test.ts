/**
 * The event model: everything the daemon writes during a run with every built-in tool is an
 * `Event` of the zod union (OpenHands' shape: typed `action.kind`, `tool_call.origin`, tool
 * definitions in the SystemPromptEvent), and a log written in 0.1.0's shape still reads and
 * still continues.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { after, before, describe, test } from 'node:test';
import type { ActionEvent as OpenHandsActionEvent, SystemPromptEvent as OpenHandsSystemPromptEvent } from '@openhands/typescript-client';
import { Event, type EventOf } from '../src/events/schema.js';
import { SqliteStore } from '../src/store/sqlite.js';
import { startDaemon, tempDir, waitFor, type DaemonHandle } from './support/daemon.js';
import { startScriptedLlm, type ScriptedLlm } from './support/scripted-llm.js';

// compile-time: our events are what @openhands/typescript-client's types expect
const _action = (e: EventOf<'ActionEvent'>): Pick<OpenHandsActionEvent, 'kind' | 'tool_call' | 'tool_name' | 'tool_call_id' | 'llm_response_id'> => e;
const _prompt = (
  e: EventOf<'SystemPromptEvent'>,
): Pick<OpenHandsSystemPromptEvent, 'kind'> & { tools: { kind: string; name: string; description: string; parameters: Record<string, unknown> }[] } => e;
void _action;
void _prompt;

let llm: ScriptedLlm;
const daemons: DaemonHandle[] = [];
before(async () => {
  llm = await startScriptedLlm();
});
after(async () => {
  for (const d of daemons) {
    await d.stop();
    fs.rmSync(d.dataDir, { recursive: true, force: true });
  }
  await llm.close();
});

async function daemon(dataDir?: string): Promise<DaemonHandle> {
  const d = await startDaemon({ LLM_MODEL: 'openai/scripted', LLM_BASE_URL: llm.url, LLM_API_KEY: 'k', MAX_ITERATIONS: '20' }, dataDir);
  daemons.push(d);
  return d;
}

async function allEvents(d: DaemonHandle, id: string): Promise<any[]> {
  const out: any[] = [];
  let page: string | null = null;
  do {
    const r = await d.req('GET', `/api/conversations/${id}/events/search?limit=100${page ? `&page_id=${page}` : ''}`);
    assert.equal(r.status, 200, r.text);
    out.push(...r.body.items);
    page = r.body.next_page_id;
  } while (page);
  return out;
}

const status = async (d: DaemonHandle, id: string) => (await d.req('GET', `/api/conversations/${id}`)).body.execution_status as string;

describe('the event model', () => {
  test('a run with every built-in tool writes only events of the union, with typed actions and tool definitions', async () => {
    const d = await daemon();
    const r = await d.req('POST', '/api/conversations', {});
    const id = r.body.conversation_id as string;
    const ws = `${d.dataDir}/workspaces/${id.replace(/-/g, '')}`;
    llm.push(
      {
        text: 'Planning.',
        toolCalls: [
          { name: 'task_tracker', arguments: { command: 'plan', task_list: [{ id: '1', title: 'write', status: 'in_progress' }] } },
          { name: 'think', arguments: { thought: 'a file, then check it' } },
        ],
      },
      { toolCalls: [{ name: 'file_editor', arguments: { command: 'create', path: `${ws}/a.txt`, file_text: 'hello\n' } }] },
      { toolCalls: [{ name: 'terminal', arguments: { command: 'cat a.txt' } }] },
      {
        toolCalls: [
          { name: 'no_such_tool', arguments: { x: 1 } },
          { name: 'terminal', arguments: '{"command": ' },
          { name: 'file_editor', arguments: { command: 'fly' } },
        ],
      },
      { toolCalls: [{ name: 'finish', arguments: { message: 'done' } }] },
    );
    await d.req('POST', `/api/conversations/${id}/events`, { content: [{ text: 'go' }], run: true });
    await waitFor(async () => (await status(d, id)) === 'finished', 'finished', 30_000);
    const evs = await allEvents(d, id);
    for (const e of evs) {
      const parsed = Event.safeParse(e);
      assert.ok(parsed.success, `${e.kind} does not fit the model: ${parsed.success ? '' : parsed.error.message}\n${JSON.stringify(e)}`);
    }

    const actions = evs.filter((e) => e.kind === 'ActionEvent');
    assert.deepEqual(
      actions.map((a) => [a.tool_name, a.action?.kind ?? null]),
      [
        ['task_tracker', 'TaskTrackerAction'],
        ['think', 'ThinkAction'],
        ['file_editor', 'FileEditorAction'],
        ['terminal', 'TerminalAction'],
        ['no_such_tool', null],
        ['terminal', null],
        ['file_editor', null],
        ['finish', 'FinishAction'],
      ],
    );
    assert.equal(actions[3].action.command, 'cat a.txt');
    assert.equal(actions[3].action.is_input, false, 'the action holds the validated arguments, defaults included');
    for (const a of actions) {
      assert.equal(a.tool_call.origin, 'completion');
      assert.equal(a.tool_call.id, a.tool_call_id);
      assert.equal(typeof a.tool_call.arguments, 'string');
    }
    assert.equal(actions[5].tool_call.arguments, '{"command": ', 'arguments are kept as the model sent them');
    const errors = evs.filter((e) => e.kind === 'AgentErrorEvent').map((e) => e.tool_call_id);
    assert.deepEqual(
      errors,
      actions.slice(4, 7).map((a) => a.tool_call_id),
      'each unusable call is answered by an error',
    );

    const observations = evs.filter((e) => e.kind === 'ObservationEvent').map((e) => e.observation.kind);
    assert.deepEqual(observations, ['TaskTrackerObservation', 'ThinkObservation', 'FileEditorObservation', 'TerminalObservation', 'FinishObservation']);

    const prompt = evs.find((e) => e.kind === 'SystemPromptEvent');
    const terminal = prompt.tools.find((t: any) => t.name === 'terminal');
    assert.equal(terminal.kind, 'TerminalTool');
    assert.equal(terminal.action_type, 'TerminalAction');
    assert.match(terminal.description, /bash/i);
    assert.equal(terminal.parameters.type, 'object');
    assert.ok(terminal.parameters.properties.command);
    assert.deepEqual(prompt.tools.map((t: any) => t.kind).sort(), ['FileEditorTool', 'FinishTool', 'TaskTrackerTool', 'TerminalTool', 'ThinkTool']);

    // the prompt gives the LLM its calls back as it sent them
    const last = llm.requests[llm.requests.length - 1]!.body.messages as any[];
    const calls = last.flatMap((m) => m.tool_calls ?? []);
    const cat = calls.find((c: any) => c.function.arguments.includes('cat a.txt'));
    assert.deepEqual(JSON.parse(cat.function.arguments), { command: 'cat a.txt' });
  });

  test("a log written in 0.1.0 shape reads in today's shape and the conversation continues from it", async () => {
    const dir = tempDir();
    const id = '0190f1e2-0000-7000-8000-000000000001';
    const store = new SqliteStore(dir);
    const now = new Date().toISOString();
    await store.createConversation({ id, title: 'old', created_at: now, updated_at: now, execution_status: 'finished', data: { setup: { phase: 'ready' } } });
    // exactly the shapes 0.1.0 wrote: bare arguments as `action`, `tool_call.input`, tool names in the system prompt
    const old = [
      { kind: 'MessageEvent', source: 'user', llm_message: { role: 'user', content: [{ type: 'text', text: 'count files', cache_prompt: false }] } },
      {
        kind: 'SystemPromptEvent',
        source: 'agent',
        system_prompt: { type: 'text', text: 'old prompt' },
        tools: ['terminal', 'file_editor', 'finish', 'lookup_fetch'],
      },
      {
        kind: 'ActionEvent',
        source: 'agent',
        tool_name: 'terminal',
        tool_call_id: 'call_1',
        llm_response_id: 'r1',
        thought: [],
        action: { command: 'ls | wc -l', is_input: false, reset: false },
        tool_call: { id: 'call_1', name: 'terminal', arguments: '{"command":"ls | wc -l"}', input: { command: 'ls | wc -l' } },
      },
      {
        kind: 'ObservationEvent',
        source: 'environment',
        tool_name: 'terminal',
        tool_call_id: 'call_1',
        action_id: 'x',
        observation: {
          kind: 'TerminalObservation',
          content: [{ type: 'text', text: 'OLD-RESULT 7' }],
          is_error: false,
          command: 'ls | wc -l',
          exit_code: 0,
          working_dir: '/w',
          timeout: false,
        },
      },
      {
        kind: 'ActionEvent',
        source: 'agent',
        tool_name: 'lookup_fetch',
        tool_call_id: 'call_2',
        llm_response_id: 'r2',
        thought: [],
        action: { url: 'http://x' },
        tool_call: { id: 'call_2', name: 'lookup_fetch', arguments: '{"url":"http://x"}', input: { url: 'http://x' } },
      },
      { kind: 'AgentErrorEvent', source: 'agent', tool_name: 'lookup_fetch', tool_call_id: 'call_2', error: 'server gone' },
      {
        kind: 'ActionEvent',
        source: 'agent',
        tool_name: 'terminal',
        tool_call_id: 'call_3',
        llm_response_id: 'r3',
        thought: [],
        action: null,
        tool_call: { id: 'call_3', name: 'terminal', arguments: '{bad', input: { invalid_arguments: '{bad' } },
      },
      { kind: 'AgentErrorEvent', source: 'agent', tool_name: 'terminal', tool_call_id: 'call_3', error: 'not JSON' },
    ] as unknown as Parameters<SqliteStore['appendMany']>[1];
    await store.appendMany(id, old);
    await store.close();

    const d = await daemon(dir);
    const evs = await allEvents(d, id);
    for (const e of evs) assert.ok(Event.safeParse(e).success, `${e.kind} reads in today's shape: ${JSON.stringify(e)}`);
    const actions = evs.filter((e) => e.kind === 'ActionEvent');
    assert.deepEqual(actions[0].action, { kind: 'TerminalAction', command: 'ls | wc -l', is_input: false, reset: false });
    assert.deepEqual(actions[0].tool_call, { id: 'call_1', name: 'terminal', arguments: '{"command":"ls | wc -l"}', origin: 'completion' });
    assert.deepEqual(actions[1].action, { kind: 'MCPToolAction', data: { url: 'http://x' } });
    assert.equal(actions[2].action, null);
    const prompt = evs.find((e) => e.kind === 'SystemPromptEvent');
    assert.deepEqual(
      prompt.tools.map((t: any) => [t.name, t.kind]),
      [
        ['terminal', 'TerminalTool'],
        ['file_editor', 'FileEditorTool'],
        ['finish', 'FinishTool'],
        ['lookup_fetch', 'MCPToolDefinition'],
      ],
    );
    const one = await d.req('GET', `/api/conversations/${id}/events/${actions[0].id}`);
    assert.equal(one.body.action.kind, 'TerminalAction', 'a single event reads upgraded too');

    // the agent continues: its prompt holds the old calls with their arguments and results
    const before = llm.requests.length;
    llm.push({ text: 'Seven files.' });
    await d.req('POST', `/api/conversations/${id}/events`, { content: [{ text: 'and now?' }], run: true });
    await waitFor(async () => (await status(d, id)) === 'finished', 'finished', 20_000);
    const messages = llm.requests[before]!.body.messages as any[];
    const calls = messages.flatMap((m) => m.tool_calls ?? []);
    assert.deepEqual(
      calls.map((c: any) => [c.id, c.function.name, c.function.arguments]),
      [
        ['call_1', 'terminal', '{"command":"ls | wc -l"}'],
        ['call_2', 'lookup_fetch', '{"url":"http://x"}'],
        ['call_3', 'terminal', '{"invalid_arguments":"{bad"}'],
      ],
    );
    const results = messages.filter((m) => m.role === 'tool').map((m) => String(m.content));
    assert.match(results[0]!, /OLD-RESULT 7/);
    assert.match(results[1]!, /server gone/);
  });
});
