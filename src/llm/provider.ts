/**
 * The LLM client: one streamed completion step through an AI SDK (v6) provider's model, with our own
 * retry loop.
 *
 * - The provider's LanguageModelV3 `doStream` is called directly, with a prompt converted once per
 *   message (src/llm/prompt.ts): a step costs what is new, not the whole history (`streamText`
 *   re-validated the whole prompt at every call). Tools are only described; the agent loop runs them.
 * - OpenAI-compatible Chat Completions servers (`openai/…` with a base URL) are streamed by this project's
 *   own client (src/llm/chat-completions.ts, whose header says why) instead of the SDK provider's `doStream`.
 * - The AI SDK and the one provider package a model needs are loaded on first use (models.ts, sdk.ts): a
 *   model the own client streams loads neither for its text and tool steps.
 * - Unusable tool calls (arguments that are not JSON, unknown tool names) come back as ordinary tool calls
 *   with `error` set (and `input` = the raw string when it did not parse); nothing is thrown.
 * - `complete()` retries rate limits, 5xx, timeouts, network errors and dropped streams with jittered
 *   exponential backoff honouring Retry-After.
 */
import type { ModelMessage } from 'ai';
import { LlmAbortError, ProviderError, classifyError } from './errors.js';
import { cacheControlProviderOptions } from './cache-control.js';
import { ImageResolver } from './image-urls.js';
import {
  defaultContextWindow,
  defaultSupportsImages,
  loadSdkModel,
  parseModelString,
  speaksChatCompletions,
  type ProviderName,
  type SdkLanguageModel,
} from './models.js';
import { DEFAULT_BACKOFF, retryDelayMs, sleep, type BackoffSettings } from './retry.js';
import { PromptConverter, safeToolInput, type SdkPrompt, type SdkTools } from './prompt.js';
import { createChatCompletions, type StepPart } from './chat-completions.js';
import type { LlmClient, LlmRequest, LlmResponse, LlmToolCall } from './types.js';

export { parseModelString } from './models.js';

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
  /**
   * Who streams OpenAI-compatible Chat Completions (`openai/…` with baseUrl): this project's client (default)
   * or the AI SDK provider's, kept to compare the two (tests check they send and return the same).
   */
  chatCompletionsClient?: 'own' | 'ai-sdk';
}

const DEFAULT_MAX_ATTEMPTS = 5;
const DEFAULT_TIMEOUT_MS = 300_000;

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

/**
 * A tool call as the model sent it (`input`: the raw JSON text), parsed. A tool that was not offered or
 * arguments that are not JSON give a call with `error` set (the agent answers it with that text).
 */
function toolCall(id: string, name: string, rawInput: string, offered: string[]): LlmToolCall {
  let input: unknown = rawInput;
  let parseError: string | undefined;
  try {
    input = rawInput.trim() === '' ? {} : JSON.parse(rawInput);
  } catch (err) {
    parseError = (err as Error).message;
  }
  const call: LlmToolCall = { id, name, input, rawInput };
  if (!offered.includes(name)) call.error = `Unknown tool "${name}". Available tools: ${offered.length > 0 ? offered.join(', ') : '(none)'}.`;
  else if (parseError !== undefined)
    call.error = `The arguments for tool "${name}" are not valid JSON (${parseError}). Call the tool again with a JSON object as arguments.`;
  return call;
}

type SdkStream = Awaited<ReturnType<SdkLanguageModel['doStream']>>['stream'];

/** The parts of the SDK's stream that a step uses, as the own client yields them (an in-stream error is thrown). */
async function* sdkParts(stream: SdkStream): AsyncGenerator<StepPart> {
  for await (const part of stream) {
    if (part.type === 'text-delta') yield { type: 'text', delta: part.delta };
    else if (part.type === 'tool-call') {
      if (!part.providerExecuted) yield { type: 'tool-call', id: part.toolCallId, name: part.toolName, input: part.input };
    } else if (part.type === 'response-metadata') {
      if (part.id) yield { type: 'response-id', id: part.id };
    } else if (part.type === 'finish') {
      const u = part.usage;
      yield {
        type: 'finish',
        finishReason: part.finishReason.unified,
        usage: {
          ...(u.inputTokens.total !== undefined ? { inputTokens: u.inputTokens.total } : {}),
          ...(u.outputTokens.total !== undefined ? { outputTokens: u.outputTokens.total } : {}),
          ...(u.inputTokens.cacheRead !== undefined ? { cacheReadTokens: u.inputTokens.cacheRead } : {}),
          ...(u.inputTokens.cacheWrite !== undefined ? { cacheWriteTokens: u.inputTokens.cacheWrite } : {}),
        },
      };
    } else if (part.type === 'error') {
      throw part.error;
    }
  }
}

