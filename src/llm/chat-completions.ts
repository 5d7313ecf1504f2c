/**
 * A hand-written streaming client for OpenAI-compatible Chat Completions (`openai/<model>` with a base
 * URL: vLLM, Ollama, LiteLLM, OpenRouter, …), used instead of the AI SDK provider's `doStream`.
 *
 * Why hand-written: measured (`npx tsx scripts/bench-steps.ts --hello`, daemon under --cpu-prof), the AI
 * SDK's handling of one step was most of the daemon's own time per agent step: 2.3–5.1 ms of main-thread
 * time after the last byte of the answer (a zod parse of every SSE chunk, six chained web streams, a
 * character-by-character scan of every tool-call argument, undici's fetch), plus converting and
 * re-serialising the whole history into the request body at every step (zod-parsed provider options,
 * `JSON.stringify` of every message again). Both clients in one run (`bench-steps.ts --llm-client`, load
 * average 18): answer's last byte → result 1.19 ms with the SDK, 0.28 ms here; CPU per step 2.66 → 0.89 ms
 * (the scripted server's included). Here:
 * - the request body is assembled from each prompt message's JSON, made once per message (the prompt
 *   converter hands in the same message objects step after step), so a step serialises only what is new;
 * - the answer is read from node:http's socket stream with a small SSE line parser, and only the fields
 *   this client uses are checked, by hand (a chunk that is not JSON, or whose used fields have the wrong
 *   type, is a clear `StreamInterrupted` error, retryable as the SDK's parse errors were).
 *
 * It produces what the SDK produced for the same server: the same request body (byte for byte, tested
 * against the SDK), the same text, tool calls (arguments streamed in pieces, ids, order), usage (cached
 * prompt tokens included), finish reason and response id; HTTP errors, in-stream errors, dropped streams
 * and network failures end up in the same `ProviderError` codes through src/llm/errors.ts. The retry loop,
 * idle timeout and abort stay in provider.ts. Anthropic and OpenAI's Responses API still go through the SDK.
 *
 * Why one file of this size (~620 lines): it is one protocol's client, the request it writes and the stream
 * it reads, held byte for byte to the SDK's by one test file; the halves change together.
 */
import http from 'node:http';
import https from 'node:https';
import { StringDecoder } from 'node:string_decoder';
import { UnsupportedFunctionalityError } from 'ai';
import { ProviderError, classifyError, classifyHttpError, interruptedStream } from './errors.js';
import type { SdkPrompt, SdkTools } from './prompt.js';
import type { LlmResponse } from './types.js';

/** What one streamed step yields to the retry loop (provider.ts reads the SDK's stream into the same parts). */
export type StepPart =
  | { type: 'text'; delta: string }
  | { type: 'tool-call'; id: string; name: string; input: string }
  | { type: 'response-id'; id: string }
  | { type: 'finish'; finishReason: string; usage: LlmResponse['usage'] };

export interface ChatCompletionsOptions {
  /** The server's base URL, ending in `/v1` (as `LLM_BASE_URL`). */
  baseUrl: string;
  modelId: string;
  apiKey?: string;
  headers?: Record<string, string>;
  maxOutputTokens?: number;
}

export interface ChatStepRequest {
  prompt: SdkPrompt;
  tools?: SdkTools;
  signal: AbortSignal;
  /** Called for every piece of the response body (the caller's idle timer). */
  alive: () => void;
  /** The turn trace (LlmRequest.onPhase). */
  phase?: (phase: string) => void;
}

type SdkMessage = SdkPrompt[number];
type UserPart = Extract<SdkMessage, { role: 'user' }>['content'][number];
type FilePart = Extract<UserPart, { type: 'file' }>;

const USER_AGENT = `parley (node.js/${process.version})`;
/** Redirects (307/308) followed for one request, as fetch allowed. */
const MAX_REDIRECTS = 20;
/** How long a TCP connection may take to open (undici's fetch, which the AI SDK used, waits as long). */
const CONNECT_TIMEOUT_MS = 10_000;
/** Of an error response's body, at most this much is read (and so quoted in the error). */
const MAX_ERROR_BODY = 256 * 1024;

