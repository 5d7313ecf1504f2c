/**
 * The operations of OpenHands agent-server's server-wide routes (a section of the operation table,
 * operations.ts): the LLM catalog, LLM and agent profiles, settings with their MCP servers and secrets,
 * the MCP test, the file browser, saved workspaces, skills, hooks, sub-agents, `/api/init`; and the
 * answers for what needs the internet or a third party Parley does not reach (a 501 with the reason,
 * or the agent server's own "not connected" / "error" shape where it has one: never a fake success).
 */
import type { z } from 'zod';
import type { Core } from '../core.js';
import { NotImplementedError, ForbiddenError, ConflictError } from '../errors.js';
import { llmModels, llmProviders, verifiedLlmModels } from '../llm/catalog.js';
import { agentSettingsSchema, conversationSettingsSchema } from '../settings/settings-schema.js';
import { NO_INTERNET } from '../conversation/project-extensions.js';
import type { FileBytes } from '../conversation/side-channels.js';
import { checkMcpServer, toMcpConfig } from '../settings/mcp-servers.js';
import { RequestValidationError } from '../errors.js';
import * as S from './server-schemas.js';
import { z as zod } from 'zod';

type Handler<I extends z.ZodType, O> = (c: Core, i: z.output<I>) => Promise<O>;

/**
 * An operation's REST route, as data (bridge/server-routes.ts makes the routes of it): the method, the
 * path template (parameters in braces, each the input's field of that name), and where the rest of the
 * input comes from: the JSON body as the whole input (`input`), its fields beside the path's parameters
 * (`fields`) or one field (`{ field }`); the query string's parameters (`query`, `lists` given repeated).
 */
export interface ServerRest {
  method: 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';
  path: string;
  body?: 'input' | 'fields' | { field: string };
  query?: true | { lists: readonly string[] };
  status?: number;
  summary: string;
  tag: string;
}

/**
 * The shape of operations.ts's Operation (declared here: this section is imported by the table), with
 * its REST route. The handlers are method signatures so that an operation of a narrower input is one of
 * the table's.
 */
export interface Op<T extends 'query' | 'mutation', I extends z.ZodType, O, JI extends z.ZodType = I, JO = O> {
  type: T;
  input: I;
  rest: ServerRest;
  handler(c: Core, i: z.output<I>): Promise<O>;
  json: { input: JI; handler(c: Core, i: z.output<JI>): Promise<JO> };
}
const op =
  <T extends 'query' | 'mutation'>(type: T) =>
  <I extends z.ZodType, O>(spec: { input: I; rest: ServerRest; handler: Handler<I, O> }): Op<T, I, O> => ({
    type,
    ...spec,
    json: { input: spec.input, handler: spec.handler },
  });
const query = op('query');
const mutation = op('mutation');
const NoInput = zod.void();

/** REST lines: a method, a path, its summary and tag, and where the input comes from. */
type Line = Omit<ServerRest, 'method' | 'path' | 'summary' | 'tag'>;
const route =
  (method: ServerRest['method']) =>
  (path: string, summary: string, tag: string, line: Line = {}): ServerRest => ({ method, path, summary, tag, ...line });
const GET = route('GET');
const POST = route('POST');
const PUT = route('PUT');
const PATCH = route('PATCH');
const DELETE = route('DELETE');
const BODY = { body: 'input' } as const;
const FIELDS = { body: 'fields' } as const;
const QUERY = { query: true } as const;

/** An operation Parley does not offer: every call is a 501 with the reason. */
const unavailable = <T extends 'query' | 'mutation', I extends z.ZodType>(type: T, input: I, rest: ServerRest, why: string) =>
  op(type)({
    input,
    rest,
    handler: async (): Promise<{ detail: string }> => {
      throw new NotImplementedError(why);
    },
  });

