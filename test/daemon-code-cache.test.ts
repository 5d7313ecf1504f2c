/**
 * The built daemon's V8 code cache (dist/daemon.cjs.<key>.cache, scripts/daemon-entry.mjs): a build of
 * this checkout made in a temporary directory (the checkout's dist/ is left alone), started as
 * `node dist/main.mjs` is. The build leaves a cache of the compiled bundle, the first start replaces
 * it with its own, the next uses that as it is; a cache of garbage, a truncated one, and one made
 * for a bundle edited without changing its length (which V8, checking the length only, would take)
 * are not used: the daemon starts, runs the bundle on disk and writes a cache of its own. A start
 * that ends before listening keeps none; starts with other Node flags keep a cache of their own.
 * The entry is one module with no import statement, and starts on a Node without
 * process.getBuiltinModule (before 20.16) as well. The built-ins the daemon loads on first use
 * (src/builtins.ts) are not loaded when it listens.
 */
import assert from 'node:assert/strict';
import { execFile as execFileCb, spawn, spawnSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { promisify } from 'node:util';
import { LOADED_ON_FIRST_USE } from '../src/builtins.js';
import { freePort, ROOT, tempDir, waitFor } from './support/daemon.js';

const execFile = promisify(execFileCb);

let dist: string;
let bundle: string;
/** The one cache the starts without flags use. */
let cacheFile: string;
const caches = () => fs.readdirSync(dist).filter((f) => /^daemon\.cjs\.[0-9a-f]+\.cache$/.test(f));
const sha256 = (b: Buffer) => crypto.createHash('sha256').update(b).digest();

/** Starts the build, waits for the first 200 of /health, stops it (SIGTERM); its output lines. */
async function startAndStop(nodeArgs: string[] = []): Promise<string> {
  const port = await freePort();
  const dataDir = tempDir();
  const proc = spawn(process.execPath, [...nodeArgs, path.join(dist, 'main.mjs')], {
    env: { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: dataDir, PORT: String(port), DATA_DIR: dataDir, LOG_LEVEL: 'info', SANDBOX: 'none' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  proc.stdout.on('data', (c) => (output += c));
  proc.stderr.on('data', (c) => (output += c));
  const exited = new Promise<number | null>((resolve) => proc.on('exit', (code) => resolve(code)));
  try {
    await waitFor(
      async () => {
        if (proc.exitCode !== null) throw new Error(`the daemon exited with ${proc.exitCode}: ${output}`);
        return (await fetch(`http://127.0.0.1:${port}/health`).catch(() => null))?.status === 200;
      },
      'the first 200 of /health',
      60_000,
    );
  } finally {
    proc.kill('SIGTERM');
  }
  assert.equal(await exited, 0, output);
  return output;
}

describe('the built daemon’s code cache', () => {
  before(async () => {
    const dir = tempDir('parley-code-cache-');
    // the bundle resolves its native addons from node_modules next to its directory, as in a checkout
    fs.symlinkSync(path.join(ROOT, 'node_modules'), path.join(dir, 'node_modules'));
    dist = path.join(dir, 'dist');
    await execFile(process.execPath, ['-e', 'import("./scripts/build.mjs").then((m) => m.build(process.argv[1]))', dist], { cwd: ROOT });
    bundle = path.join(dist, 'daemon.cjs');
  });
  after(() => fs.rmSync(path.dirname(dist), { recursive: true, force: true }));

  test('the build leaves one, the first start replaces it, keyed by the bundle; the next uses it and leaves it as it is', async () => {
    assert.equal(caches().length, 1, 'the build’s');
    cacheFile = path.join(dist, caches()[0]!);
    const built = fs.readFileSync(cacheFile);
    assert.deepEqual(built.subarray(0, 32), sha256(fs.readFileSync(bundle)));
    assert.equal(built[32], 0, 'made by the build');
    // a start that ends before listening (here: a bad configuration) compiled too little to keep
    const refused = spawnSync(process.execPath, [path.join(dist, 'main.mjs')], {
      env: { PATH: process.env.PATH ?? '/usr/bin:/bin', DATA_DIR: tempDir(), PORT: 'not-a-port' },
      encoding: 'utf8',
      timeout: 60_000,
    });
    assert.equal(refused.status, 1, refused.stderr);
    assert.deepEqual(fs.readFileSync(cacheFile), built);
    await startAndStop();
    assert.deepEqual(caches(), [path.basename(cacheFile)]);
    const written = fs.readFileSync(cacheFile);
    assert.deepEqual(written.subarray(0, 32), sha256(fs.readFileSync(bundle)));
    assert.equal(written[32], 1, 'made by a start');
    assert.ok(written.length > built.length, 'with the functions the start compiled');
    assert.ok(written.length > 100_000, `${written.length} bytes of cache`);
    await startAndStop();
    assert.deepEqual(fs.readFileSync(cacheFile), written, 'an accepted cache is not rewritten');
    // `npm start`'s flag: a cache of its own, neither replacing this one nor replaced by it
    await startAndStop(['--max-semi-space-size=4']);
    assert.equal(caches().length, 2);
    await startAndStop();
    assert.deepEqual(fs.readFileSync(cacheFile), written);
  });

  test('garbage after the right key, or a truncated file: not used; the daemon starts and writes a good one', async () => {
    const key = sha256(fs.readFileSync(bundle));
    for (const bad of [Buffer.concat([key, Buffer.of(1), crypto.randomBytes(64 * 1024)]), key.subarray(0, 10)]) {
      fs.writeFileSync(cacheFile, bad);
      await startAndStop();
      const now = fs.readFileSync(cacheFile);
      assert.deepEqual(now.subarray(0, 32), key);
      assert.equal(now[32], 1);
      assert.notDeepEqual(now, bad);
      // the new one is accepted by the next start
      await startAndStop();
      assert.deepEqual(fs.readFileSync(cacheFile), now);
    }
  });

  test('a bundle edited to the same length: the cache of the old one is not used, the new code runs', async () => {
    assert.ok(fs.readFileSync(cacheFile).length > 32, 'a cache of the bundle as built');
    const source = fs.readFileSync(bundle, 'utf8');
    assert.ok(source.includes('listening on http://'));
    // V8 would take the old cache for this source (it checks lengths) and log "listening on"
    fs.writeFileSync(bundle, source.replace('listening on http://', 'listening at http://'));
    const output = await startAndStop();
    assert.match(output, /listening at http:\/\//);
    assert.doesNotMatch(output, /listening on http:\/\//);
    assert.deepEqual(fs.readFileSync(cacheFile).subarray(0, 32), sha256(fs.readFileSync(bundle)));
  });

  test('the entry imports nothing; without process.getBuiltinModule (Node 20.15) it starts and keeps its cache as well', async () => {
    assert.doesNotMatch(fs.readFileSync(path.join(dist, 'main.mjs'), 'utf8'), /^\s*import\s*[\w{*'"]/m, 'no import statement');
    const had = caches();
    // before the entry runs, the method is gone as on Node 20.15 (a flag: a cache of its own)
    const older = ['--import', 'data:text/javascript,delete process.getBuiltinModule'];
    await startAndStop(older);
    const added = caches().filter((f) => !had.includes(f));
    assert.equal(added.length, 1);
    const written = fs.readFileSync(path.join(dist, added[0]!));
    assert.deepEqual(written.subarray(0, 32), sha256(fs.readFileSync(bundle)));
    assert.equal(written[32], 1, 'made by a start');
    await startAndStop(older);
    assert.deepEqual(fs.readFileSync(path.join(dist, added[0]!)), written, 'and used by the next');
  });

  test('when it listens, the start has loaded none of the built-ins it loads on first use (src/builtins.ts)', async () => {
    // Node's own list of the built-ins loaded so far, as the daemon says it listens
    const seen = path.join(path.dirname(dist), 'builtins-at-listen.json');
    const preload = path.join(path.dirname(dist), 'record-builtins.cjs');
    fs.writeFileSync(
      preload,
      `process.once('parley:listening', () => require('node:fs').writeFileSync(${JSON.stringify(seen)}, ` +
        `JSON.stringify(process.moduleLoadList.filter((m) => m.startsWith('NativeModule ')).map((m) => m.slice(13)))));`,
    );
    await startAndStop(['--require', preload]);
    const loaded: string[] = JSON.parse(fs.readFileSync(seen, 'utf8'));
    // the list is the right one: what the start needs is in it
    for (const needed of ['worker_threads', 'crypto', 'vm']) assert.ok(loaded.includes(needed), `${needed} in ${loaded.join(' ')}`);
    for (const deferred of LOADED_ON_FIRST_USE) assert.ok(!loaded.includes(deferred), `${deferred} loaded before the listen`);
  });
});
