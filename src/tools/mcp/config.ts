/**
 * MCP server configuration (CONTRACT §5): the TypeScript shape, merging the stored default with a
 * conversation's own config, and the secret helpers (redacted copy, list of secret values).
 *
 * Validation (unknown fields → 422, http(s) urls, stdio name pattern) happens at the API with zod;
 * the functions here accept any value of the type and never throw.
 */

export const MCP_SECRET_PLACEHOLDER = '<secret_hidden>';

export interface McpSseServerConfig {
  url: string;
  api_key?: string | null;
}

export interface McpStdioServerConfig {
  /** Server name, `^[A-Za-z0-9_-]+$`; used as the tool-name prefix. */
  name: string;
  command: string;
  args?: string[];
  env?: Record<string, string>;
}

export interface McpShttpServerConfig {
  url: string;
  api_key?: string | null;
  /** Seconds; the connect/list timeout and the per-call timeout for this server. */
  timeout?: number | null;
}

export interface McpConfig {
  sse_servers?: McpSseServerConfig[];
  stdio_servers?: McpStdioServerConfig[];
  shttp_servers?: McpShttpServerConfig[];
}

/** Key used to de-duplicate HTTP servers: the normalised URL (falls back to the raw string). */
export function mcpUrlKey(url: string): string {
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
  const hideKey = <T extends { api_key?: string | null }>(s: T): T =>
    s.api_key ? { ...s, api_key: MCP_SECRET_PLACEHOLDER } : { ...s };
  if (cfg?.sse_servers) out.sse_servers = cfg.sse_servers.map(hideKey);
  if (cfg?.shttp_servers) out.shttp_servers = cfg.shttp_servers.map(hideKey);
  if (cfg?.stdio_servers) {
    out.stdio_servers = cfg.stdio_servers.map((s) => {
      const c = cloneStdio(s);
      if (c.env) c.env = Object.fromEntries(Object.keys(c.env).map((k) => [k, MCP_SECRET_PLACEHOLDER]));
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
