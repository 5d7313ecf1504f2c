import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import * as z from 'zod';
import { ConfigError } from './errors.js';
import { parseAllowNets, type SandboxSettings } from './sandbox-settings.js';

/** SANDBOX_UID/SANDBOX_GID when the daemon is root and they are not set. */
const DEFAULT_SANDBOX_ID = 65533;
/** SANDBOX_SERVICE_UID/GID when the daemon is root and they are not set. */
const DEFAULT_SERVICE_ID = 65532;

const intFrom = (name: string, min: number, max: number) =>
  z
    .string()
    .regex(/^\d+$/, `${name} must be a whole number`)
    .transform(Number)
    .refine((n) => n >= min && n <= max, `${name} must be between ${min} and ${max}`);

const boolFrom = z.enum(['0', '1', 'true', 'false']).transform((v) => v === '1' || v === 'true');

const EnvSchema = z.object({
  PORT: intFrom('PORT', 0, 65535).default(3000),
  /** A second listener serving only GET /metrics, without a session key (0 picks a free port). */
  METRICS_PORT: intFrom('METRICS_PORT', 0, 65535).optional(),
  HOST: z.string().min(1).optional(),
  DATA_DIR: z.string().min(1).default('./data'),
  SESSION_API_KEY: z.string().optional(),
  SESSION_API_KEYS: z.string().optional(),
  SECRET_KEY: z.string().optional(),
  LLM_MODEL: z
    .string()
    .regex(/^[a-z0-9-]+\/.+$/, 'LLM_MODEL must look like provider/model, e.g. openai/gpt-5')
    .optional(),
  LLM_API_KEY: z.string().optional(),
  LLM_BASE_URL: z.url({ message: 'LLM_BASE_URL must be a URL' }).optional(),
  LLM_CONTEXT_WINDOW: intFrom('LLM_CONTEXT_WINDOW', 1000, 10_000_000).optional(),
  LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
  WORKSPACE_ROOT: z.string().min(1).optional(),
  KEEP_WORKSPACES: boolFrom.default(false),
  MAX_BODY_BYTES: intFrom('MAX_BODY_BYTES', 1024, 1024 * 1024 * 1024).default(10 * 1024 * 1024),
  MAX_ITERATIONS: intFrom('MAX_ITERATIONS', 1, 100000).default(100),
  WS_MAX_BUFFERED_BYTES: intFrom('WS_MAX_BUFFERED_BYTES', 1024, 1024 * 1024 * 1024).default(8 * 1024 * 1024),
  WS_MAX_SUBSCRIBERS: intFrom('WS_MAX_SUBSCRIBERS', 1, 100000).default(100),
  /** A browser signed in with `/?token=` (bridge/sessions.ts) is signed out after this long without a request… */
  BROWSER_SESSION_IDLE_SECONDS: intFrom('BROWSER_SESSION_IDLE_SECONDS', 1, 365 * 24 * 3600).default(12 * 3600),
  /** …and this long after signing in, used or not. */
  BROWSER_SESSION_MAX_SECONDS: intFrom('BROWSER_SESSION_MAX_SECONDS', 1, 365 * 24 * 3600).default(7 * 24 * 3600),
  SQLITE_SYNCHRONOUS: z.enum(['NORMAL', 'FULL']).default('NORMAL'),
  /** Journal reserve for a full disk (src/store/journal.ts), in MiB (0: none). */
  DISK_RESERVE_MB: intFrom('DISK_RESERVE_MB', 0, 65536).default(32),
  /** Stop a conversation's MCP servers after it has been idle this long (0: never). */
  MCP_IDLE_CLOSE_MS: intFrom('MCP_IDLE_CLOSE_MS', 0, 7 * 24 * 3600 * 1000).default(10 * 60 * 1000),
  /** The terminal tool returns (exit_code -1) after this long without new output. */
  TERMINAL_NO_OUTPUT_TIMEOUT_MS: intFrom('TERMINAL_NO_OUTPUT_TIMEOUT_MS', 100, 3600 * 1000).default(30_000),
  // sandbox (src/sandbox/): one bubblewrap sandbox per conversation
  SANDBOX: z.enum(['auto', 'bwrap', 'none']).default('auto'),
  SANDBOX_NETWORK: z.enum(['egress', 'host', 'none']).default('egress'),
  SANDBOX_ALLOW_NETS: z
    .string()
    .transform((v, ctx) => {
      try {
        return parseAllowNets(v);
      } catch (e) {
        ctx.addIssue({ code: 'custom', message: (e as Error).message.replace(/^SANDBOX_ALLOW_NETS: /, '') });
        return z.NEVER;
      }
    })
    .optional(),
  SANDBOX_MEMORY_MB: intFrom('SANDBOX_MEMORY_MB', 16, 1024 * 1024).default(4096),
  SANDBOX_PIDS: intFrom('SANDBOX_PIDS', 8, 1_000_000).default(512),
  SANDBOX_FILE_SIZE_MB: intFrom('SANDBOX_FILE_SIZE_MB', 1, 1024 * 1024).default(1024),
  SANDBOX_MAX_LIVE: intFrom('SANDBOX_MAX_LIVE', 0, 1_000_000).default(64),
  SANDBOX_RO_BINDS: z.string().optional(),
  SANDBOX_TOTAL_MEMORY_MB: intFrom('SANDBOX_TOTAL_MEMORY_MB', 16, 1024 * 1024 * 1024).optional(),
  SANDBOX_CPU: z
    .string()
    .regex(/^\d+(\.\d+)?$/, 'SANDBOX_CPU must be a number of CPUs, e.g. 1 or 0.5')
    .transform(Number)
    .refine((n) => n >= 0.01 && n <= 4096, 'SANDBOX_CPU must be between 0.01 and 4096')
    .optional(),
  SANDBOX_DISK_MB: intFrom('SANDBOX_DISK_MB', 0, 1024 * 1024 * 1024).default(10240),
  SANDBOX_IDLE_CLOSE_MS: intFrom('SANDBOX_IDLE_CLOSE_MS', 1000, 7 * 24 * 3600_000).default(300_000),
  SANDBOX_UID: intFrom('SANDBOX_UID', 1, 4_294_967_294).optional(),
  SANDBOX_GID: intFrom('SANDBOX_GID', 1, 4_294_967_294).optional(),
  /** The host uid and gid of each sandbox's file service (root daemon): another id than the agent's, which its processes cannot reach. */
  SANDBOX_SERVICE_UID: intFrom('SANDBOX_SERVICE_UID', 1, 4_294_967_294).optional(),
  SANDBOX_SERVICE_GID: intFrom('SANDBOX_SERVICE_GID', 1, 4_294_967_294).optional(),
  /** `enforced`: a bwrap daemon without cgroups refuses to start; `unenforced`: it runs without them, saying so. */
  SANDBOX_LIMITS: z.enum(['enforced', 'unenforced']).default('enforced'),
  /** `image`: SANDBOX_DISK_MB is a file system per conversation where the daemon can make one; `measured`: always measured. */
  SANDBOX_DISK: z.enum(['image', 'measured']).default('image'),
  BWRAP_PATH: z.string().min(1).optional(),
  // ---- hardening (docs/security.md) ----
  /** Origins (besides same-origin) allowed to send state-changing requests and open WebSockets. */
  ALLOWED_ORIGINS: z.string().optional(),
  /** Largest event, its JSON in bytes: client data beyond it is refused (413), what the daemon produces is cut (src/events/cap.ts). */
  MAX_EVENT_BYTES: intFrom('MAX_EVENT_BYTES', 1024, 1024 * 1024 * 1024).default(2 * 1024 * 1024),
  /** Hosts (comma separated, `host` or `host:port`) MCP servers and git clones may reach; unset: any. */
  MCP_ALLOWED_HOSTS: z.string().optional(),
  GIT_ALLOWED_HOSTS: z.string().optional(),
  /** Conversations kept loaded in memory; idle ones beyond it are evicted, least recently used first. */
  MAX_LOADED_CONVERSATIONS: intFrom('MAX_LOADED_CONVERSATIONS', 1, 10_000_000).default(2000),
  // cluster mode (src/cluster/): PostgreSQL is the store, NATS carries live events between nodes
  DATABASE_URL: z
    .string()
    .regex(/^postgres(ql)?:\/\/.+/, 'DATABASE_URL must look like postgres://user@host:5432/db')
    .optional(),
  NATS_URL: z
    .string()
    .regex(/^(nats|tls):\/\/.+/, 'NATS_URL must look like nats://host:4222 (several: comma-separated)')
    .optional(),
  NATS_PREFIX: z
    .string()
    .regex(/^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$/, 'NATS_PREFIX must be subject tokens (letters, digits, - and _) separated by dots')
    .default('parley'),
  NODE_ID: z
    .string()
    .regex(/^[A-Za-z0-9._-]{1,64}$/, 'NODE_ID must be 1-64 letters, digits, dot, dash or underscore')
    .optional(),
  LEASE_TTL_MS: intFrom('LEASE_TTL_MS', 1000, 3600 * 1000).default(10_000),
  /** A single-page app served at `/` instead of the console (which moves to `/console/`), e.g. OpenHands' frontend build. */
  WEB_APP_DIR: z.string().min(1).optional(),
});

