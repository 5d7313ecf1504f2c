/**
 * The agent-server fields of a conversation's info (OpenHands' ConversationInfo: agent, workspace,
 * confirmation policy, stats…), projected from what the conversation keeps.
 */
import path from 'node:path';
import { usageOf } from '../agent/conversation-data.js';
import { BUILTIN_TOOLS } from '../events/tool-catalog.js';
import type { ParsedRecord } from './record-data.js';
import { workspacePath } from '../sandbox/workspace-dir.js';

/** Where the service's conversations live and what the server's LLM is (for the info's `agent`). */
export interface AgentServerContext {
  workspaceRoot: string;
  dataDir: string;
  llm: { model?: string | null; baseUrl?: string | null; apiKeySet?: boolean };
}

const MASKED = '**********';

/**
 * The version of OpenHands' agent-server API Parley implements, which `/server_info` answers as its
 * `version` (what OpenHands' client compares against its feature gates). 1.30.0: the routes of
 * agent-server 1.30.0 that `@openhands/typescript-client` calls (settings, profiles, skills, hooks,
 * workspaces, the MCP test…), before the MCP OAuth routes of 1.31.0, which Parley does not implement
 * (its client refuses them: "MCP OAuth API requires agent-server 1.31.0"). Parley's own interface
 * version stays in its OpenAPI document (and /server_info's `interface_version`).
 */
export const AGENT_SERVER_API_VERSION = '1.30.0';

/** Fields the client's ConversationInfo reads, from what the conversation keeps (additive to the interface's info). */
export function agentServerInfo(
  record: ParsedRecord,
  ctx: AgentServerContext | undefined,
  server: { model: string | null; base_url: string | null; key_set: boolean },
) {
  const d = record.data;
  const own = d.llm ?? null;
  const keySet = own?.api_key_sealed ? true : server.key_set || !!ctx?.llm.apiKeySet;
  const usage = usageOf(d);
  const model = own?.model ?? server.model ?? ctx?.llm.model ?? null;
  return {
    agent: {
      kind: 'Agent',
      llm: { model, base_url: own?.base_url ?? server.base_url ?? ctx?.llm.baseUrl ?? null, api_key: keySet ? MASKED : null, usage_id: 'agent' },
      tools: BUILTIN_TOOLS.filter((t) => t.inAgentSpec).map((t) => ({ name: t.name })),
      // the skills are given only where a client asks for them (`include_skills`), as OpenHands trims them
      agent_context: { skills: [] as unknown[] },
    },
    workspace: { kind: 'LocalWorkspace', working_dir: ctx ? workspacePath(ctx.workspaceRoot, record.id) : null },
    confirmation_policy: d.confirmation_policy ?? { kind: 'NeverConfirm' },
    security_analyzer: d.security_analyzer ?? null,
    persistence_dir: ctx ? path.resolve(ctx.dataDir) : null,
    max_iterations: d.max_iterations ?? null,
    stuck_detection: d.stuck_detection ?? true,
    stats: {
      usage_to_metrics: {
        agent: {
          model_name: model ?? 'default',
          accumulated_cost: 0,
          accumulated_token_usage: { model: model ?? 'default', ...usage, reasoning_tokens: 0, context_window: 0, per_turn_token: 0, response_id: '' },
        },
      },
    },
    tags: d.tags ?? {},
    goal: d.goal ?? null,
    launched_profile: d.launched_profile ?? null,
    forked_from_conversation_id: d.forked_from_conversation_id ?? null,
    forked_from_event_id: d.forked_from_event_id ?? null,
    activated_knowledge_skills: [],
    secret_names: Object.keys(d.secrets_sealed ?? {}),
  };
}
