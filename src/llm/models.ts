/**
 * Model strings, the provider table and per-model defaults (context window, image support).
 *
 * A model string is `<provider>/<model id>`; everything after the first slash is the provider's model id
 * (so `openai/meta-llama/Llama-3.3-70B-Instruct` is provider `openai`, model `meta-llama/Llama-3.3-70B-Instruct`).
 */
import type { wrapLanguageModel } from 'ai';
import type { LlmProviderName } from './catalog.js';
import { loadAi } from './sdk.js';

/** The AI SDK language model object (LanguageModelV3) that providers hand out. */
export type SdkLanguageModel = Parameters<typeof wrapLanguageModel>[0]['model'];

interface ProviderModelOptions {
  /** Model id without the provider prefix. */
  modelId: string;
  apiKey?: string;
  baseUrl?: string;
}

/**
 * The provider table: one entry per supported `<provider>/` prefix (named in catalog.ts's list too, which
 * the daemon reads without loading the SDKs). Each entry loads the one AI SDK provider package its model
 * needs, when first asked for a model. Adding another AI SDK provider is one entry here, e.g.
 * `google: async (o) => (await import('@ai-sdk/google')).createGoogleGenerativeAI({ apiKey: o.apiKey, baseURL: o.baseUrl })(o.modelId)`.
 */
export const PROVIDERS = {
  // Without baseUrl: OpenAI itself (Responses API). With baseUrl: any OpenAI-compatible Chat Completions
  // server (vLLM, Ollama, LiteLLM, OpenRouter, …) through the openai-compatible provider, whose streaming
  // tool-call assembly copes with the variations those servers produce; `includeUsage` asks for usage numbers.
  openai: async (o: ProviderModelOptions): Promise<SdkLanguageModel> =>
    o.baseUrl
      ? (await import('@ai-sdk/openai-compatible'))
          .createOpenAICompatible({ name: 'openai-compatible', baseURL: o.baseUrl, apiKey: o.apiKey, includeUsage: true })
          .chatModel(o.modelId)
      : (await import('@ai-sdk/openai')).createOpenAI({ apiKey: o.apiKey }).responses(o.modelId),
  // Anthropic Messages API; baseUrl (if any) replaces https://api.anthropic.com/v1 and should end in /v1.
  anthropic: async (o: ProviderModelOptions): Promise<SdkLanguageModel> =>
    (await import('@ai-sdk/anthropic')).createAnthropic({ apiKey: o.apiKey, ...(o.baseUrl ? { baseURL: o.baseUrl } : {}) }).messages(o.modelId),
} satisfies Record<LlmProviderName, (o: ProviderModelOptions) => Promise<SdkLanguageModel>>;

/**
 * The AI SDK model of a provider, its package loaded on first use with the SDK itself: the errors the
 * provider throws are classified by the SDK's own `isInstance` (errors.ts), asked once the SDK is loaded.
 */
export async function loadSdkModel(provider: ProviderName, o: ProviderModelOptions): Promise<SdkLanguageModel> {
  const [model] = await Promise.all([PROVIDERS[provider](o), loadAi()]);
  return model;
}

/**
 * Whether a provider's model (the AI SDK's, or the own client that streams it instead) speaks Chat
 * Completions, whose tool messages hold only text: the openai-compatible provider's, the one model with a
 * base URL. Known without loading the SDK (the loaded model's `provider` is then `openai-compatible.chat`).
 */
export function speaksChatCompletions(provider: ProviderName, baseUrl: string | undefined): boolean {
  return provider === 'openai' && !!baseUrl;
}

export type ProviderName = keyof typeof PROVIDERS;

const PROVIDER_NAMES = Object.keys(PROVIDERS) as ProviderName[];

interface ParsedModel {
  provider: ProviderName;
  /** The provider's model id (everything after the first slash). */
  modelId: string;
}

/** Splits `provider/model`. Throws an Error naming the allowed providers when the string is unusable. */
export function parseModelString(model: string): ParsedModel {
  const allowed = PROVIDER_NAMES.join(', ');
  if (typeof model !== 'string' || model.trim() === '') {
    throw new Error(`Invalid model: expected "<provider>/<model>" (providers: ${allowed}), got an empty value`);
  }
  const trimmed = model.trim();
  const slash = trimmed.indexOf('/');
  if (slash <= 0 || slash === trimmed.length - 1) {
    throw new Error(`Invalid model "${trimmed}": expected "<provider>/<model>" with provider one of: ${allowed}`);
  }
  const provider = trimmed.slice(0, slash).toLowerCase();
  const modelId = trimmed.slice(slash + 1);
  if (!Object.hasOwn(PROVIDERS, provider)) {
    throw new Error(`Unknown LLM provider "${provider}" in model "${trimmed}": allowed providers are ${allowed}`);
  }
  return { provider: provider as ProviderName, modelId };
}

