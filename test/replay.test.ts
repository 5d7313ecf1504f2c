/**
 * `replay_json` through the real daemon: a recorded trajectory (this service's events, or an
 * OpenHands trajectory) is executed again in the new workspace without calling the LLM, then the
 * conversation continues normally. Plus the parser's checks (422 with the item index).
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { mapReplayCommand, mapReplayPath, parseReplay } from '../src/conversation/replay.js';
import { startDaemon, waitFor, type DaemonHandle } from './support/daemon.js';
import { startScriptedLlm, type ScriptedLlm } from './support/scripted-llm.js';

let d: DaemonHandle;
let llm: ScriptedLlm;

before(async () => {
  llm = await startScriptedLlm();
  d = await startDaemon({ LLM_MODEL: 'openai/scripted', LLM_BASE_URL: llm.url, LLM_API_KEY: 'sk-replay', MAX_ITERATIONS: '8' });
});
after(async () => {
  await d?.stop();
  await llm?.close();
});

const events = async (id: string) => (await d.req('GET', `/api/conversations/${id}/events/search?limit=100`)).body.items as any[];
const info = async (id: string) => (await d.req('GET', `/api/conversations/${id}`)).body;
const waitStatus = (id: string, want: string, ms = 90_000) => waitFor(async () => (await info(id)).execution_status === want, `status ${want}`, ms);
const waitReady = (id: string) => waitFor(async () => ['ready', 'error'].includes((await info(id)).setup?.phase), 'preparation done', 30_000);
const workspace = (id: string) => path.join(d.dataDir, 'workspaces', id.replace(/-/g, ''));
/** Where the agent's processes see the workspace: /workspace when sandboxed (replayed paths are mapped there). */
const seenWorkspace = async (id: string) => ((await d.req('GET', '/server_info')).body.sandbox?.mode === 'bwrap' ? '/workspace' : workspace(id));
const textOf = (ev: any) => ev.llm_message.content.map((c: any) => c.text ?? '').join('');
const obsText = (ev: any) => ev.observation.content.map((c: any) => c.text ?? '').join('');

async function replay(items: unknown): Promise<string> {
  const r = await d.req('POST', '/api/conversations', { replay_json: typeof items === 'string' ? items : JSON.stringify(items) });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.body.conversation_status, 'RUNNING');
  return r.body.conversation_id;
}

/** Each action followed by its own new observation. */
function pairs(evs: any[]) {
  const actions = evs.filter((e) => e.kind === 'ActionEvent');
  return actions.map((a) => {
    const o = evs.find((e) => (e.kind === 'ObservationEvent' || e.kind === 'AgentErrorEvent') && e.tool_call_id === a.tool_call_id);
    assert.ok(o, `result for ${a.tool_name}`);
    assert.ok(o.seq > a.seq);
    if (o.kind === 'ObservationEvent') assert.equal(o.action_id, a.id);
    return { a, o };
  });
}

