/** The LLM layer: `createLlmClient` and friends. See provider.ts. */
export * from './types.js';
export {
  createLlmClient,
  cacheControlProviderOptions,
  withCacheControl,
  toAssistantMessage,
  prepareMessages,
  liftToolResultImages,
  DEFAULT_MAX_ATTEMPTS,
  DEFAULT_TIMEOUT_MS,
  type LlmSettings,
  type LlmClientExtras,
} from './provider.js';
export { ProviderError, LlmAbortError, isAbortError, scrubSecrets, classifyError, parseRetryAfter } from './errors.js';
export {
  parseModelString,
  defaultContextWindow,
  defaultSupportsImages,
  PROVIDERS,
  PROVIDER_NAMES,
  DEFAULT_CONTEXT_WINDOW,
  type ParsedModel,
  type ProviderName,
} from './models.js';
export { retryDelayMs, sleep, DEFAULT_BACKOFF, type BackoffSettings } from './retry.js';
