/**
 * Provider error classification: turns whatever the AI SDK / fetch / the stream (or the Chat Completions
 * client, chat-completions.ts) throws into a `ProviderErrorInfo` (code, retryable, status, detail) with a
 * clear detail that never holds the API key.
 */
import type { ProviderErrorCode, ProviderErrorInfo } from './types.js';

export { LlmAbortError, ProviderError } from './provider-error.js';
import { ProviderError } from './provider-error.js';
import { SECRET_PLACEHOLDER } from '../secrets/redact.js';
import { loadedAi } from './sdk.js';

// ---------------------------------------------------------------------------------------------------------
// Scrubbing

const KEY_PATTERNS: [RegExp, string][] = [
  [/\b(sk|pk|rk)-(ant-)?[A-Za-z0-9_-]{12,}/g, '$1-***'],
  [/\b(Bearer)\s+[A-Za-z0-9._~+/=-]{8,}/gi, '$1 ***'],
  [/("?(?:api[_-]?key|x-api-key|authorization)"?\s*[:=]\s*"?)[^"\s,}]{6,}/gi, '$1***'],
];

/** Removes the API key (verbatim and URL-encoded) and anything key-shaped from a text. */
export function scrubSecrets(text: string, apiKey?: string): string {
  let out = text;
  if (apiKey && apiKey.length >= 4) {
    for (const variant of new Set([apiKey, encodeURIComponent(apiKey), JSON.stringify(apiKey).slice(1, -1)])) {
      out = out.split(variant).join(SECRET_PLACEHOLDER);
    }
  }
  for (const [pattern, replacement] of KEY_PATTERNS) out = out.replace(pattern, replacement);
  return out;
}

// ---------------------------------------------------------------------------------------------------------
// Classification

const CONTEXT_PATTERN = new RegExp(
  [
    'context[_ ]length|context window|maximum context|too many tokens|prompt is too long|context_length_exceeded',
    "input is too long|exceeds? (the )?(model'?s? )?(maximum )?context|maximum prompt length",
    'reduce the length of the (messages|prompt)|input tokens exceed',
  ].join('|'),
  'i',
);
/** The AI SDK's errors about the request we built (the prompt, its arguments), by `error.name`. */
const SDK_BAD_REQUEST_ERROR =
  /^AI_(InvalidPromptError|InvalidArgumentError|InvalidMessageRoleError|UnsupportedFunctionalityError|MessageConversionError|InvalidDataContentError)$/;
const QUOTA_PATTERN = /insufficient_quota|exceeded your current quota|billing|credit balance is too low/i;

const LABELS: Record<ProviderErrorCode, string> = {
  RateLimited: 'Rate limited by the LLM provider',
  ProviderUnavailable: 'LLM provider unavailable',
  Timeout: 'LLM request timed out',
  StreamInterrupted: 'LLM response stream was interrupted',
  AuthenticationFailed: 'Authentication with the LLM provider failed (check the API key)',
  BadRequest: 'The LLM provider rejected the request',
  ContextWindowExceeded: "The conversation no longer fits in the model's context window",
  ProviderError: 'LLM provider error',
};

interface ClassifiedError extends ProviderErrorInfo {
  retryAfterMs?: number;
}

interface ClassifyContext {
  apiKey?: string;
  /** True when the provider had already started streaming a response (status 200) when this happened. */
  streamStarted: boolean;
  /** Now (for HTTP-date Retry-After); injectable for tests. */
  now?: number;
}

const MAX_DETAIL = 600;

function truncate(s: string, n: number): string {
  return s.length > n ? `${s.slice(0, n - 1)}…` : s;
}

function make(code: ProviderErrorCode, retryable: boolean, message: string, ctx: ClassifyContext, status?: number, retryAfterMs?: number): ClassifiedError {
  const base = `${LABELS[code]}${status !== undefined ? ` (HTTP ${status})` : ''}`;
  const msg = scrubSecrets(message.replace(/\s+/g, ' ').trim(), ctx.apiKey);
  const detail = truncate(msg ? `${base}: ${msg}` : base, MAX_DETAIL);
  return {
    code,
    retryable,
    ...(status !== undefined ? { status } : {}),
    detail,
    ...(retryAfterMs !== undefined ? { retryAfterMs } : {}),
  };
}

