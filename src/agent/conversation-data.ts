/**
 * What the agent reads and writes of a conversation, declared here (the agent sits below the
 * conversation layer) and implemented by src/conversation/conversations.ts, which the composition
 * root hands in: the status the run loop moves, the records, and the per-conversation settings kept
 * in the record's `data` (its own LLM, limits, confirmation policy, secrets, token usage).
 *
 * The keys the agent reads and writes are its part of the record's schema (`AgentRecordData`,
 * declared here because the agent sits below the conversation layer); src/conversation/record-data.ts
 * extends it into the one schema of everything a record holds, and parses each record it loads.
 */
import * as z from 'zod';
import type { Settings } from '../secrets/settings.js';
import type { ConversationRecord } from '../store/types.js';
import { StoredAnalyzer } from './security-analyzer.js';

/** A conversation as it is loaded: its stored record, the data parsed. */
export interface LoadedConversation {
  record: ConversationRecord<AgentRecordData>;
}

/** Reading and updating a conversation's record. */
export interface ConversationData {
  load(id: string): Promise<LoadedConversation | null>;
  require(id: string): Promise<LoadedConversation>;
  /** Merge-patch the record's data. */
  updateData(id: string, patch: Partial<AgentRecordData>): Promise<void>;
}

const POLICY_KINDS = { never: 'NeverConfirm', always: 'AlwaysConfirm', risk_based: 'ConfirmRisky' } as const;

/** `{kind:"NeverConfirm"|"AlwaysConfirm"|"ConfirmRisky"}` or the client's class form `{type:"never"|"always"|"risk_based"}`. */
export const ConfirmationPolicy = z
  .looseObject({
    kind: z.enum(['NeverConfirm', 'AlwaysConfirm', 'ConfirmRisky']).optional(),
    type: z.enum(['never', 'always', 'risk_based']).optional(),
    confirm_unknown: z.boolean().optional(),
    threshold: z.string().optional(),
  })
  .refine((p) => p.kind !== undefined || p.type !== undefined, { error: 'policy needs kind (NeverConfirm, AlwaysConfirm or ConfirmRisky)' })
  .transform((p) => {
    const kind = p.kind ?? POLICY_KINDS[p.type!];
    return kind === 'ConfirmRisky' ? { kind, confirm_unknown: p.confirm_unknown ?? true, threshold: p.threshold ?? 'HIGH' } : { kind };
  })
  .meta({ id: 'ConfirmationPolicy' });
export type ConfirmationPolicy = z.output<typeof ConfirmationPolicy>;

/** The conversation's own LLM (`data.llm`), its key sealed (loose: what another version adds is kept). */
export const StoredLlm = z.looseObject({ model: z.string().nullable(), base_url: z.string().nullable(), api_key_sealed: z.string().nullable() });
export type StoredLlm = z.output<typeof StoredLlm>;

/** The conversation's token counts (`data.usage`). */
export const Usage = z.object({ prompt_tokens: z.number(), completion_tokens: z.number(), cache_read_tokens: z.number(), cache_write_tokens: z.number() });
export type Usage = z.output<typeof Usage>;

/** The keys of a conversation's data the agent reads and writes (all optional: a record of an older version may lack any). */
export const AgentRecordData = z.object({
  /** Set by an agent-server create that names its own model, key or server. */
  llm: StoredLlm.optional(),
  max_iterations: z.number().int().optional(),
  /** Absent: on. */
  stuck_detection: z.boolean().optional(),
  /** Stored as the policy's output form (kind); absent: NeverConfirm. */
  confirmation_policy: ConfirmationPolicy.optional(),
  /** Its security analyzer (src/agent/security-analyzer.ts); absent or null: none. */
  security_analyzer: StoredAnalyzer.nullable().optional(),
  /** The conversation's own secrets (name → sealed value), exported to its shell. */
  secrets_sealed: z.record(z.string(), z.string()).optional(),
  usage: Usage.optional(),
  /** `owner/repo`, as asked at create. */
  selected_repository: z.string().nullable().optional(),
  selected_branch: z.string().nullable().optional(),
  /** The branch the clone checked out. */
  branch: z.string().nullable().optional(),
  /** Large ones stay in the store: read them with `field`. */
  conversation_instructions: z.string().nullable().optional(),
});
export type AgentRecordData = z.output<typeof AgentRecordData>;

const NO_USAGE: Usage = { prompt_tokens: 0, completion_tokens: 0, cache_read_tokens: 0, cache_write_tokens: 0 };

/** The conversation's token counts so far. */
export function usageOf(data: AgentRecordData): Usage {
  return data.usage ?? NO_USAGE;
}

/** The conversation's own LLM (from `agent.llm`), key decrypted; null fields fall back to the server's. */
export function conversationLlm(
  conv: LoadedConversation,
  settings: Pick<Settings, 'unseal'>,
): { model: string | null; baseUrl: string | null; apiKey: string | null } | null {
  const own = conv.record.data.llm;
  if (!own) return null;
  const apiKey = settings.unseal(own.api_key_sealed);
  return { model: own.model, baseUrl: own.base_url, apiKey };
}

/** The conversation's own step limit and stuck detection (agent-server create). */
export function conversationLimits(conv: LoadedConversation): { maxIterations: number | null; stuckDetection: boolean } {
  const d = conv.record.data;
  return { maxIterations: d.max_iterations ?? null, stuckDetection: d.stuck_detection !== false };
}

/** Adds an LLM call's token counts to the conversation's usage (shown as `stats`). */
export async function recordUsage(
  conversations: Pick<ConversationData, 'updateData'>,
  conv: LoadedConversation,
  u: { inputTokens?: number; outputTokens?: number; cacheReadTokens?: number; cacheWriteTokens?: number },
): Promise<void> {
  const cur = usageOf(conv.record.data);
  await conversations.updateData(conv.record.id, {
    usage: {
      prompt_tokens: cur.prompt_tokens + (u.inputTokens ?? 0),
      completion_tokens: cur.completion_tokens + (u.outputTokens ?? 0),
      cache_read_tokens: cur.cache_read_tokens + (u.cacheReadTokens ?? 0),
      cache_write_tokens: cur.cache_write_tokens + (u.cacheWriteTokens ?? 0),
    },
  });
}

export async function conversationSecretValues(
  conversations: ConversationData,
  settings: Pick<Settings, 'unseal'>,
  id: string,
): Promise<Record<string, string>> {
  return secretValuesOf(await conversations.require(id), settings);
}

/** The conversation's own secrets (name → value), exported to its shell. */
export function secretValuesOf(conv: LoadedConversation, settings: Pick<Settings, 'unseal'>): Record<string, string> {
  const sealed = conv.record.data.secrets_sealed ?? {};
  const out: Record<string, string> = {};
  for (const [name, s] of Object.entries(sealed)) {
    const value = settings.unseal(s);
    if (value !== null) out[name] = value;
  }
  return out;
}
