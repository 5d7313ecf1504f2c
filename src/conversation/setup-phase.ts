/**
 * A conversation's workspace preparation as its record keeps it (`data.setup`): the one rule of when
 * it is still under way (every phase before `ready`, except `error`). The phase enum is defined with
 * the event model (src/events/schema.ts), since the `setup` state update carries it too.
 */
import { SETUP_PHASES, SetupState, type SetupPhase } from '../events/schema.js';

// defined with the event model (the `setup` state update carries them), used from here by the conversation layer
export { SETUP_PHASES, SetupState, type SetupPhase };

/** The phase a record's data holds; undefined when it has none (no preparation) or one this version does not know. */
export function setupPhaseOf(data: Record<string, unknown>): SetupPhase | undefined {
  const parsed = SetupState.safeParse(data.setup);
  return parsed.success ? parsed.data.phase : undefined;
}

/** The preparation is under way (a run asked for meanwhile waits for it). */
export function stillPreparing(data: Record<string, unknown>): boolean {
  const phase = setupPhaseOf(data);
  return phase !== undefined && phase !== 'ready' && phase !== 'error';
}
