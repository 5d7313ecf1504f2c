/**
 * The plain (not secret) records the agent-server settings keep in the store's settings table
 * (SecretStore: one engine for SQLite and PostgreSQL, so a cluster's nodes share them): one JSON
 * document per record, read whole and written whole.
 */
import type { SecretStore } from '../store/types.js';

/** Which fields of the agent-server settings document Parley keeps (the LLM and MCP servers live elsewhere: settings.ts). */
export interface ServerSettingsDoc {
  conversation_settings: Record<string, unknown>;
  misc_settings: Record<string, unknown>;
  active_profile: string | null;
  active_agent_profile_id: string | null;
}

const EMPTY_DOC: ServerSettingsDoc = { conversation_settings: {}, misc_settings: {}, active_profile: null, active_agent_profile_id: null };

export const SETTINGS_KIND = 'settings';

/** One JSON document in a record's `meta` (no sealed part). */
export class JsonRecords {
  constructor(private readonly store: SecretStore) {}

  async get<T>(kind: string, name: string): Promise<T | null> {
    const r = await this.store.getSecret(kind, name);
    return r ? (r.meta.doc as T) : null;
  }

  async put<T>(kind: string, name: string, doc: T): Promise<void> {
    await this.store.putSecret({ kind, name, sealed: null, meta: { doc } });
  }

  async list<T>(kind: string): Promise<{ name: string; doc: T }[]> {
    return (await this.store.listSecrets(kind)).map((r) => ({ name: r.name, doc: r.meta.doc as T }));
  }

  delete(kind: string, name: string): Promise<boolean> {
    return this.store.deleteSecret(kind, name);
  }

  async settingsDoc(): Promise<ServerSettingsDoc> {
    return { ...EMPTY_DOC, ...((await this.get<Partial<ServerSettingsDoc>>(SETTINGS_KIND, 'agent_server')) ?? {}) };
  }

  putSettingsDoc(doc: ServerSettingsDoc): Promise<void> {
    return this.put(SETTINGS_KIND, 'agent_server', doc);
  }
}

/** Agent profiles name LLM profiles (`llm_profile_ref`): the kind their records are stored under, for the LLM profiles to follow. */
export const AGENT_PROFILE_KIND = 'agent_profile';

interface LlmProfileRef {
  name: string;
  revision: number;
  llm_profile_ref: string | null;
}

/** The agent profiles that refer to an LLM profile. */
export async function llmProfileReferrers(records: JsonRecords, llmProfile: string): Promise<string[]> {
  return (await records.list<LlmProfileRef>(AGENT_PROFILE_KIND)).filter((p) => p.doc.llm_profile_ref === llmProfile).map((p) => p.name);
}

/** An LLM profile was renamed: the agent profiles that referred to it follow. */
export async function renameLlmProfileRefs(records: JsonRecords, from: string, to: string): Promise<void> {
  for (const { name, doc } of await records.list<LlmProfileRef>(AGENT_PROFILE_KIND)) {
    if (doc.llm_profile_ref === from) await records.put(AGENT_PROFILE_KIND, name, { ...doc, llm_profile_ref: to, revision: doc.revision + 1 });
  }
}
