/**
 * Scripted LLM server for tests — a real HTTP server (127.0.0.1, random port) that speaks the
 * OpenAI Chat Completions API and plays back a queue of scripted replies.
 *
 * ```ts
 * const llm = await startScriptedLlm([
 *   { text: 'Let me look.', toolCalls: [{ name: 'terminal', arguments: { command: 'ls' } }] },
 *   { text: 'Done.' },
 * ]);
 * const client = createLlmClient({ model: 'openai/scripted', baseUrl: llm.url, apiKey: 'k' });
 * ...
 * llm.requests[0].body.messages;   // what the agent sent
 * await llm.close();
 * ```
 *
 * Endpoints
 * - `POST /v1/chat/completions` — `stream: true` answers with SSE (`data: {chunk}\n\n` … `data: [DONE]\n\n`),
 *   otherwise a single `chat.completion` JSON object.
 *   Streaming details: the first chunk carries `role: 'assistant'`; text is sent word by word (one chunk per
 *   word, override with `chunkSize`); each tool call is opened with `{ index, id, type, function: { name,
 *   arguments: '' } }` and its arguments follow in several small chunks (so arguments are always split across
 *   chunks); the last choice chunk carries `finish_reason` (`tool_calls` when there are tool calls, else
 *   `stop`), then one chunk with `choices: []` and `usage`, then `[DONE]`.
 * - `GET /v1/models` — lists the model name(s) (`options.models`, default `['scripted']`).
 * - Anything else → 404 JSON error.
 * `startScriptedAnthropic()` starts the same kind of server speaking the Anthropic Messages API
 * (`POST /v1/messages`, streaming events `message_start` … `message_stop`, or one JSON message).
 *
 * Replies (`ScriptedReply`), consumed one per completion request in FIFO order:
 * - `{ text?, toolCalls?: [{ name, arguments: object | string, id? }] }` — a normal answer. `arguments` given
 *   as a string is sent verbatim (use it for invalid JSON). Ids default to `call_<n>`.
 *   Optional: `finishReason`, `usage: { prompt_tokens?, completion_tokens? }`, `chunkSize` (chars per text
 *   chunk), `chunkDelayMs` (pause between stream chunks — handy for interrupting mid-stream).
 * - `{ error: { status, body?, headers? } }` — an HTTP error, e.g. `{ status: 429, headers: { 'retry-after':
 *   '0' } }`. Default bodies are OpenAI-style `{ error: { message, type, code } }`; the default 401 body echoes
 *   the API key it received (like a careless provider) so tests can check it is scrubbed. `body` may be an
 *   object (sent as JSON), a string (sent verbatim), or a function of the request.
 * - `{ text?, streamError: { message, type } }` — streams the text, then an in-stream error event and ends
 *   (no finish reason): a provider failing mid-answer after a 200.
 * - `{ dropStream: true, text? }` — starts a 200 SSE stream, sends the role chunk and part of the text, then
 *   destroys the socket (no finish_reason, no [DONE]).
 * - any of the above plus `delayMs` — wait that long before answering (the wait ends early, quietly, if the
 *   client disconnects: use it for interrupt tests).
 * - a function `(request) => reply | Promise<reply>` — computed when the request arrives (dynamic replies).
 * When the queue is empty the server answers the text "(script exhausted)".
 *
 * Recording: `requests` holds every completion request in arrival order as `{ method, path, headers, body }`
 * (headers lower-cased, body parsed JSON). `waitForRequests(n)` resolves once n have arrived.
 * Usage numbers: prompt_tokens ≈ request JSON length / 4, completion_tokens ≈ output length / 4 (≥ 1), unless
 * the reply sets `usage`.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';

export interface ScriptedToolCall {
  name: string;
  /** Object → JSON.stringify'd; string → sent verbatim (may be invalid JSON on purpose). */
  arguments: object | string;
  id?: string;
}

export interface ScriptedUsage {
  prompt_tokens?: number;
  completion_tokens?: number;
}

interface ReplyTiming {
  /** Wait this long before answering. */
  delayMs?: number;
}

