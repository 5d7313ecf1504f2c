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
 * The shape of operations.ts's Operation (declared here: this section is imported by the table). The
 * handlers are method signatures so that an operation of a narrower input is one of the table's.
 */
export interface Op<T extends 'query' | 'mutation', I extends z.ZodType, O, JI extends z.ZodType = I, JO = O> {
  type: T;
  input: I;
  handler(c: Core, i: z.output<I>): Promise<O>;
  json: { input: JI; handler(c: Core, i: z.output<JI>): Promise<JO> };
}
const op =
  <T extends 'query' | 'mutation'>(type: T) =>
  <I extends z.ZodType, O>(input: I, handler: Handler<I, O>): Op<T, I, O> => ({ type, input, handler, json: { input, handler } });
const query = op('query');
const mutation = op('mutation');
const NoInput = zod.void();

/** An operation Parley does not offer: every call is a 501 with the reason. */
const unavailable = <T extends 'query' | 'mutation', I extends z.ZodType>(type: T, input: I, why: string) =>
  op(type)(input, async (): Promise<{ detail: string }> => {
    throw new NotImplementedError(why);
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

export const serverOperations = {
  // ---- LLM catalog and subscription ----
  listLlmProviders: query(NoInput, async () => llmProviders()),
  listLlmModels: query(S.LlmModelsQuery, async (_c, i) => llmModels(i.provider)),
  listVerifiedLlmModels: query(NoInput, async () => verifiedLlmModels()),
  openaiSubscriptionModels: query(NoInput, async () => ({ vendor: 'openai', models: [] as string[] })),
  openaiSubscriptionStatus: query(NoInput, async () => ({ vendor: 'openai', connected: false, account_email: null, expires_at: null })),
  openaiDeviceStart: unavailable('mutation', NoInput, SUBSCRIPTION),
  openaiDevicePoll: unavailable('mutation', S.DevicePollRequest, SUBSCRIPTION),
  openaiLogout: mutation(NoInput, async () => ({ vendor: 'openai', connected: false, account_email: null, expires_at: null })),

  // ---- LLM profiles ----
  listProfiles: query(NoInput, (c) => c.server.llmProfiles.list()),
  getProfile: query(S.ProfileNameInput, (c, i) => c.server.llmProfiles.get(i.name)),
  saveProfile: mutation(S.SaveProfileInput, (c, i) => c.server.llmProfiles.save(i.name, i.llm, i.include_secrets)),
  deleteProfile: mutation(S.ProfileNameInput, (c, i) => c.server.llmProfiles.delete(i.name)),
  renameProfile: mutation(S.RenameProfileInput, (c, i) => c.server.llmProfiles.rename(i.name, i.new_name)),
  activateProfile: mutation(S.ProfileNameInput, (c, i) => c.server.llmProfiles.activate(i.name)),
  validateProfile: mutation(S.ValidateProfileInput, (c, i) => c.server.llmProfiles.validate(i.llm)),

  // ---- agent profiles (and the meta-profiles Parley has no tool for) ----
  listAgentProfiles: query(NoInput, (c) => c.server.agentProfiles.list()),
  getAgentProfile: query(S.ProfileNameInput, (c, i) => c.server.agentProfiles.get(i.name)),
  saveAgentProfile: mutation(S.SaveAgentProfileInput, (c, i) => c.server.agentProfiles.save(i.name, i.profile)),
  deleteAgentProfile: mutation(S.ProfileNameInput, (c, i) => c.server.agentProfiles.delete(i.name)),
  renameAgentProfile: mutation(S.RenameProfileInput, (c, i) => c.server.agentProfiles.rename(i.name, i.new_name)),
  materializeAgentProfile: mutation(S.ProfileNameInput, (c, i) => c.server.agentProfiles.materialize(i.name)),
  activateAgentProfile: mutation(S.AgentProfileIdInput, (c, i) => c.server.agentProfiles.activate(i.profile_id)),
  listMetaProfiles: unavailable('query', NoInput, META_PROFILES),
  getMetaProfile: unavailable('query', S.ProfileNameInput, META_PROFILES),
  saveMetaProfile: unavailable('mutation', S.ProfileNameInput.extend({ config: zod.unknown() }), META_PROFILES),
  deleteMetaProfile: unavailable('mutation', S.ProfileNameInput, META_PROFILES),
  activateMetaProfile: unavailable('mutation', S.ProfileNameInput, META_PROFILES),

  // ---- settings (GET /api/settings is getSettings, which answers both shapes) ----
  patchSettings: mutation(S.SettingsPatchInput, (c, i) => c.server.settings.patch(i)),
  agentSettingsSchema: query(NoInput, async () => agentSettingsSchema()),
  conversationSettingsSchema: query(NoInput, async () => conversationSettingsSchema()),
  createMcpServer: mutation(S.McpServerBodyInput, (c, i) => c.server.settings.createMcpServer(i.settings_key, i.server)),
  patchMcpServer: mutation(S.McpServerBodyInput, (c, i) => c.server.settings.patchMcpServer(i.settings_key, i.server)),
  deleteMcpServer: mutation(S.McpServerKeyInput, (c, i) => c.server.settings.deleteMcpServer(i.settings_key)),
  listSettingsSecrets: query(NoInput, (c) => c.settings.listSecrets()),
  upsertSettingsSecret: mutation(S.SettingsSecretInput, (c, i) => c.settings.upsertSecret(i.name, i.value, i.description)),
  getSettingsSecretValue: query(S.SettingsSecretNameInput, async (): Promise<string> => {
    throw new ForbiddenError(SECRET_VALUE);
  }),
  deleteSettingsSecret: mutation(S.SettingsSecretNameInput, async (c, i) => {
    await c.settings.deleteSecret(i.name);
    return { deleted: true };
  }),

  // ---- MCP ----
  testMcpServer: mutation(S.McpTestInput, (c, i) =>
    c.server.testMcp({ name: i.name, config: mcpTestConfig(i), timeout: i.timeout, tool_call: i.tool_call ?? null }),
  ),
  /** OpenHands' own "could not start" answer: nothing is pending afterwards. */
  mcpOauthStart: mutation(S.McpTestInput, async () => ({ ok: false, job_id: null, authorization_url: null, error: OAUTH, error_kind: 'unknown' as const })),
  mcpOauthStatus: unavailable('query', S.McpOauthJobInput, OAUTH),
  mcpOauthCallback: unavailable('mutation', S.McpOauthCallbackInput, OAUTH),

  // ---- file browser (a conversation's sandbox view) ----
  fileHome: query(S.HomeQuery, (c, i) => c.server.browser.home(i)),
  searchSubdirs: query(S.SearchSubdirsQuery, (c, i) => c.server.browser.searchSubdirs(i)),
  createDirectory: mutation(S.CreateDirectoryQuery, (c, i) => c.server.browser.createDirectory(i)),
  /** REST answers the bytes raw; tRPC as base64. */
  archiveDirectory: (() => {
    const o = query(S.ArchiveQuery, (c, i) => c.server.browser.archive(i));
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
  listWorkspaces: query(NoInput, (c) => c.server.workspaces.list()),
  addWorkspaces: mutation(S.AddWorkspacesInput, (c, i) => c.server.workspaces.add(i.workspaces)),
  deleteWorkspace: mutation(S.WorkspacePathInput, (c, i) => c.server.workspaces.remove(i.path)),
  addWorkspaceParents: mutation(S.AddWorkspaceParentsInput, (c, i) => c.server.workspaces.addParents(i.parents)),
  deleteWorkspaceParent: mutation(S.WorkspacePathInput, (c, i) => c.server.workspaces.removeParent(i.path)),

  // ---- skills, hooks, sub-agents ----
  getSkills: mutation(S.SkillsInput, (c, i) => c.server.extensions.skills(i)),
  /** OpenHands' own answer when the public skills cannot be fetched. */
  syncSkills: mutation(NoInput, async () => ({
    status: 'error' as const,
    message: `Public skills come from OpenHands' extensions repository: ${NO_INTERNET}.`,
  })),
  installSkill: mutation(S.InstallSkillInput, (c, i) => c.server.extensions.install(i)),
  listInstalledSkills: query(NoInput, (c) => c.server.skills.list()),
  getInstalledSkill: query(S.SkillNameInput, (c, i) => c.server.skills.get(i.skill_name)),
  setSkillEnabled: mutation(S.SkillEnabledInput, (c, i) => c.server.skills.setEnabled(i.skill_name, i.enabled)),
  uninstallSkill: mutation(S.SkillNameInput, (c, i) => c.server.skills.uninstall(i.skill_name)),
  refreshSkill: mutation(S.SkillNameInput, (c, i) => c.server.extensions.refresh(i.skill_name)),
  skillsMarketplace: unavailable('query', NoInput, `The skills marketplace is OpenHands' extensions repository: ${NO_INTERNET}.`),
  getHooks: mutation(S.HooksInput, (c, i) => c.server.extensions.hooks(i)),
  getSubAgents: mutation(S.SubAgentsInput, (c, i) => c.server.extensions.subAgents(i)),

  // ---- plugins: not part of Parley ----
  getPlugins: unavailable('mutation', S.PluginsInput, PLUGINS),
  installPlugin: unavailable('mutation', S.InstallPluginInput, PLUGINS),
  listInstalledPlugins: unavailable('query', NoInput, PLUGINS),
  getInstalledPlugin: unavailable('query', S.PluginNameInput, PLUGINS),
  setPluginEnabled: unavailable('mutation', S.PluginNameInput.extend({ enabled: zod.boolean() }), PLUGINS),
  uninstallPlugin: unavailable('mutation', S.PluginNameInput, PLUGINS),
  refreshPlugin: unavailable('mutation', S.PluginNameInput, PLUGINS),
  pluginsMarketplace: unavailable('query', NoInput, `${PLUGINS} (The marketplace is on the internet, which Parley does not reach.)`),

  // ---- init, editors, sharing ----
  /** Parley starts ready (its keys come from the environment): there is no dormant state to initialise. */
  getInit: query(NoInput, async () => ({ state: 'ready' as const, error: null })),
  postInit: mutation(S.InitInput, async (): Promise<{ state: 'ready' }> => {
    throw new ConflictError('server already in state: ready (Parley takes its keys and settings from its environment at start)');
  }),
  vscodeUrl: unavailable('query', S.VscodeUrlQuery, VSCODE),
  vscodeStatus: query(NoInput, async () => ({ running: false, enabled: false, message: VSCODE })),
  desktopUrl: unavailable('query', S.DesktopUrlQuery, DESKTOP),
  sharedConversations: unavailable('query', zod.looseObject({}), SHARING),
  sharedEvents: unavailable('query', zod.looseObject({}), SHARING),
};
