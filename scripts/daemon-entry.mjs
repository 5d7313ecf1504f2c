/**
 * dist/main.mjs (bundled there with scripts/code-cache.mjs by scripts/build.mjs): what
 * `node dist/main.mjs` and `npm start` run. It runs the bundled daemon, dist/daemon.cjs, through a
 * V8 code cache, dist/daemon.cjs.<key>.cache (its format and key: scripts/code-cache.mjs).
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
 * to the bundle, with the daemon's 0600 umask. The build leaves one made by compiling the bundle
 * alone (the first start parses no 2.7 MB), which the first start replaces with its own; a
 * directory the daemon cannot write (a read-only install) keeps the build's. The cache is kept next
 * to the bundle on purpose: whoever can write it can already change the bundle itself.
 *
 * Why dist/main.mjs imports nothing: an ES module reaches its first statement only once every module
 * it imports is resolved, read, parsed and linked, and each Node built-in it imports gets an ES
 * module facade made for it; with code-cache.mjs and six built-ins imported, that was ~5 ms of the
 * start. So the build bundles code-cache.mjs into this file (the one import below, which leaves no
 * import statement in dist/main.mjs), and the built-ins come from `builtin` (code-cache.mjs),
 * which reads Node's own modules without an import.
 */
import { builtin, cacheFileOf, compile, digestOf, MADE_BY_BUILD, MADE_BY_START, readCache, writeCache } from './code-cache.mjs';

const fs = builtin('node:fs');
const { createRequire } = builtin('node:module');
const bundle = builtin('node:path').join(import.meta.dirname, 'daemon.cjs');
const cacheFile = cacheFileOf(bundle);
// in a function: the file's bytes and the cache's (4 MB) are garbage once compiled, the script keeps the source
const {
  digest,
  script,
  saved: upToDate,
} = (() => {
  const bytes = fs.readFileSync(bundle);
  const digest = digestOf(bytes);
  const cached = readCache(cacheFile, digest);
  const script = compile(bundle, bytes, cached?.data);
  // the build's cache (the bundle compiled, no function it calls) is replaced by a start's
  return { digest, script, saved: !!cached && !script.cachedDataRejected && cached.madeBy !== MADE_BY_BUILD };
})();
let saved = upToDate;
const save = () => {
  if (saved) return;
  saved = true;
  writeCache(cacheFile, digest, MADE_BY_START, script.createCachedData());
};
// made once the start has compiled what it needs (bridge/main.ts emits `parley:listening`), or at
// exit for a daemon stopped sooner; serializing takes a few ms, so never before the port is open.
// A start that ends before listening (a bad configuration, a busy port) compiled too little: it
// leaves the cache as it was.
let listening = false;
process.once('parley:listening', () => {
  listening = true;
  setTimeout(save, 200).unref();
});
process.once('exit', () => listening && save());

// `import.meta.url` in the bundle is this file's URL, so paths next to it (the writer thread, the
// console, the sandbox's file service) resolve as they did when the daemon was this module
const module = { exports: {} };
script.runInThisContext()(module.exports, createRequire(bundle), module, bundle, import.meta.dirname, import.meta.url);
