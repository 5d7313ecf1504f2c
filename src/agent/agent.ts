/**
 * The agent, assembled: the LLM (run-time settings, else the environment), the built-in and MCP
 * tools, the shell's environment, the instructions of the system prompt, the run loop, replays,
 * and the per-conversation resources released on delete or stop.
 */
import fs from 'node:fs';
import { rm } from 'node:fs/promises';
import path from 'node:path';
import type { Logger } from 'pino';
import type { Config } from '../config.js';
import { conversationLimits, conversationLlm, conversationSecretValues, recordUsage, type AgentConversations } from './conversation-data.js';
import type { ReplayPlan } from './replay-plan.js';
import type { EventLog } from '../events/log.js';
import { stateUpdate } from '../events/schema.js';
import { BUILTIN_TOOLS, type BuiltinToolName } from '../events/tool-catalog.js';
import type { LlmClient } from '../llm/types.js';
import { metrics } from '../metrics.js';
import type { Redactor } from '../secrets/redact.js';
import type { Sandbox } from '../sandbox/index.js';
import type { Settings } from '../secrets/settings.js';
import { createFileEditorTool } from '../tools/file-editor.js';
import { createFinishTool } from '../tools/finish.js';
import { mcpSecretValues, mergeMcpConfig } from '../secrets/mcp-config.js';
import type { McpManager, McpServerStatus } from '../tools/mcp/manager.js';
import { createTaskTrackerTool, lastTaskList } from '../tools/task-tracker.js';
import { createTerminalTool } from '../tools/terminal/tool.js';
import { createThinkTool } from '../tools/think.js';
import type { Tool } from '../tools/types.js';
import { askpassEnv, gitCredentialEnv } from '../workspace/askpass.js';
import { loadRepoInstructions, selectTriggered, type RepoInstructions } from '../workspace/instructions.js';
import { helperDirOf, workspacePath } from '../sandbox/workspace-dir.js';
import { instrumentLlm } from './instrument.js';
import { executeReplay } from './replay-run.js';
import { AgentRuntimeImpl } from './runtime.js';

interface AgentParts {
  /** The per-conversation process launcher (src/sandbox/). */
  sandbox: Sandbox;
  conversations: AgentConversations;
  events: EventLog;
  settings: Settings;
  redactor: Redactor;
  config: Config;
  log: Logger;
}

export interface Agent {
  runtime: AgentRuntimeImpl;
  /** The state of each MCP server of a conversation (starting them when they are not). */
  mcpStatus(conversationId: string): Promise<McpServerStatus[]>;
  /** Runs a replay plan's recorded steps with the built-in tools (no LLM). */
  replay(conversationId: string, workspaceDir: string, plan: ReplayPlan, signal: AbortSignal): Promise<{ actions: number }>;
}

