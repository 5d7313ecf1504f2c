/**
 * The LLM client: one streamed completion step through the AI SDK (v6), with our own retry loop.
 *
 * - Tools are offered to the model WITHOUT execute functions, and `streamText` runs one step only, so the SDK
 *   never runs a tool: the agent loop executes the returned tool calls itself.
 * - Unusable tool calls (arguments that are not JSON, unknown tool names) come back as ordinary tool calls
 *   with `error` set (and `input` = the raw string when it did not parse); nothing is thrown.
 * - The AI SDK's own retries are off (`maxRetries: 0`); `complete()` retries rate limits, 5xx, timeouts,
 *   network errors and dropped streams with jittered exponential backoff honouring Retry-After.
 */
import {
  InvalidToolInputError,
  NoSuchToolError,
  jsonSchema,
  streamText,
  tool,
  wrapLanguageModel,
  type JSONSchema7,
  type LanguageModelMiddleware,
  type ModelMessage,
  type SystemModelMessage,
  type ToolSet,
} from 'ai';
import { LlmAbortError, ProviderError, classifyError } from './errors.js';
import { cacheControlProviderOptions } from './cache-control.js';
import { ImageResolver } from './image-urls.js';
import { PROVIDERS, defaultContextWindow, defaultSupportsImages, parseModelString, type ProviderName, type SdkLanguageModel } from './models.js';
import { DEFAULT_BACKOFF, retryDelayMs, sleep, type BackoffSettings } from './retry.js';
import type { LlmClient, LlmRequest, LlmResponse, LlmToolCall, LlmToolSpec } from './types.js';

export { parseModelString } from './models.js';
export { ProviderError, LlmAbortError } from './errors.js';

export interface LlmSettings {
  /** `provider/model`, e.g. `openai/gpt-4.1`, `anthropic/claude-sonnet-4-5`, `openai/qwen2.5-coder` (+ baseUrl). */
  model: string;
  apiKey?: string;
  /**
   * openai: any OpenAI-compatible Chat Completions server (`…/v1`); without it, api.openai.com (Responses API).
   * anthropic: replaces `https://api.anthropic.com/v1`.
   */
  baseUrl?: string;
  /** Context budget in tokens; default from the model table (128k when unknown). */
  contextWindow?: number;
  /** Whether the model takes images; default from the model table. When false, images are replaced by a note. */
  supportsImages?: boolean;
  /** Attempts in all, first one included (default 5). */
  maxAttempts?: number;
  /** First backoff delay (default 1000 ms, doubling, with jitter). */
  baseDelayMs?: number;
  /** Backoff ceiling (default 30 000 ms). */
  maxDelayMs?: number;
  /** Longest Retry-After we wait for (default 120 000 ms; longer requests are clamped). */
  maxRetryAfterMs?: number;
  /**
   * Idle timeout per attempt: fail (retryably, code Timeout) when the provider sends nothing for this long —
   * neither the response headers nor a stream chunk. Default 300 000 ms.
   */
  timeoutMs?: number;
  /** Max output tokens per step (default: the provider's default for the model). */
  maxOutputTokens?: number;
  /** Extra HTTP headers on every request (e.g. OpenRouter's HTTP-Referer / X-Title). */
  headers?: Record<string, string>;
  /** Anthropic: mark the system prompt (and so the tool list before it) as a prompt-cache breakpoint. Default true. */
  cacheSystemPrompt?: boolean;
}

export const DEFAULT_MAX_ATTEMPTS = 5;
export const DEFAULT_TIMEOUT_MS = 300_000;

type ProviderOptions = NonNullable<ModelMessage['providerOptions']>;

export { cacheControlProviderOptions };

/** A copy of `message` marked as a prompt-cache breakpoint (`cache_prompt: true` in conversation terms). */
export function withCacheControl<M extends ModelMessage>(message: M): M {
  const existing = (message.providerOptions ?? {}) as ProviderOptions;
  return {
    ...message,
    providerOptions: { ...existing, anthropic: { ...(existing.anthropic ?? {}), ...cacheControlProviderOptions().anthropic } },
  };
}

