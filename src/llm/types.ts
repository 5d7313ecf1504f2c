import type { ModelMessage } from 'ai';

/** A tool as offered to the LLM: JSON Schema parameters (made from the tool's zod schema). */
export interface LlmToolSpec {
  name: string;
  description: string;
  /** JSON Schema (draft 2020-12 / OpenAPI compatible object schema). */
  inputSchema: Record<string, unknown>;
}

export interface LlmToolCall {
  id: string;
  name: string;
  /** Parsed arguments when the JSON was valid, else the raw string. */
  input: unknown;
  /** The raw JSON argument string as the model sent it. */
  rawInput: string;
  /**
   * Set when the call is unusable: arguments that are not valid JSON (then `input` is the raw string) or a
   * tool name that was not offered. The agent loop should answer the call with this text as an error result.
   */
  error?: string;
}

export interface LlmRequest {
  system: string;
  messages: ModelMessage[];
  tools: LlmToolSpec[];
  signal?: AbortSignal;
  /** Called with each streamed text delta. */
  onTextDelta?: (delta: string) => void;
  /**
   * Called before each retry (attempt is 1-based number of the failed attempt). Text already streamed by the
   * failed attempt is void: the next attempt streams the whole answer again from the start.
   */
  onRetry?: (info: { attempt: number; delayMs: number; error: ProviderErrorInfo }) => void;
  /** Called as the step reaches each phase (the request sent, the answer's first byte, its end): the turn trace. */
  onPhase?: (phase: string) => void;
}

export interface LlmResponse {
  text: string;
  toolCalls: LlmToolCall[];
  finishReason: string;
  usage: {
    inputTokens?: number;
    outputTokens?: number;
    /** Prompt tokens served from the provider's prompt cache (when reported). */
    cacheReadTokens?: number;
    /** Prompt tokens written to the provider's prompt cache (when reported). */
    cacheWriteTokens?: number;
  };
  responseId?: string;
}

export type ProviderErrorCode =
  | 'RateLimited'
  | 'ProviderUnavailable'
  | 'Timeout'
  | 'StreamInterrupted'
  | 'AuthenticationFailed'
  | 'BadRequest'
  | 'ContextWindowExceeded'
  | 'ProviderError';

export interface ProviderErrorInfo {
  code: ProviderErrorCode;
  retryable: boolean;
  status?: number;
  /** Human text, never holding the API key. */
  detail: string;
}

export interface LlmClient {
  readonly model: string;
  /** Context budget in tokens for this model. */
  readonly contextWindow: number;
  readonly supportsImages: boolean;
  complete(req: LlmRequest): Promise<LlmResponse>;
}
