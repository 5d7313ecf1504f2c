/**
 * The answer half of the own Chat Completions client (chat-completions.ts): an SSE response read into
 * the parts of one step. The lines are split by hand (SseEvents) and only the fields this client uses
 * are checked, by hand (ChunkReader): a chunk that is not JSON, or whose used fields have the wrong type,
 * is a clear `StreamInterrupted` error, retryable as the SDK's parse errors were. Text, tool calls (their
 * arguments streamed in pieces, ids, order), usage (cached prompt tokens included), finish reason and
 * response id come out as the AI SDK's provider reported them for the same bytes.
 */
import type http from 'node:http';
import { StringDecoder } from 'node:string_decoder';
import { ProviderError, classifyError, interruptedStream } from './errors.js';
import type { LlmResponse } from './types.js';

/** What one streamed step yields to the retry loop (provider.ts reads the SDK's stream into the same parts). */
export type StepPart =
  | { type: 'text'; delta: string }
  | { type: 'tool-call'; id: string; name: string; input: string }
  | { type: 'response-id'; id: string }
  | { type: 'finish'; finishReason: string; usage: LlmResponse['usage'] };

export interface ClientContext {
  apiKey?: string;
}

interface ToolCallDelta {
  index?: number;
  id?: string;
  name?: string;
  arguments?: string;
}

interface AssembledCall {
  id: string;
  name: string;
  args: string;
  index: number | undefined;
  sequence: number;
}

function nonBlank(s: string | undefined): string | undefined {
  return s !== undefined && s.trim() !== '' ? s : undefined;
}

function isCompleteJson(text: string): boolean {
  try {
    JSON.parse(text);
    return true;
  } catch {
    return false;
  }
}

/**
 * Puts tool calls together from their deltas, as servers send them: by `index` (OpenAI, vLLM); arguments
 * that come before the name are kept until it comes; a named delta on an index already taken starts a new
 * call when it carries another id or the call there is already complete JSON (servers that number every call
 * 0); without an index (Gemini) by id, else a named delta starts a call and an unnamed one continues the last.
 * Ids that are missing or repeated are made up. The calls come out in index order (else arrival order).
 * One difference from the AI SDK, on purpose: a call opened with a new id on an index already taken, with
 * empty arguments, is a new call here; the SDK appended its arguments to the call before it.
 */
class ToolCallAssembler {
  private readonly calls: AssembledCall[] = [];
  private readonly byIndex = new Map<number, AssembledCall>();
  private readonly pending = new Map<number, { id?: string; args: string }>();
  private readonly usedIds = new Set<string>();

  add(d: ToolCallDelta): void {
    const name = nonBlank(d.name);
    const id = nonBlank(d.id);
    if (d.index !== undefined) {
      const at = this.byIndex.get(d.index);
      if (at && !(name && ((id && id !== at.id) || (/^\s*[[{]/.test(d.arguments ?? '') && isCompleteJson(at.args))))) {
        at.args += d.arguments ?? '';
        return;
      }
      if (!name) {
        const p = this.pending.get(d.index) ?? { args: '' };
        p.id ??= id;
        p.args += d.arguments ?? '';
        this.pending.set(d.index, p);
        return;
      }
      const p = this.pending.get(d.index);
      this.pending.delete(d.index);
      this.byIndex.set(d.index, this.start(id ?? p?.id, name, (p?.args ?? '') + (d.arguments ?? ''), d.index));
      return;
    }
    const known = id !== undefined ? this.calls.find((c) => c.id === id) : undefined;
    if (known) known.args += d.arguments ?? '';
    else if (name) this.start(id, name, d.arguments ?? '', undefined);
    else if (this.calls.length > 0) this.calls[this.calls.length - 1]!.args += d.arguments ?? '';
    else throw new Error('a tool call delta without a function name');
  }

  /** The finished calls (throws when arguments came for an index whose call never got a name). */
  finish(): { id: string; name: string; input: string }[] {
    if (this.pending.size > 0) throw new Error('a streamed tool call without a function name');
    const ordered = this.calls.every((c) => c.index !== undefined)
      ? [...this.calls].sort((a, b) => a.index! - b.index! || a.sequence - b.sequence)
      : this.calls;
    return ordered.map((c) => ({ id: c.id, name: c.name, input: c.args }));
  }

  private start(wireId: string | undefined, name: string, args: string, index: number | undefined): AssembledCall {
    let id = wireId;
    while (id === undefined || this.usedIds.has(id)) id = `call_${Math.random().toString(36).slice(2, 12)}`;
    this.usedIds.add(id);
    const call = { id, name, args, index, sequence: this.calls.length };
    this.calls.push(call);
    return call;
  }
}

const FINISH_REASONS: Record<string, string> = {
  stop: 'stop',
  length: 'length',
  content_filter: 'content-filter',
  function_call: 'tool-calls',
  tool_calls: 'tool-calls',
};

type Json = Record<string, unknown>;

const isObject = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);
const isNullish = (v: unknown): v is null | undefined => v === null || v === undefined;

class MalformedChunk extends Error {}

/** `v` when it is a string (or nullish: undefined); else the chunk is malformed. */
function optString(v: unknown, what: string): string | undefined {
  if (isNullish(v)) return undefined;
  if (typeof v !== 'string') throw new MalformedChunk(`${what} is not a string`);
  return v;
}

function optNumber(v: unknown, what: string): number | undefined {
  if (isNullish(v)) return undefined;
  if (typeof v !== 'number') throw new MalformedChunk(`${what} is not a number`);
  return v;
}

function optObject(v: unknown, what: string): Json | undefined {
  if (isNullish(v)) return undefined;
  if (!isObject(v)) throw new MalformedChunk(`${what} is not an object`);
  return v;
}

/** The usage numbers as the SDK reported them: zeros for missing counts once a usage object came. */
function usageOf(u: Json): LlmResponse['usage'] {
  const details = optObject(u.prompt_tokens_details, 'usage.prompt_tokens_details');
  return {
    inputTokens: optNumber(u.prompt_tokens, 'usage.prompt_tokens') ?? 0,
    outputTokens: optNumber(u.completion_tokens, 'usage.completion_tokens') ?? 0,
    cacheReadTokens: optNumber(details?.cached_tokens, 'usage.prompt_tokens_details.cached_tokens') ?? 0,
  };
}

/** The text of a delta's `content`: a string, or an array of parts whose `text` parts count. */
function contentText(content: unknown): string {
  if (isNullish(content)) return '';
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) throw new MalformedChunk('delta.content is neither a string nor an array');
  let text = '';
  for (const part of content) {
    if (!isObject(part) || typeof part.type !== 'string') throw new MalformedChunk('a delta.content part has no type');
    if (part.type === 'text' && typeof part.text === 'string') text += part.text;
  }
  return text;
}

