/**
 * What a conversation's record keeps in its `data`: one zod schema of every key, the TypeScript
 * type inferred from it, and the one parse of a record as it is loaded from the store.
 *
 * The agent's keys (its LLM, limits, confirmation policy, secrets, usage) are declared in the agent
 * layer (agent/conversation-data.ts `AgentRecordData`, since the agent sits below this layer);
 * this schema extends them with the conversation's own.
 *
 * Records outlive versions, so a record is parsed key by key and always loads: a key whose value
 * is not of its shape (written by an older or a newer version, or damaged) is left out of the
 * parsed data and reported, and a key this version does not know is carried through untouched.
 * Conversations keeps both in the store when it writes the record back (conversations.ts).
 */
import * as z from 'zod';
import { AgentRecordData } from '../agent/conversation-data.js';
import { GoalState } from '../events/schema.js';
import type { ConversationRecord } from '../store/types.js';
import { GIT_PROVIDERS } from '../workspace/providers.js';
import { CreateMicroagent, SuggestedTask } from '../workspace/tasks.js';
import { SetupState } from './setup-phase.js';

export const RecordData = AgentRecordData.extend({
  git_provider: z.enum(GIT_PROVIDERS).nullable().optional(),
  /** Large ones stay in the store (Conversations.field). */
  image_urls: z.array(z.string()).nullable().optional(),
  // loose: the request's schema refuses unknown keys, a stored task keeps what another version added
  suggested_task: SuggestedTask.loose().nullable().optional(),
  create_microagent: CreateMicroagent.loose().nullable().optional(),
  /** The conversation was created with a replay (the plan itself is not kept). */
  replay_json: z.literal(true).nullable().optional(),
  /** Its MCP configuration, sealed (Settings.sealMcp); large ones stay in the store. */
  mcp_config_sealed: z.string().optional(),
  /** Its workspace preparation (src/conversation/setup-phase.ts). */
  setup: SetupState.optional(),
  /** A run waits for the preparation to end; set and taken only by Conversations (requestRun, takeRunRequest). */
  run_requested: z.boolean().optional(),
  tags: z.record(z.string(), z.string()).optional(),
  /** The working directory an agent-server client declared (a name only: nothing on the host is used). */
  declared_working_dir: z.string().optional(),
  /** The agent profile it was started from (its id and revision then). */
  launched_profile: z.object({ profile_id: z.string(), revision: z.number() }).optional(),
  /** Its `/goal` loop's last state (src/conversation/goals.ts). */
  goal: GoalState.optional(),
  /** A fork: the conversation it was forked from, and the event it was forked at (null: the whole conversation). */
  forked_from_conversation_id: z.string().optional(),
  forked_from_event_id: z.string().nullable().optional(),
});
export type RecordData = z.output<typeof RecordData>;
export type RecordKey = keyof RecordData;

/** A record whose data has been parsed. */
export type ParsedRecord = ConversationRecord<RecordData>;

const SHAPE: { [K in RecordKey]: z.ZodType<RecordData[K]> } = RecordData.shape;

/** One key of a record's data as the store holds it, parsed; undefined when it is absent or not of the key's shape. */
export function parseStoredKey<K extends RecordKey>(stored: unknown, key: K): RecordData[K] | undefined {
  if (!isJsonObject(stored)) return undefined;
  const parsed = SHAPE[key].safeParse(stored[key]);
  return parsed.success ? parsed.data : undefined;
}

const isJsonObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

function parseInto<K extends RecordKey>(data: RecordData, key: K, value: unknown): boolean {
  const parsed = SHAPE[key].safeParse(value);
  if (parsed.success) data[key] = parsed.data;
  return parsed.success;
}

/** Unknown keys kept as they are. */
const WHOLE = RecordData.loose();

const isRecordKey = (k: string): k is RecordKey => Object.hasOwn(SHAPE, k);

/**
 * A record's data as the store holds it → the parsed data, and the keys left out because their
 * values are not of their shape. Keys this version does not know are kept as they are (invisible to
 * the type): written back with the record, they survive this version.
 */
export function parseRecordData(stored: unknown): { data: RecordData; malformed: RecordKey[] } {
  const data: RecordData & Record<string, unknown> = {};
  const malformed: RecordKey[] = [];
  if (!isJsonObject(stored)) return { data, malformed };
  // the usual case in one call (zod compiles an object's parse; key by key is several times slower)
  const whole = WHOLE.safeParse(stored);
  if (whole.success) return { data: whole.data, malformed };
  for (const [key, value] of Object.entries(stored)) {
    if (!isRecordKey(key)) {
      data[key] = value;
      continue;
    }
    if (!parseInto(data, key, value)) malformed.push(key);
  }
  return { data, malformed };
}

/** A record as the store returned it, its data parsed (see parseRecordData). */
export function parseRecord(record: ConversationRecord): { record: ParsedRecord; malformed: RecordKey[] } {
  const { data, malformed } = parseRecordData(record.data);
  return { record: { ...record, data }, malformed };
}

/** A record's data as the store holds it, as an object (empty when it is not one), for a merge before a write. */
export function storedObject(stored: unknown): Record<string, unknown> {
  return isJsonObject(stored) ? stored : {};
}
