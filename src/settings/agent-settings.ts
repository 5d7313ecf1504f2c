/**
 * The settings as OpenHands' agent server shows and changes them (`GET`/`PATCH /api/settings`,
 * `/api/settings/mcp/{key}`), over what Parley keeps:
 *
 * - `agent_settings.llm` IS the server's LLM (`POST /api/settings`, the console's form, sets the same
 *   record): model, base URL and key (shown as `**********`, never answered);
 * - `agent_settings.mcp_config` is the settings' MCP server map (mcp-servers.ts), whose enabled servers
 *   every new conversation gets;
 * - `conversation_settings` (what a client starts its conversations with: `max_iterations`,
 *   `confirmation_mode`, `security_analyzer`) and `misc_settings` (the client's own, opaque) are kept
 *   as given;
 * - `active_profile` / `active_agent_profile_id`: the LLM and agent profile pointers.
 *
 * A diff is deep-merged; a null inside a nested map deletes that entry (OpenHands' "unset"). A key
 * Parley has no use for is a 422 naming it, never stored as if it did something.
 */
import { ConflictError, NotFoundError, RequestValidationError, type ValidationIssue } from '../errors.js';
import { toParleyModel, UnknownModelError } from '../llm/catalog.js';
import type { Settings } from '../secrets/settings.js';
import type { LlmProfiles } from './llm-profiles.js';
import { checkMcpServer, mergePatch, redactMcpServer, withoutMasked, type McpServer, type McpServerMap } from './mcp-servers.js';
import type { JsonRecords, ServerSettingsDoc } from './records.js';

const MASKED = '**********';
/** The agent settings' schema version Parley's document has (OpenHands' AgentSettings has one too). */
const AGENT_SETTINGS_SCHEMA_VERSION = 1;
/** The conversation settings Parley keeps (a client reads them back when it starts a conversation). */
export const CONVERSATION_SETTING_KEYS = ['max_iterations', 'confirmation_mode', 'security_analyzer'] as const;
/** The most `misc_settings` (a client's own data) may hold, as JSON. */
const MAX_MISC_BYTES = 256 * 1024;

export interface SettingsPatch {
  agent_settings_diff?: Record<string, unknown> | null;
  conversation_settings_diff?: Record<string, unknown> | null;
  misc_settings_diff?: Record<string, unknown> | null;
  /** Present (even null) when the request names it. */
  active_profile?: string | null;
  active_agent_profile_id?: string | null;
}

const issue = (loc: (string | number)[], msg: string, input?: unknown): ValidationIssue => ({ type: 'value_error', loc, msg: `Value error, ${msg}`, input });

/** Deep merge with OpenHands' unset rule: a null inside a nested map deletes; lists and scalars replace. */
function deepMerge(base: Record<string, unknown>, diff: Record<string, unknown>): Record<string, unknown> {
  return mergePatch(base, diff) as Record<string, unknown>;
}

export class AgentServerSettings {
  constructor(
    private readonly records: JsonRecords,
    private readonly settings: Settings,
    private readonly llmProfiles: LlmProfiles,
  ) {}

  /** OpenHands' SettingsResponse, plus Parley's own `GET /api/settings` fields (`llm_model`, `llm_base_url`, `llm_api_key_set`). */
  async get() {
    const [doc, llm, servers] = await Promise.all([this.records.settingsDoc(), this.settings.llmView(), this.settings.mcpServers()]);
    return {
      agent_settings: {
        agent_kind: 'openhands' as const,
        schema_version: AGENT_SETTINGS_SCHEMA_VERSION,
        llm: { model: llm.model, base_url: llm.base_url, api_key: llm.key_set ? MASKED : null },
        mcp_config: Object.fromEntries(Object.entries(servers).map(([k, s]) => [k, redactMcpServer(s)])),
      },
      conversation_settings: doc.conversation_settings,
      misc_settings: doc.misc_settings,
      llm_api_key_is_set: llm.key_set,
      active_profile: doc.active_profile,
      active_agent_profile_id: doc.active_agent_profile_id,
      // Parley's own shape of GET /api/settings (the console reads these)
      llm_model: llm.model,
      llm_base_url: llm.base_url,
      llm_api_key_set: llm.key_set,
    };
  }

