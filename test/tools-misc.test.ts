import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import * as z from 'zod';
import { EventBus } from '../src/events/bus.js';
import { EventLog } from '../src/events/log.js';
import { Redactor } from '../src/secrets/redact.js';
import { SqliteStore } from '../src/store/sqlite.js';
import { createFinishTool } from '../src/tools/finish.js';
import { createTaskTrackerTool, lastTaskList, type TaskItem } from '../src/tools/task-tracker.js';
import { tempDir } from './support/daemon.js';
import { createThinkTool } from '../src/tools/think.js';
import type { ToolContext } from '../src/tools/types.js';
import type { Observation as ToolObservation } from '../src/events/schema.js';

function makeCtx(conversationId: string): ToolContext {
  return {
    conversationId,
    workspaceDir: '/tmp',
    signal: new AbortController().signal,
    env: {},
    redact: (t) => t.split('SECRET123').join('<secret_hidden>'),
  };
}

function textOf(obs: ToolObservation): string {
  const c = obs.content[0];
  assert.ok(c && c.type === 'text');
  return c.text;
}

describe('task_tracker tool', () => {
  // a real event log: the tool reads the current list from it, and each call's observation is
  // appended to it as the agent's runtime does
  const dir = tempDir();
  const store = new SqliteStore(dir);
  const log = new EventLog(store, new EventBus(), new Redactor());
  store.onCommit((id, evs) => log.committed(id, evs));
  after(async () => {
    await store.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });
  const created = new Set<string>();
  const tool = createTaskTrackerTool((id) => lastTaskList(log, id));
  let calls = 0;
  const record = async (conversationId: string, observation: ToolObservation, toolName = 'task_tracker') => {
    if (!created.has(conversationId)) {
      created.add(conversationId);
      await store.createConversation(
        { id: conversationId, title: null, created_at: new Date().toISOString(), updated_at: new Date().toISOString(), execution_status: 'idle', data: {} },
        [],
      );
    }
    await log.append(conversationId, {
      kind: 'ObservationEvent',
      source: 'environment',
      tool_name: toolName,
      tool_call_id: `call-${++calls}`,
      action_id: `a-${calls}`,
      observation,
    });
  };
  const run = async (ctx: ToolContext, p: unknown) => {
    const obs = await tool.execute(tool.parameters.parse(p), ctx);
    await record(ctx.conversationId, obs);
    return obs;
  };

  it('has a JSON Schema', () => {
    const schema = z.toJSONSchema(tool.parameters) as { properties: Record<string, unknown> };
    assert.ok('command' in schema.properties && 'task_list' in schema.properties);
    assert.equal(tool.name, 'task_tracker');
  });

  it('starts empty, plans, views, and returns the list in every observation', async () => {
    const ctx = makeCtx('tt-1');
    const empty = await run(ctx, { command: 'view' });
    assert.equal(empty.is_error, false);
    assert.equal(textOf(empty), 'No task list found. Use the "plan" command to create one.');
    assert.deepEqual(empty.task_list, []);

    const list = [
      { id: '1', title: 'Reproduce the bug', status: 'done', notes: 'fails on empty input' },
      { id: 2, title: 'Fix it', status: 'in_progress' },
      { id: '3', title: 'Add a test', status: 'todo' },
    ];
    const planned = await run(ctx, { command: 'plan', task_list: list });
    assert.equal(planned.kind, 'TaskTrackerObservation');
    assert.equal(planned.command, 'plan');
    assert.equal(planned.is_error, false);
    const expected: TaskItem[] = [
      { id: '1', title: 'Reproduce the bug', status: 'done', notes: 'fails on empty input' },
      { id: '2', title: 'Fix it', status: 'in_progress' },
      { id: '3', title: 'Add a test', status: 'todo' },
    ];
    assert.deepEqual(planned.task_list, expected);
    assert.match(textOf(planned), /\[x\] Reproduce the bug/);
    assert.match(textOf(planned), /\[~\] Fix it/);
    assert.match(textOf(planned), /\[ \] Add a test/);

    const viewed = await run(ctx, { command: 'view' });
    assert.deepEqual(viewed.task_list, expected);
    assert.equal(viewed.command, 'view');
    // The observation is plain JSON (it goes to the event log).
    assert.deepEqual(JSON.parse(JSON.stringify(viewed)).task_list, expected);

    // Another conversation has its own list.
    const other = await run(makeCtx('tt-2'), { command: 'view' });
    assert.deepEqual(other.task_list, []);
  });

  it("the list is the log's: a new tool instance (a restart) sees it, past pages of other observations", async () => {
    const list: TaskItem[] = [{ id: 'a', title: 'Kept task', status: 'in_progress' }];
    await run(makeCtx('tt-log'), { command: 'plan', task_list: list });
    // 450 other tools' observations after it: the list is found on an older page
    for (let i = 0; i < 450; i++)
      await record('tt-log', { kind: 'ThinkObservation', content: [{ type: 'text', text: 'Your thought has been logged.' }], is_error: false }, 'think');
    const fresh = createTaskTrackerTool((id) => lastTaskList(log, id));
    const obs = await fresh.execute(fresh.parameters.parse({ command: 'view' }), makeCtx('tt-log'));
    assert.deepEqual(obs.task_list, list);
    assert.match(textOf(obs), /Kept task/);
    assert.deepEqual(await lastTaskList(log, 'tt-none'), []);
  });

  it('reports plan without task_list and duplicate ids as errors, keeping the old list', async () => {
    const ctx = makeCtx('tt-3');
    await run(ctx, { command: 'plan', task_list: [{ id: '1', title: 'Keep me', status: 'todo' }] });
    const missing = await run(ctx, { command: 'plan' });
    assert.equal(missing.is_error, true);
    assert.match(textOf(missing), /task_list/);
    const dup = await run(ctx, {
      command: 'plan',
      task_list: [
        { id: '1', title: 'a', status: 'todo' },
        { id: '1', title: 'b', status: 'todo' },
      ],
    });
    assert.equal(dup.is_error, true);
    assert.deepEqual(dup.task_list, [{ id: '1', title: 'Keep me', status: 'todo' }]);
    assert.ok(tool.parameters.safeParse({ command: 'plan', task_list: [{ id: '1', title: 'x', status: 'started' }] }).success === false);
    const cleared = await run(ctx, { command: 'plan', task_list: [] });
    assert.equal(cleared.is_error, false);
    assert.deepEqual(cleared.task_list, []);
    assert.deepEqual((await run(ctx, { command: 'view' })).task_list, []);
  });

  it('redacts the text it returns', async () => {
    const ctx = makeCtx('tt-4');
    const obs = await run(ctx, { command: 'plan', task_list: [{ id: '1', title: 'use SECRET123', status: 'todo' }] });
    assert.ok(!textOf(obs).includes('SECRET123'));
  });
});