/** Parses `retry-after-ms`, then `retry-after` (seconds or HTTP date). Returns ms or undefined. */
export function parseRetryAfter(headers: Record<string, string | undefined> | undefined, now = Date.now()): number | undefined {
  if (!headers) return undefined;
  const get = (name: string) => {
    for (const [k, v] of Object.entries(headers)) if (k.toLowerCase() === name && v != null) return String(v).trim();
    return undefined;
  };
  const ms = get('retry-after-ms');
  if (ms !== undefined && ms !== '') {
    const n = Number(ms);
    if (Number.isFinite(n) && n >= 0) return n;
  }
  const ra = get('retry-after');
  if (ra !== undefined && ra !== '') {
    if (/^\d+(\.\d+)?$/.test(ra)) return Number(ra) * 1000;
    const date = Date.parse(ra);
    if (!Number.isNaN(date)) return Math.max(0, date - now);
  }
  return undefined;
}

const NETWORK_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ECONNABORTED',
  'EPIPE',
  'ETIMEDOUT',
  'ENOTFOUND',
  'EAI_AGAIN',
  'ENETUNREACH',
  'EHOSTUNREACH',
  'UND_ERR_SOCKET',
  'UND_ERR_CLOSED',
  'UND_ERR_CONNECT_TIMEOUT',
  'UND_ERR_HEADERS_TIMEOUT',
  'UND_ERR_BODY_TIMEOUT',
]);

function errorChain(e: unknown): unknown[] {
  const chain: unknown[] = [];
  let cur: unknown = e;
  while (cur != null && chain.length < 6 && !chain.includes(cur)) {
    chain.push(cur);
    cur = (cur as { cause?: unknown }).cause;
  }
  return chain;
}

function networkCode(e: unknown): string | undefined {
  for (const c of errorChain(e)) {
    const code = (c as { code?: unknown }).code;
    if (typeof code === 'string' && NETWORK_CODES.has(code)) return code;
  }
  return undefined;
}

function isStreamBreak(e: unknown): boolean {
  for (const c of errorChain(e)) {
    if (!(c instanceof Error)) continue;
    if (c.name === 'TypeError' && /terminated|network|fetch failed/i.test(c.message)) return true;
    if (/other side closed|socket hang up|premature close|aborted|stream ended without a finish reason/i.test(c.message)) return true;
  }
  return networkCode(e) !== undefined;
}

function textOf(value: unknown): string {
  if (value == null) return '';
  if (typeof value === 'string') return value;
  if (value instanceof Error) return value.message;
  try {
    return JSON.stringify(value);
  } catch {
    return String(value);
  }
}

function classifyStatus(status: number, message: string, body: string, headers: Record<string, string> | undefined, ctx: ClassifyContext): ClassifiedError {
  const text = `${message} ${body}`;
  const retryAfterMs = parseRetryAfter(headers, ctx.now);
  if (status === 401 || status === 403) return make('AuthenticationFailed', false, message, ctx, status);
  if (status === 429) {
    if (QUOTA_PATTERN.test(text)) return make('RateLimited', false, message, ctx, status);
    return make('RateLimited', true, message, ctx, status, retryAfterMs);
  }
  if (CONTEXT_PATTERN.test(text) || status === 413) return make('ContextWindowExceeded', false, message, ctx, status);
  if (status === 408) return make('Timeout', true, message, ctx, status, retryAfterMs);
  if (status === 409) return make('ProviderUnavailable', true, message, ctx, status, retryAfterMs);
  if (status >= 500) return make('ProviderUnavailable', true, message, ctx, status, retryAfterMs);
  if (status >= 400) return make('BadRequest', false, message, ctx, status);
  return make('ProviderError', false, message, ctx, status);
}

/** Message for an HTTP error: the provider's message, plus the raw body when that says more. */
function apiCallMessage(providerMessage: string | undefined, responseBody: unknown): string {
  const message = providerMessage ?? '';
  const body = typeof responseBody === 'string' ? responseBody.trim() : '';
  if (body && !body.includes(message) && !message.includes(body.slice(0, 80))) {
    return `${message} — ${truncate(body, 300)}`;
  }
  return message;
}

/**
 * An HTTP error answer (status ≥ 400) of the Chat Completions client (chat-completions.ts), classified as the
 * AI SDK's APICallError for the same answer: `message` is the body's `error.message`, else the status text.
 */
export function classifyHttpError(status: number, message: string, body: string, headers: Record<string, string>, ctx: ClassifyContext): ClassifiedError {
  return classifyStatus(status, apiCallMessage(message, body), body, headers, ctx);
}

