/**
 * The composition root of the core (knows no HTTP): the store, the event bus and log, secrets and
 * settings, conversations, the agent, workspace preparation and the conversation lifecycle, each
 * given what it depends on once, here. bridge/main.ts puts the HTTP bridge in front of it.
 */
import fs from 'node:fs';
import type { Logger } from 'pino';
import { createAgent, type Agent } from './agent/agent.js';
import { closeAllMcp } from './agent/mcp-servers.js';
import { builtinTools } from './agent/tool-box.js';
import type { Config } from './config.js';
import { Conversations, type SharedStore } from './conversation/conversations.js';
import { ConversationService, type ConversationOps } from './conversation/service.js';
import { sandboxAccess, SideChannels } from './conversation/side-channels.js';
import { ConversationKeys } from './conversation/conversation-keys.js';
import { EventBus } from './events/bus.js';
import { EventLog } from './events/log.js';
import { traceTurns } from './events/turn-trace.js';
import { metrics } from './metrics.js';
import { SecretBox } from './secrets/crypto.js';
import type { Redactor } from './secrets/redact.js';
import { Settings } from './secrets/settings.js';
import { DiskWatch } from './store/disk-watch.js';
import { restrictDataDir } from './store/permissions.js';
import { SqliteStore } from './store/sqlite.js';
import type { PostgresStore } from './store/postgres.js';
import type { Store } from './store/types.js';
import { pgStoreMetrics } from './cluster/metrics.js';
import type { ClusterBus } from './cluster/bus.js';
import type { Leases } from './cluster/leases.js';
import { Sandbox } from './sandbox/launcher.js';
import { WorkspacePreparer } from './conversation/preparer.js';
import { createWorkspace, helperDirOf, removeWorkspace } from './sandbox/workspace-dir.js';
import { JsonRecords } from './settings/records.js';
import { LlmProfiles } from './settings/llm-profiles.js';
import { AgentProfiles } from './settings/agent-profiles.js';
import { AgentServerSettings } from './settings/agent-settings.js';
import { SavedWorkspaces } from './settings/workspaces.js';
import { InstalledSkills } from './settings/installed-skills.js';
import { WorkspaceBrowser } from './conversation/workspace-browser.js';
import { ProjectExtensions } from './conversation/project-extensions.js';
import type { McpTestRequest, McpTestResult, McpTestSandbox } from './tools/mcp/test-server.js';
import { liveParts } from './conversation/live.js';
import { Forks } from './conversation/fork.js';

export interface Core {
  service: ConversationOps;
  conversations: Conversations;
  events: EventLog;
  settings: Settings;
  agent: Agent;
  /** The agent server's workspace side channels (/api/bash, /api/file, /api/git). */
  sideChannels: SideChannels;
  /** Forking a conversation: its events, settings and a copy of its workspace (src/conversation/fork.ts). */
  forks: Forks;
  /** OpenHands agent-server's server-wide features: its settings, profiles, saved workspaces, skills, file browser, MCP test. */
  server: ServerFeatures;
  /** Each conversation's own key (`session_api_key`), derived from the daemon's secret. */
  conversationKeys: ConversationKeys;
  sandbox: Sandbox;
  redactor: Redactor;
  /** DATA_DIR's free space; `disk.subscribe` hears of disk pressure (src/store/disk-watch.ts). */
  disk: DiskWatch;
  startedAt: number;
  /** Closes every part in order (`onPart`: each as its close begins; how long each took is logged). */
  close(onPart?: (part: string) => void): Promise<void>;
}

interface ServerFeatures {
  settings: AgentServerSettings;
  llmProfiles: LlmProfiles;
  agentProfiles: AgentProfiles;
  workspaces: SavedWorkspaces;
  skills: InstalledSkills;
  browser: WorkspaceBrowser;
  extensions: ProjectExtensions;
  testMcp(req: McpTestRequest): Promise<McpTestResult>;
}