  async patch(p: SettingsPatch) {
    const named = (k: keyof SettingsPatch) => Object.hasOwn(p, k) && (p[k] !== null || k === 'active_profile' || k === 'active_agent_profile_id');
    if (!(['agent_settings_diff', 'conversation_settings_diff', 'misc_settings_diff', 'active_profile', 'active_agent_profile_id'] as const).some(named)) {
      throw new RequestValidationError([
        issue(
          ['body'],
          'at least one of agent_settings_diff, conversation_settings_diff, misc_settings_diff, active_profile or active_agent_profile_id must be given',
        ),
      ]);
    }
    const agent = p.agent_settings_diff ?? {};
    for (const k of Object.keys(agent)) {
      if (!['llm', 'mcp_config', 'agent_kind', 'schema_version'].includes(k))
        throw new RequestValidationError([issue(['body', 'agent_settings_diff', k], `Parley has no agent setting ${k} (it keeps llm and mcp_config)`)]);
    }
    if (agent.agent_kind !== undefined && agent.agent_kind !== null && agent.agent_kind !== 'openhands')
      throw new RequestValidationError([issue(['body', 'agent_settings_diff', 'agent_kind'], 'Parley runs the openhands agent kind only', agent.agent_kind)]);
    // the active profile's LLM, unless the same request gives one
    let llmDiff = agent.llm as Record<string, unknown> | null | undefined;
    if (p.active_profile && llmDiff === undefined) {
      const r = await this.llmProfiles.resolve(p.active_profile);
      llmDiff = { model: r.model, base_url: r.base_url, api_key: r.api_key };
    }
    return this.settings.serialize(async () => {
      const doc: ServerSettingsDoc = await this.records.settingsDoc();
      if (llmDiff !== undefined) await this.applyLlm(llmDiff);
      if (agent.mcp_config !== undefined) await this.applyMcpPatch(agent.mcp_config, ['body', 'agent_settings_diff', 'mcp_config']);
      if (p.conversation_settings_diff)
        doc.conversation_settings = checkConversationSettings(deepMerge(doc.conversation_settings, p.conversation_settings_diff));
      if (p.misc_settings_diff) {
        const misc = deepMerge(doc.misc_settings, p.misc_settings_diff);
        if (JSON.stringify(misc).length > MAX_MISC_BYTES)
          throw new RequestValidationError([issue(['body', 'misc_settings_diff'], `misc_settings may hold at most ${MAX_MISC_BYTES} bytes of JSON`)]);
        doc.misc_settings = misc;
      }
      if (Object.hasOwn(p, 'active_profile')) doc.active_profile = p.active_profile ?? null;
      if (Object.hasOwn(p, 'active_agent_profile_id')) doc.active_agent_profile_id = p.active_agent_profile_id ?? null;
      await this.records.putSettingsDoc(doc);
      return this.get();
    });
  }

  /** The LLM diff onto the server's LLM: absent keys stay, null clears, the masked key keeps the stored one. */
  private async applyLlm(diff: Record<string, unknown> | null) {
    if (diff === null) return this.settings.saveLlmSettings({ llm_model: null, llm_base_url: null, llm_api_key: null });
    const cur = await this.settings.getLlmSettings();
    const str = (k: string) => (typeof diff[k] === 'string' && diff[k] !== '' ? (diff[k] as string) : null);
    const next = { ...cur };
    if (Object.hasOwn(diff, 'base_url')) next.llm_base_url = str('base_url');
    if (Object.hasOwn(diff, 'model')) {
      const m = str('model');
      try {
        next.llm_model = m ? toParleyModel(m, next.llm_base_url) : null;
      } catch (err) {
        if (err instanceof UnknownModelError) throw new RequestValidationError([issue(['body', 'agent_settings_diff', 'llm', 'model'], err.message, m)]);
        throw err;
      }
    }
    if (Object.hasOwn(diff, 'api_key') && diff.api_key !== MASKED) next.llm_api_key = str('api_key');
    if (next.llm_base_url && !/^https?:\/\/\S+$/i.test(next.llm_base_url))
      throw new RequestValidationError([issue(['body', 'agent_settings_diff', 'llm', 'base_url'], 'base_url must be an http(s) URL', next.llm_base_url)]);
    await this.settings.saveLlmSettings(next);
  }