export interface ScriptedTextReply extends ReplyTiming {
  text?: string;
  toolCalls?: ScriptedToolCall[];
  /** Defaults to 'tool_calls' (when toolCalls) or 'stop'. Anthropic dialect: 'tool_use' / 'end_turn'. */
  finishReason?: string;
  usage?: ScriptedUsage;
  /** Characters per streamed text chunk; default: one chunk per word. */
  chunkSize?: number;
  /** Pause between streamed chunks. */
  chunkDelayMs?: number;
  /**
   * Streaming only: after the text, send this as an in-stream error (OpenAI: `data: {"error": …}`; Anthropic:
   * `event: error`) and end the response without a finish reason — a provider failing mid-answer.
   * E.g. `{ message: 'The server had an error', type: 'server_error' }`.
   */
  streamError?: Record<string, unknown>;
}

export interface ScriptedErrorReply extends ReplyTiming {
  error: {
    status: number;
    body?: string | number | boolean | null | Record<string, unknown> | unknown[] | ((request: ScriptedRequest) => unknown);
    headers?: Record<string, string>;
  };
}

export interface ScriptedDropReply extends ReplyTiming {
  dropStream: true;
  /** Text streamed before the connection is destroyed (default 'partial answer'). */
  text?: string;
}

export type ScriptedReplyValue = ScriptedTextReply | ScriptedErrorReply | ScriptedDropReply;
export type ScriptedReplyFn = (request: ScriptedRequest) => ScriptedReplyValue | Promise<ScriptedReplyValue>;
export type ScriptedReply = ScriptedReplyValue | ScriptedReplyFn;

export interface ScriptedRequest {
  method: string;
  path: string;
  /** Lower-cased header names. */
  headers: Record<string, string>;
  /** Parsed JSON body (undefined when the body was empty or not JSON). */
  body: any;
  /** The bearer token / x-api-key the client sent, if any. */
  apiKey?: string;
  /** performance.now() when the request arrived, and when its answer was completely sent (benchmarks). */
  receivedAt: number;
  answeredAt?: number;
}

/**
 * The benchmarks' hello turn, as the scripted LLM answers it: a shell command, a file created in `dir`, edited,
 * then finish (four LLM calls).
 */
export function helloTurn(dir: string): ScriptedReply[] {
  return [
    { toolCalls: [{ name: 'terminal', arguments: { command: 'echo hello' } }] },
    { toolCalls: [{ name: 'file_editor', arguments: { command: 'create', path: `${dir}/hello.txt`, file_text: 'hello\n' } }] },
    { toolCalls: [{ name: 'file_editor', arguments: { command: 'str_replace', path: `${dir}/hello.txt`, old_str: 'hello', new_str: 'hello, world' } }] },
    { toolCalls: [{ name: 'finish', arguments: { message: 'said hello' } }] },
  ];
}

export interface ScriptedLlmOptions {
  /** Names listed by GET /v1/models (default ['scripted']). */
  models?: string[];
  /** When set, requests without this key get a 401 (whose body echoes the key received). */
  requireApiKey?: string;
}

export interface ScriptedLlm {
  /** Base URL ending in `/v1`, e.g. `http://127.0.0.1:43123/v1`. */
  readonly url: string;
  readonly port: number;
  /** Every completion request received, in order. */
  readonly requests: ScriptedRequest[];
  /** Append replies to the queue. */
  push(...replies: ScriptedReply[]): void;
  /** Number of replies still queued. */
  pending(): number;
  /** Drop every queued reply (a test that ended early must not hand its leftovers to the next). */
  clear(): void;
  /** Resolves when at least `count` completion requests have arrived (rejects after timeoutMs, default 5000). */
  waitForRequests(count: number, timeoutMs?: number): Promise<void>;
  /** Stops the server and drops open connections. */
  close(): Promise<void>;
}

type Dialect = 'openai' | 'anthropic';

const EXHAUSTED_TEXT = '(script exhausted)';

/** Start an OpenAI Chat Completions-compatible scripted server. */
export function startScriptedLlm(script: ScriptedReply[] = [], options: ScriptedLlmOptions = {}): Promise<ScriptedLlm> {
  return startServer('openai', script, options);
}

/** Start an Anthropic Messages API scripted server (same reply queue semantics; `url` ends in `/v1`). */
export function startScriptedAnthropic(script: ScriptedReply[] = [], options: ScriptedLlmOptions = {}): Promise<ScriptedLlm> {
  return startServer('anthropic', script, options);
}

