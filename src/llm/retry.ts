/** Backoff arithmetic and an abortable sleep for the LLM retry loop. */
import { LlmAbortError } from './errors.js';

export interface BackoffSettings {
  /** First retry waits about this long (default 1000 ms); doubles each attempt. */
  baseDelayMs: number;
  /** Ceiling for the exponential delay (default 30 s). */
  maxDelayMs: number;
  /** Ceiling for a server-requested Retry-After wait (default 120 s). */
  maxRetryAfterMs: number;
}

export const DEFAULT_BACKOFF: BackoffSettings = {
  baseDelayMs: 1_000,
  maxDelayMs: 30_000,
  maxRetryAfterMs: 120_000,
};

/**
 * Delay before retry number `attempt` (1-based number of the attempt that failed).
 * "Equal jitter": half the exponential delay fixed, half random, so parallel clients spread out.
 * A server's Retry-After wins (up to `maxRetryAfterMs`), never shortened by the jitter.
 */
export function retryDelayMs(attempt: number, settings: BackoffSettings, retryAfterMs?: number, random: () => number = Math.random): number {
  const exp = Math.min(settings.maxDelayMs, settings.baseDelayMs * 2 ** Math.max(0, attempt - 1));
  const jittered = Math.round(exp / 2 + random() * (exp / 2));
  if (retryAfterMs !== undefined && Number.isFinite(retryAfterMs) && retryAfterMs >= 0) {
    return Math.round(Math.min(retryAfterMs, settings.maxRetryAfterMs));
  }
  return jittered;
}

/** Resolves after `ms`, or rejects with an AbortError as soon as `signal` aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  if (signal?.aborted) return Promise.reject(new LlmAbortError());
  if (ms <= 0) return Promise.resolve();
  return new Promise<void>((resolve, reject) => {
    const onAbort = () => {
      clearTimeout(timer);
      reject(new LlmAbortError());
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}