const SUBSCRIPTION = `OpenAI subscription sign-in needs the internet (OpenAI's device login): ${NO_INTERNET}. Use an API key (settings or a profile).`;
const META_PROFILES = 'Meta-profiles route tasks between LLM profiles through the classify_and_switch_llm tool, which Parley does not have.';
const PLUGINS = 'Parley does not load plugins (bundles of skills, hooks and MCP servers for OpenHands agents); use skills and MCP servers directly.';
const SHARING = 'Parley has no shared (public) conversations: every conversation is reached with a key.';
const VSCODE = "Parley runs no VS Code server: reach a conversation's files with /api/file and /api/bash.";
const DESKTOP = 'Parley runs no desktop (VNC) in its sandboxes.';
const OAUTH = `MCP OAuth is not available in Parley (its sign-in goes to the MCP server's provider): use a bearer credential (auth.strategy bearer).`;
/** A secret's value is never answered by any route. */
const SECRET_VALUE = 'Secret values are never returned: give the secret to a conversation by name (it is in its shell environment), or set it again.';

/** The MCP test request in the MCP client's config shape: 422 for what Parley's client cannot send (headers, other auth). */
function mcpTestConfig(i: z.output<typeof S.McpTestInput>) {
  const s = i.server;
  const raw =
    s.type === 'stdio'
      ? { transport: 'stdio', command: s.command, args: s.args, env: s.env }
      : { transport: s.type === 'sse' ? 'sse' : 'http', url: s.url, headers: s.headers, auth: s.auth, timeout: s.timeout };
  const checked = checkMcpServer(raw);
  if ('issues' in checked)
    throw new RequestValidationError(
      checked.issues.map((x) => ({ type: 'value_error', loc: ['body', 'server', ...x.path], msg: `Value error, ${x.message}` })),
    );
  const key = i.name.replace(/[^A-Za-z0-9_-]/g, '_');
  return toMcpConfig({ [key]: checked.server });
}

const LLM = 'LLM';
const PROFILES = 'Profiles';
const AGENT_PROFILES = 'Agent Profiles';
const META = 'Meta Profiles';
const SETTINGS = 'Settings';
const MCP = 'MCP';
const FILES = 'Files';
const WORKSPACES = 'Workspaces';
const SKILLS = 'Skills';
const PLUGINS_TAG = 'Plugins';
const SUBSCRIPTION_STATUS = { vendor: 'openai', connected: false, account_email: null, expires_at: null };

