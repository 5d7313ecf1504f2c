/** The eviction rule on its own (src/sandbox/eviction.ts): least recently used idle sandboxes go first, busy ones never. */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { evictionVictims, liveCap, type EvictionCandidate } from '../src/sandbox/eviction.js';

const c = (busy: boolean, lastUsed: number, active = true): EvictionCandidate => ({ busy, lastUsed, active });

describe('sandbox eviction', { timeout: 10_000 }, () => {
  test('under the cap nothing goes; over it the least recently used idle ones, as many as needed', () => {
    const live: [string, EvictionCandidate][] = [
      ['a', c(false, 30)],
      ['b', c(false, 10)],
      ['c', c(false, 20)],
    ];
    assert.deepEqual(evictionVictims(live, 'new', 4), []);
    assert.deepEqual(evictionVictims(live, 'new', 3), ['b']);
    assert.deepEqual(evictionVictims(live, 'new', 2), ['b', 'c']);
  });

  test('busy sandboxes are never closed, even when the cap is then exceeded', () => {
    const live: [string, EvictionCandidate][] = [
      ['a', c(true, 1)],
      ['b', c(true, 2)],
      ['c', c(false, 3)],
    ];
    assert.deepEqual(evictionVictims(live, 'new', 1), ['c']);
  });

  test('the entering conversation and bookkeeping without a process or holder do not count', () => {
    const live: [string, EvictionCandidate][] = [
      ['self', c(false, 1)],
      ['idle-bookkeeping', c(false, 2, false)],
      ['x', c(false, 3)],
    ];
    assert.deepEqual(evictionVictims(live, 'self', 2), []);
    assert.deepEqual(evictionVictims(live, 'self', 1), ['x']);
  });

  test('no cap (0) closes nothing', () => {
    assert.deepEqual(evictionVictims([['a', c(false, 1)]], 'new', 0), []);
  });

  test('the cap: configured when a cgroup bounds the sandboxes together, else also what the memory holds', () => {
    assert.equal(liveCap(64, true, 12_288, 4096), 64);
    assert.equal(liveCap(64, false, 12_288, 4096), 3);
    assert.equal(liveCap(0, false, 12_288, 4096), 3);
    assert.equal(liveCap(2, false, 12_288, 4096), 2);
    assert.equal(liveCap(0, false, 1000, 4096), 1, 'at least one');
  });
});
