/**
 * OpenHands' app-server shape, what its web app (the frontend build served with WEB_APP_DIR) reads:
 * the app's config and options, a conversation as the app sees it (its runtime's status, its URL,
 * its own key), the V1 app-conversation and sandbox views, the event count the app waits for, the
 * runtime routes that carry a path instead of a conversation, and the app's settings object. Knows
 * no HTTP; the operations (src/api/operations/web-app.ts) call these with the parts they declare.
 *
 * Where OpenHands' meaning differs from Parley's, the app's is served:
 * - A conversation's `status` is its runtime's (`RUNNING` while it can take a message: Parley starts
 *   a conversation's sandbox when something needs it, so every conversation can); the agent's state
 *   stays in `execution_status`.
 * - A conversation's sandbox has the conversation's id. Pausing it interrupts the conversation (a run
 *   ends, paused; its shell and every process end); resuming it has nothing to do (the sandbox starts
 *   on demand); the agent's own pause and resume are the conversation's `/pause` and `/run`.
 * - The app names the workspace `/workspace/project` (with a repository `/workspace/project/<name>`):
 *   Parley's workspace, where the repository is cloned, is the workspace itself (`/workspace` in its
 *   sandbox, its host directory without one).
 */
import type { EventLog } from '../events/log.js';
import { RequestValidationError } from '../errors.js';
import type { Settings } from '../secrets/settings.js';
import type { Conversations } from './conversations.js';
import type { ConversationOps } from './service.js';
import { type AppServerContext, conversationUrl, RUNTIME_STATUS } from './app-server-info.js';

// ---- config and options ---------------------------------------------------------------------------

/** `GET /api/options/config`: open-source mode, no GitHub app, no analytics, no billing. */
export function appConfig() {
  return {
    APP_MODE: 'oss',
    APP_SLUG: null,
    GITHUB_CLIENT_ID: '',
    POSTHOG_CLIENT_KEY: '',
    PROVIDERS_CONFIGURED: [] as string[],
    AUTH_URL: null,
    FEATURE_FLAGS: { ENABLE_BILLING: false, HIDE_LLM_SETTINGS: false, ENABLE_JIRA: false, ENABLE_JIRA_DC: false, ENABLE_LINEAR: false },
  };
}

/** A few models the app's picker offers, beside the one configured (any `provider/model` can be typed in its advanced view). */
const KNOWN_MODELS = ['anthropic/claude-sonnet-4-5', 'anthropic/claude-opus-4-1', 'openai/gpt-5', 'openai/gpt-5-mini', 'openai/gpt-4o'];

/** `GET /api/options/models`: the model set through the settings first, then the known ones. */
export async function appModels(settings: Pick<Settings, 'llmView'>): Promise<string[]> {
  const stored = (await settings.llmView()).model;
  return [...new Set([stored, ...KNOWN_MODELS].filter((m): m is string => !!m))];
}

// ---- conversations as the app's V1 views -----------------------------------------------------------

export interface AppServerParts {
  conversations: Conversations;
  events: Pick<EventLog, 'count'>;
  service: Pick<ConversationOps, 'interrupt'>;
  keys: AppServerContext;
}

/** `GET /api/v1/app-conversations?ids=…`: the V1 app-conversation of each id, in order, null for an unknown one. */
export async function appConversations(c: AppServerParts, ids: string[]) {
  const out = [];
  for (const id of ids) {
    const conv = await c.conversations.load(id);
    if (!conv) {
      out.push(null);
      continue;
    }
    const info = await c.conversations.get(id);
    out.push({
      id,
      created_by_user_id: null,
      sandbox_id: id,
      selected_repository: info.selected_repository,
      selected_branch: info.selected_branch,
      git_provider: info.git_provider,
      title: info.title,
      trigger: null,
      pr_number: [] as number[],
      llm_model: info.agent?.llm.model ?? null,
      metrics: null,
      created_at: info.created_at,
      updated_at: info.updated_at,
      sandbox_status: RUNTIME_STATUS,
      execution_status: info.execution_status,
      conversation_url: conversationUrl(id),
      session_api_key: c.keys.keyOf(id),
    });
  }
  return out;
}

