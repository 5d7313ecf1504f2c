/**
 * The core's parts built in a test as src/core.ts wires them, without a daemon and without HTTP in
 * front: a real store (SQLite in a temp DATA_DIR, or PostgreSQL), the event log, settings,
 * conversations, the agent (its runtime), the workspace preparer and the conversation service;
 * with `cluster`, the NATS bus, the leases and the cluster node in front of the service. Only the
 * edges stand in: the LLM is a scripted server over HTTP, and SANDBOX=none runs plain processes.
 */
import fs from 'node:fs';
import pino from 'pino';
import { createAgent, type Agent } from '../../src/agent/agent.js';
import { closeAllMcp } from '../../src/agent/mcp-servers.js';
import { builtinTools } from '../../src/agent/tool-box.js';
import type { ClusterBus } from '../../src/cluster/bus.js';
import type { Leases } from '../../src/cluster/leases.js';
import { loadConfig, type Config } from '../../src/config.js';
import { Conversations, type SharedStore } from '../../src/conversation/conversations.js';
import { liveParts } from '../../src/conversation/live.js';
import { WorkspacePreparer } from '../../src/conversation/preparer.js';
import { ConversationService, type ConversationOps } from '../../src/conversation/service.js';
import { EventBus } from '../../src/events/bus.js';
import { EventLog } from '../../src/events/log.js';
import { Sandbox } from '../../src/sandbox/launcher.js';
import { helperDirOf } from '../../src/sandbox/workspace-dir.js';
import { SecretBox } from '../../src/secrets/crypto.js';
import { Redactor } from '../../src/secrets/redact.js';
import { Settings } from '../../src/secrets/settings.js';
import { PostgresStore } from '../../src/store/postgres.js';
import { SqliteStore } from '../../src/store/sqlite.js';
import type { Store } from '../../src/store/types.js';
import { tempDir, waitFor } from './daemon.js';

export const quietLog = pino({ level: 'silent' });

/** The runtime as the tests drive it: by conversation id (the runtime itself acts on the live conversation). */
export interface RuntimeById {
  start(id: string): boolean;
  isRunning(id: string): boolean;
  /** A message was appended: a running loop takes it at its next step. */
  notifyMessage(id: string): void;
  /** The conversation's `close('interrupted')`: its run and every process it runs. */
  interrupt(id: string): Promise<void>;
}

export interface CoreParts {
  config: Config;
  store: Store;
  events: EventLog;
  settings: Settings;
  conversations: Conversations;
  sandbox: Sandbox;
  agent: Agent;
  runtime: RuntimeById;
  preparer: WorkspacePreparer;
  service: ConversationService;
  /** The service as the API calls it: the cluster node's routing in front of it with `cluster`. */
  ops: ConversationOps;
  redactor: Redactor;
  /** Stops the runs, the node and the bus, closes the store, removes DATA_DIR. */
  close(): Promise<void>;
}

export interface PartsOptions {
  /** Scripted LLM base URL (`llm.url`); absent: no LLM configured. */
  llmUrl?: string;
  /** More environment for loadConfig (MAX_ITERATIONS, ...). */
  env?: Record<string, string>;
  /** Cluster mode: the PostgreSQL database, NATS, and this node's id and lease TTL (ms, any value). */
  cluster?: { databaseUrl: string; natsUrl: string; prefix: string; nodeId: string; ttlMs: number };
}

