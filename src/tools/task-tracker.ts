/**
 * `task_tracker` tool: the agent's plan as a task list, per conversation.
 * Every observation carries the list as it stands after the call (`task_list`), so the
 * conversation's event log holds it: the current list is the one of the conversation's last
 * task_tracker observation, read from the log (`lastTaskList`) whenever the tool needs it. Nothing
 * is kept in memory: the list survives a restart, an eviction and a move to another node.
 */
import type * as z from 'zod';
import type { ParleyEvent } from '../events/schema.js';
import { TASK_TRACKER, taskTrackerParameters, type TaskStatus, type TaskTrackerObservation } from '../events/tool-catalog.js';
import type { EventQuery } from '../store/types.js';
import type { Tool, ToolContext } from './types.js';

export interface TaskItem {
  id: string;
  title: string;
  status: TaskStatus;
  notes?: string;
}

type TaskTrackerParams = z.output<typeof taskTrackerParameters>;
export type { TaskTrackerObservation };

const DESCRIPTION = `Keep a task list for multi-step work.
* \`plan\` replaces the whole list with \`task_list\` (each task: id, title, status todo|in_progress|done, optional notes). \
Send the complete list every time, with updated statuses.
* \`view\` shows the current list.
Use it for work with several steps: plan first, mark one task in_progress while you work on it, and done when it is finished.`;

const EMPTY_TEXT = 'No task list found. Use the "plan" command to create one.';

/** What the tool reads of a conversation's event log. */
export interface TaskListLog {
  query(conversationId: string, q: EventQuery): Promise<ParleyEvent[]>;
}

const PAGE = 200;

/** The conversation's current task list: the one its newest task_tracker observation holds (empty when there is none). */
export async function lastTaskList(log: TaskListLog, conversationId: string): Promise<TaskItem[]> {
  let beforeSeq: number | null = null;
  for (;;) {
    const page = await log.query(conversationId, { kind: 'ObservationEvent', desc: true, limit: PAGE, beforeSeq });
    for (const e of page) {
      if (e.kind === 'ObservationEvent' && e.observation.kind === 'TaskTrackerObservation') return e.observation.task_list.map((t) => ({ ...t }));
    }
    const oldest = page[page.length - 1]?.seq;
    if (page.length < PAGE || oldest === undefined) return [];
    beforeSeq = oldest;
  }
}

function normalize(list: NonNullable<TaskTrackerParams['task_list']>): TaskItem[] {
  return list.map((t) => {
    const item: TaskItem = { id: String(t.id).trim(), title: t.title.trim(), status: t.status };
    if (t.notes?.trim()) item.notes = t.notes.trim();
    return item;
  });
}

const MARK: Record<TaskStatus, string> = { todo: '[ ]', in_progress: '[~]', done: '[x]' };

function renderTaskList(list: readonly TaskItem[]): string {
  if (list.length === 0) return EMPTY_TEXT;
  const count = (s: TaskStatus) => list.filter((t) => t.status === s).length;
  const lines = [
    `# Task list (${list.length} task${list.length === 1 ? '' : 's'}: ${count('done')} done, ${count('in_progress')} in progress, ${count('todo')} todo)`,
    '',
  ];
  list.forEach((t, i) => {
    lines.push(`${i + 1}. ${MARK[t.status]} ${t.title} (id: ${t.id}, ${t.status})`);
    if (t.notes) for (const l of t.notes.split('\n')) lines.push(`   ${l}`);
  });
  return lines.join('\n');
}

/** `current`: the conversation's task list as its log holds it (the daemon passes `lastTaskList` over its event log). */
export function createTaskTrackerTool(current: (conversationId: string) => Promise<TaskItem[]>): Tool<TaskTrackerParams, TaskTrackerObservation> {
  const obs = (ctx: ToolContext, command: string, text: string, isError: boolean, list: TaskItem[]): TaskTrackerObservation => ({
    kind: 'TaskTrackerObservation',
    content: [{ type: 'text', text: ctx.redact(text) }],
    is_error: isError,
    command,
    task_list: list,
  });
  // a failed call leaves the list as it stands
  const failed = async (ctx: ToolContext, command: string, text: string) => obs(ctx, command, text, true, await current(ctx.conversationId));
  return {
    name: TASK_TRACKER.name,
    kind: TASK_TRACKER.kind,
    actionKind: TASK_TRACKER.actionKind,
    description: DESCRIPTION,
    parameters: taskTrackerParameters,
    async execute(params, ctx) {
      if (params.command === 'view') {
        const list = await current(ctx.conversationId);
        return obs(ctx, 'view', renderTaskList(list), false, list);
      }
      if (params.command !== 'plan') {
        return failed(ctx, String(params.command), 'Unknown command: use "view" or "plan".');
      }
      if (!params.task_list) {
        return failed(ctx, 'plan', 'Parameter `task_list` is required for command: plan (the complete list; [] clears it).');
      }
      const list = normalize(params.task_list);
      const problems: string[] = [];
      const seen = new Set<string>();
      list.forEach((t, i) => {
        if (!t.id) problems.push(`task ${i + 1} has an empty id`);
        else if (seen.has(t.id)) problems.push(`the id "${t.id}" is used more than once`);
        seen.add(t.id);
        if (!t.title) problems.push(`task ${i + 1} has an empty title`);
      });
      if (problems.length) {
        return failed(ctx, 'plan', `The task list was NOT updated: ${problems.join('; ')}.`);
      }
      const text = list.length === 0 ? 'The task list was cleared.' : `Task list updated.\n\n${renderTaskList(list)}`;
      return obs(ctx, 'plan', text, false, list);
    },
  };
}
