/**
 * Every operation of the API, once, in one table (`operations`, whose keys are the one list of
 * names). Each entry is an operation (operation.ts): query or mutation, input schema, handler, and
 * its REST method, path and the origin of each input field. The tRPC router (router.ts), the REST
 * routes (bridge/routes.ts) and the OpenAPI document (bridge/openapi.ts) are generated from it, so
 * both doors run the same validation and the same code; `test/api-operations.test.ts` holds what
 * the table guarantees. The entries live in one file per area (operations/*.ts); a new operation is
 * one entry in the file of its area.
 *
 * REST calls `runOperation` directly instead of going through tRPC's middleware chain (measured:
 * the server-side caller cost ~12 µs of the hot path's budget).
 *
 * Three operations carry what JSON cannot as it is: their `json` form is what tRPC serves (the
 * events page collected, a file's bytes as base64); every other operation's `json` form is itself.
 */
import type { Core } from '../core.js';
import type { AnyOperation } from './operation.js';
import { agentServerOperations } from './operations/agent-server.js';
import { agentServerFeatureOperations } from './operations/agent-server-features.js';
import { conversationOperations } from './operations/conversations.js';
import { eventOperations } from './operations/events.js';
import { settingsOperations } from './operations/settings.js';
import { webAppOperations } from './operations/web-app.js';
import { workspaceOperations } from './operations/workspace.js';
import { llmProfileOperations } from './operations/llm-profiles.js';
import { serverSettingsOperations } from './operations/server-settings.js';
import { serverWorkspaceOperations } from './operations/server-workspace.js';

const SECTIONS = [
  conversationOperations,
  eventOperations,
  settingsOperations,
  agentServerOperations,
  agentServerFeatureOperations,
  workspaceOperations,
  llmProfileOperations,
  serverSettingsOperations,
  serverWorkspaceOperations,
  webAppOperations,
];

export const operations = {
  ...conversationOperations,
  ...eventOperations,
  ...settingsOperations,
  ...agentServerOperations,
  ...agentServerFeatureOperations,
  ...workspaceOperations,
  // OpenHands agent-server's server-wide routes
  ...llmProfileOperations,
  ...serverSettingsOperations,
  ...serverWorkspaceOperations,
  // OpenHands' web app (app-server routes)
  ...webAppOperations,
};
export type OperationName = keyof typeof operations;

// a name in two sections would be one operation, the later one: refused as the module loads
if (SECTIONS.reduce((n, s) => n + Object.keys(s).length, 0) !== Object.keys(operations).length) {
  const seen = new Set<string>();
  const twice = SECTIONS.flatMap(Object.keys).filter((k) => seen.has(k) || !seen.add(k));
  throw new Error(`operations named in two sections: ${twice.join(', ')}`);
}

/** Validate with the operation's schema (throws the ZodError) and run its handler: REST's call. */
export function runOperation(core: Core, name: OperationName, raw: unknown): Promise<unknown> {
  const o = operations[name] as unknown as AnyOperation;
  const quick = o.quick?.(raw);
  if (quick !== undefined) return o.handler(core, quick);
  const parsed = o.input.safeParse(raw);
  if (!parsed.success) return Promise.reject(parsed.error);
  return o.handler(core, parsed.data);
}
