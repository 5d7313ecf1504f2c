/**
 * `npm test` after the layer check: every test/*.test.ts (or the files named on the command line)
 * in a process of its own, five at a time, each file with a 3-minute limit: what
 * `node --import tsx --test --test-concurrency=5 --test-timeout=180000 test/*.test.ts` does, but
 * with the files that take longest started first. `node --test` runs its files in name order, so
 * a long file late in the alphabet (tools-terminal) ran alone at the end; started first, the long
 * ones overlap the many short ones. Run with `--import tsx`: the files' processes get node's flags
 * of this one.
 */
import fs from 'node:fs';
import path from 'node:path';
import { run } from 'node:test';
import { spec, tap } from 'node:test/reporters';
import { fileURLToPath } from 'node:url';

const TEST_DIR = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

/**
 * The files that took longest (wall time, each run alone, 2026-11-26), longest first, with the files
 * driving Chromium spread out. A file not named here runs after them, in name order; a name here
 * without its file is skipped.
 */
const LONGEST_FIRST = [
  'fuzz-memory',
  'loadtest',
  'client-package',
  'tools-terminal',
  'cli',
  'cluster-failover',
  'cluster-ownership',
  'console-stream',
  'agent-control',
  'daemon-lifecycle',
  'sandbox-idle',
  'console-pages',
  'sandbox-limits',
  'console',
  'daemon-code-cache',
  'repo-conversation',
  'fuzz',
  'sandbox-holders',
  'mcp',
  'mcp-daemon',
].map((name) => path.join(TEST_DIR, `${name}.test.ts`));
/**
 * Last, when the long files are done: console-10k's first paint of 10,000 events in Chromium missed
 * its 90 s twice when it started beside the long files (once at the suite's own load of ~8).
 */
const LAST = ['console-10k'].map((name) => path.join(TEST_DIR, `${name}.test.ts`));

const named = process.argv.slice(2).map((f) => path.resolve(f));
const all = named.length > 0 ? named : fs.readdirSync(TEST_DIR).filter((f) => f.endsWith('.test.ts')).sort().map((f) => path.join(TEST_DIR, f));
const placed = [...LONGEST_FIRST, ...LAST];
const files = [...LONGEST_FIRST.filter((f) => all.includes(f)), ...all.filter((f) => !placed.includes(f)), ...LAST.filter((f) => all.includes(f))];

const stream = run({ files, concurrency: 5, timeout: 180_000 });
stream.on('test:fail', (data) => {
  if (!data.todo) process.exitCode = 1;
});
// as node --test reports: spec on a terminal, TAP otherwise
stream.compose(process.stdout.isTTY ? new spec() : tap).pipe(process.stdout);
