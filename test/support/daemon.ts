/**
 * Starts the real daemon as a child process on a random port with a temp DATA_DIR.
 *
 * The daemon runs built (dist/main.mjs, what `npm start` runs), rebuilt from the sources first when
 * one is newer, so a test always runs the current code. Through tsx a start costs ~1.8 s of CPU
 * (tsx compiles the modules on load, and main.ts loads the AI and MCP SDKs up front) and ~3 s to
 * listen; built, 0.4 s and 0.4 s. The suite starts well over a hundred daemons.
 * PARLEY_TEST_FROM_SOURCE=1 runs the sources through tsx instead.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import crypto from 'node:crypto';
import { createServer } from 'node:net';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

let built: Promise<void> | undefined;

/** scripts/stale.mjs: when a build is stale, and what the daemon's build is made from (the same list as `npm start`'s). */
const staleMjs = async () =>
  (await import(pathToFileURL(path.join(ROOT, 'scripts', 'stale.mjs')).href)) as {
    isStale(built: string, sources: string[]): boolean;
    DAEMON_SOURCES: string[];
  };

/**
 * Rebuilds dist/ when a source is newer than it, once per test process (see buildWhenStale).
 */
export function ensureBuilt(): Promise<void> {
  built ??= staleMjs().then(({ DAEMON_SOURCES }) =>
    buildWhenStale(
      path.join(ROOT, 'dist', 'main.mjs'),
      DAEMON_SOURCES.map((s) => path.join(ROOT, s)),
      'build',
      async () => {
        await ((await import(pathToFileURL(path.join(ROOT, 'scripts', 'build.mjs')).href)) as { build(): Promise<void> }).build();
      },
    ),
  );
  return built;
}

/**
 * Runs `build` when `output` is missing or older than one of `sources` (files or directories, by
 * modification time, as scripts/start.mjs decides). Test files run in parallel: one builds under a
 * lock (a directory in the temp dir, one per checkout and `name`), the others wait for it and find
 * the build current.
 */
export async function buildWhenStale(output: string, sources: string[], name: string, build: () => Promise<void>): Promise<void> {
  const { isStale } = await staleMjs();
  const stale = () => isStale(output, sources);
  if (!stale()) return;
  const lock = path.join(os.tmpdir(), `parley-${name}-${crypto.createHash('sha256').update(ROOT).digest('hex').slice(0, 12)}.lock`);
  for (;;) {
    try {
      fs.mkdirSync(lock);
      break;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      // a build takes seconds; a lock minutes old was left by a process killed while building
      if (Date.now() - (fs.statSync(lock, { throwIfNoEntry: false })?.mtimeMs ?? Date.now()) > 300_000) fs.rmSync(lock, { recursive: true, force: true });
      await sleep(100);
    }
  }
  try {
    if (stale()) await build();
  } finally {
    fs.rmSync(lock, { recursive: true, force: true });
  }
}

/** The node flags `npm start` of the checkout `dir` runs its daemon with (its package.json's start script). */
export function startFlags(dir: string = ROOT): string[] {
  const start = (JSON.parse(fs.readFileSync(path.join(dir, 'package.json'), 'utf8')) as { scripts: { start: string } }).scripts.start;
  return start.split(/\s+/).filter((a) => a.startsWith('--'));
}

/** The node arguments that run the daemon from the cwd ROOT (after node's own flags), the build brought up to date first. */
export async function daemonArgs(): Promise<string[]> {
  if (process.env.PARLEY_TEST_FROM_SOURCE === '1') return ['--import', 'tsx', 'bridge/main.ts'];
  await ensureBuilt();
  return ['dist/main.mjs'];
}

export interface DaemonHandle {
  url: string;
  port: number;
  dataDir: string;
  env: Record<string, string>;
  proc: ChildProcess;
  /** Every line the daemon wrote to stdout and stderr. */
  output: string[];
  exited: Promise<number | null>;
  stop(signal?: NodeJS.Signals): Promise<number | null>;
  /** JSON helper: method, path, body → {status, body, text, headers}. */
  req(method: string, p: string, body?: unknown, headers?: Record<string, string>): Promise<{ status: number; body: any; text: string; headers: Headers }>;
}