/**
 * The assistant message to append to the history for a response: its text plus its tool calls.
 * Tool-call inputs that are not JSON objects (invalid calls) are sent back as `{ invalid_arguments: "<raw>" }`
 * because providers (Anthropic) require an object there.
 */
export function toAssistantMessage(response: Pick<LlmResponse, 'text' | 'toolCalls'>): ModelMessage {
  const content: Exclude<Extract<ModelMessage, { role: 'assistant' }>['content'], string> = [];
  if (response.text) content.push({ type: 'text', text: response.text });
  for (const call of response.toolCalls) {
    content.push({ type: 'tool-call', toolCallId: call.id, toolName: call.name, input: safeToolInput(call.input, call.rawInput) });
  }
  return { role: 'assistant', content };
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function safeToolInput(input: unknown, raw?: string): Record<string, unknown> {
  if (isPlainObject(input)) return input;
  const text = raw ?? (typeof input === 'string' ? input : JSON.stringify(input ?? null));
  return { invalid_arguments: text };
}

const IMAGE_OMITTED = '[image omitted: this model does not accept images]';

function isImageMediaType(mediaType: unknown): boolean {
  return typeof mediaType === 'string' && mediaType.toLowerCase().startsWith('image/');
}

/**
 * Makes the history safe to send: non-object tool-call inputs wrapped (see toAssistantMessage) and, for
 * text-only models, image parts replaced by a short note.
 */
export function prepareMessages(messages: ModelMessage[], supportsImages: boolean): ModelMessage[] {
  return messages.map((message): ModelMessage => {
    if (message.role === 'assistant' && Array.isArray(message.content)) {
      let changed = false;
      const content = message.content.map((part) => {
        if (part.type === 'tool-call' && !isPlainObject(part.input)) {
          changed = true;
          return { ...part, input: safeToolInput(part.input) };
        }
        return part;
      });
      return changed ? { ...message, content } : message;
    }
    if (supportsImages) return message;
    if (message.role === 'user' && Array.isArray(message.content)) {
      let changed = false;
      const content = message.content.map((part) => {
        if (part.type === 'image' || (part.type === 'file' && isImageMediaType(part.mediaType))) {
          changed = true;
          return { type: 'text' as const, text: IMAGE_OMITTED };
        }
        return part;
      });
      return changed ? { ...message, content } : message;
    }
    if (message.role === 'tool') {
      let changed = false;
      const content = message.content.map((part) => {
        if (part.type !== 'tool-result' || part.output.type !== 'content') return part;
        const value = part.output.value.map((item) => {
          const isImage =
            item.type === 'image-data' ||
            item.type === 'image-url' ||
            item.type === 'image-file-id' ||
            ((item.type === 'media' || item.type === 'file-data' || item.type === 'file-url') && isImageMediaType(item.mediaType));
          if (!isImage) return item;
          changed = true;
          return { type: 'text' as const, text: IMAGE_OMITTED };
        });
        return { ...part, output: { ...part.output, value } };
      });
      return changed ? { ...message, content } : message;
    }
    return message;
  });
}

type UserPart = Exclude<Extract<ModelMessage, { role: 'user' }>['content'], string>[number];
type ToolMessage = Extract<ModelMessage, { role: 'tool' }>;
type ToolResultPart = Extract<ToolMessage['content'][number], { type: 'tool-result' }>;
type ContentItem = Extract<ToolResultPart['output'], { type: 'content' }>['value'][number];

/** An image item of a tool result as a user-message image part (undefined when it is not an image). */
function toImagePart(item: ContentItem): UserPart | undefined {
  switch (item.type) {
    case 'image-data':
      return { type: 'image', image: item.data, mediaType: item.mediaType };
    case 'media':
    case 'file-data':
      return isImageMediaType(item.mediaType) ? { type: 'image', image: item.data, mediaType: item.mediaType } : undefined;
    case 'image-url':
      return { type: 'image', image: new URL(item.url) };
    case 'file-url':
      return isImageMediaType(item.mediaType) ? { type: 'image', image: new URL(item.url), mediaType: item.mediaType } : undefined;
    default:
      return undefined;
  }
}

/**
 * For Chat Completions: a `tool` message can only hold text, and the AI SDK would JSON-encode rich tool output
 * (base64 images included — a token bomb). So: text-only `content` outputs become plain text, and images from
 * tool results move into one user message placed right after the run of tool messages.
 */
export function liftToolResultImages(messages: ModelMessage[]): ModelMessage[] {
  const out: ModelMessage[] = [];
  let pending: UserPart[] = [];
  const flush = () => {
    if (pending.length > 0) out.push({ role: 'user', content: pending });
    pending = [];
  };
  for (const message of messages) {
    if (message.role !== 'tool') {
      flush();
      out.push(message);
      continue;
    }
    const content = message.content.map((part) => {
      if (part.type !== 'tool-result' || part.output.type !== 'content') return part;
      const rest: ContentItem[] = [];
      const images: UserPart[] = [];
      for (const item of part.output.value) {
        const image = toImagePart(item);
        if (image) images.push(image);
        else rest.push(item);
      }
      if (images.length > 0) {
        pending.push({ type: 'text', text: `${images.length === 1 ? 'Image' : 'Images'} returned by tool call ${part.toolCallId} (${part.toolName}):` }, ...images);
        rest.push({ type: 'text', text: `[${images.length} image${images.length === 1 ? '' : 's'} attached in the next user message]` });
      }
      if (rest.every((item) => item.type === 'text')) {
        const text = rest.map((item) => (item as { text: string }).text).join('\n');
        return { ...part, output: { type: 'text' as const, value: text } };
      }
      return images.length > 0 ? { ...part, output: { type: 'content' as const, value: rest } } : part;
    });
    out.push({ ...message, content });
  }
  flush();
  return out;
}

function buildTools(specs: LlmToolSpec[]): ToolSet | undefined {
  if (specs.length === 0) return undefined;
  const tools: ToolSet = {};
  for (const spec of specs) {
    // No `execute`: the SDK must only report the call.
    tools[spec.name] = tool({ description: spec.description, inputSchema: jsonSchema(spec.inputSchema as JSONSchema7) });
  }
  return tools;
}

function deepestMessage(error: unknown): string {
  let cur: unknown = error;
  let msg = error instanceof Error ? error.message : String(error);
  for (let i = 0; i < 5 && cur instanceof Error; i++) {
    msg = cur.message;
    cur = (cur as { cause?: unknown }).cause;
  }
  return msg;
}

function invalidCallMessage(toolName: string, error: unknown, offered: string[]): string {
  if (NoSuchToolError.isInstance(error)) {
    return `Unknown tool "${toolName}". Available tools: ${offered.length > 0 ? offered.join(', ') : '(none)'}.`;
  }
  if (InvalidToolInputError.isInstance(error)) {
    return `The arguments for tool "${toolName}" are not valid JSON (${deepestMessage(error.cause ?? error)}). Call the tool again with a JSON object as arguments.`;
  }
  return `Invalid call of tool "${toolName}": ${deepestMessage(error)}`;
}

/** Carries an exception thrown by a caller's callback (onTextDelta) through the retry machinery untouched. */
class CallbackFailure {
  constructor(readonly error: unknown) {}
}

export interface LlmClientExtras {
  readonly provider: ProviderName;
  /** Model id without the provider prefix. */
  readonly modelId: string;
}

/** Creates an `LlmClient` for `settings.model`. Throws (synchronously) on an unusable model string. */
export function createLlmClient(settings: LlmSettings): LlmClient & LlmClientExtras {
  const { provider, modelId } = parseModelString(settings.model);
  const sdkModel: SdkLanguageModel = PROVIDERS[provider]({ modelId, apiKey: settings.apiKey, baseUrl: settings.baseUrl });
  const maxAttempts = Math.max(1, Math.floor(settings.maxAttempts ?? DEFAULT_MAX_ATTEMPTS));
  const backoff: BackoffSettings = {
    baseDelayMs: settings.baseDelayMs ?? DEFAULT_BACKOFF.baseDelayMs,
    maxDelayMs: settings.maxDelayMs ?? DEFAULT_BACKOFF.maxDelayMs,
    maxRetryAfterMs: settings.maxRetryAfterMs ?? DEFAULT_BACKOFF.maxRetryAfterMs,
  };
  const timeoutMs = settings.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  const supportsImages = settings.supportsImages ?? defaultSupportsImages(modelId);
  const contextWindow = settings.contextWindow ?? defaultContextWindow(modelId);
  const cacheSystem = provider === 'anthropic' && settings.cacheSystemPrompt !== false;
  // Chat Completions models ('openai-compatible.chat', 'openai.chat') cannot take images in tool results.
  const textOnlyToolResults = /\.chat$/.test(sdkModel.provider);
  const apiKey = settings.apiKey;
  // image URLs the model cannot fetch are downloaded before the step; a failed one becomes a note
  const images = new ImageResolver(() => sdkModel.supportedUrls);

  async function attempt(req: LlmRequest, messages: ModelMessage[], tools: ToolSet | undefined): Promise<LlmResponse> {
    const controller = new AbortController();
    let timedOut = false;
    let settled = false;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const touch = () => {
      clearTimeout(timer);
      if (settled) return; // the background stream may still deliver parts after we gave up on it
      timer = setTimeout(() => {
        timedOut = true;
        controller.abort(new Error('idle timeout'));
      }, timeoutMs);
    };
    const onUserAbort = () => controller.abort(req.signal?.reason);
    req.signal?.addEventListener('abort', onUserAbort, { once: true });

    let streamStarted = false;
    const stopped = new Promise<never>((_, reject) => {
      controller.signal.addEventListener('abort', () => reject(new Error('stopped')), { once: true });
    });
    stopped.catch(() => {});

    const run = consume();
    run.catch(() => {});
    try {
      touch();
      return await Promise.race([run, stopped]);
    } catch (error) {
      if (error instanceof CallbackFailure) throw error;
      if (req.signal?.aborted) throw new LlmAbortError();
      if (timedOut) {
        throw new ProviderError({
          code: 'Timeout',
          retryable: true,
          detail: `LLM request timed out: no data from the provider for ${timeoutMs} ms`,
        });
      }
      throw new ProviderError(classifyError(error, { apiKey, streamStarted }));
    } finally {
      settled = true;
      clearTimeout(timer);
      req.signal?.removeEventListener('abort', onUserAbort);
      // Release the connection if the stream is still open (no-op when it completed).
      if (!controller.signal.aborted) controller.abort(new Error('done'));
    }

    async function consume(): Promise<LlmResponse> {
      const rawInputs = new Map<string, string>();
      const capture: LanguageModelMiddleware = {
        specificationVersion: 'v3',
        wrapStream: async ({ doStream }) => {
          const result = await doStream();
          streamStarted = true;
          touch();
          return {
            ...result,
            stream: result.stream.pipeThrough(
              new TransformStream({
                transform(chunk, ctrl) {
                  if (chunk.type === 'tool-call') rawInputs.set(chunk.toolCallId, chunk.input);
                  ctrl.enqueue(chunk);
                },
              }),
            ),
          };
        },
      };
      const system: string | SystemModelMessage | undefined = !req.system
        ? undefined
        : cacheSystem
          ? { role: 'system', content: req.system, providerOptions: cacheControlProviderOptions() }
          : req.system;

      const result = streamText({
        model: wrapLanguageModel({ model: sdkModel, middleware: capture }),
        ...(system !== undefined ? { system } : {}),
        messages,
        ...(tools ? { tools } : {}),
        maxRetries: 0,
        abortSignal: controller.signal,
        ...(settings.maxOutputTokens !== undefined ? { maxOutputTokens: settings.maxOutputTokens } : {}),
        ...(settings.headers ? { headers: settings.headers } : {}),
        onError: () => {
          // Errors are read from the stream below; keep the SDK from logging them.
        },
      });

      let text = '';
      const toolCalls: LlmToolCall[] = [];
      let finishReason: string | undefined;
      let usage: LlmResponse['usage'] = {};
      let responseId: string | undefined;
      let streamError: unknown;
      let hasError = false;
      const offered = tools ? Object.keys(tools) : [];

      for await (const part of result.fullStream) {
        touch();
        if (part.type === 'text-delta') {
          text += part.text;
          if (req.onTextDelta) {
            try {
              req.onTextDelta(part.text);
            } catch (e) {
              throw new CallbackFailure(e);
            }
          }
        } else if (part.type === 'tool-call') {
          if (part.providerExecuted) continue;
          const rawInput =
            rawInputs.get(part.toolCallId) ?? (typeof part.input === 'string' ? part.input : JSON.stringify(part.input ?? {}));
          const call: LlmToolCall = { id: part.toolCallId, name: part.toolName, input: part.input, rawInput };
          if (part.invalid) call.error = invalidCallMessage(part.toolName, part.error, offered);
          toolCalls.push(call);
        } else if (part.type === 'finish-step') {
          responseId = part.response.id || responseId;
          finishReason = part.finishReason;
        } else if (part.type === 'finish') {
          finishReason = part.finishReason;
          const u = part.totalUsage;
          usage = {
            ...(u.inputTokens !== undefined ? { inputTokens: u.inputTokens } : {}),
            ...(u.outputTokens !== undefined ? { outputTokens: u.outputTokens } : {}),
            ...(u.inputTokenDetails?.cacheReadTokens !== undefined ? { cacheReadTokens: u.inputTokenDetails.cacheReadTokens } : {}),
            ...(u.inputTokenDetails?.cacheWriteTokens !== undefined ? { cacheWriteTokens: u.inputTokenDetails.cacheWriteTokens } : {}),
          };
        } else if (part.type === 'error') {
          streamError = part.error;
          hasError = true;
          break;
        } else if (part.type === 'abort') {
          throw new LlmAbortError();
        }
      }
      if (hasError) throw streamError;
      if (finishReason === undefined) {
        throw new ProviderError({
          code: 'StreamInterrupted',
          retryable: true,
          detail: 'LLM response stream was interrupted: it ended without a finish reason',
        });
      }
      return { text, toolCalls, finishReason, usage, ...(responseId ? { responseId } : {}) };
    }
  }

  return {
    model: settings.model,
    provider,
    modelId,
    contextWindow,
    supportsImages,
    async complete(req: LlmRequest): Promise<LlmResponse> {
      if (req.signal?.aborted) throw new LlmAbortError();
      const prepared = prepareMessages(req.messages, supportsImages);
      const lifted = textOnlyToolResults ? liftToolResultImages(prepared) : prepared;
      const messages = supportsImages
        ? await images.resolve(lifted, req.signal).catch((err) => {
            throw req.signal?.aborted ? new LlmAbortError() : err;
          })
        : lifted;
      const tools = buildTools(req.tools);
      for (let n = 1; ; n++) {
        try {
          return await attempt(req, messages, tools);
        } catch (error) {
          if (error instanceof CallbackFailure) throw error.error;
          if (req.signal?.aborted || error instanceof LlmAbortError) throw new LlmAbortError();
          const failure = error instanceof ProviderError ? error : new ProviderError(classifyError(error, { apiKey, streamStarted: false }));
          if (!failure.retryable) {
            throw n === 1 ? failure : new ProviderError({ ...failure.toInfo(), attempts: n });
          }
          if (n >= maxAttempts) {
            throw new ProviderError({
              ...failure.toInfo(),
              detail: n > 1 ? `${failure.detail} (gave up after ${n} attempts)` : failure.detail,
              attempts: n,
            });
          }
          const delayMs = retryDelayMs(n, backoff, failure.retryAfterMs);
          req.onRetry?.({ attempt: n, delayMs, error: failure.toInfo() });
          await sleep(delayMs, req.signal);
        }
      }
    },
  };
}
