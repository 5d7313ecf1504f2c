/**
 * The REST lines of OpenHands agent-server's server-wide routes (operations in
 * src/api/operations-server.ts), in the table form of routes.ts. `:name` parameters come from the
 * path; GETs and the file routes take the query string; the others a JSON body.
 */
import type { OperationName } from '../src/api/operations.js';
import { asLoc, bodyLoc, queryLoc, type Loc, type Route, type RouteRequest } from './route.js';

const objectBody = (r: RouteRequest) => (r.body && typeof r.body === 'object' && !Array.isArray(r.body) ? (r.body as Record<string, unknown>) : {});
/** Path parameters win over body fields of the same name. */
const params =
  (names: string[]) =>
  (p: PropertyKey[]): Loc =>
    names.includes(String(p[0])) ? ['path', ...asLoc(p)] : ['body', ...asLoc(p)];
const pathOrQuery =
  (names: string[]) =>
  (p: PropertyKey[]): Loc =>
    names.includes(String(p[0])) ? ['path', ...asLoc(p)] : ['query', ...asLoc(p)];

type Method = Route['method'];
interface Line {
  tag: string;
  summary: string;
  status?: number;
}

/** No input (a GET of a list, a POST without body). */
const bare = (method: Method, path: string, procedure: OperationName, l: Line): Route => ({
  method,
  path,
  procedure,
  input: () => undefined,
  loc: queryLoc,
  ...l,
});
/** The query string is the input. */
const withQuery = (method: Method, path: string, procedure: OperationName, l: Line): Route => ({
  method,
  path,
  procedure,
  input: (r) => r.query,
  loc: queryLoc,
  ...l,
});
/** The JSON body is the input. */
const withBody = (method: Method, path: string, procedure: OperationName, l: Line): Route => ({
  method,
  path,
  procedure,
  body: true,
  input: (r) => r.body,
  loc: bodyLoc,
  ...l,
});
/** Path parameters, and the body's fields beside them (a body that is not an object gives none). */
const withParams = (method: Method, path: string, procedure: OperationName, l: Line & { body?: boolean }): Route => {
  const names = [...path.matchAll(/:([a-z_]+)/g)].map((m) => m[1]!);
  return {
    method,
    path,
    procedure,
    body: l.body,
    input: (r) => ({ ...(l.body ? objectBody(r) : r.query), ...r.params }),
    loc: l.body ? params(names) : pathOrQuery(names),
    tag: l.tag,
    summary: l.summary,
    status: l.status,
  };
};
/** A path parameter and the whole body as one field (`server`, `profile`). */
const paramAndBody = (method: Method, path: string, procedure: OperationName, field: string, l: Line): Route => {
  const name = /:([a-z_]+)/.exec(path)![1]!;
  return {
    method,
    path,
    procedure,
    body: true,
    input: (r) => ({ [name]: r.params[name], [field]: r.body }),
    loc: (p) => (p[0] === name ? ['path', name] : ['body', ...asLoc(p.slice(1))]),
    ...l,
  };
};

const LLM = { tag: 'LLM' };
const PROFILES = { tag: 'Profiles' };
const AGENT_PROFILES = { tag: 'Agent Profiles' };
const META = { tag: 'Meta Profiles' };
const SETTINGS = { tag: 'Settings' };
const MCP = { tag: 'MCP' };
const FILES = { tag: 'Files' };
const WORKSPACES = { tag: 'Workspaces' };
const SKILLS = { tag: 'Skills' };
const PLUGINS = { tag: 'Plugins' };