export const serverOperations = {
  // ---- LLM catalog and subscription ----
  listLlmProviders: query({ input: NoInput, rest: GET('/api/llm/providers', 'List Providers', LLM), handler: async () => llmProviders() }),
  listLlmModels: query({ input: S.LlmModelsQuery, rest: GET('/api/llm/models', 'List Models', LLM, QUERY), handler: async (_c, i) => llmModels(i.provider) }),
  listVerifiedLlmModels: query({
    input: NoInput,
    rest: GET('/api/llm/models/verified', 'List Verified Models', LLM),
    handler: async () => verifiedLlmModels(),
  }),
  openaiSubscriptionModels: query({
    input: NoInput,
    rest: GET('/api/llm/subscription/openai/models', 'List OpenAI Subscription Models', LLM),
    handler: async () => ({ vendor: 'openai', models: [] as string[] }),
  }),
  openaiSubscriptionStatus: query({
    input: NoInput,
    rest: GET('/api/llm/subscription/openai/status', 'Get OpenAI Subscription Status', LLM),
    handler: async () => SUBSCRIPTION_STATUS,
  }),
  openaiDeviceStart: unavailable(
    'mutation',
    NoInput,
    POST('/api/llm/subscription/openai/device/start', 'Start OpenAI Subscription Device Login', LLM),
    SUBSCRIPTION,
  ),
  openaiDevicePoll: unavailable(
    'mutation',
    S.DevicePollRequest,
    POST('/api/llm/subscription/openai/device/poll', 'Poll OpenAI Subscription Device Login', LLM, BODY),
    SUBSCRIPTION,
  ),
  openaiLogout: mutation({
    input: NoInput,
    rest: POST('/api/llm/subscription/openai/logout', 'Logout OpenAI Subscription', LLM),
    handler: async () => SUBSCRIPTION_STATUS,
  }),

  // ---- LLM profiles ----
  listProfiles: query({ input: NoInput, rest: GET('/api/profiles', 'List Profiles', PROFILES), handler: (c) => c.server.llmProfiles.list() }),
  getProfile: query({
    input: S.ProfileNameInput,
    rest: GET('/api/profiles/{name}', 'Get Profile', PROFILES),
    handler: (c, i) => c.server.llmProfiles.get(i.name),
  }),
  saveProfile: mutation({
    input: S.SaveProfileInput,
    rest: POST('/api/profiles/{name}', 'Save Profile', PROFILES, { ...FIELDS, status: 201 }),
    handler: (c, i) => c.server.llmProfiles.save(i.name, i.llm, i.include_secrets),
  }),
  deleteProfile: mutation({
    input: S.ProfileNameInput,
    rest: DELETE('/api/profiles/{name}', 'Delete Profile', PROFILES),
    handler: (c, i) => c.server.llmProfiles.delete(i.name),
  }),
  renameProfile: mutation({
    input: S.RenameProfileInput,
    rest: POST('/api/profiles/{name}/rename', 'Rename Profile', PROFILES, FIELDS),
    handler: (c, i) => c.server.llmProfiles.rename(i.name, i.new_name),
  }),
  activateProfile: mutation({
    input: S.ProfileNameInput,
    rest: POST('/api/profiles/{name}/activate', 'Activate Profile', PROFILES),
    handler: (c, i) => c.server.llmProfiles.activate(i.name),
  }),
  validateProfile: mutation({
    input: S.ValidateProfileInput,
    rest: POST('/api/profiles/{name}/validate', 'Validate Profile', PROFILES, FIELDS),
    handler: (c, i) => c.server.llmProfiles.validate(i.llm),
  }),

  // ---- agent profiles (and the meta-profiles Parley has no tool for) ----
  listAgentProfiles: query({
    input: NoInput,
    rest: GET('/api/agent-profiles', 'List Agent Profiles', AGENT_PROFILES),
    handler: (c) => c.server.agentProfiles.list(),
  }),
  getAgentProfile: query({
    input: S.ProfileNameInput,
    rest: GET('/api/agent-profiles/{name}', 'Get Agent Profile', AGENT_PROFILES),
    handler: (c, i) => c.server.agentProfiles.get(i.name),
  }),
  saveAgentProfile: mutation({
    input: S.SaveAgentProfileInput,
    rest: POST('/api/agent-profiles/{name}', 'Save Agent Profile', AGENT_PROFILES, { body: { field: 'profile' }, status: 201 }),
    handler: (c, i) => c.server.agentProfiles.save(i.name, i.profile),
  }),
  deleteAgentProfile: mutation({
    input: S.ProfileNameInput,
    rest: DELETE('/api/agent-profiles/{name}', 'Delete Agent Profile', AGENT_PROFILES),
    handler: (c, i) => c.server.agentProfiles.delete(i.name),
  }),
  renameAgentProfile: mutation({
    input: S.RenameProfileInput,
    rest: POST('/api/agent-profiles/{name}/rename', 'Rename Agent Profile', AGENT_PROFILES, FIELDS),
    handler: (c, i) => c.server.agentProfiles.rename(i.name, i.new_name),
  }),
  materializeAgentProfile: mutation({
    input: S.ProfileNameInput,
    rest: POST('/api/agent-profiles/{name}/materialize', 'Materialize Agent Profile', AGENT_PROFILES),
    handler: (c, i) => c.server.agentProfiles.materialize(i.name),
  }),
  activateAgentProfile: mutation({
    input: S.AgentProfileIdInput,
    rest: POST('/api/agent-profiles/{profile_id}/activate', 'Activate Agent Profile', AGENT_PROFILES),
    handler: (c, i) => c.server.agentProfiles.activate(i.profile_id),
  }),
  listMetaProfiles: unavailable('query', NoInput, GET('/api/meta-profiles', 'List Meta Profiles', META), META_PROFILES),
  getMetaProfile: unavailable('query', S.ProfileNameInput, GET('/api/meta-profiles/{name}', 'Get Meta Profile', META), META_PROFILES),
  saveMetaProfile: unavailable(
    'mutation',
    S.ProfileNameInput.extend({ config: zod.unknown() }),
    POST('/api/meta-profiles/{name}', 'Save Meta Profile', META, { body: { field: 'config' } }),
    META_PROFILES,
  ),
  deleteMetaProfile: unavailable('mutation', S.ProfileNameInput, DELETE('/api/meta-profiles/{name}', 'Delete Meta Profile', META), META_PROFILES),
  activateMetaProfile: unavailable('mutation', S.ProfileNameInput, POST('/api/meta-profiles/{name}/activate', 'Activate Meta Profile', META), META_PROFILES),

  // ---- settings (GET /api/settings is getSettings, which answers both shapes) ----
  patchSettings: mutation({
    input: S.SettingsPatchInput,
    rest: PATCH('/api/settings', 'Update Settings', SETTINGS, BODY),
    handler: (c, i) => c.server.settings.patch(i),
  }),
  agentSettingsSchema: query({
    input: NoInput,
    rest: GET('/api/settings/agent-schema', 'Get Agent Settings Schema', SETTINGS),
    handler: async () => agentSettingsSchema(),
  }),
  conversationSettingsSchema: query({
    input: NoInput,
    rest: GET('/api/settings/conversation-schema', 'Get Conversation Settings Schema', SETTINGS),
    handler: async () => conversationSettingsSchema(),
  }),
  createMcpServer: mutation({
    input: S.McpServerBodyInput,
    rest: POST('/api/settings/mcp/{settings_key}', 'Create MCP Server', SETTINGS, { body: { field: 'server' }, status: 201 }),
    handler: (c, i) => c.server.settings.createMcpServer(i.settings_key, i.server),
  }),
  patchMcpServer: mutation({
    input: S.McpServerBodyInput,
    rest: PATCH('/api/settings/mcp/{settings_key}', 'Patch MCP Server', SETTINGS, { body: { field: 'server' } }),
    handler: (c, i) => c.server.settings.patchMcpServer(i.settings_key, i.server),
  }),
  deleteMcpServer: mutation({
    input: S.McpServerKeyInput,
    rest: DELETE('/api/settings/mcp/{settings_key}', 'Delete MCP Server', SETTINGS),
    handler: (c, i) => c.server.settings.deleteMcpServer(i.settings_key),
  }),
  listSettingsSecrets: query({ input: NoInput, rest: GET('/api/settings/secrets', 'List Secrets', SETTINGS), handler: (c) => c.settings.listSecrets() }),
  upsertSettingsSecret: mutation({
    input: S.SettingsSecretInput,
    rest: PUT('/api/settings/secrets', 'Create Secret', SETTINGS, BODY),
    handler: (c, i) => c.settings.upsertSecret(i.name, i.value, i.description),
  }),
  getSettingsSecretValue: query({
    input: S.SettingsSecretNameInput,
    rest: GET('/api/settings/secrets/{name}', 'Get Secret Value', SETTINGS),
    handler: async (): Promise<string> => {
      throw new ForbiddenError(SECRET_VALUE);
    },
  }),
  deleteSettingsSecret: mutation({
    input: S.SettingsSecretNameInput,
    rest: DELETE('/api/settings/secrets/{name}', 'Delete Secret', SETTINGS),
    handler: async (c, i) => {
      await c.settings.deleteSecret(i.name);
      return { deleted: true };
    },
  }),

  // ---- MCP ----
  testMcpServer: mutation({
    input: S.McpTestInput,
    rest: POST('/api/mcp/test', 'Test MCP Server', MCP, BODY),
    handler: (c, i) => c.server.testMcp({ name: i.name, config: mcpTestConfig(i), timeout: i.timeout, tool_call: i.tool_call ?? null }),
  }),
  /** OpenHands' own "could not start" answer: nothing is pending afterwards. */
  mcpOauthStart: mutation({
    input: S.McpTestInput,
    rest: POST('/api/mcp/oauth/start', 'Start MCP OAuth', MCP, BODY),
    handler: async () => ({ ok: false, job_id: null, authorization_url: null, error: OAUTH, error_kind: 'unknown' as const }),
  }),
  mcpOauthStatus: unavailable('query', S.McpOauthJobInput, GET('/api/mcp/oauth/status/{job_id}', 'Get MCP OAuth Status', MCP), OAUTH),
  mcpOauthCallback: unavailable('mutation', S.McpOauthCallbackInput, POST('/api/mcp/oauth/callback/{job_id}', 'Submit MCP OAuth Callback', MCP, FIELDS), OAUTH),

  // ---- file browser (a conversation's sandbox view) ----
  fileHome: query({ input: S.HomeQuery, rest: GET('/api/file/home', 'Get Home Directory', FILES, QUERY), handler: (c, i) => c.server.browser.home(i) }),
  searchSubdirs: query({
    input: S.SearchSubdirsQuery,
    rest: GET('/api/file/search_subdirs', 'Search Subdirs', FILES, QUERY),
    handler: (c, i) => c.server.browser.searchSubdirs(i),
  }),
  createDirectory: mutation({
    input: S.CreateDirectoryQuery,
    rest: POST('/api/file/create_directory', 'Create Directory', FILES, QUERY),
    handler: (c, i) => c.server.browser.createDirectory(i),
  }),
  /** REST answers the bytes raw; tRPC as base64. */
  archiveDirectory: (() => {
    const o = query({
      input: S.ArchiveQuery,
      rest: GET('/api/file/archive', 'Archive Directory', FILES, { query: { lists: ['exclude'] } }),
      handler: (c, i) => c.server.browser.archive(i),
    });
    return {
      ...o,
      json: {
        input: o.input,
        handler: async (c: Core, i: z.output<typeof S.ArchiveQuery>) => {
          const f: FileBytes = await o.handler(c, i);
          return { name: f.name, content_base64: Buffer.from(f.bytes).toString('base64') };
        },
      },
    };
  })(),

  // ---- saved workspaces ----
  listWorkspaces: query({ input: NoInput, rest: GET('/api/workspaces', 'List Workspaces', WORKSPACES), handler: (c) => c.server.workspaces.list() }),
  addWorkspaces: mutation({
    input: S.AddWorkspacesInput,
    rest: POST('/api/workspaces', 'Add Workspaces', WORKSPACES, BODY),
    handler: (c, i) => c.server.workspaces.add(i.workspaces),
  }),
  deleteWorkspace: mutation({
    input: S.WorkspacePathInput,
    rest: DELETE('/api/workspaces', 'Delete Workspace', WORKSPACES, QUERY),
    handler: (c, i) => c.server.workspaces.remove(i.path),
  }),
  addWorkspaceParents: mutation({
    input: S.AddWorkspaceParentsInput,
    rest: POST('/api/workspaces/parents', 'Add Workspace Parents', WORKSPACES, BODY),
    handler: (c, i) => c.server.workspaces.addParents(i.parents),
  }),
  deleteWorkspaceParent: mutation({
    input: S.WorkspacePathInput,
    rest: DELETE('/api/workspaces/parents', 'Delete Workspace Parent', WORKSPACES, QUERY),
    handler: (c, i) => c.server.workspaces.removeParent(i.path),
  }),

  // ---- skills, hooks, sub-agents ----
  getSkills: mutation({ input: S.SkillsInput, rest: POST('/api/skills', 'Get Skills', SKILLS, BODY), handler: (c, i) => c.server.extensions.skills(i) }),
  /** OpenHands' own answer when the public skills cannot be fetched. */
  syncSkills: mutation({
    input: NoInput,
    rest: POST('/api/skills/sync', 'Sync Skills', SKILLS),
    handler: async () => ({ status: 'error' as const, message: `Public skills come from OpenHands' extensions repository: ${NO_INTERNET}.` }),
  }),
  installSkill: mutation({
    input: S.InstallSkillInput,
    rest: POST('/api/skills/install', 'Install Skill', SKILLS, BODY),
    handler: (c, i) => c.server.extensions.install(i),
  }),
  listInstalledSkills: query({ input: NoInput, rest: GET('/api/skills/installed', 'List Installed Skills', SKILLS), handler: (c) => c.server.skills.list() }),
  getInstalledSkill: query({
    input: S.SkillNameInput,
    rest: GET('/api/skills/installed/{skill_name}', 'Get Installed Skill', SKILLS),
    handler: (c, i) => c.server.skills.get(i.skill_name),
  }),
  setSkillEnabled: mutation({
    input: S.SkillEnabledInput,
    rest: PATCH('/api/skills/installed/{skill_name}', 'Set Skill Enabled', SKILLS, FIELDS),
    handler: (c, i) => c.server.skills.setEnabled(i.skill_name, i.enabled),
  }),
  uninstallSkill: mutation({
    input: S.SkillNameInput,
    rest: DELETE('/api/skills/installed/{skill_name}', 'Uninstall Skill', SKILLS),
    handler: (c, i) => c.server.skills.uninstall(i.skill_name),
  }),
  refreshSkill: mutation({
    input: S.SkillNameInput,
    rest: POST('/api/skills/installed/{skill_name}/refresh', 'Refresh Skill', SKILLS),
    handler: (c, i) => c.server.extensions.refresh(i.skill_name),
  }),
  skillsMarketplace: unavailable(
    'query',
    NoInput,
    GET('/api/skills/marketplace', 'Get Marketplace Catalog', SKILLS),
    `The skills marketplace is OpenHands' extensions repository: ${NO_INTERNET}.`,
  ),
  getHooks: mutation({ input: S.HooksInput, rest: POST('/api/hooks', 'Get Hooks', 'Hooks', BODY), handler: (c, i) => c.server.extensions.hooks(i) }),
  getSubAgents: mutation({
    input: S.SubAgentsInput,
    rest: POST('/api/sub-agents', 'Get Sub Agents', 'Sub Agents', BODY),
    handler: (c, i) => c.server.extensions.subAgents(i),
  }),

  // ---- plugins: not part of Parley ----
  getPlugins: unavailable('mutation', S.PluginsInput, POST('/api/plugins', 'Get Plugins', PLUGINS_TAG, BODY), PLUGINS),
  installPlugin: unavailable('mutation', S.InstallPluginInput, POST('/api/plugins/install', 'Install Plugin', PLUGINS_TAG, BODY), PLUGINS),
  listInstalledPlugins: unavailable('query', NoInput, GET('/api/plugins/installed', 'List Installed Plugins', PLUGINS_TAG), PLUGINS),
  getInstalledPlugin: unavailable('query', S.PluginNameInput, GET('/api/plugins/installed/{plugin_name}', 'Get Installed Plugin', PLUGINS_TAG), PLUGINS),
  setPluginEnabled: unavailable(
    'mutation',
    S.PluginNameInput.extend({ enabled: zod.boolean() }),
    PATCH('/api/plugins/installed/{plugin_name}', 'Set Plugin Enabled', PLUGINS_TAG, FIELDS),
    PLUGINS,
  ),
  uninstallPlugin: unavailable('mutation', S.PluginNameInput, DELETE('/api/plugins/installed/{plugin_name}', 'Uninstall Plugin', PLUGINS_TAG), PLUGINS),
  refreshPlugin: unavailable('mutation', S.PluginNameInput, POST('/api/plugins/installed/{plugin_name}/refresh', 'Refresh Plugin', PLUGINS_TAG), PLUGINS),
  pluginsMarketplace: unavailable(
    'query',
    NoInput,
    GET('/api/plugins/marketplace', 'Get Plugins Marketplace Catalog', PLUGINS_TAG),
    `${PLUGINS} (The marketplace is on the internet, which Parley does not reach.)`,
  ),

  // ---- init, editors, sharing ----
  /** Parley starts ready (its keys come from the environment): there is no dormant state to initialise. */
  getInit: query({ input: NoInput, rest: GET('/api/init', 'Get Init Status', 'Init'), handler: async () => ({ state: 'ready' as const, error: null }) }),
  postInit: mutation({
    input: S.InitInput,
    rest: POST('/api/init', 'Initialize Server', 'Init', BODY),
    handler: async (): Promise<{ state: 'ready' }> => {
      throw new ConflictError('server already in state: ready (Parley takes its keys and settings from its environment at start)');
    },
  }),
  vscodeUrl: unavailable('query', S.VscodeUrlQuery, GET('/api/vscode/url', 'Get VSCode URL', 'VSCode', QUERY), VSCODE),
  vscodeStatus: query({
    input: NoInput,
    rest: GET('/api/vscode/status', 'Get VSCode Status', 'VSCode'),
    handler: async () => ({ running: false, enabled: false, message: VSCODE }),
  }),
  desktopUrl: unavailable('query', S.DesktopUrlQuery, GET('/api/desktop/url', 'Get Desktop URL', 'Desktop', QUERY), DESKTOP),
  sharedConversations: unavailable('query', zod.looseObject({}), GET('/api/shared-conversations', 'Get Shared Conversations', 'Shared', QUERY), SHARING),
  sharedEvents: unavailable('query', zod.looseObject({}), GET('/api/shared-events/search', 'Search Shared Events', 'Shared', QUERY), SHARING),
};
