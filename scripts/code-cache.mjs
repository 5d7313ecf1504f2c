/**
 * The built daemon's V8 code cache (bundled into dist/main.mjs by scripts/build.mjs): one definition
 * of how the bundle is wrapped, where its cache is kept and what a cache file holds, for the entry
 * that uses and writes it (scripts/daemon-entry.mjs), for the build that writes the first one
 * (scripts/build.mjs) and for scripts/bench-startup.ts. Why and when the cache is used:
 * daemon-entry.mjs.
 *
 * A cache file: the SHA-256 of the bundle it was made from (32 bytes), what made it (1 byte: the
 * build, which only compiled the bundle, or a start, which also compiled every function it
 * called), then V8's data.
 *
 * No import statements, as in the entry this becomes part of (why: daemon-entry.mjs): Node's
 * built-ins come from `builtin`.
 */

/**
 * A Node built-in by name ('node:fs'), without an import: `process.getBuiltinModule` (Node 20.16
 * and later), else (Node 20.15, which package.json still allows) a `require`.
 */
export const builtin = process.getBuiltinModule ?? (await import('node:module')).createRequire(import.meta.url);
const crypto = builtin('node:crypto');
const fs = builtin('node:fs');
const vm = builtin('node:vm');

export const MADE_BY_BUILD = 0;
export const MADE_BY_START = 1;
const HEADER = 33;

const WRAPPER_HEAD = Buffer.from("(function (exports, require, module, __filename, __dirname, __parleyMetaUrl) {'use strict';");
const WRAPPER_TAIL = Buffer.from('\n})');

/**
 * Compiles the bundle (a CommonJS module body made of ES modules: strict, as they were) as a
 * function of the CommonJS arguments and `__parleyMetaUrl`, which stands for `import.meta.url`.
 */
export function compile(bundle, bytes, cachedData) {
  // decoded once, wrapper and all: a template around the decoded bundle made its 2.8 MB twice, and the
  // first copy stayed on the heap as garbage until a full GC, which an idle daemon may never run
  const source = Buffer.concat([WRAPPER_HEAD, bytes, WRAPPER_TAIL]).toString('utf8');
  return new vm.Script(source, { filename: bundle, cachedData });
}
export const digestOf = (bytes) => crypto.createHash('sha256').update(bytes).digest();

/**
 * One cache per Node version and command-line flags: V8 rejects data made under other flags, and
 * `npm start` (--max-semi-space-size) and `node dist/main.mjs` would otherwise replace each other's.
 * Code given with -e/-p (a build run that way) is no flag.
 */
export function cacheFileOf(bundle, execArgv = process.execArgv) {
  const flags = execArgv.filter((a, i) => !/^(-e|-p|--eval|--print)(=|$)/.test(a) && !/^(-e|-p|--eval|--print)$/.test(execArgv[i - 1] ?? ''));
  return `${bundle}.${crypto
    .createHash('sha256')
    .update(JSON.stringify([process.version, flags]))
    .digest('hex')
    .slice(0, 12)}.cache`;
}

/** The cache made from the bundle whose digest is `digest`, or undefined (missing, unreadable, of another bundle). */
export function readCache(file, digest) {
  try {
    const bytes = fs.readFileSync(file);
    if (bytes.length > HEADER && digest.equals(bytes.subarray(0, 32))) return { madeBy: bytes[32], data: bytes.subarray(HEADER) };
  } catch {
    // none yet
  }
  return undefined;
}

/** Written aside and moved in place: a start reading it meanwhile sees the old file or the new one. */
export function writeCache(file, digest, madeBy, data) {
  const tmp = `${file}.${process.pid}.tmp`;
  try {
    fs.writeFileSync(tmp, Buffer.concat([digest, Buffer.of(madeBy), data]));
    fs.renameSync(tmp, file);
  } catch {
    // a read-only dist/: the daemon runs without a cache
    fs.rmSync(tmp, { force: true });
  }
}
