/**
 * Builds what `npm start` runs: dist/main.mjs (the daemon's entry, which runs dist/daemon.cjs through
 * a V8 code cache: scripts/daemon-entry.mjs, with scripts/code-cache.mjs bundled in) and
 * dist/writer.mjs (the store's index writer thread),
 * bundled by esbuild from the TypeScript sources, and dist/console/ (the web console).
 * Run by `npm install` (`prepare`) and, when a source file is newer than the build, by
 * scripts/start.mjs. Tests and development run
 * the sources directly through tsx.
 *
 * The daemon starts faster and smaller built: no TypeScript transpilation at run time (tsx compiles
 * every module on load, in a loader thread with its own V8 isolate), one file instead of hundreds to
 * resolve, and the writer thread without tsx. Code that is only needed later (the AI SDK, the MCP
 * SDK, tRPC, NATS, pg, prom-client) stays in node_modules and is loaded on first use.
 */
import * as esbuild from 'esbuild';
import fs from 'node:fs';
import { builtinModules, createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import zlib from 'node:zlib';

/** The sandbox's perl programs, run as they are next to the code that starts them (the file service, the spawner). */
const PERL_PROGRAMS = ['file-service.pl', 'file-service-lib.pl', 'spawner-process.pl', 'spawner-forker.pl'];

/**
 * Packages a daemon loads on first use only, if ever: the AI SDK (models the own Chat Completions
 * client does not serve), the MCP SDK (a conversation with MCP servers), tRPC (the first /trpc
 * call), NATS and pg (cluster mode). Each is required from node_modules when first needed, from
 * its CommonJS build (compiled then, without the code cache: tens of ms once per process).
 */
const ON_FIRST_USE = ['ai', '@ai-sdk/*', '@modelcontextprotocol/sdk', '@modelcontextprotocol/sdk/*', '@trpc/server', '@trpc/server/*', '@nats-io/*', 'pg'];

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
export const DIST = path.join(ROOT, 'dist');

/**
 * `dist`: where the build goes (test/daemon-code-cache.test.ts builds one of its own). `entry`: the
 * daemon's source entry; scripts/bench-startup.ts builds scripts/start-floor.ts the same way, without
 * the console (`withConsole: false`), to measure what a start costs at the least.
 */
export async function build(dist = DIST, { entry = 'bridge/main.ts', withConsole = true } = {}) {
  // built aside and moved in place, so a daemon starting meanwhile never loads half a build
  const tmp = `${dist}.${process.pid}.tmp`;
  fs.rmSync(tmp, { recursive: true, force: true });
  const common = {
    absWorkingDir: ROOT,
    outdir: tmp,
    bundle: true,
    platform: 'node',
    target: 'node20',
    sourcemap: 'linked',
    // less to parse at start; identifiers are kept, so stack traces stay readable
    minifyWhitespace: true,
    minifySyntax: true,
    // native addons and packages that load files of their own at run time stay in node_modules;
    // better-sqlite3's JavaScript is bundled (Node 20 compiles a package's files at every start, the
    // bundle's come from its code cache) and only its addon is loaded from the package (betterSqliteAddon)
    external: ['*.node', 'uWebSockets.js', 'msgpackr-extract', 'bufferutil', 'utf-8-validate', 'swagger-ui-dist', 'prom-client'],
    plugins: [betterSqliteAddon, sharedBuiltins],
    logLevel: 'warning',
  };
  // The daemon: one CommonJS body that dist/main.mjs (scripts/daemon-entry.mjs) compiles with V8's
  // code cache, which Node 20 offers for scripts only. The packages only some daemons ever load
  // (ON_FIRST_USE) stay in node_modules, required on first use: bundled, their 1.5 MB of source
  // were held in every daemon's heap as part of the bundle's. `import()` becomes `require()` (a
  // script has no module loader of its own) and `import.meta.url` the entry's URL, which the script
  // is handed as `__parleyMetaUrl`.
  await esbuild.build({
    ...common,
    external: [...common.external, ...ON_FIRST_USE],
    entryPoints: { daemon: entry },
    outExtension: { '.js': '.cjs' },
    format: 'cjs',
    supported: { 'dynamic-import': false },
    define: { 'import.meta.url': '__parleyMetaUrl' },
  });
  // its entry, with the code cache's helpers in it: one module with no import statement (why:
  // scripts/daemon-entry.mjs); left unminified, it is small
  const mainEntry = await esbuild.build({
    absWorkingDir: ROOT,
    entryPoints: { main: 'scripts/daemon-entry.mjs' },
    outdir: tmp,
    outExtension: { '.js': '.mjs' },
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: 'node20',
    metafile: true,
    logLevel: 'warning',
  });
  const imported = Object.values(mainEntry.metafile.outputs).flatMap((o) => o.imports.filter((i) => i.kind !== 'dynamic-import').map((i) => i.path));
  if (imported.length) throw new Error(`build: dist/main.mjs must import nothing, it imports ${imported.join(', ')}`);
  // the first start's cache: the bundle compiled here, under this process's Node and flags (a
  // rebuild by `npm start` makes the one its own start uses); that start replaces it with its own
  const { cacheFileOf, compile, digestOf, MADE_BY_BUILD, writeCache } = await import('./code-cache.mjs');
  const bundle = path.join(tmp, 'daemon.cjs');
  const bytes = fs.readFileSync(bundle);
  writeCache(cacheFileOf(bundle), digestOf(bytes), MADE_BY_BUILD, compile(bundle, bytes).createCachedData());
  // the store's index writer thread: an ES module of its own
  await esbuild.build({
    ...common,
    entryPoints: { writer: 'src/store/writer.ts' },
    outExtension: { '.js': '.mjs' },
    splitting: true,
    format: 'esm',
    // bundled CommonJS packages call require(); give the ES module output one
    banner: { js: "import { createRequire as __parleyRequire } from 'node:module'; const require = __parleyRequire(import.meta.url);" },
  });
  if (withConsole) await buildConsole(path.join(tmp, 'console'));
  // the sandbox's perl programs next to the code that starts them
  for (const f of PERL_PROGRAMS) fs.copyFileSync(path.join(ROOT, 'src/sandbox', f), path.join(tmp, f));
  fs.rmSync(dist, { recursive: true, force: true });
  fs.renameSync(tmp, dist);
}

/**
 * better-sqlite3 finds its addon with the `bindings` package, which searches from the path of the
 * calling file (in a bundle, the bundle's): the bundled copy requires it from the package instead,
 * resolved at run time next to the build as the package itself would be.
 */
const betterSqliteAddon = {
  name: 'better-sqlite3-addon',
  setup(b) {
    b.onLoad({ filter: /[\\/]better-sqlite3[\\/]lib[\\/]database\.js$/ }, (args) => {
      const src = fs.readFileSync(args.path, 'utf8');
      const find = "require('bindings')('better_sqlite3.node')";
      if (!src.includes(find)) throw new Error(`build: ${args.path} no longer loads its addon with ${find}`);
      return { contents: src.replace(find, "require('better-sqlite3/build/Release/better_sqlite3.node')"), loader: 'js' };
    });
  },
};

/**
 * A Node built-in imported by an ES module becomes, in a CommonJS bundle, `__toESM(require(…))` at
 * every import: a copy of the built-in's properties each time (node:fs and node:path ~25 times
 * each, ~5 ms of the start). Every import of a built-in goes through one module per built-in
 * instead, which makes that copy once.
 */
const sharedBuiltins = {
  name: 'shared-builtins',
  setup(b) {
    const builtins = new Set(builtinModules);
    b.onResolve({ filter: /^[a-z_:/]+$/ }, (args) => {
      if (args.kind !== 'import-statement' || args.namespace === 'builtin') return undefined;
      const name = args.path.replace(/^node:/, '');
      return builtins.has(name) ? { path: `node:${name}`, namespace: 'builtin' } : undefined;
    });
    b.onResolve({ filter: /^node:/, namespace: 'builtin' }, (args) => ({ path: args.path, external: true }));
    b.onLoad({ filter: /.*/, namespace: 'builtin' }, (args) => ({
      contents: `import m from ${JSON.stringify(args.path)}; export * from ${JSON.stringify(args.path)}; export default m;`,
      loader: 'js',
    }));
  },
};

export const LIB = path.join(ROOT, 'lib');

/**
 * Builds what the package exports and the `parley` command runs (lib/): `parley/client`
 * (lib/client.mjs), `parley/server` (lib/server.mjs, with the store's writer thread and the
 * sandbox's file service next to it) and the command (lib/cli.mjs), with their shared code in
 * chunks; and, with `types`, the
 * declarations of both exports (lib/types/, from tsconfig.types.json), which is what lets a
 * TypeScript project that installs Parley type-check its calls without tsx. Packages stay
 * external: an installing project resolves them from its node_modules, once, with their own
 * types. Run by `npm install` / `npm pack` (`prepare`) and by bin/parley.mjs when a source is
 * newer (JavaScript only: the declarations of the last full build are kept).
 */
export async function buildPackage({ types = true } = {}) {
  const tmp = `${LIB}.${process.pid}.tmp`;
  fs.rmSync(tmp, { recursive: true, force: true });
  await esbuild.build({
    absWorkingDir: ROOT,
    entryPoints: { client: 'src/client.ts', server: 'src/server.ts', writer: 'src/store/writer.ts', cli: 'cli/main.ts' },
    outdir: tmp,
    outExtension: { '.js': '.mjs' },
    bundle: true,
    splitting: true,
    packages: 'external',
    platform: 'node',
    format: 'esm',
    target: 'node20',
    sourcemap: 'linked',
    logLevel: 'warning',
  });
  // the embedded core starts the sandbox's perl programs too: next to it, as in dist/
  for (const f of PERL_PROGRAMS) fs.copyFileSync(path.join(ROOT, 'src/sandbox', f), path.join(tmp, f));
  if (types) {
    const { execFileSync } = await import('node:child_process');
    let tsc;
    try {
      tsc = path.join(path.dirname(createRequire(import.meta.url).resolve('typescript/package.json')), 'bin', 'tsc');
    } catch {
      // an install without devDependencies: the daemon and the command need no declarations
      process.stderr.write('build: typescript is not installed; lib/types/ (the declarations of parley/client and parley/server) not built\n');
    }
    // --noCheck: declarations only (`npm run typecheck` checks the code); a third of tsc's time
    if (tsc)
      execFileSync(process.execPath, [tsc, '-p', 'tsconfig.types.json', '--noCheck', '--outDir', path.join(tmp, 'types')], { cwd: ROOT, stdio: 'inherit' });
  } else {
    keepDeclarations(tmp);
  }
  fs.rmSync(LIB, { recursive: true, force: true });
  try {
    fs.renameSync(tmp, LIB);
  } catch (err) {
    // another build (a second `parley` started at the same moment) put its lib/ in place first
    fs.rmSync(tmp, { recursive: true, force: true });
    if (!fs.existsSync(LIB)) throw err;
  }
}

/**
 * The last full build's declarations, copied into the new lib/. Another build (a second `parley`
 * started at the same moment) may be putting its lib/ in place while they are copied: they are
 * copied again from that one (its declarations are as good), and without them when none comes.
 */
function keepDeclarations(tmp) {
  for (let attempt = 0; attempt < 40; attempt++) {
    fs.rmSync(path.join(tmp, 'types'), { recursive: true, force: true });
    try {
      if (fs.existsSync(path.join(LIB, 'types'))) fs.cpSync(path.join(LIB, 'types'), path.join(tmp, 'types'), { recursive: true });
      return;
    } catch {
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 25);
    }
  }
}

