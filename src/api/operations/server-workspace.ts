/**
 * OpenHands agent-server's file browser (a conversation's sandbox view), saved workspaces, skills,
 * hooks and sub-agents (and plugins, which Parley does not load).
 */
import * as z from 'zod';
import type { FileBytes } from '../../conversation/side-channels.js';
import { jsonOutput, mutation, query } from '../operation.js';
import { ApiSchemas as A } from '../schemas.js';
import { ServerSchemas as S } from '../server-schemas.js';
import { BODY, DELETE, FIELDS, GET, NO_INTERNET, PATCH, PLUGINS, POST, QUERY, unavailable } from './server-lines.js';

const FILES = 'Files';
const WORKSPACES = 'Workspaces';
const SKILLS = 'Skills';
const PLUGINS_TAG = 'Plugins';

export const serverWorkspaceOperations = {
  // ---- file browser (a conversation's sandbox view) ----
  fileHome: query({ input: () => S.HomeQuery, rest: GET('/api/file/home', 'Get Home Directory', FILES, QUERY), handler: (c, i) => c.server.browser.home(i) }),
  searchSubdirs: query({
    input: () => S.SearchSubdirsQuery,
    rest: GET('/api/file/search_subdirs', 'Search Subdirs', FILES, QUERY),
    handler: (c, i) => c.server.browser.searchSubdirs(i),
  }),
  createDirectory: mutation({
    input: () => S.CreateDirectoryQuery,
    rest: POST('/api/file/create_directory', 'Create Directory', FILES, QUERY),
    handler: (c, i) => c.server.browser.createDirectory(i),
  }),
  /** REST answers the bytes raw; tRPC as base64. */
  archiveDirectory: jsonOutput(
    query({
      input: () => S.ArchiveQuery,
      rest: GET('/api/file/archive', 'Archive Directory', FILES, { query: { lists: ['exclude'] } }),
      handler: (c, i) => c.server.browser.archive(i),
    }),
    (f: FileBytes) => ({ name: f.name, content_base64: Buffer.from(f.bytes).toString('base64') }),
  ),

  // ---- saved workspaces ----
  listWorkspaces: query({ input: () => A.NoInput, rest: GET('/api/workspaces', 'List Workspaces', WORKSPACES), handler: (c) => c.server.workspaces.list() }),
  addWorkspaces: mutation({
    input: () => S.AddWorkspacesInput,
    rest: POST('/api/workspaces', 'Add Workspaces', WORKSPACES, BODY),
    handler: (c, i) => c.server.workspaces.add(i.workspaces),
  }),
  deleteWorkspace: mutation({
    input: () => S.WorkspacePathInput,
    rest: DELETE('/api/workspaces', 'Delete Workspace', WORKSPACES, QUERY),
    handler: (c, i) => c.server.workspaces.remove(i.path),
  }),
  addWorkspaceParents: mutation({
    input: () => S.AddWorkspaceParentsInput,
    rest: POST('/api/workspaces/parents', 'Add Workspace Parents', WORKSPACES, BODY),
    handler: (c, i) => c.server.workspaces.addParents(i.parents),
  }),
  deleteWorkspaceParent: mutation({
    input: () => S.WorkspacePathInput,
    rest: DELETE('/api/workspaces/parents', 'Delete Workspace Parent', WORKSPACES, QUERY),
    handler: (c, i) => c.server.workspaces.removeParent(i.path),
  }),

  // ---- skills, hooks, sub-agents ----
  getSkills: mutation({ input: () => S.SkillsInput, rest: POST('/api/skills', 'Get Skills', SKILLS, BODY), handler: (c, i) => c.server.extensions.skills(i) }),
  /** OpenHands' own answer when the public skills cannot be fetched. */
  syncSkills: mutation({
    input: () => A.NoInput,
    rest: POST('/api/skills/sync', 'Sync Skills', SKILLS),
    handler: async () => ({ status: 'error' as const, message: `Public skills come from OpenHands' extensions repository: ${NO_INTERNET}.` }),
  }),
  installSkill: mutation({
    input: () => S.InstallSkillInput,
    rest: POST('/api/skills/install', 'Install Skill', SKILLS, BODY),
    handler: (c, i) => c.server.extensions.install(i),
  }),
  listInstalledSkills: query({
    input: () => A.NoInput,
    rest: GET('/api/skills/installed', 'List Installed Skills', SKILLS),
    handler: (c) => c.server.skills.list(),
  }),
  getInstalledSkill: query({
    input: () => S.SkillNameInput,
    rest: GET('/api/skills/installed/{skill_name}', 'Get Installed Skill', SKILLS),
    handler: (c, i) => c.server.skills.get(i.skill_name),
  }),
  setSkillEnabled: mutation({
    input: () => S.SkillEnabledInput,
    rest: PATCH('/api/skills/installed/{skill_name}', 'Set Skill Enabled', SKILLS, FIELDS),
    handler: (c, i) => c.server.skills.setEnabled(i.skill_name, i.enabled),
  }),
  uninstallSkill: mutation({
    input: () => S.SkillNameInput,
    rest: DELETE('/api/skills/installed/{skill_name}', 'Uninstall Skill', SKILLS),
    handler: (c, i) => c.server.skills.uninstall(i.skill_name),
  }),
  refreshSkill: mutation({
    input: () => S.SkillNameInput,
    rest: POST('/api/skills/installed/{skill_name}/refresh', 'Refresh Skill', SKILLS),
    handler: (c, i) => c.server.extensions.refresh(i.skill_name),
  }),
  skillsMarketplace: unavailable(
    'query',
    () => A.NoInput,
    GET('/api/skills/marketplace', 'Get Marketplace Catalog', SKILLS),
    `The skills marketplace is OpenHands' extensions repository: ${NO_INTERNET}.`,
  ),
  getHooks: mutation({ input: () => S.HooksInput, rest: POST('/api/hooks', 'Get Hooks', 'Hooks', BODY), handler: (c, i) => c.server.extensions.hooks(i) }),
  getSubAgents: mutation({
    input: () => S.SubAgentsInput,
    rest: POST('/api/sub-agents', 'Get Sub Agents', 'Sub Agents', BODY),
    handler: (c, i) => c.server.extensions.subAgents(i),
  }),

  // ---- plugins: not part of Parley ----
  getPlugins: unavailable('mutation', () => S.PluginsInput, POST('/api/plugins', 'Get Plugins', PLUGINS_TAG, BODY), PLUGINS),
  installPlugin: unavailable('mutation', () => S.InstallPluginInput, POST('/api/plugins/install', 'Install Plugin', PLUGINS_TAG, BODY), PLUGINS),
  listInstalledPlugins: unavailable('query', () => A.NoInput, GET('/api/plugins/installed', 'List Installed Plugins', PLUGINS_TAG), PLUGINS),
  getInstalledPlugin: unavailable('query', () => S.PluginNameInput, GET('/api/plugins/installed/{plugin_name}', 'Get Installed Plugin', PLUGINS_TAG), PLUGINS),
  setPluginEnabled: unavailable(
    'mutation',
    () => S.PluginNameInput.extend({ enabled: z.boolean() }),
    PATCH('/api/plugins/installed/{plugin_name}', 'Set Plugin Enabled', PLUGINS_TAG, FIELDS),
    PLUGINS,
  ),
  uninstallPlugin: unavailable('mutation', () => S.PluginNameInput, DELETE('/api/plugins/installed/{plugin_name}', 'Uninstall Plugin', PLUGINS_TAG), PLUGINS),
  refreshPlugin: unavailable('mutation', () => S.PluginNameInput, POST('/api/plugins/installed/{plugin_name}/refresh', 'Refresh Plugin', PLUGINS_TAG), PLUGINS),
  pluginsMarketplace: unavailable(
    'query',
    () => A.NoInput,
    GET('/api/plugins/marketplace', 'Get Plugins Marketplace Catalog', PLUGINS_TAG),
    `${PLUGINS} (The marketplace is on the internet, which Parley does not reach.)`,
  ),
};
