/**
 * OpenHands' app-server routes, what its web app calls besides the conversation and settings routes
 * Parley already has (src/conversation/app-server.ts holds their logic and says where OpenHands'
 * meaning is served): its config and options, the V1 app-conversation and sandbox views, the event
 * count, a conversation's runtime config, the runtime routes that carry a path in theirs, the app's
 * settings object and provider-token sign-out.
 */
import * as z from 'zod';
import * as app from '../../conversation/app-server.js';
import type { Core } from '../../core.js';
import { AgentServerSchemas as AS } from '../agent-server-schemas.js';
import { builtOnFirstUse } from '../lazy-schemas.js';
import { jsonInput, jsonOutput, mutation, query } from '../operation.js';
import { ApiSchemas as A } from '../schemas.js';

const parts = (c: Core): app.AppServerParts => ({ conversations: c.conversations, events: c.events, service: c.service, keys: c.conversationKeys });

/** Keys of the app's settings object that Parley's own `SettingsUpdate` lacks: a body with any of them is the app's. */
const APP_SETTINGS_KEYS = ['agent', 'language', 'confirmation_mode', 'security_analyzer', 'enable_default_condenser', 'user_consents_to_analytics'] as const;

/** The web app's own input schemas, built on first use (lazy-schemas.ts). */
const W = builtOnFirstUse(() => {
  const Ids = z.strictObject({ ids: z.array(A.ConversationId).min(1).max(100) });
  const SandboxIds = z.strictObject({ id: z.array(A.ConversationId).min(1).max(100) });
  const SandboxIdInput = z.object({ sandbox_id: A.ConversationId });
  const EventCountQuery = z.object({ conversation_id__eq: A.ConversationId });
  /** The path is the route's last segment, URL-encoded as the app sends it (`/api/git/changes/%2Fworkspace%2Fproject`). */
  const PathChanges = AS.WorkspacePathQuery.omit({ ref: true });
  const AppSettings = z
    .looseObject({
      llm_model: z.string().max(300).nullish(),
      llm_base_url: z.string().max(2000).nullish(),
      llm_api_key: z.string().max(10_000).nullish(),
    })
    .meta({
      id: 'AppSettings',
      description: "OpenHands' app's settings object: its LLM model, base URL and key are kept; its other fields are accepted and ignored.",
    });
  return { Ids, SandboxIds, SandboxIdInput, EventCountQuery, PathChanges, AppSettings };
});

const STRINGS = { type: 'array', items: { type: 'string' } };
const OBJECT = (description: string) => ({ type: 'object', description });
const LIST = (description: string) => ({ type: 'array', items: { anyOf: [{ type: 'object', description }, { type: 'null' }] } });

