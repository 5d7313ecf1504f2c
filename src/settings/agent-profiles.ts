/**
 * Agent profiles (OpenHands' `/api/agent-profiles`): named launch specifications of an agent that refer
 * to an LLM profile by name (`llm_profile_ref`) and to MCP servers of the settings by key
 * (`mcp_server_refs`). A profile holds no secret (its LLM's key stays in the LLM profile). Each has a
 * server-made `id` (kept across overwrites, the active pointer names it) and a `revision` bumped by each
 * save. Activation only sets the pointer (`active_agent_profile_id`); `materialize` says what the
 * profile resolves to (its LLM profile, its MCP servers) and which references dangle, without changing
 * anything.
 */
import crypto from 'node:crypto';
import { ConflictError, NotFoundError } from '../errors.js';
import type { Settings } from '../secrets/settings.js';
import type { LlmProfiles } from './llm-profiles.js';
import { AGENT_PROFILE_KIND as KIND, type JsonRecords } from './records.js';

const MAX_AGENT_PROFILES = 50;

/** @public named in parley/client's declarations (lib/types: what the API answers), so it stays exported. */
export interface AgentProfile {
  id: string;
  name: string;
  revision: number;
  agent_kind: string;
  llm_profile_ref: string | null;
  mcp_server_refs: string[] | null;
  [key: string]: unknown;
}

export class AgentProfiles {
  constructor(
    private readonly records: JsonRecords,
    private readonly settings: Settings,
    private readonly llmProfiles: LlmProfiles,
  ) {}

  private all() {
    return this.records.list<AgentProfile>(KIND);
  }

  async list() {
    const doc = await this.records.settingsDoc();
    return {
      profiles: (await this.all())
        .sort((a, b) => a.name.localeCompare(b.name))
        .map(({ doc: p }) => ({
          id: p.id,
          name: p.name,
          agent_kind: p.agent_kind,
          revision: p.revision,
          llm_profile_ref: p.llm_profile_ref,
          mcp_server_refs: p.mcp_server_refs,
        })),
      active_agent_profile_id: doc.active_agent_profile_id,
    };
  }

  async get(name: string) {
    const p = await this.records.get<AgentProfile>(KIND, name);
    if (!p) throw new NotFoundError(`Agent profile '${name}' not found`);
    return { name, profile: p };
  }

  /** Creates or overwrites: the path's name wins over the body's; an overwrite keeps the id and bumps the revision. */
  save(name: string, body: Record<string, unknown>) {
    return this.settings.serialize(async () => {
      const existing = await this.records.get<AgentProfile>(KIND, name);
      if (!existing && (await this.all()).length >= MAX_AGENT_PROFILES) {
        throw new ConflictError(`Agent profile limit reached (${MAX_AGENT_PROFILES}). Delete a profile before saving a new one.`);
      }
      const profile: AgentProfile = {
        ...body,
        name,
        id: existing?.id ?? crypto.randomUUID(),
        revision: (existing?.revision ?? 0) + 1,
        agent_kind: typeof body.agent_kind === 'string' ? body.agent_kind : 'openhands',
        llm_profile_ref: typeof body.llm_profile_ref === 'string' ? body.llm_profile_ref : null,
        mcp_server_refs: Array.isArray(body.mcp_server_refs) ? body.mcp_server_refs.filter((r): r is string => typeof r === 'string') : null,
      };
      await this.records.put(KIND, name, profile);
      return { name, message: `Agent profile '${name}' saved` };
    });
  }

  /** Idempotent; the active pointer is cleared when it named this profile. */
  delete(name: string) {
    return this.settings.serialize(async () => {
      const p = await this.records.get<AgentProfile>(KIND, name);
      await this.records.delete(KIND, name);
      const doc = await this.records.settingsDoc();
      if (p && doc.active_agent_profile_id === p.id) await this.records.putSettingsDoc({ ...doc, active_agent_profile_id: null });
      return { name, message: `Agent profile '${name}' deleted` };
    });
  }

  rename(name: string, newName: string) {
    return this.settings.serialize(async () => {
      const p = await this.records.get<AgentProfile>(KIND, name);
      if (!p) throw new NotFoundError(`Agent profile '${name}' not found`);
      if (name === newName) return { name, message: `Agent profile '${name}' unchanged (same name)` };
      if (await this.records.get(KIND, newName)) throw new ConflictError(`Agent profile '${newName}' already exists`);
      await this.records.put(KIND, newName, { ...p, name: newName, revision: p.revision + 1 });
      await this.records.delete(KIND, name);
      return { name: newName, message: `Agent profile '${name}' renamed to '${newName}'` };
    });
  }

  /** Pointer only: the settings are not changed. */
  activate(id: string) {
    return this.settings.serialize(async () => {
      if (!(await this.all()).some((p) => p.doc.id === id)) throw new NotFoundError(`Agent profile '${id}' not found`);
      await this.records.putSettingsDoc({ ...(await this.records.settingsDoc()), active_agent_profile_id: id });
      return { id, message: `Agent profile '${id}' activated`, agent_settings_applied: false };
    });
  }

  /** What the profile resolves to, and what of it dangles; never throws for a dangling reference. */
  async materialize(name: string) {
    const { profile: p } = await this.get(name);
    const errors: string[] = [];
    let llm: { model: string | null; base_url: string | null; api_key: string | null } | null = null;
    if (p.llm_profile_ref) {
      llm = await this.llmProfiles.resolve(p.llm_profile_ref).catch(() => null);
      if (!llm) errors.push(`LLM profile '${p.llm_profile_ref}' does not exist`);
    }
    const servers = await this.settings.mcpServers();
    const refs = p.mcp_server_refs ?? Object.keys(servers);
    const dangling = refs.filter((r) => !(r in servers));
    for (const r of dangling) errors.push(`MCP server '${r}' does not exist`);
    const resolvedKeys = refs.filter((r) => r in servers);
    const valid = errors.length === 0;
    return {
      agent_kind: p.agent_kind,
      llm_profile_ref: p.llm_profile_ref,
      llm_profile_resolved: !!llm,
      llm_api_key_set: !!llm?.api_key,
      mcp_server_refs: p.mcp_server_refs,
      dangling_mcp_server_refs: dangling,
      resolved_mcp_config_keys: resolvedKeys,
      resolved_skills: [],
      disabled_skills: [],
      acp_file_secret_names: [],
      errors,
      valid,
      resolved_settings: valid
        ? {
            agent_kind: p.agent_kind,
            llm: llm ? { model: llm.model, base_url: llm.base_url, api_key: llm.api_key ? '**********' : null } : null,
            mcp_config: resolvedKeys,
          }
        : null,
    };
  }
}
