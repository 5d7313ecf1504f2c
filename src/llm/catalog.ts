/**
 * The LLM catalog OpenHands' agent server offers (`/api/llm/providers`, `/models`, `/models/verified`),
 * from what Parley itself knows: its providers (models.ts's table, whose names are listed here so that
 * the daemon answers without loading the AI SDKs: the table must name exactly these) and the models it
 * knows by name. No network: a provider's live model list is not asked for (an OpenAI-compatible server
 * behind `openai/` with a base URL serves whatever it serves, which no catalog can list).
 *
 * Also the one translation of a model as OpenHands' clients name it (LiteLLM style) into Parley's
 * `provider/model`.
 */

/** The `<provider>/` prefixes Parley runs (models.ts's PROVIDERS has one entry for each). */
export const LLM_PROVIDER_NAMES = ['anthropic', 'openai'] as const;
export type LlmProviderName = (typeof LLM_PROVIDER_NAMES)[number];
const NAMES: readonly LlmProviderName[] = LLM_PROVIDER_NAMES;

/**
 * Models known by name, as each provider names them. `verified`: each provider's current general-purpose
 * models (what a model picker offers first); `other`: older or smaller ones. Every one has a context
 * window in models.ts's table (test/llm-catalog.test.ts).
 */
export const KNOWN_MODELS: Record<LlmProviderName, { verified: readonly string[]; other: readonly string[] }> = {
  openai: {
    verified: ['gpt-5', 'gpt-5-mini', 'gpt-4.1', 'gpt-4o', 'o4-mini'],
    other: ['gpt-5-nano', 'gpt-5-codex', 'gpt-4.1-mini', 'gpt-4.1-nano', 'gpt-4o-mini', 'o3', 'o3-mini', 'o1', 'codex-mini-latest'],
  },
  anthropic: {
    verified: ['claude-sonnet-4-5', 'claude-opus-4-1', 'claude-haiku-4-5'],
    other: ['claude-sonnet-4-20250514', 'claude-opus-4-20250514', 'claude-3-7-sonnet-20250219', 'claude-3-5-haiku-20241022'],
  },
};

/** The providers Parley can run. */
export function llmProviders(): { providers: string[] } {
  return { providers: [...NAMES] };
}

/** Every known model as `provider/model`, sorted; only the given provider's when one is named (an unknown one has none). */
export function llmModels(provider?: string | null): { models: string[] } {
  const names = provider ? NAMES.filter((p) => p === provider.toLowerCase()) : NAMES;
  const models = names.flatMap((p) => [...KNOWN_MODELS[p].verified, ...KNOWN_MODELS[p].other].map((m) => `${p}/${m}`));
  return { models: [...new Set(models)].sort() };
}

/** The verified models by provider (model ids without the provider, as OpenHands answers them). */
export function verifiedLlmModels(): { models: Record<string, string[]> } {
  return { models: Object.fromEntries(NAMES.map((p) => [p, [...KNOWN_MODELS[p].verified]])) };
}

/** A model Parley cannot run: the message says what it speaks to. */
export class UnknownModelError extends Error {
  override name = 'UnknownModelError';
}

/**
 * A model as the OpenHands client names it (LiteLLM style) → Parley's `provider/model`: known
 * prefixes stay, a bare `claude-…` is Anthropic's, any other bare name OpenAI's; `litellm_proxy/x`
 * and unknown prefixes behind a `base_url` go to an OpenAI-compatible server. Anything else throws
 * an UnknownModelError.
 */
export function toParleyModel(model: string, baseUrl: string | null | undefined): string {
  const m = model.trim();
  const slash = m.indexOf('/');
  if (slash < 0) return /^claude/i.test(m) ? `anthropic/${m}` : `openai/${m}`;
  const provider = m.slice(0, slash).toLowerCase();
  if ((NAMES as readonly string[]).includes(provider)) return `${provider}/${m.slice(slash + 1)}`;
  if (provider === 'litellm_proxy') return `openai/${m.slice(slash + 1)}`;
  if (baseUrl) return `openai/${m}`;
  throw new UnknownModelError(`model "${m}": Parley speaks to openai/…, anthropic/… and OpenAI-compatible servers (give base_url)`);
}