export const webAppOperations = {
  appConfig: query({
    input: () => A.NoInput,
    rest: { method: 'GET', path: '/api/options/config', summary: 'App Config', tag: 'Web app', doc: { response: OBJECT('{APP_MODE, FEATURE_FLAGS, …}') } },
    handler: async () => app.appConfig(),
  }),
  appModels: query({
    input: () => A.NoInput,
    rest: { method: 'GET', path: '/api/options/models', summary: 'App Models', tag: 'Web app', doc: { response: STRINGS } },
    handler: (c) => app.appModels(c.settings),
  }),
  appAgents: query({
    input: () => A.NoInput,
    rest: { method: 'GET', path: '/api/options/agents', summary: 'App Agents', tag: 'Web app', doc: { response: STRINGS } },
    handler: async () => ['CodeActAgent'],
  }),
  appSecurityAnalyzers: query({
    input: () => A.NoInput,
    rest: { method: 'GET', path: '/api/options/security-analyzers', summary: 'App Security Analyzers', tag: 'Web app', doc: { response: STRINGS } },
    handler: async () => [] as string[],
  }),
  appConversations: query({
    input: () => W.Ids,
    rest: {
      method: 'GET',
      path: '/api/v1/app-conversations',
      query: { lists: ['ids'] },
      summary: 'App Conversations',
      tag: 'Web app',
      doc: { response: LIST('V1 app conversation') },
    },
    handler: (c, i) => app.appConversations(parts(c), i.ids),
  }),
  sandboxes: query({
    input: () => W.SandboxIds,
    rest: { method: 'GET', path: '/api/v1/sandboxes', query: { lists: ['id'] }, summary: 'Sandboxes', tag: 'Web app', doc: { response: LIST('sandbox') } },
    handler: (c, i) => app.sandboxes(parts(c), i.id),
  }),
  pauseSandbox: mutation({
    input: () => W.SandboxIdInput,
    rest: { method: 'POST', path: '/api/v1/sandboxes/{sandbox_id}/pause', summary: 'Pause Sandbox', tag: 'Web app' },
    handler: (c, i) => app.pauseSandbox(parts(c), i.sandbox_id),
  }),
  resumeSandbox: mutation({
    input: () => W.SandboxIdInput,
    rest: { method: 'POST', path: '/api/v1/sandboxes/{sandbox_id}/resume', summary: 'Resume Sandbox', tag: 'Web app' },
    handler: (c, i) => app.resumeSandbox(parts(c), i.sandbox_id),
  }),
  appEventCount: query({
    input: () => W.EventCountQuery,
    rest: { method: 'GET', path: '/api/v1/events/count', query: true, summary: 'App Event Count', tag: 'Web app', doc: { response: { type: 'integer' } } },
    handler: (c, i) => app.appEventCount(parts(c), i.conversation_id__eq),
  }),
  conversationConfig: query({
    input: () => A.ConversationIdInput,
    rest: {
      method: 'GET',
      path: '/api/conversations/{conversation_id}/config',
      summary: 'Conversation Config',
      tag: 'Web app',
      doc: { response: OBJECT('{runtime_id, session_id}') },
    },
    handler: (c, i) => app.conversationConfig(parts(c), i.conversation_id),
  }),
  gitChangesAt: query({
    input: () => W.PathChanges,
    rest: { method: 'GET', path: '/api/git/changes/{path}', query: true, byConversationKey: true, summary: 'Git Changes At', tag: 'Git' },
    handler: async (c, i) => c.sideChannels.gitChanges(await app.runtimePath(c, i)),
  }),
  gitDiffAt: query({
    input: () => AS.WorkspacePathQuery,
    rest: { method: 'GET', path: '/api/git/diff/{path}', query: true, byConversationKey: true, summary: 'Git Diff At', tag: 'Git' },
    handler: async (c, i) => c.sideChannels.gitDiff({ ...(await app.runtimePath(c, i)), ref: i.ref }),
  }),
  /** REST reads the bytes from a multipart body; tRPC takes them as base64. */
  uploadFileAt: jsonInput(
    mutation({
      input: () => AS.WorkspaceUploadInput,
      rest: {
        method: 'POST',
        path: '/api/file/upload/{path}',
        body: { field: 'content', multipart: 'file' },
        query: true,
        byConversationKey: true,
        summary: 'Upload File At',
        tag: 'Files',
      },
      handler: async (c, i) => c.sideChannels.upload({ ...(await app.runtimePath(c, i)), content: i.content }),
    }),
    () => AS.WorkspaceUploadJsonInput,
  ),
  /** REST answers the bytes raw; tRPC as base64. */
  downloadFileAt: jsonOutput(
    query({
      input: () => W.PathChanges,
      rest: {
        method: 'GET',
        path: '/api/file/download/{path}',
        query: true,
        byConversationKey: true,
        summary: 'Download File At',
        tag: 'Files',
        doc: { response: { type: 'string', format: 'binary' } },
      },
      handler: async (c, i) => c.sideChannels.download(await app.runtimePath(c, i)),
    }),
    async (f) => ({ name: f.name, content_base64: (await f.collect()).toString('base64') }),
  ),
  saveAppSettings: mutation({
    input: () => W.AppSettings,
    rest: {
      method: 'POST',
      path: '/api/settings',
      body: 'input',
      when: { bodyHasAnyKey: APP_SETTINGS_KEYS },
      summary: 'Store App Settings',
      tag: 'Settings',
      doc: { response: 'MessageResponse' },
    },
    handler: (c, i) => app.saveAppSettings(c.settings, i),
  }),
  unsetProviderTokens: mutation({
    input: () => A.NoInput,
    rest: { method: 'POST', path: '/api/unset-provider-tokens', summary: 'Unset Provider Tokens', tag: 'Git', doc: { response: 'MessageResponse' } },
    handler: (c) => app.unsetProviderTokens(c.settings),
  }),
};