function toolCallDelta(v: unknown): ToolCallDelta {
  if (!isObject(v)) throw new MalformedChunk('a tool call delta is not an object');
  const fn = optObject(v.function, 'tool_calls[].function');
  const d: ToolCallDelta = {};
  const index = optNumber(v.index, 'tool_calls[].index');
  if (index !== undefined) d.index = index;
  const id = optString(v.id, 'tool_calls[].id');
  if (id !== undefined) d.id = id;
  const name = optString(fn?.name, 'tool_calls[].function.name');
  if (name !== undefined) d.name = name;
  const args = optString(fn?.arguments, 'tool_calls[].function.arguments');
  if (args !== undefined) d.arguments = args;
  return d;
}

/** The chunks of one answer, checked and turned into step parts (`out`, taken by the reader after each piece). */
class ChunkReader {
  readonly out: StepPart[] = [];
  private readonly calls = new ToolCallAssembler();
  private finishReason: string | undefined;
  private usage: LlmResponse['usage'] = {};
  private first = true;

  constructor(private readonly ctx: ClientContext) {}

  malformed(reason: string, text: string): ProviderError {
    const quoted = text.length > 200 ? `${text.slice(0, 200)}…` : text;
    return new ProviderError(interruptedStream(`malformed chunk from the provider (${reason}): ${quoted}`, { apiKey: this.ctx.apiKey, streamStarted: true }));
  }

  /** One SSE event's data: a chunk (its parts go to `out`), `[DONE]`, or an error. */
  event(text: string): void {
    if (text === '[DONE]') return;
    let chunk: unknown;
    try {
      chunk = JSON.parse(text);
    } catch (err) {
      throw this.malformed(`not JSON: ${(err as Error).message}`, text);
    }
    try {
      this.chunk(chunk);
    } catch (err) {
      if (err instanceof ProviderError) throw err;
      throw this.malformed((err as Error).message, text);
    }
  }

