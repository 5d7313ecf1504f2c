/**
 * The tools a conversation's run is offered: the built-in ones of the catalog (one executor each,
 * in the catalog's order) and its MCP servers' (`conv.mcp`), and the environment its processes get
 * (secrets, provider tokens, the git askpass helper).
 */
import { rm } from 'node:fs/promises';
import path from 'node:path';
import type { EventLog } from '../events/log.js';
import { BUILTIN_TOOLS, type BuiltinToolName } from '../events/tool-catalog.js';
import { metrics } from '../metrics.js';
import type { Sandbox } from '../sandbox/index.js';
import { workspacePath } from '../sandbox/workspace-dir.js';
import type { Settings } from '../secrets/settings.js';
import { createFileEditorTool } from '../tools/file-editor.js';
import { createFinishTool } from '../tools/finish.js';
import { createTaskTrackerTool, lastTaskList } from '../tools/task-tracker.js';
import type { ShellPool } from '../tools/terminal/pool.js';
import { createTerminalTool, type TerminalTool } from '../tools/terminal/tool.js';
import { createThinkTool } from '../tools/think.js';
import type { Tool } from '../tools/types.js';
import { askpassEnv, gitCredentialEnv } from '../workspace/askpass.js';
import { secretValuesOf, type LoadedConversation } from './conversation-data.js';
import type { AgentConversation, AgentConversations } from './live-conversation.js';
import { McpServers, type McpParts } from './mcp-servers.js';

/** The built-in tools, made once for every conversation (before the conversations: they hold its shell and editor history). */
export interface BuiltinTools {
  /** In the catalog's order. */
  list: Tool[];
  terminal: TerminalTool;
  /** The conversations' shells (the terminal's pool). */
  shells: ShellPool;
  /** The conversation is deleted: the tools forget it (the file editor's undo history) and its saved outputs go. */
  forget(conversationId: string): Promise<void>;
  /** The daemon stops: every shell ends. */
  closeAll(): Promise<void>;
}

interface BuiltinParts {
  sandbox: Sandbox;
  events: Pick<EventLog, 'query'>;
  dataDir: string;
  /** TERMINAL_NO_OUTPUT_TIMEOUT_MS. */
  noOutputTimeoutMs: number;
  /** SANDBOX_IDLE_CLOSE_MS: a shell without a command for this long is closed. */
  idleCloseMs: number | undefined;
}

export function builtinTools({ sandbox, events, dataDir, noOutputTimeoutMs, idleCloseMs }: BuiltinParts): BuiltinTools {
  const outputDir = (id: string) => path.join(dataDir, 'outputs', id);
  const terminal = createTerminalTool({ outputDir, noOutputTimeoutMs, idleCloseMs, sandbox });
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
  return {
    list: BUILTIN_TOOLS.map((t) => executors[t.name]) as Tool[],
    terminal,
    shells: terminal.pool,
    async forget(id) {
      fileEditor.closeConversation(id);
      // full terminal outputs hold what the commands printed: they go with the conversation
      await rm(outputDir(id), { recursive: true, force: true }).catch(() => {});
    },
    closeAll: () => terminal.pool.closeAll(),
  };
}

interface ToolBoxParts {
  builtins: BuiltinTools;
  conversations: AgentConversations;
  /** What every conversation's MCP servers share. */
  mcp: Omit<McpParts, 'reservedNames'>;
  settings: Pick<Settings, 'getProviders' | 'secretValues' | 'unseal'>;
  workspaceRoot: string;
  /** Where the git askpass helper is. */
  helperDir: string;
}

export class ToolBox {
  private readonly mcp: McpParts;

  constructor(private readonly p: ToolBoxParts) {
    this.mcp = { ...p.mcp, reservedNames: p.builtins.list.map((t) => t.name) };
    metrics.mcpServers.read(() => [...p.conversations.each()].flatMap((c) => c.mcp?.statesNow().map((s): [string[], number] => [[s], 1]) ?? []));
  }

  get builtins(): Tool[] {
    return this.p.builtins.list;
  }

  /** The conversation's MCP servers (made on first use). */
  mcpOf(conv: AgentConversation): McpServers {
    conv.mcp ??= new McpServers(conv, this.mcp);
    return conv.mcp;
  }

  /** A run begins: its tools (its MCP servers start; their idle close is called off). */
  async forRun(conv: AgentConversation): Promise<Tool[]> {
    const mcp = this.mcpOf(conv);
    mcp.cancelIdleClose();
    // the start-up probe of the sandbox runs while the daemon already listens: what the system prompt
    // says of the workspace (its path, whether it is sandboxed) is known once it has decided
    await conv.sandbox.ready;
    return [...this.builtins, ...(await mcp.tools())];
  }

  /**
   * The LLM is taking its time: a conversation whose sandbox is not up (never started, or closed while
   * idle) gets it back now, and its shell, so that a tool call in the answer does not wait for them.
   */
  async prewarm(conv: AgentConversation): Promise<void> {
    conv.sandbox.prewarm();
    const env = await this.env(conv);
    this.p.builtins.terminal.prewarm({ conversationId: conv.id, workspaceDir: workspacePath(this.p.workspaceRoot, conv.id), env });
  }

  /** A run ended and no other followed: its MCP servers stop after MCP_IDLE_CLOSE_MS. */
  idle(conv: AgentConversation): void {
    conv.mcp?.idleLater();
  }

  /** The environment of the conversation's processes: the secrets (server's, then its own), git provider tokens, the askpass helper. */
  async env(conv: LoadedConversation): Promise<Record<string, string>> {
    const { settings } = this.p;
    const providers = await settings.getProviders();
    const secrets = { ...(await settings.secretValues()), ...secretValuesOf(conv, settings) };
    return { ...secrets, ...gitCredentialEnv(providers), ...(await askpassEnv(providers, this.p.helperDir)) };
  }
}
