/**
 * Cluster mode in the composition root: the node (leases, routing, takeover) in front of this
 * process's conversation service. The router and the bridge keep calling the service they are
 * given; in cluster mode that is a view of the service whose lifecycle operations (create, send,
 * run, pause, interrupt, delete, resuming preparations) go through the node first.
 */
import type { Logger } from 'pino';
import type { ConversationService } from '../conversation/service.js';
import type { PostgresStore } from '../store/postgres.js';
import type { ClusterBus } from './bus.js';
import { Leases } from './leases.js';
import { ClusterNode } from './node.js';

const ROUTED = new Set(['createConversation', 'sendMessage', 'run', 'pause', 'interrupt', 'deleteConversation', 'resumePreparations']);

export interface ClusterSetup {
  nodeId: string;
  leaseTtlMs: number;
  prefix: string;
}

export async function startClusterNode(
  service: ConversationService,
  store: PostgresStore,
  bus: ClusterBus,
  opts: ClusterSetup,
  log: Logger,
): Promise<{ service: ConversationService; close(): Promise<void> }> {
  const leases = new Leases(store.pool, opts.nodeId, opts.leaseTtlMs);
  const node = new ClusterNode({
    nc: bus.nc,
    prefix: opts.prefix,
    leases,
    local: service,
    log,
    hooks: {
      isRunning: (id) => service.runtime?.isRunning(id) ?? false,
      stopLocal: async (id) => service.runtime?.pause(id),
      refresh: async (id) => {
        const conv = await service.refresh(id);
        return conv ? { status: conv.status } : null;
      },
      setupPhase: async (id) => ((await service.load(id))?.record.data.setup as { phase?: string } | undefined)?.phase,
      resumePreparations: (take) => service.resumePreparations(take),
      recover: async (id) => {
        await service.append(id, {
          kind: 'ConversationErrorEvent',
          source: 'environment',
          code: 'NodeLost',
          detail: 'The node running this conversation stopped. Send a message or run it again to continue.',
        });
        await service.setStatus(id, 'error');
      },
    },
  });
  service.ownerOf = (id) => leases.owner(id);
  await node.start();
  const routed = new Proxy(service, {
    get(target, prop) {
      if (typeof prop === 'string' && ROUTED.has(prop)) {
        const op = (node as unknown as Record<string, (...a: unknown[]) => unknown>)[prop]!;
        return op.bind(node);
      }
      const v = Reflect.get(target, prop, target) as unknown;
      return typeof v === 'function' ? v.bind(target) : v;
    },
  });
  return { service: routed, close: () => node.close() };
}