async function startServer(dialect: Dialect, script: ScriptedReply[], options: ScriptedLlmOptions): Promise<ScriptedLlm> {
  const queue: ScriptedReply[] = [...script];
  const requests: ScriptedRequest[] = [];
  const waiters: { count: number; resolve: () => void }[] = [];
  let callCounter = 0;
  let responseCounter = 0;

  const notifyWaiters = () => {
    for (let i = waiters.length - 1; i >= 0; i--) {
      if (requests.length >= waiters[i]!.count) {
        waiters[i]!.resolve();
        waiters.splice(i, 1);
      }
    }
  };

  const server = http.createServer((req, res) => {
    void handle(req, res).catch((err) => {
      // A bug in a reply function or the server itself: answer 500 if still possible.
      if (!res.headersSent && !res.destroyed) {
        sendJson(res, 500, { error: { message: `scripted server failure: ${String(err?.message ?? err)}` } });
      } else {
        res.destroy();
      }
    });
  });

  async function handle(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const receivedAt = performance.now();
    const raw = await readBody(req);
    const url = new URL(req.url ?? '/', 'http://localhost');
    const path = url.pathname.replace(/\/+$/, '');
    const headers: Record<string, string> = {};
    for (const [k, v] of Object.entries(req.headers)) {
      if (v !== undefined) headers[k.toLowerCase()] = Array.isArray(v) ? v.join(', ') : v;
    }

    if (req.method === 'GET' && path === '/v1/models') {
      const names = options.models ?? ['scripted'];
      sendJson(res, 200, {
        object: 'list',
        data: names.map((id) => ({ id, object: 'model', created: 0, owned_by: 'scripted' })),
      });
      return;
    }

    const completionPath = dialect === 'openai' ? '/v1/chat/completions' : '/v1/messages';
    if (req.method !== 'POST' || path !== completionPath) {
      sendJson(res, 404, errorBody(dialect, 404, `No route for ${req.method} ${url.pathname}`, 'not_found'));
      return;
    }

    let body: any;
    try {
      body = raw.length > 0 ? JSON.parse(raw) : undefined;
    } catch {
      body = undefined;
    }
    const apiKey = extractApiKey(headers);
    const request: ScriptedRequest = { method: req.method, path, headers, body, apiKey, receivedAt };
    requests.push(request);
    notifyWaiters();

    if (options.requireApiKey !== undefined && apiKey !== options.requireApiKey) {
      sendJson(res, 401, defaultErrorBody(dialect, 401, request));
      return;
    }

    const next = queue.shift();
    const reply: ScriptedReplyValue = next === undefined ? { text: EXHAUSTED_TEXT } : typeof next === 'function' ? await next(request) : next;

    if (reply.delayMs && reply.delayMs > 0) {
      const stillConnected = await sleepUnlessClosed(reply.delayMs, req, res);
      if (!stillConnected) return;
    }

    if ('error' in reply) {
      const { status, headers: extraHeaders } = reply.error;
      const bodySpec = reply.error.body;
      let errBody: unknown = typeof bodySpec === 'function' ? bodySpec(request) : bodySpec;
      if (errBody === undefined) errBody = defaultErrorBody(dialect, status, request);
      const payload = typeof errBody === 'string' ? errBody : JSON.stringify(errBody);
      res.writeHead(status, {
        'content-type': typeof errBody === 'string' ? 'text/plain; charset=utf-8' : 'application/json',
        'content-length': Buffer.byteLength(payload),
        ...extraHeaders,
      });
      res.end(payload);
      return;
    }

    const stream = body?.stream === true;
    const responseId = `${dialect === 'openai' ? 'chatcmpl' : 'msg'}_scripted_${++responseCounter}`;
    const model = typeof body?.model === 'string' ? body.model : 'scripted';
    const promptTokens = Math.max(1, Math.ceil(raw.length / 4));

    if ('dropStream' in reply) {
      await sendDroppedStream(dialect, res, responseId, model, reply.text ?? 'partial answer');
      return;
    }

    const toolCalls = (reply.toolCalls ?? []).map((tc) => ({
      id: tc.id ?? (dialect === 'openai' ? `call_${++callCounter}` : `toolu_${++callCounter}`),
      name: tc.name,
      arguments: typeof tc.arguments === 'string' ? tc.arguments : JSON.stringify(tc.arguments),
    }));
    const text = reply.text ?? '';
    const outChars = text.length + toolCalls.reduce((n, tc) => n + tc.name.length + tc.arguments.length, 0);
    const usage = {
      prompt_tokens: reply.usage?.prompt_tokens ?? promptTokens,
      completion_tokens: reply.usage?.completion_tokens ?? Math.max(1, Math.ceil(outChars / 4)),
    };
    const answer: Answer = {
      id: responseId,
      model,
      text,
      toolCalls,
      finishReason: reply.finishReason,
      usage,
      chunkSize: reply.chunkSize,
      chunkDelayMs: reply.chunkDelayMs ?? 0,
      streamError: reply.streamError,
    };

    if (dialect === 'openai') {
      if (stream) await streamOpenAi(res, answer);
      else sendJson(res, 200, openAiJson(answer));
    } else {
      if (stream) await streamAnthropic(res, answer);
      else sendJson(res, 200, anthropicJson(answer));
    }
    request.answeredAt = performance.now();
  }

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      server.off('error', reject);
      resolve();
    });
  });
  const port = (server.address() as AddressInfo).port;
  let closed = false;

  return {
    url: `http://127.0.0.1:${port}/v1`,
    port,
    requests,
    push: (...replies: ScriptedReply[]) => {
      queue.push(...replies);
    },
    pending: () => queue.length,
    clear: () => {
      queue.length = 0;
    },
    waitForRequests(count: number, timeoutMs = 5000): Promise<void> {
      if (requests.length >= count) return Promise.resolve();
      return new Promise<void>((resolve, reject) => {
        const timer = setTimeout(() => {
          const i = waiters.indexOf(waiter);
          if (i >= 0) waiters.splice(i, 1);
          reject(new Error(`scripted LLM: expected ${count} request(s), got ${requests.length} within ${timeoutMs} ms`));
        }, timeoutMs);
        const waiter = {
          count,
          resolve: () => {
            clearTimeout(timer);
            resolve();
          },
        };
        waiters.push(waiter);
      });
    },
    async close(): Promise<void> {
      if (closed) return;
      closed = true;
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
    },
  };
}