export function createAgent({ sandbox, conversations, events, settings, redactor, config, log }: AgentParts): Agent {
  const outputDir = (id: string) => path.join(config.dataDir, 'outputs', id);
  const terminal = createTerminalTool({ outputDir, noOutputTimeoutMs: config.terminalNoOutputTimeoutMs, idleCloseMs: config.sandbox.idleCloseMs, sandbox });
  // file_editor works through the conversation's file service: inside its sandbox, the files the shell sees
  const fileEditor = createFileEditorTool({ files: (ctx) => sandbox.files(ctx.conversationId, ctx.workspaceDir) });
  // one executor for each tool of the catalog, offered in the catalog's order (the compiler checks none is missing)
  const executors = {
    terminal,
    file_editor: fileEditor,
    task_tracker: createTaskTrackerTool((id) => lastTaskList(events, id)),
    think: createThinkTool(),
    finish: createFinishTool(),
  } satisfies Record<BuiltinToolName, unknown>;
  const builtins = BUILTIN_TOOLS.map((t) => executors[t.name]) as Tool[];
  const reserved = builtins.map((t) => t.name);
  const mcp = new Map<string, McpManager>();
  // a sandbox closed to stay under SANDBOX_MAX_LIVE: its MCP servers stop quietly (no failure event) and start again on the next run
  sandbox.onEvict((id) => void mcp.get(id)?.close());
  // over SANDBOX_DISK_MB: the sandbox stops every process of the conversation; the agent and its
  // clients are told why (the running command's observation and an error event)
  sandbox.onDiskQuota((id, used, why) => {
    const mib = `${(used / 1024 / 1024).toFixed(1)} MiB of disk (workspace, /tmp and HOME)`;
    const detail =
      why === 'quota'
        ? `the conversation uses ${mib}, over its ${config.sandbox.diskMb} MiB (SANDBOX_DISK_MB): its processes were stopped; delete files to go on`
        : `the disk is full and this conversation uses the most of it (${mib}): its processes were stopped; delete files to go on`;
    void terminal.closeConversation(id, detail);
    void events
      .append(id, { kind: 'ConversationErrorEvent', source: 'environment', code: why === 'quota' ? 'DiskQuotaExceeded' : 'DiskFull', detail })
      .catch(() => {});
  });
  const helperDir = helperDirOf(config.dataDir);
  const llmCache = new Map<string, LlmClient>();
  // the AI SDK and the MCP SDK load on first use: a daemon starts (and idles) without them
  let mcpModule: typeof import('../tools/mcp/manager.js') | null = null;
  const loadMcp = async () => (mcpModule ??= await import('../tools/mcp/manager.js'));

  // one manager per conversation, created once even when a run and a status request race for it
  const mcpCreating = new Map<string, Promise<McpManager>>();
  function mcpFor(id: string): Promise<McpManager> {
    const m = mcp.get(id);
    if (m) return Promise.resolve(m);
    let p = mcpCreating.get(id);
    if (!p) {
      p = (async () => {
        const stored = await conversations.mcpConfig(id);
        // the conversation's own keys and env values are secrets for every exit (also after a restart)
        redactor.add(...mcpSecretValues(stored));
        const { McpManager } = await loadMcp();
        const created = new McpManager({
          // normalised: duplicate urls (`http://h:1` and `http://h:1/`) and names collapse, the later wins
          config: mergeMcpConfig(null, stored),
          workspaceDir: workspacePath(config.workspaceRoot, id),
          launcher: sandbox.forConversation(id),
          allowedHosts: config.mcpAllowedHosts,
          conversationId: id,
          reservedNames: reserved,
          redact: (t) => redactor.redact(t),
          onEvent: (ev) => {
            if (ev.type === 'server_failed') {
              void events.append(id, {
                kind: 'ConversationErrorEvent',
                source: 'environment',
                code: 'MCPServerFailed',
                detail: `MCP server ${ev.server} is unavailable: ${ev.error}`,
                server: ev.server,
              });
            } else {
              void events.append(id, stateUpdate('mcp', ev));
            }
          },
        });
        mcp.set(id, created);
        return created;
      })().finally(() => mcpCreating.delete(id));
      mcpCreating.set(id, p);
    }
    return p;
  }

  // MCP servers (stdio processes, HTTP sessions) of a conversation that went idle are stopped after
  // MCP_IDLE_CLOSE_MS; the next run starts them again
  const idleTimers = new Map<string, NodeJS.Timeout>();
  function cancelIdleClose(id: string): void {
    const t = idleTimers.get(id);
    if (t) clearTimeout(t);
    idleTimers.delete(id);
  }
  function scheduleIdleClose(id: string): void {
    cancelIdleClose(id);
    const m = mcp.get(id);
    if (!m || config.mcpIdleCloseMs <= 0) return;
    const t = setTimeout(() => {
      idleTimers.delete(id);
      if (runtime.isRunning(id) || mcp.get(id) !== m) return;
      log.debug({ conversation_id: id }, 'closing the MCP servers of an idle conversation');
      void m.close().catch((err) => log.warn({ conversation_id: id, err: redactor.redact(String(err)) }, 'closing MCP servers failed'));
    }, config.mcpIdleCloseMs);
    t.unref();
    idleTimers.set(id, t);
    log.debug({ conversation_id: id, ms: config.mcpIdleCloseMs }, 'the MCP servers of an idle conversation close if it stays idle');
  }
  metrics.mcpServers.read(() => [...mcp.values()].flatMap((m) => m.status().map((s): [string[], number] => [[s.state], 1])));

  // each conversation's repository instructions as read at its run's start, and what its user messages trigger
  const repoInstructions = new Map<string, { loaded: RepoInstructions | null; users: number; texts: string[] }>();
  const shellEnv = async (id: string): Promise<Record<string, string>> => {
    const providers = await settings.getProviders();
    const secrets = { ...(await settings.secretValues()), ...(await conversationSecretValues(conversations, settings, id)) };
    return { ...secrets, ...gitCredentialEnv(providers), ...(await askpassEnv(providers, helperDir)) };
  };

  const runtime = new AgentRuntimeImpl(
    conversations,
    events,
    redactor,
    {
      maxIterations: config.maxIterations,
      async llm(id) {
        const s = await settings.getLlmSettings();
        // the conversation's own (agent.llm of an agent-server create), field by field over the server's
        const own = await conversationLlm(conversations, settings, id);
        const model = own?.model ?? s.llm_model ?? config.llm.model;
        if (!model) return null;
        const apiKey = own?.apiKey ?? s.llm_api_key ?? config.llm.apiKey;
        const baseUrl = own?.baseUrl ?? s.llm_base_url ?? config.llm.baseUrl;
        const key = JSON.stringify([model, apiKey, baseUrl]);
        let c = llmCache.get(key);
        if (!c) {
          const { createLlmClient } = await import('../llm/provider.js');
          llmCache.set(key, (c = instrumentLlm(createLlmClient({ model, apiKey, baseUrl, contextWindow: config.llm.contextWindow }))));
        }
        return c;
      },
      async tools(id) {
        cancelIdleClose(id);
        // (the start-up probe of the sandbox runs while the daemon already listens)
        await sandbox.ready;
        // a conversation whose sandbox was closed while idle gets it back, and its shell, while the LLM answers
        sandbox.prewarm(id);
        void shellEnv(id).then(
          (env) => terminal.prewarm({ conversationId: id, workspaceDir: workspacePath(config.workspaceRoot, id), env }),
          () => {},
        );
        return [...builtins, ...((await (await mcpFor(id)).tools()) as Tool[])];
      },
      workspaceDir: (id) => workspacePath(config.workspaceRoot, id),
      workspaceView: (id) => ({ dir: sandbox.visibleWorkspace(workspacePath(config.workspaceRoot, id)), sandboxed: sandbox.enabled }),
      env: shellEnv,
      limits: (id) => conversationLimits(conversations, id),
      usage: (id, usage) => recordUsage(conversations, id, usage),
      async instructions(id, userTexts, reload) {
        const conv = await conversations.require(id);
        const out: string[] = [];
        // large instructions are not kept in memory (Conversations.field reads them from the store)
        const ci = await conversations.field(conv, 'conversation_instructions');
        if (ci) out.push(`Instructions for this conversation:\n${ci}`);
        const { selected_repository: repo, branch, selected_branch } = conv.record.data;
        if (repo) out.push(`The repository ${repo} is checked out in the working directory (branch ${branch ?? selected_branch ?? 'default'}).`);
        // the repository's files are read at a run's first step, not at every step
        let cached = repoInstructions.get(id);
        if (!cached || reload) {
          // (no workspace yet: nothing to read, and no sandbox started for it)
          const loaded = fs.existsSync(workspacePath(config.workspaceRoot, id)) ? await loadRepoInstructions(sandbox.files(id)).catch(() => null) : null;
          repoInstructions.set(id, (cached = { loaded, users: -1, texts: [] }));
        }
        if (!cached.loaded) return out;
        if (cached.users !== userTexts.length) {
          const always = cached.loaded.always.map((a) => `Repository instructions (${a.source}):\n${a.content}`);
          const triggered = selectTriggered(cached.loaded.triggered, userTexts.join('\n')).map((t) => `Knowledge (${t.source}):\n${t.content}`);
          cached.texts = [...always, ...triggered];
          cached.users = userTexts.length;
        }
        return [...out, ...cached.texts];
      },
      async release(id) {
        repoInstructions.delete(id);
        for (const t of builtins) await t.closeConversation?.(id); // the terminal's shell among them
        // full terminal outputs hold what the commands printed: they go with the conversation
        await rm(outputDir(id), { recursive: true, force: true }).catch(() => {});
        cancelIdleClose(id);
        await mcpCreating.get(id)?.catch(() => null);
        await mcp.get(id)?.close();
        mcp.delete(id);
        await sandbox.closeConversation(id);
      },
      async interrupted(id) {
        // everything the conversation runs stops: the shell (background jobs included), setup.sh, MCP servers
        await terminal.closeConversation(id);
        await mcp.get(id)?.close();
        await sandbox.closeConversation(id);
      },
      async releaseAll() {
        for (const id of [...idleTimers.keys()]) cancelIdleClose(id);
        await terminal.closeAll();
        await mcpModule?.McpManager.closeAll();
      },
      idle(id) {
        scheduleIdleClose(id);
      },
    },
    log,
  );
  return {
    runtime,
    mcpStatus: async (id) => (mcp.get(id) ?? (await mcpFor(id))).status(),
    async replay(id, workspaceDir, plan, signal) {
      const env = await shellEnv(id);
      return executeReplay({
        events,
        redact: (t) => redactor.redact(t),
        conversationId: id,
        workspaceDir,
        visibleDir: sandbox.visibleWorkspace(workspaceDir),
        files: sandbox.files(id, workspaceDir),
        plan,
        tools: builtins,
        env,
        signal,
      });
    },
  };
}
