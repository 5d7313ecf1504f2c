/**
 * A conversation's MCP servers (`conv.mcp`): its manager (src/tools/mcp/manager.ts), created once on
 * first use even when a run and a status request race for it, its servers started by the first
 * `tools()`, reported as events, and stopped MCP_IDLE_CLOSE_MS after a run ended with no other run
 * (`close('idle')` of the conversation: the next run starts them again).
 */
import type { Logger } from 'pino';
import type { EventLog } from '../events/log.js';
import { stateUpdate } from '../events/schema.js';
import { mcpSecretValues, mergeMcpConfig, type FullMcpConfig } from '../secrets/mcp-config.js';
import type { Redactor } from '../secrets/redact.js';
import type { McpManager, McpServerStatus } from '../tools/mcp/manager.js';
import type { Tool } from '../tools/types.js';
import type { ConversationSandbox } from './conversation-sandbox.js';

/** What every conversation's MCP servers share. */
export interface McpParts {
  events: Pick<EventLog, 'append'>;
  redactor: Redactor;
  /** The conversation's MCP configuration, secrets opened. */
  config(id: string): Promise<FullMcpConfig>;
  /** The conversation's workspace on the host (stdio servers start there). */
  workspaceDir(id: string): string;
  /** MCP_ALLOWED_HOSTS. */
  allowedHosts: string[] | null;
  /** Names MCP tools may not take (the built-in tools'). */
  reservedNames: string[];
  /** MCP_IDLE_CLOSE_MS (0: never). */
  idleCloseMs: number;
  log: Logger;
}

/** The conversation the servers are of. */
interface McpOwner {
  readonly id: string;
  readonly sandbox: Pick<ConversationSandbox, 'launcher'>;
  /** A run under way keeps its servers. */
  readonly run: unknown;
  close(reason: 'idle'): Promise<void>;
}

// the MCP SDK loads on first use: a daemon starts (and idles) without it
let mcpModule: typeof import('../tools/mcp/manager.js') | null = null;
const loadMcp = async () => (mcpModule ??= await import('../tools/mcp/manager.js'));

/** Every manager of the process stops (daemon stop), those of conversations no longer loaded too. */
export async function closeAllMcp(): Promise<void> {
  await mcpModule?.McpManager.closeAll();
}

export class McpServers {
  private manager: McpManager | null = null;
  /** Its configuration names no server: there is no manager, and the MCP SDK is not loaded for it. */
  private none = false;
  private creating: Promise<McpManager | null> | null = null;
  private idleTimer: NodeJS.Timeout | null = null;

  constructor(
    private readonly owner: McpOwner,
    private readonly parts: McpParts,
  ) {}

  /** The manager, created once (its config read and its secrets added to the redactor first); null when the config names no server. */
  get(): Promise<McpManager | null> {
    if (this.manager || this.none) return Promise.resolve(this.manager);
    this.creating ??= this.create().finally(() => (this.creating = null));
    return this.creating;
  }

  private async create(): Promise<McpManager | null> {
    const { parts, owner } = this;
    const id = owner.id;
    const stored = await parts.config(id);
    // the conversation's own keys and env values are secrets for every exit (also after a restart)
    parts.redactor.add(...mcpSecretValues(stored));
    if (stored.sse_servers.length + stored.stdio_servers.length + stored.shttp_servers.length === 0) {
      this.none = true;
      return null;
    }
    const { McpManager } = await loadMcp();
    const created = new McpManager({
      // normalised: duplicate urls (`http://h:1` and `http://h:1/`) and names collapse, the later wins
      config: mergeMcpConfig(null, stored),
      workspaceDir: parts.workspaceDir(id),
      launcher: owner.sandbox.launcher(),
      allowedHosts: parts.allowedHosts,
      conversationId: id,
      reservedNames: parts.reservedNames,
      redact: (t) => parts.redactor.redact(t),
      onEvent: (ev) => {
        if (ev.type === 'server_failed') {
          void parts.events.append(id, {
            kind: 'ConversationErrorEvent',
            source: 'environment',
            code: 'MCPServerFailed',
            detail: `MCP server ${ev.server} is unavailable: ${ev.error}`,
            server: ev.server,
          });
        } else {
          void parts.events.append(id, stateUpdate('mcp', ev));
        }
      },
    });
    this.manager = created;
    return created;
  }

  /** The tools of its servers (starting them when they are not). */
  async tools(): Promise<Tool[]> {
    this.cancelIdleClose();
    const manager = await this.get();
    return manager ? ((await manager.tools()) as Tool[]) : [];
  }

  /** The state of each server (starting them when they are not). */
  async status(): Promise<McpServerStatus[]> {
    return (this.manager ?? (await this.get()))?.status() ?? [];
  }

  /** The servers' states now, without starting anything (metrics). */
  statesNow(): McpServerStatus['state'][] {
    return this.manager?.status().map((s) => s.state) ?? [];
  }

  /** Servers run or are being created: the conversation is kept loaded. */
  get active(): boolean {
    return this.creating !== null || this.statesNow().some((s) => s === 'starting' || s === 'ready');
  }

  /** A run ended and no other followed: the servers stop after MCP_IDLE_CLOSE_MS unless a run starts. */
  idleLater(): void {
    this.cancelIdleClose();
    const m = this.manager;
    const ms = this.parts.idleCloseMs;
    if (!m || ms <= 0) return;
    const t = setTimeout(() => {
      this.idleTimer = null;
      if (this.owner.run || this.manager !== m) return;
      this.parts.log.debug({ conversation_id: this.owner.id }, 'closing the MCP servers of an idle conversation');
      void this.owner
        .close('idle')
        .catch((err) => this.parts.log.warn({ conversation_id: this.owner.id, err: this.parts.redactor.redact(String(err)) }, 'closing MCP servers failed'));
    }, ms);
    t.unref();
    this.idleTimer = t;
    this.parts.log.debug({ conversation_id: this.owner.id, ms }, 'the MCP servers of an idle conversation close if it stays idle');
  }

  /** A run starts: the servers stay. */
  cancelIdleClose(): void {
    if (this.idleTimer) clearTimeout(this.idleTimer);
    this.idleTimer = null;
  }

  /** Stops every server (stdio process groups included); the next `tools()` starts them again. */
  async close(): Promise<void> {
    this.cancelIdleClose();
    await this.manager?.close();
  }

  /** The conversation is deleted: a manager being created is waited for, then every server stops. */
  async dispose(): Promise<void> {
    this.cancelIdleClose();
    await this.creating?.catch(() => null);
    await this.manager?.close();
    this.manager = null;
  }
}
