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
}

/** Background work after creation (workspace, clone, setup script). */
export interface ConversationPreparer {
  prepare(conversationId: string): Promise<void>;
  dispose?(conversationId: string): Promise<void>;
}