/** Carries an exception thrown by a caller's callback (onTextDelta) through the retry machinery untouched. */
class CallbackFailure {
  constructor(readonly error: unknown) {}
}

/** Where a client streams its steps, and what every attempt sends and waits for. */
interface StepTarget {
  /** The AI SDK provider's model, loaded on first use (never, for a model the own client streams). */
  readonly sdkModel: () => Promise<SdkLanguageModel>;
  /** The own Chat Completions client, when it streams this model's steps instead of the SDK provider. */
  readonly chat: ReturnType<typeof createChatCompletions> | undefined;
  readonly settings: LlmSettings;
  readonly apiKey: string | undefined;
  readonly timeoutMs: number;
}

/**
 * The idle timer of one attempt: `touch()` at every sign of life; after `timeoutMs` without one, `controller`
 * is aborted and `timedOut()` is true. `settle()` ends it (later touches are ignored).
 */
function idleTimer(controller: AbortController, timeoutMs: number): { touch(): void; timedOut(): boolean; settle(): void } {
  let timedOut = false;
  let settled = false;
  let timer: ReturnType<typeof setTimeout> | undefined;
  return {
    touch() {
      if (settled) return; // the background stream may still deliver parts after we gave up on it
      // one timer per attempt, restarted by every sign of life (a new timer per stream chunk cost more)
      if (timer) timer.refresh();
      else {
        timer = setTimeout(() => {
          timedOut = true;
          controller.abort(new Error('idle timeout'));
        }, timeoutMs);
      }
    },
    timedOut: () => timedOut,
    settle() {
      settled = true;
      clearTimeout(timer);
    },
  };
}

/**
 * Opens one step through the own Chat Completions client, or straight through the provider's LanguageModelV3
 * `doStream`: no SDK retries, no SDK tool execution, no re-validation of the prompt (it was converted
 * message by message, see PromptConverter).
 */
async function openStep(
  target: StepTarget,
  req: LlmRequest,
  prompt: SdkPrompt,
  tools: SdkTools | undefined,
  signal: AbortSignal,
  touch: () => void,
): Promise<AsyncIterable<StepPart>> {
  const { chat, sdkModel, settings } = target;
  if (chat) return chat.open({ prompt, ...(tools ? { tools } : {}), signal, alive: touch, phase: req.onPhase });
  const { stream } = await (await sdkModel()).doStream({
    prompt,
    ...(tools ? { tools, toolChoice: { type: 'auto' as const } } : {}),
    abortSignal: signal,
    ...(settings.maxOutputTokens !== undefined ? { maxOutputTokens: settings.maxOutputTokens } : {}),
    ...(settings.headers ? { headers: settings.headers } : {}),
  });
  return sdkParts(stream);
}

/**
 * Reads a step's parts into a response, passing text deltas to `req.onTextDelta` (an exception there comes
 * out as a CallbackFailure). A stream that ends without a finish reason is a retryable StreamInterrupted.
 */
async function readStep(parts: AsyncIterable<StepPart>, req: LlmRequest, tools: SdkTools | undefined, touch: () => void): Promise<LlmResponse> {
  let text = '';
  const toolCalls: LlmToolCall[] = [];
  let finishReason: string | undefined;
  let usage: LlmResponse['usage'] = {};
  let responseId: string | undefined;
  const offered = tools ? tools.map((t) => t.name) : [];

  for await (const part of parts) {
    touch();
    if (part.type === 'text') {
      text += part.delta;
      if (req.onTextDelta) {
        try {
          req.onTextDelta(part.delta);
        } catch (e) {
          throw new CallbackFailure(e);
        }
      }
    } else if (part.type === 'tool-call') {
      toolCalls.push(toolCall(part.id, part.name, part.input, offered));
    } else if (part.type === 'response-id') {
      responseId = part.id;
    } else {
      finishReason = part.finishReason;
      usage = part.usage;
    }
  }
  req.onPhase?.('LLM answer parsed');
  if (finishReason === undefined) {
    throw new ProviderError({
      code: 'StreamInterrupted',
      retryable: true,
      detail: 'LLM response stream was interrupted: it ended without a finish reason',
    });
  }
  return { text, toolCalls, finishReason, usage, ...(responseId ? { responseId } : {}) };
}

