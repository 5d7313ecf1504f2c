/**
 * Plugs the agent into the conversation service: the LLM (run-time settings, else the
 * environment), the built-in and MCP tools, workspace preparation (clone, setup script,
 * instructions) and the per-conversation resources released on delete or stop.
 */
import path from 'node:path';
import type { Logger } from 'pino';
import type { Config } from '../config.js';
import type { ConversationService } from '../conversation/service.js';
import type { ParleyEvent } from '../events/types.js';
import { createLlmClient } from '../llm/provider.js';
import type { LlmClient } from '../llm/types.js';
import { createFileEditorTool } from '../tools/file-editor.js';
import { createFinishTool } from '../tools/finish.js';
import { McpManager } from '../tools/mcp/manager.js';
import { createTaskTrackerTool } from '../tools/task-tracker.js';
import { createTerminalTool } from '../tools/terminal.js';
import { createThinkTool } from '../tools/think.js';
import type { Tool } from '../tools/types.js';
import {
  askpassEnv,
  cloneRepository,
  createMicroagentMessage,
  createWorkspace,
  gitCredentialEnv,
  loadRepoInstructions,
  removeWorkspace,
  runSetupScript,
  selectTriggered,
  suggestedTaskMessage,
  workspacePath,
} from '../workspace/index.js';
import { AgentRuntimeImpl } from './runtime.js';

