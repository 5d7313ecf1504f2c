/**
 * Cluster mode in the composition root: the node (leases, routing, takeover) in front of this
 * process's conversation service. The router and the bridge keep calling the service they are
 * given; in cluster mode that is a view of the service whose lifecycle operations (create, send,
 * run, pause, interrupt, delete, resuming preparations) go through the node first.
 */
import type { Logger } from 'pino';
import type { Conversations } from '../conversation/conversations.js';
import type { AgentRuntimeImpl } from '../agent/runtime.js';
import type { ConversationService } from '../conversation/service.js';
import type { EventLog } from '../events/log.js';
import type { PostgresStore } from '../store/postgres.js';
import type { ClusterBus } from './bus.js';
import type { Leases } from './leases.js';
import { ClusterNode } from './node.js';

const ROUTED = new Set(['createConversation', 'sendMessage', 'run', 'pause', 'interrupt', 'deleteConversation', 'resumePreparations']);

interface ClusterNodeParts {
  service: ConversationService;
  conversations: Conversations;
  events: EventLog;
  runtime: AgentRuntimeImpl;
  leases: Leases;
  bus: ClusterBus;
  store: PostgresStore;
  prefix: string;
  log: Logger;
}

const isUserMessage = (d: { kind: string; source: string }) => d.kind === 'MessageEvent' && d.source === 'user';

export async function startClusterNode(p: ClusterNodeParts): Promise<{ service: ConversationService; runtime: AgentRuntimeImpl; close(): Promise<void> }> {
  const { service, conversations, events, runtime } = p;
  const node = new ClusterNode({
    nc: p.bus.nc,
    prefix: p.prefix,
    leases: p.leases,
    local: service,
    log: p.log,
    hooks: {
      isRunning: (id) => runtime.isRunning(id),
      notifyMessage: (id) => runtime.notifyMessage(id),
      // stops the loop and the processes it started; what it would append is refused (the fence)
      stopLocal: (id) => runtime.interrupt(id),
      refresh: async (id) => {
        const conv = await conversations.refresh(id);
        return conv ? { status: conv.status } : null;
      },
      setupPhase: async (id) => ((await conversations.load(id))?.record.data.setup as { phase?: string } | undefined)?.phase,
      resumePreparations: (take) => service.resumePreparations(take),
      runtimeOp: (op, args) => (runtime[op] as (...a: unknown[]) => Promise<unknown>).apply(runtime, args),
      recover: async (id) => {
        await events.append(id, {
          kind: 'ConversationErrorEvent',
          source: 'environment',
          code: 'NodeLost',
          detail: 'The node running this conversation stopped. Send a message or run it again to continue.',
        });
        await conversations.setStatus(id, 'error');
      },
    },
  });
  // The agent loop running here writes as the owner: its appends need this node's lease, so a node
  // that was stalled (or cut off) while another took the conversation over writes nothing more.
  // A user's message is not the owner's: it is appended whoever holds the lease.
  p.store.fenceWith(
    (id, drafts) => (runtime.isRunning(id) && !drafts.every(isUserMessage) ? p.leases.nodeId : null),
    (err) => node.leaseLost(err.conversationId),
  );
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
  // the API calls these of the runtime directly (confirmation, condense, ask): they go to the holder too
  const routedRuntime = new Proxy(runtime, {
    get(target, prop) {
      if (prop === 'confirm' || prop === 'condense' || prop === 'ask') return (...args: unknown[]) => node.runtime(prop, args);
      const v = Reflect.get(target, prop, target) as unknown;
      return typeof v === 'function' ? v.bind(target) : v;
    },
  });
  return { service: routed, runtime: routedRuntime, close: () => node.close() };
}