/** The parts on a new temp DATA_DIR (SANDBOX=none). */
export async function coreParts(opts: PartsOptions = {}): Promise<CoreParts & { cluster?: { leases: Leases; bus: ClusterBus } }> {
  const dataDir = tempDir('parley-core-');
  const config = loadConfig({
    DATA_DIR: dataDir,
    SANDBOX: 'none',
    SECRET_KEY: 'core-parts-test-secret-key',
    ...(opts.llmUrl ? { LLM_MODEL: 'openai/scripted', LLM_BASE_URL: opts.llmUrl, LLM_API_KEY: 'sk-core-parts-key' } : {}),
    ...opts.env,
  });
  fs.mkdirSync(config.workspaceRoot, { recursive: true });
  const redactor = new Redactor();
  let store: Store;
  let bus: EventBus = new EventBus();
  let cluster: { leases: Leases; bus: ClusterBus; pg: PostgresStore } | undefined;
  if (opts.cluster) {
    const c = opts.cluster;
    const pgStore = await PostgresStore.open(c.databaseUrl);
    const { ClusterBus } = await import('../../src/cluster/bus.js');
    const { Leases } = await import('../../src/cluster/leases.js');
    const clusterBus = await ClusterBus.connect(pgStore, { url: c.natsUrl, prefix: c.prefix, nodeId: c.nodeId, log: quietLog });
    cluster = { leases: new Leases(pgStore.pool, c.nodeId, c.ttlMs), bus: clusterBus, pg: pgStore };
    store = pgStore;
    bus = clusterBus;
  } else {
    store = new SqliteStore(dataDir);
  }
  const events = new EventLog(store, bus, redactor, config.maxEventBytes);
  const settings = new Settings(store, SecretBox.open(dataDir, config.secretKey), redactor, quietLog);
  const leases = cluster?.leases;
  const shared: SharedStore | undefined = leases && { ownerOf: (id) => leases.owner(id) };
  const agentServer = {
    workspaceRoot: config.workspaceRoot,
    dataDir,
    llm: { model: config.llm.model, baseUrl: config.llm.baseUrl, apiKeySet: !!config.llm.apiKey },
  };
  const sandbox = Sandbox.start(config.sandbox, { workspaceRoot: config.workspaceRoot, hidden: [dataDir], log: quietLog });
  const builtins = builtinTools({
    sandbox,
    events,
    dataDir,
    noOutputTimeoutMs: config.terminalNoOutputTimeoutMs,
    idleCloseMs: config.sandbox.idleCloseMs,
  });
  const live = liveParts({ events, sandbox, builtins, workspaceRoot: config.workspaceRoot, keepWorkspaces: false, log: quietLog });
  const conversations = new Conversations(store, events, settings, redactor, live, agentServer, shared, {}, quietLog);
  store.onCommit((id, evs) => events.committed(id, evs));
  store.onCommit((id, evs) => conversations.committed(id, evs));
  cluster?.bus.onRemoteDelete((id) => void conversations.forget(id));
  conversations.followSandbox(sandbox, config.sandbox.diskMb);
  const agent = createAgent({ conversations, events, settings, redactor, builtins, config, log: quietLog });
  const preparer = new WorkspacePreparer(conversations, events, settings, agent.runtime, redactor, {
    workspaceRoot: config.workspaceRoot,
    allowedHosts: config.gitAllowedHosts,
    helperDir: helperDirOf(dataDir),
    replay: agent.replay,
  });
  const service = new ConversationService(conversations, events, settings, agent.runtime, preparer, redactor, quietLog, config.maxEventBytes);
  let ops: ConversationOps = service;
  let closeNode = async () => {};
  if (cluster) {
    const { startClusterNode } = await import('../../src/cluster/index.js');
    const node = await startClusterNode({
      service,
      conversations,
      events,
      runtime: agent.runtime,
      leases: cluster.leases,
      bus: cluster.bus,
      store: cluster.pg,
      prefix: opts.cluster!.prefix,
      log: quietLog,
    });
    ops = node.service;
    closeNode = node.close;
  }
  const c = cluster;
  return {
    config,
    store,
    events,
    settings,
    conversations,
    sandbox,
    agent,
    runtime: {
      start: (id) => agent.runtime.start(conversations.claim(conversations.loaded(id)!)),
      isRunning: (id) => conversations.isRunning(id),
      notifyMessage: (id) => {
        const conv = conversations.loaded(id);
        if (conv) agent.runtime.messageArrived(conv);
      },
      interrupt: async (id) => (await conversations.require(id)).close('interrupted'),
    },
    preparer,
    service,
    ops,
    redactor,
    ...(c ? { cluster: { leases: c.leases, bus: c.bus } } : {}),
    async close() {
      await conversations.closeAll('shutdown');
      await builtins.closeAll();
      await closeAllMcp();
      await sandbox.close();
      await closeNode();
      await c?.bus.close();
      await store.close();
      fs.rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

/** The `execution_status` values its log holds, in order. */
export async function statusTrail(events: EventLog, id: string): Promise<string[]> {
  return (await events.after(id, 0))
    .filter((e) => e.kind === 'ConversationStateUpdateEvent' && e.key === 'execution_status')
    .map((e) => String((e as { value: unknown }).value));
}

/** Waits until the run of `id` has ended (the runtime holds no run) and returns its status. */
export async function runEnded(p: Pick<CoreParts, 'runtime' | 'conversations'>, id: string, timeoutMs = 20_000): Promise<string | undefined> {
  await waitFor(() => !p.runtime.isRunning(id), `the run of ${id} to end`, timeoutMs);
  return p.conversations.status(id);
}

/** A promise with its resolve outside (a gate the test opens). */
export function gate<T = void>(): { promise: Promise<T>; open(v: T): void } {
  let open!: (v: T) => void;
  const promise = new Promise<T>((r) => (open = r));
  return { promise, open };
}

/** The live conversations' parts for a test that builds `Conversations` alone (SANDBOX=none: a shell is a plain process; `builtins` starts one). */
export function idleLiveParts(events: EventLog, dataDir: string, out?: { builtins?: ReturnType<typeof builtinTools> }) {
  const sandbox = Sandbox.none(dataDir);
  const builtins = builtinTools({ sandbox, events, dataDir, noOutputTimeoutMs: 30_000, idleCloseMs: undefined });
  if (out) out.builtins = builtins;
  return liveParts({ events, sandbox, builtins, workspaceRoot: `${dataDir}/workspaces`, keepWorkspaces: false, log: quietLog });
}
