/**
 * Everything the daemon keeps sealed (SecretBox) in the store's secret records: git provider
 * tokens, the LLM settings set at run time, custom secrets (the agent shell's environment) and
 * the default MCP config. Every value read or written is added to the redactor.
 */
import type { Logger } from 'pino';
import { ConflictError, NotFoundError } from '../errors.js';
import type { SecretStore } from '../store/types.js';
import { fullMcpConfig, mcpSecretValues, mergeMcpConfig, type FullMcpConfig, type McpConfig } from './mcp-config.js';
import { mcpServerSecrets, toMcpConfig, type McpServerMap } from '../settings/mcp-servers.js';
import { GIT_PROVIDERS, type GitProvider } from '../workspace/providers.js';
import type { SecretBox } from './crypto.js';
import type { Redactor } from './redact.js';

const PROVIDER_KIND = 'provider';
const SETTINGS_KIND = 'settings';
const SECRET_KIND = 'custom';
/** How many of the last sealed configs that name no server are remembered (openMcp opens them without decrypting). */
const EMPTY_SEALED_KEPT = 256;

interface StoredProvider {
  provider: GitProvider;
  token: string | null;
  host: string | null;
  user_id: string | null;
}

interface ProviderTokensUpdate {
  provider_tokens: Partial<Record<GitProvider, { token?: string | null; host?: string | null; user_id?: string | null }>>;
  mcp_config?: McpConfig | null;
}

export interface LlmSettings {
  llm_model: string | null;
  llm_base_url: string | null;
  llm_api_key: string | null;
}

export class Settings {
  /** Configs sealed here that name no server (nothing secret in them), the newest EMPTY_SEALED_KEPT. */
  private readonly emptySealed = new Set<string>();

  constructor(
    private readonly store: SecretStore,
    private readonly box: SecretBox,
    private readonly redactor: Redactor,
    private readonly log: Logger,
  ) {}

  /** Loads every stored secret value into the redactor (at start). */
  async loadIntoRedactor(): Promise<void> {
    for (const p of await this.getProviders()) this.redactor.add(p.token);
    for (const s of await this.store.listSecrets(SECRET_KIND)) this.redactor.add(this.open(s.sealed));
    this.redactor.add((await this.getLlmSettings()).llm_api_key);
    this.redactor.add(...mcpSecretValues(await this.defaultMcpConfig()));
  }

