/**
 * Cluster mode in the composition root: the node (leases, routing, takeover) in front of this
 * process's conversation service. The API calls the operations of `ConversationOps`; in cluster mode
 * they are the node's routed operations (`routedOps`), each of which goes through the node first.
 */
import type { Logger } from 'pino';
import type { Conversations } from '../conversation/conversations.js';
import type { AgentRuntime } from '../agent/runtime.js';
import type { ConversationOps, ConversationService } from '../conversation/service.js';
import type { EventLog } from '../events/log.js';
import type { PostgresStore } from '../store/postgres.js';
import type { ClusterBus } from './bus.js';
import type { Leases } from './leases.js';
import { ClusterNode, routedOps } from './node.js';
import { setupPhaseOf } from '../conversation/setup-phase.js';

interface ClusterNodeParts {
  service: ConversationService;
  conversations: Conversations;
  events: EventLog;
  runtime: Pick<AgentRuntime, 'messageArrived'>;
  leases: Leases;
  bus: ClusterBus;
  store: PostgresStore;
  prefix: string;
  log: Logger;
}

const isUserMessage = (d: { kind: string; source: string }) => d.kind === 'MessageEvent' && d.source === 'user';

export async function startClusterNode(p: ClusterNodeParts): Promise<{ service: ConversationOps; close(): Promise<void> }> {
  const { service, conversations, events, runtime } = p;
  const node = new ClusterNode({
    nc: p.bus.nc,
    prefix: p.prefix,
    leases: p.leases,
    local: service,
    log: p.log,
    hooks: {
      loaded: (id) => conversations.loaded(id),
      load: (id) => conversations.load(id),
      leased: () => [...conversations.each()].filter((c) => c.lease),
      isRunning: (id) => conversations.isRunning(id),
      messageArrived: (id) => {
        const conv = conversations.loaded(id);
        if (conv) runtime.messageArrived(conv);
      },
      // stops the loop and the processes it started; what it would append is refused (the fence)
      stopLocal: async (id) => conversations.loaded(id)?.close('interrupted'),
      refresh: async (id) => {
        const conv = await conversations.refresh(id);
        return conv ? { status: conv.status } : null;
      },
      setupPhase: async (id) => {
        const conv = await conversations.load(id);
        return conv ? setupPhaseOf(conv.record.data) : undefined;
      },
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
    (id, drafts) => (conversations.isRunning(id) && !drafts.every(isUserMessage) ? p.leases.nodeId : null),
    (err) => node.leaseLost(err.conversationId),
  );
  await node.start();
  return { service: routedOps(node, service), close: () => node.close() };
}