// ---------------------------------------------------------------------------------------------------------
// The request body

/** `providerOptions.openaiCompatible` of a message or part: extra fields the provider puts into its JSON. */
function extraFields(o: { providerOptions?: Record<string, unknown> } | undefined): Record<string, unknown> {
  const extra = o?.providerOptions?.openaiCompatible;
  return extra && typeof extra === 'object' ? (extra as Record<string, unknown>) : {};
}

function base64(data: Uint8Array | string): string {
  return typeof data === 'string' ? data : Buffer.from(data.buffer, data.byteOffset, data.byteLength).toString('base64');
}

function userFilePart(part: FilePart): Record<string, unknown> {
  const extra = extraFields(part);
  const data = part.data;
  if (part.mediaType.startsWith('image/')) {
    const mediaType = part.mediaType === 'image/*' ? 'image/jpeg' : part.mediaType;
    return { type: 'image_url', image_url: { url: data instanceof URL ? data.toString() : `data:${mediaType};base64,${base64(data)}` }, ...extra };
  }
  if (part.mediaType.startsWith('audio/')) {
    if (data instanceof URL) throw new UnsupportedFunctionalityError({ functionality: 'audio file parts with URLs' });
    const format = part.mediaType === 'audio/wav' ? 'wav' : part.mediaType === 'audio/mp3' || part.mediaType === 'audio/mpeg' ? 'mp3' : null;
    if (format === null) throw new UnsupportedFunctionalityError({ functionality: `audio media type ${part.mediaType}` });
    return { type: 'input_audio', input_audio: { data: base64(data), format }, ...extra };
  }
  if (part.mediaType === 'application/pdf') {
    if (data instanceof URL) throw new UnsupportedFunctionalityError({ functionality: 'PDF file parts with URLs' });
    return { type: 'file', file: { filename: part.filename ?? 'document.pdf', file_data: `data:application/pdf;base64,${base64(data)}` }, ...extra };
  }
  if (part.mediaType.startsWith('text/')) {
    const text =
      data instanceof URL ? data.toString() : typeof data === 'string' ? Buffer.from(data, 'base64').toString('utf8') : new TextDecoder().decode(data);
    return { type: 'text', text, ...extra };
  }
  throw new UnsupportedFunctionalityError({ functionality: `file part media type ${part.mediaType}` });
}

/** One prompt message as Chat Completions messages (a tool message gives one per result). */
function chatMessages(message: SdkMessage): Record<string, unknown>[] {
  switch (message.role) {
    case 'system':
      return [{ role: 'system', content: message.content, ...extraFields(message) }];
    case 'user': {
      const first = message.content[0];
      if (message.content.length === 1 && first?.type === 'text') return [{ role: 'user', content: first.text, ...extraFields(first) }];
      const content = message.content.map((part) => (part.type === 'text' ? { type: 'text', text: part.text, ...extraFields(part) } : userFilePart(part)));
      return [{ role: 'user', content, ...extraFields(message) }];
    }
    case 'assistant': {
      let text = '';
      let reasoning = '';
      const toolCalls: Record<string, unknown>[] = [];
      for (const part of message.content) {
        if (part.type === 'text') text += part.text;
        else if (part.type === 'reasoning') reasoning += part.text;
        else if (part.type === 'tool-call') {
          const signature = (part.providerOptions?.google as { thoughtSignature?: unknown } | undefined)?.thoughtSignature;
          toolCalls.push({
            id: part.toolCallId,
            type: 'function',
            function: { name: part.toolName, arguments: JSON.stringify(part.input) },
            ...extraFields(part),
            ...(signature ? { extra_content: { google: { thought_signature: String(signature) } } } : {}),
          });
        }
      }
      return [
        {
          role: 'assistant',
          content: toolCalls.length > 0 ? text || null : text,
          ...(reasoning.length > 0 ? { reasoning_content: reasoning } : {}),
          tool_calls: toolCalls.length > 0 ? toolCalls : undefined,
          ...extraFields(message),
        },
      ];
    }
    case 'tool': {
      const out: Record<string, unknown>[] = [];
      for (const part of message.content) {
        if (part.type !== 'tool-result') continue;
        const output = part.output;
        let content: unknown;
        if (output.type === 'text' || output.type === 'error-text') content = output.value;
        else if (output.type === 'execution-denied') content = output.reason ?? 'Tool call execution denied.';
        else content = JSON.stringify(output.value);
        out.push({ role: 'tool', tool_call_id: part.toolCallId, content, ...extraFields(part) });
      }
      return out;
    }
  }
}

