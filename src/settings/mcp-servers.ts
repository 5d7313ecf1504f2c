/**
 * MCP servers as OpenHands' agent server keeps them in its settings: a map from a stable name to one
 * server (`{command, args, env}` for stdio, `{url, transport, auth}` for remote servers), changed one
 * server at a time (`/api/settings/mcp/{key}`) or by a sparse patch (RFC 7386: a null deletes).
 *
 * Parley's MCP client (src/tools/mcp/) takes the interface's config (`stdio_servers`, `shttp_servers`,
 * `sse_servers`), which carries one credential per remote server, sent as a bearer token. So a server
 * is accepted when that can express it: no extra headers, and an auth strategy of `none`, `bearer`, or
 * `api_key` without a header name (which OpenHands also sends as a bearer token). Anything else is a 422
 * naming the field, never stored as if it worked. The enabled servers join the default MCP config every
 * new conversation gets (settings.ts).
 */
import * as z from 'zod';
import { SECRET_PLACEHOLDER } from '../secrets/redact.js';
import type { McpConfig } from '../secrets/mcp-config.js';

const HttpUrl = z.string().regex(/^https?:\/\/\S+$/i, { error: 'URL must start with http:// or https://' });
/** The transports Parley's MCP client speaks (`http` and `shttp` are names of streamable HTTP). */
const Transport = z.enum(['stdio', 'http', 'shttp', 'streamable-http', 'sse']);

/** The credentials Parley can send; every other strategy of OpenHands' union is a 422 with the reason. */
const Auth = z.discriminatedUnion('strategy', [
  z.strictObject({ strategy: z.literal('none') }),
  z.strictObject({ strategy: z.literal('bearer'), value: z.string().max(8192).nullish() }),
  z.strictObject({
    strategy: z.literal('api_key'),
    value: z.string().max(8192).nullish(),
    header_name: z.null({ error: "Parley's MCP client sends the key as a bearer token: header_name is not supported" }).optional(),
  }),
]);
const UNSUPPORTED_AUTH = new Set(['basic', 'header', 'oauth2']);

const ServerFields = {
  command: z.string().min(1).max(4096).nullish(),
  args: z.array(z.string().max(8192)).max(256).nullish(),
  env: z.record(z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, { error: 'env names must be environment variable names' }), z.string().max(65536)).nullish(),
  cwd: z.string().max(4096).nullish(),
  url: HttpUrl.nullish(),
  transport: Transport.nullish(),
  headers: z.record(z.string(), z.string()).nullish(),
  auth: z.unknown().optional(),
  timeout: z.number().positive().max(3600).nullish(),
  sse_read_timeout: z.number().positive().max(86400).nullish(),
  keep_alive: z.boolean().nullish(),
  description: z.string().max(2000).nullish(),
  icon: z.string().max(4096).nullish(),
  enabled: z.boolean().nullish(),
};

/** A server key: what names the server in the map and in its tools' names. */
export const McpServerKey = z
  .string()
  .min(1)
  .max(128)
  .regex(/^[A-Za-z0-9_-]+$/, { error: 'an MCP server key matches ^[A-Za-z0-9_-]+$' });

/** One server as stored (after defaults and checks). */
export interface McpServer {
  command?: string;
  args?: string[];
  env?: Record<string, string>;
  url?: string;
  transport: 'stdio' | 'http' | 'sse';
  auth?: z.output<typeof Auth>;
  timeout?: number;
  description?: string;
  icon?: string;
  enabled: boolean;
}
export type McpServerMap = Record<string, McpServer>;

type Issue = { path: (string | number)[]; message: string };