/** `GET /api/v1/sandboxes?id=…`: a conversation's sandbox (its id is the conversation's), null for an unknown one. */
export async function sandboxes(c: AppServerParts, ids: string[]) {
  const out = [];
  for (const id of ids) {
    const conv = await c.conversations.load(id);
    out.push(
      conv
        ? {
            id,
            created_by_user_id: null,
            sandbox_spec_id: 'parley',
            status: RUNTIME_STATUS,
            session_api_key: c.keys.keyOf(id),
            exposed_urls: [] as { name: string; url: string }[],
            created_at: conv.record.created_at,
          }
        : null,
    );
  }
  return out;
}

/** `POST /api/v1/sandboxes/{id}/pause`: the conversation's runtime stops (an interrupt: a run ends paused, its shell and every process end). */
export async function pauseSandbox(c: AppServerParts, id: string) {
  await c.service.interrupt(id);
  return { success: true as const };
}

/** `POST /api/v1/sandboxes/{id}/resume`: the sandbox starts when something needs it; nothing to do but check it exists. */
export async function resumeSandbox(c: AppServerParts, id: string) {
  await c.conversations.require(id);
  return { success: true as const };
}

/** `GET /api/conversations/{id}/config`: the runtime's id (the conversation's: one sandbox each). */
export async function conversationConfig(c: AppServerParts, id: string) {
  await c.conversations.require(id);
  return { runtime_id: id, session_id: id };
}

/**
 * `GET /api/v1/events/count?conversation_id__eq=…`: the events stored, a bare integer. The app waits
 * until its socket (`resend_all`) has delivered that many frames; the socket sends each stored
 * event and a snapshot before them, so the count is reached.
 */
export async function appEventCount(c: AppServerParts, id: string): Promise<number> {
  await c.conversations.require(id);
  return c.events.count(id, {});
}

// ---- runtime routes with a path -------------------------------------------------------------------

const APP_ROOT = '/workspace/project';
const WORKSPACE = '/workspace';

/**
 * A path as the app names it, relative to the conversation's workspace (a relative path is taken
 * inside it, sandboxed or not): `/workspace/project` and, for a conversation with a repository,
 * `/workspace/project/<repository name>` are the workspace itself, and so is `/workspace` (an
 * upload's default is `/workspace/<file name>`); any other path is taken as it is.
 */
function workspacePathOf(appPath: string, repository: string | null | undefined): string {
  const p = appPath.startsWith('/') ? appPath : `/${appPath}`;
  const name = repository?.split('/').pop();
  for (const root of name ? [`${APP_ROOT}/${name}`, APP_ROOT, WORKSPACE] : [APP_ROOT, WORKSPACE]) {
    if (p === root) return '.';
    if (p.startsWith(`${root}/`)) return p.slice(root.length + 1) || '.';
  }
  return p;
}

/** The conversation a runtime route acts on and the path in its workspace: the key's conversation, else the newest (as the locator decides). */
export async function runtimePath(c: Pick<AppServerParts, 'conversations'>, q: { path: string; conversation_id?: string | null }) {
  if (!q.conversation_id) return { path: q.path, conversation_id: null };
  const conv = await c.conversations.require(q.conversation_id);
  return { path: workspacePathOf(q.path, conv.record.data.selected_repository), conversation_id: q.conversation_id };
}

// ---- settings as the app reads and writes them ---------------------------------------------------

/** The app's settings fields Parley has no setting for: fixed answers (confirmation, condenser, analytics are Parley's own or absent). */
const APP_SETTINGS_DEFAULTS = {
  agent: 'CodeActAgent',
  language: 'en',
  confirmation_mode: false,
  security_analyzer: null,
  remote_runtime_resource_factor: null,
  enable_default_condenser: true,
  condenser_max_size: null,
  enable_sound_notifications: false,
  enable_proactive_conversation_starters: false,
  enable_solvability_analysis: false,
  // false, not null: null makes the app ask for analytics consent on every page load
  user_consents_to_analytics: false,
  search_api_key: null,
  search_api_key_set: false,
  max_budget_per_task: null,
  email: null,
  email_verified: null,
  git_user_name: null,
  git_user_email: null,
  v1_enabled: true,
};