/** Request bodies for one model: each prompt message's JSON is made once (by identity) and kept. */
class RequestBodies {
  private readonly messageJson = new WeakMap<SdkMessage, string>();
  private readonly toolsJson = new WeakMap<SdkTools, string>();
  private readonly head: string;

  constructor(modelId: string, maxOutputTokens: number | undefined) {
    this.head = `{"model":${JSON.stringify(modelId)}${maxOutputTokens !== undefined ? `,"max_tokens":${JSON.stringify(maxOutputTokens)}` : ''},"messages":[`;
  }

  /** The same JSON text as the AI SDK's openai-compatible provider sends for this prompt (stream: true, usage asked for). */
  body(prompt: SdkPrompt, tools: SdkTools | undefined): string {
    const parts: string[] = [];
    for (const message of prompt) {
      let json = this.messageJson.get(message);
      if (json === undefined) {
        json = chatMessages(message)
          .map((m) => JSON.stringify(m))
          .join(',');
        this.messageJson.set(message, json);
      }
      if (json !== '') parts.push(json);
    }
    let toolPart = '';
    if (tools && tools.length > 0) {
      let json = this.toolsJson.get(tools);
      if (json === undefined) {
        const list = tools.flatMap((t) =>
          t.type === 'function'
            ? [
                {
                  type: 'function',
                  function: { name: t.name, description: t.description, parameters: t.inputSchema, ...(t.strict != null ? { strict: t.strict } : {}) },
                },
              ]
            : [],
        );
        json = `,"tools":${JSON.stringify(list)},"tool_choice":"auto"`;
        this.toolsJson.set(tools, json);
      }
      toolPart = json;
    }
    return `${this.head}${parts.join(',')}]${toolPart},"stream":true,"stream_options":{"include_usage":true}}`;
  }
}

// ---------------------------------------------------------------------------------------------------------
// The answer: tool calls assembled from their streamed pieces

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

// ---------------------------------------------------------------------------------------------------------
// The answer: SSE events and the chunks in them

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

interface ClientContext {
  apiKey?: string;
}

