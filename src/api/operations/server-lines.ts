/**
 * What the sections of OpenHands agent-server's server-wide operations share: REST lines written
 * short (a method, a path, its summary and tag, and where the input comes from), and the operations
 * Parley does not offer, each a 501 with its reason (what needs the internet or a third party Parley
 * does not reach, or a part of OpenHands Parley does not have).
 */
import type * as z from 'zod';
import { NotImplementedError } from '../../errors.js';
import { NO_INTERNET } from '../../conversation/project-extensions.js';
import { mutation, type Operation, query, type RestRoute } from '../operation.js';

type Line = Omit<RestRoute, 'method' | 'path' | 'summary' | 'tag'>;
const route =
  (method: RestRoute['method']) =>
  (path: string, summary: string, tag: string, line: Line = {}): RestRoute => ({ method, path, summary, tag, ...line });
export const GET = route('GET');
export const POST = route('POST');
export const PUT = route('PUT');
export const PATCH = route('PATCH');
export const DELETE = route('DELETE');
/** The JSON body is the input; its fields beside the path's parameters; the query string's parameters. */
export const BODY = { body: 'input' } as const;
export const FIELDS = { body: 'fields' } as const;
export const QUERY = { query: true } as const;

/** An operation Parley does not offer: every call is a 501 with the reason. */
export function unavailable<T extends 'query' | 'mutation', I extends z.ZodType>(
  type: T,
  input: () => I,
  rest: RestRoute,
  why: string,
): Operation<T, I, { detail: string }> {
  const spec = {
    input,
    rest,
    handler: async (): Promise<{ detail: string }> => {
      throw new NotImplementedError(why);
    },
  };
  return (type === 'query' ? query(spec) : mutation(spec)) as Operation<T, I, { detail: string }>;
}

export { NO_INTERNET };
export const SUBSCRIPTION = `OpenAI subscription sign-in needs the internet (OpenAI's device login): ${NO_INTERNET}. Use an API key (settings or a profile).`;
export const META_PROFILES = 'Meta-profiles route tasks between LLM profiles through the classify_and_switch_llm tool, which Parley does not have.';
export const PLUGINS = 'Parley does not load plugins (bundles of skills, hooks and MCP servers for OpenHands agents); use skills and MCP servers directly.';
export const SHARING = 'Parley has no shared (public) conversations: every conversation is reached with a key.';
export const VSCODE = "Parley runs no VS Code server: reach a conversation's files with /api/file and /api/bash.";
export const DESKTOP = 'Parley runs no desktop (VNC) in its sandboxes.';
export const OAUTH = `MCP OAuth is not available in Parley (its sign-in goes to the MCP server's provider): use a bearer credential (auth.strategy bearer).`;
/** A secret's value is never answered by any route. */
export const SECRET_VALUE = 'Secret values are never returned: give the secret to a conversation by name (it is in its shell environment), or set it again.';