/** A response stream that broke its contract after a 200 (malformed chunk, no finish reason): retryable. */
export function interruptedStream(message: string, ctx: ClassifyContext): ClassifiedError {
  return make('StreamInterrupted', true, message, ctx);
}

/**
 * Errors delivered inside an otherwise successful stream (OpenAI `{"error":{…}}` chunk, Anthropic `error`
 * event): the request was accepted, so unless it says otherwise it is worth retrying.
 */
function classifyStreamErrorObject(value: object, ctx: ClassifyContext): ClassifiedError {
  const v = value as { message?: unknown; type?: unknown; code?: unknown; error?: unknown };
  const inner = (typeof v.error === 'object' && v.error !== null ? v.error : v) as { message?: unknown; type?: unknown; code?: unknown };
  const message = typeof inner.message === 'string' ? inner.message : textOf(value);
  const kind = `${textOf(inner.type)} ${textOf(inner.code)}`;
  const all = `${message} ${kind}`;
  if (CONTEXT_PATTERN.test(all)) return make('ContextWindowExceeded', false, message, ctx);
  if (/rate_limit|rate limit/i.test(all)) return make('RateLimited', true, message, ctx);
  if (/authentication|permission|invalid_api_key/i.test(kind)) return make('AuthenticationFailed', false, message, ctx);
  if (/invalid_request/i.test(kind)) return make('BadRequest', false, message, ctx);
  return make('ProviderUnavailable', true, message, ctx);
}

/** Classifies any error thrown by one attempt. Abort errors must be handled by the caller first. */
export function classifyError(error: unknown, ctx: ClassifyContext): ClassifiedError {
  if (error instanceof ProviderError) {
    return { ...error.toInfo(), ...(error.retryAfterMs !== undefined ? { retryAfterMs: error.retryAfterMs } : {}) };
  }
  // the AI SDK's errors, when the SDK was loaded (a step through the own client never loads it)
  const sdk = loadedAi();
  if (sdk?.RetryError.isInstance(error)) return classifyError(error.lastError, ctx);

  if (sdk?.APICallError.isInstance(error)) {
    if (error.statusCode !== undefined && error.statusCode < 400) {
      // The response started fine (2xx) and then its body broke off: a dropped stream.
      const causes = errorChain(error.cause)
        .map((c) => (c instanceof Error ? c.message : ''))
        .filter(Boolean)
        .join(': ');
      return make('StreamInterrupted', true, causes ? `${error.message} (${causes})` : error.message, ctx);
    }
    if (error.statusCode !== undefined) {
      return classifyStatus(error.statusCode, apiCallMessage(error.message, error.responseBody), textOf(error.responseBody), error.responseHeaders, ctx);
    }
    // No status: connection-level failure ("Cannot connect to API: …").
    if (error.isRetryable || isStreamBreak(error)) {
      return make(ctx.streamStarted ? 'StreamInterrupted' : 'ProviderUnavailable', true, error.message, ctx);
    }
    return make('ProviderError', false, error.message, ctx);
  }
  if (sdk?.LoadAPIKeyError.isInstance(error)) return make('AuthenticationFailed', false, error.message, ctx);

  if (error instanceof Error) {
    const name = error.name;
    if (name === 'TimeoutError') return make('Timeout', true, error.message, ctx);
    if (SDK_BAD_REQUEST_ERROR.test(name)) {
      return make('BadRequest', false, error.message, ctx);
    }
    if (name === 'AI_InvalidResponseDataError' && /without a finish reason/i.test(error.message)) {
      return make('StreamInterrupted', true, error.message, ctx);
    }
    if (isStreamBreak(error)) {
      const code = networkCode(error);
      const msg = code && !error.message.includes(code) ? `${error.message} (${code})` : error.message;
      return make(ctx.streamStarted ? 'StreamInterrupted' : 'ProviderUnavailable', true, msg, ctx);
    }
    if (/^AI_(JSONParseError|TypeValidationError|InvalidResponseDataError|EmptyResponseBodyError)$/.test(name)) {
      // Garbled response from the server: usually transient.
      return make(ctx.streamStarted ? 'StreamInterrupted' : 'ProviderUnavailable', true, error.message, ctx);
    }
    return make('ProviderError', false, error.message, ctx);
  }
  if (typeof error === 'object' && error !== null) return classifyStreamErrorObject(error, ctx);
  return make('ProviderError', false, textOf(error), ctx);
}
