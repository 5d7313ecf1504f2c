/**
 * Whether a build is missing or older than any of its sources (files, or directories walked
 * whole), by modification time: scripts/start.mjs asks it of dist/, bin/parley.mjs of lib/.
 * Kept apart from build.mjs, which loads esbuild: a fresh build starts without it.
 */
import fs from 'node:fs';

function newest(p) {
  const st = fs.statSync(p);
  if (!st.isDirectory()) return st.mtimeMs;
  let m = st.mtimeMs;
  for (const name of fs.readdirSync(p)) m = Math.max(m, newest(`${p}/${name}`));
  return m;
}

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
