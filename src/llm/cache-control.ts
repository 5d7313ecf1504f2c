import type { ModelMessage } from 'ai';

type ProviderOptions = NonNullable<ModelMessage['providerOptions']>;

/**
 * Provider options that make a message (or system prompt / tool) an Anthropic prompt-cache breakpoint
 * (`cache_control: { type: 'ephemeral' }` on its last content block). Ignored by other providers.
 * Anthropic allows at most 4 breakpoints per request; the system prompt uses one when `cacheSystemPrompt`.
 * A light module (no SDK import): the prompt builder marks `cache_prompt` messages with it.
 */
export function cacheControlProviderOptions(): ProviderOptions {
  return { anthropic: { cacheControl: { type: 'ephemeral' } } };
}