  private chunk(chunk: unknown): void {
    if (!isObject(chunk)) throw new MalformedChunk('not an object');
    if ('error' in chunk) {
      if (!isObject(chunk.error) && !Array.isArray(chunk.choices)) throw new MalformedChunk('an error that is not an object');
      throw new ProviderError(classifyError(chunk.error, { apiKey: this.ctx.apiKey, streamStarted: true }));
    }
    if (!Array.isArray(chunk.choices)) throw new MalformedChunk('no choices array');
    if (this.first) {
      this.first = false;
      const id = optString(chunk.id, 'id');
      if (id) this.out.push({ type: 'response-id', id });
    }
    const u = optObject(chunk.usage, 'usage');
    if (u) this.usage = usageOf(u);
    const choice: unknown = chunk.choices[0];
    if (choice === undefined) return;
    if (!isObject(choice)) throw new MalformedChunk('choices[0] is not an object');
    const reason = optString(choice.finish_reason, 'finish_reason');
    if (reason !== undefined) this.finishReason = FINISH_REASONS[reason] ?? 'other';
    const delta = optObject(choice.delta, 'delta');
    if (!delta) return;
    const t = contentText(delta.content);
    if (t !== '') this.out.push({ type: 'text', delta: t });
    if (!isNullish(delta.tool_calls)) {
      if (!Array.isArray(delta.tool_calls)) throw new MalformedChunk('delta.tool_calls is not an array');
      for (const d of delta.tool_calls) this.calls.add(toolCallDelta(d));
    }
  }

  /** The stream ended: its tool calls, then the finish (or the error of a stream that ended without one). */
  end(): StepPart[] {
    let finished: { id: string; name: string; input: string }[];
    try {
      finished = this.calls.finish();
    } catch (err) {
      throw this.malformed((err as Error).message, '(end of stream)');
    }
    if (this.finishReason === undefined) {
      throw new ProviderError(interruptedStream('Response stream ended without a finish reason.', { apiKey: this.ctx.apiKey, streamStarted: true }));
    }
    return [...finished.map((c): StepPart => ({ type: 'tool-call', ...c })), { type: 'finish', finishReason: this.finishReason, usage: this.usage }];
  }
}

/** Server-sent events from the pieces of a body: each complete event's data goes to `onEvent`. */
class SseEvents {
  private readonly decoder = new StringDecoder('utf8');
  private buf = '';
  private data: string[] = [];
  private bom = true;

  constructor(private readonly onEvent: (data: string) => void) {}

  piece(bytes: Buffer): void {
    this.buf += this.decoder.write(bytes);
    if (this.bom && this.buf.length > 0) {
      this.bom = false;
      if (this.buf.charCodeAt(0) === 0xfeff) this.buf = this.buf.slice(1);
    }
    this.lines(false);
  }

  /** The body ended: its last lines (an event not closed by an empty line is dropped, as SSE readers do). */
  end(): void {
    this.buf += this.decoder.end();
    this.lines(true);
  }

  /** Takes the complete lines of `buf` (all of them at the end of the body). */
  private lines(end: boolean): void {
    const buf = this.buf;
    let pos = 0;
    let lf = buf.indexOf('\n');
    let cr = buf.indexOf('\r');
    for (;;) {
      if (lf !== -1 && lf < pos) lf = buf.indexOf('\n', pos);
      if (cr !== -1 && cr < pos) cr = buf.indexOf('\r', pos);
      const eol = lf === -1 ? cr : cr === -1 ? lf : Math.min(lf, cr);
      if (eol === -1) break;
      let next = eol + 1;
      if (eol === cr) {
        if (eol + 1 === buf.length && !end) break; // a \r\n may be split between two pieces
        if (buf.charCodeAt(eol + 1) === 10) next = eol + 2;
      }
      const line = buf.slice(pos, eol);
      pos = next;
      if (line === '') {
        if (this.data.length > 0) {
          const text = this.data.join('\n');
          this.data = [];
          this.onEvent(text);
        }
      } else if (line.startsWith('data:')) {
        this.data.push(line.charCodeAt(5) === 32 ? line.slice(6) : line.slice(5));
      } else if (line === 'data') {
        this.data.push('');
      } // comments (':'), event:, id:, retry: and other fields carry nothing this client uses
    }
    this.buf = pos === 0 ? buf : buf.slice(pos);
  }
}

/** Reads one SSE response into step parts. */
export async function* readStream(res: http.IncomingMessage, ctx: ClientContext, alive: () => void, phase?: (p: string) => void): AsyncGenerator<StepPart> {
  const chunks = new ChunkReader(ctx);
  const sse = new SseEvents((data) => chunks.event(data));
  const body = (res as AsyncIterable<Buffer>)[Symbol.asyncIterator]();
  try {
    for (;;) {
      let next: IteratorResult<Buffer>;
      try {
        next = await body.next();
      } catch (err) {
        throw new Error(`the response stream broke off: ${(err as Error).message}`, { cause: err });
      }
      if (next.done) break;
      phase?.('LLM answer chunk read');
      alive();
      sse.piece(next.value);
      if (chunks.out.length > 0) {
        yield* chunks.out;
        chunks.out.length = 0;
      }
    }
  } finally {
    // left early (a callback threw, the step was abandoned): close the response (no-op once it ended)
    await body.return?.();
  }
  phase?.('LLM answer ended');
  sse.end();
  yield* chunks.out;
  yield* chunks.end();
}
