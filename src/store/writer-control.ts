/**
 * The control array the store shares with its writer thread (writer.ts), one Int32 per slot: the
 * store bumps WAKE (and notifies it) to end a retry's backoff at once, and sets STOP when it closes
 * so that a write that keeps failing is left to the journal instead of retried.
 */
export const WAKE = 0;
export const STOP = 1;
export const CONTROL_SLOTS = 2;
