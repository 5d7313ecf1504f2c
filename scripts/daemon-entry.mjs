/**
 * dist/main.mjs (copied there by scripts/build.mjs): what `node dist/main.mjs` and `npm start` run.
 * It runs the bundled daemon, dist/daemon.cjs, through a V8 code cache, dist/daemon.cjs.<key>.cache.
 *
 * Why: compiling the bundle was the largest single cost before the first request (parsing 1.4 MB of
 * ES modules, then compiling every function the start calls). Node 20 caches no compiled ES module
 * code, but a script compiled by `vm.Script` takes V8's cached data: the bytecode of every function
 * the previous start compiled, so this start parses and compiles none of them.
 *
 * When the cache is used: V8 itself rejects data made by another V8 version or under other V8
 * flags, but checks the source only by its length. So the cache file starts with the SHA-256 of
 * the bundle it was made from, and is used only when that is the bundle read now: an edited or
 * rebuilt bundle, even one of the same length, is compiled afresh. A cache that is missing,
 * unreadable, truncated or rejected costs that one start its compile time, never its behaviour;
 * that start writes a new one (once it listens, or at exit if that comes first), atomically, next
 * to the bundle, with the daemon's 0600 umask. A directory the daemon cannot write (a read-only
 * install) only means no cache. It is kept next to the bundle on purpose: whoever can write it
 * can already change the bundle itself.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import vm from 'node:vm';

const bundle = fileURLToPath(new URL('./daemon.cjs', import.meta.url));
// one cache per Node version and command-line flags: V8 rejects data made under other flags, and
// `npm start` (--max-semi-space-size) and `node dist/main.mjs` would otherwise replace each other's
const flavour = crypto.createHash('sha256').update(JSON.stringify([process.version, process.execArgv])).digest('hex').slice(0, 12);
const cacheFile = `${bundle}.${flavour}.cache`;
const DIGEST_BYTES = 32;

const bytes = fs.readFileSync(bundle);
const digest = crypto.createHash('sha256').update(bytes).digest();
let cached;
try {
  const file = fs.readFileSync(cacheFile);
  if (file.length > DIGEST_BYTES && digest.equals(file.subarray(0, DIGEST_BYTES))) cached = file.subarray(DIGEST_BYTES);
} catch {
  // no cache yet
}

// the bundle is a CommonJS module body (esbuild's `cjs` output) made of ES modules: strict, as they
// were. `import.meta.url` is replaced by `__parleyMetaUrl` at build time and is this file's URL, so
// paths next to it (the writer thread, the console, the sandbox's file service) resolve as before.
const script = new vm.Script(`(function (exports, require, module, __filename, __dirname, __parleyMetaUrl) {'use strict';${bytes.toString('utf8')}\n})`, {
  filename: bundle,
  cachedData: cached,
});
let saved = !!cached && !script.cachedDataRejected;
const save = () => {
  if (saved) return;
  saved = true;
  const tmp = `${cacheFile}.${process.pid}.tmp`;
  try {
    fs.writeFileSync(tmp, Buffer.concat([digest, script.createCachedData()]));
    fs.renameSync(tmp, cacheFile);
  } catch {
    // a read-only dist/: the daemon runs without a cache
    fs.rmSync(tmp, { force: true });
  }
};
// made once the start has compiled what it needs (bridge/main.ts emits `parley:listening`), or at
// exit for a daemon stopped sooner; serializing takes a few ms, so never before the port is open
process.once('parley:listening', () => setTimeout(save, 200).unref());
process.once('exit', save);

const module = { exports: {} };
script.runInThisContext()(module.exports, createRequire(bundle), module, bundle, path.dirname(bundle), import.meta.url);
