/**
 * McpManager: the MCP servers of ONE conversation, offered to its agent as tools.
 *
 * Lifecycle
 *  - Construct one per conversation with the effective config (`mergeMcpConfig(stored, own)`).
 *    Nothing starts until `tools()` is first awaited; then every server is connected in parallel,
 *    each within its timeout (shttp `timeout` seconds, else `connectTimeoutMs`, default 30 s).
 *  - A server that fails to start is reported (`server_failed`) and left out; it is not retried
 *    until the manager is closed and used again (the next run after the conversation went idle).
 *  - A server whose connection drops (stdio process crash) is reported (`server_failed`), its tools
 *    stay offered, and it is restarted by the next call of one of its tools.
 *  - `close()` stops everything (stdio process groups included) and returns the manager to the
 *    `configured` state: the next `tools()` reconnects. Call it when the conversation goes idle
 *    or is deleted. `McpManager.closeAll()` closes every manager of the process (daemon stop).
 *    The returned tools' `closeConversation(id)` / `closeAll()` delegate to `close()`.
 *
 * Every text leaving the manager (observations, events, status) goes through `redact` and through
 * a built-in redaction of the config's own api_key/env values.
 *
 * Why one file of this size: a conversation's servers share one lifecycle (connect in parallel, report,
 * restart on the next call, close); splitting it by transport would split that state machine.
 */
