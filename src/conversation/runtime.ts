import type { ReplayPlan } from './replay.js';

/** The plug between the conversation service and whatever runs the agent. */
export interface AgentRuntime {
  /** Starts a run loop unless one is active; false when one is already running. */
  start(conversationId: string): boolean;
  isRunning(conversationId: string): boolean;
  /** A message arrived: a running loop takes it at its next step. */
  notifyMessage(conversationId: string): void;
  /** Stop between steps. */
  pause(conversationId: string): Promise<void>;
  /** Cancel the in-flight LLM call or tool now. */
  interrupt(conversationId: string): Promise<void>;
  /** The conversation is being deleted: stop everything it owns. */
  dispose(conversationId: string): Promise<void>;
  close(): Promise<void>;
  /** Condense the conversation's history now; false when there is nothing to condense. */
  condense?(conversationId: string): Promise<boolean>;
  /** A side question to the LLM with the conversation's context; nothing is added to the conversation. */
  ask?(conversationId: string, question: string): Promise<string>;
  /** The conversation waits for confirmation: run its pending actions (accept) or reject them. */
  confirm?(conversationId: string, accept: boolean, reason: string | null): Promise<void>;
}

export interface PrepareOptions {
  /** A checked `replay_json` plan, run once the workspace is ready. */
  replay?: ReplayPlan;
}

/** Background work after creation (workspace, clone, setup script, replay). */
export interface ConversationPreparer {
  prepare(conversationId: string, opts?: PrepareOptions): Promise<void>;
  /** The conversation is being deleted: a replay under way stops now (before its shell is closed). */
  stop(conversationId: string): void;
  /** The conversation is deleted and its runtime disposed: remove its workspace. */
  dispose(conversationId: string): Promise<void>;
}
