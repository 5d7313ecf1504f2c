/**
 * A conversation's workspace preparation as its record keeps it (`data.setup`): the phase enum and
 * the one rule of when it is still under way (every phase before `ready`, except `error`).
 */
import { z } from 'zod';

/** In the order they happen: `pending` at create, the clone's own phases, `replaying`, then an end. */
export const SETUP_PHASES = ['pending', 'preparing', 'cloning', 'checking_out', 'cloned', 'replaying', 'ready', 'error'] as const;
export type SetupPhase = (typeof SETUP_PHASES)[number];

export const SetupState = z.object({ phase: z.enum(SETUP_PHASES), detail: z.string().optional() });
export type SetupState = z.infer<typeof SetupState>;

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