/** A server given whole (create) or merged from a patch: checked and normalised, or the issues with their paths. */
export function checkMcpServer(raw: unknown): { server: McpServer } | { issues: Issue[] } {
  const parsed = z.strictObject(ServerFields).safeParse(raw);
  if (!parsed.success) return { issues: parsed.error.issues.map((i) => ({ path: i.path as (string | number)[], message: i.message })) };
  const s = parsed.data;
  const issues: Issue[] = [];
  const transport = s.transport === 'sse' ? 'sse' : s.transport === 'stdio' || (!s.transport && s.command) ? 'stdio' : 'http';
  if (transport === 'stdio' && !s.command) issues.push({ path: ['command'], message: 'a stdio MCP server needs a command' });
  if (transport !== 'stdio' && !s.url) issues.push({ path: ['url'], message: 'a remote MCP server needs a url' });
  if (s.cwd) issues.push({ path: ['cwd'], message: "a stdio server runs in the conversation's workspace (inside its sandbox): cwd is not supported" });
  if (s.headers && Object.keys(s.headers).length)
    issues.push({ path: ['headers'], message: "Parley's MCP client sends no extra headers: give the credential as auth (bearer)" });
  let auth: z.output<typeof Auth> | undefined;
  if (s.auth !== undefined && s.auth !== null) {
    const strategy = (s.auth as { strategy?: unknown }).strategy;
    if (typeof strategy === 'string' && UNSUPPORTED_AUTH.has(strategy)) {
      issues.push({ path: ['auth', 'strategy'], message: `auth strategy ${strategy} is not supported by Parley's MCP client (none, bearer, api_key)` });
    } else {
      const a = Auth.safeParse(s.auth);
      if (a.success) auth = a.data;
      else issues.push(...a.error.issues.map((i) => ({ path: ['auth', ...(i.path as (string | number)[])], message: i.message })));
    }
  }
  if (issues.length) return { issues };
  const server: McpServer = { transport, enabled: s.enabled ?? true };
  if (transport === 'stdio') {
    server.command = s.command!;
    server.args = s.args ?? [];
    server.env = s.env ?? {};
  } else {
    server.url = s.url!;
    if (auth) server.auth = auth;
    if (s.timeout) server.timeout = s.timeout;
  }
  if (s.description) server.description = s.description;
  if (s.icon) server.icon = s.icon;
  return { server };
}

/** RFC 7386 merge patch: objects merge key by key, a null deletes, anything else replaces. */
export function mergePatch(target: unknown, patch: unknown): unknown {
  if (!patch || typeof patch !== 'object' || Array.isArray(patch)) return patch;
  const out: Record<string, unknown> = target && typeof target === 'object' && !Array.isArray(target) ? { ...(target as Record<string, unknown>) } : {};
  for (const [k, v] of Object.entries(patch)) {
    if (v === null) delete out[k];
    else out[k] = mergePatch(out[k], v);
  }
  return out;
}

/** A patch without the masked values a client read back (`<secret_hidden>`, `**********`): those keep what is stored. */
export function withoutMasked(patch: unknown): unknown {
  if (!patch || typeof patch !== 'object' || Array.isArray(patch)) return patch;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(patch)) {
    if (v === SECRET_PLACEHOLDER || v === '**********') continue;
    out[k] = withoutMasked(v);
  }
  return out;
}

/** The server as the API shows it: every credential (env values, auth value) masked. */
export function redactMcpServer(s: McpServer): McpServer {
  const out: McpServer = { ...s };
  if (s.env) out.env = Object.fromEntries(Object.keys(s.env).map((k) => [k, SECRET_PLACEHOLDER]));
  if (s.auth && 'value' in s.auth && s.auth.value) out.auth = { ...s.auth, value: SECRET_PLACEHOLDER };
  return out;
}

/** Every credential of the map (for the redactor). */
export function mcpServerSecrets(map: McpServerMap): string[] {
  return Object.values(map).flatMap((s) => [...Object.values(s.env ?? {}), ...(s.auth && 'value' in s.auth && s.auth.value ? [s.auth.value] : [])]);
}

/** The enabled servers in the interface's config shape (what Parley's MCP client takes); a stdio server is named by its key. */
export function toMcpConfig(map: McpServerMap): McpConfig {
  const out: Required<McpConfig> = { sse_servers: [], stdio_servers: [], shttp_servers: [] };
  for (const [name, s] of Object.entries(map)) {
    if (!s.enabled) continue;
    const key = s.auth && 'value' in s.auth && s.auth.value ? s.auth.value : null;
    if (s.transport === 'stdio') out.stdio_servers.push({ name, command: s.command!, args: s.args ?? [], env: s.env ?? {} });
    else if (s.transport === 'sse') out.sse_servers.push({ url: s.url!, api_key: key });
    else out.shttp_servers.push({ url: s.url!, api_key: key, timeout: s.timeout ?? null });
  }
  return out;
}
