/**
 * OpenHands agent-server's LLM catalog and subscription sign-in, LLM profiles, agent profiles (and
 * meta-profiles, which Parley has no tool for).
 */
import * as z from 'zod';
import { llmModels, llmProviders, verifiedLlmModels } from '../../llm/catalog.js';
import { mutation, query } from '../operation.js';
import { ApiSchemas as A } from '../schemas.js';
import { ServerSchemas as S } from '../server-schemas.js';
import { BODY, DELETE, FIELDS, GET, META_PROFILES, POST, QUERY, SUBSCRIPTION, unavailable } from './server-lines.js';

const LLM = 'LLM';
const PROFILES = 'Profiles';
const AGENT_PROFILES = 'Agent Profiles';
const META = 'Meta Profiles';
const SUBSCRIPTION_STATUS = { vendor: 'openai', connected: false, account_email: null, expires_at: null };

export const llmProfileOperations = {
  // ---- LLM catalog and subscription ----
  listLlmProviders: query({ input: () => A.NoInput, rest: GET('/api/llm/providers', 'List Providers', LLM), handler: async () => llmProviders() }),
  listLlmModels: query({
    input: () => S.LlmModelsQuery,
    rest: GET('/api/llm/models', 'List Models', LLM, QUERY),
    handler: async (_c, i) => llmModels(i.provider),
  }),
  listVerifiedLlmModels: query({
    input: () => A.NoInput,
    rest: GET('/api/llm/models/verified', 'List Verified Models', LLM),
    handler: async () => verifiedLlmModels(),
  }),
  openaiSubscriptionModels: query({
    input: () => A.NoInput,
    rest: GET('/api/llm/subscription/openai/models', 'List OpenAI Subscription Models', LLM),
    handler: async () => ({ vendor: 'openai', models: [] as string[] }),
  }),
  openaiSubscriptionStatus: query({
    input: () => A.NoInput,
    rest: GET('/api/llm/subscription/openai/status', 'Get OpenAI Subscription Status', LLM),
    handler: async () => SUBSCRIPTION_STATUS,
  }),
  openaiDeviceStart: unavailable(
    'mutation',
    () => A.NoInput,
    POST('/api/llm/subscription/openai/device/start', 'Start OpenAI Subscription Device Login', LLM),
    SUBSCRIPTION,
  ),
  openaiDevicePoll: unavailable(
    'mutation',
    () => S.DevicePollRequest,
    POST('/api/llm/subscription/openai/device/poll', 'Poll OpenAI Subscription Device Login', LLM, BODY),
    SUBSCRIPTION,
  ),
  openaiLogout: mutation({
    input: () => A.NoInput,
    rest: POST('/api/llm/subscription/openai/logout', 'Logout OpenAI Subscription', LLM),
    handler: async () => SUBSCRIPTION_STATUS,
  }),

  // ---- LLM profiles ----
  listProfiles: query({ input: () => A.NoInput, rest: GET('/api/profiles', 'List Profiles', PROFILES), handler: (c) => c.server.llmProfiles.list() }),
  getProfile: query({
    input: () => S.ProfileNameInput,
    rest: GET('/api/profiles/{name}', 'Get Profile', PROFILES),
    handler: (c, i) => c.server.llmProfiles.get(i.name),
  }),
  saveProfile: mutation({
    input: () => S.SaveProfileInput,
    rest: POST('/api/profiles/{name}', 'Save Profile', PROFILES, { ...FIELDS, status: 201 }),
    handler: (c, i) => c.server.llmProfiles.save(i.name, i.llm, i.include_secrets),
  }),
  deleteProfile: mutation({
    input: () => S.ProfileNameInput,
    rest: DELETE('/api/profiles/{name}', 'Delete Profile', PROFILES),
    handler: (c, i) => c.server.llmProfiles.delete(i.name),
  }),
  renameProfile: mutation({
    input: () => S.RenameProfileInput,
    rest: POST('/api/profiles/{name}/rename', 'Rename Profile', PROFILES, FIELDS),
    handler: (c, i) => c.server.llmProfiles.rename(i.name, i.new_name),
  }),
  activateProfile: mutation({
    input: () => S.ProfileNameInput,
    rest: POST('/api/profiles/{name}/activate', 'Activate Profile', PROFILES),
    handler: (c, i) => c.server.llmProfiles.activate(i.name),
  }),
  validateProfile: mutation({
    input: () => S.ValidateProfileInput,
    rest: POST('/api/profiles/{name}/validate', 'Validate Profile', PROFILES, FIELDS),
    handler: (c, i) => c.server.llmProfiles.validate(i.llm),
  }),

  // ---- agent profiles (and the meta-profiles Parley has no tool for) ----
  listAgentProfiles: query({
    input: () => A.NoInput,
    rest: GET('/api/agent-profiles', 'List Agent Profiles', AGENT_PROFILES),
    handler: (c) => c.server.agentProfiles.list(),
  }),
  getAgentProfile: query({
    input: () => S.ProfileNameInput,
    rest: GET('/api/agent-profiles/{name}', 'Get Agent Profile', AGENT_PROFILES),
    handler: (c, i) => c.server.agentProfiles.get(i.name),
  }),
  saveAgentProfile: mutation({
    input: () => S.SaveAgentProfileInput,
    rest: POST('/api/agent-profiles/{name}', 'Save Agent Profile', AGENT_PROFILES, { body: { field: 'profile' }, status: 201 }),
    handler: (c, i) => c.server.agentProfiles.save(i.name, i.profile),
  }),
  deleteAgentProfile: mutation({
    input: () => S.ProfileNameInput,
    rest: DELETE('/api/agent-profiles/{name}', 'Delete Agent Profile', AGENT_PROFILES),
    handler: (c, i) => c.server.agentProfiles.delete(i.name),
  }),
  renameAgentProfile: mutation({
    input: () => S.RenameProfileInput,
    rest: POST('/api/agent-profiles/{name}/rename', 'Rename Agent Profile', AGENT_PROFILES, FIELDS),
    handler: (c, i) => c.server.agentProfiles.rename(i.name, i.new_name),
  }),
  materializeAgentProfile: mutation({
    input: () => S.ProfileNameInput,
    rest: POST('/api/agent-profiles/{name}/materialize', 'Materialize Agent Profile', AGENT_PROFILES),
    handler: (c, i) => c.server.agentProfiles.materialize(i.name),
  }),
  activateAgentProfile: mutation({
    input: () => S.AgentProfileIdInput,
    rest: POST('/api/agent-profiles/{profile_id}/activate', 'Activate Agent Profile', AGENT_PROFILES),
    handler: (c, i) => c.server.agentProfiles.activate(i.profile_id),
  }),
  listMetaProfiles: unavailable('query', () => A.NoInput, GET('/api/meta-profiles', 'List Meta Profiles', META), META_PROFILES),
  getMetaProfile: unavailable('query', () => S.ProfileNameInput, GET('/api/meta-profiles/{name}', 'Get Meta Profile', META), META_PROFILES),
  saveMetaProfile: unavailable(
    'mutation',
    () => S.ProfileNameInput.extend({ config: z.unknown() }),
    POST('/api/meta-profiles/{name}', 'Save Meta Profile', META, { body: { field: 'config' } }),
    META_PROFILES,
  ),
  deleteMetaProfile: unavailable('mutation', () => S.ProfileNameInput, DELETE('/api/meta-profiles/{name}', 'Delete Meta Profile', META), META_PROFILES),
  activateMetaProfile: unavailable(
    'mutation',
    () => S.ProfileNameInput,
    POST('/api/meta-profiles/{name}/activate', 'Activate Meta Profile', META),
    META_PROFILES,
  ),
};
