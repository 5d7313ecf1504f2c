/**
 * Every wire schema, in one place: validation, TypeScript types and the OpenAPI document
 * all come from these zod objects. Component names (`.meta({ id })`) follow the interface document.
 */
import * as z from 'zod';
import { builtOnFirstUse } from './lazy-schemas.js';
import { ConversationInfo } from '../conversation/conversations.js';
import { Event, EventSource, MESSAGE_ROLES } from '../events/schema.js';
import { McpConfig } from '../tools/mcp/config.js';
import { GIT_PROVIDERS } from '../workspace/providers.js';
import { CreateMicroagent, SuggestedTask } from '../workspace/tasks.js';
import { imageUrlProblem } from '../llm/image-url-rule.js';
import { EventFilterExtras } from './event-filters.js';

// (long: the whole module's schemas, in the order they build on each other)
function build() {
  const UUID_RE = /^(?:[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}|[0-9a-fA-F]{32})$/;

  /** A conversation id in dashed or 32-hex form, normalised to lowercase dashed. */
  const ConversationId = z
    .string()
    .regex(UUID_RE, { error: 'uuid_parsing' })
    .transform((s) => {
      const h = s.replace(/-/g, '').toLowerCase();
      return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
    })
    .meta({ format: 'uuid', description: 'Conversation id (dashed or 32-hex UUID)' });

  const TextContent = z
    .strictObject({
      text: z.string(),
      type: z.literal('text').default('text'),
      cache_prompt: z.boolean().default(false),
    })
    .meta({ id: 'TextContent', title: 'TextContent' });

  /** An image URL the daemon will fetch for the model: anything else is refused on arrival, not at every later step. */
  const ImageUrl = z.string().superRefine((url, ctx) => {
    const problem = imageUrlProblem(url);
    if (problem) ctx.addIssue({ code: 'custom', message: problem });
  });

  const ImageContent = z
    .strictObject({
      image_urls: z.array(ImageUrl),
      type: z.literal('image').default('image'),
      cache_prompt: z.boolean().default(false),
    })
    .meta({ id: 'ImageContent', title: 'ImageContent' });

  const ContentItem = z.union([TextContent, ImageContent]);

  const SendMessageRequest = z
    .object({
      role: z.enum(MESSAGE_ROLES).default('user'),
      content: z.array(ContentItem).default([]),
      run: z.boolean().default(false).meta({ description: 'Whether the agent loop should automatically run if not running' }),
    })
    .meta({
      id: 'SendMessageRequest',
      title: 'SendMessageRequest',
      description: 'Payload to send a message to the agent. This is a simplified version of openhands.sdk.Message.',
    });

  // The response shapes that nothing imports are named by their meta id in the OpenAPI document
  // (bridge/openapi.ts refers to them): registering them is what building this module's schemas does.
  // biome-ignore lint/correctness/noUnusedVariables: named by its meta id in the OpenAPI document
  const Success = z.object({ success: z.boolean().default(true) }).meta({ id: 'Success', title: 'Success' });

  const ValidationErrorSchema = z
    .object({
      loc: z.array(z.union([z.string(), z.number().int()])),
      msg: z.string(),
      type: z.string(),
    })
    .meta({ id: 'ValidationError', title: 'ValidationError' });

  // biome-ignore lint/correctness/noUnusedVariables: named by its meta id in the OpenAPI document
  const HTTPValidationError = z.object({ detail: z.array(ValidationErrorSchema) }).meta({ id: 'HTTPValidationError', title: 'HTTPValidationError' });

  // biome-ignore lint/correctness/noUnusedVariables: named by its meta id in the OpenAPI document
  const ErrorDetail = z.object({ detail: z.string() }).meta({ id: 'ErrorDetail', title: 'ErrorDetail' });

  const NewConversationRequest = z
    .strictObject({
      repository: z.string().nullish(),
      git_provider: z.enum(GIT_PROVIDERS).nullish(),
      selected_branch: z.string().nullish(),
      initial_user_msg: z.string().nullish(),
      image_urls: z.array(ImageUrl).nullish(),
      replay_json: z.string().nullish(),
      suggested_task: SuggestedTask.nullish(),
      create_microagent: CreateMicroagent.nullish(),
      conversation_instructions: z.string().nullish(),
      mcp_config: McpConfig.nullish(),
      conversation_id: ConversationId.nullish(),
    })
    .meta({ id: 'InitSessionRequest', title: 'InitSessionRequest' });

  // referenced by name only: its meta id registers it for the OpenAPI document (bridge/openapi.ts)
  // biome-ignore lint/correctness/noUnusedVariables: named by its meta id in the OpenAPI document
  const NewConversationResponse = z
    .object({
      status: z.string(),
      conversation_id: z.string(),
      message: z.string().nullable(),
      conversation_status: z.string(),
    })
    .meta({ id: 'ConversationResponse', title: 'ConversationResponse' });

  const ProviderToken = z.strictObject({
    // empty keeps the stored token; a new one must be long enough to be redacted safely
    token: z
      .string()
      .refine((t) => t === '' || t.length >= 8, { error: 'a token must be at least 8 characters' })
      .nullish(),
    host: z.string().max(512).nullish(),
    user_id: z.string().nullish(),
  });
  const AddGitProvidersRequest = z
    .strictObject({
      provider_tokens: z.partialRecord(z.enum(GIT_PROVIDERS), ProviderToken).default({}),
      mcp_config: McpConfig.nullish(),
    })
    .meta({ id: 'POSTProviderModel', title: 'POSTProviderModel' });
  // biome-ignore lint/correctness/noUnusedVariables: named by its meta id in the OpenAPI document
  const MessageResponse = z.object({ message: z.string() }).meta({ id: 'MessageResponse' });

  const Limit = z.coerce.number().int().min(1).max(100).default(100);

  const ListConversationsInput = z.object({
    page_id: z.string().nullish(),
    limit: Limit,
  });

  // biome-ignore lint/correctness/noUnusedVariables: named by its meta id in the OpenAPI document
  const ConversationPage = z.object({ items: z.array(ConversationInfo), next_page_id: z.string().nullable() }).meta({ id: 'ConversationPage' });

  // biome-ignore lint/correctness/noUnusedVariables: named by its meta id in the OpenAPI document
  const EventPage = z.object({ items: z.array(Event), next_page_id: z.string().nullable() }).meta({ id: 'EventPage' });

  // strict: a query parameter Parley does not know is a 422, never silently ignored
  const SearchEventsQuery = z.strictObject({
    page_id: z.string().nullish(),
    limit: Limit,
    kind: z.string().max(200).nullish(),
    source: EventSource.nullish(),
    sort_order: z.enum(['TIMESTAMP', 'TIMESTAMP_DESC']).default('TIMESTAMP'),
    after_seq: z.coerce.number().int().min(0).nullish(),
    ...EventFilterExtras,
  });
  const CountEventsQuery = SearchEventsQuery.pick({ kind: true, source: true, after_seq: true, body: true, timestamp__gte: true, timestamp__lt: true });

  /** The input of an operation that takes none. */
  const NoInput = z.void();
  const ConversationIdInput = z.object({ conversation_id: ConversationId });
  const SearchEventsInput = SearchEventsQuery.extend({ conversation_id: ConversationId });
  const CountEventsInput = CountEventsQuery.extend({ conversation_id: ConversationId });
  const GetEventInput = z.object({ conversation_id: ConversationId, event_id: z.string().max(200) });
  const SendMessageInput = z.object({ conversation_id: ConversationId, message: SendMessageRequest });
  const SubscribeInput = z.object({
    conversation_id: ConversationId,
    after_seq: z.number().int().min(0).nullish(),
    /** Sent by tRPC's client when it resubscribes: the id (seq) of the last event it received. */
    lastEventId: z.string().max(40).nullish(),
  });

  // biome-ignore lint/correctness/noUnusedVariables: named by its meta id in the OpenAPI document
  const ServerInfo = z
    .object({
      /** The OpenHands agent-server API version Parley implements (its client's feature gates read it). */
      version: z.string(),
      /** The interface's own version (this document's `info.version`). */
      interface_version: z.string(),
      uptime: z.number(),
      idle_time: z.number(),
      title: z.string(),
      docs: z.string(),
      /** How agent processes are confined (src/sandbox/): mode, network, which limits are enforced and how. */
      sandbox: z
        .looseObject({
          mode: z.enum(['bwrap', 'none']),
          network: z.enum(['host', 'none']),
          limits: z.looseObject({
            enforced_by: z.string(),
            memory_mb: z.number().nullable(),
            pids: z.number().nullable(),
            file_size_mb: z.number().nullable(),
          }),
        })
        .optional(),
    })
    .meta({ id: 'ServerInfo' });

  const SettingsUpdate = z
    .strictObject({
      llm_model: z
        .string()
        .regex(/^[a-z0-9-]+\/.+$/, { error: 'llm_model must look like provider/model, e.g. openai/gpt-5' })
        .nullish(),
      llm_base_url: z
        .string()
        .regex(/^https?:\/\/\S+$/, { error: 'llm_base_url must be an http(s) URL' })
        .nullish(),
      llm_api_key: z.string().nullish(),
    })
    .meta({ id: 'SettingsUpdate' });
  /** Shorter values would be redacted from every output as ordinary words, so they are refused. */
  const SecretValue = z.string().min(8, { error: 'a secret value must be at least 8 characters' });
  const SecretName = z.string().regex(/^[A-Za-z_][A-Za-z0-9_]{0,127}$/, { error: 'name must be a valid environment variable name' });
  const CreateSecretInput = z.strictObject({ name: SecretName, value: SecretValue, description: z.string().max(1000).nullish() }).meta({ id: 'CreateSecret' });
  const UpdateSecretBody = z.strictObject({ value: SecretValue.nullish(), description: z.string().max(1000).nullish() }).meta({ id: 'UpdateSecret' });
  const UpdateSecretInput = UpdateSecretBody.extend({ name: SecretName });
  const SecretNameInput = z.object({ name: SecretName });

  // biome-ignore lint/correctness/noUnusedVariables: named by its meta id in the OpenAPI document
  const SettingsView = z
    .object({
      llm_model: z.string().nullable(),
      llm_base_url: z.string().nullable(),
      llm_api_key_set: z.boolean(),
      // OpenHands agent-server's SettingsResponse, beside Parley's fields (src/settings/agent-settings.ts)
      agent_settings: z.looseObject({}),
      conversation_settings: z.looseObject({}),
      misc_settings: z.looseObject({}),
      llm_api_key_is_set: z.boolean(),
      active_profile: z.string().nullable(),
      active_agent_profile_id: z.string().nullable(),
    })
    .meta({
      id: 'SettingsView',
      description: "The LLM settings (the key itself is never returned) and, beside them, OpenHands agent-server's SettingsResponse.",
    });
  const SecretInfo = z.object({ name: z.string(), description: z.string().nullable() }).meta({ id: 'SecretInfo' });
  // biome-ignore lint/correctness/noUnusedVariables: named by its meta id in the OpenAPI document
  const SecretList = z.object({ secrets: z.array(SecretInfo) }).meta({ id: 'SecretList', description: 'Names and descriptions; values are never returned.' });
  const McpServerStatus = z
    .object({
      name: z.string(),
      transport: z.enum(['stdio', 'sse', 'shttp']),
      state: z.enum(['configured', 'starting', 'ready', 'failed']),
      reason: z.string().optional(),
      tools: z.array(z.string()),
    })
    .meta({ id: 'McpServerStatus' });
  // biome-ignore lint/correctness/noUnusedVariables: named by its meta id in the OpenAPI document
  const McpStatusView = z
    .object({ config: McpConfig, servers: z.array(McpServerStatus) })
    .meta({ id: 'McpStatusView', description: "The effective MCP config (api_key and env values redacted) and each server's state." });
  return {
    ConversationId,
    SendMessageRequest,
    NewConversationRequest,
    AddGitProvidersRequest,
    ListConversationsInput,
    NoInput,
    ConversationIdInput,
    SearchEventsInput,
    CountEventsInput,
    GetEventInput,
    SendMessageInput,
    SubscribeInput,
    SettingsUpdate,
    SecretValue,
    CreateSecretInput,
    UpdateSecretInput,
    SecretNameInput,
  };
}

/** The schemas above, built on first use (lazy-schemas.ts). */
export const ApiSchemas = builtOnFirstUse(build);