describe('think tool', () => {
  it('logs the thought', async () => {
    const tool = createThinkTool();
    assert.equal(tool.name, 'think');
    z.toJSONSchema(tool.parameters);
    const obs = await tool.execute(tool.parameters.parse({ thought: 'maybe the cache is stale' }), makeCtx('th'));
    assert.equal(obs.is_error, false);
    assert.equal(textOf(obs), 'Your thought has been logged.');
    assert.equal(obs.kind, 'ThinkObservation');
    assert.equal(tool.parameters.safeParse({}).success, false);
  });
});

describe('finish tool', () => {
  it('echoes the message as a FinishObservation', async () => {
    const tool = createFinishTool();
    assert.equal(tool.name, 'finish');
    const schema = z.toJSONSchema(tool.parameters) as { required: string[] };
    assert.deepEqual(schema.required, ['message']);
    const obs = await tool.execute(tool.parameters.parse({ message: 'All tests pass.' }), makeCtx('fi'));
    assert.equal(obs.kind, 'FinishObservation');
    assert.equal(obs.is_error, false);
    assert.equal(textOf(obs), 'All tests pass.');
    const red = await tool.execute(tool.parameters.parse({ message: 'token SECRET123' }), makeCtx('fi'));
    assert.equal(textOf(red), 'token <secret_hidden>');
  });
});
