import type { ReplayPlan } from '../agent/replay-plan.js';
import type { AgentRuntime } from '../agent/runtime.js';

/** What the service asks of the agent runtime (src/agent/runtime.ts), which acts on the live conversation. */
export type ConversationRuntime = Pick<AgentRuntime, 'start' | 'messageArrived' | 'pause' | 'confirm' | 'condenseNow' | 'ask' | 'judge'>;

export interface PrepareOptions {
  /** A checked `replay_json` plan, run once the workspace is ready. */
  replay?: ReplayPlan;
}

/** Background work after creation (workspace, clone, setup script, replay); a deleted conversation's stops with its `close('deleted')`. */
export interface ConversationPreparer {
  prepare(conversationId: string, opts?: PrepareOptions): Promise<void>;
}