/**
 * `deferSandboxProbe`: the sandbox's start-up probe waits for `core.sandbox.startProbe()`, which the
 * daemon calls shortly after it listens (its process starts would otherwise delay the first requests),
 * or for the first use of `core.sandbox.ready`.
 *
 * Why one function of this length: it is the composition root, every part built once in dependency
 * order and handed what it needs; read top to bottom, it is the map of the core (the store's choice
 * is apart: `openStore`).
 */
export async function createCore(config: Config, log: Logger, redactor: Redactor, opts: { deferSandboxProbe?: boolean } = {}): Promise<Core> {
  const startedAt = Date.now();
  // DATA_DIR's free space (first sampled once the directory exists below): the store reports full-disk writes to it; subscribers hear of disk pressure
  const disk = new DiskWatch(config.dataDir, { log });
  fs.mkdirSync(config.dataDir, { recursive: true, mode: 0o700 });
  fs.mkdirSync(config.workspaceRoot, { recursive: true, mode: 0o700 });
  restrictDataDir(config.dataDir, [config.workspaceRoot, helperDirOf(config.dataDir)]);
  // probes bwrap in the background (the daemon listens meanwhile; what needs a sandbox waits for
  // sandbox.ready, which rejects with a SandboxUnavailableError when SANDBOX=bwrap cannot be honoured)
  const sandbox = Sandbox.start(config.sandbox, {
    workspaceRoot: config.workspaceRoot,
    mapped: [{ host: helperDirOf(config.dataDir), inside: '/parley/helpers' }],
    hidden: [config.dataDir],
    log,
    apiOpenOnLoopback: config.sessionApiKeys.length === 0,
    deferProbe: opts.deferSandboxProbe,
    sharedWorkspaceRoot: config.cluster !== undefined,
    keepWorkspaces: config.keepWorkspaces,
  });
  const box = SecretBox.open(config.dataDir, config.secretKey);
  const conversationKeys = new ConversationKeys(box.derive('parley conversation keys v1'));
  for (const k of config.sessionApiKeys) redactor.add(k);
  redactor.add(config.secretKey, config.llm.apiKey);
  const { store, bus, unread, closeBus, cluster } = await openStore(config, log, redactor, disk);
  const events = new EventLog(store, bus, redactor, config.maxEventBytes);
  // LOG_LEVEL=trace: each turn's phases, timed, in one line at its end (scripts/bench-turn.ts reads them)
  if (config.logLevel === 'trace') traceTurns((id, marks) => log.trace({ conversation_id: id, marks }, 'turn trace'));
  const settings = new Settings(store, box, redactor, log);
  const leases = cluster?.leases;
  const shared: SharedStore | undefined = leases && { ownerOf: (id) => leases.owner(id) };
  // the built-in tools hold each conversation's shell and editor history: made before the conversations
  const builtins = builtinTools({
    sandbox,
    events,
    dataDir: config.dataDir,
    noOutputTimeoutMs: config.terminalNoOutputTimeoutMs,
    idleCloseMs: config.sandbox.idleCloseMs,
  });
  const conversations = new Conversations(
    store,
    events,
    settings,
    redactor,
    liveParts({ events, sandbox, builtins, workspaceRoot: config.workspaceRoot, keepWorkspaces: config.keepWorkspaces, log }),
    {
      workspaceRoot: config.workspaceRoot,
      dataDir: config.dataDir,
      llm: { model: config.llm.model, baseUrl: config.llm.baseUrl, apiKeySet: !!config.llm.apiKey },
    },
    shared,
    { count: config.maxLoadedConversations },
    log,
    conversationKeys,
  );
  // every commit is published (the event log), then followed by the conversation's shown status
  store.onCommit((id, evs) => events.committed(id, evs));
  store.onCommit((id, evs) => conversations.committed(id, evs));
  // another node deleted a conversation: its state here goes
  cluster?.bus.onRemoteDelete((id) => void conversations.forget(id));
  // a sandbox closed to stay under SANDBOX_MAX_LIVE, or one over SANDBOX_DISK_MB: its conversation closes what the launcher stopped
  conversations.followSandbox(sandbox, config.sandbox.diskMb);
  // a full disk: the agents' writes go first (the conversation using the most disk is stopped, once a second while it lasts)
  disk.subscribe((p) => {
    if (p.full) void sandbox.relieveDisk();
  });
  // the user's installed skills: every conversation's agent is given the enabled ones (src/agent/skills.ts)
  const records = new JsonRecords(store);
  const skills = new InstalledSkills(records);
  const agent = createAgent({ conversations, events, settings, redactor, builtins, config, log, userSkills: () => skills.enabled() });
  const preparer = new WorkspacePreparer(conversations, events, settings, agent.runtime, redactor, {
    workspaceRoot: config.workspaceRoot,
    allowedHosts: config.gitAllowedHosts,
    helperDir: helperDirOf(config.dataDir),
    replay: agent.replay,
  });
  const service = new ConversationService(conversations, events, settings, agent.runtime, preparer, redactor, log, config.maxEventBytes);
  const sideChannels = new SideChannels(conversations, settings, redactor, config.workspaceRoot, sandboxAccess(sandbox));
  const forks = new Forks({ conversations, events, sandbox, workspaceRoot: config.workspaceRoot, log });
  const server = serverFeatures(config, records, skills, settings, conversations, sandbox, redactor);
  unread.push(
    metrics.sandboxes.read(() => [[[sandbox.mode], sandbox.liveCount]]),
    metrics.sandboxProcesses.read(() => [[[sandbox.mode], sandbox.processCount]]),
    metrics.sandboxSpares.read(() => {
      const { alive, ready } = sandbox.spares;
      return [
        [['ready'], ready],
        [['starting'], alive - ready],
      ];
    }),
    metrics.conversationsLoaded.read(() => [[[], conversations.resident.count]]),
    metrics.conversationsLoadedBytes.read(() => [[[], conversations.resident.bytes]]),
  );
  let exposed: ConversationOps = service;
  let closeNode = async () => {};
  if (cluster) {
    const { startClusterNode } = await import('./cluster/index.js');
    const node = await startClusterNode({
      service,
      conversations,
      events,
      runtime: agent.runtime,
      leases: cluster.leases,
      bus: cluster.bus,
      store: cluster.store,
      prefix: cluster.prefix,
      log,
    });
    exposed = node.service;
    closeNode = node.close;
  }
  await settings.loadIntoRedactor();
  // with several nodes, a conversation left running is recovered when its lease expires (src/cluster/node.ts)
  if (!cluster) await conversations.recoverInterrupted(log);
  await exposed.resumePreparations();
  return {
    service: exposed,
    conversations,
    events,
    settings,
    agent,
    sideChannels,
    forks,
    server,
    conversationKeys,
    sandbox,
    redactor,
    disk,
    startedAt,
    async close(onPart = () => {}) {
      // every loaded conversation's run, shell and MCP servers end; then any shell or MCP server left, and the sandboxes
      const ms: Record<string, number> = {};
      let at = performance.now();
      const part = async (name: string, close: () => Promise<unknown>) => {
        onPart(name);
        await close();
        const now = performance.now();
        ms[name] = Math.round(now - at);
        at = now;
      };
      await part('conversations', () => conversations.closeAll('shutdown'));
      await part('shells', () => builtins.closeAll());
      await part('mcp servers', closeAllMcp);
      await part('sandboxes', () => sandbox.close());
      for (const u of unread) u();
      await part('cluster node', closeNode);
      await part('bus', closeBus);
      await part('store', () => store.close());
      disk.close();
      log.info({ ms }, 'closed');
    },
  };
}

