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
 * The client is three files along the protocol's seams, held byte for byte to the SDK's by one test file
 * (test/llm-chat-completions.test.ts): the request body (chat-request.ts), the answer's stream
 * (chat-stream.ts), and here the HTTP exchange (redirects, errors, the connect timeout) that joins them.
 */
import http from 'node:http';
import https from 'node:https';
import { ProviderError, classifyHttpError } from './errors.js';
import { RequestBodies } from './chat-request.js';
import { readStream, type ClientContext, type StepPart } from './chat-stream.js';
import type { SdkPrompt, SdkTools } from './prompt.js';

export type { StepPart } from './chat-stream.js';

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

const USER_AGENT = `parley (node.js/${process.version})`;
/** Redirects (307/308) followed for one request, as fetch allowed. */
const MAX_REDIRECTS = 20;
/** How long a TCP connection may take to open (undici's fetch, which the AI SDK used, waits as long). */
const CONNECT_TIMEOUT_MS = 10_000;
/** Of an error response's body, at most this much is read (and so quoted in the error). */
const MAX_ERROR_BODY = 256 * 1024;

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

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
      const error = isRecord(parsed) ? parsed.error : undefined;
      const m = isRecord(error) ? error.message : undefined;
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