// ---------------------------------------------------------------------------------------------------------
// Context windows. First matching pattern wins; patterns run against the lower-cased model id.

const DEFAULT_CONTEXT_WINDOW = 128_000;

const CONTEXT_WINDOWS: [RegExp, number][] = [
  // OpenAI
  [/gpt-4\.1/, 1_047_576],
  [/gpt-5[^/]*-chat/, 128_000],
  [/gpt-5/, 400_000],
  [/gpt-4o/, 128_000],
  [/gpt-4-turbo|gpt-4-\d{4}-preview|gpt-4-vision/, 128_000],
  [/gpt-4-32k/, 32_768],
  [/gpt-4(?![.\do])/, 8_192],
  [/gpt-3\.5-turbo-instruct/, 4_096],
  [/gpt-3\.5/, 16_385],
  [/gpt-oss/, 131_072],
  [/(^|[/:-])o1-(mini|preview)/, 128_000],
  [/(^|[/:-])o[134](-|$)/, 200_000],
  [/codex-mini/, 200_000],
  // Anthropic
  [/claude-(2|instant)/, 100_000],
  [/claude|sonnet|opus|haiku/, 200_000],
  // Google
  [/gemini-1\.0|gemini-pro$/, 32_768],
  [/gemini/, 1_048_576],
  [/gemma-?3/, 131_072],
  [/gemma/, 8_192],
  // Meta
  [/llama-?4/, 1_048_576],
  [/llama-?3\.[123]|llama3\.[123]/, 131_072],
  [/llama-?3/, 8_192],
  [/codellama|llama-?2/, 4_096],
  // Qwen
  [/qwen3-coder/, 262_144],
  [/qwen-?3/, 40_960],
  [/qwen2\.5-1m/, 1_000_000],
  [/qwen/, 32_768],
  // DeepSeek
  [/deepseek-coder(?!-v2)/, 16_384],
  [/deepseek/, 128_000],
  // Mistral
  [/codestral/, 256_000],
  [/devstral|mistral-large|mistral-medium|mistral-small-3|pixtral|ministral/, 128_000],
  [/mistral|mixtral/, 32_768],
  // Misc
  [/phi-?4/, 16_384],
  [/phi-?3/, 4_096],
  [/kimi|moonshot/, 131_072],
  [/glm-4\.[56]/, 131_072],
  [/grok/, 131_072],
];

/** The context window (tokens) the table gives a model id (without provider prefix); null when no entry matches. */
export function knownContextWindow(modelId: string): number | null {
  const id = modelId.toLowerCase();
  for (const [pattern, tokens] of CONTEXT_WINDOWS) if (pattern.test(id)) return tokens;
  return null;
}

/** Default context window (tokens) for a model id (without provider prefix). */
export function defaultContextWindow(modelId: string): number {
  return knownContextWindow(modelId) ?? DEFAULT_CONTEXT_WINDOW;
}

// ---------------------------------------------------------------------------------------------------------
// Image input support. Vision markers win; then known text-only families; default: images supported.

const VISION_MARKERS = /vision|(^|[-_/:.])vl([-_/:.]|$)|llava|pixtral|janus|moondream|minicpm-v|bakllava|gemma-?3(?!n?[-:]?1b)|llama-?4|mistral-small-3\.[12]/;

const TEXT_ONLY: RegExp[] = [
  /gpt-3\.5/,
  /gpt-4(-32k)?(-\d{4})?$/, // original gpt-4 (not -turbo, -o, .1)
  /(^|[/:-])o1-(mini|preview)/,
  /(^|[/:-])o3-mini/,
  /gpt-oss/,
  /claude-(2|instant)/,
  /deepseek/,
  /qwen/,
  /llama/,
  /mistral|mixtral|codestral|devstral|ministral/,
  /phi-?\d/,
  /gemma/,
  /starcoder|wizardcoder|codegemma|granite-code/,
  /kimi|moonshot|glm|grok-code|grok-3-mini|yi-/,
];

/** Whether a model (id without provider prefix) accepts image input, by name. */
export function defaultSupportsImages(modelId: string): boolean {
  const id = modelId.toLowerCase();
  if (VISION_MARKERS.test(id)) return true;
  return !TEXT_ONLY.some((p) => p.test(id));
}