  /** A sparse patch of the MCP server map: each named server merged (null deletes it), then checked whole. */
  private async applyMcpPatch(patch: unknown, loc: (string | number)[]) {
    if (patch === null || typeof patch !== 'object' || Array.isArray(patch)) throw new RequestValidationError([issue(loc, 'mcp_config is a map of servers')]);
    const servers = await this.settings.mcpServers();
    for (const [key, p] of Object.entries(patch)) {
      if (!/^[A-Za-z0-9_-]{1,128}$/.test(key)) throw new RequestValidationError([issue([...loc, key], 'an MCP server key matches ^[A-Za-z0-9_-]+$')]);
      if (p === null) {
        delete servers[key];
        continue;
      }
      servers[key] = checked(mergePatch(storedForm(servers[key]), withoutMasked(p)), [...loc, key]);
    }
    await this.settings.saveMcpServers(servers);
  }

  createMcpServer(key: string, body: unknown) {
    return this.settings.serialize(async () => {
      const servers = await this.settings.mcpServers();
      if (key in servers) throw new ConflictError(`MCP server '${key}' already exists`);
      servers[key] = checked(body, ['body']);
      await this.settings.saveMcpServers(servers);
      return this.get();
    });
  }

  patchMcpServer(key: string, patch: unknown) {
    return this.settings.serialize(async () => {
      const servers = await this.settings.mcpServers();
      if (!(key in servers)) throw new NotFoundError(`MCP server '${key}' was not found`);
      servers[key] = checked(mergePatch(storedForm(servers[key]), withoutMasked(patch)), ['body']);
      await this.settings.saveMcpServers(servers);
      return this.get();
    });
  }

  deleteMcpServer(key: string) {
    return this.settings.serialize(async () => {
      const servers: McpServerMap = await this.settings.mcpServers();
      if (!(key in servers)) throw new NotFoundError(`MCP server '${key}' was not found`);
      delete servers[key];
      await this.settings.saveMcpServers(servers);
      return this.get();
    });
  }
}

/** A stored server in the form a patch applies to (the request's field names). */
function storedForm(s: McpServer | undefined): Record<string, unknown> {
  return s ? { ...s } : {};
}

function checked(raw: unknown, loc: (string | number)[]): McpServer {
  const r = checkMcpServer(raw);
  if ('issues' in r) throw new RequestValidationError(r.issues.map((i) => issue([...loc, ...i.path], i.message)));
  return r.server;
}

/** Only the conversation settings Parley keeps, each of its type. */
function checkConversationSettings(s: Record<string, unknown>): Record<string, unknown> {
  const loc = (k: string) => ['body', 'conversation_settings_diff', k];
  for (const [k, v] of Object.entries(s)) {
    if (!(CONVERSATION_SETTING_KEYS as readonly string[]).includes(k))
      throw new RequestValidationError([issue(loc(k), `Parley keeps no conversation setting ${k} (${CONVERSATION_SETTING_KEYS.join(', ')})`)]);
    if (k === 'max_iterations' && !(Number.isInteger(v) && (v as number) >= 1 && (v as number) <= 10_000))
      throw new RequestValidationError([issue(loc(k), 'max_iterations is a whole number from 1 to 10000', v)]);
    if (k === 'confirmation_mode' && typeof v !== 'boolean') throw new RequestValidationError([issue(loc(k), 'confirmation_mode is a boolean', v)]);
    if (k === 'security_analyzer' && v !== null && typeof v !== 'string')
      throw new RequestValidationError([issue(loc(k), 'security_analyzer is the name of an analyzer or null', v)]);
  }
  return s;
}
