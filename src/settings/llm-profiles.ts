/**
 * LLM profiles (OpenHands' `/api/profiles`): named LLM configurations (model, base URL, key) to switch
 * between. A profile's key is sealed at rest like the provider tokens (SecretBox) and is never answered:
 * a profile is shown with `api_key: null` and `api_key_set`. Activating one makes it the server's LLM
 * (what new conversations use, as `POST /api/settings` sets it) and the settings' `active_profile`.
 *
 * Parley keeps what it runs with of an LLM: `model`, `base_url`, the key. A profile's other LLM options
 * (temperature, retries…) are accepted and not kept, so a profile never shows an option that does nothing.
 */
import { ConflictError, NotFoundError, RequestValidationError } from '../errors.js';
import { toParleyModel, UnknownModelError } from '../llm/catalog.js';
import type { Settings } from '../secrets/settings.js';
import { SECRET_PLACEHOLDER } from '../secrets/redact.js';
import { llmProfileReferrers, renameLlmProfileRefs, type JsonRecords } from './records.js';

const KIND = 'llm_profile';
/** As many as OpenHands keeps (a save past it is a 409). */
const MAX_PROFILES = 50;
/** OpenHands' profile names. */
export const PROFILE_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;

/** The LLM fields of a request (the wire schema accepts and drops the rest). */
export interface LlmInput {
  model?: string | null;
  base_url?: string | null;
  api_key?: string | null;
}

interface StoredProfile {
  model: string | null;
  base_url: string | null;
}

/** A profile's LLM as Parley runs it. */
export interface ResolvedLlm {
  model: string | null;
  base_url: string | null;
  api_key: string | null;
}

function modelOrIssue(model: string | null | undefined, baseUrl: string | null | undefined, loc: (string | number)[]): string | null {
  if (!model) return null;
  try {
    return toParleyModel(model, baseUrl);
  } catch (err) {
    if (err instanceof UnknownModelError) throw new RequestValidationError([{ type: 'value_error', loc, msg: `Value error, ${err.message}`, input: model }]);
    throw err;
  }
}

export class LlmProfiles {
  constructor(
    private readonly records: JsonRecords,
    private readonly settings: Settings,
  ) {}

  private stored(name: string) {
    return this.records.get<StoredProfile & { api_key_sealed: string | null }>(KIND, name);
  }

  async list() {
    const doc = await this.records.settingsDoc();
    const all = await this.records.list<StoredProfile & { api_key_sealed: string | null }>(KIND);
    return {
      profiles: all
        .sort((a, b) => a.name.localeCompare(b.name))
        .map(({ name, doc: p }) => ({
          name,
          model: p.model,
          base_url: p.base_url,
          provider_connection_id: null,
          provider_connection_broken: false,
          api_key_set: !!p.api_key_sealed,
        })),
      active_profile: doc.active_profile,
    };
  }

  async get(name: string) {
    const p = await this.stored(name);
    if (!p) throw new NotFoundError(`Profile '${name}' not found`);
    return { name, config: { model: p.model, base_url: p.base_url, api_key: null }, api_key_set: !!p.api_key_sealed };
  }

  /** The profile's LLM with its key opened (to apply it); 404 when there is none. */
  async resolve(name: string): Promise<ResolvedLlm> {
    const p = await this.stored(name);
    if (!p) throw new NotFoundError(`Profile '${name}' not found`);
    return { model: p.model ? toParleyModel(p.model, p.base_url) : null, base_url: p.base_url, api_key: this.settings.unseal(p.api_key_sealed) };
  }

