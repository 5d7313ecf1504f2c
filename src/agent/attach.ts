/**
 * Plugs the agent into the conversation service: the LLM (run-time settings, else the
 * environment), the built-in and MCP tools, workspace preparation (clone, setup script,
 * instructions) and the per-conversation resources released on delete or stop.
 */
import { rm } from 'node:fs/promises';
import fs from 'node:fs';
import path from 'node:path';
import type { Logger } from 'pino';
import type { Config } from '../config.js';
import { conversationLimits, conversationLlm, conversationSecretValues, recordUsage } from '../conversation/agent-server.js';
import type { ConversationService } from '../conversation/service.js';
import type { ParleyEvent } from '../events/types.js';
import type { LlmClient } from '../llm/types.js';
import { metrics } from '../metrics.js';
import { createFileEditorTool } from '../tools/file-editor.js';
import { createFinishTool } from '../tools/finish.js';
import { mcpSecretValues, mergeMcpConfig } from '../tools/mcp/config.js';
import type { McpManager } from '../tools/mcp/manager.js';
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
import { instrumentLlm } from './instrument.js';
import { executeReplay } from './replay-run.js';
import { AgentRuntimeImpl } from './runtime.js';

export async function attachAgent(service: ConversationService, config: Config, log: Logger): Promise<void> {
  const sandbox = service.sandbox;
  const terminal = createTerminalTool({ outputDir: (id) => path.join(config.dataDir, 'outputs', id), noOutputTimeoutMs: config.terminalNoOutputTimeoutMs, sandbox });
  // file_editor sees exactly the workspace, at the path the shell sees it
  const fileEditor = createFileEditorTool({
    view: (ctx) => {
      fs.mkdirSync(ctx.workspaceDir, { recursive: true, mode: 0o700 }); // created on first use
      return sandbox.pathView(ctx.workspaceDir);
    },
  });
  const builtins: Tool[] = [terminal, fileEditor, createTaskTrackerTool(), createThinkTool(), createFinishTool()] as Tool[];
  const reserved = builtins.map((t) => t.name);
  const mcp = new Map<string, McpManager>();
  const helperDir = path.join(config.dataDir, 'helpers');
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
        const stored = await service.conversationMcpConfig(id);
        // the conversation's own keys and env values are secrets for every exit (also after a restart)
        service.redactor.add(...mcpSecretValues(stored));
        const { McpManager } = await loadMcp();
        const created = new McpManager({
          // normalised: duplicate urls (`http://h:1` and `http://h:1/`) and names collapse, the later wins
          config: mergeMcpConfig(null, stored),
          workspaceDir: workspacePath(config.workspaceRoot, id),
          launcher: sandbox.forConversation(id),
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
      void m.close().catch((err) => log.warn({ conversation_id: id, err: service.redactor.redact(String(err)) }, 'closing MCP servers failed'));
    }, config.mcpIdleCloseMs);
    t.unref();
    idleTimers.set(id, t);
  }
  metrics.mcpServers.read(() => [...mcp.values()].flatMap((m) => m.status().map((s): [string[], number] => [[s.state], 1])));
  service.mcpStatus = async (id) => (mcp.get(id) ?? (await mcpFor(id))).status();

  const runtime = new AgentRuntimeImpl(
    service,
    {
      maxIterations: config.maxIterations,
      async llm(id) {
        const s = await service.getLlmSettings();
        // the conversation's own (agent.llm of an agent-server create), field by field over the server's
        const own = await conversationLlm(service, id);
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
        return [...builtins, ...((await (await mcpFor(id)).tools()) as Tool[])];
      },
      workspaceDir: (id) => workspacePath(config.workspaceRoot, id),
      workspaceView: (id) => ({ dir: sandbox.visibleWorkspace(workspacePath(config.workspaceRoot, id)), sandboxed: sandbox.enabled }),
      async env(id) {
        const providers = await service.getProviders();
        const secrets = { ...(await service.secretValues()), ...(await conversationSecretValues(service, id)) };
        return { ...secrets, ...gitCredentialEnv(providers), ...(await askpassEnv(providers, helperDir)) };
      },
      limits: (id) => conversationLimits(service, id),
      usage: (id, usage) => recordUsage(service, id, usage),
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
          const userText = events.flatMap((e) => (e.kind === 'MessageEvent' && e.source === 'user' ? [JSON.stringify(e.llm_message)] : [])).join('\n');
          for (const t of selectTriggered(loaded.triggered, userText)) out.push(`Knowledge (${t.source}):\n${t.content}`);
        } catch {
          /* no workspace yet */
        }
        return out;
      },
      async release(id) {
        replays.get(id)?.abort(); // a replay under way stops before its shell is closed
        await terminal.closeConversation(id);
        for (const t of builtins) await t.closeConversation?.(id);
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
      idle(id) {
        scheduleIdleClose(id);
      },
    },
    log,
  );
  service.runtime = runtime;
  const baseClose = runtime.close.bind(runtime);
  runtime.close = async () => {
    await baseClose();
    for (const id of [...idleTimers.keys()]) cancelIdleClose(id);
    await terminal.closeAll();
    await mcpModule?.McpManager.closeAll();
  };

  // replays under way, stopped when their conversation is deleted
  const replays = new Map<string, AbortController>();
  service.preparer = {
    async prepare(id, opts) {
      const conv = await service.require(id);
      // conv.record.data is replaced by every update: read it fresh, never through a saved reference
      const d = conv.record.data;
      // phases are reported as events when there is real work (a clone, a setup script, a replay);
      // a conversation without a repository only gets its directory
      const visible = !!d.selected_repository || !!opts?.replay;
      const phase = async (p: string, detail?: string) => {
        await service.updateData(id, { setup: { phase: p, ...(detail ? { detail } : {}) } });
        if (visible || p === 'error') {
          await service.append(id, { kind: 'ConversationStateUpdateEvent', source: 'environment', key: 'setup', value: { phase: p, ...(detail ? { detail } : {}) } });
        }
      };
      const fail = async (err: unknown, fallbackCode: string) => {
        const detail = service.redactor.redact((err as Error)?.message ?? String(err));
        await phase('error', detail);
        await service.append(id, { kind: 'ConversationErrorEvent', source: 'environment', code: (err as { code?: string }).code ?? fallbackCode, detail });
        await service.setStatus(id, 'error');
      };
      await phase('preparing');
      // the directory is made when something needs it (a clone, a replay, the first command or file)
      const dir = visible ? await createWorkspace(config.workspaceRoot, id) : workspacePath(config.workspaceRoot, id);
      let first: string | null = null;
      try {
        const repo = d.selected_repository as string | null;
        if (repo) {
          const providers = await service.getProviders();
          // clone phases are recorded in the order they happen
          let phases = Promise.resolve();
          const res = await cloneRepository({
            workspaceDir: dir,
            repository: repo,
            provider: (d.git_provider as never) ?? null,
            providers,
            branch: (d.selected_branch as string | null) ?? null,
            helperDir,
            allowedHosts: config.gitAllowedHosts,
            sandbox: sandbox.forConversation(id),
            redact: (t) => service.redactor.redact(t),
            onPhase: (p, detail) => {
              phases = phases.then(() => phase(p === 'ready' ? 'cloned' : p, detail));
            },
          }).finally(() => phases);
          await service.updateData(id, { branch: res.branch });
          const secrets = await service.secretValues();
          const setup = await runSetupScript(dir, {
            env: { ...secrets, ...gitCredentialEnv(providers) },
            launch: sandbox.forConversation(id),
            redact: (t) => service.redactor.redact(t),
            onOutput: (chunk) => service.publishTransient(id, { kind: 'SetupOutputEvent', source: 'environment', output: chunk }),
          });
          if (setup.ran) {
            await service.append(id, { kind: 'ConversationStateUpdateEvent', source: 'environment', key: 'setup_script', value: { exit_code: setup.exitCode, timed_out: setup.timedOut, output: setup.output.slice(-20000) } });
          }
        }
        // the first message from a template, when the request asked for one (checked at creation)
        const task = d.suggested_task as Parameters<typeof suggestedTaskMessage>[0] | null;
        const micro = d.create_microagent as { repo: string; title?: string | null } | null;
        if (task) first = suggestedTaskMessage({ ...task, git_provider: task.git_provider ?? (d.git_provider as never) ?? undefined });
        else if (micro) first = createMicroagentMessage(micro);
      } catch (err) {
        await fail(err, 'WorkspaceSetupFailed');
        return;
      }
      if (opts?.replay) {
        const controller = new AbortController();
        replays.set(id, controller);
        try {
          await phase('replaying', `${opts.replay.steps.length} recorded step(s)`);
          await service.setStatus(id, 'running');
          const providers = await service.getProviders();
          const env = { ...(await service.secretValues()), ...gitCredentialEnv(providers), ...(await askpassEnv(providers, helperDir)) };
          const res = await executeReplay({ service, conversationId: id, workspaceDir: dir, visibleDir: sandbox.visibleWorkspace(dir), plan: opts.replay, tools: builtins, env, signal: controller.signal });
          if (controller.signal.aborted) return;
          await service.setStatus(id, res.actions > 0 || opts.replay.steps.length > 0 ? 'finished' : 'idle');
        } catch (err) {
          if (controller.signal.aborted) return;
          await fail(err, 'ReplayFailed');
          return;
        } finally {
          replays.delete(id);
        }
      }
      if (first) await service.append(id, { kind: 'MessageEvent', source: 'user', llm_message: { role: 'user', content: [{ type: 'text', text: first, cache_prompt: false }] } });
      await phase('ready');
      // requested at creation, or by a message sent while preparing (startRun sets it)
      const wantsRun = !!(conv.record.data.run_requested || first);
      delete conv.record.data.run_requested;
      if (wantsRun) {
        if (service.status(id) === 'finished') await service.setStatus(id, 'idle');
        runtime.start(id);
      }
    },
    async dispose(id) {
      replays.get(id)?.abort();
      if (!config.keepWorkspaces) await removeWorkspace(workspacePath(config.workspaceRoot, id)).catch(() => {});
      // full terminal outputs hold what the commands printed: they go with the conversation
      await rm(path.join(config.dataDir, 'outputs', id), { recursive: true, force: true }).catch(() => {});
    },
  };
  await service.resumePreparations();
}