describe("replaying this service's own events", () => {
  test('a recorded conversation runs again in a new workspace, without the LLM, then continues normally', async () => {
    // record: a real conversation driven by the scripted LLM
    // created without a message: the script below needs its workspace, and a run must not ask the LLM before it is pushed
    const r = await d.req('POST', '/api/conversations', {});
    const src = r.body.conversation_id;
    const srcWs = workspace(src);
    // a value only this run can print (a sandboxed shell sees every workspace as /workspace)
    llm.push(
      {
        text: 'Making files.',
        toolCalls: [
          {
            name: 'terminal',
            arguments: { command: `echo "made $(cat /proc/sys/kernel/random/uuid)" > made.txt && cat ${await seenWorkspace(src)}/made.txt` },
          },
        ],
      },
      { toolCalls: [{ name: 'file_editor', arguments: { command: 'create', path: `${srcWs}/notes.md`, file_text: 'alpha\nbeta\n' } }] },
      { toolCalls: [{ name: 'file_editor', arguments: { command: 'str_replace', path: `${srcWs}/notes.md`, old_str: 'beta', new_str: 'gamma' } }] },
      { toolCalls: [{ name: 'finish', arguments: { message: 'Notes written.' } }] },
    );
    assert.equal((await d.req('POST', `/api/conversations/${src}/events`, { content: [{ type: 'text', text: 'Create the notes' }], run: true })).status, 200);
    await waitStatus(src, 'finished');
    const recorded = await events(src);
    assert.equal(recorded.filter((e) => e.kind === 'ActionEvent').length, 4);
    // the source is gone: writing to its paths would fail, so the replay must map them
    assert.equal((await d.req('DELETE', `/api/conversations/${src}`)).status, 200);
    assert.ok(!fs.existsSync(srcWs));

    const llmBefore = llm.requests.length;
    const id = await replay(recorded);
    await waitStatus(id, 'finished');
    assert.equal(llm.requests.length, llmBefore, 'the replay did not call the LLM');
    const ws = workspace(id);
    const evs = await events(id);
    const messages = evs.filter((e) => e.kind === 'MessageEvent');
    assert.equal(messages[0].source, 'user');
    assert.equal(textOf(messages[0]), 'Create the notes');
    assert.equal(messages[0].seq, 1, "the recorded first message is the conversation's first event");
    assert.equal((await info(id)).title, 'Create the notes');
    const p = pairs(evs);
    assert.deepEqual(
      p.map((x) => x.a.tool_name),
      ['terminal', 'file_editor', 'file_editor', 'finish'],
    );
    const recordedIds = new Set(recorded.map((e) => e.id));
    for (const { a, o } of p) {
      assert.ok(!recordedIds.has(a.id) && !recordedIds.has(o.id), 'new events');
      assert.equal(o.kind, 'ObservationEvent');
      assert.equal(o.observation.is_error, false, JSON.stringify(o.observation));
    }
    assert.equal(p[0].a.thought[0].text, 'Making files.');
    assert.equal(p[1].a.action.path, `${await seenWorkspace(id)}/notes.md`, 'paths mapped to the new workspace');
    const made = fs.readFileSync(path.join(ws, 'made.txt'), 'utf8').trim();
    assert.match(made, /^made [0-9a-f-]{36}$/);
    assert.ok(obsText(p[0].o).includes(made), 'a NEW observation (what this run printed)');
    const recordedObs = recorded.find((e) => e.kind === 'ObservationEvent');
    assert.ok(!obsText(recordedObs).includes(made), 'not the recorded one');
    assert.equal(fs.readFileSync(path.join(ws, 'notes.md'), 'utf8'), 'alpha\ngamma\n');
    assert.ok(evs.some((e) => e.key === 'setup' && e.value.phase === 'replaying'));

    // continues normally: the next message runs the LLM, which sees the replayed history
    llm.push({ text: 'Continuing after the replay.' });
    await d.req('POST', `/api/conversations/${id}/events`, { content: [{ text: 'and now?' }], run: true });
    await waitStatus(id, 'finished');
    assert.equal(llm.requests.length, llmBefore + 1);
    const sent = JSON.stringify(llm.requests[llmBefore].body.messages);
    assert.ok(sent.includes('Create the notes') && sent.includes('notes.md') && sent.includes('and now?'));
    assert.ok(sent.includes(made), 'the LLM sees the new observations');
  });

  test('a message sent with run:true during the replay runs the LLM once the replay is done', async () => {
    const llmBefore = llm.requests.length;
    const id = await replay([
      { kind: 'MessageEvent', source: 'user', llm_message: { role: 'user', content: [{ type: 'text', text: 'slow one' }] } },
      { kind: 'ActionEvent', source: 'agent', tool_name: 'terminal', tool_call_id: 'x1', action: { command: 'sleep 1; echo slept' } },
    ]);
    llm.push({ text: 'saw it' });
    assert.equal((await d.req('POST', `/api/conversations/${id}/events`, { content: [{ text: 'extra message' }], run: true })).status, 200);
    await waitFor(async () => (await events(id)).some((e) => e.kind === 'MessageEvent' && e.source === 'agent'), 'agent answer', 90_000);
    await waitStatus(id, 'finished');
    assert.equal(llm.requests.length, llmBefore + 1);
    const evs = await events(id);
    const obs = evs.find((e) => e.kind === 'ObservationEvent');
    const running = evs.filter((e) => e.key === 'execution_status' && e.value === 'running');
    assert.equal(running.length, 2, 'the replay, then one LLM run');
    assert.ok(obs.seq < running[1].seq, 'the LLM ran after the replay');
    assert.match(JSON.stringify(llm.requests[llmBefore].body.messages), /extra message/);
  });
});