// ---------------------------------------------------------------------------------------------------------
// Answer rendering

interface Answer {
  id: string;
  model: string;
  text: string;
  toolCalls: { id: string; name: string; arguments: string }[];
  finishReason?: string;
  usage: { prompt_tokens: number; completion_tokens: number };
  chunkSize?: number;
  chunkDelayMs: number;
  streamError?: Record<string, unknown>;
}

function splitText(text: string, chunkSize?: number): string[] {
  if (text.length === 0) return [];
  if (chunkSize && chunkSize > 0) {
    const out: string[] = [];
    for (let i = 0; i < text.length; i += chunkSize) out.push(text.slice(i, i + chunkSize));
    return out;
  }
  // One chunk per word, whitespace kept with the word before it.
  return text.match(/\s*\S+\s*/g) ?? [text];
}

/** Split a JSON argument string into several pieces (at least 2 when length ≥ 2). */
function splitArguments(args: string): string[] {
  if (args.length <= 1) return [args];
  const size = Math.max(1, Math.min(8, Math.ceil(args.length / 3)));
  const out: string[] = [];
  for (let i = 0; i < args.length; i += size) out.push(args.slice(i, i + size));
  return out;
}

function openAiFinishReason(a: Answer): string {
  return a.finishReason ?? (a.toolCalls.length > 0 ? 'tool_calls' : 'stop');
}

function openAiUsage(a: Answer) {
  return {
    prompt_tokens: a.usage.prompt_tokens,
    completion_tokens: a.usage.completion_tokens,
    total_tokens: a.usage.prompt_tokens + a.usage.completion_tokens,
  };
}

function openAiJson(a: Answer) {
  return {
    id: a.id,
    object: 'chat.completion',
    created: Math.floor(Date.now() / 1000),
    model: a.model,
    choices: [
      {
        index: 0,
        message: {
          role: 'assistant',
          content: a.text.length > 0 ? a.text : null,
          ...(a.toolCalls.length > 0
            ? {
                tool_calls: a.toolCalls.map((tc) => ({
                  id: tc.id,
                  type: 'function',
                  function: { name: tc.name, arguments: tc.arguments },
                })),
              }
            : {}),
        },
        finish_reason: openAiFinishReason(a),
      },
    ],
    usage: openAiUsage(a),
  };
}

