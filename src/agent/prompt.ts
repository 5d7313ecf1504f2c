/** Builds the LLM prompt from the conversation's events. */
import type { ModelMessage } from 'ai';
import type { ContentItem } from '../events/content.js';
import { cacheControlProviderOptions } from '../llm/cache-control.js';
import { unreachable, type EventOf, type Observation, type ParleyEvent } from '../events/schema.js';

export interface SystemContext {
  workspaceDir: string;
  /** The agent's processes run in a sandbox (src/sandbox/): the prompt says so only then. */
  sandboxed?: boolean;
  toolNames: string[];
  instructions: string[];
  date?: Date;
}

export function buildSystemPrompt(ctx: SystemContext): string {
  const date = (ctx.date ?? new Date()).toISOString().slice(0, 10);
  const parts = [
    ctx.sandboxed
      ? 'You are Parley, an autonomous AI software engineer working in a sandboxed workspace: your commands only see this workspace, a private /tmp and home, and the system read-only.'
      : 'You are Parley, an autonomous AI software engineer working in a workspace on the host machine.',
    `Your working directory is ${ctx.workspaceDir}. Use absolute paths with file_editor.`,
    `Today's date is ${date}.`,
    `Tools available: ${ctx.toolNames.join(', ')}.`,
    'Work step by step: inspect before you change, run commands to verify your work, and keep the user informed.',
    'When the task is complete, call the finish tool with a short summary (or answer in plain text when no tool work is needed).',
    'Never print or reveal secrets or tokens; they appear as <secret_hidden> in outputs.',
  ];
  for (const text of ctx.instructions) if (text.trim()) parts.push(text.trim());
  return parts.join('\n\n');
}

/** An image by URL; a URL that cannot be parsed becomes a note instead of failing the whole step. */
function imagePart(url: string): { type: 'text'; text: string } | { type: 'image'; image: string | URL } {
  if (url.startsWith('data:')) return { type: 'image', image: url };
  try {
    return { type: 'image', image: new URL(url) };
  } catch {
    return { type: 'text', text: `[image omitted: ${JSON.stringify(url.slice(0, 200))} is not a valid URL]` };
  }
}

function userContent(content: ContentItem[]) {
  const parts: ({ type: 'text'; text: string } | { type: 'image'; image: string | URL })[] = [];
  for (const c of content) {
    if (c.type === 'text') parts.push({ type: 'text', text: c.text });
    else for (const url of c.image_urls) parts.push(imagePart(url));
  }
  return parts.length ? parts : [{ type: 'text' as const, text: '(empty message)' }];
}

const textOf = (content: ContentItem[]) => content.map((c) => (c.type === 'text' ? c.text : `[${c.image_urls.length} image(s)]`)).join('\n');

function observationText(obs: Observation): string {
  const text = obs.content.flatMap((c) => (c.type === 'text' ? [c.text] : [])).join('\n');
  return obs.is_error ? `[An error occurred during execution.]\n${text}` : text;
}

/** The arguments of a recorded tool call as the LLM sent them (an object; unparsable JSON is kept as a string field). */
export function toolCallInput(a: EventOf<'ActionEvent'>): Record<string, unknown> {
  if (a.tool_call.arguments.trim() === '') return {};
  try {
    const v: unknown = JSON.parse(a.tool_call.arguments);
    if (typeof v === 'object' && v !== null && !Array.isArray(v)) return v as Record<string, unknown>;
  } catch {
    /* not JSON */
  }
  return { invalid_arguments: a.tool_call.arguments };
}

/** A tool call's result: an observation, or an error that answers it. */
type ToolResult = EventOf<'ObservationEvent'> | EventOf<'AgentErrorEvent'> | EventOf<'UserRejectObservation'>;

function resultText(r: ToolResult | undefined): string {
  if (!r) return 'Tool call interrupted before completion.';
  if (r.kind === 'UserRejectObservation') return `The user rejected this action; it did not run. Reason: ${r.rejection_reason}`;
  return r.kind === 'AgentErrorEvent' ? `[An error occurred during execution.]\n${r.error}` : observationText(r.observation);
}

