/**
 * `replay_json`: a recorded trajectory, parsed and checked at creation (pure: string → plan or
 * 422 issues). The preparer (agent/attach.ts) executes the plan in the new workspace without
 * calling the LLM: messages are appended, actions run again with the real tools and their new
 * observations recorded.
 *
 * Accepted items (an array, formats may be mixed):
 * - this service's events, as `/events/search` returns them: `MessageEvent` (user/assistant),
 *   `ActionEvent{tool_name, action}` for terminal, file_editor, think, task_tracker, finish;
 *   every other kind (observations, state updates, system prompt, errors, ...) is ignored;
 * - OpenHands trajectory entries: `{"action":"message","args":{"content"},"source"}`,
 *   `run` (command), `read`, `edit` (file_editor commands, or whole-file / line-range `content`),
 *   `write` (`content`), `think`, `finish`, `task_tracking`; bookkeeping actions (system, recall,
 *   change_agent_state, null, pause, condensation, ...) and every `{"observation":...}` entry are
 *   ignored. Browsing, IPython, MCP and delegation cannot be replayed here: 422.
 *
 * Paths: the directories the recording worked in (the working directory in a recorded
 * SystemPromptEvent, `<...>/workspaces/<32 hex>` conversation directories, and `/workspace` for
 * OpenHands) are mapped to the new workspace, in file paths and in terminal commands; relative
 * paths are taken relative to the workspace.
 */
import type * as z from 'zod';
import type { ValidationIssue } from '../errors.js';
import { jsonShapeError, REPLAY_JSON_LIMITS } from '../body-shape.js';
import { BUILTIN_TOOLS } from '../events/tool-catalog.js';
import type { ReplayContent, ReplayPlan, ReplayStep, ReplayToolName } from '../agent/replay-plan.js';
import { imageUrlProblem } from '../llm/image-url-rule.js';

export type { ReplayPlan } from '../agent/replay-plan.js';
export { mapReplayCommand, mapReplayPath } from '../agent/replay-plan.js';

type ReplayParseResult = { ok: true; plan: ReplayPlan } | { ok: false; issues: ValidationIssue[] };

const TOOL_SCHEMAS: Record<string, z.ZodType> = Object.fromEntries(BUILTIN_TOOLS.map((t) => [t.name, t.parameters]));

/** OpenHands actions that record bookkeeping, not work: skipped. */
const OH_IGNORED = new Set([
  'system',
  'start',
  'null',
  'pause',
  'resume',
  'stop',
  'change_agent_state',
  'recall',
  'condensation',
  'condensation_request',
  'loop_recovery',
  'reject',
]);
const OH_UNSUPPORTED: Record<string, string> = {
  browse: 'web browsing',
  browse_interactive: 'web browsing',
  run_ipython: 'IPython cells',
  call_tool_mcp: 'MCP tool calls',
  delegate: 'delegation to another agent',
  push: 'provider push actions',
  send_pr: 'provider pull-request actions',
};
const EDITOR_COMMANDS = new Set(['view', 'create', 'str_replace', 'insert', 'undo_edit']);
const MAX_ISSUES = 20;

class ItemError extends Error {}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

function describe(v: unknown): string {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'an array';
  return typeof v === 'string' ? 'a string' : `a ${typeof v}`;
}

function checkArgs(tool: ReplayToolName, args: unknown): Record<string, unknown> {
  if (!isObject(args)) throw new ItemError(`the ${tool} action must be an object, got ${describe(args)}`);
  const r = TOOL_SCHEMAS[tool].safeParse(args);
  if (!r.success) {
    const why = r.error.issues.map((i) => `${i.path.join('.') || '(root)'}: ${i.message}`).join('; ');
    throw new ItemError(`invalid arguments for ${tool}: ${why}`);
  }
  return args;
}

function content(v: unknown, what: string): ReplayContent {
  if (typeof v === 'string') return v ? [{ type: 'text', text: v, cache_prompt: false }] : [];
  if (!Array.isArray(v)) throw new ItemError(`${what} must be a list of content items or a string, got ${describe(v)}`);
  return v.map((c, i) => {
    if (isObject(c) && (c.type === 'text' || c.type === undefined) && typeof c.text === 'string') {
      return { type: 'text' as const, text: c.text, cache_prompt: c.cache_prompt === true };
    }
    if (isObject(c) && (c.type === 'image' || c.type === undefined) && Array.isArray(c.image_urls) && c.image_urls.every((u) => typeof u === 'string')) {
      return { type: 'image' as const, image_urls: checkImageUrls(c.image_urls as string[], `${what}[${i}]`), cache_prompt: c.cache_prompt === true };
    }
    throw new ItemError(`${what}[${i}] must be {"type":"text","text":...} or {"type":"image","image_urls":[...]}`);
  });
}

/** Image URLs are held to the rule of a message's: one that will never be fetched is a 422 with the rule. */
function checkImageUrls(urls: string[], what: string): string[] {
  for (const [j, u] of urls.entries()) {
    const problem = imageUrlProblem(u);
    if (problem) throw new ItemError(`${what}.image_urls[${j}]: ${problem}`);
  }
  return urls;
}

