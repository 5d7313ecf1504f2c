/**
 * The import rules of .dependency-cruiser.cjs (run by `npm test` before the suites): they hold for
 * the tree, and they fail on an import circle and on an upward import, type-only included (so the
 * check in CI can fail).
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const DEPCRUISE = path.join(ROOT, 'node_modules', '.bin', 'depcruise');
const CONFIG = path.join(ROOT, '.dependency-cruiser.cjs');

function depcruise(cwd: string, args: string[]): Promise<{ code: number; out: string }> {
  return new Promise((resolve) => {
    execFile(DEPCRUISE, [...args, '--config', CONFIG], { cwd, timeout: 120_000 }, (err, stdout, stderr) => {
      resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, out: `${stdout}${stderr}` });
    });
  });
}

test('the tree keeps the rules: no circle, no upward import, nothing imports scripts/', { timeout: 150_000 }, async () => {
  const r = await depcruise(ROOT, ['src', 'bridge', 'scripts', 'cli']);
  assert.equal(r.code, 0, r.out);
  assert.match(r.out, /no dependency violations found/);
});

test('a circle, an upward import (type-only) and an import of scripts/ fail the check', { timeout: 150_000 }, async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'parley-layers-'));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  const write = (file: string, text: string) => {
    fs.mkdirSync(path.dirname(path.join(dir, file)), { recursive: true });
    fs.writeFileSync(path.join(dir, file), text);
  };
  write('tsconfig.json', JSON.stringify({ compilerOptions: { module: 'NodeNext', moduleResolution: 'NodeNext' } }));
  write('src/events/schema.ts', "import type { Tool } from '../tools/types.js';\nexport type E = Tool;\n");
  write('src/tools/types.ts', 'export type Tool = { name: string };\n');
  write('src/agent/a.ts', "import { b } from './b.js';\nexport const a = () => b;\n");
  write('src/agent/b.ts', "import { a } from './a.js';\nexport const b = 1;\nexport const c = a;\n");
  write('src/metrics.ts', "import { x } from '../scripts/bench.js';\nexport const m = x;\n");
  write('scripts/bench.ts', 'export const x = 1;\n');
  fs.symlinkSync(path.join(ROOT, 'node_modules'), path.join(dir, 'node_modules'));

  const r = await depcruise(dir, ['src', 'scripts']);
  assert.notEqual(r.code, 0, r.out);
  assert.match(r.out, /error no-circular: src\/agent\/a\.ts/);
  assert.match(r.out, /error layer-store-events: src\/events\/schema\.ts → src\/tools\/types\.ts/);
  assert.match(r.out, /error no-importing-scripts: src\/metrics\.ts → scripts\/bench\.ts/);
});
