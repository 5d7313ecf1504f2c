/**
 * `task_tracker` tool: the agent's plan as a task list, per conversation.
 * The list lives in memory and is ALSO returned in every observation (`task_list`), so the
 * conversation's event log holds it; after a restart the loader calls restoreTaskList().
 */
import { z } from 'zod';
import { TASK_TRACKER, taskSchema, taskTrackerParameters, type TaskStatus, type TaskTrackerObservation } from '../events/tool-catalog.js';
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
* \`plan\` replaces the whole list with \`task_list\` (each task: id, title, status todo|in_progress|done, optional notes). Send the complete list every time, with updated statuses.
* \`view\` shows the current list.
Use it for work with several steps: plan first, mark one task in_progress while you work on it, and done when it is finished.`;

const EMPTY_TEXT = 'No task list found. Use the "plan" command to create one.';

/** Module-level store so that restoreTaskList() reaches every task_tracker tool instance. */
const lists = new Map<string, TaskItem[]>();

function copyList(list: readonly TaskItem[]): TaskItem[] {
  return list.map((t) => ({ id: t.id, title: t.title, status: t.status, ...(t.notes ? { notes: t.notes } : {}) }));
}

/** Restores a conversation's task list (e.g. from the last TaskTrackerObservation in the event log). */
export function restoreTaskList(conversationId: string, list: readonly TaskItem[]): void {
  const parsed = z.array(taskSchema).parse(list);
  lists.set(conversationId, normalize(parsed));
}

/** The current task list of a conversation (a copy), empty when none. */
export function getTaskList(conversationId: string): TaskItem[] {
  return copyList(lists.get(conversationId) ?? []);
}

/** Forgets a conversation's task list. */
export function clearTaskList(conversationId: string): void {
  lists.delete(conversationId);
}

function normalize(list: z.output<typeof taskSchema>[]): TaskItem[] {
  return list.map((t) => {
    const item: TaskItem = { id: String(t.id).trim(), title: t.title.trim(), status: t.status };
    if (t.notes && t.notes.trim()) item.notes = t.notes.trim();
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

export function createTaskTrackerTool(): Tool<TaskTrackerParams, TaskTrackerObservation> & {
  closeConversation(conversationId: string): void;
} {
  const obs = (ctx: ToolContext, command: string, text: string, isError: boolean): TaskTrackerObservation => ({
    kind: 'TaskTrackerObservation',
    content: [{ type: 'text', text: ctx.redact(text) }],
    is_error: isError,
    command,
    task_list: getTaskList(ctx.conversationId),
  });
  return {
    name: TASK_TRACKER.name,
    kind: TASK_TRACKER.kind,
    actionKind: TASK_TRACKER.actionKind,
    description: DESCRIPTION,
    parameters: taskTrackerParameters,
    async execute(params, ctx) {
      if (params.command === 'view') {
        return obs(ctx, 'view', renderTaskList(lists.get(ctx.conversationId) ?? []), false);
      }
      if (params.command !== 'plan') {
        return obs(ctx, String(params.command), 'Unknown command: use "view" or "plan".', true);
      }
      if (!params.task_list) {
        return obs(ctx, 'plan', 'Parameter `task_list` is required for command: plan (the complete list; [] clears it).', true);
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
        return obs(ctx, 'plan', `The task list was NOT updated: ${problems.join('; ')}.`, true);
      }
      lists.set(ctx.conversationId, list);
      const text =
        list.length === 0 ? 'The task list was cleared.' : `Task list updated.\n\n${renderTaskList(list)}`;
      return obs(ctx, 'plan', text, false);
    },
    closeConversation(conversationId) {
      lists.delete(conversationId);
    },
  };
}
