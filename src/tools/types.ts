import type * as z from 'zod';
import type { ContentItem } from '../events/content.js';
import type { Action, Observation } from '../events/schema.js';

/** Content of an observation (text or images). */
export type ObservationContent = ContentItem;

/** Everything a tool needs from the conversation it runs in. */
export interface ToolContext {
  conversationId: string;
  /** Absolute path of the conversation's workspace (the shell and editor start here). */
  workspaceDir: string;
  /** Aborted when the run is interrupted: the tool must stop (kill its process group) and return/throw promptly. */
  signal: AbortSignal;
  /** Extra environment for processes the tool starts (provider tokens, custom secrets). */
  env: Record<string, string>;
  /** Replaces every known secret value with `<secret_hidden>`. Apply to every text the tool returns. */
  redact: (text: string) => string;
}

/**
 * A tool the agent can call. Its file declares, next to the executor, the zod parameters (JSON
 * Schema for the LLM comes from them), the action kind its calls are recorded as
 * (`ActionEvent.action`) and the observation it returns (`ObservationEvent.observation`).
 */
export interface Tool<P = unknown, O extends Observation = Observation> {
  name: string;
  /** OpenHands' tool definition kind, as listed in `SystemPromptEvent.tools` (e.g. `TerminalTool`). */
  kind: string;
  /** The kind of `ActionEvent.action` for a call of this tool (e.g. `TerminalAction`). */
  actionKind: Action['kind'];
  description: string;
  parameters: z.ZodType<P>;
  /** JSON Schema offered to the LLM when it does not come from `parameters` (MCP tools: the server's own). */
  jsonSchema?: Record<string, unknown>;
  execute(params: P, ctx: ToolContext): Promise<O>;
  /** Optional: release per-conversation resources (shells, processes). */
  closeConversation?(conversationId: string): Promise<void> | void;
  /** Optional: release everything (daemon stop). */
  closeAll?(): Promise<void> | void;
}

/** The action a call records: the validated parameters under the tool's action kind (MCP: under `data`). */
export function actionOf(tool: Pick<Tool, 'actionKind'>, params: unknown): Action {
  if (tool.actionKind === 'MCPToolAction') return { kind: 'MCPToolAction', data: (params ?? {}) as Record<string, unknown> };
  return { ...(params as object), kind: tool.actionKind } as Action;
}