async function streamOpenAi(res: http.ServerResponse, a: Answer): Promise<void> {
  const created = Math.floor(Date.now() / 1000);
  const chunk = (delta: object | null, finish: string | null = null, extra: object = {}) => ({
    id: a.id,
    object: 'chat.completion.chunk',
    created,
    model: a.model,
    choices: delta === null ? [] : [{ index: 0, delta, finish_reason: finish }],
    ...extra,
  });
  const events: object[] = [chunk({ role: 'assistant', content: '' })];
  for (const piece of splitText(a.text, a.chunkSize)) events.push(chunk({ content: piece }));
  if (a.streamError) {
    startSse(res);
    for (const ev of [...events, { error: a.streamError }]) {
      if (!(await writeSse(res, `data: ${JSON.stringify(ev)}\n\n`, a.chunkDelayMs))) return;
    }
    res.end();
    return;
  }
  a.toolCalls.forEach((tc, index) => {
    events.push(chunk({ tool_calls: [{ index, id: tc.id, type: 'function', function: { name: tc.name, arguments: '' } }] }));
    for (const piece of splitArguments(tc.arguments)) {
      events.push(chunk({ tool_calls: [{ index, function: { arguments: piece } }] }));
    }
  });
  events.push(chunk({}, openAiFinishReason(a)));
  events.push(chunk(null, null, { usage: openAiUsage(a) }));

  startSse(res);
  for (const ev of events) {
    if (!(await writeSse(res, `data: ${JSON.stringify(ev)}\n\n`, a.chunkDelayMs))) return;
  }
  if (!(await writeSse(res, 'data: [DONE]\n\n', 0))) return;
  res.end();
}

function anthropicStopReason(a: Answer): string {
  return a.finishReason ?? (a.toolCalls.length > 0 ? 'tool_use' : 'end_turn');
}

function parseArgsLoose(args: string): unknown {
  try {
    return JSON.parse(args);
  } catch {
    return {};
  }
}

function anthropicJson(a: Answer) {
  return {
    id: a.id,
    type: 'message',
    role: 'assistant',
    model: a.model,
    content: [
      ...(a.text.length > 0 ? [{ type: 'text', text: a.text }] : []),
      ...a.toolCalls.map((tc) => ({ type: 'tool_use', id: tc.id, name: tc.name, input: parseArgsLoose(tc.arguments) })),
    ],
    stop_reason: anthropicStopReason(a),
    stop_sequence: null,
    usage: { input_tokens: a.usage.prompt_tokens, output_tokens: a.usage.completion_tokens },
  };
}

async function streamAnthropic(res: http.ServerResponse, a: Answer): Promise<void> {
  const events: [string, object][] = [];
  events.push([
    'message_start',
    {
      type: 'message_start',
      message: {
        id: a.id,
        type: 'message',
        role: 'assistant',
        model: a.model,
        content: [],
        stop_reason: null,
        stop_sequence: null,
        usage: { input_tokens: a.usage.prompt_tokens, output_tokens: 1 },
      },
    },
  ]);
  let index = 0;
  if (a.text.length > 0) {
    events.push(['content_block_start', { type: 'content_block_start', index, content_block: { type: 'text', text: '' } }]);
    for (const piece of splitText(a.text, a.chunkSize)) {
      events.push(['content_block_delta', { type: 'content_block_delta', index, delta: { type: 'text_delta', text: piece } }]);
    }
    if (!a.streamError) events.push(['content_block_stop', { type: 'content_block_stop', index }]);
    index++;
  }
  if (a.streamError) {
    events.push(['error', { type: 'error', error: a.streamError }]);
    startSse(res);
    for (const [name, data] of events) {
      if (!(await writeSse(res, `event: ${name}\ndata: ${JSON.stringify(data)}\n\n`, a.chunkDelayMs))) return;
    }
    res.end();
    return;
  }
  for (const tc of a.toolCalls) {
    events.push(['content_block_start', { type: 'content_block_start', index, content_block: { type: 'tool_use', id: tc.id, name: tc.name, input: {} } }]);
    for (const piece of splitArguments(tc.arguments)) {
      events.push(['content_block_delta', { type: 'content_block_delta', index, delta: { type: 'input_json_delta', partial_json: piece } }]);
    }
    events.push(['content_block_stop', { type: 'content_block_stop', index }]);
    index++;
  }
  events.push([
    'message_delta',
    {
      type: 'message_delta',
      delta: { stop_reason: anthropicStopReason(a), stop_sequence: null },
      usage: { output_tokens: a.usage.completion_tokens },
    },
  ]);
  events.push(['message_stop', { type: 'message_stop' }]);

  startSse(res);
  for (const [name, data] of events) {
    if (!(await writeSse(res, `event: ${name}\ndata: ${JSON.stringify(data)}\n\n`, a.chunkDelayMs))) return;
  }
  res.end();
}

