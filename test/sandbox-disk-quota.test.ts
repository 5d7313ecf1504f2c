/**
 * The measured disk bound's rule over time (src/sandbox/disk-quota.ts), with measures the test
 * gives: a conversation over the bound is stopped; what it holds once its processes are gone is
 * its new mark (what they wrote while being stopped is no growth); past that mark it is stopped again.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { DiskQuota } from '../src/sandbox/disk-quota.js';
import { waitFor } from './support/daemon.js';

const MiB = 1024 * 1024;

test('over the bound a conversation is stopped once; writes until its end are not growth; growth past what it then holds stops it again', {
  timeout: 120_000,
}, async (t) => {
  // the sizes (MiB) its next measures answer, in order (each round measures it once it is due)
  const sizes: number[] = [];
  const stops: number[] = [];
  const quota = new DiskQuota(
    16 * MiB,
    () => (sizes.length > 0 ? [{ id: 'a', usable: true, active: true, measure: async () => sizes.shift()! * MiB }] : []),
    (_id, used) => stops.push(used / MiB),
  );
  t.after(() => quota.stop());
  quota.start();
  // (the round weighs a measure in the microtasks after it answers: a macrotask later it has)
  const measured = async (label: string) => {
    await waitFor(() => sizes.length === 0, label, 30_000);
    await new Promise((r) => setImmediate(r));
  };

  sizes.push(20);
  await measured('the measure that finds it over');
  assert.deepEqual(stops, [20]);
  // its processes, being stopped, wrote on: a measure before they are gone is no second stop
  sizes.push(23);
  await measured('a measure while it is being stopped');
  assert.deepEqual(stops, [20]);
  quota.settle('a');
  // its next sandbox: what it holds now (more than when it was found over) is its mark
  sizes.push(25);
  await measured('the first measure after the stop');
  assert.deepEqual(stops, [20], 'what it wrote while being stopped did not stop it again');
  sizes.push(24);
  await measured('a measure after a rm');
  assert.deepEqual(stops, [20]);
  sizes.push(26);
  await measured('a measure after it wrote more');
  assert.deepEqual(stops, [20, 26], 'growth past its mark stops it again');
});