/** Session keys and secrets shorter than this are refused: they could not be redacted safely. */
const MIN_SECRET_LENGTH = 8;

function parseOrigins(raw: string | undefined): string[] {
  const out: string[] = [];
  for (const entry of (raw ?? '')
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean)) {
    let u: URL | null = null;
    try {
      u = new URL(entry);
    } catch {
      /* reported below */
    }
    if (!u || (u.protocol !== 'http:' && u.protocol !== 'https:') || u.pathname.length > 1 || u.search || u.username) {
      throw new ConfigError(`invalid configuration: ALLOWED_ORIGINS: ${entry} is not an origin like https://app.example.com`);
    }
    out.push(u.origin.toLowerCase());
  }
  return out;
}

const hostList = (raw: string | undefined): string[] | null =>
  raw === undefined
    ? null
    : raw
        .split(',')
        .map((s) => s.trim().toLowerCase())
        .filter(Boolean);

export interface Config {
  port: number;
  metricsPort?: number;
  host: string;
  hostExplicit: boolean;
  dataDir: string;
  workspaceRoot: string;
  keepWorkspaces: boolean;
  sessionApiKeys: string[];
  secretKey?: string;
  llm: { model?: string; apiKey?: string; baseUrl?: string; contextWindow?: number };
  logLevel: string;
  maxBodyBytes: number;
  maxIterations: number;
  wsMaxBufferedBytes: number;
  wsMaxSubscribers: number;
  /** Browser sessions' idle and absolute lifetimes, in ms. */
  browserSession: { idleMs: number; maxMs: number };
  sqliteSynchronous: 'NORMAL' | 'FULL';
  diskReserveMb: number;
  mcpIdleCloseMs: number;
  terminalNoOutputTimeoutMs: number;
  sandbox: SandboxSettings;
  // ---- hardening (docs/security.md) ----
  allowedOrigins: string[];
  maxEventBytes: number;
  /** null: any host. */
  mcpAllowedHosts: string[] | null;
  gitAllowedHosts: string[] | null;
  maxLoadedConversations: number;
  /** WEB_APP_DIR, absolute: a directory holding an `index.html` (its files are read when first asked for, not at start). */
  webAppDir?: string;
  /** Set in cluster mode (DATABASE_URL given); absent, the embedded SQLite store is used. */
  cluster?: ClusterConfig;
}