import type { ChildProcess } from 'node:child_process';
import { stat } from 'node:fs/promises';
import * as z from 'zod';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { SSEClientTransport, SseError } from '@modelcontextprotocol/sdk/client/sse.js';
import { StreamableHTTPClientTransport, StreamableHTTPError } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import { ErrorCode, McpError, ToolListChangedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import { Redactor } from '../../secrets/redact.js';
import type { Tool, ToolContext } from '../types.js';
import { mcpSecretValues, type McpConfig, type McpShttpServerConfig, type McpSseServerConfig, type McpStdioServerConfig } from './config.js';
import { convertCallResult, normalizeInputSchema, type MCPObservation } from './content.js';
import { assignServerNames, assignToolNames, DEFAULT_RESERVED_TOOL_NAMES } from './naming.js';
import { minimalEnv, StdioProcessTransport } from './stdio.js';

type McpTransportKind = 'stdio' | 'sse' | 'shttp';
type McpServerState = 'configured' | 'starting' | 'ready' | 'failed';

export type McpEvent =
  | { type: 'server_failed'; server: string; error: string }
  | { type: 'server_ready'; server: string; tools: string[] }
  | { type: 'tools_changed'; server: string; tools: string[] };

export interface McpServerStatus {
  name: string;
  transport: McpTransportKind;
  state: McpServerState;
  /** Why the server failed (redacted). */
  reason?: string;
  /** The exposed (LLM-visible) names of its tools; empty until it has been listed. */
  tools: string[];
}

interface McpManagerOptions {
  /** The effective config (stored default merged with the conversation's). */
  config: McpConfig | null | undefined;
  /** The conversation's workspace: stdio servers start with this cwd. */
  workspaceDir: string;
  /** Where stdio servers run and the environment they get (the conversation's sandbox, src/sandbox/). */
  launcher?: {
    spawn(argv: string[], opts: { cwd: string; env: Record<string, string> }): ChildProcess;
    env(extra: Record<string, string>): Record<string, string>;
  };
  /** The global redactor. The config's own secrets are always redacted in addition. */
  redact?: (text: string) => string;
  onEvent?: (event: McpEvent) => void;
  /** Tool names MCP tools must not take. Default: terminal, file_editor, task_tracker, think, finish. */
  reservedNames?: readonly string[];
  /** Used by the tools' `closeConversation(id)`: only this id closes the manager. */
  conversationId?: string;
  /** Connect + initialize + list timeout per server (ms). Default 30 000. shttp `timeout` overrides. */
  connectTimeoutMs?: number;
  /** Per-call timeout (ms). Default 300 000. shttp `timeout` overrides. */
  callTimeoutMs?: number;
  /** MCP_ALLOWED_HOSTS: `host` or `host:port` an sse/shttp server may be on; null or absent: any. */
  allowedHosts?: string[] | null;
}

/** A tool backed by an MCP server. `jsonSchema` is the server's inputSchema (prefer it over zod). */
export interface McpTool extends Tool<Record<string, unknown>, McpObservation> {
  jsonSchema: Record<string, unknown>;
  /** Server name (as in status and events). */
  server: string;
  /** The tool's name on its server. */
  mcpName: string;
}

type McpObservation = MCPObservation;

const DEFAULT_CONNECT_TIMEOUT_MS = 30_000;
const DEFAULT_CALL_TIMEOUT_MS = 300_000;

interface ToolDef {
  name: string;
  description?: string;
  title?: string;
  inputSchema: unknown;
}

interface Session {
  client: Client;
  transport: Transport;
  stdio?: StdioProcessTransport;
  /** True once initialized and until closed/dropped. */
  alive: boolean;
  closing?: Promise<void>;
  refreshing?: Promise<void>;
  refreshAgain?: boolean;
}

interface Entry {
  name: string;
  kind: McpTransportKind;
  stdio?: McpStdioServerConfig;
  http?: McpSseServerConfig | McpShttpServerConfig;
  connectTimeoutMs: number;
  callTimeoutMs: number;
  state: McpServerState;
  reason?: string;
  /** Tools as listed by the server; null until listed. */
  defs: ToolDef[] | null;
  session?: Session;
  connecting?: Promise<Session | null>;
}

class TimeoutError extends Error {
  override name = 'TimeoutError';
}

const permissiveParams = z.record(z.string(), z.unknown());

/** Message of an error and of its `cause` chain (`fetch failed: connect ECONNREFUSED …`). */
function describeError(err: unknown): string {
  const parts: string[] = [];
  let cur: unknown = err;
  for (let i = 0; cur !== undefined && cur !== null && i < 5; i++) {
    let msg = cur instanceof Error ? cur.message : typeof cur === 'string' ? cur : JSON.stringify(cur);
    if ((cur instanceof StreamableHTTPError || cur instanceof SseError) && typeof cur.code === 'number' && !msg.includes(String(cur.code))) {
      msg = `HTTP ${cur.code}: ${msg}`;
    }
    if (msg && !parts.some((p) => p.includes(msg))) parts.push(msg);
    cur = cur instanceof Error ? (cur as Error & { cause?: unknown }).cause : undefined;
  }
  return parts.join(': ') || 'unknown error';
}

/** A promise rejected with the signal's reason once it aborts; `dispose` removes the listener. */
function abortPromise(signal: AbortSignal): { promise: Promise<never>; dispose: () => void } {
  let onAbort = () => {};
  const promise = new Promise<never>((_, reject) => {
    onAbort = () => reject(signal.reason ?? new Error('aborted'));
    if (signal.aborted) onAbort();
    else signal.addEventListener('abort', onAbort, { once: true });
  });
  promise.catch(() => {});
  return { promise, dispose: () => signal.removeEventListener('abort', onAbort) };
}

function timeoutSeconds(ms: number): string {
  return `${Math.round(ms / 100) / 10} s`;
}

export class McpManager {
  private static readonly live = new Set<McpManager>();

  /** Closes every manager of this process (daemon stop). */
  static async closeAll(): Promise<void> {
    await Promise.all([...McpManager.live].map((m) => m.close()));
  }

  readonly conversationId?: string;
  private readonly entries: Entry[];
  private readonly workspaceDir: string;
  private readonly launcher: McpManagerOptions['launcher'];
  private readonly allowedHosts: string[] | null;
  private readonly userRedact: (text: string) => string;
  private readonly ownSecrets = new Redactor();
  private readonly onEvent?: (event: McpEvent) => void;
  private readonly reserved: readonly string[];
  private readonly single: boolean;
  private exposed = new Map<string, Map<string, string>>();
  /** Bumped by close(): work started before a close must not install its results. */
  private generation = 0;
  private readonly sessions = new Set<Session>();
  private readonly inflight = new Set<AbortController>();

  constructor(opts: McpManagerOptions) {
    const cfg = opts.config ?? {};
    this.conversationId = opts.conversationId;
    this.workspaceDir = opts.workspaceDir;
    this.launcher = opts.launcher;
    this.allowedHosts = opts.allowedHosts ?? null;
    this.userRedact = opts.redact ?? ((t) => t);
    this.onEvent = opts.onEvent;
    this.reserved = opts.reservedNames ?? DEFAULT_RESERVED_TOOL_NAMES;
    this.ownSecrets.add(...mcpSecretValues(cfg));

    const connectMs = opts.connectTimeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS;
    const callMs = opts.callTimeoutMs ?? DEFAULT_CALL_TIMEOUT_MS;
    const raw: Omit<Entry, 'name'>[] = [
      ...(cfg.stdio_servers ?? []).map((s) => ({ kind: 'stdio' as const, stdio: s })),
      ...(cfg.sse_servers ?? []).map((s) => ({ kind: 'sse' as const, http: s })),
      ...(cfg.shttp_servers ?? []).map((s) => ({ kind: 'shttp' as const, http: s })),
    ].map((e) => {
      const t = e.kind === 'shttp' ? (e.http as McpShttpServerConfig).timeout : undefined;
      const serverMs = typeof t === 'number' && Number.isFinite(t) && t > 0 ? t * 1000 : undefined;
      return {
        ...e,
        connectTimeoutMs: serverMs ?? connectMs,
        callTimeoutMs: serverMs ?? callMs,
        state: 'configured' as const,
        defs: null,
      };
    });
    const names = assignServerNames(raw.map((e) => ({ kind: e.kind, source: e.stdio?.name ?? e.http?.url ?? '' })));
    this.entries = raw.map((e, i) => ({ ...e, name: names[i]! }));
    this.single = this.entries.length === 1;
  }

  /** Redacts with the global redactor and the config's own secrets. */
  redact(text: string): string {
    return this.ownSecrets.redact(this.userRedact(text));
  }

  /** Server names in config order (stdio, sse, shttp). */
  get serverNames(): string[] {
    return this.entries.map((e) => e.name);
  }

  /**
   * The tools of every available server. The first call connects all servers (in parallel);
   * later calls return the current list (refreshed on `notifications/tools/list_changed`).
   * Never throws: failures are reported through `onEvent` and `status()`.
   */
  async tools(): Promise<McpTool[]> {
    if (this.entries.length === 0) return [];
    McpManager.live.add(this);
    const waits: Promise<unknown>[] = [];
    for (const e of this.entries) {
      if (e.state === 'configured') waits.push(this.ensureConnected(e));
      else if (e.connecting) waits.push(e.connecting);
    }
    await Promise.all(waits);
    return this.buildTools();
  }

  status(): McpServerStatus[] {
    return this.entries.map((e) => {
      const s: McpServerStatus = { name: e.name, transport: e.kind, state: e.state, tools: this.exposedNames(e) };
      if (e.reason !== undefined) s.reason = this.redact(e.reason);
      return s;
    });
  }

  /** Stops every server (stdio process groups included); the manager can be used again. */
  async close(): Promise<void> {
    this.generation++;
    McpManager.live.delete(this);
    for (const a of this.inflight) a.abort(new Error('MCP manager closed'));
    this.inflight.clear();
    for (const e of this.entries) {
      e.session = undefined;
      e.connecting = undefined;
      e.state = 'configured';
      e.reason = undefined;
      e.defs = null;
    }
    this.exposed = new Map();
    const sessions = [...this.sessions];
    await Promise.all(sessions.map((s) => this.closeSession(s)));
  }

  /** Same as close() when `conversationId` is this manager's (or the manager has none). */
  async closeConversation(conversationId: string): Promise<void> {
    if (this.conversationId === undefined || this.conversationId === conversationId) await this.close();
  }

  // ---------------------------------------------------------------------------------------------

  private emit(event: McpEvent): void {
    try {
      this.onEvent?.(event);
    } catch {
      // a listener's failure is not ours to handle
    }
  }

  private exposedNames(e: Entry): string[] {
    const names = this.exposed.get(e.name);
    return e.defs && names ? e.defs.map((d) => names.get(d.name)!).filter(Boolean) : [];
  }

  private renameTools(): void {
    this.exposed = assignToolNames(
      this.entries.filter((e) => e.defs).map((e) => ({ server: e.name, tools: e.defs!.map((d) => d.name) })),
      this.single,
      this.reserved,
    );
  }

  private buildTools(): McpTool[] {
    const out: McpTool[] = [];
    for (const e of this.entries) {
      if (!e.defs) continue;
      const names = this.exposed.get(e.name);
      for (const def of e.defs) {
        const exposed = names?.get(def.name);
        if (exposed) out.push(this.makeTool(e, def, exposed));
      }
    }
    return out;
  }

  private makeTool(entry: Entry, def: ToolDef, exposed: string): McpTool {
    const text = def.description ?? def.title;
    return {
      name: exposed,
      kind: 'MCPToolDefinition',
      actionKind: 'MCPToolAction',
      description: this.redact(text?.trim() ? text : `Tool '${def.name}' of the MCP server '${entry.name}'.`),
      parameters: permissiveParams,
      jsonSchema: normalizeInputSchema(def.inputSchema),
      server: entry.name,
      mcpName: def.name,
      execute: (params, ctx) => this.call(entry, def.name, params, ctx),
      closeConversation: (id) => this.closeConversation(id),
      closeAll: () => this.close(),
    };
  }

  private ensureConnected(e: Entry): Promise<Session | null> {
    if (e.session?.alive) return Promise.resolve(e.session);
    if (!e.connecting) {
      const p = this.connect(e);
      e.connecting = p;
      void p.finally(() => {
        if (e.connecting === p) e.connecting = undefined;
      });
    }
    return e.connecting;
  }

  private makeTransport(e: Entry): { transport: Transport; stdio?: StdioProcessTransport } {
    if (e.kind === 'stdio') {
      const s = e.stdio!;
      const stdio = new StdioProcessTransport({
        command: s.command,
        args: s.args ?? [],
        env: this.launcher ? this.launcher.env(s.env ?? {}) : { ...minimalEnv(), ...(s.env ?? {}) },
        cwd: this.workspaceDir,
        launch: this.launcher && ((argv, o) => this.launcher!.spawn(argv, o)),
      });
      return { transport: stdio, stdio };
    }
    const h = e.http!;
    const url = new URL(h.url);
    const allowed = this.allowedHosts;
    if (allowed && !allowed.includes(url.host.toLowerCase()) && !allowed.includes(url.hostname.toLowerCase())) {
      throw new Error(`host ${url.host} is not in MCP_ALLOWED_HOSTS (${allowed.join(', ') || 'empty'})`);
    }
    const requestInit: RequestInit = h.api_key ? { headers: { Authorization: `Bearer ${h.api_key}` } } : {};
    if (e.kind === 'sse') return { transport: new SSEClientTransport(url, { requestInit }) };
    return { transport: new StreamableHTTPClientTransport(url, { requestInit }) };
  }

  private async connect(e: Entry): Promise<Session | null> {
    const gen = this.generation;
    McpManager.live.add(this);
    e.state = 'starting';
    e.reason = undefined;
    const abort = new AbortController();
    this.inflight.add(abort);
    let session: Session | undefined;
    const timer = setTimeout(() => abort.abort(new TimeoutError(`did not start within ${timeoutSeconds(e.connectTimeoutMs)}`)), e.connectTimeoutMs);
    try {
      if (e.kind === 'stdio' && !this.launcher) {
        // (a launcher creates the workspace on first use)
        const st = await stat(this.workspaceDir).catch(() => null);
        if (!st?.isDirectory()) throw new Error(`workspace directory ${this.workspaceDir} does not exist`);
      }
      if (gen !== this.generation) throw new Error('MCP manager closed');
      const { transport, stdio } = this.makeTransport(e);
      const client = new Client({ name: 'parley', version: '0.1.0' }, { capabilities: {} });
      const s: Session = { client, transport, stdio, alive: false };
      session = s;
      this.sessions.add(s);
      client.onclose = () => this.onSessionClosed(e, s);
      client.onerror = (err) => {
        // The legacy SSE stream broke: the EventSource would silently reconnect into a new,
        // uninitialised session, so drop this one and reconnect properly on the next call.
        // Other transport noise surfaces on the calls themselves.
        if (err instanceof SseError) this.onSessionClosed(e, s);
      };
      client.setNotificationHandler(ToolListChangedNotificationSchema, () => this.onListChanged(e, s));

      const aborted = abortPromise(abort.signal).promise;
      const opts = { signal: abort.signal, timeout: e.connectTimeoutMs };
      await Promise.race([client.connect(transport, opts), aborted]);
      const defs = await Promise.race([this.listAll(client, opts), aborted]);
      if (gen !== this.generation) throw new Error('MCP manager closed');
      s.alive = true;
      e.session = s;
      e.defs = defs;
      e.state = 'ready';
      this.renameTools();
      this.emit({ type: 'server_ready', server: e.name, tools: this.exposedNames(e) });
      return s;
    } catch (err) {
      if (session) await this.closeSession(session);
      if (gen !== this.generation) return null;
      const exit = session?.stdio?.exitDescription();
      let reason: string;
      if (abort.signal.aborted && abort.signal.reason instanceof TimeoutError) reason = abort.signal.reason.message;
      else if (exit && err instanceof McpError && err.code === ErrorCode.ConnectionClosed) reason = exit;
      else reason = describeError(err);
      if (exit && !reason.includes(exit)) reason = `${reason} (${exit})`;
      this.fail(e, `cannot connect to MCP server '${e.name}': ${reason}`);
      return null;
    } finally {
      clearTimeout(timer);
      this.inflight.delete(abort);
    }
  }

  private async listAll(client: Client, opts: { signal: AbortSignal; timeout: number }): Promise<ToolDef[]> {
    const defs: ToolDef[] = [];
    let cursor: string | undefined;
    for (let page = 0; page < 100; page++) {
      const res = await client.listTools(cursor ? { cursor } : undefined, opts);
      for (const t of res.tools) defs.push({ name: t.name, description: t.description, title: t.title, inputSchema: t.inputSchema });
      cursor = res.nextCursor;
      if (!cursor) break;
    }
    return defs;
  }

  private fail(e: Entry, reason: string): void {
    e.state = 'failed';
    e.reason = this.redact(reason);
    this.emit({ type: 'server_failed', server: e.name, error: e.reason });
  }

  /** The connection of a ready server dropped (stdio crash, SSE stream closed). */
  private onSessionClosed(e: Entry, s: Session): void {
    if (!s.alive || e.session !== s) return;
    s.alive = false;
    e.session = undefined;
    const why = s.stdio?.exitDescription() ?? 'connection closed';
    this.fail(e, `MCP server '${e.name}' stopped: ${why}; it will be restarted on the next call`);
    void this.closeSession(s);
  }

  /** Drops a session that is no longer usable so the next call reconnects. */
  private dropSession(e: Entry, s: Session): void {
    if (e.session === s) e.session = undefined;
    s.alive = false;
    void this.closeSession(s);
  }

  private closeSession(s: Session): Promise<void> {
    s.alive = false;
    s.closing ??= (async () => {
      try {
        if (s.transport instanceof StreamableHTTPClientTransport && s.transport.sessionId) {
          await Promise.race([s.transport.terminateSession().catch(() => {}), new Promise((r) => setTimeout(r, 1000).unref())]);
        }
      } catch {
        // ignore
      }
      try {
        await s.client.close();
      } catch {
        // ignore
      }
      try {
        await s.transport.close();
      } catch {
        // ignore
      }
      this.sessions.delete(s);
    })();
    return s.closing;
  }

  private onListChanged(e: Entry, s: Session): void {
    if (e.session !== s || !s.alive) return;
    if (s.refreshing) {
      s.refreshAgain = true;
      return;
    }
    const gen = this.generation;
    s.refreshing = (async () => {
      do {
        s.refreshAgain = false;
        let defs: ToolDef[];
        try {
          const signal = AbortSignal.timeout(e.connectTimeoutMs);
          defs = await this.listAll(s.client, { signal, timeout: e.connectTimeoutMs });
        } catch {
          return; // the next list_changed, or the next reconnect, will list again
        }
        if (gen !== this.generation || e.session !== s) return;
        e.defs = defs;
        this.renameTools();
        this.emit({ type: 'tools_changed', server: e.name, tools: this.exposedNames(e) });
      } while (s.refreshAgain);
    })().finally(() => {
      s.refreshing = undefined;
    });
  }

  private observation(e: Entry, tool: string, content: McpObservation['content'], isError: boolean): McpObservation {
    return { kind: 'MCPObservation', content, is_error: isError, server: e.name, tool };
  }

  private async sessionFor(e: Entry, signal: AbortSignal): Promise<Session | null> {
    const aborted = abortPromise(signal);
    try {
      return await Promise.race([this.ensureConnected(e), aborted.promise]);
    } finally {
      aborted.dispose();
    }
  }

  private async call(e: Entry, tool: string, params: unknown, ctx: ToolContext): Promise<McpObservation> {
    const redact = (t: string) => this.redact(ctx.redact(t));
    const errorObs = (text: string) => this.observation(e, tool, [{ type: 'text', text: redact(text) }], true);
    const signal = ctx.signal;
    signal.throwIfAborted();
    const args = params && typeof params === 'object' && !Array.isArray(params) ? (params as Record<string, unknown>) : {};

    for (let attempt = 0; ; attempt++) {
      const session = await this.sessionFor(e, signal);
      if (!session) {
        return errorObs(`MCP server '${e.name}' is not available: ${e.reason ?? 'not connected'}`);
      }
      try {
        const result = await session.client.callTool({ name: tool, arguments: args }, undefined, {
          signal,
          timeout: e.callTimeoutMs,
        });
        const { content, isError } = convertCallResult(result, redact);
        if (content.length === 0) content.push({ type: 'text', text: `[Tool '${tool}' returned no content.]` });
        return this.observation(e, tool, content, isError);
      } catch (err) {
        if (signal.aborted) throw signal.reason ?? err;
        if (err instanceof McpError && err.code === ErrorCode.RequestTimeout) {
          return errorObs(`MCP tool '${tool}' on server '${e.name}' timed out after ${timeoutSeconds(e.callTimeoutMs)}.`);
        }
        if (err instanceof McpError && err.code === ErrorCode.ConnectionClosed) {
          this.dropSession(e, session);
          const exit = session.stdio?.exitDescription();
          return errorObs(
            `MCP server '${e.name}' closed the connection during the call to '${tool}'${exit ? ` (${exit})` : ''}. It will be restarted on the next call.`,
          );
        }
        if (err instanceof McpError) {
          return errorObs(`Error calling MCP tool '${tool}' on server '${e.name}': ${describeError(err)}`);
        }
        // transport failure (HTTP error, network): the session is unusable
        this.dropSession(e, session);
        // the server forgot our session (restarted, expired): the request was not processed,
        // so reconnecting and sending it again once is safe
        if (attempt === 0 && err instanceof StreamableHTTPError && err.code === 404) continue;
        return errorObs(`Error calling MCP tool '${tool}' on server '${e.name}': ${describeError(err)}`);
      }
    }
  }
}
