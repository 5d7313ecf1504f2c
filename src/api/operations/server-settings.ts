/**
 * OpenHands agent-server's settings (`PATCH /api/settings`, the form schemas, MCP servers, secrets;
 * `GET` and `POST /api/settings` are settings.ts's, answering both shapes), the MCP test, `/api/init`,
 * and what Parley does not run (VS Code, a desktop, shared conversations).
 */
import * as z from 'zod';
import { ConflictError, ForbiddenError, RequestValidationError } from '../../errors.js';
import { checkMcpServer, toMcpConfig } from '../../settings/mcp-servers.js';
import { agentSettingsSchema, conversationSettingsSchema } from '../../settings/settings-schema.js';
import { mutation, query } from '../operation.js';
import { ApiSchemas as A } from '../schemas.js';
import { ServerSchemas as S } from '../server-schemas.js';
import { BODY, DELETE, DESKTOP, FIELDS, GET, OAUTH, PATCH, POST, PUT, QUERY, SECRET_VALUE, SHARING, unavailable, VSCODE } from './server-lines.js';

const SETTINGS = 'Settings';
const MCP = 'MCP';

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

export const serverSettingsOperations = {
  // ---- settings (GET /api/settings is getSettings, which answers both shapes) ----
  patchSettings: mutation({
    input: () => S.SettingsPatchInput,
    rest: PATCH('/api/settings', 'Update Settings', SETTINGS, BODY),
    handler: (c, i) => c.server.settings.patch(i),
  }),
  agentSettingsSchema: query({
    input: () => A.NoInput,
    rest: GET('/api/settings/agent-schema', 'Get Agent Settings Schema', SETTINGS),
    handler: async () => agentSettingsSchema(),
  }),
  conversationSettingsSchema: query({
    input: () => A.NoInput,
    rest: GET('/api/settings/conversation-schema', 'Get Conversation Settings Schema', SETTINGS),
    handler: async () => conversationSettingsSchema(),
  }),
  createMcpServer: mutation({
    input: () => S.McpServerBodyInput,
    rest: POST('/api/settings/mcp/{settings_key}', 'Create MCP Server', SETTINGS, { body: { field: 'server' }, status: 201 }),
    handler: (c, i) => c.server.settings.createMcpServer(i.settings_key, i.server),
  }),
  patchMcpServer: mutation({
    input: () => S.McpServerBodyInput,
    rest: PATCH('/api/settings/mcp/{settings_key}', 'Patch MCP Server', SETTINGS, { body: { field: 'server' } }),
    handler: (c, i) => c.server.settings.patchMcpServer(i.settings_key, i.server),
  }),
  deleteMcpServer: mutation({
    input: () => S.McpServerKeyInput,
    rest: DELETE('/api/settings/mcp/{settings_key}', 'Delete MCP Server', SETTINGS),
    handler: (c, i) => c.server.settings.deleteMcpServer(i.settings_key),
  }),
  listSettingsSecrets: query({
    input: () => A.NoInput,
    rest: GET('/api/settings/secrets', 'List Secrets', SETTINGS),
    handler: (c) => c.settings.listSecrets(),
  }),
  upsertSettingsSecret: mutation({
    input: () => S.SettingsSecretInput,
    rest: PUT('/api/settings/secrets', 'Create Secret', SETTINGS, BODY),
    handler: (c, i) => c.settings.upsertSecret(i.name, i.value, i.description),
  }),
  getSettingsSecretValue: query({
    input: () => S.SettingsSecretNameInput,
    rest: GET('/api/settings/secrets/{name}', 'Get Secret Value', SETTINGS),
    handler: async (): Promise<string> => {
      throw new ForbiddenError(SECRET_VALUE);
    },
  }),
  deleteSettingsSecret: mutation({
    input: () => S.SettingsSecretNameInput,
    rest: DELETE('/api/settings/secrets/{name}', 'Delete Secret', SETTINGS),
    handler: async (c, i) => {
      await c.settings.deleteSecret(i.name);
      return { deleted: true };
    },
  }),

  // ---- MCP ----
  testMcpServer: mutation({
    input: () => S.McpTestInput,
    rest: POST('/api/mcp/test', 'Test MCP Server', MCP, BODY),
    handler: (c, i) => c.server.testMcp({ name: i.name, config: mcpTestConfig(i), timeout: i.timeout, tool_call: i.tool_call ?? null }),
  }),
  /** OpenHands' own "could not start" answer: nothing is pending afterwards. */
  mcpOauthStart: mutation({
    input: () => S.McpTestInput,
    rest: POST('/api/mcp/oauth/start', 'Start MCP OAuth', MCP, BODY),
    handler: async () => ({ ok: false, job_id: null, authorization_url: null, error: OAUTH, error_kind: 'unknown' as const }),
  }),
  mcpOauthStatus: unavailable('query', () => S.McpOauthJobInput, GET('/api/mcp/oauth/status/{job_id}', 'Get MCP OAuth Status', MCP), OAUTH),
  mcpOauthCallback: unavailable(
    'mutation',
    () => S.McpOauthCallbackInput,
    POST('/api/mcp/oauth/callback/{job_id}', 'Submit MCP OAuth Callback', MCP, FIELDS),
    OAUTH,
  ),

  // ---- init, editors, sharing ----
  /** Parley starts ready (its keys come from the environment): there is no dormant state to initialise. */
  getInit: query({
    input: () => A.NoInput,
    rest: GET('/api/init', 'Get Init Status', 'Init'),
    handler: async () => ({ state: 'ready' as const, error: null }),
  }),
  postInit: mutation({
    input: () => S.InitInput,
    rest: POST('/api/init', 'Initialize Server', 'Init', BODY),
    handler: async (): Promise<{ state: 'ready' }> => {
      throw new ConflictError('server already in state: ready (Parley takes its keys and settings from its environment at start)');
    },
  }),
  vscodeUrl: unavailable('query', () => S.VscodeUrlQuery, GET('/api/vscode/url', 'Get VSCode URL', 'VSCode', QUERY), VSCODE),
  vscodeStatus: query({
    input: () => A.NoInput,
    rest: GET('/api/vscode/status', 'Get VSCode Status', 'VSCode'),
    handler: async () => ({ running: false, enabled: false, message: VSCODE }),
  }),
  desktopUrl: unavailable('query', () => S.DesktopUrlQuery, GET('/api/desktop/url', 'Get Desktop URL', 'Desktop', QUERY), DESKTOP),
  sharedConversations: unavailable('query', () => z.looseObject({}), GET('/api/shared-conversations', 'Get Shared Conversations', 'Shared', QUERY), SHARING),
  sharedEvents: unavailable('query', () => z.looseObject({}), GET('/api/shared-events/search', 'Search Shared Events', 'Shared', QUERY), SHARING),
};
