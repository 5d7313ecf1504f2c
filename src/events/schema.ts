/**
 * The event model: one zod discriminated union by `kind`, anchored on the OpenHands SDK's events
 * (MessageEvent, SystemPromptEvent, ActionEvent, ObservationEvent, AgentErrorEvent, …). The
 * TypeScript types, the OpenAPI document and the tests' validation of what the daemon writes all
 * come from these schemas; every consumer switches on `kind` and the compiler checks the cases.
 *
 * Nothing validates events on the hot path: producers are type-checked against `EventDraft`.
 * Events written by 0.1.0 are brought to this shape as they are read (`upgradeEvent`).
 */
import * as z from 'zod';
import { ACTION_SCHEMAS, OBSERVATION_SCHEMAS } from './tool-catalog.js';
import { ContentItem, TextContentItem } from './content.js';

const EVENT_SOURCES = ['user', 'agent', 'environment'] as const;
export const EventSource = z.enum(EVENT_SOURCES);
export type EventSource = z.output<typeof EventSource>;

/** The statuses a conversation's run moves through (`ConversationStateUpdateEvent` with key `execution_status`). */
export const EXECUTION_STATUSES = ['idle', 'running', 'paused', 'waiting_for_confirmation', 'finished', 'error', 'stuck'] as const;
export type ExecutionStatus = (typeof EXECUTION_STATUSES)[number];

/**
 * A conversation's workspace preparation (`setup` in its record's data and in the state update of
 * that key), in the order the phases happen: `pending` at create, the clone's own phases,
 * `replaying`, then an end. The rule of when it is still under way is src/conversation/setup-phase.ts.
 */
export const SETUP_PHASES = ['pending', 'preparing', 'cloning', 'checking_out', 'cloned', 'replaying', 'ready', 'error'] as const;
export type SetupPhase = (typeof SETUP_PHASES)[number];
export const SetupState = z.object({ phase: z.enum(SETUP_PHASES), detail: z.string().optional() });
export type SetupState = z.output<typeof SetupState>;

/**
 * A `/goal` loop's state (OpenHands' GoalStatus: `goal` in the record's data and in the state update of
 * that key): whether it runs, how it stands (`complete` when the judge found the objective done,
 * `capped` after `max_iterations` audits, `interrupted` when stopped or cut short: resumable), the
 * audits done, and the judge's last verdict.
 */
export const GoalState = z.object({
  active: z.boolean(),
  status: z.enum(['running', 'complete', 'capped', 'interrupted']),
  iteration: z.number().int().min(0),
  max_iterations: z.number().int().min(1),
  objective: z.string(),
  verdict: z.object({ score: z.number(), complete: z.boolean(), missing: z.string() }).nullable(),
});
export type GoalState = z.output<typeof GoalState>;

export const MESSAGE_ROLES = ['user', 'system', 'assistant', 'tool'] as const;
export type MessageRole = (typeof MESSAGE_ROLES)[number];

/** What a call of each tool records as `ActionEvent.action` (the tool catalog's actions). */
export const Action = z.discriminatedUnion('kind', ACTION_SCHEMAS);
export type Action = z.output<typeof Action>;

/** What each tool returns, recorded as `ObservationEvent.observation` (the tool catalog's observations). */
export const Observation = z.discriminatedUnion('kind', OBSERVATION_SCHEMAS);
export type Observation = z.output<typeof Observation>;

/** The tool call as the LLM sent it (OpenHands' MessageToolCall). */
const MessageToolCall = z
  .object({
    id: z.string(),
    name: z.string(),
    /** The arguments as the model sent them: a JSON string (not necessarily valid JSON). */
    arguments: z.string(),
    origin: z.enum(['completion', 'responses']),
  })
  .meta({ id: 'MessageToolCall' });

/** A tool as offered to the LLM (OpenHands' ToolDefinition, in `SystemPromptEvent.tools`). */
const ToolDefinition = z
  .object({
    kind: z.string().meta({ description: 'e.g. TerminalTool, FileEditorTool, MCPToolDefinition' }),
    name: z.string(),
    /** OpenHands' ToolDefinition carries `title` (the name the tool is shown by); events from before it lack it. */
    title: z.string().optional(),
    description: z.string(),
    parameters: z.record(z.string(), z.unknown()).meta({ description: 'JSON Schema of the arguments' }),
    action_type: z.string(),
  })
  .meta({ id: 'ToolDefinition' });
