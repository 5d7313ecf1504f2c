/** The state of a conversation's run while it is under way (`conv.run`), kept on the conversation. */

/** The reason a run's controller is aborted with by an interrupt (or a close). */
class Interrupted extends Error {}

export class Run {
  readonly controller = new AbortController();
  pauseRequested = false;
  /** Set when a message arrives: the loop must not finish without looking at it. */
  newInput = false;
  /** The stuck window's nudge was sent in this run. */
  nudged = false;
  /** The newest event seq the loop has read: a user message after it has not been seen. */
  seenSeq = 0;
  /** Settles once the loop and what follows it (`afterRun`) have ended. */
  done: Promise<void> = Promise.resolve();
  /** The run's status became `running` (with the first events it appended: `AgentRuntime.begin`). */
  begun = false;
  /** Appends the loop went on without waiting for (`unawaited`). */
  private pending: Promise<unknown>[] = [];

  /**
   * An append the loop does not wait for (the run's status with the system prompt, a retry's note):
   * its commit overlaps the LLM request instead of delaying it. The store commits a conversation's
   * appends in the order they are made, so what the loop appends later follows it; `committed()` is
   * awaited before the step records the LLM's answer, and surfaces a commit that failed.
   */
  unawaited(append: Promise<unknown>): void {
    append.catch(() => {}); // seen by committed(); not an unhandled rejection meanwhile
    this.pending.push(append);
  }

  /** Every append made with `unawaited` is committed (throws the first failure). */
  async committed(): Promise<void> {
    if (this.pending.length === 0) return;
    const all = this.pending;
    this.pending = [];
    await Promise.all(all);
  }

  /** Cancels the in-flight LLM call or tool now and waits (5 s at most) for the loop to record it. */
  async stop(): Promise<void> {
    this.controller.abort(new Interrupted('interrupted'));
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([this.done, new Promise((r) => (timer = setTimeout(r, 5000)))]);
    clearTimeout(timer);
  }
}