/** Reads one SSE response into step parts. */
async function* readStream(res: http.IncomingMessage, ctx: ClientContext, alive: () => void, phase?: (p: string) => void): AsyncGenerator<StepPart> {
  const decoder = new StringDecoder('utf8');
  const calls = new ToolCallAssembler();
  let finishReason: string | undefined;
  let usage: LlmResponse['usage'] = {};
  let first = true;
  let buf = '';
  let data: string[] = [];
  const out: StepPart[] = [];

  const malformed = (reason: string, text: string) =>
    new ProviderError(
      interruptedStream(`malformed chunk from the provider (${reason}): ${text.length > 200 ? `${text.slice(0, 200)}…` : text}`, {
        apiKey: ctx.apiKey,
        streamStarted: true,
      }),
    );

  /** One SSE event's data: a chunk (its parts go to `out`), `[DONE]`, or an error. */
  const onEvent = (text: string) => {
    if (text === '[DONE]') return;
    let chunk: unknown;
    try {
      chunk = JSON.parse(text);
    } catch (err) {
      throw malformed(`not JSON: ${(err as Error).message}`, text);
    }
    try {
      if (!isObject(chunk)) throw new MalformedChunk('not an object');
      if ('error' in chunk) {
        if (!isObject(chunk.error) && !Array.isArray(chunk.choices)) throw new MalformedChunk('an error that is not an object');
        throw new ProviderError(classifyError(chunk.error, { apiKey: ctx.apiKey, streamStarted: true }));
      }
      if (!Array.isArray(chunk.choices)) throw new MalformedChunk('no choices array');
      if (first) {
        first = false;
        const id = optString(chunk.id, 'id');
        if (id) out.push({ type: 'response-id', id });
      }
      const u = optObject(chunk.usage, 'usage');
      if (u) usage = usageOf(u);
      const choice: unknown = chunk.choices[0];
      if (choice === undefined) return;
      if (!isObject(choice)) throw new MalformedChunk('choices[0] is not an object');
      const reason = optString(choice.finish_reason, 'finish_reason');
      if (reason !== undefined) finishReason = FINISH_REASONS[reason] ?? 'other';
      const delta = optObject(choice.delta, 'delta');
      if (!delta) return;
      const t = contentText(delta.content);
      if (t !== '') out.push({ type: 'text', delta: t });
      if (!isNullish(delta.tool_calls)) {
        if (!Array.isArray(delta.tool_calls)) throw new MalformedChunk('delta.tool_calls is not an array');
        for (const d of delta.tool_calls) calls.add(toolCallDelta(d));
      }
    } catch (err) {
      if (err instanceof MalformedChunk) throw malformed(err.message, text);
      if (err instanceof ProviderError) throw err;
      throw malformed((err as Error).message, text);
    }
  };

  /** Takes the complete lines of `buf` (all of them at the end of the body). */
  const onText = (end: boolean) => {
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
        if (data.length > 0) {
          const text = data.join('\n');
          data = [];
          onEvent(text);
        }
      } else if (line.startsWith('data:')) {
        data.push(line.charCodeAt(5) === 32 ? line.slice(6) : line.slice(5));
      } else if (line === 'data') {
        data.push('');
      } // comments (':'), event:, id:, retry: and other fields carry nothing this client uses
    }
    buf = pos === 0 ? buf : buf.slice(pos);
  };

  let bom = true;
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
      buf += decoder.write(next.value);
      if (bom && buf.length > 0) {
        bom = false;
        if (buf.charCodeAt(0) === 0xfeff) buf = buf.slice(1);
      }
      onText(false);
      if (out.length > 0) {
        yield* out;
        out.length = 0;
      }
    }
  } finally {
    // left early (a callback threw, the step was abandoned): close the response (no-op once it ended)
    await body.return?.();
  }
  phase?.('LLM answer ended');
  buf += decoder.end();
  onText(true); // an event not closed by an empty line is dropped, as SSE readers do
  yield* out;
  let finished: { id: string; name: string; input: string }[];
  try {
    finished = calls.finish();
  } catch (err) {
    throw malformed((err as Error).message, '(end of stream)');
  }
  for (const c of finished) yield { type: 'tool-call', ...c };
  if (finishReason === undefined) {
    throw new ProviderError(interruptedStream('Response stream ended without a finish reason.', { apiKey: ctx.apiKey, streamStarted: true }));
  }
  yield { type: 'finish', finishReason, usage };
}

// ---------------------------------------------------------------------------------------------------------
// HTTP

function headerRecord(res: http.IncomingMessage): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(res.headers)) if (v !== undefined) out[k] = Array.isArray(v) ? v.join(', ') : v;
  return out;
}

async function readErrorBody(res: http.IncomingMessage): Promise<string> {
  const pieces: Buffer[] = [];
  let size = 0;
  for await (const piece of res as AsyncIterable<Buffer>) {
    if (size < MAX_ERROR_BODY) pieces.push(piece);
    size += piece.length;
  }
  return Buffer.concat(pieces).subarray(0, MAX_ERROR_BODY).toString('utf8');
}

/** The error of a non-2xx answer, classified as errors.ts classifies the SDK's APICallError. */
async function httpError(res: http.IncomingMessage, ctx: ClientContext): Promise<ProviderError> {
  const status = res.statusCode ?? 0;
  const body = await readErrorBody(res).catch(() => '');
  let message = res.statusMessage ?? '';
  if (body.trim() !== '') {
    try {
      const parsed: unknown = JSON.parse(body);
      const m = isObject(parsed) && isObject(parsed.error) ? parsed.error.message : undefined;
      if (typeof m === 'string') message = m;
    } catch {
      // not JSON: the status text stands, the body is quoted
    }
  }
  return new ProviderError(classifyHttpError(status, message, body, headerRecord(res), { apiKey: ctx.apiKey, streamStarted: false }));
}