const tempDirs = new Set<string>();
let tempCleanup = false;

/** A new temporary directory, removed when the test process exits (a daemon restarted on it keeps it until then). */
export function tempDir(prefix = 'parley-test-'): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  tempDirs.add(dir);
  if (!tempCleanup) {
    tempCleanup = true;
    process.once('exit', () => {
      for (const d of tempDirs) removeDir(d);
    });
  }
  return dir;
}

/**
 * Removes a directory a daemon used, after detaching what is mounted under it: a root daemon mounts
 * its conversations' disk images there, and one killed with SIGKILL leaves them mounted.
 */
export function removeDir(dir: string): void {
  const root = path.resolve(dir);
  let mounted: string[] = [];
  try {
    mounted = fs
      .readFileSync('/proc/self/mountinfo', 'utf8')
      .split('\n')
      .map((l) => (l.split(' ')[4] ?? '').replace(/\\([0-7]{3})/g, (_m, o: string) => String.fromCharCode(Number.parseInt(o, 8))))
      .filter((p) => p.startsWith(`${root}/`))
      .sort((a, b) => b.length - a.length);
  } catch {
    /* not Linux */
  }
  if (mounted.length > 0) spawnSync('umount', ['-l', ...mounted]);
  fs.rmSync(root, { recursive: true, force: true });
}

export async function startDaemon(
  env: Record<string, string> = {},
  dataDir = tempDir(),
  opts: {
    startTimeoutMs?: number;
    /** Extra node flags (e.g. `--cpu-prof`). */
    nodeArgs?: string[];
    /** bash redirections the daemon starts with (`77<file`: an fd its parent left open across exec). */
    redirects?: string;
  } = {},
): Promise<DaemonHandle> {
  const fullEnv: Record<string, string> = {
    PATH: process.env.PATH ?? '/usr/bin:/bin',
    HOME: process.env.HOME ?? os.tmpdir(),
    PORT: '0',
    DATA_DIR: dataDir,
    LOG_LEVEL: 'debug',
    // sandboxed stdio MCP test servers run from this checkout with its node_modules (tsx): show both read-only
    SANDBOX_RO_BINDS: [ROOT, fs.realpathSync(path.join(ROOT, 'node_modules'))].join(':'),
    ...(process.env.PARLEY_TEST_STORE === 'postgres' && !env.DATABASE_URL ? await postgresFor(dataDir) : {}),
    ...env,
  };
  // the daemon (and with it its sandboxes) gets SIGKILL when this test process dies: a test file
  // killed at its time limit must not leave daemons behind (setpriv execs node: proc.pid is the daemon)
  const node = [process.execPath, ...(opts.nodeArgs ?? []), ...(await daemonArgs())];
  const guarded = fs.existsSync('/usr/bin/setpriv') ? ['/usr/bin/setpriv', '--pdeathsig', 'KILL', '--', ...node] : node;
  // (exec keeps the pid: proc.pid is still the daemon's)
  const argv = opts.redirects ? ['/bin/bash', '-c', `exec ${opts.redirects} "$@"`, 'bash', ...guarded] : guarded;
  const proc = spawn(argv[0]!, argv.slice(1), { cwd: ROOT, env: fullEnv, stdio: ['ignore', 'pipe', 'pipe'] });
  const output: string[] = [];
  const exited = new Promise<number | null>((resolve) => proc.on('exit', (code) => resolve(code)));
  const port = await new Promise<number>((resolve, reject) => {
    let buf = '';
    const onLine = (line: string) => {
      output.push(line);
      const m = /"port":(\d+).*listening on/.exec(line);
      if (m) {
        clearTimeout(startTimer);
        resolve(Number(m[1]));
      }
    };
    const feed = (chunk: Buffer) => {
      buf += chunk.toString('utf8');
      let i: number;
      while ((i = buf.indexOf('\n')) >= 0) {
        onLine(buf.slice(0, i));
        buf = buf.slice(i + 1);
      }
    };
    proc.stdout!.on('data', feed);
    proc.stderr!.on('data', feed);
    exited.then((code) => reject(new Error(`daemon exited with ${code} before listening:\n${output.join('\n')}`)));
    // generous by default: a loaded machine (other suites, other daemons) can take tens of seconds to start one
    const limit = opts.startTimeoutMs ?? 60_000;
    const startTimer = setTimeout(() => {
      proc.kill('SIGKILL'); // never left running behind a failed start
      reject(new Error(`daemon did not start in ${limit / 1000} s:\n${output.join('\n')}`));
    }, limit).unref();
  });
  const url = `http://127.0.0.1:${port}`;
  const handle: DaemonHandle = {
    url,
    port,
    dataDir,
    env: fullEnv,
    proc,
    output,
    exited,
    async stop(signal: NodeJS.Signals = 'SIGTERM') {
      if (proc.exitCode !== null || proc.signalCode !== null) return proc.exitCode;
      proc.kill(signal);
      return exited;
    },
    async req(method, p, body, headers = {}) {
      const res = await fetch(url + p, {
        method,
        headers: { ...(body !== undefined ? { 'content-type': 'application/json' } : {}), ...headers },
        body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
      });
      const text = await res.text();
      let parsed: unknown;
      try {
        parsed = JSON.parse(text);
      } catch {
        /* not JSON */
      }
      return { status: res.status, body: parsed, text, headers: res.headers };
    },
  };
  // the sandbox's probe decides after the port opens: tests start once it has (what /server_info
  // reports, the paths agents see and the probe's warnings are settled then)
  const key = fullEnv.SESSION_API_KEY || (fullEnv.SESSION_API_KEYS ?? '').split(',')[0]?.trim();
  try {
    await waitFor(
      async () => {
        const r = await handle.req('GET', '/server_info', undefined, key ? { 'X-Session-API-Key': key } : {}).catch(() => null);
        return r?.status !== 200 || (r.body as { sandbox?: { mode?: string } }).sandbox?.mode !== 'probing';
      },
      'the sandbox probe',
      opts.startTimeoutMs ?? 60_000,
    );
  } catch (err) {
    proc.kill('SIGKILL'); // never left running behind a failed start
    throw err;
  }
  return handle;
}