/** `GET /api/settings`'s fields for the app, added to Parley's own (`llm_model`, `llm_base_url`, `llm_api_key_set`): the key itself never. */
export async function appSettingsView(settings: Pick<Settings, 'getProviders'>) {
  const providers: Record<string, string | null> = {};
  for (const p of await settings.getProviders()) if (p.token || p.user_id) providers[p.provider] = p.host;
  return { ...APP_SETTINGS_DEFAULTS, provider_tokens_set: providers };
}

/** `GET /api/secrets` for the app too: the same names and descriptions under its name for them (`custom_secrets`). */
export function withAppSecrets<T extends { secrets: unknown[] }>(list: T): T & { custom_secrets: T['secrets'] } {
  return { ...list, custom_secrets: list.secrets };
}

/** The app's settings object (POST /api/settings): only its LLM fields are kept; the rest is the app's own and ignored. */
export interface AppSettingsInput {
  llm_model?: string | null;
  llm_base_url?: string | null;
  llm_api_key?: string | null;
}

/**
 * A model as the app names it (LiteLLM style: `openai/gpt-5`, `anthropic/claude-…`, a bare name, or
 * `litellm_proxy/…`) → Parley's `provider/model`; another prefix is an OpenAI-compatible server's
 * model when a base URL is given, else refused.
 */
function parleyModel(model: string, baseUrl: string | null): string {
  const m = model.trim();
  const slash = m.indexOf('/');
  if (slash < 0) return /^claude/i.test(m) ? `anthropic/${m}` : `openai/${m}`;
  const provider = m.slice(0, slash).toLowerCase();
  if (provider === 'openai' || provider === 'anthropic') return `${provider}/${m.slice(slash + 1)}`;
  if (provider === 'litellm_proxy' || baseUrl) return `openai/${provider === 'litellm_proxy' ? m.slice(slash + 1) : m}`;
  throw new RequestValidationError([
    {
      type: 'value_error',
      loc: ['body', 'llm_model'],
      msg: `Value error, model "${m}": Parley speaks to openai/…, anthropic/… and OpenAI-compatible servers (give a base URL)`,
      input: m,
    },
  ]);
}

/**
 * `POST /api/settings` with the app's whole settings object: the LLM's model, base URL and key are
 * saved (a key left out keeps the stored one, an empty one clears it, as the app means it); an
 * empty model or base URL clears that setting.
 */
export async function saveAppSettings(settings: Pick<Settings, 'saveLlmSettings'>, s: AppSettingsInput) {
  const baseUrl = s.llm_base_url?.trim() || null;
  if (baseUrl !== null && !/^https?:\/\/\S+$/.test(baseUrl)) {
    throw new RequestValidationError([
      { type: 'value_error', loc: ['body', 'llm_base_url'], msg: 'Value error, the base URL must be an http(s) URL', input: baseUrl },
    ]);
  }
  const patch: { llm_model?: string | null; llm_base_url?: string | null; llm_api_key?: string | null } = {};
  if (s.llm_model !== undefined) patch.llm_model = s.llm_model?.trim() ? parleyModel(s.llm_model, baseUrl) : null;
  if (s.llm_base_url !== undefined) patch.llm_base_url = baseUrl;
  if (s.llm_api_key === '') patch.llm_api_key = null;
  else if (s.llm_api_key) patch.llm_api_key = s.llm_api_key;
  await settings.saveLlmSettings(patch);
  return { message: 'Settings stored' };
}

/** `POST /api/unset-provider-tokens` (the app's sign-out in open-source mode): every git provider token is removed. */
export async function unsetProviderTokens(settings: Pick<Settings, 'addGitProviders'>) {
  await settings.addGitProviders({ provider_tokens: {} });
  return { message: 'Unset Git provider tokens' };
}
