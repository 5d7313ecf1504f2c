/**
 * MCP server configuration (OpenHands' `mcp_config` shape): the schema and its TypeScript types, merging the stored default with a
 * conversation's own config, and the secret helpers (redacted copy, list of secret values).
 *
 * Validation (unknown fields → 422, http(s) urls, stdio name pattern) happens at the API with this schema;
 * the functions here accept any value of the type and never throw.
 */
import * as z from 'zod';
import { SECRET_PLACEHOLDER } from './redact.js';

/** An http(s) URL (a server's address). */
const HttpUrl = z.string().regex(/^https?:\/\/[^\s]+$/i, { error: 'URL must start with http:// or https://' });

const McpSseServer = z.strictObject({ url: HttpUrl, api_key: z.string().nullish() });
const McpShttpServer = z.strictObject({
  url: HttpUrl,
  api_key: z.string().nullish(),
  /** Seconds; the connect/list timeout and the per-call timeout for this server. */
  timeout: z.number().positive().max(3600).nullish(),
});
const McpStdioServer = z.strictObject({
  /** Used as the tool-name prefix. */
  name: z.string().regex(/^[A-Za-z0-9_-]+$/, { error: 'name must match ^[A-Za-z0-9_-]+$' }),
  command: z.string().min(1),
  args: z.array(z.string()).default([]),
  env: z.record(z.string(), z.string()).default({}),
});
/** The one MCP config schema: the API validates requests with it, the parse output has every list present. */
export const McpConfig = z
  .strictObject({
    sse_servers: z.array(McpSseServer).default([]),
    stdio_servers: z.array(McpStdioServer).default([]),
    shttp_servers: z.array(McpShttpServer).default([]),
  })
  .meta({ id: 'MCPConfig', title: 'MCPConfig', description: 'Configuration for MCP (Message Control Protocol) settings.' });

/** A config as given (lists and their defaults may be absent); what the functions below accept. */
export type McpConfig = z.input<typeof McpConfig>;
/** A config with every list present (what the API returns). */
export type FullMcpConfig = z.output<typeof McpConfig>;
export type McpSseServerConfig = z.input<typeof McpSseServer>;
export type McpStdioServerConfig = z.input<typeof McpStdioServer>;
export type McpShttpServerConfig = z.input<typeof McpShttpServer>;

/** Every list present, each entry with its defaults filled in (the API's shape). */
export function fullMcpConfig(c: McpConfig | null | undefined): FullMcpConfig {
  return {
    sse_servers: (c?.sse_servers ?? []).map((s) => ({ url: s.url, api_key: s.api_key })),
    stdio_servers: (c?.stdio_servers ?? []).map((s) => ({ name: s.name, command: s.command, args: s.args ?? [], env: s.env ?? {} })),
    shttp_servers: (c?.shttp_servers ?? []).map((s) => ({ url: s.url, api_key: s.api_key, timeout: s.timeout })),
  };
}

/** Key used to de-duplicate HTTP servers: the normalised URL (falls back to the raw string). */
function mcpUrlKey(url: string): string {
  try {
    return new URL(url).href;
  } catch {
    return url;
  }
}

function mergeList<T>(a: T[] | undefined, b: T[] | undefined, key: (x: T) => string): T[] | undefined {
  if (!a?.length && !b?.length) return a || b ? [] : undefined;
  const out = new Map<string, T>();
  for (const item of [...(a ?? []), ...(b ?? [])]) {
    const k = key(item);
    // delete first so the winning (later) entry also takes the later position
    out.delete(k);
    out.set(k, item);
  }
  return [...out.values()];
}

function cloneStdio(s: McpStdioServerConfig): McpStdioServerConfig {
  const c: McpStdioServerConfig = { name: s.name, command: s.command };
  if (s.args) c.args = [...s.args];
  if (s.env) c.env = { ...s.env };
  return c;
}

/**
 * The stored default config plus the per-conversation one. Lists are de-duplicated by url
 * (sse, shttp; compared after URL normalisation) and by name (stdio); when both define the same
 * server, the later entry (`extra`, i.e. the conversation's) wins and takes the later position.
 * Entries are copied; the inputs are not modified. Keys absent from both inputs stay absent.
 */
export function mergeMcpConfig(base: McpConfig | null | undefined, extra: McpConfig | null | undefined): McpConfig {
  const out: McpConfig = {};
  const sse = mergeList(base?.sse_servers, extra?.sse_servers, (s) => mcpUrlKey(s.url));
  const stdio = mergeList(base?.stdio_servers, extra?.stdio_servers, (s) => s.name);
  const shttp = mergeList(base?.shttp_servers, extra?.shttp_servers, (s) => mcpUrlKey(s.url));
  if (sse) out.sse_servers = sse.map((s) => ({ ...s }));
  if (stdio) out.stdio_servers = stdio.map(cloneStdio);
  if (shttp) out.shttp_servers = shttp.map((s) => ({ ...s }));
  return out;
}

/** A copy with every non-empty `api_key` and every `env` value replaced by `<secret_hidden>`. */
export function redactMcpConfig(cfg: McpConfig | null | undefined): McpConfig {
  const out: McpConfig = {};
  const hideKey = <T extends { api_key?: string | null }>(s: T): T => (s.api_key ? { ...s, api_key: SECRET_PLACEHOLDER } : { ...s });
  if (cfg?.sse_servers) out.sse_servers = cfg.sse_servers.map(hideKey);
  if (cfg?.shttp_servers) out.shttp_servers = cfg.shttp_servers.map(hideKey);
  if (cfg?.stdio_servers) {
    out.stdio_servers = cfg.stdio_servers.map((s) => {
      const c = cloneStdio(s);
      if (c.env) c.env = Object.fromEntries(Object.keys(c.env).map((k) => [k, SECRET_PLACEHOLDER]));
      return c;
    });
  }
  return out;
}

/** Every api_key and env value in the config (non-empty, de-duplicated), for the global redactor. */
export function mcpSecretValues(cfg: McpConfig | null | undefined): string[] {
  const out = new Set<string>();
  for (const s of cfg?.sse_servers ?? []) if (s.api_key) out.add(s.api_key);
  for (const s of cfg?.shttp_servers ?? []) if (s.api_key) out.add(s.api_key);
  for (const s of cfg?.stdio_servers ?? []) {
    for (const v of Object.values(s.env ?? {})) if (typeof v === 'string' && v) out.add(v);
  }
  return [...out];
}
