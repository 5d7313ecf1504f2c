/**
 * OpenHands agent-server's conversation features on top of the service (what
 * `@openhands/typescript-client`'s `fork`, `switchLlm`, `switchProfile`, `setSecurityAnalyzer`,
 * `navigateTo` and `switchAcpModel` call): the request's checks and the answer's shape here, the work
 * in the parts that do it (fork.ts; the service's `updateAgentSettings`, which runs where the
 * conversation's loop runs, so the run under way takes the change at its next step). Goals are the
 * service's (goals.ts); the trajectory is trajectory.ts.
 */
import { LLM_ANALYZER, OTHER_ANALYZERS } from '../agent/security-analyzer.js';
import type { StoredLlm } from '../agent/conversation-data.js';
import { BadRequestError, NotFoundError, NotImplementedError, RequestValidationError } from '../errors.js';
import { fullMcpConfig } from '../secrets/mcp-config.js';
import type { Settings } from '../secrets/settings.js';
import type { AgentProfiles } from '../settings/agent-profiles.js';
import type { LlmProfiles } from '../settings/llm-profiles.js';
import { toMcpConfig } from '../settings/mcp-servers.js';
import { type AgentLaunch, parleyModel } from './agent-server.js';
import type { Conversations } from './conversations.js';
import type { Forks, ForkRequest } from './fork.js';
import type { ProjectExtensions } from './project-extensions.js';
import type { ConversationOps } from './service.js';

/** The masks a client may send back for a key it was shown (keep the one the conversation has). */
const MASKS = new Set(['**********', '<secret_hidden>']);

interface FeatureParts {
  conversations: Conversations;
  service: Pick<ConversationOps, 'updateAgentSettings'>;
  settings: Pick<Settings, 'seal'>;
}

/** `POST …/switch_llm`: the conversation's LLM is this one from its next LLM request on (history kept); its key is sealed, never shown. */
export async function switchLlm(c: FeatureParts, id: string, llm: { model?: string | null; base_url?: string | null; api_key?: string | null }) {
  const conv = await c.conversations.require(id);
  const model = llm.model ? parleyModel(llm.model, llm.base_url, ['body', 'llm', 'model']) : null;
  const keptKey = llm.api_key && MASKS.has(llm.api_key) ? (conv.record.data.llm?.api_key_sealed ?? null) : null;
  const stored: StoredLlm = {
    model,
    base_url: llm.base_url ?? null,
    api_key_sealed: keptKey ?? (llm.api_key && !MASKS.has(llm.api_key) ? c.settings.seal(llm.api_key) : null),
  };
  return c.service.updateAgentSettings(id, { llm: stored });
}

/** `POST …/switch_profile`: the named LLM profile (its model, server and key) becomes the conversation's LLM; 404 when there is none. */
export async function switchProfile(c: FeatureParts & { profiles: Pick<LlmProfiles, 'resolve'> }, id: string, name: string) {
  await c.conversations.require(id);
  const p = await c.profiles.resolve(name);
  const stored: StoredLlm = { model: p.model, base_url: p.base_url, api_key_sealed: p.api_key ? c.settings.seal(p.api_key) : null, profile: name };
  return c.service.updateAgentSettings(id, { llm: stored });
}

/** `POST …/security_analyzer`: the LLM analyzer or none; OpenHands' other analyzers are a 501 saying why. */
export async function setSecurityAnalyzer(c: FeatureParts, id: string, analyzer: { kind: string } | null) {
  await c.conversations.require(id);
  if (analyzer && analyzer.kind !== LLM_ANALYZER) {
    if ((OTHER_ANALYZERS as readonly string[]).includes(analyzer.kind)) {
      throw new NotImplementedError(`${analyzer.kind} is not offered by Parley: it runs ${LLM_ANALYZER} (the risk the model gives each action), or none.`);
    }
    throw new RequestValidationError([
      {
        type: 'literal_error',
        loc: ['body', 'security_analyzer', 'kind'],
        msg: `Input should be '${LLM_ANALYZER}' (or one of ${OTHER_ANALYZERS.join(', ')})`,
        input: analyzer.kind,
      },
    ]);
  }
  return c.service.updateAgentSettings(id, { security_analyzer: analyzer ? { kind: LLM_ANALYZER } : null });
}

