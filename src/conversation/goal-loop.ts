/** The `/goal` loop running in this process for a conversation (`conv.goal`; goals.ts drives it). */
export class GoalLoop {
  readonly controller = new AbortController();
  /** The conversation is deleted or the daemon stops: the loop ends without recording anything. */
  closing = false;
  /** Settles when the loop has ended and recorded how. */
  done: Promise<void> = Promise.resolve();
}
