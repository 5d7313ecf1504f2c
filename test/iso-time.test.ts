/**
 * The UTC timestamps (src/iso-time.ts): the same text as `Date.prototype.toISOString` for every
 * instant, across the second's cache, and the logger's `time` field made with them.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { Writable } from 'node:stream';
import { test } from 'node:test';
import { isoTime } from '../src/iso-time.js';
import { createLogger } from '../src/logger.js';
import { Redactor } from '../src/secrets/redact.js';

const same = (ms: number) => assert.equal(isoTime(ms), new Date(ms).toISOString(), `at ${ms}`);

test('isoTime gives toISOString’s text at the edges of days, months, leap years and the range', () => {
  const edges = [
    0,
    -0,
    1,
    999,
    1000,
    Date.UTC(1999, 11, 31, 23, 59, 59, 999),
    Date.UTC(2000, 0, 1),
    Date.UTC(2000, 1, 29, 12, 0, 0, 5),
    Date.UTC(2024, 1, 29, 23, 59, 59, 990),
    Date.UTC(2100, 2, 1, 0, 0, 0, 99),
    Date.UTC(9999, 11, 31, 23, 59, 59, 999),
    // outside the four-digit years after 1970: toISOString's own forms
    Date.UTC(10000, 0, 1),
    Date.UTC(1969, 11, 31, 23, 59, 59, 999),
    -62198755200000,
    8.64e15,
    -8.64e15,
    // a fraction is cut as a Date cuts it
    1700000000123.9,
    -0.5,
  ];
  for (const ms of edges) same(ms);
});

test('isoTime matches toISOString for random instants, in and out of order, and for now', () => {
  let seed = 42;
  const next = () => {
    seed = (seed * 1103515245 + 12345) % 2 ** 31;
    return seed / 2 ** 31;
  };
  const max = Date.UTC(9999, 11, 31, 23, 59, 59, 999);
  for (let i = 0; i < 20_000; i++) same(Math.floor(next() * max));
  // steps within one second and across seconds, where the cached prefix is kept and replaced
  const start = Date.UTC(2026, 11, 3, 10, 0, 58, 900);
  for (let ms = start; ms < start + 2_500; ms += 7) same(ms);
  for (let ms = start + 2_500; ms > start; ms -= 13) same(ms);
  const before = Date.now();
  const now = isoTime();
  assert.ok(now >= new Date(before).toISOString() && now <= new Date(Date.now()).toISOString(), now);
});

test('isoTime refuses what toISOString refuses', () => {
  assert.throws(() => isoTime(Number.NaN), RangeError);
  assert.throws(() => isoTime(8.64e15 + 1), RangeError);
});

test('a log line’s time is the UTC timestamp of when it was written', async () => {
  const lines: string[] = [];
  const sink = new Writable({
    write(chunk, _enc, done) {
      lines.push(String(chunk));
      done();
    },
  });
  const before = Date.now();
  createLogger('info', new Redactor(), sink).info({ what: 'probe' }, 'hello');
  const after = Date.now();
  await new Promise((r) => setImmediate(r));
  assert.equal(lines.length, 1);
  const line = JSON.parse(lines[0]!);
  assert.match(line.time, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
  const t = Date.parse(line.time);
  assert.ok(t >= before && t <= after, line.time);
  assert.equal(line.msg, 'hello');
});

test('the sources make no timestamp with toISOString (it sets up ICU’s host time zone: src/iso-time.ts)', () => {
  const root = path.resolve(import.meta.dirname, '..');
  const found: string[] = [];
  const walk = (dir: string) => {
    for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
      const p = path.join(dir, e.name);
      if (e.isDirectory()) walk(p);
      else if (/\.(ts|mts)$/.test(e.name) && !p.endsWith(path.join('src', 'iso-time.ts'))) {
        const text = fs.readFileSync(p, 'utf8');
        if (/\.toISOString\(|stdTimeFunctions/.test(text)) found.push(path.relative(root, p));
      }
    }
  };
  for (const dir of ['src', 'bridge', 'cli']) walk(path.join(root, dir));
  assert.deepEqual(found, []);
});
