/**
 * The LLM client's error types, apart from the classification in errors.ts so that the agent loop
 * can test for them without loading the AI SDK (which the daemon loads on its first LLM call).
 */
import type { ProviderErrorCode, ProviderErrorInfo } from './types.js';

/** Thrown by `LlmClient.complete` for every provider failure (after retries, when retryable). */
export class ProviderError extends Error implements ProviderErrorInfo {
  override name = 'ProviderError';
  readonly code: ProviderErrorCode;
  readonly retryable: boolean;
  readonly status?: number;
  readonly detail: string;
  /** How many attempts were made before giving up (1 when the error was not retried). */
  readonly attempts: number;
  /** Server-requested wait (Retry-After), if any. */
  readonly retryAfterMs?: number;

  constructor(info: ProviderErrorInfo & { attempts?: number; retryAfterMs?: number }) {
    super(info.detail);
    this.code = info.code;
    this.retryable = info.retryable;
    if (info.status !== undefined) this.status = info.status;
    this.detail = info.detail;
    this.attempts = info.attempts ?? 1;
    if (info.retryAfterMs !== undefined) this.retryAfterMs = info.retryAfterMs;
  }

  /** Plain `ProviderErrorInfo` (e.g. for events / JSON). */
  toInfo(): ProviderErrorInfo {
    return {
      code: this.code,
      retryable: this.retryable,
      ...(this.status !== undefined ? { status: this.status } : {}),
      detail: this.detail,
    };
  }

  static isProviderError(e: unknown): e is ProviderError {
    return e instanceof ProviderError;
  }
}

/** The error `complete()` rejects with when `req.signal` aborts. `name === 'AbortError'`. */
export class LlmAbortError extends Error {
  override name = 'AbortError';
  constructor(message = 'The LLM request was aborted') {
    super(message);
  }
}