/**
 * One attempt at a step, bounded by the idle timeout and the caller's signal. Failures come out as a
 * ProviderError (classified), an LlmAbortError, or a CallbackFailure.
 */
async function attempt(target: StepTarget, req: LlmRequest, prompt: SdkPrompt, tools: SdkTools | undefined): Promise<LlmResponse> {
  const { timeoutMs } = target;
  const controller = new AbortController();
  const idle = idleTimer(controller, timeoutMs);
  const onUserAbort = () => controller.abort(req.signal?.reason);
  req.signal?.addEventListener('abort', onUserAbort, { once: true });

  let streamStarted = false;
  const stopped = new Promise<never>((_, reject) => {
    controller.signal.addEventListener('abort', () => reject(new Error('stopped')), { once: true });
  });
  stopped.catch(() => {});

  const consume = async (): Promise<LlmResponse> => {
    const parts = await openStep(target, req, prompt, tools, controller.signal, idle.touch);
    streamStarted = true;
    idle.touch();
    return readStep(parts, req, tools, idle.touch);
  };
  const run = consume();
  run.catch(() => {});
  try {
    idle.touch();
    return await Promise.race([run, stopped]);
  } catch (error) {
    if (error instanceof CallbackFailure) throw error;
    if (req.signal?.aborted) throw new LlmAbortError();
    if (idle.timedOut()) {
      throw new ProviderError({
        code: 'Timeout',
        retryable: true,
        detail: `LLM request timed out: no data from the provider for ${timeoutMs} ms`,
      });
    }
    throw new ProviderError(classifyError(error, { apiKey: target.apiKey, streamStarted }));
  } finally {
    idle.settle();
    req.signal?.removeEventListener('abort', onUserAbort);
    // Release the connection if the stream is still open (no-op when it completed).
    if (!controller.signal.aborted) controller.abort(new Error('done'));
  }
}

interface LlmClientExtras {
  readonly provider: ProviderName;
  /** Model id without the provider prefix. */
  readonly modelId: string;
}

/** Creates an `LlmClient` for `settings.model`. Throws (synchronously) on an unusable model string. */
export function createLlmClient(settings: LlmSettings): LlmClient & LlmClientExtras {
  const { provider, modelId } = parseModelString(settings.model);
  let loaded: Promise<SdkLanguageModel> | undefined;
  const sdkModel = () => (loaded ??= loadSdkModel(provider, { modelId, apiKey: settings.apiKey, baseUrl: settings.baseUrl }));
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
  // Chat Completions models cannot take images in tool results.
  const textOnlyToolResults = speaksChatCompletions(provider, settings.baseUrl);
  const apiKey = settings.apiKey;
  const chat =
    provider === 'openai' && settings.baseUrl && settings.chatCompletionsClient !== 'ai-sdk'
      ? createChatCompletions({ baseUrl: settings.baseUrl, modelId, apiKey, headers: settings.headers, maxOutputTokens: settings.maxOutputTokens })
      : undefined;
  // The URLs the model fetches itself. The own client stands in for the openai-compatible provider's model,
  // which fetches none: asking it would load the SDK for nothing.
  const supportedUrls = chat ? () => ({}) : () => sdkModel().then((m) => m.supportedUrls);
  // image URLs the model cannot fetch are downloaded before the step; a failed one becomes a note
  const images = new ImageResolver(supportedUrls);
  const converter = new PromptConverter({ supportsImages, textOnlyToolResults, images, supportedUrls });
  const systemOptions = cacheSystem ? cacheControlProviderOptions() : undefined;
  const target: StepTarget = { sdkModel, chat, settings, apiKey, timeoutMs };

  return {
    model: settings.model,
    provider,
    modelId,
    contextWindow,
    supportsImages,
    async complete(req: LlmRequest): Promise<LlmResponse> {
      if (req.signal?.aborted) throw new LlmAbortError();
      const prompt = await converter.prompt(req.system, systemOptions, req.messages, req.signal).catch((err) => {
        throw req.signal?.aborted ? new LlmAbortError() : err;
      });
      const tools = converter.tools(req.tools);
      req.onPhase?.('LLM prompt converted');
      for (let n = 1; ; n++) {
        try {
          return await attempt(target, req, prompt, tools);
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
