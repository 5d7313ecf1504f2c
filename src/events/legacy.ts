/**
 * Events written by Parley 0.1.0, brought to today's model as they are read. 0.1.0 stored an
 * ActionEvent's `action` as the bare arguments (no `kind`) and its `tool_call` as
 * `{id, name, arguments, input}` (no `origin`), and a SystemPromptEvent's `tools` as names.
 * Anything already in today's shape passes through untouched (one property check per event).
 */
import { Action, type ParleyEvent } from './schema.js';
import { BUILTIN_TOOLS } from './tool-catalog.js';

/** The action kind of each built-in tool of 0.1.0; any other name was an MCP tool. */
const ACTION_KINDS: Record<string, string> = Object.fromEntries(BUILTIN_TOOLS.map((t) => [t.name, t.actionKind]));
const TOOL_KINDS: Record<string, string> = Object.fromEntries(BUILTIN_TOOLS.map((t) => [t.name, t.kind]));

type Loose = Record<string, unknown>;

export function upgradeEvent(ev: ParleyEvent): ParleyEvent {
  if (ev.kind === 'ActionEvent') {
    const call = ev.tool_call as Loose | undefined;
    if (call && call.origin !== undefined) return ev;
    const raw = ev as unknown as Loose;
    const args = raw.action as Loose | null | undefined;
    const kind = ACTION_KINDS[ev.tool_name];
    // 0.1.0 also recorded arguments that failed the tool's schema; today such a call records no action
    const parsed = args == null ? null : Action.safeParse(kind ? { ...args, kind } : { kind: 'MCPToolAction', data: args });
    const action = parsed?.success ? parsed.data : null;
    const tool_call = {
      id: String(call?.id ?? ev.tool_call_id),
      name: String(call?.name ?? ev.tool_name),
      arguments: String(call?.arguments ?? JSON.stringify(args ?? {})),
      origin: 'completion' as const,
    };
    return { ...ev, action, tool_call } as ParleyEvent;
  }
  if (ev.kind === 'SystemPromptEvent' && ev.tools.length > 0 && typeof ev.tools[0] === 'string') {
    const names = ev.tools as unknown as string[];
    return {
      ...ev,
      tools: names.map((name) => ({
        kind: TOOL_KINDS[name] ?? 'MCPToolDefinition',
        name,
        title: name,
        description: '',
        parameters: {},
        action_type: ACTION_KINDS[name] ?? 'MCPToolAction',
      })),
    };
  }
  return ev;
}
