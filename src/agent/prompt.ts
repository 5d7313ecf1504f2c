/** Builds the LLM prompt from the conversation's events. */
import type { ModelMessage } from 'ai';
import type { ParleyEvent } from '../events/types.js';

export interface SystemContext {
  workspaceDir: string;
  toolNames: string[];
  instructions: string[];
  date?: Date;
}

export function buildSystemPrompt(ctx: SystemContext): string {
  const date = (ctx.date ?? new Date()).toISOString().slice(0, 10);
  const parts = [
    'You are Parley, an autonomous AI software engineer working in a sandboxed workspace.',
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

type Content = { type: 'text'; text: string; cache_prompt?: boolean } | { type: 'image'; image_urls: string[]; cache_prompt?: boolean };

/** An image by URL; a URL that cannot be parsed becomes a note instead of failing the whole step. */
function imagePart(url: string): { type: 'text'; text: string } | { type: 'image'; image: string | URL } {
  if (url.startsWith('data:')) return { type: 'image', image: url };
  try {
    return { type: 'image', image: new URL(url) };
  } catch {
    return { type: 'text', text: `[image omitted: ${JSON.stringify(url.slice(0, 200))} is not a valid URL]` };
  }
}

function userContent(content: Content[]) {
  const parts: ({ type: 'text'; text: string } | { type: 'image'; image: string | URL })[] = [];
  for (const c of content) {
    if (c.type === 'text') parts.push({ type: 'text', text: c.text });
    else for (const url of c.image_urls) parts.push(imagePart(url));
  }
  return parts.length ? parts : [{ type: 'text' as const, text: '(empty message)' }];
}

const textOf = (content: Content[] | undefined) =>
  (content ?? []).map((c) => (c.type === 'text' ? c.text : `[${c.image_urls.length} image(s)]`)).join('\n');

function observationText(obs: Record<string, unknown>): string {
  const text = ((obs.content as Content[] | undefined) ?? []).filter((c) => c.type === 'text').map((c) => (c as { text: string }).text).join('\n');
  return obs.is_error ? `[An error occurred during execution.]\n${text}` : text;
}

const CACHE = { anthropic: { cacheControl: { type: 'ephemeral' } } } as const;

/**
 * Events → AI SDK messages. Honors the newest Condensation (its summary replaces the events it
 * forgot), groups parallel tool calls of one response, and gives every tool call exactly one result.
 */
export function eventsToMessages(events: ParleyEvent[]): { messages: ModelMessage[]; systemNotes: string[] } {
  const condensation = [...events].reverse().find((e) => e.kind === 'Condensation');
  const forgotten = new Set((condensation?.forgotten_event_ids as string[] | undefined) ?? []);
  const messages: ModelMessage[] = [];
  const systemNotes: string[] = [];
  if (condensation?.summary) {
    messages.push({ role: 'user', content: [{ type: 'text', text: `Summary of the earlier conversation (older events were condensed):\n${String(condensation.summary)}` }] });
  }
  const results = new Map<string, ParleyEvent>();
  for (const e of events) {
    if ((e.kind === 'ObservationEvent' || e.kind === 'AgentErrorEvent') && e.tool_call_id) results.set(String(e.tool_call_id), e);
  }
  let pendingCalls: ParleyEvent[] = [];
  const flushCalls = () => {
    if (!pendingCalls.length) return;
    const thought = pendingCalls.map((a) => textOf(a.thought as Content[])).filter(Boolean).join('\n');
    messages.push({
      role: 'assistant',
      content: [
        ...(thought ? [{ type: 'text' as const, text: thought }] : []),
        ...pendingCalls.map((a) => ({ type: 'tool-call' as const, toolCallId: String(a.tool_call_id), toolName: String(a.tool_name), input: (a.tool_call as { input?: unknown })?.input ?? a.action ?? {} })),
      ],
    });
    messages.push({
      role: 'tool',
      content: pendingCalls.map((a) => {
        const r = results.get(String(a.tool_call_id));
        const value = !r
          ? 'Tool call interrupted before completion.'
          : r.kind === 'AgentErrorEvent'
            ? `[An error occurred during execution.]\n${String(r.error)}`
            : observationText(r.observation as Record<string, unknown>);
        return { type: 'tool-result' as const, toolCallId: String(a.tool_call_id), toolName: String(a.tool_name), output: { type: 'text' as const, value } };
      }),
    });
    pendingCalls = [];
  };
  for (const e of events) {
    if (forgotten.has(e.id)) continue;
    if (e.kind === 'ActionEvent') {
      const last = pendingCalls[pendingCalls.length - 1];
      if (last && last.llm_response_id !== e.llm_response_id) flushCalls();
      pendingCalls.push(e);
      continue;
    }
    if (e.kind === 'ObservationEvent' || (e.kind === 'AgentErrorEvent' && e.tool_call_id)) continue;
    flushCalls();
    if (e.kind === 'MessageEvent') {
      const m = e.llm_message as { role: string; content: Content[] };
      const cache = m.content?.some((c) => c.cache_prompt) ? { providerOptions: CACHE } : {};
      if (m.role === 'system') systemNotes.push(textOf(m.content));
      else if (m.role === 'assistant' || e.source === 'agent') messages.push({ role: 'assistant', content: textOf(m.content) || '(no text)', ...cache });
      else if (m.role === 'tool') messages.push({ role: 'user', content: [{ type: 'text', text: `[Tool output provided by the user]\n${textOf(m.content)}` }], ...cache });
      else messages.push({ role: 'user', content: userContent(m.content), ...cache });
    } else if (e.kind === 'AgentErrorEvent') {
      messages.push({ role: 'user', content: [{ type: 'text', text: `[Note from the environment] ${String(e.error)}` }] });
    }
  }
  flushCalls();
  return { messages, systemNotes };
}

/** Rough token estimate (4 characters a token), for the context budget. */
export function estimateTokens(system: string, messages: ModelMessage[]): number {
  return Math.ceil((system.length + JSON.stringify(messages).length) / 4);
}