function thoughtText(v: unknown): string | null {
  if (typeof v === 'string') return v.trim() ? v : null;
  if (Array.isArray(v)) {
    const t = v
      .map((c) => (isObject(c) && typeof c.text === 'string' ? c.text : ''))
      .filter(Boolean)
      .join('\n');
    return t || null;
  }
  return null;
}

const WORKSPACE_DIR_RE = /^(\/.*?\/workspaces\/[0-9a-f]{32})(?=\/|$)/;

/** This service's own event format (an object with `kind`). Null: nothing to replay. */
function ownEvent(item: Record<string, unknown>, index: number, roots: Set<string>): ReplayStep | null {
  switch (item.kind) {
    case 'MessageEvent': {
      const m = item.llm_message;
      if (!isObject(m)) throw new ItemError('a MessageEvent needs llm_message {role, content}');
      const role = m.role ?? (item.source === 'agent' ? 'assistant' : 'user');
      if (role !== 'user' && role !== 'assistant') return null; // system / tool notes are not part of the trajectory
      return { type: 'message', index, role, content: content(m.content, 'llm_message.content') };
    }
    case 'ActionEvent': {
      const tool = item.tool_name;
      if (typeof tool !== 'string') throw new ItemError('an ActionEvent needs tool_name');
      if (item.action === null || item.action === undefined) return null; // a call whose arguments were unusable did nothing
      if (!(tool in TOOL_SCHEMAS)) {
        throw new ItemError(`unsupported action: the tool "${tool}" cannot be replayed (supported: ${Object.keys(TOOL_SCHEMAS).join(', ')})`);
      }
      const args = checkArgs(tool as ReplayToolName, item.action);
      if (typeof args.path === 'string') {
        const m = WORKSPACE_DIR_RE.exec(args.path);
        if (m) roots.add(m[1]!);
      }
      return { type: 'tool', index, tool: tool as ReplayToolName, args, thought: thoughtText(item.thought) };
    }
    case 'SystemPromptEvent': {
      const text = isObject(item.system_prompt) ? item.system_prompt.text : null;
      const m = typeof text === 'string' ? /Your working directory is (\/\S+?)\.(?:\s|$)/.exec(text) : null;
      if (m) roots.add(m[1]!);
      return null;
    }
    default:
      if (typeof item.kind !== 'string') throw new ItemError(`kind must be a string, got ${describe(item.kind)}`);
      return null; // observations, errors, state updates, condensations: the new run records its own
  }
}

function optionalNumber(v: unknown): number | undefined {
  return typeof v === 'number' && Number.isFinite(v) ? v : undefined;
}

/** A line range from OpenHands `start`/`end` (defaults 1 and -1 mean the whole file). */
function ohRange(args: Record<string, unknown>): { start: number; end: number } | null {
  const start = optionalNumber(args.start) ?? 1;
  const end = optionalNumber(args.end) ?? -1;
  if (start <= 1 && end === -1) return null;
  if (!Number.isInteger(start) || !Number.isInteger(end) || start < 1 || (end !== -1 && end < start)) {
    throw new ItemError(`invalid line range start=${String(args.start)} end=${String(args.end)}`);
  }
  return { start, end };
}

