/**
 * Wire schemas of OpenHands' agent-server server-wide routes (what `@openhands/typescript-client`
 * sends): the LLM catalog, LLM and agent profiles, settings and their MCP servers and secrets, the MCP
 * test, the file browser, saved workspaces, skills, hooks, sub-agents and `/api/init`. Where the
 * client's own type (the agent server's OpenAPI, `dist/generated/agent-server-schema.d.ts`) has fields
 * Parley does not use, they are accepted and dropped where the client always sends them, and a 422
 * where giving them would expect something Parley does not do.
 */
import * as z from 'zod';
import { builtOnFirstUse } from './lazy-schemas.js';
import { PROFILE_NAME } from '../settings/llm-profiles.js';
import { McpServerKey } from '../settings/mcp-servers.js';
import { SKILL_NAME } from '../settings/installed-skills.js';
import { ApiSchemas } from './schemas.js';

// (long: the whole module's schemas, in the order they build on each other)
function build() {
  const { ConversationId, SecretValue } = ApiSchemas;
  const Flag = z.preprocess((v) => (v === 'true' ? true : v === 'false' ? false : v), z.boolean());

  // ---- LLM catalog and profiles --------------------------------------------------------------------

  const LlmModelsQuery = z.strictObject({ provider: z.string().max(100).nullish() });
  const DevicePollRequest = z.strictObject({ device_code: z.string().min(1).max(1000) });

  const ProfileName = z.string().regex(PROFILE_NAME, { error: 'a profile name matches ^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$' });
  const ProfileNameInput = z.strictObject({ name: ProfileName });

  /** OpenHands' LLM: Parley keeps model, base_url and the key; its other options are accepted and not kept. */
  const Llm = z
    .looseObject({
      model: z.string().min(1).max(300).nullish(),
      api_key: z.string().max(8192).nullish(),
      base_url: z
        .string()
        .regex(/^https?:\/\/\S+$/, { error: 'base_url must be an http(s) URL' })
        .nullish(),
    })
    .meta({ id: 'ProfileLLM' });
  const SaveProfileInput = z.strictObject({ name: ProfileName, llm: Llm, include_secrets: z.boolean().default(true) });
  const ValidateProfileInput = z.strictObject({ name: ProfileName, llm: Llm });
  const RenameProfileInput = z.strictObject({ name: ProfileName, new_name: ProfileName });

  const AgentProfileIdInput = z.strictObject({ profile_id: z.string().min(1).max(128) });
  /** An agent profile: a JSON document (its `llm_profile_ref`, `mcp_server_refs`, …), at most 64 KiB. */
  const SaveAgentProfileInput = z.strictObject({
    name: ProfileName,
    profile: z.record(z.string(), z.unknown()).refine((p) => JSON.stringify(p).length <= 65536, { message: 'an agent profile holds at most 64 KiB of JSON' }),
  });

  // ---- settings --------------------------------------------------------------------------------

  const Diff = z.record(z.string(), z.unknown()).nullish();
  const SettingsPatchInput = z
    .strictObject({
      agent_settings_diff: Diff,
      conversation_settings_diff: Diff,
      misc_settings_diff: Diff,
      active_profile: ProfileName.nullish(),
      active_agent_profile_id: z.string().max(128).nullish(),
    })
    .meta({ id: 'SettingsUpdateRequest' });

  const McpServerKeyInput = z.strictObject({ settings_key: McpServerKey });
  const McpServerBodyInput = z.strictObject({ settings_key: McpServerKey, server: z.record(z.string(), z.unknown()) });

  /** OpenHands' secret names: a letter, then letters, digits and underscores, 64 at most. */
  const SettingsSecretName = z.string().regex(/^[A-Za-z][A-Za-z0-9_]{0,63}$/, {
    error: 'a secret name starts with a letter, has only letters, digits and underscores, and is 1-64 characters long',
  });
  /** The value as Parley's own secrets take it (at least 8 characters: a shorter one could not be masked in output). */
  const SettingsSecretInput = z.strictObject({ name: SettingsSecretName, value: SecretValue.max(65536), description: z.string().max(1000).nullish() });
  const SettingsSecretNameInput = z.strictObject({ name: SettingsSecretName });

  // ---- MCP test ----------------------------------------------------------------------------------

  const StdioSpec = z.strictObject({
    type: z.literal('stdio'),
    command: z.string().min(1).max(4096),
    args: z.array(z.string().max(8192)).max(256).default([]),
    env: z.record(z.string(), z.string()).default({}),
    cwd: z.string().max(4096).nullish(),
  });
  const RemoteSpec = z.strictObject({
    type: z.enum(['http', 'shttp', 'streamable-http', 'sse']),
    url: z.string().min(1).max(4096),
    headers: z.record(z.string(), z.string()).default({}),
    auth: z.unknown().optional(),
    timeout: z.number().positive().max(3600).nullish(),
    sse_read_timeout: z.number().positive().nullish(),
    keep_alive: z.boolean().nullish(),
  });
  /** A server without `type` is typed by its `transport`, else stdio when it has a command (OpenHands' own normalisation). */
  const TestServer = z.preprocess(
    (v) => {
      if (!v || typeof v !== 'object' || Array.isArray(v) || 'type' in v) return v;
      const { transport, ...rest } = v as Record<string, unknown>;
      return { ...rest, type: transport ?? ('command' in rest ? 'stdio' : 'http') };
    },
    z.discriminatedUnion('type', [StdioSpec, RemoteSpec]),
  );
  const McpTestInput = z
    .strictObject({
      name: z.string().trim().min(1).max(128).default('test-server'),
      server: TestServer,
      timeout: z.number().positive().max(120).default(15),
      tool_call: z.strictObject({ name: z.string().min(1).max(256), arguments: z.record(z.string(), z.unknown()).default({}) }).nullish(),
    })
    .meta({ id: 'MCPTestRequest' });
  const McpOauthJobInput = z.strictObject({ job_id: z.string().min(1).max(200) });
  const McpOauthCallbackInput = z.strictObject({ job_id: z.string().min(1).max(200), callback_url: z.string().min(1).max(8192) });

  // ---- file browser ------------------------------------------------------------------------------

  const Path = z.string().min(1).max(4096);
  const HomeQuery = z.strictObject({ include_hidden: Flag.default(false), conversation_id: ConversationId.nullish() });
  const SearchSubdirsQuery = z.strictObject({
    path: Path,
    page_id: z.string().max(1000).nullish(),
    limit: z.coerce.number().int().min(1).max(100).default(100),
    include_hidden: Flag.default(false),
    conversation_id: ConversationId.nullish(),
  });
  const CreateDirectoryQuery = z.strictObject({ path: Path, conversation_id: ConversationId.nullish() });
  const ArchiveQuery = z.strictObject({
    path: Path,
    format: z.enum(['git-delta', 'tar.gz']).default('git-delta'),
    base_ref: z
      .string()
      .regex(/^[A-Za-z0-9_][A-Za-z0-9._/~^@{}-]{0,199}$/, { error: 'base_ref must be a git revision' })
      .nullish(),
    use_default_excludes: Flag.default(true),
    exclude: z.array(z.string().min(1).max(500)).max(100).nullish(),
    conversation_id: ConversationId.nullish(),
  });

  // ---- saved workspaces --------------------------------------------------------------------------

  const WorkspaceItem = z.strictObject({ id: z.string().max(200), name: z.string().max(500), path: Path, parentPath: Path.nullish() });
  const WorkspaceParentItem = z.strictObject({ id: z.string().max(200), name: z.string().max(500), path: Path });
  const AddWorkspacesInput = z.strictObject({ workspaces: z.array(WorkspaceItem).max(1000) });
  const AddWorkspaceParentsInput = z.strictObject({ parents: z.array(WorkspaceParentItem).max(1000) });
  const WorkspacePathInput = z.strictObject({ path: Path });

  // ---- skills, hooks, sub-agents, plugins ---------------------------------------------------------

  const ProjectDir = Path.nullish();
  /** OpenHands' SkillsRequest: the sources Parley cannot reach (public, org, marketplaces, sandbox URLs) are accepted and answer none. */
  const SkillsInput = z.strictObject({
    load_public: z.boolean().default(true),
    load_user: z.boolean().default(true),
    load_project: z.boolean().default(true),
    load_org: z.boolean().default(true),
    marketplace_path: z.string().max(1000).nullish(),
    registered_marketplaces: z.array(z.unknown()).max(100).default([]),
    project_dir: ProjectDir,
    org_configs: z.array(z.unknown()).max(100).nullish(),
    org_config: z.unknown().optional(),
    sandbox_config: z.unknown().optional(),
    conversation_id: ConversationId.nullish(),
  });
  const SkillName = z.string().max(255).regex(SKILL_NAME, { error: 'a skill name is lowercase letters and digits, words joined by hyphens' });
  const SkillNameInput = z.strictObject({ skill_name: SkillName });
  const SkillEnabledInput = z.strictObject({ skill_name: SkillName, enabled: z.boolean() });
  const InstallSkillInput = z.strictObject({
    source: z.string().min(1).max(4096),
    ref: z.string().max(200).nullish(),
    repo_path: z.string().max(4096).nullish(),
    force: z.boolean().default(false),
    conversation_id: ConversationId.nullish(),
  });
  const HooksInput = z.strictObject({ project_dir: ProjectDir, conversation_id: ConversationId.nullish() });
  const SubAgentsInput = z.strictObject({
    load_user: z.boolean().default(true),
    load_project: z.boolean().default(true),
    load_builtin: z.boolean().default(true),
    project_dir: ProjectDir,
    conversation_id: ConversationId.nullish(),
  });
  const PluginsInput = z.looseObject({});
  const PluginNameInput = z.strictObject({ plugin_name: z.string().min(1).max(255) });
  const InstallPluginInput = z.looseObject({ source: z.string().min(1).max(4096) });

  // ---- init, editors -----------------------------------------------------------------------------

  const InitInput = z.looseObject({});
  const VscodeUrlQuery = z.strictObject({ base_url: z.string().max(4096).nullish(), workspace_dir: z.string().max(4096).nullish() });
  const DesktopUrlQuery = z.strictObject({ base_url: z.string().max(4096).nullish() });
  return {
    LlmModelsQuery,
    DevicePollRequest,
    ProfileNameInput,
    SaveProfileInput,
    ValidateProfileInput,
    RenameProfileInput,
    AgentProfileIdInput,
    SaveAgentProfileInput,
    SettingsPatchInput,
    McpServerKeyInput,
    McpServerBodyInput,
    SettingsSecretInput,
    SettingsSecretNameInput,
    McpTestInput,
    McpOauthJobInput,
    McpOauthCallbackInput,
    HomeQuery,
    SearchSubdirsQuery,
    CreateDirectoryQuery,
    ArchiveQuery,
    AddWorkspacesInput,
    AddWorkspaceParentsInput,
    WorkspacePathInput,
    SkillsInput,
    SkillNameInput,
    SkillEnabledInput,
    InstallSkillInput,
    HooksInput,
    SubAgentsInput,
    PluginsInput,
    PluginNameInput,
    InstallPluginInput,
    InitInput,
    VscodeUrlQuery,
    DesktopUrlQuery,
  };
}

/** The schemas above, built on first use (lazy-schemas.ts). */
export const ServerSchemas = builtOnFirstUse(build);