/** The agent-server features' parts, over the store's settings records and the conversations' sandboxes. */
function serverFeatures(
  config: Config,
  records: JsonRecords,
  skills: InstalledSkills,
  settings: Settings,
  conversations: Conversations,
  sandbox: Sandbox,
  redactor: Redactor,
): ServerFeatures {
  const llmProfiles = new LlmProfiles(records, settings);
  const browser = new WorkspaceBrowser(conversations, config.workspaceRoot, sandboxAccess(sandbox));
  // a stdio server under test gets a sandbox of its own, removed after the test (src/tools/mcp/test-server.ts)
  const testSandbox: McpTestSandbox = {
    async open(id) {
      await sandbox.ready;
      const workspaceDir = await createWorkspace(config.workspaceRoot, id);
      return {
        workspaceDir,
        launcher: sandbox.forConversation(id),
        async close() {
          await sandbox.removeConversation(id);
          await removeWorkspace(workspaceDir);
        },
      };
    },
  };
  return {
    settings: new AgentServerSettings(records, settings, llmProfiles),
    llmProfiles,
    agentProfiles: new AgentProfiles(records, settings, llmProfiles),
    workspaces: new SavedWorkspaces(records, settings),
    skills,
    browser,
    extensions: new ProjectExtensions(browser, skills),
    async testMcp(req) {
      const { testMcpServer } = await import('./tools/mcp/test-server.js');
      return testMcpServer(req, { sandbox: testSandbox, allowedHosts: config.mcpAllowedHosts, redact: (t) => redactor.redact(t) });
    },
  };
}