/** An OpenHands trajectory action (an object with `action`). Null: nothing to replay. */
function openHandsAction(item: Record<string, unknown>, index: number): ReplayStep | null {
  const action = String(item.action);
  const args = item.args === undefined ? {} : item.args;
  if (!isObject(args)) throw new ItemError(`args must be an object, got ${describe(args)}`);
  if (OH_IGNORED.has(action)) return null;
  if (args.hidden === true) return null; // the OpenHands runtime's own housekeeping commands
  const thought = thoughtText(args.thought);
  const needPath = () => {
    if (typeof args.path !== 'string' || !args.path) throw new ItemError(`the ${action} action needs args.path`);
    return args.path;
  };
  switch (action) {
    case 'message': {
      if (typeof args.content !== 'string') throw new ItemError('a message action needs args.content (a string)');
      const role = item.source === 'agent' ? 'assistant' : 'user';
      const urls = args.image_urls ?? [];
      if (!Array.isArray(urls) || !urls.every((u) => typeof u === 'string')) throw new ItemError('args.image_urls must be a list of strings');
      const c = content(args.content, 'args.content');
      if (urls.length) c.push({ type: 'image', image_urls: checkImageUrls(urls as string[], 'args'), cache_prompt: false });
      return { type: 'message', index, role, content: c };
    }
    case 'run': {
      if (typeof args.command !== 'string') throw new ItemError('a run action needs args.command (a string)');
      const a: Record<string, unknown> = { command: args.command };
      if (args.is_input === true) a.is_input = true;
      return { type: 'tool', index, tool: 'terminal', args: checkArgs('terminal', a), thought };
    }
    case 'read': {
      const a: Record<string, unknown> = { command: 'view', path: needPath() };
      if (Array.isArray(args.view_range) && args.view_range.length === 2) a.view_range = args.view_range;
      return { type: 'tool', index, tool: 'file_editor', args: checkArgs('file_editor', a), thought };
    }
    case 'write': {
      const p = needPath();
      if (typeof args.content !== 'string') throw new ItemError('a write action needs args.content (a string)');
      return { type: 'write', index, path: p, content: args.content, range: ohRange(args), thought };
    }
    case 'edit': {
      const p = needPath();
      const command = typeof args.command === 'string' ? args.command : '';
      if (EDITOR_COMMANDS.has(command)) {
        const a: Record<string, unknown> = { command, path: p };
        for (const k of ['file_text', 'old_str', 'new_str', 'insert_line', 'view_range']) if (args[k] !== null && args[k] !== undefined) a[k] = args[k];
        return { type: 'tool', index, tool: 'file_editor', args: checkArgs('file_editor', a), thought };
      }
      if (command === '' && typeof args.content === 'string') {
        return { type: 'write', index, path: p, content: args.content, range: ohRange(args), thought };
      }
      throw new ItemError(
        command
          ? `unsupported edit command "${command}" (supported: ${[...EDITOR_COMMANDS].join(', ')}, or args.content for a whole-file edit)`
          : 'an edit action needs args.command or args.content',
      );
    }
    case 'think':
      return { type: 'tool', index, tool: 'think', args: checkArgs('think', { thought: typeof args.thought === 'string' ? args.thought : '' }), thought: null };
    case 'finish': {
      const outputs = isObject(args.outputs) ? args.outputs : {};
      const message = [args.final_thought, args.message, outputs.content, args.thought].find((v) => typeof v === 'string' && v.trim()) ?? '';
      return { type: 'tool', index, tool: 'finish', args: { message }, thought: null };
    }
    case 'task_tracking': {
      const a: Record<string, unknown> = { command: args.command };
      if (args.task_list !== undefined && args.task_list !== null) a.task_list = args.task_list;
      return { type: 'tool', index, tool: 'task_tracker', args: checkArgs('task_tracker', a), thought };
    }
    default: {
      const what = OH_UNSUPPORTED[action];
      throw new ItemError(
        what
          ? `unsupported action "${action}": ${what} cannot be replayed`
          : `unsupported action "${action}" (supported: message, run, read, write, edit, think, finish, task_tracking)`,
      );
    }
  }
}

/** Parses and checks `replay_json`. Issues carry loc ["body","replay_json"] or ["body","replay_json", <index>]. */
export function parseReplay(json: string): ReplayParseResult {
  const base = ['body', 'replay_json'];
  // counted before it is parsed, like a request body: the string may be MAX_BODY_BYTES of `[[],…]`
  const refused = jsonShapeError(json, REPLAY_JSON_LIMITS, 'replay_json');
  if (refused) return { ok: false, issues: [{ type: 'value_error', loc: base, msg: `Value error, ${refused.detail}` }] };
  let data: unknown;
  try {
    data = JSON.parse(json);
  } catch (err) {
    return { ok: false, issues: [{ type: 'json_invalid', loc: base, msg: `Invalid JSON in replay_json: ${(err as Error).message}` }] };
  }
  if (!Array.isArray(data)) {
    return { ok: false, issues: [{ type: 'list_type', loc: base, msg: `replay_json must hold a JSON array of events, got ${describe(data)}` }] };
  }
  const issues: ValidationIssue[] = [];
  const steps: ReplayStep[] = [];
  const roots = new Set<string>();
  let openHands = false;
  data.forEach((item, index) => {
    if (issues.length >= MAX_ISSUES) return;
    try {
      if (!isObject(item)) throw new ItemError(`an event must be an object, got ${describe(item)}`);
      let step: ReplayStep | null = null;
      if ('kind' in item) step = ownEvent(item, index, roots);
      else if (typeof item.action === 'string') {
        openHands = true;
        step = openHandsAction(item, index);
      } else if ('observation' in item) step = null;
      else throw new ItemError('not an event: expected an object with "kind" (this service\'s events) or "action" / "observation" (an OpenHands trajectory)');
      if (step && !(step.type === 'message' && step.content.length === 0)) steps.push(step);
    } catch (err) {
      if (!(err instanceof ItemError)) throw err;
      issues.push({ type: 'value_error', loc: [...base, index], msg: `Value error, item ${index}: ${err.message}` });
    }
  });
  if (issues.length) return { ok: false, issues };
  if (openHands) roots.add('/workspace');
  const first = steps.findIndex((s) => s.type === 'message' && s.role === 'user');
  const firstMessage = first >= 0 ? (steps[first] as Extract<ReplayStep, { type: 'message' }>).content : null;
  if (first >= 0) steps.splice(first, 1);
  return { ok: true, plan: { firstMessage, steps, roots: [...roots].sort((a, b) => b.length - a.length) } };
}

/** The text of a first message (for the conversation title). */
export function replayText(c: ReplayContent | null): string | null {
  const t = (c ?? [])
    .map((x) => (x.type === 'text' ? x.text : ''))
    .join('\n')
    .trim();
  return t || null;
}