describe('deleting during a replay', () => {
  test('answers without waiting for the command, removes the conversation and its workspace; the steps after the running one do not run', async () => {
    const marker = path.join(os.tmpdir(), `parley-replay-after-delete-${process.pid}-${Date.now()}`);
    const id = await replay([
      { action: 'message', args: { content: 'long one' }, source: 'user' },
      // never ends by itself: a delete that waited for it would not answer at all
      { action: 'run', args: { command: 'sleep 100000' } },
      { action: 'run', args: { command: `touch ${marker}` } },
    ]);
    await waitFor(async () => (await events(id)).some((e) => e.kind === 'ActionEvent'), 'the replay started', 20_000);
    const deleted = d.req('DELETE', `/api/conversations/${id}`);
    const waited = new Promise<'waited'>((r) => setTimeout(() => r('waited'), 60_000).unref());
    const res = await Promise.race([deleted, waited]);
    assert.notEqual(res, 'waited', 'the delete waited for the command');
    assert.equal(res !== 'waited' && res.status, 200);
    assert.equal((await d.req('GET', `/api/conversations/${id}`)).status, 404);
    await waitFor(() => !fs.existsSync(workspace(id)), 'the workspace removed');
    // the preparation (the replay) has returned: no step of it runs after this line
    await waitFor(() => d.output.some((l) => l.includes(id) && l.includes('workspace preparation ended')), 'the replay ended');
    assert.ok(!fs.existsSync(marker), 'the step after the killed command never ran');
    assert.ok(!d.output.some((l) => l.includes(id) && /preparation failed|ReplayFailed/.test(l)), 'ended quietly');
  });
});