export const SERVER_ROUTES: Route[] = [
  bare('GET', '/api/llm/providers', 'listLlmProviders', { ...LLM, summary: 'List Providers' }),
  withQuery('GET', '/api/llm/models', 'listLlmModels', { ...LLM, summary: 'List Models' }),
  bare('GET', '/api/llm/models/verified', 'listVerifiedLlmModels', { ...LLM, summary: 'List Verified Models' }),
  bare('GET', '/api/llm/subscription/openai/models', 'openaiSubscriptionModels', { ...LLM, summary: 'List OpenAI Subscription Models' }),
  bare('GET', '/api/llm/subscription/openai/status', 'openaiSubscriptionStatus', { ...LLM, summary: 'Get OpenAI Subscription Status' }),
  bare('POST', '/api/llm/subscription/openai/device/start', 'openaiDeviceStart', { ...LLM, summary: 'Start OpenAI Subscription Device Login' }),
  withBody('POST', '/api/llm/subscription/openai/device/poll', 'openaiDevicePoll', { ...LLM, summary: 'Poll OpenAI Subscription Device Login' }),
  bare('POST', '/api/llm/subscription/openai/logout', 'openaiLogout', { ...LLM, summary: 'Logout OpenAI Subscription' }),

  bare('GET', '/api/profiles', 'listProfiles', { ...PROFILES, summary: 'List Profiles' }),
  withParams('POST', '/api/profiles/:name/rename', 'renameProfile', { ...PROFILES, summary: 'Rename Profile', body: true }),
  withParams('POST', '/api/profiles/:name/activate', 'activateProfile', { ...PROFILES, summary: 'Activate Profile' }),
  withParams('POST', '/api/profiles/:name/validate', 'validateProfile', { ...PROFILES, summary: 'Validate Profile', body: true }),
  withParams('GET', '/api/profiles/:name', 'getProfile', { ...PROFILES, summary: 'Get Profile' }),
  withParams('POST', '/api/profiles/:name', 'saveProfile', { ...PROFILES, summary: 'Save Profile', body: true, status: 201 }),
  withParams('DELETE', '/api/profiles/:name', 'deleteProfile', { ...PROFILES, summary: 'Delete Profile' }),

  bare('GET', '/api/agent-profiles', 'listAgentProfiles', { ...AGENT_PROFILES, summary: 'List Agent Profiles' }),
  withParams('POST', '/api/agent-profiles/:name/rename', 'renameAgentProfile', { ...AGENT_PROFILES, summary: 'Rename Agent Profile', body: true }),
  withParams('POST', '/api/agent-profiles/:name/materialize', 'materializeAgentProfile', { ...AGENT_PROFILES, summary: 'Materialize Agent Profile' }),
  withParams('POST', '/api/agent-profiles/:profile_id/activate', 'activateAgentProfile', { ...AGENT_PROFILES, summary: 'Activate Agent Profile' }),
  withParams('GET', '/api/agent-profiles/:name', 'getAgentProfile', { ...AGENT_PROFILES, summary: 'Get Agent Profile' }),
  paramAndBody('POST', '/api/agent-profiles/:name', 'saveAgentProfile', 'profile', { ...AGENT_PROFILES, summary: 'Save Agent Profile', status: 201 }),
  withParams('DELETE', '/api/agent-profiles/:name', 'deleteAgentProfile', { ...AGENT_PROFILES, summary: 'Delete Agent Profile' }),

  bare('GET', '/api/meta-profiles', 'listMetaProfiles', { ...META, summary: 'List Meta Profiles' }),
  withParams('POST', '/api/meta-profiles/:name/activate', 'activateMetaProfile', { ...META, summary: 'Activate Meta Profile' }),
  withParams('GET', '/api/meta-profiles/:name', 'getMetaProfile', { ...META, summary: 'Get Meta Profile' }),
  paramAndBody('POST', '/api/meta-profiles/:name', 'saveMetaProfile', 'config', { ...META, summary: 'Save Meta Profile' }),
  withParams('DELETE', '/api/meta-profiles/:name', 'deleteMetaProfile', { ...META, summary: 'Delete Meta Profile' }),

  withBody('PATCH', '/api/settings', 'patchSettings', { ...SETTINGS, summary: 'Update Settings' }),
  bare('GET', '/api/settings/agent-schema', 'agentSettingsSchema', { ...SETTINGS, summary: 'Get Agent Settings Schema' }),
  bare('GET', '/api/settings/conversation-schema', 'conversationSettingsSchema', { ...SETTINGS, summary: 'Get Conversation Settings Schema' }),
  paramAndBody('POST', '/api/settings/mcp/:settings_key', 'createMcpServer', 'server', { ...SETTINGS, summary: 'Create MCP Server', status: 201 }),
  paramAndBody('PATCH', '/api/settings/mcp/:settings_key', 'patchMcpServer', 'server', { ...SETTINGS, summary: 'Patch MCP Server' }),
  withParams('DELETE', '/api/settings/mcp/:settings_key', 'deleteMcpServer', { ...SETTINGS, summary: 'Delete MCP Server' }),
  bare('GET', '/api/settings/secrets', 'listSettingsSecrets', { ...SETTINGS, summary: 'List Secrets' }),
  withBody('PUT', '/api/settings/secrets', 'upsertSettingsSecret', { ...SETTINGS, summary: 'Create Secret' }),
  withParams('GET', '/api/settings/secrets/:name', 'getSettingsSecretValue', { ...SETTINGS, summary: 'Get Secret Value' }),
  withParams('DELETE', '/api/settings/secrets/:name', 'deleteSettingsSecret', { ...SETTINGS, summary: 'Delete Secret' }),

  withBody('POST', '/api/mcp/test', 'testMcpServer', { ...MCP, summary: 'Test MCP Server' }),
  withBody('POST', '/api/mcp/oauth/start', 'mcpOauthStart', { ...MCP, summary: 'Start MCP OAuth' }),
  withParams('GET', '/api/mcp/oauth/status/:job_id', 'mcpOauthStatus', { ...MCP, summary: 'Get MCP OAuth Status' }),
  withParams('POST', '/api/mcp/oauth/callback/:job_id', 'mcpOauthCallback', { ...MCP, summary: 'Submit MCP OAuth Callback', body: true }),

  withQuery('GET', '/api/file/home', 'fileHome', { ...FILES, summary: 'Get Home Directory' }),
  withQuery('GET', '/api/file/search_subdirs', 'searchSubdirs', { ...FILES, summary: 'Search Subdirs' }),
  withQuery('POST', '/api/file/create_directory', 'createDirectory', { ...FILES, summary: 'Create Directory' }),
  {
    method: 'GET',
    path: '/api/file/archive',
    procedure: 'archiveDirectory',
    // `exclude` may be given several times
    input: (r) => {
      const exclude = new URLSearchParams(r.rawQuery ?? '').getAll('exclude');
      return exclude.length ? { ...r.query, exclude } : r.query;
    },
    loc: queryLoc,
    ...FILES,
    summary: 'Archive Directory',
  },

  bare('GET', '/api/workspaces', 'listWorkspaces', { ...WORKSPACES, summary: 'List Workspaces' }),
  withBody('POST', '/api/workspaces', 'addWorkspaces', { ...WORKSPACES, summary: 'Add Workspaces' }),
  withQuery('DELETE', '/api/workspaces', 'deleteWorkspace', { ...WORKSPACES, summary: 'Delete Workspace' }),
  withBody('POST', '/api/workspaces/parents', 'addWorkspaceParents', { ...WORKSPACES, summary: 'Add Workspace Parents' }),
  withQuery('DELETE', '/api/workspaces/parents', 'deleteWorkspaceParent', { ...WORKSPACES, summary: 'Delete Workspace Parent' }),

  withBody('POST', '/api/skills', 'getSkills', { ...SKILLS, summary: 'Get Skills' }),
  bare('POST', '/api/skills/sync', 'syncSkills', { ...SKILLS, summary: 'Sync Skills' }),
  withBody('POST', '/api/skills/install', 'installSkill', { ...SKILLS, summary: 'Install Skill' }),
  bare('GET', '/api/skills/installed', 'listInstalledSkills', { ...SKILLS, summary: 'List Installed Skills' }),
  withParams('POST', '/api/skills/installed/:skill_name/refresh', 'refreshSkill', { ...SKILLS, summary: 'Refresh Skill' }),
  withParams('GET', '/api/skills/installed/:skill_name', 'getInstalledSkill', { ...SKILLS, summary: 'Get Installed Skill' }),
  withParams('PATCH', '/api/skills/installed/:skill_name', 'setSkillEnabled', { ...SKILLS, summary: 'Set Skill Enabled', body: true }),
  withParams('DELETE', '/api/skills/installed/:skill_name', 'uninstallSkill', { ...SKILLS, summary: 'Uninstall Skill' }),
  bare('GET', '/api/skills/marketplace', 'skillsMarketplace', { ...SKILLS, summary: 'Get Marketplace Catalog' }),
  withBody('POST', '/api/hooks', 'getHooks', { tag: 'Hooks', summary: 'Get Hooks' }),
  withBody('POST', '/api/sub-agents', 'getSubAgents', { tag: 'Sub Agents', summary: 'Get Sub Agents' }),

  withBody('POST', '/api/plugins', 'getPlugins', { ...PLUGINS, summary: 'Get Plugins' }),
  withBody('POST', '/api/plugins/install', 'installPlugin', { ...PLUGINS, summary: 'Install Plugin' }),
  bare('GET', '/api/plugins/installed', 'listInstalledPlugins', { ...PLUGINS, summary: 'List Installed Plugins' }),
  withParams('POST', '/api/plugins/installed/:plugin_name/refresh', 'refreshPlugin', { ...PLUGINS, summary: 'Refresh Plugin' }),
  withParams('GET', '/api/plugins/installed/:plugin_name', 'getInstalledPlugin', { ...PLUGINS, summary: 'Get Installed Plugin' }),
  withParams('PATCH', '/api/plugins/installed/:plugin_name', 'setPluginEnabled', { ...PLUGINS, summary: 'Set Plugin Enabled', body: true }),
  withParams('DELETE', '/api/plugins/installed/:plugin_name', 'uninstallPlugin', { ...PLUGINS, summary: 'Uninstall Plugin' }),
  bare('GET', '/api/plugins/marketplace', 'pluginsMarketplace', { ...PLUGINS, summary: 'Get Plugins Marketplace Catalog' }),

  bare('GET', '/api/init', 'getInit', { tag: 'Init', summary: 'Get Init Status' }),
  withBody('POST', '/api/init', 'postInit', { tag: 'Init', summary: 'Initialize Server' }),
  withQuery('GET', '/api/vscode/url', 'vscodeUrl', { tag: 'VSCode', summary: 'Get VSCode URL' }),
  bare('GET', '/api/vscode/status', 'vscodeStatus', { tag: 'VSCode', summary: 'Get VSCode Status' }),
  withQuery('GET', '/api/desktop/url', 'desktopUrl', { tag: 'Desktop', summary: 'Get Desktop URL' }),
  withQuery('GET', '/api/shared-conversations', 'sharedConversations', { tag: 'Shared', summary: 'Get Shared Conversations' }),
  withQuery('GET', '/api/shared-events/search', 'sharedEvents', { tag: 'Shared', summary: 'Search Shared Events' }),
];
