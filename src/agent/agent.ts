/**
 * The agent, assembled: the LLM each conversation talks to, its tools (the built-in ones, made
 * before the conversations, and its MCP servers), the instructions of its system prompt, its
 * history, and the run loop acting on the live conversation; replays of recorded steps.
 */
import type { Logger } from 'pino';
import type { Config } from '../config.js';
import type { EventLog } from '../events/log.js';
import type { Redactor } from '../secrets/redact.js';
import type { Settings } from '../secrets/settings.js';
import type { McpServerStatus } from '../tools/mcp/manager.js';
import { helperDirOf, workspacePath } from '../sandbox/workspace-dir.js';
import { Histories } from './history.js';
import { Instructions } from './instructions.js';
import type { AgentConversations } from './live-conversation.js';
import { LlmSource } from './llm-source.js';
import type { ReplayPlan } from './replay-plan.js';
import { executeReplay } from './replay-run.js';
import type { UserSkill } from './skills.js';
import { AgentRuntime } from './runtime.js';
import { ToolBox, type BuiltinTools } from './tool-box.js';

interface AgentParts {
  conversations: AgentConversations;
  events: EventLog;
  settings: Settings;
  redactor: Redactor;
  /** The built-in tools (src/agent/tool-box.ts: builtinTools). */
  builtins: BuiltinTools;
  config: Config;
  log: Logger;
  /** The user's installed, enabled skills (given to every conversation's agent). */
  userSkills?: () => Promise<UserSkill[]>;
}

export interface Agent {
  runtime: AgentRuntime;
  /** The state of each MCP server of a conversation (starting them when they are not). */
  mcpStatus(conversationId: string): Promise<McpServerStatus[]>;
  /** Runs a replay plan's recorded steps with the built-in tools (no LLM). */
  replay(conversationId: string, workspaceDir: string, plan: ReplayPlan, signal: AbortSignal): Promise<{ actions: number }>;
}

export function createAgent({ conversations, events, settings, redactor, builtins, config, log, userSkills }: AgentParts): Agent {
  const workspaceDir = (id: string) => workspacePath(config.workspaceRoot, id);
  const tools = new ToolBox({
    builtins,
    conversations,
    mcp: {
      events,
      redactor,
      config: (id) => conversations.mcpConfig(id),
      workspaceDir,
      allowedHosts: config.mcpAllowedHosts,
      idleCloseMs: config.mcpIdleCloseMs,
      log,
    },
    settings,
    workspaceRoot: config.workspaceRoot,
    helperDir: helperDirOf(config.dataDir),
  });
  const runtime = new AgentRuntime({
    conversations,
    events,
    redactor,
    llm: new LlmSource(settings, config.llm),
    tools,
    instructions: new Instructions((conv, key) => conversations.field(conv, key), config.workspaceRoot, userSkills),
    histories: new Histories(events),
    workspace: {
      dir: (conv) => workspaceDir(conv.id),
      view: (conv) => ({ dir: conv.sandbox.visibleWorkspace(workspaceDir(conv.id)), sandboxed: conv.sandbox.enabled }),
    },
    maxIterations: config.maxIterations,
    log,
  });
  return {
    runtime,
    mcpStatus: async (id) => tools.mcpOf(await conversations.require(id)).status(),
    async replay(id, dir, plan, signal) {
      const conv = await conversations.require(id);
      return executeReplay({
        events,
        redact: (t) => redactor.redact(t),
        conversationId: id,
        workspaceDir: dir,
        visibleDir: conv.sandbox.visibleWorkspace(dir),
        files: conv.sandbox.files(dir),
        plan,
        tools: tools.builtins,
        env: await tools.env(conv),
        signal,
      });
    },
  };
}
