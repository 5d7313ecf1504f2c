/** Event ids (src/events/ids.ts): UUIDv7, time-ordered, unique within the process. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { uuidv7 } from '../src/events/ids.js';

const V7 = /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;
const msOf = (id: string) => parseInt(id.replace(/-/g, '').slice(0, 12), 16);

test('ids are UUIDv7 in increasing order, unique, with the millisecond they were made in', () => {
  const seen = new Set<string>();
  let prev = '';
  const before = Date.now();
  for (let i = 0; i < 100_000; i++) {
    const id = uuidv7();
    assert.match(id, V7);
    assert.ok(id > prev, `${id} after ${prev}`);
    seen.add(id);
    prev = id;
  }
  assert.equal(seen.size, 100_000);
  assert.ok(msOf(prev) >= before);
  // 4,096 ids within one millisecond carry into the next one and stay in order
  const t = Date.now() + 60_000;
  const burst = Array.from({ length: 5000 }, () => uuidv7(t));
  assert.equal(msOf(burst[0]!), t);
  for (let i = 1; i < burst.length; i++) assert.ok(burst[i]! > burst[i - 1]!);
  assert.ok(msOf(burst.at(-1)!) > t);
  // random bits differ between ids (not a counter alone)
  assert.notEqual(burst[0]!.slice(19), burst[1]!.slice(19));
});