/**
 * PARLEY_TEST_STORE=postgres runs the daemon tests on PostgreSQL: one database per DATA_DIR (a
 * restarted daemon finds its data), dropped when the test process ends.
 */
const databases = new Map<string, Promise<{ DATABASE_URL: string; SECRET_KEY: string }>>();
function postgresFor(dataDir: string) {
  let db = databases.get(dataDir);
  if (!db) {
    if (databases.size === 0) {
      process.once('beforeExit', async () => {
        const { dropTestDatabase } = await import('./postgres.js');
        for (const d of databases.values()) await dropTestDatabase((await d).DATABASE_URL).catch(() => {});
      });
    }
    db = import('./postgres.js').then(async (m) => ({ DATABASE_URL: (await m.createTestDatabase()).url, SECRET_KEY: 'parley-test-secret-key' }));
    databases.set(dataDir, db);
  }
  return db;
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Polls `fn` until it returns a truthy value (bounded). */
export async function waitFor<T>(fn: () => T | Promise<T>, what: string, timeoutMs = 10_000): Promise<T> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(25);
  }
}

/** A `req` that also keeps every response text in `into` (for "the canary is in no response" checks). */
export function recordingReq(d: DaemonHandle, into: string[], headers: Record<string, string> = {}): DaemonHandle['req'] {
  return async (m, p, b, h) => {
    const r = await d.req(m, p, b, { ...headers, ...h });
    into.push(r.text);
    return r;
  };
}

/** A loopback port nothing listens on (it was free a moment ago). */
export function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const s = createServer();
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
  });
}
