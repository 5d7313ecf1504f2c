/**
 * In-process HTTP MCP servers for the tests, on 127.0.0.1 and a random port:
 *  - startShttpServer: streamable HTTP (stateful sessions) at `/mcp`
 *  - startSseServer:   legacy HTTP+SSE, `GET /sse` + `POST /messages?sessionId=…`
 * Both check `Authorization: Bearer <apiKey>` when `apiKey` is set; a wrong or missing key gets a
 * 401 whose body echoes the header received (a careless server: the client must redact it).
 */
import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { SSEServerTransport } from '@modelcontextprotocol/sdk/server/sse.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { isInitializeRequest } from '@modelcontextprotocol/sdk/types.js';
import { buildTestServer } from './tools.js';

/** Closes every session's transport (the server's sessions end; clients see the connection go). */
async function closeAll(transports: Map<string, { close(): Promise<void> }>): Promise<void> {
  const all = [...transports.values()];
  transports.clear();
  await Promise.all(all.map((t) => t.close()));
}

export interface RunningHttpServer {
  url: string;
  port: number;
  /** Authorization headers seen (for assertions). */
  authHeaders: string[];
  /** Forgets every session, as a restarted server would (SSE: also ends the event streams). */
  dropSessions(): Promise<void>;
  close(): Promise<void>;
}

export interface HttpServerOptions {
  apiKey?: string;
  name?: string;
}

function checkAuth(req: IncomingMessage, res: ServerResponse, opts: HttpServerOptions, seen: string[]): boolean {
  const got = req.headers.authorization ?? '';
  seen.push(got);
  if (!opts.apiKey || got === `Bearer ${opts.apiKey}`) return true;
  res.writeHead(401, { 'content-type': 'application/json' });
  res.end(JSON.stringify({ error: `unauthorized: got '${got}'` }));
  return false;
}

async function readJson(req: IncomingMessage): Promise<unknown> {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  const body = Buffer.concat(chunks).toString('utf8');
  return body ? JSON.parse(body) : undefined;
}

function listen(server: Server, path: string, seen: string[], dropSessions: () => Promise<void>): Promise<RunningHttpServer> {
  return new Promise((resolve) => {
    server.listen(0, '127.0.0.1', () => {
      const port = (server.address() as AddressInfo).port;
      resolve({
        url: `http://127.0.0.1:${port}${path}`,
        port,
        authHeaders: seen,
        dropSessions,
        close: () =>
          new Promise<void>((r) => {
            server.closeAllConnections();
            server.close(() => r());
          }),
      });
    });
  });
}

export async function startShttpServer(opts: HttpServerOptions = {}): Promise<RunningHttpServer> {
  const transports = new Map<string, StreamableHTTPServerTransport>();
  const seen: string[] = [];
  const server = createServer(async (req, res) => {
    try {
      if (!req.url?.startsWith('/mcp')) {
        res.writeHead(404).end();
        return;
      }
      if (!checkAuth(req, res, opts, seen)) return;
      const sid = req.headers['mcp-session-id'];
      const existing = typeof sid === 'string' ? transports.get(sid) : undefined;
      if (req.method === 'POST') {
        const body = await readJson(req);
        if (existing) {
          await existing.handleRequest(req, res, body);
          return;
        }
        if (!sid && isInitializeRequest(body)) {
          const transport: StreamableHTTPServerTransport = new StreamableHTTPServerTransport({
            sessionIdGenerator: () => randomUUID(),
            onsessioninitialized: (id) => {
              transports.set(id, transport);
            },
          });
          transport.onclose = () => {
            if (transport.sessionId) transports.delete(transport.sessionId);
          };
          const mcp = buildTestServer({ name: opts.name ?? 'shttp-test' });
          await mcp.connect(transport);
          await transport.handleRequest(req, res, body);
          return;
        }
        // unknown session id: 404 (the client must start a new session), no id: 400
        res.writeHead(sid ? 404 : 400, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ jsonrpc: '2.0', error: { code: -32000, message: 'No valid session' }, id: null }));
        return;
      }
      if ((req.method === 'GET' || req.method === 'DELETE') && existing) {
        await existing.handleRequest(req, res);
        return;
      }
      res.writeHead(existing ? 405 : 404).end();
    } catch (err) {
      if (!res.headersSent) res.writeHead(500).end(String(err));
    }
  });
  return listen(server, '/mcp', seen, () => closeAll(transports));
}

export async function startSseServer(opts: HttpServerOptions = {}): Promise<RunningHttpServer> {
  const transports = new Map<string, SSEServerTransport>();
  const seen: string[] = [];
  const server = createServer(async (req, res) => {
    try {
      const url = new URL(req.url ?? '/', 'http://127.0.0.1');
      if (!checkAuth(req, res, opts, seen)) return;
      if (req.method === 'GET' && url.pathname === '/sse') {
        const transport = new SSEServerTransport('/messages', res);
        transports.set(transport.sessionId, transport);
        transport.onclose = () => transports.delete(transport.sessionId);
        const mcp = buildTestServer({ name: opts.name ?? 'sse-test' });
        await mcp.connect(transport);
        return;
      }
      if (req.method === 'POST' && url.pathname === '/messages') {
        const transport = transports.get(url.searchParams.get('sessionId') ?? '');
        if (!transport) {
          res.writeHead(404).end('unknown session');
          return;
        }
        await transport.handlePostMessage(req, res);
        return;
      }
      res.writeHead(404).end();
    } catch (err) {
      if (!res.headersSent) res.writeHead(500).end(String(err));
    }
  });
  return listen(server, '/sse', seen, () => closeAll(transports));
}
