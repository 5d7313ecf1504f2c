/** The preparation rule on its own (src/conversation/setup-phase.ts): which phases are still under way. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { SETUP_PHASES, setupPhaseOf, stillPreparing } from '../src/conversation/setup-phase.js';

test('every phase before ready is still preparing, ready and error are not, no setup is not', { timeout: 10_000 }, () => {
  const waiting = SETUP_PHASES.filter((p) => stillPreparing({ setup: { phase: p } }));
  assert.deepEqual(waiting, ['pending', 'preparing', 'cloning', 'checking_out', 'cloned', 'replaying']);
  assert.equal(stillPreparing({}), false);
  assert.equal(setupPhaseOf({ setup: { phase: 'cloning', detail: 'acme/app' } }), 'cloning');
});

test('a phase this version does not know (or a malformed setup) counts as none, not as preparing', { timeout: 10_000 }, () => {
  assert.equal(setupPhaseOf({ setup: { phase: 'warming-up' } }), undefined);
  assert.equal(setupPhaseOf({ setup: 'ready' }), undefined);
  assert.equal(stillPreparing({ setup: { phase: 42 } }), false);
});
