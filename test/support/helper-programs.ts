/**
 * The test's helper programs (the stdio MCP test server, the children that crash or sync a store)
 * built to plain JavaScript, so that a test runs them with `node` alone. Through tsx each start
 * costs ~0.6 s of CPU (the loader compiles every module on load, and a store's writer thread
 * registers tsx again in its worker); built, ~0.2 s. The suite starts dozens of them.
 *
 * Built once per checkout into .tmp/test-helpers/ (inside the checkout: a sandboxed stdio server
 * sees the checkout and its node_modules read-only, not the host's /tmp), again when a source is
 * newer, by esbuild from the same sources and packages (native addons stay in node_modules). The
 * store's writer thread is built next to them as writer.mjs, where the bundled store (no longer a
 * .ts module) starts it, as in dist/.
 * PARLEY_TEST_FROM_SOURCE=1 runs them through tsx instead.
 */
import path from 'node:path';
import { buildWhenStale, ROOT } from './daemon.js';

const OUT = path.join(ROOT, '.tmp', 'test-helpers');

const ENTRIES = {
  'stdio-server': 'test/support/mcp-servers/stdio-server.ts',
  'journal-crash': 'test/support/journal-crash.ts',
  'journal-sync': 'test/support/journal-sync.ts',
  'status-crash': 'test/support/status-crash.ts',
  writer: 'src/store/writer.ts',
} as const;

export type HelperProgram = Exclude<keyof typeof ENTRIES, 'writer'>;

const SOURCES = ['src', 'test/support', 'package.json', 'package-lock.json'].map((s) => path.join(ROOT, s));
/** Written last: the build is complete when it is there. */
const STAMP = path.join(OUT, 'built');

let built: Promise<void> | undefined;

function ensureHelpersBuilt(): Promise<void> {
  built ??= buildWhenStale(STAMP, SOURCES, 'test-helpers', async () => {
    const [esbuild, fs] = await Promise.all([import('esbuild'), import('node:fs')]);
    const tmp = `${OUT}.${process.pid}.tmp`;
    fs.rmSync(tmp, { recursive: true, force: true });
    // ES modules with shared chunks (the store is in three of them), the packages bundled too (one
    // file loads in half the time of the MCP SDK's and zod's many), native addons and packages that
    // load files of their own at run time aside (as in scripts/build.mjs); bundled
    // CommonJS packages call require(): each module gets one
    const esm = { format: 'esm', splitting: true, outExtension: { '.js': '.mjs' } } as const;
    const require = "import { createRequire as __testRequire } from 'node:module'; const require = __testRequire(import.meta.url);";
    await esbuild.build({
      ...esm,
      absWorkingDir: ROOT,
      entryPoints: ENTRIES,
      outdir: tmp,
      bundle: true,
      external: ['better-sqlite3', 'uWebSockets.js', 'msgpackr-extract', 'bufferutil', 'utf-8-validate', 'swagger-ui-dist', 'prom-client'],
      banner: { js: require },
      platform: 'node',
      target: 'node20',
      logLevel: 'warning',
    });
    fs.writeFileSync(path.join(tmp, 'built'), '');
    fs.rmSync(OUT, { recursive: true, force: true });
    fs.renameSync(tmp, OUT);
  });
  return built;
}

/** The node arguments (after node's own flags) that run a helper program, built first when needed. */
export async function helperArgs(name: HelperProgram): Promise<string[]> {
  if (process.env.PARLEY_TEST_FROM_SOURCE === '1') return ['--import', import.meta.resolve('tsx'), path.join(ROOT, ENTRIES[name])];
  await ensureHelpersBuilt();
  return [path.join(OUT, `${name}.mjs`)];
}
