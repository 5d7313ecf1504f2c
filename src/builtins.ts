/**
 * Node built-ins the daemon does not need before it listens, loaded on first use.
 *
 * A built-in imported at a module's top is loaded when the daemon starts, whether or not anything
 * calls it before the first request. child_process is one the start does not need: its first users
 * come later (the sandbox's probe after the listen, a tool, git, an MCP server). Loading it at start
 * cost ~2 ms to the first 200 of /health under `node dist/main.mjs` and ~10 ms under `npm start`,
 * whose V8 flag (--max-semi-space-size) makes V8 refuse Node's own code cache, so each built-in is
 * compiled from its source there. Not here: node:net (Node's streams for a stdout or stderr that is
 * a pipe, a socket or a terminal are net sockets, so it is loaded anyway) and node:zlib (the
 * journal's checksums: loaded on the first write instead, in the middle of a burst of new
 * conversations, it left the daemon larger after 1,000 of them in scripts/bench-startup.ts, +9.9
 * and +10.5 against +8.4 and +8.4 MiB in two alternating pairs, where +10 MiB is the bound; that
 * figure varies by about 1 MiB from run to run, the 2–5 ms were not worth the risk).
 * `test/daemon-code-cache.test.ts` checks the built daemon has not loaded these when it listens.
 *
 * Types come from `import type`, which loads nothing.
 */
import { createRequire } from 'node:module';

const load = createRequire(import.meta.url);

function onFirstUse<T>(id: string): () => T {
  let mod: T | undefined;
  return () => (mod ??= load(id) as T);
}

export const childProcess = onFirstUse<typeof import('node:child_process')>('node:child_process');

/** The built-ins above by name, for the test that checks the start loads none of them. */
export const LOADED_ON_FIRST_USE = ['child_process'] as const;