export async function attachAgent(service: ConversationService, config: Config, log: Logger): Promise<void> {
  const terminal = createTerminalTool({ outputDir: (id) => path.join(config.dataDir, 'outputs', id) });
  const builtins: Tool[] = [terminal, createFileEditorTool(), createTaskTrackerTool(), createThinkTool(), createFinishTool()] as Tool[];
  const reserved = builtins.map((t) => t.name);
  const mcp = new Map<string, McpManager>();
  const helperDir = path.join(config.dataDir, 'helpers');
  const llmCache = new Map<string, LlmClient>();

  async function mcpFor(id: string): Promise<McpManager> {
    let m = mcp.get(id);
    if (!m) {
      const cfg = await service.conversationMcpConfig(id);
      m = new McpManager({
        config: cfg as ConstructorParameters<typeof McpManager>[0]['config'],
        workspaceDir: workspacePath(config.workspaceRoot, id),
        conversationId: id,
        reservedNames: reserved,
        redact: (t) => service.redactor.redact(t),
        onEvent: (ev) => {
          if (ev.type === 'server_failed') {
            void service.append(id, { kind: 'ConversationErrorEvent', source: 'environment', code: 'MCPServerFailed', detail: `MCP server ${ev.server} is unavailable: ${ev.error}`, server: ev.server });
          } else {
            void service.append(id, { kind: 'ConversationStateUpdateEvent', source: 'environment', key: 'mcp', value: ev });
          }
        },
      });
      mcp.set(id, m);
    }
    return m;
  }
  service.mcpStatus = async (id) => (mcp.get(id) ?? (await mcpFor(id))).status();

  const runtime = new AgentRuntimeImpl(
    service,
    {
      maxIterations: config.maxIterations,
      async llm() {
        const s = await service.getLlmSettings();
        const model = s.llm_model ?? config.llm.model;
        if (!model) return null;
        const apiKey = s.llm_api_key ?? config.llm.apiKey;
        const baseUrl = s.llm_base_url ?? config.llm.baseUrl;
        const key = JSON.stringify([model, apiKey, baseUrl]);
        let c = llmCache.get(key);
        if (!c) llmCache.set(key, (c = createLlmClient({ model, apiKey, baseUrl, contextWindow: config.llm.contextWindow })));
        return c;
      },
      async tools(id) {
        return [...builtins, ...((await (await mcpFor(id)).tools()) as Tool[])];
      },
      workspaceDir: (id) => workspacePath(config.workspaceRoot, id),
      async env(id) {
        const providers = await service.getProviders();
        const secrets = await service.secretValues();
        return { ...secrets, ...gitCredentialEnv(providers), ...(await askpassEnv(providers, helperDir)) };
        void id;
      },
      async instructions(id, events) {
        const conv = await service.require(id);
        const out: string[] = [];
        const ci = conv.record.data.conversation_instructions as string | null;
        if (ci) out.push(`Instructions for this conversation:\n${ci}`);
        const repo = conv.record.data.selected_repository as string | null;
        if (repo) out.push(`The repository ${repo} is checked out in the working directory (branch ${String(conv.record.data.branch ?? conv.record.data.selected_branch ?? 'default')}).`);
        try {
          const loaded = await loadRepoInstructions(workspacePath(config.workspaceRoot, id));
          for (const a of loaded.always) out.push(`Repository instructions (${a.source}):\n${a.content}`);
          const userText = events.filter((e) => e.kind === 'MessageEvent' && e.source === 'user').map((e) => JSON.stringify((e as ParleyEvent).llm_message)).join('\n');
          for (const t of selectTriggered(loaded.triggered, userText)) out.push(`Knowledge (${t.source}):\n${t.content}`);
        } catch {
          /* no workspace yet */
        }
        return out;
      },
      async release(id) {
        await terminal.closeConversation(id);
        for (const t of builtins) await t.closeConversation?.(id);
        await mcp.get(id)?.close();
        mcp.delete(id);
      },
    },
    log,
  );
  service.runtime = runtime;
  const baseClose = runtime.close.bind(runtime);
  runtime.close = async () => {
    await baseClose();
    await terminal.closeAll();
    await McpManager.closeAll();
  };

  service.preparer = {
    async prepare(id) {
      const conv = await service.require(id);
      const d = conv.record.data;
      // phases are reported as events when there is real work (a clone, a setup script);
      // a conversation without a repository only gets its directory
      const repoWork = !!d.selected_repository;
      const phase = async (p: string, detail?: string) => {
        await service.updateData(id, { setup: { phase: p, ...(detail ? { detail } : {}) } });
        if (repoWork || p === 'error') {
          await service.append(id, { kind: 'ConversationStateUpdateEvent', source: 'environment', key: 'setup', value: { phase: p, ...(detail ? { detail } : {}) } });
        }
      };
      await phase('preparing');
      const dir = await createWorkspace(config.workspaceRoot, id);
      try {
        const repo = d.selected_repository as string | null;
        if (repo) {
          const providers = await service.getProviders();
          const res = await cloneRepository({
            workspaceDir: dir,
            repository: repo,
            provider: (d.git_provider as never) ?? null,
            providers,
            branch: (d.selected_branch as string | null) ?? null,
            helperDir,
            redact: (t) => service.redactor.redact(t),
            onPhase: (p, detail) => void phase(p === 'ready' ? 'cloned' : p, detail),
          });
          await service.updateData(id, { branch: res.branch });
          const secrets = await service.secretValues();
          const setup = await runSetupScript(dir, {
            env: { ...secrets, ...gitCredentialEnv(providers) },
            redact: (t) => service.redactor.redact(t),
            onOutput: (chunk) => service.publishTransient(id, { kind: 'SetupOutputEvent', source: 'environment', output: chunk }),
          });
          if (setup.ran) {
            await service.append(id, { kind: 'ConversationStateUpdateEvent', source: 'environment', key: 'setup_script', value: { exit_code: setup.exitCode, timed_out: setup.timedOut, output: setup.output.slice(-20000) } });
          }
        }
      } catch (err) {
        const detail = service.redactor.redact((err as Error)?.message ?? String(err));
        await phase('error', detail);
        await service.append(id, { kind: 'ConversationErrorEvent', source: 'environment', code: (err as { code?: string }).code ?? 'WorkspaceSetupFailed', detail });
        await service.setStatus(id, 'error');
        return;
      }
      // the first message from a template, when the request asked for one
      const task = d.suggested_task as Parameters<typeof suggestedTaskMessage>[0] | null;
      const micro = d.create_microagent as { repo: string; title?: string | null } | null;
      let first: string | null = null;
      if (task) first = suggestedTaskMessage({ ...task, git_provider: task.git_provider ?? (d.git_provider as never) ?? undefined });
      else if (micro) first = createMicroagentMessage(micro);
      if (first) await service.append(id, { kind: 'MessageEvent', source: 'user', llm_message: { role: 'user', content: [{ type: 'text', text: first, cache_prompt: false }] } });
      await phase('ready');
      const wantsRun = !!(d.run_requested || first);
      delete conv.record.data.run_requested;
      if (wantsRun) runtime.start(id);
    },
    async dispose(id) {
      if (!config.keepWorkspaces) await removeWorkspace(workspacePath(config.workspaceRoot, id)).catch(() => {});
    },
  };
}