/**
 * The web console (console/, served by bridge/console.ts): one JS and one CSS file with content
 * hashes in their names, the page that loads them, and a gzip copy of each made here so the daemon
 * never compresses at run time.
 */
export async function buildConsole(outdir) {
  const result = await esbuild.build({
    absWorkingDir: ROOT,
    entryPoints: { app: 'console/src/main.tsx' },
    outdir,
    entryNames: '[name]-[hash]',
    bundle: true,
    format: 'esm',
    platform: 'browser',
    target: ['chrome109', 'firefox115', 'safari16'],
    jsx: 'automatic',
    jsxImportSource: 'preact',
    minify: true,
    metafile: true,
    legalComments: 'none',
    logLevel: 'warning',
  });
  const outputs = Object.keys(result.metafile.outputs).map((f) => path.basename(f));
  const js = outputs.find((f) => f.endsWith('.js'));
  const css = outputs.find((f) => f.endsWith('.css'));
  const page = fs
    .readFileSync(path.join(ROOT, 'console', 'index.html'), 'utf8')
    .replace('{{js}}', js)
    .replace('{{css}}', css);
  fs.writeFileSync(path.join(outdir, 'index.html'), page);
  fs.copyFileSync(path.join(ROOT, 'console', 'favicon.svg'), path.join(outdir, 'favicon.svg'));
  for (const name of [js, css, 'index.html', 'favicon.svg']) {
    const file = path.join(outdir, name);
    fs.writeFileSync(`${file}.gz`, zlib.gzipSync(fs.readFileSync(file), { level: 9 }));
  }
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  await build();
  await buildPackage();
}
