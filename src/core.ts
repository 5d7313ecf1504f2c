/** Assembles the core: store, bus, secrets, the conversation service. Knows no HTTP. */
import fs from 'node:fs';
import path from 'node:path';
import type { Logger } from 'pino';
import type { Config } from './config.js';
import { metrics } from './metrics.js';
import { ConversationService } from './conversation/service.js';
import { EventBus } from './events/bus.js';
import { SecretBox } from './secrets/crypto.js';
import { Redactor } from './secrets/redact.js';
import { restrictDataDir } from './store/permissions.js';
import { SqliteStore } from './store/sqlite.js';
import { PostgresStore } from './store/postgres.js';
import type { Store } from './store/types.js';
import type { EncodedEvent } from './events/types.js';
import { pgStoreMetrics } from './cluster/metrics.js';
import { Sandbox } from './sandbox/launcher.js';

/** The daemon-owned askpass directory (workspace/askpass.ts), shown read-only inside sandboxes. */
export const helperDirOf = (dataDir: string) => path.join(dataDir, 'helpers');

export interface Core {
  service: ConversationService;
  sandbox: Sandbox;
  close(): Promise<void>;
}

export async function createCore(config: Config, log: Logger, redactor: Redactor): Promise<Core> {
  fs.mkdirSync(config.dataDir, { recursive: true, mode: 0o700 });
  fs.mkdirSync(config.workspaceRoot, { recursive: true, mode: 0o700 });
  restrictDataDir(config.dataDir, [config.workspaceRoot]);
  // probes bwrap once; SANDBOX=bwrap without a working bwrap throws SandboxUnavailableError
  const sandbox = await Sandbox.open(config.sandbox, {
    workspaceRoot: config.workspaceRoot,
    mapped: [{ host: helperDirOf(config.dataDir), inside: '/parley/helpers' }],
    log,
  });
  const box = SecretBox.open(config.dataDir, config.secretKey);
  for (const k of config.sessionApiKeys) redactor.add(k);
  redactor.add(config.secretKey, config.llm.apiKey);
  let bus = new EventBus();
  let service: ConversationService | null = null;
  const onCommit = (id: string, evs: EncodedEvent[]) => service?.onCommit(id, evs);
  let store: Store;
  let unread: (() => void)[];
  let closeBus = async () => {};
  if (config.cluster) {
    const pgStore = await PostgresStore.open(config.cluster.databaseUrl, onCommit);
    redactor.add(new URL(config.cluster.databaseUrl).password || null);
    store = pgStore;
    unread = pgStoreMetrics(pgStore);
    if (config.cluster.natsUrl) {
      const { ClusterBus } = await import('./cluster/bus.js');
      const cluster = await ClusterBus.connect(pgStore, { url: config.cluster.natsUrl, prefix: config.cluster.natsPrefix, nodeId: config.cluster.nodeId, log }).catch(async (err) => {
        await pgStore.close();
        throw new Error(`cannot reach NATS at ${config.cluster!.natsUrl}: ${(err as Error).message}`);
      });
      cluster.onRemoteDelete((id) => service?.forget(id));
      closeBus = () => cluster.close();
      bus = cluster;
    }
  } else {
    const sqlite = new SqliteStore(config.dataDir, onCommit, { synchronous: config.sqliteSynchronous });
    store = sqlite;
    unread = [
      metrics.conversations.read(() => sqlite.countByStatus().map(([s, n]) => [[s], n])),
      metrics.storeUnindexed.read(() => [[[], sqlite.unindexed]]),
      metrics.storeIndexLag.read(() => [[[], sqlite.indexLagSeconds]]),
    ];
  }
  service = new ConversationService(store, bus, box, redactor, log, {
    workspaceRoot: config.workspaceRoot,
    dataDir: config.dataDir,
    llm: { model: config.llm.model, baseUrl: config.llm.baseUrl, apiKeySet: !!config.llm.apiKey },
  });
  service.sandbox = sandbox;
  service.maxEventBytes = config.maxEventBytes;
  unread.push(
    metrics.sandboxes.read(() => [[[sandbox.mode], sandbox.liveCount]]),
    metrics.sandboxProcesses.read(() => [[[sandbox.mode], sandbox.processCount]]),
  );
  await service.start();
  return {
    service,
    sandbox,
    async close() {
      await service!.runtime?.close();
      await sandbox.close();
      for (const u of unread) u();
      await closeBus();
      await store.close();
    },
  };
}