interface ClusterConfig {
  databaseUrl: string;
  natsUrl?: string;
  /** NATS subjects start with this: clusters sharing a NATS server keep apart. */
  natsPrefix: string;
  nodeId: string;
  leaseTtlMs: number;
}

/**
 * The host ids sandboxes run as. A daemon running as root never lets a sandbox be root: its
 * processes are SANDBOX_UID/SANDBOX_GID on the host (default 65533, a uid no Debian account uses).
 * Any other daemon's sandboxes run as the daemon's own user (changing uid needs privilege), so
 * SANDBOX_UID is refused there unless it names that user.
 */
function sandboxIds(
  uid: number | undefined,
  gid: number | undefined,
  serviceUid: number | undefined,
  serviceGid: number | undefined,
): { runAs: { uid: number; gid: number }; serviceAs: { uid: number; gid: number } } | null {
  const self = process.getuid?.() ?? -1;
  if (self !== 0) {
    if (uid !== undefined && uid !== self) {
      throw new ConfigError(
        'invalid configuration: SANDBOX_UID: sandboxes can run as another user only when the daemon runs as root ' +
          `(it runs as uid ${self}, and its sandboxes run as that uid)`,
      );
    }
    return null;
  }
  const runAs = { uid: uid ?? DEFAULT_SANDBOX_ID, gid: gid ?? uid ?? DEFAULT_SANDBOX_ID };
  const serviceAs = { uid: serviceUid ?? DEFAULT_SERVICE_ID, gid: serviceGid ?? serviceUid ?? DEFAULT_SERVICE_ID };
  if (serviceAs.uid === runAs.uid || serviceAs.gid === runAs.gid) {
    throw new ConfigError(
      `invalid configuration: SANDBOX_SERVICE_UID: the file service's ids (${serviceAs.uid}:${serviceAs.gid}) ` +
        `must differ from the sandbox's (${runAs.uid}:${runAs.gid}), which its agent's processes have`,
    );
  }
  return { runAs, serviceAs };
}

