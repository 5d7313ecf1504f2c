/**
 * Wire schemas of OpenHands' agent-server shape (what `@openhands/typescript-client` sends): the
 * create request, conversation search, title/tags, confirmation policy, conversation secrets, and
 * the workspace side channels. Kept apart from `schemas.ts`, whose `InitSessionRequest` and its 422s
 * are the interface's own and do not change for this client.
 */
import * as z from 'zod';
import { builtOnFirstUse } from './lazy-schemas.js';
import { ConfirmationPolicy } from '../conversation/agent-server.js';
import { EXECUTION_STATUSES } from '../conversation/conversations.js';
import { UploadSource } from '../conversation/file-transfer.js';
import { ApiSchemas } from './schemas.js';

/** Body keys that mark a create request as the agent-server shape (any other body is `InitSessionRequest`). */
export const AGENT_SERVER_CREATE_KEYS = ['agent', 'agent_settings', 'agent_profile_id', 'workspace', 'initial_message'] as const;

// (long: the whole module's schemas, in the order they build on each other)
function build() {
  const { ConversationId, SecretValue, SendMessageRequest } = ApiSchemas;
  /** The LLM of an agent: Parley uses model, api_key and base_url; the client's other LLM options are accepted. */
  const AgentLlm = z
    .looseObject({
      model: z.string().min(1).max(300).nullish(),
      api_key: z.string().nullish(),
      base_url: z
        .string()
        .regex(/^https?:\/\/\S+$/, { error: 'base_url must be an http(s) URL' })
        .nullish(),
    })
    .meta({ id: 'AgentServerLLM' });

  /** `{kind:"Agent", llm, tools…}`: the agent's other fields (tools, context, condenser…) are accepted and Parley's own are used. */
  const AgentSpec = z.looseObject({ kind: z.string().nullish(), llm: AgentLlm.nullish() }).meta({ id: 'AgentServerAgent' });

  const WorkspaceSpec = z
    .looseObject({
      kind: z.string().nullish(),
      type: z.string().nullish(),
      working_dir: z.string().max(4096).nullish(),
    })
    .meta({ id: 'AgentServerWorkspace', description: 'working_dir is recorded as the client names the workspace; it is never used as a host path.' });

  /** `{kind:"StaticSecret", value}`; a LookupSecret (a URL the server would fetch) is refused. */
  const StaticSecret = z.strictObject({
    kind: z.literal('StaticSecret').default('StaticSecret'),
    value: SecretValue,
    description: z.string().max(1000).nullish(),
  });
  const SecretName = z.string().regex(/^[A-Za-z_][A-Za-z0-9_]{0,127}$/, { error: 'name must be a valid environment variable name' });
  const SecretsMap = z.record(SecretName, z.union([StaticSecret, SecretValue]));

  const Tags = z.record(z.string().max(200), z.string().max(2000));

  const StartConversationRequest = z
    .strictObject({
      agent: AgentSpec.nullish(),
      // the settings form of an agent: its `llm` is read like agent.llm, the rest accepted
      agent_settings: z.looseObject({ llm: AgentLlm.nullish() }).nullish(),
      /** A saved agent profile (`/api/agent-profiles`): the conversation starts with its LLM profile and MCP servers. */
      agent_profile_id: z.uuid().nullish(),
      workspace: WorkspaceSpec.nullish(),
      initial_message: SendMessageRequest.extend({ run: z.boolean().default(true) }).nullish(),
      max_iterations: z.number().int().min(1).max(10_000).nullish(),
      stuck_detection: z.boolean().nullish(),
      confirmation_policy: ConfirmationPolicy.nullish(),
      secrets: SecretsMap.nullish(),
      conversation_id: ConversationId.nullish(),
      tags: Tags.nullish(),
      // sent by the client on every create; Parley has no hooks and no users, so they are accepted and ignored
      hook_config: z.unknown().optional(),
      user_id: z.string().nullish(),
    })
    .meta({
      id: 'StartConversationRequest',
      title: 'StartConversationRequest',
      description: 'OpenHands agent-server create request (what @openhands/typescript-client sends).',
    });

  const Limit = z.coerce.number().int().min(1).max(100).default(100);

  const ConversationSearchQuery = z.strictObject({
    page_id: z.string().nullish(),
    limit: Limit,
    status: z.enum(EXECUTION_STATUSES).nullish(),
    sort_order: z.enum(['CREATED_AT', 'UPDATED_AT', 'CREATED_AT_DESC', 'UPDATED_AT_DESC']).default('CREATED_AT_DESC'),
    tag: z.string().max(2000).nullish(),
  });
  const ConversationCountQuery = ConversationSearchQuery.pick({ status: true, tag: true });

  /** `GET /api/conversations?ids=a,b` (or `ids=a&ids=b`). */
  const ConversationIdsInput = z.strictObject({ ids: z.array(ConversationId).min(1).max(100) });

  const UpdateConversationBody = z.strictObject({ title: z.string().max(500).nullish(), tags: Tags.nullish() }).meta({ id: 'UpdateConversationRequest' });
  const UpdateConversationInput = UpdateConversationBody.extend({ conversation_id: ConversationId });

  const SetConfirmationPolicyInput = z.strictObject({ conversation_id: ConversationId, policy: ConfirmationPolicy });
  const UpdateSecretsInput = z.strictObject({ conversation_id: ConversationId, secrets: SecretsMap });
  const AskAgentInput = z.strictObject({ conversation_id: ConversationId, question: z.string().min(1).max(100_000) });
  const ConfirmationResponseInput = z.strictObject({
    conversation_id: ConversationId,
    accept: z.boolean(),
    reason: z.string().max(10_000).nullish(),
  });

  // ---- workspace side channels (bash, file, git) ------------------------------------------------

  const ExecuteBashRequest = z
    .strictObject({
      command: z.string().min(1).max(100_000),
      cwd: z.string().max(4096).nullish(),
      timeout: z.number().int().min(1).max(3600).default(300),
      conversation_id: ConversationId.nullish(),
    })
    .meta({ id: 'ExecuteBashRequest' });

  const BashEventSearchQuery = z.strictObject({
    kind__eq: z.enum(['BashCommand', 'BashOutput']).nullish(),
    command_id__eq: z.string().max(200).nullish(),
    timestamp__gte: z.string().max(64).nullish(),
    timestamp__lt: z.string().max(64).nullish(),
    order__gt: z.coerce.number().int().nullish(),
    sort_order: z.enum(['TIMESTAMP', 'TIMESTAMP_DESC']).default('TIMESTAMP'),
    page_id: z.string().max(200).nullish(),
    limit: Limit,
  });
  const BashEventIdInput = z.object({ event_id: z.string().max(200) });
  /** `GET /api/bash/bash_events/` with a JSON array of ids as its body (how the client batches). */
  const BashEventIdsInput = z.array(z.string().max(200)).max(100);

  /** A side-channel path (`?path=`), with the conversation it belongs to when the caller names it. */
  /** A file of a conversation's workspace served as it is: its path below the workspace (none: the workspace's index.html). */
  const ServeWorkspaceFileInput = z.strictObject({
    conversation_id: ConversationId,
    file_path: z.string().max(4096).optional(),
  });

  const WorkspacePathQuery = z.strictObject({
    path: z.string().min(1).max(4096),
    conversation_id: ConversationId.nullish(),
    // a ref, never an option (`--output=…`): letters, digits and ref punctuation, not starting with '-'
    ref: z
      .string()
      .regex(/^[A-Za-z0-9_][A-Za-z0-9._/~^@{}-]{0,199}$/, { error: 'ref must be a git revision' })
      .nullish(),
  });
  const WorkspaceUploadInput = z.object({
    path: z.string().min(1).max(4096),
    conversation_id: ConversationId.nullish(),
    /** The `file` part of the multipart body, as it arrives (REST), or whole (tRPC's base64). */
    content: z.union([z.instanceof(Uint8Array), z.instanceof(UploadSource)]),
  });
  /** The same upload over tRPC (JSON): the file's bytes as base64 (the body limit bounds them, as it bounds a multipart body). */
  const WorkspaceUploadJsonInput = z
    .object({ path: WorkspaceUploadInput.shape.path, conversation_id: WorkspaceUploadInput.shape.conversation_id, content_base64: z.base64() })
    .transform(({ content_base64, ...rest }) => {
      const bytes = Buffer.from(content_base64, 'base64');
      return { ...rest, content: new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength) };
    });

  // ---- conversation features: fork, navigate, goals, switching the LLM, the security analyzer --------

  /** A query flag as FastAPI reads one (`true`/`false`). */
  const QueryFlag = z.preprocess((v) => (v === 'true' ? true : v === 'false' ? false : v), z.boolean());

  const ForkConversationRequest = z
    .strictObject({
      id: ConversationId.nullish(),
      title: z.string().trim().min(1).max(200).nullish(),
      tags: Tags.nullish(),
      reset_metrics: z.boolean().default(true),
      from_event_id: z.string().max(200).nullish(),
    })
    .meta({ id: 'ForkConversationRequest' });
  const ForkConversationInput = z.strictObject({
    conversation_id: ConversationId,
    include_skills: QueryFlag.default(false),
    request: ForkConversationRequest,
  });

  const NavigateConversationRequest = z.strictObject({ event_id: z.string().max(200).nullish() }).meta({ id: 'NavigateConversationRequest' });
  const NavigateConversationInput = z.strictObject({
    conversation_id: ConversationId,
    include_skills: QueryFlag.default(false),
    request: NavigateConversationRequest,
  });

  /** An empty objective is the core's 400 (as OpenHands answers it), not a 422. */
  const StartGoalInput = z.strictObject({
    conversation_id: ConversationId,
    objective: z.string().max(100_000),
    max_iterations: z.number().int().min(1).max(1000).default(10),
  });

  const SwitchLlmInput = z.strictObject({ conversation_id: ConversationId, llm: AgentLlm });
  const SwitchProfileInput = z.strictObject({
    conversation_id: ConversationId,
    profile_name: z.string().regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/, { error: 'not a profile name' }),
  });
  const SwitchAcpModelInput = z.strictObject({ conversation_id: ConversationId, model: z.string().min(1).max(300) });

  /** `{kind: "LLMSecurityAnalyzer"}` (the generated client's `…__LLMSecurityAnalyzer-Input__1` too), another analyzer, or null. */
  const SecurityAnalyzerSpec = z
    .looseObject({
      kind: z
        .string()
        .max(300)
        .transform((k) => /__([A-Za-z]+)-(?:Input|Output)__\d+$/.exec(k)?.[1] ?? k),
    })
    .meta({ id: 'SecurityAnalyzer' });
  const SetSecurityAnalyzerInput = z.strictObject({ conversation_id: ConversationId, security_analyzer: SecurityAnalyzerSpec.nullable() });
  return {
    StartConversationRequest,
    ConversationSearchQuery,
    ConversationCountQuery,
    ConversationIdsInput,
    UpdateConversationInput,
    SetConfirmationPolicyInput,
    UpdateSecretsInput,
    AskAgentInput,
    ConfirmationResponseInput,
    ExecuteBashRequest,
    BashEventSearchQuery,
    BashEventIdInput,
    BashEventIdsInput,
    ServeWorkspaceFileInput,
    WorkspacePathQuery,
    WorkspaceUploadInput,
    WorkspaceUploadJsonInput,
    ForkConversationInput,
    NavigateConversationInput,
    StartGoalInput,
    SwitchLlmInput,
    SwitchProfileInput,
    SwitchAcpModelInput,
    SetSecurityAnalyzerInput,
  };
}

/** The schemas above, built on first use (lazy-schemas.ts). */
export const AgentServerSchemas = builtOnFirstUse(build);
