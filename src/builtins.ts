/**
 * Node built-ins the daemon does not need before it listens, loaded on first use.
 *
 * A built-in imported at a module's top is loaded when the daemon starts, whether or not anything
 * calls it before the first request. child_process and zlib are the two the start does not need:
 * their first users come later (the sandbox's probe after the listen, a tool, git, an MCP server,
 * the journal's first frame). Loading them at start cost ~4 ms to the first 200 of /health under
 * `node dist/main.mjs` and ~8 ms under `npm start` (medians of 21 alternating starts), whose V8
 * flag (--max-semi-space-size) makes V8 refuse Node's own code cache, so each built-in is compiled
 * from its source there. (node:net is not among them: Node's streams for a stdout or stderr that
 * is a pipe, a socket or a terminal are net sockets, so it is loaded anyway.)
 * `test/daemon-code-cache.test.ts` checks the built daemon has loaded none of these when it listens.
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
export const zlib = onFirstUse<typeof import('node:zlib')>('node:zlib');

/** The built-ins above by name, for the test that checks the start loads none of them. */
export const LOADED_ON_FIRST_USE = ['child_process', 'zlib'] as const;
