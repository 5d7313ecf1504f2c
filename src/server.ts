/**
 * `parley/server`: the daemon's core embedded in another Node service, without HTTP. The service
 * starts it with a configuration object, calls the same procedures the daemon serves through
 * tRPC's server-side caller (the same validation, handlers and error codes as /trpc), and closes
 * it:
 *
 *   const parley = await startParley({ dataDir: '/var/lib/my-service/parley', llm: { model: 'openai/gpt-5', apiKey } });
 *   const { conversation_id } = await parley.caller.createConversation({ initial_user_msg: 'Fix the tests' });
 *   for await (const ev of await parley.caller.events({ conversation_id, after_seq: 0 })) { ... }
 *   await parley.close();
 *
 * The configuration starts from the daemon's defaults (what `npm start` uses with an empty
 * environment), not from this process's environment: an embedding service says what it wants.
 * Logs are pino JSON lines, passed through the same redaction as the daemon's, to `logDestination`
 * (default: stdout) at `logLevel` (default `warn`). The process-wide umask is left alone (the
 * daemon sets 077 for itself); the data directory is made 0700, so nothing in it is reachable by
 * other users either way.
 */
import { isTrackedEnvelope } from '@trpc/server';
import type pino from 'pino';
import { appRouter, type AppRouter } from './api/router.js';
import { loadConfig, type Config } from './config.js';
import { createCore, type Core } from './core.js';
import { createLogger } from './logger.js';
import { Redactor } from './secrets/redact.js';

/** The daemon's settings that have a meaning without HTTP (no port, host, session keys, origins or body limits). */
type CoreSettings = Omit<
  Config,
  'port' | 'metricsPort' | 'host' | 'hostExplicit' | 'sessionApiKeys' | 'allowedOrigins' | 'maxBodyBytes' | 'wsMaxSubscribers' | 'browserSession'
>;

export interface ParleyServerOptions extends Partial<Omit<CoreSettings, 'dataDir' | 'llm' | 'sandbox'>> {
  /** Where the store, the key file and (unless `workspaceRoot` says otherwise) the workspaces live. */
  dataDir: string;
  llm?: Config['llm'];
  sandbox?: Partial<Config['sandbox']>;
  /** Where log lines go (default: stdout). */
  logDestination?: pino.DestinationStream;
}

/** What the server-side caller can call: every procedure of the router, typed. */
export type ParleyCaller = ReturnType<AppRouter['createCaller']>;

export interface ParleyServer {
  /** The procedures, called in-process: `await parley.caller.getConversation({ conversation_id })`. */
  caller: ParleyCaller;
  /** The configuration the core runs with (defaults filled in). */
  config: Config;
  /** Stops the agent runs, the sandboxes and the store. */
  close(): Promise<void>;
}

/** Starts the core with `options` over the daemon's defaults; fails with the same errors the daemon's start reports. */
export async function startParley(options: ParleyServerOptions): Promise<ParleyServer> {
  const { logDestination, llm, sandbox, dataDir, ...rest } = options;
  const defaults = loadConfig({ DATA_DIR: dataDir });
  const config: Config = {
    ...defaults,
    logLevel: 'warn',
    ...rest,
    llm: { ...defaults.llm, ...llm },
    sandbox: { ...defaults.sandbox, ...sandbox },
  };
  const redactor = new Redactor();
  const log = createLogger(config.logLevel, redactor, logDestination);
  const core: Core = await createCore(config, log, redactor);
  const caller = trackedAsTyped(appRouter.createCaller({ core, maxQueuedBytes: config.wsMaxBufferedBytes }));
  let closing: Promise<void> | null = null;
  return {
    caller,
    config,
    close: () => (closing ??= core.close().finally(() => log.flush?.())),
  };
}

/**
 * tRPC's server-side caller hands a subscription's `tracked()` events out as the raw envelopes
 * (`[id, data, symbol]`) while its types promise what a client gets (`{ id, data }`). `events` is
 * wrapped so that what it yields is what its type says; every other procedure is the caller's own.
 */
function trackedAsTyped(raw: ParleyCaller): ParleyCaller {
  async function* unwrap(items: AsyncIterable<unknown>) {
    for await (const item of items) yield isTrackedEnvelope(item) ? { id: item[0], data: item[1] } : item;
  }
  const events = async (...args: Parameters<ParleyCaller['events']>) => unwrap(await raw.events(...args));
  // an object of its own with `events`; every other procedure is looked up on the caller behind it
  const caller: ParleyCaller = Object.create(raw);
  return Object.assign(caller, { events });
}

export type { AppRouter, Config };
export type { ConversationInfo } from './conversation/conversations.js';
export type { ParleyEvent, EventOf, EventKind } from './events/schema.js';
