/** Builds the LLM prompt from the conversation's events. */
import type { ModelMessage } from 'ai';
import type { ContentItem } from '../events/content.js';
import { cacheControlProviderOptions } from '../llm/cache-control.js';
import { unreachable, type EventOf, type Observation, type ParleyEvent } from '../events/schema.js';
import { isoTime } from '../iso-time.js';

interface SystemContext {
  workspaceDir: string;
  /** The agent's processes run in a sandbox (src/sandbox/): the prompt says so only then. */
  sandboxed?: boolean;
  toolNames: string[];
  instructions: string[];
  date?: Date;
}

export function buildSystemPrompt(ctx: SystemContext): string {
  const date = isoTime(ctx.date?.getTime()).slice(0, 10);
  const parts = [
    ctx.sandboxed
      ? 'You are Parley, an autonomous AI software engineer working in a sandboxed workspace: ' +
        'your commands only see this workspace, a private /tmp and home, and the system read-only.'
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

const jsonLength = (ms: ModelMessage[]) => ms.reduce((n, m) => n + JSON.stringify(m).length, 0);

type CallGroup = { actions: EventOf<'ActionEvent'>[]; rendered?: ModelMessage[]; chars?: number };

/**
 * A conversation's events as AI SDK messages, kept incrementally: `add` takes the events appended
 * since the last call, `build` gives the messages. Honors the newest Condensation (its summary
 * replaces the events it forgot), groups parallel tool calls of one response, and gives every tool
 * call exactly one result. A group's messages are rendered once all its calls have results; a
 * Condensation (or a second result for one call) makes the view `stale`: build a new one from the
 * whole log then.
 */
export class MessageView {
  private readonly parts: (ModelMessage | CallGroup)[] = [];
  /** The messages of `parts[0, fixedParts)`, all final (a build copies them instead of walking the parts). */
  private readonly fixed: ModelMessage[] = [];
  private fixedParts = 0;
  private readonly results = new Map<string, ToolResult>();
  private open: EventOf<'ActionEvent'>[] = [];
  private readonly forgotten: Set<string>;
  /** JSON length of the messages rendered for good (for the token estimate). */
  private fixedChars = 0;
  readonly systemNotes: string[] = [];
  /** The text of every user message (for knowledge triggered by keywords). */
  readonly userTexts: string[] = [];
  hasSystemPrompt = false;
  /** A Condensation arrived (or a call was answered twice): this view no longer says what the log says. */
  stale = false;

  private constructor(condensation: EventOf<'Condensation'> | undefined) {
    this.forgotten = new Set(condensation?.forgotten_event_ids ?? []);
    if (condensation?.summary) {
      this.push({
        role: 'user',
        content: [{ type: 'text', text: `Summary of the earlier conversation (older events were condensed):\n${condensation.summary}` }],
      });
    }
  }

  /** The view of a whole log (the newest Condensation in it applies). */
  static of(events: ParleyEvent[]): MessageView {
    let condensation: EventOf<'Condensation'> | undefined;
    for (const e of events) if (e.kind === 'Condensation') condensation = e;
    const view = new MessageView(condensation);
    view.add(events, true);
    return view;
  }

  private push(m: ModelMessage): void {
    this.parts.push(m);
    this.fixedChars += JSON.stringify(m).length;
  }

  private flushCalls(): void {
    if (!this.open.length) return;
    this.parts.push({ actions: this.open });
    this.open = [];
  }

  /** A group's two messages; kept for good (`keep`) once every call of it has its result. */
  private render(g: CallGroup, keep: boolean): ModelMessage[] {
    if (g.rendered) return g.rendered;
    const thought = g.actions
      .map((a) => textOf(a.thought))
      .filter(Boolean)
      .join('\n');
    const messages: ModelMessage[] = [
      {
        role: 'assistant',
        content: [
          ...(thought ? [{ type: 'text' as const, text: thought }] : []),
          ...g.actions.map((a) => ({ type: 'tool-call' as const, toolCallId: a.tool_call_id, toolName: a.tool_name, input: toolCallInput(a) })),
        ],
      },
      {
        role: 'tool',
        content: g.actions.map((a) => ({
          type: 'tool-result' as const,
          toolCallId: a.tool_call_id,
          toolName: a.tool_name,
          output: { type: 'text' as const, value: resultText(this.results.get(a.tool_call_id)) },
        })),
      },
    ];
    // every call answered: these messages are final
    if (keep && g.actions.every((a) => this.results.has(a.tool_call_id))) {
      g.rendered = messages;
      g.chars = jsonLength(messages);
      this.fixedChars += g.chars;
    }
    return messages;
  }

  /** Takes events appended after the ones already taken, in seq order. */
  add(events: ParleyEvent[], whole = false): void {
    for (const e of events) {
      if (e.kind === 'Condensation' && !whole) this.stale = true;
      if (e.kind === 'SystemPromptEvent') this.hasSystemPrompt = true;
      if (e.kind === 'MessageEvent' && e.source === 'user') this.userTexts.push(JSON.stringify(e.llm_message));
      if ((e.kind === 'ObservationEvent' || e.kind === 'AgentErrorEvent' || e.kind === 'UserRejectObservation') && e.tool_call_id) {
        if (this.results.has(e.tool_call_id)) this.stale = true;
        this.results.set(e.tool_call_id, e);
      }
      if (this.forgotten.has(e.id)) continue;
      switch (e.kind) {
        case 'ActionEvent': {
          const last = this.open[this.open.length - 1];
          if (last && last.llm_response_id !== e.llm_response_id) this.flushCalls();
          this.open.push(e);
          break;
        }
        case 'ObservationEvent':
        case 'UserRejectObservation':
          break; // given with its action
        case 'AgentErrorEvent':
          if (e.tool_call_id) break; // given with its action
          this.flushCalls();
          this.push({ role: 'user', content: [{ type: 'text', text: `[Note from the environment] ${e.error}` }] });
          break;
        case 'MessageEvent': {
          this.flushCalls();
          const m = e.llm_message;
          const cache = m.content.some((c) => c.cache_prompt) ? { providerOptions: cacheControlProviderOptions() } : {};
          if (m.role === 'system') this.systemNotes.push(textOf(m.content));
          else if (m.role === 'assistant' || e.source === 'agent') this.push({ role: 'assistant', content: textOf(m.content) || '(no text)', ...cache });
          else if (m.role === 'tool')
            this.push({ role: 'user', content: [{ type: 'text', text: `[Tool output provided by the user]\n${textOf(m.content)}` }], ...cache });
          else this.push({ role: 'user', content: userContent(m.content), ...cache });
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
          this.flushCalls();
          break; // not part of the prompt
        default:
          unreachable(e);
      }
    }
  }

  /** The messages for the next LLM call, and the JSON length of all of them (for the token estimate). */
  build(): { messages: ModelMessage[]; systemNotes: string[]; chars: number } {
    // the parts up to the first group still waiting for a result are final: their messages are kept
    for (; this.fixedParts < this.parts.length; this.fixedParts++) {
      const p = this.parts[this.fixedParts]!;
      if ('actions' in p) {
        this.render(p, true);
        if (!p.rendered) break;
        this.fixed.push(...p.rendered);
      } else this.fixed.push(p);
    }
    const messages = this.fixed.slice();
    let pendingChars = 0;
    const group = (g: CallGroup, keep: boolean) => {
      const ms = this.render(g, keep);
      if (!g.rendered) pendingChars += jsonLength(ms);
      messages.push(...ms);
    };
    for (const p of this.parts.slice(this.fixedParts)) {
      if ('actions' in p) group(p, true);
      else messages.push(p);
    }
    // the newest response's calls: more of them may still come
    if (this.open.length) group({ actions: this.open }, false);
    // as JSON.stringify(messages).length: each message, the commas between them and the brackets
    return { messages, systemNotes: this.systemNotes, chars: this.fixedChars + pendingChars + Math.max(messages.length + 1, 2) };
  }
}

/** Events → AI SDK messages, all at once (see MessageView). */
export function eventsToMessages(events: ParleyEvent[]): { messages: ModelMessage[]; systemNotes: string[] } {
  const { messages, systemNotes } = MessageView.of(events).build();
  return { messages, systemNotes };
}

/** Rough token estimate (4 characters a token), for the context budget: the system text and the messages' JSON length. */
export function estimateTokens(system: string, messageChars: number): number {
  return Math.ceil((system.length + messageChars) / 4);
}