describe('replaying an OpenHands trajectory', () => {
  test('run / write / edit / read / message / finish are executed again; observations and bookkeeping ignored', async () => {
    const trajectory = [
      { id: 0, source: 'agent', action: 'system', args: { content: 'You are OpenHands agent.', tools: [] } },
      { id: 1, source: 'user', action: 'message', args: { content: 'Write a tiny script', image_urls: [], wait_for_response: false } },
      { id: 2, source: 'user', action: 'recall', args: { recall_type: 'workspace_context', query: 'Write a tiny script' } },
      { id: 3, source: 'environment', observation: 'agent_state_changed', content: '', extras: { agent_state: 'running' } },
      {
        id: 4,
        source: 'agent',
        action: 'run',
        args: {
          command: 'mkdir -p /workspace/src && echo hi > /workspace/src/a.txt && ls /workspace/src',
          is_input: false,
          thought: 'Set up.',
          blocking: false,
          hidden: false,
        },
      },
      { id: 5, source: 'agent', observation: 'run', content: 'OLD RECORDED OUTPUT', extras: { exit_code: 0 } },
      { id: 6, source: 'agent', action: 'write', args: { path: '/workspace/src/b.py', content: 'print(1)\n' } },
      {
        id: 7,
        source: 'agent',
        action: 'edit',
        args: { path: '/workspace/src/b.py', command: 'str_replace', old_str: 'print(1)', new_str: 'print(2)', file_text: null, insert_line: null },
      },
      { id: 8, source: 'agent', action: 'edit', args: { path: 'src/c.txt', command: '', content: 'line one\nline two\n', start: 1, end: -1 } },
      { id: 9, source: 'agent', action: 'edit', args: { path: '/workspace/src/c.txt', command: '', content: 'LINE TWO', start: 2, end: 2 } },
      { id: 10, source: 'agent', action: 'write', args: { path: '/workspace/src/a.txt', content: 'overwritten\n' } },
      { id: 11, source: 'agent', action: 'read', args: { path: '/workspace/src/b.py' } },
      { id: 12, source: 'agent', action: 'run', args: { command: 'cat src/b.py src/a.txt', hidden: false } },
      { id: 13, source: 'agent', action: 'run', args: { command: 'git config --global x.y z', hidden: true } },
      { id: 14, source: 'agent', action: 'think', args: { thought: 'Looks right.' } },
      { id: 15, source: 'agent', action: 'message', args: { content: 'The script is ready.' } },
      { id: 16, source: 'user', action: 'message', args: { content: 'thanks' } },
      { id: 17, source: 'agent', action: 'finish', args: { final_thought: 'All done.', outputs: {} } },
      { id: 18, source: 'agent', observation: 'agent_state_changed', extras: { agent_state: 'finished' } },
    ];
    const llmBefore = llm.requests.length;
    const id = await replay(trajectory);
    await waitStatus(id, 'finished');
    assert.equal(llm.requests.length, llmBefore);
    const ws = workspace(id);
    assert.equal(fs.readFileSync(path.join(ws, 'src/a.txt'), 'utf8'), 'overwritten\n');
    assert.equal(fs.readFileSync(path.join(ws, 'src/b.py'), 'utf8'), 'print(2)\n');
    assert.equal(fs.readFileSync(path.join(ws, 'src/c.txt'), 'utf8'), 'line one\nLINE TWO\n');
    const evs = await events(id);
    const msgs = evs.filter((e) => e.kind === 'MessageEvent').map((e) => [e.source, textOf(e)]);
    assert.deepEqual(msgs, [
      ['user', 'Write a tiny script'],
      ['agent', 'The script is ready.'],
      ['user', 'thanks'],
    ]);
    const p = pairs(evs);
    const seen = await seenWorkspace(id);
    assert.deepEqual(
      p.map((x) => `${x.a.tool_name}:${x.a.action.command ?? ''}`),
      [
        `terminal:mkdir -p ${seen}/src && echo hi > ${seen}/src/a.txt && ls ${seen}/src`,
        'file_editor:create',
        'file_editor:str_replace',
        'file_editor:create',
        'file_editor:str_replace',
        'file_editor:str_replace',
        'file_editor:view',
        'terminal:cat src/b.py src/a.txt',
        'think:',
        'finish:',
      ],
    );
    for (const { o } of p) assert.equal(o.kind === 'ObservationEvent' && !o.observation.is_error, true, JSON.stringify(o));
    assert.equal(p[0].a.thought[0].text, 'Set up.');
    assert.match(obsText(p[0].o), /a\.txt/);
    assert.doesNotMatch(JSON.stringify(evs), /OLD RECORDED OUTPUT/, 'recorded observations are not copied');
    assert.doesNotMatch(JSON.stringify(evs), /x\.y z/, 'hidden runtime commands are skipped');
    assert.match(obsText(p[7].o), /print\(2\)\s+overwritten/);
    assert.equal(p[9].o.observation.message, 'All done.');

    llm.push({ text: 'You are welcome.' });
    await d.req('POST', `/api/conversations/${id}/events`, { content: [{ text: 'one more thing' }], run: true });
    await waitStatus(id, 'finished');
    assert.equal(llm.requests.length, llmBefore + 1);
  });
});

