/**
 * `POST /api/mcp/test` (OpenHands' MCP test): connect to one candidate MCP server with the project's
 * MCP client (McpManager, as a conversation's agent does), list its tools, optionally call one, and
 * close everything. Nothing is stored. The answer is OpenHands' shape: `{ok: true, tools, tool_result}`,
 * or `{ok: false, error, error_kind}` where `error_kind` is `timeout` (it did not connect and list within
 * the request's timeout), `connection` (it could not be reached or started, or broke off) or `unknown`.
 * The request's timeout bounds the whole test (the sandbox's start, connecting and listing, the tool
 * call): OpenHands' client gives up five seconds after it, so a test that used it twice would never be
 * answered.
 *
 * Where a stdio server runs: in a sandbox of its own, made for this one test and removed after it (the
 * same bubblewrap sandbox a conversation gets, with an empty workspace as its cwd and no view of
 * DATA_DIR or of any conversation). Never on the host when the sandbox is on. A remote server is
 * reached from the daemon, under MCP_ALLOWED_HOSTS like a conversation's.
 */
import crypto from 'node:crypto';
import type { ChildProcess } from 'node:child_process';
import type { McpConfig } from './config.js';

/** The MCP client's side of a sandbox made for one test (the composition root hands the real one over). */
export interface McpTestSandbox {
  /** A fresh sandbox with an empty workspace; `close` kills what runs in it and removes it. */
  open(id: string): Promise<{
    workspaceDir: string;
    launcher: {
      spawn(argv: string[], opts: { cwd: string; env: Record<string, string> }): ChildProcess;
      env(extra: Record<string, string>): Record<string, string>;
    };
    close(): Promise<void>;
  }>;
}

export interface McpTestRequest {
  /** The server's name in messages. */
  name: string;
  /** One server in the config's shape (exactly one list holds one entry). */
  config: McpConfig;
  /** Seconds for the whole test: the sandbox, connecting and listing its tools, and the tool call. */
  timeout: number;
  tool_call?: { name: string; arguments: Record<string, unknown> } | null;
}

export type McpTestResult =
  | { ok: true; tools: string[]; tool_result: { is_error: boolean; text: string } | null }
  | { ok: false; error: string; error_kind: 'timeout' | 'connection' | 'unknown' };

export async function testMcpServer(
  req: McpTestRequest,
  deps: { sandbox: McpTestSandbox; allowedHosts: string[] | null; redact: (t: string) => string },
): Promise<McpTestResult> {
  const stdio = (req.config.stdio_servers?.length ?? 0) > 0;
  const id = crypto.randomUUID();
  const deadline = Date.now() + Math.round(req.timeout * 1000);
  // what is left of the request's time (a floor of 100 ms: a step that starts late still fails by its timeout, not by a zero)
  const left = () => Math.max(100, deadline - Date.now());
  const box = stdio ? await deps.sandbox.open(id) : null;
  const { McpManager } = await import('./manager.js');
  const ms = left();
  const manager = new McpManager({
    config: req.config,
    workspaceDir: box?.workspaceDir ?? '/',
    launcher: box?.launcher,
    allowedHosts: deps.allowedHosts,
    redact: deps.redact,
    reservedNames: [],
    connectTimeoutMs: ms,
    callTimeoutMs: ms,
  });
  try {
    const tools = await manager.tools();
    const status = manager.status()[0];
    if (status?.state !== 'ready') {
      const reason = status?.reason ?? 'the server did not start';
      // the manager says why it could not connect: within the time (timeout), or anything else on the way (connection)
      const kind = /did not start within/.test(reason) ? 'timeout' : 'connection';
      return { ok: false, error: reason.replace(`MCP server '${status?.name ?? ''}'`, `MCP server '${req.name}'`), error_kind: kind };
    }
    let toolResult: { is_error: boolean; text: string } | null = null;
    if (req.tool_call) {
      const tool = tools.find((t) => t.mcpName === req.tool_call!.name);
      if (!tool) {
        toolResult = {
          is_error: true,
          text: `The server offers no tool '${req.tool_call.name}' (it offers: ${tools.map((t) => t.mcpName).join(', ') || 'none'})`,
        };
      } else {
        const obs = await tool.execute(req.tool_call.arguments, {
          conversationId: id,
          workspaceDir: box?.workspaceDir ?? '/',
          signal: AbortSignal.timeout(left()),
          env: {},
          redact: deps.redact,
        });
        const text = obs.content.flatMap((c) => (c.type === 'text' ? [c.text] : [])).join('\n');
        toolResult = { is_error: !!obs.is_error, text };
      }
    }
    return { ok: true, tools: tools.map((t) => t.mcpName), tool_result: toolResult };
  } catch (err) {
    if ((err as Error)?.name === 'TimeoutError') {
      return { ok: false, error: `The test of MCP server '${req.name}' did not finish within ${req.timeout} s`, error_kind: 'timeout' };
    }
    return { ok: false, error: deps.redact(String((err as Error)?.message ?? err)), error_kind: 'unknown' };
  } finally {
    await manager.close();
    await box?.close();
  }
}
