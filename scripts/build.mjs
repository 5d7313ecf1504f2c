/**
 * Builds what `npm start` runs: dist/main.mjs (the daemon) and dist/writer.mjs (the store's index
 * writer thread), bundled by esbuild from the TypeScript sources, and dist/console/ (the web console).
 * Run by `npm install` (`prepare`) and, when a source file is newer than the build, by
 * scripts/start.mjs. Tests and development run
 * the sources directly through tsx.
 *
 * The daemon starts faster and smaller built: no TypeScript transpilation at run time (tsx compiles
 * every module on load, in a loader thread with its own V8 isolate), one file instead of hundreds to
 * resolve, and the writer thread without tsx. Code that is only needed later (the AI SDK, the MCP
 * SDK, prom-client) is split into chunks loaded on first use.
 */
import * as esbuild from 'esbuild';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import zlib from 'node:zlib';

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
export const DIST = path.join(ROOT, 'dist');

export async function build() {
  // built aside and moved in place, so a daemon starting meanwhile never loads half a build
  const tmp = `${DIST}.${process.pid}.tmp`;
  fs.rmSync(tmp, { recursive: true, force: true });
  await esbuild.build({
    absWorkingDir: ROOT,
    entryPoints: { main: 'bridge/main.ts', writer: 'src/store/writer.ts' },
    outdir: tmp,
    outExtension: { '.js': '.mjs' },
    bundle: true,
    splitting: true,
    platform: 'node',
    format: 'esm',
    target: 'node20',
    sourcemap: 'linked',
    // less to parse at start; identifiers are kept, so stack traces stay readable
    minifyWhitespace: true,
    minifySyntax: true,
    // native addons and packages that load files of their own at run time stay in node_modules
    external: ['better-sqlite3', 'uWebSockets.js', 'msgpackr-extract', 'bufferutil', 'utf-8-validate', 'swagger-ui-dist', 'prom-client'],
    // bundled CommonJS packages call require(); give the ES module output one
    banner: { js: "import { createRequire as __parleyRequire } from 'node:module'; const require = __parleyRequire(import.meta.url);" },
    logLevel: 'warning',
  });
  await buildConsole(path.join(tmp, 'console'));
  // the sandbox's file service runs as it is (plain JavaScript) next to the code that starts it
  fs.copyFileSync(path.join(ROOT, 'src/sandbox/file-helper.mjs'), path.join(tmp, 'file-helper.mjs'));
  fs.rmSync(DIST, { recursive: true, force: true });
  fs.renameSync(tmp, DIST);
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
  const page = fs.readFileSync(path.join(ROOT, 'console', 'index.html'), 'utf8').replace('{{js}}', js).replace('{{css}}', css);
  fs.writeFileSync(path.join(outdir, 'index.html'), page);
  fs.copyFileSync(path.join(ROOT, 'console', 'favicon.svg'), path.join(outdir, 'favicon.svg'));
  for (const name of [js, css, 'index.html', 'favicon.svg']) {
    const file = path.join(outdir, name);
    fs.writeFileSync(`${file}.gz`, zlib.gzipSync(fs.readFileSync(file), { level: 9 }));
  }
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  await build();
}