async function sendDroppedStream(dialect: Dialect, res: http.ServerResponse, id: string, model: string, text: string): Promise<void> {
  startSse(res);
  const pieces = splitText(text);
  if (dialect === 'openai') {
    const created = Math.floor(Date.now() / 1000);
    const chunk = (delta: object) => ({ id, object: 'chat.completion.chunk', created, model, choices: [{ index: 0, delta, finish_reason: null }] });
    res.write(`data: ${JSON.stringify(chunk({ role: 'assistant', content: '' }))}\n\n`);
    for (const p of pieces) res.write(`data: ${JSON.stringify(chunk({ content: p }))}\n\n`);
  } else {
    res.write(
      `event: message_start\ndata: ${JSON.stringify({
        type: 'message_start',
        message: { id, type: 'message', role: 'assistant', model, content: [], stop_reason: null, usage: { input_tokens: 1, output_tokens: 1 } },
      })}\n\n`,
    );
    res.write(`event: content_block_start\ndata: ${JSON.stringify({ type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } })}\n\n`);
    for (const p of pieces) {
      res.write(`event: content_block_delta\ndata: ${JSON.stringify({ type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: p } })}\n\n`);
    }
  }
  // Let the partial data reach the client, then cut the connection mid-stream.
  await sleep(30);
  res.socket?.destroy();
  res.destroy();
}

// ---------------------------------------------------------------------------------------------------------
// Errors

function errorBody(dialect: Dialect, _status: number, message: string, type: string, code?: string) {
  if (dialect === 'anthropic') return { type: 'error', error: { type, message } };
  return { error: { message, type, param: null, code: code ?? null } };
}

function defaultErrorBody(dialect: Dialect, status: number, request: ScriptedRequest) {
  const anthropic = dialect === 'anthropic';
  switch (status) {
    case 400:
      return errorBody(dialect, status, 'Invalid request (scripted).', 'invalid_request_error');
    case 401:
      // Deliberately echoes the key it got, as some providers do: clients must scrub it.
      return errorBody(
        dialect,
        status,
        `Incorrect API key provided: ${request.apiKey ?? '(none)'}.`,
        anthropic ? 'authentication_error' : 'invalid_request_error',
        'invalid_api_key',
      );
    case 403:
      return errorBody(dialect, status, 'Permission denied (scripted).', anthropic ? 'permission_error' : 'invalid_request_error');
    case 404:
      return errorBody(dialect, status, 'Model not found (scripted).', 'not_found_error', 'model_not_found');
    case 429:
      return errorBody(
        dialect,
        status,
        'Rate limit reached (scripted). Please try again later.',
        anthropic ? 'rate_limit_error' : 'requests',
        'rate_limit_exceeded',
      );
    case 529:
      return errorBody(dialect, status, 'Overloaded (scripted).', 'overloaded_error');
    default:
      if (status >= 500) return errorBody(dialect, status, `Internal server error (scripted ${status}).`, anthropic ? 'api_error' : 'server_error');
      return errorBody(dialect, status, `Scripted error ${status}.`, 'invalid_request_error');
  }
}

// ---------------------------------------------------------------------------------------------------------
// Helpers

function extractApiKey(headers: Record<string, string>): string | undefined {
  const auth = headers.authorization;
  if (auth?.toLowerCase().startsWith('bearer ')) return auth.slice(7).trim();
  return headers['x-api-key'] ?? headers['api-key'];
}

function readBody(req: http.IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

function sendJson(res: http.ServerResponse, status: number, body: unknown): void {
  const payload = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) });
  res.end(payload);
}

function startSse(res: http.ServerResponse): void {
  res.writeHead(200, {
    'content-type': 'text/event-stream; charset=utf-8',
    'cache-control': 'no-cache',
    connection: 'keep-alive',
  });
  res.flushHeaders();
}

/** Writes one SSE frame (after an optional pause). Returns false when the client has gone away. */
async function writeSse(res: http.ServerResponse, frame: string, delayMs: number): Promise<boolean> {
  if (delayMs > 0) await sleep(delayMs);
  if (res.destroyed || res.writableEnded) return false;
  res.write(frame);
  return true;
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Sleeps; resolves false early if the client disconnects meanwhile. */
function sleepUnlessClosed(ms: number, req: http.IncomingMessage, res: http.ServerResponse): Promise<boolean> {
  return new Promise((resolve) => {
    const onClose = () => {
      clearTimeout(timer);
      resolve(false);
    };
    const timer = setTimeout(() => {
      res.off('close', onClose);
      resolve(!res.destroyed);
    }, ms);
    res.once('close', onClose);
    void req;
  });
}