describe('replay_json validation (422 at creation)', () => {
  const post = (replay_json: string, extra: Record<string, unknown> = {}) => d.req('POST', '/api/conversations', { replay_json, ...extra });

  test('invalid JSON, a non-array, bad items: loc names the item and msg says why; nothing is created', async () => {
    const count = async () => (await d.req('GET', '/api/conversations?limit=100')).body.items.length;
    const n = await count();
    let r = await post('[{"action": "run",');
    assert.equal(r.status, 422);
    assert.deepEqual(r.body.detail[0].loc, ['body', 'replay_json']);
    assert.equal(r.body.detail[0].type, 'json_invalid');
    assert.match(r.body.detail[0].msg, /Invalid JSON/);

    r = await post('{"events": []}');
    assert.equal(r.status, 422);
    assert.deepEqual(r.body.detail[0].loc, ['body', 'replay_json']);
    assert.match(r.body.detail[0].msg, /JSON array/);

    r = await post(
      JSON.stringify([
        { action: 'message', args: { content: 'hi' }, source: 'user' },
        { observation: 'run', content: 'x' },
        { action: 'browse', args: { url: 'https://example.com' } },
        5,
        { kind: 'ActionEvent', tool_name: 'my_mcp_tool', action: { q: 1 } },
        { kind: 'ActionEvent', tool_name: 'terminal', action: { cmd: 'ls' } },
        { action: 'teleport', args: {} },
        { hello: 'world' },
        { action: 'edit', args: { path: '/workspace/a', command: 'explode' } },
      ]),
    );
    assert.equal(r.status, 422);
    const byIndex = new Map(r.body.detail.map((e: any) => [e.loc[2], e]));
    for (const e of r.body.detail) assert.deepEqual(e.loc.slice(0, 2), ['body', 'replay_json']);
    assert.deepEqual([...byIndex.keys()], [2, 3, 4, 5, 6, 7, 8]);
    const msg = (i: number) => (byIndex.get(i) as any).msg as string;
    assert.match(msg(2), /item 2: unsupported action "browse": web browsing cannot be replayed/);
    assert.match(msg(3), /item 3: an event must be an object, got a number/);
    assert.match(msg(4), /the tool "my_mcp_tool" cannot be replayed/);
    assert.match(msg(5), /invalid arguments for terminal: command/);
    assert.match(msg(6), /unsupported action "teleport"/);
    assert.match(msg(7), /not an event/);
    assert.match(msg(8), /unsupported edit command "explode"/);

    r = await post('[]', { suggested_task: { repo: 'a/b', issue_number: 1, title: 't' } });
    assert.equal(r.status, 422);
    assert.match(r.body.detail[0].msg, /replay_json cannot be combined with suggested_task/);
    assert.equal(await count(), n, 'no conversation was created');
  });

  test('an empty array is a conversation with nothing to replay; it stays idle and the LLM is not called', async () => {
    const llmBefore = llm.requests.length;
    const id = await replay('[]');
    await waitReady(id);
    assert.equal((await info(id)).setup.phase, 'ready');
    assert.equal((await info(id)).execution_status, 'idle');
    assert.equal(llm.requests.length, llmBefore);
  });
});

describe('replay parsing and path mapping (pure)', () => {
  test('first user message, roots from the recorded system prompt, agent messages kept in order', () => {
    const r = parseReplay(
      JSON.stringify([
        {
          kind: 'SystemPromptEvent',
          source: 'agent',
          system_prompt: { type: 'text', text: 'You are Parley.\n\nYour working directory is /old/data/workspaces/abc. Use absolute paths.' },
        },
        { kind: 'MessageEvent', source: 'user', llm_message: { role: 'user', content: [{ type: 'text', text: 'first' }] } },
        { kind: 'ObservationEvent', source: 'environment', observation: {} },
        { kind: 'MessageEvent', source: 'agent', llm_message: { role: 'assistant', content: [{ type: 'text', text: 'answer' }] } },
        { kind: 'ActionEvent', tool_name: 'file_editor', action: { command: 'view', path: '/srv/x/workspaces/0123456789abcdef0123456789abcdef/f.txt' } },
        { kind: 'ActionEvent', tool_name: 'terminal', action: null },
      ]),
    );
    assert.ok(r.ok);
    assert.deepEqual(r.plan.firstMessage, [{ type: 'text', text: 'first', cache_prompt: false }]);
    assert.deepEqual(
      r.plan.steps.map((s) => s.type),
      ['message', 'tool'],
    );
    assert.deepEqual(r.plan.roots, ['/srv/x/workspaces/0123456789abcdef0123456789abcdef', '/old/data/workspaces/abc']);
  });

  test('paths and commands are mapped only at directory boundaries', () => {
    const roots = ['/workspace'];
    assert.equal(mapReplayPath('/workspace/a/b.txt', roots, '/new/ws'), '/new/ws/a/b.txt');
    assert.equal(mapReplayPath('/workspace', roots, '/new/ws'), '/new/ws');
    assert.equal(mapReplayPath('/workspaces/x', roots, '/new/ws'), '/workspaces/x');
    assert.equal(mapReplayPath('rel/c.txt', roots, '/new/ws'), '/new/ws/rel/c.txt');
    assert.equal(mapReplayPath('/tmp/z', roots, '/new/ws'), '/tmp/z');
    assert.equal(mapReplayCommand('cd /workspace && cat "/workspace/a" /workspace2/b; ls /workspace', roots, '/n'), 'cd /n && cat "/n/a" /workspace2/b; ls /n');
  });
});