type ToolDefinition = z.output<typeof ToolDefinition>;

const common = {
  id: z.string(),
  /** Absent on live-only events (StreamingDeltaEvent, SetupOutputEvent, the socket's full_state). */
  seq: z.number().int().optional(),
  timestamp: z.string(),
  source: EventSource,
};
const event = <K extends string, S extends z.ZodRawShape>(kind: K, fields: S, description: string) =>
  z.object({ kind: z.literal(kind), ...common, ...fields }).meta({ id: kind, description });

const MessageEvent = event(
  'MessageEvent',
  {
    llm_message: z.object({ role: z.enum(MESSAGE_ROLES), content: z.array(ContentItem) }),
    llm_response_id: z.string().optional(),
    /** Recorded by a `replay_json` replay. */
    replayed: z.boolean().optional(),
  },
  'A message from the user, the agent or the environment.',
);
const SystemPromptEvent = event(
  'SystemPromptEvent',
  { system_prompt: TextContentItem, tools: z.array(ToolDefinition) },
  'The system prompt and the tools of the first step of a run.',
);
const ActionEvent = event(
  'ActionEvent',
  {
    tool_name: z.string(),
    tool_call_id: z.string(),
    llm_response_id: z.string(),
    thought: z.array(TextContentItem),
    /** Null when the call cannot run (unknown tool, arguments that do not validate). */
    action: Action.nullable(),
    tool_call: MessageToolCall,
    replayed: z.boolean().optional(),
    /** The risk the model gave the action with the LLM security analyzer (src/agent/security-analyzer.ts); absent without one. */
    security_risk: z.enum(['UNKNOWN', 'LOW', 'MEDIUM', 'HIGH']).optional(),
  },
  'A tool call of the agent.',
);
const ObservationEvent = event(
  'ObservationEvent',
  { tool_name: z.string(), tool_call_id: z.string(), action_id: z.string(), observation: Observation },
  'The result of a tool call.',
);
const AgentErrorEvent = event(
  'AgentErrorEvent',
  {
    /** Present when the error answers a tool call; absent for a note to the agent (e.g. a stuck hint). */
    tool_name: z.string().optional(),
    tool_call_id: z.string().optional(),
    error: z.string(),
  },
  'An error the agent can correct: a failed or invalid tool call, or a hint from the environment.',
);
const ConversationErrorEvent = event(
  'ConversationErrorEvent',
  { code: z.string(), detail: z.string(), server: z.string().optional() },
  'An error that stopped the run or a part of the conversation (code + human detail).',
);
const ConversationStateUpdateEvent = event(
  'ConversationStateUpdateEvent',
  { key: z.string(), value: z.unknown() },
  '`key:"execution_status"` when the status changes; also `setup`, `setup_script`, `mcp`, `llm_retry`, `goal`, and the socket-only `full_state`.',
);
/**
 * What each key of a `ConversationStateUpdateEvent` carries. The event's schema keeps `key: string`
 * and `value: unknown` (the wire shape, and events of other versions); code writes through
 * `stateUpdate` and reads through `stateUpdateValue`, both typed by this table.
 */
