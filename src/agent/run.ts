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

  /** Cancels the in-flight LLM call or tool now and waits (5 s at most) for the loop to record it. */
  async stop(): Promise<void> {
    this.controller.abort(new Interrupted('interrupted'));
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([this.done, new Promise((r) => (timer = setTimeout(r, 5000)))]);
    clearTimeout(timer);
  }
}
