/**
 * The arrival rate the spare holders are sized from (src/sandbox/arrivals.ts): quick to follow a
 * burst, slow to relax, forgetting the rate after a quiet spell, not counting the gap after a take that
 * found no spare, the stagger between the starts of spares needed at once, and the spares held for the
 * next burst once the arrivals stopped.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { Arrivals } from '../src/sandbox/arrivals.js';

const QUIET = 5000;

/** Takes at the given times (ms); `cold` marks those that found no spare. */
function takes(times: number[], cold: number[] = []): Arrivals {
  const a = new Arrivals(() => QUIET);
  for (const t of times) {
    a.take(t);
    if (cold.includes(t)) a.cold(t);
  }
  return a;
}

describe('sandbox: the arrival rate of conversations (spare sizing)', { timeout: 10_000 }, () => {
  test('no rate before a second take; the first gap is the rate', () => {
    assert.equal(takes([1000]).interval, null, 'the first take has no gap before it (it is longer than the quiet spell)');
    assert.equal(takes([1000, 1300]).interval, 300);
  });

  test('a burst that begins is followed at once: a gap shorter than the rate replaces it', () => {
    // a slow pair, then conversations 50 ms apart: the rate is 50 from the first short gap on,
    // where a plain average would take several takes to come down (1300 → 675 → 362 → …)
    const a = takes([1000, 2300, 2350]);
    assert.equal(a.interval, 50);
    a.take(2400);
    assert.equal(a.interval, 50);
  });

  test('arrivals that slow down are followed half way per take', () => {
    const a = takes([0, 100, 200]);
    assert.equal(a.interval, 100);
    a.take(500); // a gap of 300
    assert.equal(a.interval, 200);
    a.take(800); // 300 again
    assert.equal(a.interval, 250);
  });

  test('a gap longer than the quiet spell forgets the rate', () => {
    const a = takes([0, 100, 200]);
    a.take(200 + QUIET + 1);
    assert.equal(a.interval, null);
  });

  test('the gap after a take that found no spare is not counted (it holds that conversation waiting for its holder)', () => {
    // 60 ms apart, then a cold take whose conversation waited 400 ms before the next came
    const a = takes([0, 60, 120, 180], [180]);
    assert.equal(a.interval, 60);
    a.take(580);
    assert.equal(a.interval, 60, 'the 400 ms after the cold take left the rate as it was');
    a.take(640);
    assert.equal(a.interval, 60, 'the gaps after it count again');
    a.take(1040);
    assert.equal(a.interval, 230, 'a slow gap after a warm take does count');
  });

  test('spares needed at once start the time between arrivals apart, at most the bound given', () => {
    assert.equal(takes([0]).staggerMs(100), 0, 'no rate: no stagger');
    assert.equal(takes([0, 40]).staggerMs(100), 40);
    assert.equal(takes([0, 400]).staggerMs(100), 100);
    const a = takes([0, 40]);
    a.forget();
    assert.equal(a.interval, null);
    assert.equal(a.staggerMs(100), 0);
  });

  test("once the arrivals stop, the latest burst's size is held for the time given, then none; a lone take holds one", () => {
    const a = takes([0, 50, 100, 150, 200]);
    assert.equal(a.held(200 + QUIET, 60_000), 5, 'five takes each within the quiet spell of the one before');
    a.forget();
    assert.equal(a.held(200 + 59_999, 60_000), 5, 'forgetting the rate keeps the size');
    assert.equal(a.held(200 + 60_001, 60_000), 0, 'the hold is over');
    // the next take after a quiet spell begins a new burst; a lone one holds one
    a.take(200 + QUIET + 1);
    assert.equal(a.held(200 + 2 * QUIET, 60_000), 1);
    // a burst larger than the most held
    assert.equal(takes(Array.from({ length: 100 }, (_, i) => i * 10)).held(1000 + QUIET, 60_000), 24);
  });
});