  /** Creates or overwrites; the key is kept only with `include_secrets` (the default). */
  save(name: string, llm: LlmInput, includeSecrets: boolean) {
    return this.settings.serialize(async () => {
      modelOrIssue(llm.model, llm.base_url, ['body', 'llm', 'model']);
      const existing = await this.stored(name);
      if (!existing && (await this.records.list(KIND)).length >= MAX_PROFILES) {
        throw new ConflictError(`Profile limit reached (${MAX_PROFILES}). Delete a profile before saving a new one.`);
      }
      const key = includeSecrets && llm.api_key && llm.api_key !== SECRET_PLACEHOLDER && llm.api_key !== '**********' ? llm.api_key : null;
      await this.records.put(KIND, name, { model: llm.model ?? null, base_url: llm.base_url ?? null, api_key_sealed: key ? this.settings.seal(key) : null });
      return { name, message: `Profile '${name}' saved` };
    });
  }

  /** Idempotent; a profile an agent profile refers to is kept (409 naming them). */
  delete(name: string) {
    return this.settings.serialize(async () => {
      const referrers = await llmProfileReferrers(this.records, name);
      if (referrers.length) throw new ConflictError(`Profile '${name}' is referenced by agent profile(s): ${referrers.join(', ')}`);
      await this.records.delete(KIND, name);
      const doc = await this.records.settingsDoc();
      if (doc.active_profile === name) await this.records.putSettingsDoc({ ...doc, active_profile: null });
      return { name, message: `Profile '${name}' deleted` };
    });
  }

  rename(name: string, newName: string) {
    return this.settings.serialize(async () => {
      const p = await this.stored(name);
      if (!p) throw new NotFoundError(`Profile '${name}' not found`);
      if (name === newName) return { name, message: `Profile '${name}' unchanged (same name)` };
      if (await this.stored(newName)) throw new ConflictError(`Profile '${newName}' already exists`);
      await this.records.put(KIND, newName, p);
      await this.records.delete(KIND, name);
      await renameLlmProfileRefs(this.records, name, newName);
      const doc = await this.records.settingsDoc();
      if (doc.active_profile === name) await this.records.putSettingsDoc({ ...doc, active_profile: newName });
      return { name: newName, message: `Profile '${name}' renamed to '${newName}'` };
    });
  }

  /** The profile becomes the server's LLM (new conversations run it) and the active profile. */
  async activate(name: string) {
    const llm = await this.resolve(name);
    await this.settings.serialize(async () => {
      await this.settings.saveLlmSettings({ llm_model: llm.model, llm_base_url: llm.base_url, llm_api_key: llm.api_key });
      await this.records.putSettingsDoc({ ...(await this.records.settingsDoc()), active_profile: name });
    });
    return { name, message: `Profile '${name}' activated and applied to current settings`, llm_applied: true };
  }

  /**
   * A pre-flight check: one request of one output token to the configured LLM. Rate limits and
   * timeouts do not say the configuration is wrong (valid); any other failure is answered with its
   * kind and the provider's message (keys redacted).
   */
  async validate(llm: LlmInput) {
    const model = modelOrIssue(llm.model, llm.base_url, ['body', 'llm', 'model']);
    if (!model) return { valid: false, error: { type: 'BadRequest', message: 'No model given' } };
    // the key is masked in what is answered, without joining the daemon's redactor (a draft may be any string, any number of times)
    const mask = (t: string) => this.settings.redact(llm.api_key && llm.api_key.length >= 4 ? t.split(llm.api_key).join('<secret_hidden>') : t);
    const { createLlmClient } = await import('../llm/provider.js');
    const { ProviderError } = await import('../llm/errors.js');
    try {
      const client = createLlmClient({
        model,
        apiKey: llm.api_key ?? undefined,
        baseUrl: llm.base_url ?? undefined,
        maxAttempts: 1,
        maxOutputTokens: 1,
        timeoutMs: 30_000,
      });
      await client.complete({ system: '', messages: [{ role: 'user', content: 'ping' }], tools: [] });
      return { valid: true, error: null };
    } catch (err) {
      if (err instanceof ProviderError) {
        if (err.code === 'RateLimited' || err.code === 'Timeout') return { valid: true, error: null };
        return { valid: false, error: { type: err.code, message: mask(err.detail) } };
      }
      return { valid: false, error: { type: (err as Error).name || 'Error', message: mask(String((err as Error).message ?? err)) } };
    }
  }
}
