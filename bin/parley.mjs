#!/usr/bin/env -S node --max-semi-space-size=4
/**
 * `parley` (package.json `bin`; `npx parley …` in the checkout). Runs the built command
 * (lib/cli.mjs, see scripts/build.mjs). In a checkout it is rebuilt first when a source is newer,
 * as scripts/start.mjs does for the daemon; an installed package has no sources and runs its build.
 * The V8 flag in the first line is `npm start`'s, for `parley serve` (the daemon runs in this process).
 */
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { isStale } from '../scripts/stale.mjs';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const entry = path.join(root, 'lib', 'cli.mjs');
const checkout = fs.existsSync(path.join(root, 'cli'));

if (
  checkout &&
  isStale(
    entry,
    ['cli', 'src', 'package.json'].map((s) => path.join(root, s)),
  )
) {
  const { buildPackage } = await import('../scripts/build.mjs');
  await buildPackage({ types: false });
}
const { main } = await import(pathToFileURL(entry).href);
const code = await main(process.argv.slice(2));
if (code !== null) {
  // leave once the last write has reached a pipe (sockets and timers of the client would keep the process alive)
  process.stdout.write('', () => process.exit(code));
}
