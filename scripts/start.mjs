/**
 * `npm start`: runs the built daemon (dist/, see build.mjs), rebuilding it first when it is missing
 * or older than a source file, so `npm start` always runs the current code.
 * Built-ins come from stale.mjs's `builtin`, not from imports (why: stale.mjs).
 */
import { builtin, DAEMON_SOURCES, isStale } from './stale.mjs';

const path = builtin('node:path');
const root = path.dirname(import.meta.dirname);
const entry = path.join(root, 'dist', 'main.mjs');

if (
  isStale(
    entry,
    DAEMON_SOURCES.map((s) => path.join(root, s)),
  )
) {
  const { build } = await import('./build.mjs');
  await build();
}
await import(entry);
