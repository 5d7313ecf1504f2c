import type { z } from 'zod';

/** Content items shared by observations and messages (CONTRACT §4). */
export type TextContent = { type: 'text'; text: string };
export type ImageContent = { type: 'image'; image_urls: string[] };
export type ObservationContent = TextContent | ImageContent;

/** What a tool returns; recorded as `ObservationEvent.observation`. */
export interface ToolObservation {
  /** Observation kind, e.g. `TerminalObservation`. */
  kind: string;
  content: ObservationContent[];
  is_error: boolean;
  /** Tool-specific fields (exit_code, working_dir, path, ...). JSON-serialisable. */
  [extra: string]: unknown;
}

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

/** A tool the agent can call. The parameter schema is zod: JSON Schema for the LLM comes from it. */
export interface Tool<P = unknown> {
  name: string;
  description: string;
  parameters: z.ZodType<P>;
  execute(params: P, ctx: ToolContext): Promise<ToolObservation>;
  /** Optional: release per-conversation resources (shells, processes). */
  closeConversation?(conversationId: string): Promise<void> | void;
  /** Optional: release everything (daemon stop). */
  closeAll?(): Promise<void> | void;
}

/** A tool raised this for bad input the LLM can correct (becomes an AgentErrorEvent). */
export class ToolInputError extends Error {
  override name = 'ToolInputError';
}
