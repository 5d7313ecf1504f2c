/**
 * Naming of MCP servers and of the tools offered to the LLM.
 *
 * Server names
 *  - stdio: the configured `name`, sanitised.
 *  - sse / shttp: the URL's host name plus `_<port>` when the URL has an explicit port, sanitised:
 *    `http://localhost:3001/mcp` → `localhost_3001`, `https://mcp.example.com/sse` →
 *    `mcp_example_com`, `http://127.0.0.1:8080/` → `127_0_0_1_8080`.
 *  - Sanitising replaces every character outside `[A-Za-z0-9_-]` with `_` (empty → `mcp`).
 *  - Unique across the whole config, in the order stdio, sse, shttp servers (each in config order):
 *    a later duplicate gets `_2`, `_3`, … appended.
 *
 * Tool names (what the LLM sees)
 *  - Exactly one server configured: the tool's own name. Several: `<server>_<tool>`.
 *  - The tool part is sanitised the same way (MCP tool names may contain `.` or `/`).
 *  - Longer than 64 characters (LLM provider limit): cut to 55 and `_<8 hex of sha1>` appended.
 *  - Collision with a reserved (built-in) name or with an MCP tool named earlier: in the
 *    one-server case first the `<server>_<tool>` form is tried; then `_2`, `_3`, … is appended.
 *  - Tools are named in server order (as above), each server's tools in the order it lists them.
 */
import { createHash } from 'node:crypto';
import { BUILTIN_TOOL_NAMES } from '../../events/tool-catalog.js';

const MAX_TOOL_NAME_LENGTH = 64;

/** Built-in tool names an MCP tool must never shadow. */
export const DEFAULT_RESERVED_TOOL_NAMES: readonly string[] = BUILTIN_TOOL_NAMES;

function sanitizeName(s: string): string {
  const out = s.replace(/[^A-Za-z0-9_-]/g, '_');
  return out.length ? out : 'mcp';
}

/** `localhost_3001` style name derived from an HTTP server URL. */
export function serverNameFromUrl(url: string): string {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    return sanitizeName(url.replace(/^[a-z]+:\/\//i, '').split(/[/?#]/)[0] ?? '');
  }
  const host = u.hostname.replace(/^\[|\]$/g, '');
  return sanitizeName(u.port ? `${host}_${u.port}` : host);
}

function fitLength(name: string): string {
  if (name.length <= MAX_TOOL_NAME_LENGTH) return name;
  const hash = createHash('sha1').update(name).digest('hex').slice(0, 8);
  return `${name.slice(0, MAX_TOOL_NAME_LENGTH - 9)}_${hash}`;
}

function withSuffix(base: string, n: number): string {
  const suffix = `_${n}`;
  return fitLength(base).slice(0, MAX_TOOL_NAME_LENGTH - suffix.length) + suffix;
}

/** Makes `base` unique against `taken` (appending `_2`, `_3`, …) and records it there. */
function uniqueName(base: string, taken: Set<string>, maxLength = Infinity): string {
  let name = maxLength === Infinity ? base : fitLength(base);
  for (let n = 2; taken.has(name); n++) name = maxLength === Infinity ? `${base}_${n}` : withSuffix(base, n);
  taken.add(name);
  return name;
}

interface ServerDescriptor {
  kind: 'stdio' | 'sse' | 'shttp';
  /** stdio `name` or the server URL. */
  source: string;
}

/** Unique names for the configured servers, in the given order. */
export function assignServerNames(servers: ServerDescriptor[]): string[] {
  const taken = new Set<string>();
  return servers.map((s) => uniqueName(s.kind === 'stdio' ? sanitizeName(s.source) : serverNameFromUrl(s.source), taken));
}

interface ServerToolList {
  server: string;
  /** The tools' names as the server lists them. */
  tools: string[];
}

/**
 * Exposed names for every server's tools. `single` = exactly one server is configured.
 * Returns server → (MCP tool name → exposed name).
 */
export function assignToolNames(
  lists: ServerToolList[],
  single: boolean,
  reserved: Iterable<string> = DEFAULT_RESERVED_TOOL_NAMES,
): Map<string, Map<string, string>> {
  const taken = new Set<string>(reserved);
  const out = new Map<string, Map<string, string>>();
  for (const { server, tools } of lists) {
    const names = new Map<string, string>();
    for (const tool of tools) {
      if (names.has(tool)) continue; // a server listing the same tool twice
      const prefixed = fitLength(`${server}_${sanitizeName(tool)}`);
      let base = single ? fitLength(sanitizeName(tool)) : prefixed;
      if (taken.has(base) && single) base = prefixed;
      names.set(tool, uniqueName(base, taken, MAX_TOOL_NAME_LENGTH));
    }
    out.set(server, names);
  }
  return out;
}