/** `POST …/switch_acp_model`: Parley's agent is not an ACP agent (OpenHands' 400 for such a conversation). */
export async function switchAcpModel(c: Pick<FeatureParts, 'conversations'>, id: string): Promise<never> {
  await c.conversations.require(id);
  throw new BadRequestError('The conversation is not an ACP conversation: its agent is Parley’s own; use switch_llm to change its model.');
}

/** Why navigate is not offered (see docs/api.md). */
const NAVIGATE_REASON =
  'Parley keeps one linear event log per conversation (no event tree to move a HEAD in): fork from the event instead (POST …/fork with from_event_id).';

/** `POST …/navigate`: not offered (501 with the reason), after the conversation is known. */
export async function navigate(c: Pick<FeatureParts, 'conversations'>, id: string): Promise<never> {
  await c.conversations.require(id);
  throw new NotImplementedError(NAVIGATE_REASON);
}

/** `POST …/fork`: the new conversation's info (201), its skills listed when `include_skills`. */
export async function fork(
  c: { conversations: Conversations; forks: Forks; extensions: Pick<ProjectExtensions, 'skills'> },
  id: string,
  req: ForkRequest,
  includeSkills: boolean,
) {
  const forkId = await c.forks.fork(id, req);
  return withSkills(c, await c.conversations.get(forkId), includeSkills);
}

/**
 * The info, with `agent.agent_context.skills` filled in when asked (`include_skills`): the skills the
 * conversation's agent has (the enabled installed ones and its workspace's project skills). Without
 * it they are `[]`, as OpenHands trims them.
 */
async function withSkills<T extends { id: string; agent?: { agent_context?: { skills: unknown[] } } }>(
  c: { extensions: Pick<ProjectExtensions, 'skills'> },
  info: T,
  include: boolean,
): Promise<T> {
  if (!include || !info.agent) return info;
  const { skills } = await c.extensions.skills({ load_user: true, load_project: true, conversation_id: info.id });
  return { ...info, agent: { ...info.agent, agent_context: { ...info.agent.agent_context, skills } } };
}

/**
 * A create with `agent_profile_id`: the profile's LLM profile (its model, server and key, sealed) is the
 * conversation's LLM, and its MCP servers (`mcp_server_refs`; null: all the settings' enabled ones) its
 * MCP servers. 404 for an unknown profile; 422 naming what a profile refers to and does not exist.
 */
export async function launchAgentProfile(
  c: {
    agentProfiles: Pick<AgentProfiles, 'list' | 'materialize'>;
    llmProfiles: Pick<LlmProfiles, 'resolve'>;
    settings: Pick<Settings, 'seal' | 'sealMcp' | 'mcpServers'>;
  },
  profileId: string,
): Promise<AgentLaunch> {
  const listed = (await c.agentProfiles.list()).profiles.find((p) => p.id === profileId);
  if (!listed) throw new NotFoundError(`Agent profile '${profileId}' not found`);
  const m = await c.agentProfiles.materialize(listed.name);
  if (!m.valid) {
    throw new RequestValidationError([
      { type: 'value_error', loc: ['body', 'agent_profile_id'], msg: `Value error, agent profile '${listed.name}': ${m.errors.join('; ')}`, input: profileId },
    ]);
  }
  const llm = m.llm_profile_ref ? await c.llmProfiles.resolve(m.llm_profile_ref) : null;
  let mcpConfigSealed: string | null = null;
  if (m.mcp_server_refs) {
    const all = await c.settings.mcpServers();
    mcpConfigSealed = c.settings.sealMcp(fullMcpConfig(toMcpConfig(Object.fromEntries(m.resolved_mcp_config_keys.map((k) => [k, all[k]!])))));
  }
  return {
    llm: llm && { model: llm.model, base_url: llm.base_url, api_key_sealed: llm.api_key ? c.settings.seal(llm.api_key) : null, profile: m.llm_profile_ref },
    mcpConfigSealed,
    launched: { profile_id: listed.id, revision: listed.revision },
  };
}