interface Target {
  https: boolean;
  hostname: string;
  port: string;
  path: string;
}

function targetOf(url: URL): Target {
  return { https: url.protocol === 'https:', hostname: url.hostname.replace(/^\[(.*)\]$/, '$1'), port: url.port, path: url.pathname + url.search };
}

/** Where a redirect points, when it is an http(s) URL. */
function redirectTarget(location: string | undefined, from: URL): URL | undefined {
  if (!location) return undefined;
  try {
    const next = new URL(location, from);
    return next.protocol === 'http:' || next.protocol === 'https:' ? next : undefined;
  } catch {
    return undefined;
  }
}

function post(to: Target, headers: Record<string, string>, body: string, signal: AbortSignal, phase?: (p: string) => void): Promise<http.IncomingMessage> {
  return new Promise((resolve, reject) => {
    const send = to.https ? https.request : http.request;
    const options = {
      method: 'POST',
      hostname: to.hostname,
      port: to.port,
      path: to.path,
      headers: { ...headers, 'content-length': String(Buffer.byteLength(body)) },
      signal,
    };
    const req = send(options, resolve);
    // a host that never answers the connection: fail (retryably) as fetch did after 10 s, not at the idle timeout
    req.on('socket', (socket) => {
      if (!socket.connecting) return;
      const timer = setTimeout(
        () =>
          req.destroy(Object.assign(new Error(`connect ETIMEDOUT ${to.hostname}:${to.port} (no answer in ${CONNECT_TIMEOUT_MS} ms)`), { code: 'ETIMEDOUT' })),
        CONNECT_TIMEOUT_MS,
      );
      socket.once('connect', () => clearTimeout(timer));
      socket.once('close', () => clearTimeout(timer));
    });
    req.on('error', (err) => reject(signal.aborted ? err : new Error(`Cannot connect to API: ${err.message}`, { cause: err })));
    if (phase) req.once('finish', () => phase('LLM request sent'));
    req.end(body);
  });
}

/** A Chat Completions client for one model; `open` posts one step and returns its parts as they stream. */
export function createChatCompletions(o: ChatCompletionsOptions): { open(step: ChatStepRequest): Promise<AsyncIterable<StepPart>> } {
  const url = new URL(`${o.baseUrl.replace(/\/$/, '')}/chat/completions`);
  // taken apart once (http.request would take a URL apart at every step)
  const target = targetOf(url);
  const bodies = new RequestBodies(o.modelId, o.maxOutputTokens);
  const headers: Record<string, string> = {};
  const set = (name: string, value: string) => {
    for (const k of Object.keys(headers)) if (k.toLowerCase() === name.toLowerCase()) delete headers[k];
    headers[name] = value;
  };
  set('content-type', 'application/json');
  set('user-agent', USER_AGENT);
  if (o.apiKey) set('authorization', `Bearer ${o.apiKey}`);
  for (const [k, v] of Object.entries(o.headers ?? {})) set(k, v);
  const ctx: ClientContext = o.apiKey ? { apiKey: o.apiKey } : {};

  return {
    async open(step: ChatStepRequest): Promise<AsyncIterable<StepPart>> {
      const body = bodies.body(step.prompt, step.tools);
      step.phase?.('LLM request body built');
      let at = url;
      let to = target;
      let sent = headers;
      for (let redirects = 0; ; redirects++) {
        const res = await post(to, sent, body, step.signal, step.phase);
        step.phase?.('LLM answer headers');
        step.alive();
        const status = res.statusCode ?? 0;
        // fetch followed redirects; a POST is sent again only on 307 and 308 (others would turn it into a GET)
        const next = (status === 307 || status === 308) && redirects < MAX_REDIRECTS ? redirectTarget(res.headers.location, at) : undefined;
        if (next) {
          res.resume();
          // as fetch does, the credentials do not follow to another origin
          if (next.origin !== at.origin) sent = Object.fromEntries(Object.entries(sent).filter(([k]) => k !== 'authorization'));
          at = next;
          to = targetOf(next);
          continue;
        }
        if (status < 200 || status > 299) throw await httpError(res, ctx);
        return readStream(res, ctx, step.alive, step.phase);
      }
    },
  };
}