/**
 * Events → AI SDK messages. Honors the newest Condensation (its summary replaces the events it
 * forgot), groups parallel tool calls of one response, and gives every tool call exactly one result.
 */
export function eventsToMessages(events: ParleyEvent[]): { messages: ModelMessage[]; systemNotes: string[] } {
  let condensation: EventOf<'Condensation'> | undefined;
  const results = new Map<string, ToolResult>();
  for (const e of events) {
    if (e.kind === 'Condensation') condensation = e;
    else if ((e.kind === 'ObservationEvent' || e.kind === 'AgentErrorEvent' || e.kind === 'UserRejectObservation') && e.tool_call_id) results.set(e.tool_call_id, e);
  }
  const forgotten = new Set(condensation?.forgotten_event_ids ?? []);
  const messages: ModelMessage[] = [];
  const systemNotes: string[] = [];
  if (condensation?.summary) {
    messages.push({ role: 'user', content: [{ type: 'text', text: `Summary of the earlier conversation (older events were condensed):\n${condensation.summary}` }] });
  }
  let pendingCalls: EventOf<'ActionEvent'>[] = [];
  const flushCalls = () => {
    if (!pendingCalls.length) return;
    const thought = pendingCalls.map((a) => textOf(a.thought)).filter(Boolean).join('\n');
    messages.push({
      role: 'assistant',
      content: [
        ...(thought ? [{ type: 'text' as const, text: thought }] : []),
        ...pendingCalls.map((a) => ({ type: 'tool-call' as const, toolCallId: a.tool_call_id, toolName: a.tool_name, input: toolCallInput(a) })),
      ],
    });
    messages.push({
      role: 'tool',
      content: pendingCalls.map((a) => ({
        type: 'tool-result' as const,
        toolCallId: a.tool_call_id,
        toolName: a.tool_name,
        output: { type: 'text' as const, value: resultText(results.get(a.tool_call_id)) },
      })),
    });
    pendingCalls = [];
  };
  for (const e of events) {
    if (forgotten.has(e.id)) continue;
    switch (e.kind) {
      case 'ActionEvent': {
        const last = pendingCalls[pendingCalls.length - 1];
        if (last && last.llm_response_id !== e.llm_response_id) flushCalls();
        pendingCalls.push(e);
        break;
      }
      case 'ObservationEvent':
      case 'UserRejectObservation':
        break; // given with its action
      case 'AgentErrorEvent':
        if (e.tool_call_id) break; // given with its action
        flushCalls();
        messages.push({ role: 'user', content: [{ type: 'text', text: `[Note from the environment] ${e.error}` }] });
        break;
      case 'MessageEvent': {
        flushCalls();
        const m = e.llm_message;
        const cache = m.content.some((c) => c.cache_prompt) ? { providerOptions: cacheControlProviderOptions() } : {};
        if (m.role === 'system') systemNotes.push(textOf(m.content));
        else if (m.role === 'assistant' || e.source === 'agent') messages.push({ role: 'assistant', content: textOf(m.content) || '(no text)', ...cache });
        else if (m.role === 'tool') messages.push({ role: 'user', content: [{ type: 'text', text: `[Tool output provided by the user]\n${textOf(m.content)}` }], ...cache });
        else messages.push({ role: 'user', content: userContent(m.content), ...cache });
        break;
      }
      case 'SystemPromptEvent':
      case 'ConversationErrorEvent':
      case 'ConversationStateUpdateEvent':
      case 'PauseEvent':
      case 'InterruptEvent':
      case 'Condensation':
      case 'StreamingDeltaEvent':
      case 'SetupOutputEvent':
      case 'ServerErrorEvent':
        flushCalls();
        break; // not part of the prompt
      default:
        unreachable(e);
    }
  }
  flushCalls();
  return { messages, systemNotes };
}

/** Rough token estimate (4 characters a token), for the context budget. */
export function estimateTokens(system: string, messages: ModelMessage[]): number {
  return Math.ceil((system.length + JSON.stringify(messages).length) / 4);
}
