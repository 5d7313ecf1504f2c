/**
 * Whether a build is missing or older than any of its sources (files, or directories walked
 * whole), by modification time: scripts/start.mjs asks it of dist/, bin/parley.mjs of lib/.
 * Kept apart from build.mjs, which loads esbuild: a fresh build starts without it.
 *
 * No import statements, as in the daemon's entry (scripts/daemon-entry.mjs): each built-in an ES
 * module imports gets an ES module facade made before `npm start` reaches the daemon.
 */

/**
 * A Node built-in by name ('node:fs'), without an import, for this file and scripts/start.mjs:
 * `process.getBuiltinModule` (Node 20.16 and later), else (Node 20.15, which package.json still
 * allows) a `require`. The daemon's entry has its own (scripts/code-cache.mjs): this file is
 * installed with the package, that one is bundled into dist/main.mjs.
 */
export const builtin = process.getBuiltinModule ?? (await import('node:module')).createRequire(import.meta.url);
const fs = builtin('node:fs');

function newest(p) {
  const st = fs.statSync(p);
  if (!st.isDirectory()) return st.mtimeMs;
  let m = st.mtimeMs;
  for (const name of fs.readdirSync(p)) m = Math.max(m, newest(`${p}/${name}`));
  return m;
}

/**
 * What dist/ (the daemon's build) is made from, relative to the checkout: scripts/start.mjs
 * rebuilds it when one is newer, and so do the tests (test/support/daemon.ts).
 */
export const DAEMON_SOURCES = [
  'bridge',
  'src',
  'console',
  'scripts/build.mjs',
  'scripts/daemon-entry.mjs',
  'scripts/code-cache.mjs',
  'package.json',
  'package-lock.json',
];

/** True when `built` does not exist or a source that exists is newer. */
export function isStale(built, sources) {
  let at = 0;
  try {
    at = fs.statSync(built).mtimeMs;
  } catch {
    return true;
  }
  return sources.some((s) => fs.existsSync(s) && newest(s) > at);
}
