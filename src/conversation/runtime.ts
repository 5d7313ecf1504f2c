import type { ReplayPlan } from '../agent/replay-plan.js';

export type { AgentRuntime } from '../agent/runtime.js';

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
