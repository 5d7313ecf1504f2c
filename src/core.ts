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
import { SqliteStore } from './store/sqlite.js';
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
  // probes bwrap once; SANDBOX=bwrap without a working bwrap throws SandboxUnavailableError
  const sandbox = await Sandbox.open(config.sandbox, {
    workspaceRoot: config.workspaceRoot,
    mapped: [{ host: helperDirOf(config.dataDir), inside: '/parley/helpers' }],
    log,
  });
  const box = SecretBox.open(config.dataDir, config.secretKey);
  for (const k of config.sessionApiKeys) redactor.add(k);
  redactor.add(config.secretKey, config.llm.apiKey);
  const bus = new EventBus();
  let service: ConversationService | null = null;
  const store = new SqliteStore(config.dataDir, (id, evs) => service?.onCommit(id, evs), { synchronous: config.sqliteSynchronous });
  service = new ConversationService(store, bus, box, redactor, log);
  service.sandbox = sandbox;
  const unread = [
    metrics.conversations.read(() => store.countByStatus().map(([s, n]) => [[s], n])),
    metrics.storeUnindexed.read(() => [[[], store.unindexed]]),
    metrics.storeIndexLag.read(() => [[[], store.indexLagSeconds]]),
    metrics.sandboxes.read(() => [[[sandbox.mode], sandbox.liveCount]]),
    metrics.sandboxProcesses.read(() => [[[sandbox.mode], sandbox.processCount]]),
  ];
  await service.start();
  return {
    service,
    sandbox,
    async close() {
      await service!.runtime?.close();
      await sandbox.close();
      for (const u of unread) u();
      await store.close();
    },
  };
}