/** The store in force, and in cluster mode (NATS) the bus, the leases and routing to the lease holder (src/cluster/). */
interface OpenStore {
  store: Store;
  bus: EventBus;
  /** Removes the store's metric readers. */
  unread: (() => void)[];
  closeBus(): Promise<void>;
  cluster: { bus: ClusterBus; leases: Leases; prefix: string; store: PostgresStore } | null;
}

/** The embedded store (SQLite in DATA_DIR), or PostgreSQL with, when NATS is set, the cluster's bus and leases. */
async function openStore(config: Config, log: Logger, redactor: Redactor, disk: DiskWatch): Promise<OpenStore> {
  let bus = new EventBus();
  let store: Store;
  let unread: (() => void)[];
  let closeBus = async () => {};
  // several nodes (NATS): leases and routing to the lease holder (src/cluster/)
  let cluster: OpenStore['cluster'] = null;
  if (config.cluster) {
    // loaded only in cluster mode: evaluating pg costs a single node's start ~25 ms (it loads Node's fetch)
    const { PostgresStore } = await import('./store/postgres.js');
    const pgStore = await PostgresStore.open(config.cluster.databaseUrl);
    redactor.add(new URL(config.cluster.databaseUrl).password || null);
    store = pgStore;
    unread = pgStoreMetrics(pgStore);
    if (config.cluster.natsUrl) {
      const { ClusterBus } = await import('./cluster/bus.js');
      const clusterBus = await ClusterBus.connect(pgStore, {
        url: config.cluster.natsUrl,
        prefix: config.cluster.natsPrefix,
        nodeId: config.cluster.nodeId,
        log,
      }).catch(async (err) => {
        await pgStore.close();
        throw new Error(`cannot reach NATS at ${config.cluster!.natsUrl}: ${(err as Error).message}`);
      });
      closeBus = () => clusterBus.close();
      bus = clusterBus;
      const { Leases } = await import('./cluster/leases.js');
      cluster = {
        bus: clusterBus,
        leases: new Leases(pgStore.pool, config.cluster.nodeId, config.cluster.leaseTtlMs),
        prefix: config.cluster.natsPrefix,
        store: pgStore,
      };
    }
  } else {
    const sqlite = new SqliteStore(config.dataDir, { synchronous: config.sqliteSynchronous, disk, reserveBytes: config.diskReserveMb * 1024 * 1024 });
    store = sqlite;
    unread = [
      metrics.conversations.read(() => sqlite.countByStatus().map(([s, n]) => [[s], n])),
      metrics.storeUnindexed.read(() => [[[], sqlite.unindexed]]),
      metrics.storeIndexLag.read(() => [[[], sqlite.indexLagSeconds]]),
    ];
  }
  return { store, bus, unread, closeBus, cluster };
}