const STATE_UPDATE_SCHEMAS = {
  execution_status: z.enum(EXECUTION_STATUSES),
  setup: SetupState,
  /** The repository's `.openhands/setup.sh` ran (its output's tail). */
  setup_script: z.object({ exit_code: z.number().nullable(), timed_out: z.boolean(), output: z.string() }),
  /** The LLM call failed and is tried again after `delay_ms`. */
  llm_retry: z.object({ attempt: z.number(), delay_ms: z.number(), code: z.string(), detail: z.string() }),
  /** An MCP server of the conversation started, or its tools changed (a failure is a ConversationErrorEvent). */
  mcp: z.object({ type: z.enum(['server_ready', 'tools_changed']), server: z.string(), tools: z.array(z.string()) }),
  /** A `/goal` loop started, audited a run, or ended (src/conversation/goals.ts). */
  goal: GoalState,
  /** Socket only, first frame: the conversation's info (src/conversation/conversations.ts ConversationInfo). */
  full_state: z.record(z.string(), z.unknown()),
};
type StateUpdateValues = { [K in keyof typeof STATE_UPDATE_SCHEMAS]: z.output<(typeof STATE_UPDATE_SCHEMAS)[K]> };
export type StateUpdateKey = keyof StateUpdateValues;
export type StateUpdateValue<K extends StateUpdateKey> = StateUpdateValues[K];
// (as a mapped type, a schema looked up by a generic key is known to parse into that key's value)
const STATE_UPDATE_VALUES: { [K in StateUpdateKey]: z.ZodType<StateUpdateValues[K]> } = STATE_UPDATE_SCHEMAS;

const UserRejectObservation = event(
  'UserRejectObservation',
  {
    tool_name: z.string(),
    tool_call_id: z.string(),
    action_id: z.string(),
    rejection_reason: z.string(),
    rejection_source: z.enum(['user', 'hook']),
  },
  'An action waiting for confirmation that the user rejected (it did not run); answers its tool call.',
);
const PauseEvent = event('PauseEvent', {}, 'The run was paused.');
const InterruptEvent = event('InterruptEvent', {}, 'The run was interrupted (its in-flight call cancelled); the conversation is paused.');
const Condensation = event(
  'Condensation',
  { forgotten_event_ids: z.array(z.string()), summary: z.string().nullable() },
  'Older events replaced by a summary in the prompt.',
);
const StreamingDeltaEvent = event('StreamingDeltaEvent', { content: z.string() }, 'Live only (no seq): streamed text of the answer being written.');
const SetupOutputEvent = event('SetupOutputEvent', { output: z.string() }, 'Live only (no seq): output of the setup script.');
const ServerErrorEvent = event('ServerErrorEvent', { code: z.string(), detail: z.string() }, 'Socket only: a client frame that could not be handled.');

export const Event = z
  .discriminatedUnion('kind', [
    MessageEvent,
    SystemPromptEvent,
    ActionEvent,
    ObservationEvent,
    AgentErrorEvent,
    ConversationErrorEvent,
    ConversationStateUpdateEvent,
    UserRejectObservation,
    PauseEvent,
    InterruptEvent,
    Condensation,
    StreamingDeltaEvent,
    SetupOutputEvent,
    ServerErrorEvent,
  ])
  .meta({ id: 'Event', description: 'An event; `kind` is the discriminator.' });

/** An event as stored and sent. */
export type ParleyEvent = z.output<typeof Event>;
export type EventKind = ParleyEvent['kind'];
export type EventOf<K extends EventKind> = Extract<ParleyEvent, { kind: K }>;

/** What a producer hands to the log: the store assigns seq, and id and timestamp when absent. */
export type EventDraft = ParleyEvent extends infer E
  ? E extends ParleyEvent
    ? Omit<E, 'id' | 'seq' | 'timestamp'> & { id?: string; timestamp?: string }
    : never
  : never;

/** Fails to compile when a switch over kinds misses one. */
export function unreachable(x: never): never {
  throw new Error(`unexpected event kind ${JSON.stringify((x as { kind?: unknown })?.kind ?? x)}`);
}

/** A state update of `key` as a producer hands it to the log. */
export function stateUpdate<K extends StateUpdateKey>(key: K, value: StateUpdateValue<K>): EventDraft {
  return { kind: 'ConversationStateUpdateEvent', source: 'environment', key, value };
}

/**
 * The value of a state update of `key`, typed; undefined when the event is not one, or its value is
 * not of the key's shape (an event another version wrote).
 */
export function stateUpdateValue<K extends StateUpdateKey>(ev: ParleyEvent, key: K): StateUpdateValue<K> | undefined {
  if (ev.kind !== 'ConversationStateUpdateEvent' || ev.key !== key) return undefined;
  const parsed = STATE_UPDATE_VALUES[key].safeParse(ev.value);
  return parsed.success ? parsed.data : undefined;
}