  /**
   * Runs read-modify-write updates of the stored settings one at a time (in this process: two
   * requests changing the same record would otherwise lose one change).
   */
  serialize<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.queue.then(fn, fn);
    this.queue = run.then(
      () => undefined,
      () => undefined,
    );
    return run;
  }
  private queue: Promise<unknown> = Promise.resolve();

  /** Every value this node opens is redacted from its output: another node (cluster mode) may have stored it. */
  private open(sealed: string | null): string | null {
    const value = this.decrypt(sealed);
    this.redactor.add(value);
    return value;
  }

  private decrypt(sealed: string | null): string | null {
    if (!sealed) return null;
    try {
      return this.box.decrypt(sealed);
    } catch {
      this.log.error('a stored secret could not be decrypted (was SECRET_KEY changed?)');
      return null;
    }
  }

  /** A secret value sealed for storing elsewhere (a conversation's record); it is redacted from here on. */
  seal(value: string): string {
    this.redactor.add(value);
    return this.box.encrypt(value);
  }

  /** Text with every secret this daemon knows masked. */
  redact(text: string): string {
    return this.redactor.redact(text);
  }

  /** A value sealed by `seal`, opened (and redacted from here on); null when it cannot be opened. */
  unseal(sealed: string | null | undefined): string | null {
    const value = this.open(sealed ?? null);
    this.redactor.add(value);
    return value;
  }

  // ---- MCP configs --------------------------------------------------------------------------

  /** A conversation's MCP config, sealed for its record (its keys and env values are secrets). */
  sealMcp(cfg: McpConfig): string {
    this.redactor.add(...mcpSecretValues(cfg));
    const sealed = this.box.encrypt(JSON.stringify(cfg));
    if (!cfg.sse_servers?.length && !cfg.stdio_servers?.length && !cfg.shttp_servers?.length) {
      if (this.emptySealed.size >= EMPTY_SEALED_KEPT) this.emptySealed.delete(this.emptySealed.values().next().value!);
      this.emptySealed.add(sealed);
    }
    return sealed;
  }

  openMcp(sealed: string | null | undefined): FullMcpConfig {
    // a config sealed here that names no server holds nothing: no decryption (a new conversation's first run opens its own)
    if (sealed && this.emptySealed.has(sealed)) return fullMcpConfig(null);
    const raw = this.decrypt(sealed ?? null);
    const cfg = fullMcpConfig(raw ? (JSON.parse(raw) as McpConfig) : null);
    this.redactor.add(...mcpSecretValues(cfg));
    return cfg;
  }

  /**
   * The MCP config every new conversation starts with: the one stored with the git providers, and the
   * enabled servers of the settings' MCP server map (which win for the same name or URL).
   */
  async defaultMcpConfig(): Promise<FullMcpConfig> {
    const s = await this.store.getSecret(SETTINGS_KIND, 'mcp_config');
    const servers = await this.mcpServers();
    return fullMcpConfig(mergeMcpConfig(this.openMcp(s?.sealed), toMcpConfig(servers)));
  }

  /** The settings' MCP server map (OpenHands' `agent_settings.mcp_config`), credentials included: sealed at rest. */
  async mcpServers(): Promise<McpServerMap> {
    const raw = this.decrypt((await this.store.getSecret(SETTINGS_KIND, 'mcp_servers'))?.sealed ?? null);
    const map = raw ? (JSON.parse(raw) as McpServerMap) : {};
    this.redactor.add(...mcpServerSecrets(map));
    return map;
  }

  async saveMcpServers(map: McpServerMap): Promise<void> {
    this.redactor.add(...mcpServerSecrets(map));
    await this.store.putSecret({ kind: SETTINGS_KIND, name: 'mcp_servers', sealed: this.box.encrypt(JSON.stringify(map)), meta: {} });
  }

  // ---- git providers ------------------------------------------------------------------------

  async addGitProviders(req: ProviderTokensUpdate): Promise<{ message: string }> {
    const previous = new Map((await this.getProviders()).map((p) => [p.provider, p]));
    const next = [];
    for (const provider of GIT_PROVIDERS) {
      const entry = req.provider_tokens[provider];
      if (!entry) continue;
      const token = entry.token ? entry.token : (previous.get(provider)?.token ?? null);
      this.redactor.add(token);
      next.push({
        kind: PROVIDER_KIND,
        name: provider,
        sealed: token ? this.box.encrypt(token) : null,
        meta: { host: entry.host ?? null, user_id: entry.user_id ?? null },
      });
    }
    await this.store.replaceSecrets(PROVIDER_KIND, next);
    if (req.mcp_config) {
      await this.store.putSecret({ kind: SETTINGS_KIND, name: 'mcp_config', sealed: this.sealMcp(req.mcp_config), meta: {} });
    }
    return { message: 'Git providers stored' };
  }

  async getProviders(): Promise<StoredProvider[]> {
    return (await this.store.listSecrets(PROVIDER_KIND)).map((s) => ({
      provider: s.name as GitProvider,
      token: this.open(s.sealed),
      host: (s.meta.host as string | null) ?? null,
      user_id: (s.meta.user_id as string | null) ?? null,
    }));
  }

  // ---- LLM settings -------------------------------------------------------------------------

  async getLlmSettings(): Promise<LlmSettings> {
    const rec = await this.store.getSecret(SETTINGS_KIND, 'llm');
    return {
      llm_model: (rec?.meta.llm_model as string | null) ?? null,
      llm_base_url: (rec?.meta.llm_base_url as string | null) ?? null,
      llm_api_key: this.open(rec?.sealed ?? null),
    };
  }

  /** The stored LLM settings without decrypting the key. */
  async llmView(): Promise<{ model: string | null; base_url: string | null; key_set: boolean }> {
    const rec = await this.store.getSecret(SETTINGS_KIND, 'llm');
    return { model: (rec?.meta.llm_model as string | null) ?? null, base_url: (rec?.meta.llm_base_url as string | null) ?? null, key_set: !!rec?.sealed };
  }

  async publicSettings() {
    const s = await this.getLlmSettings();
    return { llm_model: s.llm_model, llm_base_url: s.llm_base_url, llm_api_key_set: !!s.llm_api_key };
  }

  /** Absent fields keep their stored value; null clears it. */
  async saveLlmSettings(patch: Partial<LlmSettings>) {
    const cur = await this.getLlmSettings();
    const next = { ...cur, ...patch };
    this.redactor.add(next.llm_api_key);
    await this.store.putSecret({
      kind: SETTINGS_KIND,
      name: 'llm',
      sealed: next.llm_api_key ? this.box.encrypt(next.llm_api_key) : null,
      meta: { llm_model: next.llm_model, llm_base_url: next.llm_base_url },
    });
    return this.publicSettings();
  }

  // ---- custom secrets -----------------------------------------------------------------------

  async listSecrets() {
    return { secrets: (await this.store.listSecrets(SECRET_KIND)).map((s) => ({ name: s.name, description: (s.meta.description as string | null) ?? null })) };
  }

  async createSecret(name: string, value: string, description?: string | null) {
    if (await this.store.getSecret(SECRET_KIND, name)) throw new ConflictError(`Secret ${name} already exists`);
    this.redactor.add(value);
    await this.store.putSecret({ kind: SECRET_KIND, name, sealed: this.box.encrypt(value), meta: { description: description ?? null } });
    return { name, description: description ?? null };
  }

  async updateSecret(name: string, value: string | null | undefined, description?: string | null) {
    const cur = await this.store.getSecret(SECRET_KIND, name);
    if (!cur) throw new NotFoundError(`Secret ${name} not found`);
    if (value) this.redactor.add(value);
    await this.store.putSecret({
      kind: SECRET_KIND,
      name,
      sealed: value ? this.box.encrypt(value) : cur.sealed,
      meta: { description: description !== undefined ? description : (cur.meta.description ?? null) },
    });
    return { success: true as const };
  }

  /** Creates or replaces a custom secret (OpenHands' `PUT /api/settings/secrets`); the value is never answered. */
  async upsertSecret(name: string, value: string, description?: string | null) {
    this.redactor.add(value);
    await this.store.putSecret({ kind: SECRET_KIND, name, sealed: this.box.encrypt(value), meta: { description: description ?? null } });
    return { name, description: description ?? null };
  }

  async deleteSecret(name: string) {
    if (!(await this.store.deleteSecret(SECRET_KIND, name))) throw new NotFoundError(`Secret ${name} not found`);
    return { success: true as const };
  }

  /** Custom secrets as environment variables for the agent's shell. */
  async secretValues(): Promise<Record<string, string>> {
    const out: Record<string, string> = {};
    for (const s of await this.store.listSecrets(SECRET_KIND)) {
      const v = this.open(s.sealed);
      if (v) out[s.name] = v;
    }
    return out;
  }
}
