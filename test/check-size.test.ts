/**
 * The size check (scripts/check-size.ts, run by `npm run check`) fails on what it is there to find:
 * run as `npm run check` runs it, on files made here, so the check itself cannot pass silently.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, it } from 'node:test';
import { ROOT } from './support/daemon.js';

/** A function whose body has `n` statement lines (plus its braces), with `comment` above it. */
const fn = (name: string, n: number, comment = '') =>
  `${comment}export function ${name}(): number {\n  let x = 0;\n${'  x += 1;\n'.repeat(n - 2)}  return x;\n}\n`;

function check(files: Record<string, string>): { code: number | null; out: string } {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'parley-check-size-'));
  try {
    for (const [rel, text] of Object.entries(files)) {
      fs.mkdirSync(path.dirname(path.join(dir, rel)), { recursive: true });
      fs.writeFileSync(path.join(dir, rel), text);
    }
    const r = spawnSync(process.execPath, ['--import', 'tsx', path.join(ROOT, 'scripts/check-size.ts'), '--root', dir, ...Object.keys(files)], {
      cwd: ROOT,
      encoding: 'utf8',
      timeout: 120_000,
    });
    return { code: r.status, out: `${r.stdout}${r.stderr}` };
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

describe('check-size', () => {
  it('fails on a function over 100 lines, a file over 600 lines and a line over 160 characters', () => {
    const r = check({
      'src/long-function.ts': fn('long', 101),
      'src/long-file.ts': 'export const a = 1;\n'.repeat(601),
      'scripts/wide.ts': `export const s = '${'x'.repeat(170)}';\n`,
    });
    assert.equal(r.code, 1, r.out);
    assert.match(r.out, /src\/long-function\.ts:1: a function of 103 lines/);
    assert.match(r.out, /src\/long-file\.ts:1: 601 lines/);
    assert.match(r.out, /scripts\/wide\.ts:1: a line of \d+ characters/);
  });

  it('finds long arrow functions, methods and callbacks, and nested ones each', () => {
    const body = '    x += 1;\n'.repeat(105);
    const r = check({
      'cli/arrow.ts': `export const f = () => {\n  let x = 0;\n${body}  return x;\n};\n`,
      'bridge/method.ts': `export class A {\n  m(): number {\n    let x = 0;\n${body}    return x;\n  }\n}\n`,
      'console/src/callback.tsx': `[1].forEach(() => {\n  let x = 0;\n${body}});\n`,
    });
    assert.equal(r.code, 1, r.out);
    assert.match(r.out, /cli\/arrow\.ts:1: a function of/);
    assert.match(r.out, /bridge\/method\.ts:2: a function of/);
    assert.match(r.out, /console\/src\/callback\.tsx:1: a function of/);
  });

  it('passes a long function whose comment says why it is long, and what is within the limits', () => {
    const r = check({
      'src/reasoned.ts': fn('reasoned', 120, '/** Long: one closure over shared state. */\n'),
      'src/short.ts': fn('short', 98),
      'test/long-test.test.ts': fn('notSized', 150),
      'src/six-hundred.ts': 'export const a = 1;\n'.repeat(600),
    });
    assert.equal(r.code, 0, r.out);
    assert.equal(r.out, '');
  });

  it('a comment that gives no reason, or one far above the function, does not count', () => {
    const r = check({
      'src/no-reason.ts': fn('noReason', 101, '/** Does a thing. */\n'),
      'src/far.ts': `// long: but not this function's\nexport const other = 1;\n\n${fn('far', 101)}`,
    });
    assert.equal(r.code, 1, r.out);
    assert.match(r.out, /src\/no-reason\.ts:2: a function of/);
    assert.match(r.out, /src\/far\.ts:4: a function of/);
  });
});
