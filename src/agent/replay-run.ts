/**
 * Runs a checked `replay_json` plan (conversation/replay.ts) in a conversation's workspace
 * without the LLM: recorded messages are appended, recorded actions run again with the real
 * tools, and each records an ActionEvent followed by its NEW ObservationEvent (or an
 * AgentErrorEvent), exactly like a step of the agent loop. Recorded paths and directories are
 * mapped to the new workspace. A whole-file write becomes the file_editor call that has the same
 * effect here: `create` for a new file, `str_replace` of the current content otherwise.
 */
import crypto from 'node:crypto';
import type * as z from 'zod';
import type { EventLog } from '../events/log.js';
import { mapReplayCommand, mapReplayPath, type ReplayPlan, type ReplayStep } from './replay-plan.js';
import { actionOf, type Tool, type ToolContext } from '../tools/types.js';
import type { WorkspaceFiles } from '../sandbox/files.js';

interface ReplayRunOptions {
  events: EventLog;
  redact(text: string): string;
  conversationId: string;
  workspaceDir: string;
  /** Where the conversation's processes see the workspace (/workspace when sandboxed); default workspaceDir. */
  visibleDir?: string;
  /** The conversation's file service (what the file editor uses). */
  files: WorkspaceFiles;
  plan: ReplayPlan;
  tools: Tool[];
  /** The agent shell's environment (provider tokens, custom secrets). */
  env: Record<string, string>;
  signal: AbortSignal;
}

interface ReplayRunResult {
  /** Tool steps executed. */
  actions: number;
  /** The trajectory ended with the finish tool. */
  finished: boolean;
}

/** The most of a file a replayed write reads to turn itself into an edit (the file editor's own limit). */
const MAX_CURRENT_BYTES = 10 * 1024 * 1024;

/** The file_editor call that makes `path` hold the recorded content (or the recorded line range). */
async function writeCall(step: Extract<ReplayStep, { type: 'write' }>, abs: string, files: WorkspaceFiles): Promise<Record<string, unknown>> {
  let current: string | null = null;
  try {
    // read through the conversation's file service (inside its sandbox), like the file editor
    current = (await files.read(abs, MAX_CURRENT_BYTES)).toString('utf8');
  } catch {
    current = null;
  }
  if (current === null) return { command: 'create', path: abs, file_text: step.content };
  let next = step.content;
  if (step.range) {
    const finalNewline = current.endsWith('\n');
    const lines = (finalNewline ? current.slice(0, -1) : current).split('\n');
    const end = step.range.end === -1 ? lines.length : Math.min(step.range.end, lines.length);
    const body = step.content.endsWith('\n') ? step.content.slice(0, -1) : step.content;
    next = [...lines.slice(0, step.range.start - 1), ...body.split('\n'), ...lines.slice(end)].join('\n') + (finalNewline ? '\n' : '');
  }
  if (next === current) return { command: 'view', path: abs };
  if (current === '') return { command: 'insert', path: abs, insert_line: 0, new_str: next };
  return { command: 'str_replace', path: abs, old_str: current, new_str: next };
}

async function resolveCall(
  step: Exclude<ReplayStep, { type: 'message' }>,
  plan: ReplayPlan,
  dir: string,
  files: WorkspaceFiles,
): Promise<{ name: string; args: Record<string, unknown> }> {
  if (step.type === 'write') return { name: 'file_editor', args: await writeCall(step, mapReplayPath(step.path, plan.roots, dir), files) };
  const args = { ...step.args };
  if (step.tool === 'terminal' && typeof args.command === 'string' && !args.is_input) args.command = mapReplayCommand(args.command, plan.roots, dir);
  if (step.tool === 'file_editor' && typeof args.path === 'string') args.path = mapReplayPath(args.path, plan.roots, dir);
  return { name: step.tool, args };
}

export async function executeReplay(o: ReplayRunOptions): Promise<ReplayRunResult> {
  const { events: s, conversationId: id } = o;
  const byName = new Map(o.tools.map((t) => [t.name, t]));
  const ctx: ToolContext = { conversationId: id, workspaceDir: o.workspaceDir, signal: o.signal, env: o.env, redact: o.redact };
  const result: ReplayRunResult = { actions: 0, finished: false };
  for (const step of o.plan.steps) {
    if (o.signal.aborted) break;
    if (step.type === 'message') {
      const source = step.role === 'user' ? 'user' : 'agent';
      await s.append(id, { kind: 'MessageEvent', source, llm_message: { role: step.role, content: step.content }, replayed: true });
      if (source === 'user') result.finished = false;
      continue;
    }
    const { name, args } = await resolveCall(step, o.plan, o.visibleDir ?? o.workspaceDir, o.files);
    // ids unique in the conversation: later LLM calls (call_1, toolu_…) never collide with them
    const callId = `replay_${crypto.randomUUID().replace(/-/g, '')}`;
    const tool = byName.get(name);
    const parsed = tool ? (tool.parameters as z.ZodType).safeParse(args) : undefined;
    const action = await s.append(id, {
      kind: 'ActionEvent',
      source: 'agent',
      tool_name: name,
      tool_call_id: callId,
      llm_response_id: crypto.randomUUID(),
      thought: step.thought ? [{ type: 'text', text: step.thought }] : [],
      action: tool && parsed?.success ? actionOf(tool, parsed.data) : null,
      tool_call: { id: callId, name, arguments: JSON.stringify(args), origin: 'completion' },
      replayed: true,
    });
    result.actions++;
    const error = (msg: string) => s.append(id, { kind: 'AgentErrorEvent', source: 'agent', tool_name: name, tool_call_id: callId, error: msg });
    if (!tool || !parsed) {
      await error(`The tool ${name} is not available.`);
      continue;
    }
    if (!parsed.success) {
      await error(`Invalid arguments for ${name}: ${parsed.error.issues.map((x) => `${x.path.join('.') || '(root)'}: ${x.message}`).join('; ')}.`);
      continue;
    }
    try {
      const observation = await tool.execute(parsed.data, ctx);
      await s.append(id, { kind: 'ObservationEvent', source: 'environment', tool_name: name, tool_call_id: callId, action_id: action.id, observation });
      result.finished = name === 'finish';
    } catch (err) {
      await error(o.signal.aborted ? 'Tool call interrupted before completion.' : `${name} failed: ${(err as Error)?.message ?? String(err)}`);
    }
  }
  return result;
}
