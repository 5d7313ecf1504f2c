/**
 * The tools every test MCP server offers (built with the MCP SDK's McpServer).
 *
 *  echo {text}       → text
 *  fail {}           → an error result (isError: true)
 *  slow {ms}         → sleeps ms, then text
 *  image {}          → an image, a resource link and an embedded text resource
 *  env {name}        → the value of an environment variable (stdio: proves env is passed)
 *  pid {}            → process.pid; in a pid namespace (Parley's sandbox) `ns:<token>`, the token
 *                      being in the server's command line, so the host can find its real pid
 *                      (test/support/processes.ts hostPid)
 *  cwd {}            → process.cwd()
 *  spawn_child {}    → starts `sleep 300` (same process group) and returns its pid (or `ns:<token>`)
 *  crash {}          → process.exit(3) in the middle of the call (only when allowCrash)
 *  add_tool {name}   → registers a new tool `name` (the server sends tools/list_changed)
 *  think {}          → a tool whose name clashes with a built-in tool
 *  auth_header {}    → the Authorization header the HTTP server received (HTTP servers only)
 */
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import * as z from 'zod';

// 1x1 transparent PNG
export const PNG_1X1 = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII=';

export interface TestServerOptions {
  name: string;
  allowCrash?: boolean;
}

const text = (t: string) => ({ content: [{ type: 'text' as const, text: t }] });

/** In a pid namespace our pid means nothing on the host: name the process by a token in its command line. */
const namespaced = (() => {
  try {
    return readFileSync('/proc/1/comm', 'utf8').trim() === 'bwrap';
  } catch {
    return false;
  }
})();
const TOKEN = `parley-test-pid-${randomUUID()}`;
if (namespaced) process.title = `node ${TOKEN}`;

export function buildTestServer(opts: TestServerOptions): McpServer {
  const server = new McpServer({ name: opts.name, version: '1.0.0' }, { capabilities: { tools: { listChanged: true } } });

  server.registerTool('echo', { description: 'Echo the given text.', inputSchema: { text: z.string().describe('Text to echo') } }, async ({ text: t }) =>
    text(`echo: ${t}`),
  );

  server.registerTool('fail', { description: 'Always fails.' }, async () => ({
    content: [{ type: 'text' as const, text: 'intentional failure from fail' }],
    isError: true,
  }));

  server.registerTool('slow', { description: 'Sleeps, then answers.', inputSchema: { ms: z.number().int().min(0) } }, async ({ ms }, extra) => {
    await new Promise<void>((resolve) => {
      const t = setTimeout(resolve, ms);
      extra.signal.addEventListener('abort', () => {
        clearTimeout(t);
        resolve();
      });
    });
    return text(`slept ${ms} ms`);
  });

  server.registerTool('image', { description: 'Returns an image and resources.' }, async () => ({
    content: [
      { type: 'image' as const, data: PNG_1X1, mimeType: 'image/png' },
      { type: 'resource_link' as const, uri: 'file:///tmp/report.txt', name: 'report', mimeType: 'text/plain' },
      { type: 'resource' as const, resource: { uri: 'mem://note', mimeType: 'text/plain', text: 'embedded note body' } },
    ],
  }));

  server.registerTool('env', { description: 'Returns an environment variable.', inputSchema: { name: z.string() } }, async ({ name }) =>
    text(`${name}=${process.env[name] ?? '<unset>'}`),
  );

  server.registerTool('pid', { description: 'Returns the server pid.' }, async () => text(namespaced ? `ns:${TOKEN}` : String(process.pid)));

  server.registerTool('cwd', { description: 'Returns the server cwd.' }, async () => text(process.cwd()));

  server.registerTool('spawn_child', { description: 'Starts a long sleep child.' }, async () => {
    const token = `parley-test-pid-${randomUUID()}`;
    const child = spawn('sleep', ['300'], { stdio: 'ignore', argv0: namespaced ? token : 'sleep' });
    return text(namespaced ? `ns:${token}` : String(child.pid));
  });

  if (opts.allowCrash) {
    server.registerTool('crash', { description: 'Exits the process mid-call.' }, async () => {
      setTimeout(() => process.exit(3), 20);
      return new Promise(() => {}); // never answers
    });
  }

  server.registerTool('add_tool', { description: 'Registers a new tool.', inputSchema: { name: z.string() } }, async ({ name }) => {
    server.registerTool(name, { description: `Dynamic tool ${name}.` }, async () => text(`dynamic ${name}`));
    return text(`added ${name}`);
  });

  server.registerTool('think', { description: 'Clashes with the built-in think tool.' }, async () => text('mcp think'));

  server.registerTool('auth_header', { description: 'Returns the Authorization header received.' }, async (extra) => {
    const h = extra.requestInfo?.headers?.authorization;
    return text(`authorization: ${Array.isArray(h) ? h.join(',') : (h ?? '<none>')}`);
  });

  return server;
}
