/** The daemon: `npm start`. Exits 1 with one clear line for a bad configuration or a busy port. */
import { loadConfig, type Config } from '../src/config.js';
import { createCore } from '../src/core.js';
import { closeInheritedFds } from '../src/inherited-fds.js';
import { createLogger } from '../src/logger.js';
import { Redactor } from '../src/secrets/redact.js';
import { DATA_DIR_UMASK } from '../src/store/permissions.js';
import { browserSignInLink, consoleUrl, signInLink } from './console.js';
import { startMetricsServer } from './metrics.js';
import { startServer } from './server.js';
import { loadTrpc } from './trpc.js';

/** How long after the port opens the sandbox's start-up probe waits unless something needs the sandbox first. */
const PROBE_AFTER_LISTEN_MS = 250;

async function main() {
  // no process the daemon starts (a sandbox's above all) gets an fd of its parent's: only a forking parent's channel stays
  const inherited = closeInheritedFds(process.channel ? [(process.channel as unknown as { fd: number }).fd] : []);
  // every file the daemon creates (database, WAL, journal, key file, outputs) is 0600, directories 0700
  process.umask(DATA_DIR_UMASK);
  let config: Config;
  try {
    config = loadConfig();
  } catch (err) {
    process.stderr.write(`parley: ${(err as Error).message}\n`);
    process.exit(1);
  }
  const redactor = new Redactor();
  const log = createLogger(config.logLevel, redactor);
  if (inherited.length > 0) log.info({ fds: inherited }, 'closed the file descriptors inherited open from the parent process');
  if (config.sessionApiKeys.length === 0) {
    log.warn({ host: config.host }, 'no SESSION_API_KEY configured: every route is open; listening on loopback only unless HOST is set');
  }
  let core;
  try {
    core = await createCore(config, log, redactor, { deferSandboxProbe: true });
  } catch (err) {
    const what = config.cluster ? 'start the cluster node' : `open the data directory ${config.dataDir}`;
    process.stderr.write(`parley: cannot ${what}: ${redactor.redact((err as Error).message)}\n`);
    process.exit(1);
  }
  // The build (npm start) loads the AI SDK, the MCP SDK and the tRPC router on first use. Run from
  // source (tsx: tests, `npm run dev`) they are loaded now, before listening: tsx compiles on first
  // use, which under load can take seconds that a first call would otherwise wait for.
  if (import.meta.url.endsWith('.ts')) await Promise.all([import('../src/llm/provider.js'), import('../src/tools/mcp/manager.js'), loadTrpc()]);
  let daemon;
  let metricsServer: { port: number; stop(): void } | undefined;
  try {
    daemon = await startServer(config, core, log);
    if (config.metricsPort !== undefined) {
      metricsServer = await startMetricsServer(config.host, config.metricsPort, log);
      log.info({ metrics_port: metricsServer.port }, `metrics on http://${config.host}:${metricsServer.port}/metrics`);
    }
  } catch (err) {
    process.stderr.write(`parley: ${(err as Error).message}\n`);
    await core.close();
    process.exit(1);
  }
  log.info({ host: config.host, port: daemon.port, data_dir: config.dataDir }, `listening on http://${config.host}:${daemon.port}`);
  const rootAt = consoleUrl(config.host, daemon.port);
  // with a web app at `/` (WEB_APP_DIR) the console is at /console/
  const consoleAt = config.webAppDir ? `${rootAt}console/` : rootAt;
  const key = config.sessionApiKeys[0];
  if (config.webAppDir) log.info({ web_app: rootAt, web_app_dir: config.webAppDir }, `web app: ${rootAt}`);
  log.info({ console: consoleAt }, key ? `web console: ${consoleAt} (sign in with the session key)` : `web console: ${consoleAt}`);
  if (key && process.stderr.isTTY) {
    process.stderr.write(`\n  Open the web console (signed in): ${signInLink(consoleAt, key)}\n`);
    const what = config.webAppDir ? 'Open the web app (signed in: a session cookie)' : 'Sign a browser in (a session cookie, for a web app served here)';
    process.stderr.write(`  ${what}: ${browserSignInLink(rootAt, key)}\n\n`);
  }
  // The sandbox's probe starts PROBE_AFTER_LISTEN_MS after the port opened, or as soon as something
  // needs the sandbox (sandbox.ready): its process starts block the event loop ~10 ms each while they
  // fork, and the first requests (a supervisor's health check, a client's first call) are answered
  // first. SANDBOX=bwrap that cannot be honoured still stops the daemon with one line and exit code 1.
  setTimeout(() => core.sandbox.startProbe(), PROBE_AFTER_LISTEN_MS);
  // the build's entry (scripts/daemon-entry.mjs) saves its code cache once the start is over
  (process.emit as (event: string) => boolean)('parley:listening');
  core.sandbox.outcome.catch(async (err: Error) => {
    process.stderr.write(`parley: ${err.name === 'SandboxUnavailableError' ? err.message : `the sandbox could not be set up: ${err.message}`}\n`);
    metricsServer?.stop();
    await daemon.stop(1000).catch(() => {});
    await core.close().catch(() => {});
    process.exit(1);
  });

  let stopping = false;
  const shutdown = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    log.info({ signal }, 'shutting down');
    const t0 = performance.now();
    let closing = 'the server';
    const hard = setTimeout(() => {
      log.error({ closing, ms: Math.round(performance.now() - t0) }, `the stop passed its deadline while closing ${closing}: exit 1`);
      log.flush?.();
      process.exit(1);
    }, 9500);
    hard.unref();
    metricsServer?.stop();
    await daemon.stop(7000);
    await core.close((part) => (closing = part));
    log.info({ ms: Math.round(performance.now() - t0) }, 'stopped');
    log.flush?.();
    setTimeout(() => process.exit(0), 50).unref();
  };
  process.on('SIGTERM', () => void shutdown('SIGTERM'));
  process.on('SIGINT', () => void shutdown('SIGINT'));
}

main().catch((err) => {
  process.stderr.write(`parley: fatal: ${(err as Error)?.message ?? err}\n`);
  process.exit(1);
});
