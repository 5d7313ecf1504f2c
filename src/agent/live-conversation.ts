/**
 * A live conversation as the agent sees it: the object itself is src/conversation/live.ts (the
 * conversation layer sits above the agent, so the agent declares what it reads and keeps there), and
 * the registry's part the agent uses.
 */
import type { ExecutionStatus } from '../events/schema.js';
import type { EventDraft } from '../events/types.js';
import type { FullMcpConfig } from '../secrets/mcp-config.js';
import type { AgentRecordData, LoadedConversation } from './conversation-data.js';
import type { ConversationSandbox } from './conversation-sandbox.js';
import type { History } from './history.js';
import type { InstructionsCache } from './instructions.js';
import type { McpServers } from './mcp-servers.js';
import type { Run } from './run.js';

/** Why a live conversation closes; src/conversation/live.ts says what each one ends. */
export type CloseReason = 'deleted' | 'interrupted' | 'evicted' | 'disk-quota' | 'disk-full' | 'sandbox-fault' | 'idle' | 'shutdown';

/** What the agent reads of a live conversation and keeps on it. */
export interface AgentConversation extends LoadedConversation {
  readonly id: string;
  /** The status the daemon acts on. */
  readonly status: ExecutionStatus;
  /** It was deleted: a run that ends starts no other. */
  readonly gone: boolean;
  /** The run under way in this process, or null. */
  run: Run | null;
  /** Actions waiting for confirmation were accepted: the next run executes them first. */
  confirmed: boolean;
  /** The prompt's view of the log, kept up to date between steps (history.ts). */
  history: History | null;
  /** The repository's instructions as read at a run's first step (instructions.ts). */
  instructions: InstructionsCache | null;
  /** Its MCP servers, once a run or a status request asked for them (mcp-servers.ts). */
  mcp: McpServers | null;
  readonly sandbox: ConversationSandbox;
  close(reason: CloseReason, detail?: string): Promise<void>;
}

/** The registry's part the agent uses (src/conversation/conversations.ts). */
export interface AgentConversations {
  /** The live conversation, loaded on first use; NotFoundError when it does not exist. */
  require(id: string): Promise<AgentConversation>;
  /** Every conversation loaded here. */
  each(): Iterable<AgentConversation>;
  /** Moves the status, recording `along` (before the status event) and `then` (after it) in the same commit. */
  setStatus(id: string, status: ExecutionStatus, along?: EventDraft[], then?: EventDraft[]): Promise<void>;
  /** Merge-patch the record's data. */
  updateData(id: string, patch: Partial<AgentRecordData>): Promise<void>;
  /** The conversation's MCP configuration, secrets opened. */
  mcpConfig(id: string): Promise<FullMcpConfig>;
  /** A field of the conversation's data, read from the store when it is too large to be kept in memory. */
  field<K extends keyof AgentRecordData>(conv: LoadedConversation, key: K): Promise<AgentRecordData[K]>;
}