/** WEB_APP_DIR resolved; a directory without an `index.html` stops the start (one stat: the files are read on first request). */
function webAppDir(raw: string): string {
  const dir = path.resolve(raw);
  if (!fs.statSync(path.join(dir, 'index.html'), { throwIfNoEntry: false })?.isFile()) {
    throw new ConfigError(
      `invalid configuration: WEB_APP_DIR: ${dir} has no index.html (give the directory of a built web app, e.g. OpenHands' frontend build/)`,
    );
  }
  return dir;
}

/** Parse the environment once. Throws ConfigError with one clear line per bad value. */
export function loadConfig(env: NodeJS.ProcessEnv = process.env): Config {
  const picked: Record<string, string> = {};
  for (const key of Object.keys(EnvSchema.shape)) {
    const v = env[key];
    if (v !== undefined && v !== '') picked[key] = v;
  }
  // jitless: parsed once, so zod's compiled fast path for objects (made on a schema's first parse) would cost the start more than it saves
  const parsed = EnvSchema.safeParse(picked, { jitless: true });
  if (!parsed.success) {
    const lines = parsed.error.issues.map((i) => `${String(i.path[0])}: ${i.message}`);
    throw new ConfigError(`invalid configuration: ${lines.join('; ')}`);
  }
  const e = parsed.data;
  const keys = [e.SESSION_API_KEY, ...(e.SESSION_API_KEYS ?? '').split(',')].map((k) => k?.trim()).filter((k): k is string => !!k);
  const short = keys.find((k) => k.length < MIN_SECRET_LENGTH);
  if (short !== undefined) {
    throw new ConfigError(`invalid configuration: SESSION_API_KEY: a session key must be at least ${MIN_SECRET_LENGTH} characters (one has ${short.length})`);
  }
  if (e.SANDBOX === 'bwrap' && e.SANDBOX_NETWORK === 'host' && keys.length === 0) {
    // the sandboxes share the host's loopback, and a keyless daemon answers every loopback request
    throw new ConfigError(
      'invalid configuration: SESSION_API_KEY: required with SANDBOX=bwrap and SANDBOX_NETWORK=host ' +
        "(agents' sandboxed processes would reach this keyless API on loopback: every conversation, every file); set a key or SANDBOX_NETWORK=none",
    );
  }
  const dataDir = path.resolve(e.DATA_DIR);
  const ids = sandboxIds(e.SANDBOX_UID, e.SANDBOX_GID, e.SANDBOX_SERVICE_UID, e.SANDBOX_SERVICE_GID);
  if (e.NATS_URL && !e.DATABASE_URL)
    throw new ConfigError('invalid configuration: NATS_URL: cluster mode needs DATABASE_URL too (the nodes share one PostgreSQL database)');
  if (e.DATABASE_URL && !e.SECRET_KEY)
    throw new ConfigError('invalid configuration: SECRET_KEY: required with DATABASE_URL (every node must seal and open secrets with the same key)');
  return {
    port: e.PORT,
    metricsPort: e.METRICS_PORT,
    host: e.HOST ?? '127.0.0.1',
    hostExplicit: e.HOST !== undefined,
    dataDir,
    workspaceRoot: path.resolve(e.WORKSPACE_ROOT ?? path.join(dataDir, 'workspaces')),
    keepWorkspaces: e.KEEP_WORKSPACES,
    sessionApiKeys: [...new Set(keys)],
    secretKey: e.SECRET_KEY,
    llm: { model: e.LLM_MODEL, apiKey: e.LLM_API_KEY, baseUrl: e.LLM_BASE_URL, contextWindow: e.LLM_CONTEXT_WINDOW },
    logLevel: e.LOG_LEVEL,
    maxBodyBytes: e.MAX_BODY_BYTES,
    maxIterations: e.MAX_ITERATIONS,
    wsMaxBufferedBytes: e.WS_MAX_BUFFERED_BYTES,
    wsMaxSubscribers: e.WS_MAX_SUBSCRIBERS,
    browserSession: { idleMs: e.BROWSER_SESSION_IDLE_SECONDS * 1000, maxMs: e.BROWSER_SESSION_MAX_SECONDS * 1000 },
    sqliteSynchronous: e.SQLITE_SYNCHRONOUS,
    diskReserveMb: e.DISK_RESERVE_MB,
    mcpIdleCloseMs: e.MCP_IDLE_CLOSE_MS,
    terminalNoOutputTimeoutMs: e.TERMINAL_NO_OUTPUT_TIMEOUT_MS,
    sandbox: {
      mode: e.SANDBOX,
      network: e.SANDBOX_NETWORK,
      allowNets: e.SANDBOX_ALLOW_NETS ?? [],
      memoryMb: e.SANDBOX_MEMORY_MB,
      totalMemoryMb: e.SANDBOX_TOTAL_MEMORY_MB,
      cpus: e.SANDBOX_CPU ?? null,
      diskMb: e.SANDBOX_DISK_MB,
      idleCloseMs: e.SANDBOX_IDLE_CLOSE_MS,
      pids: e.SANDBOX_PIDS,
      fileSizeMb: e.SANDBOX_FILE_SIZE_MB,
      maxLive: e.SANDBOX_MAX_LIVE,
      bwrapPath: e.BWRAP_PATH,
      roBinds: (e.SANDBOX_RO_BINDS ?? '').split(':').filter(Boolean),
      runAs: ids?.runAs ?? null,
      serviceAs: ids?.serviceAs ?? null,
      limits: e.SANDBOX_LIMITS,
      disk: e.SANDBOX_DISK,
    },
    allowedOrigins: parseOrigins(e.ALLOWED_ORIGINS),
    maxEventBytes: e.MAX_EVENT_BYTES,
    mcpAllowedHosts: hostList(e.MCP_ALLOWED_HOSTS),
    gitAllowedHosts: hostList(e.GIT_ALLOWED_HOSTS),
    maxLoadedConversations: e.MAX_LOADED_CONVERSATIONS,
    webAppDir: e.WEB_APP_DIR === undefined ? undefined : webAppDir(e.WEB_APP_DIR),
    cluster: e.DATABASE_URL
      ? {
          databaseUrl: e.DATABASE_URL,
          natsUrl: e.NATS_URL,
          natsPrefix: e.NATS_PREFIX,
          nodeId: e.NODE_ID ?? `${os.hostname()}-${process.pid}`,
          leaseTtlMs: e.LEASE_TTL_MS,
        }
      : undefined,
  };
}
