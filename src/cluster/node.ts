/**
 * One node of a cluster: routes each request that drives a conversation's agent loop to the node
 * holding its lease, keeps this node's leases alive, and takes over the conversations of nodes
 * that died.
 *
 * Routing: `run`, `pause`, `interrupt`, a message with `run`, a create that joins an existing
 * conversation and `delete` go to the lease holder as a NATS request on
 * `<prefix>.node.<node>`; the holder runs the same operation locally and answers with its result
 * or error. With no holder, the receiving node takes the lease when the operation may start the
 * loop, and runs it. The lease is kept while the loop runs or the workspace is being prepared
 * (a preparation ends by starting the loop when one was requested), and released after.
 *
 * Fail-over: every LEASE_TTL_MS / 2 each node looks for conversations shown `running` without a
 * live lease; the node that takes such a lease applies the crash-recovery rule (an error event,
 * status `error`) and releases it. A node starting up voids the leases left under its name.
 */
import type { NatsConnection } from '@nats-io/transport-node';
import type { Logger } from 'pino';
import { errorFromWire, errorToWire, UnavailableError, type WireError } from '../errors.js';
import type { Leases } from './leases.js';

/** A message sent to a conversation, as the service takes it. */
interface Message {
  run?: boolean;
}

/** The operations of the conversation service that the cluster routes, run on this node. */
interface LocalOps<NewReq extends { conversation_id?: string | null }, Msg extends Message, Created extends { conversation_id: string }> {
  createConversation(req: NewReq): Promise<Created>;
  sendMessage(id: string, msg: Msg): Promise<{ success: true }>;
  run(id: string): Promise<{ success: true }>;
  pause(id: string): Promise<{ success: true }>;
  interrupt(id: string): Promise<{ success: true }>;
  deleteConversation(id: string): Promise<{ success: true }>;
}

/** What the node needs of the rest of the core. */
interface NodeHooks {
  /** Whether this node's runtime runs the conversation's loop now. */
  isRunning(id: string): boolean;
  /** A message was appended on another node: this node's loop takes it at its next step. */
  notifyMessage(id: string): void;
  /** Stop this node's loop (its lease was lost). */
  stopLocal(id: string): Promise<void>;
  /** Re-read the conversation from the store (another node may have changed it); null when it is gone. */
  refresh(id: string): Promise<{ status: string } | null>;
  /** Its workspace preparation phase (undefined: none). */
  setupPhase(id: string): Promise<string | undefined>;
  /** Resume the preparations a stop cut short, those `take` accepts. */
  resumePreparations(take: (id: string) => Promise<boolean>): Promise<void>;
  /** The crash-recovery rule: an error event, status error. */
  recover(id: string): Promise<void>;
  /** Runs an operation of this node's agent runtime (its first argument is the conversation id). */
  runtimeOp(op: RuntimeOp, args: unknown[]): Promise<unknown>;
}

type ServiceOp = 'createConversation' | 'sendMessage' | 'run' | 'pause' | 'interrupt' | 'deleteConversation';
/** Operations of the agent runtime that the API calls directly. */
type RuntimeOp = 'confirm' | 'condense' | 'ask';
type RoutedOp = ServiceOp | RuntimeOp;
const RUNTIME_OPS = new Set<string>(['confirm', 'condense', 'ask']);

interface Reply {
  ok?: unknown;
  /** The owner's error by its kind (ERROR_KINDS): rebuilt here as the same kind, so every door answers its status. */
  error?: WireError;
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** A node id as one NATS subject token. */
const token = (nodeId: string) => nodeId.replace(/[^A-Za-z0-9_-]/g, '_');

interface ClusterNodeDeps<N, M, C> {
  nc: NatsConnection;
  prefix: string;
  leases: Leases;
  local: LocalOps<N & { conversation_id?: string | null }, M & Message, C & { conversation_id: string }>;
  hooks: NodeHooks;
  log: Logger;
  /**
   * How long a routed request waits for the owner's answer before it answers 503 (default: the
   * lease TTL, at least 10 s; `condense` and `ask`, which call the LLM, wait 2 minutes).
   */
  requestTimeoutMs?: number;
}

export class ClusterNode<N extends { conversation_id?: string | null }, M extends Message, C extends { conversation_id: string }> implements LocalOps<N, M, C> {
  /** Conversations whose lease this node holds. */
  private held = new Set<string>();
  /** Held conversations whose loop had stopped at the last renewal: released at the next one. */
  private idle = new Set<string>();
  private timers: NodeJS.Timeout[] = [];
  private closed = false;
  private readonly nodeId: string;

  constructor(private readonly d: ClusterNodeDeps<N, M, C>) {
    this.nodeId = d.leases.nodeId;
  }

  async start(): Promise<void> {
    await this.d.leases.releaseAll();
    this.d.nc.subscribe(`${this.d.prefix}.node.${token(this.nodeId)}`, {
      callback: (err, msg) => {
        if (err) return;
        const { op, args } = JSON.parse(decoder.decode(msg.data)) as { op: RoutedOp; args: unknown[] };
        this.serve(op, args).then(
          (ok) => msg.respond(encoder.encode(JSON.stringify({ ok: ok ?? null } satisfies Reply))),
          (e: unknown) => msg.respond(encoder.encode(JSON.stringify({ error: errorToWire(e) } satisfies Reply))),
        );
      },
    });
    this.d.nc.subscribe(`${this.d.prefix}.msg`, {
      callback: (err, msg) => {
        if (err) return;
        const id = decoder.decode(msg.data);
        if (this.d.hooks.isRunning(id)) this.d.hooks.notifyMessage(id);
      },
    });
    const every = (ms: number, fn: () => Promise<void>) => {
      const t = setInterval(() => void fn().catch((err) => this.d.log.warn({ err: String(err) }, 'cluster lease upkeep failed; next round tries again')), ms);
      t.unref();
      this.timers.push(t);
    };
    every(Math.max(200, Math.floor(this.d.leases.ttlMs / 3)), () => this.renew());
    every(Math.max(200, Math.floor(this.d.leases.ttlMs / 2)), () => this.takeOver());
    await this.takeOver();
  }

  /** The node holding the conversation's lease (null: none), for GET /api/conversations/{id}. */
  owner(id: string): Promise<string | null> {
    return this.d.leases.owner(id);
  }

  // ---- the routed operations ----------------------------------------------------------------

  async createConversation(req: N): Promise<C> {
    if (req.conversation_id && (await this.d.hooks.refresh(req.conversation_id)))
      return this.route(req.conversation_id, 'createConversation', [req], true) as Promise<C>;
    const res = await this.d.local.createConversation(req);
    // nobody else knows the id yet: the lease covers the preparation and the run it may start
    await this.hold(res.conversation_id);
    return res;
  }

  /**
   * A message that does not ask for a run is appended here (the store is shared) and the node
   * running the loop, if any, is told on `<prefix>.msg` to take it at its next step: no lease
   * lookup on the hot path. One that asks for a run goes to the lease holder.
   */
  async sendMessage(id: string, msg: M): Promise<{ success: true }> {
    if (msg.run) return this.route(id, 'sendMessage', [id, msg], true) as Promise<{ success: true }>;
    const out = await this.d.local.sendMessage(id, msg);
    try {
      this.d.nc.publish(`${this.d.prefix}.msg`, encoder.encode(id));
    } catch {
      // NATS down: the loop reads the message from the store at its next step
    }
    return out;
  }
  run(id: string): Promise<{ success: true }> {
    return this.route(id, 'run', [id], true) as Promise<{ success: true }>;
  }
  pause(id: string): Promise<{ success: true }> {
    return this.route(id, 'pause', [id], false) as Promise<{ success: true }>;
  }
  interrupt(id: string): Promise<{ success: true }> {
    return this.route(id, 'interrupt', [id], false) as Promise<{ success: true }>;
  }
  deleteConversation(id: string): Promise<{ success: true }> {
    return this.route(id, 'deleteConversation', [id], false) as Promise<{ success: true }>;
  }

  /**
   * `confirm`, `condense` and `ask` of the agent runtime, at the lease holder (or here). Accepting a
   * confirmation runs the waiting actions: it takes the lease like `run`.
   */
  runtime(op: RuntimeOp, args: unknown[]): Promise<unknown> {
    return this.route(args[0] as string, op, args, op === 'confirm' && args[1] === true);
  }

  /** Preparations a stop cut short are resumed by whichever node takes their lease first. */
  resumePreparations(): Promise<void> {
    return this.d.hooks.resumePreparations((id) => this.hold(id));
  }

  /** Sends the operation to the lease holder, or runs it here (taking the lease first when it may start the loop). */
  private async route(id: string, op: RoutedOp, args: unknown[], startsLoop: boolean): Promise<unknown> {
    for (let attempt = 0; attempt < 3; attempt++) {
      const owner = await this.unavailableOnError(this.d.leases.owner(id));
      if (owner && owner !== this.nodeId) {
        const reply = await this.ask(owner, op, args);
        if (reply !== undefined) return reply;
        // the owner does not answer: it died (its lease expires) or NATS is down
        if (op === 'sendMessage') {
          // the message is kept (committed here); the loop is the owner's, or after a takeover, anyone's
          return this.d.local.sendMessage(id, { ...(args[1] as M), run: false });
        }
        throw new UnavailableError(
          `the node running this conversation (${owner}) does not answer; try again (its lease expires within ${this.d.leases.ttlMs} ms)`,
        );
      }
      if (startsLoop && !(await this.hold(id))) continue; // another node took it meanwhile: ask it
      return this.serve(op, args, true);
    }
    throw new UnavailableError('the conversation changed owner several times; try again');
  }

  /**
   * Runs a routed operation here (this node holds the lease, or nobody does). The local operation
   * reads the conversation from the store first (another node may have changed it).
   */
  private async serve(op: RoutedOp, args: unknown[], held = false): Promise<unknown> {
    const local = this.d.local as unknown as Record<ServiceOp, (...a: unknown[]) => Promise<unknown>>;
    const id = op === 'createConversation' ? (args[0] as N).conversation_id! : (args[0] as string);
    const startsLoop = op === 'run' || op === 'createConversation' || (op === 'sendMessage' && (args[1] as M).run) || (op === 'confirm' && args[1] === true);
    if (!held && startsLoop) await this.hold(id);
    const out = RUNTIME_OPS.has(op) ? await this.d.hooks.runtimeOp(op as RuntimeOp, args) : await local[op as ServiceOp]!.apply(this.d.local, args);
    if (op === 'deleteConversation') await this.drop(id);
    return out;
  }

  /** Asks `owner` to run the operation; undefined when it does not answer. */
  private async ask(owner: string, op: RoutedOp, args: unknown[]): Promise<unknown> {
    let reply: Reply;
    try {
      const timeout = op === 'condense' || op === 'ask' ? 120_000 : (this.d.requestTimeoutMs ?? Math.max(10_000, this.d.leases.ttlMs));
      const msg = await this.d.nc.request(`${this.d.prefix}.node.${token(owner)}`, encoder.encode(JSON.stringify({ op, args })), { timeout });
      reply = JSON.parse(decoder.decode(msg.data)) as Reply;
    } catch {
      return undefined;
    }
    if (reply.error) throw errorFromWire(reply.error);
    return reply.ok;
  }

  private async unavailableOnError<T>(p: Promise<T>): Promise<T> {
    try {
      return await p;
    } catch (err) {
      throw err instanceof UnavailableError ? err : new UnavailableError(`PostgreSQL unavailable: ${(err as Error)?.message ?? err}`);
    }
  }

  // ---- leases -------------------------------------------------------------------------------

  /** Takes (or keeps) the conversation's lease; false when another node holds it. */
  private async hold(id: string): Promise<boolean> {
    if (!(await this.unavailableOnError(this.d.leases.acquire(id)))) return false;
    this.held.add(id);
    return true;
  }

  private async drop(id: string): Promise<void> {
    this.held.delete(id);
    this.idle.delete(id);
    await this.d.leases.release(id).catch(() => {});
  }

  /** Renews the leases of loops running (or preparing) here; releases the others. */
  private async renew(): Promise<void> {
    if (this.closed) return;
    const lost = await this.d.leases.renew([...this.held]);
    for (const id of lost) this.leaseLost(id);
    for (const id of [...this.held]) {
      if (this.d.hooks.isRunning(id)) {
        this.idle.delete(id);
        continue;
      }
      const phase = await this.d.hooks.setupPhase(id);
      if (phase !== undefined && phase !== 'ready' && phase !== 'error') continue; // still preparing
      // released one renewal after the loop stopped: a run that ends as a message arrives is
      // followed by another (runtime.ts afterRun), which still needs the lease
      if (this.idle.has(id)) await this.drop(id);
      else this.idle.add(id);
    }
  }

  /**
   * Another node holds the conversation's lease now (this node could not renew it in time: it was
   * stalled or cut off, and the other node applied the crash-recovery rule). The loop here stops;
   * whatever it would still write is refused by the store (the fence, src/cluster/index.ts).
   */
  leaseLost(id: string): void {
    this.held.delete(id);
    this.idle.delete(id);
    if (!this.d.hooks.isRunning(id)) return;
    this.d.log.warn({ conversation_id: id }, 'lease lost to another node: stopping the agent loop here');
    void this.d.hooks.stopLocal(id).catch(() => {});
  }

  /** Conversations left running by a node that died: the first node to take the lease recovers each. */
  private async takeOver(): Promise<void> {
    if (this.closed) return;
    for (const id of await this.d.leases.orphans()) {
      if (!(await this.d.leases.acquire(id))) continue;
      if (this.held.has(id) || this.d.hooks.isRunning(id)) {
        // this node's own work, whose lease lapsed (a renewal came late): it is renewed, and kept
        this.held.add(id);
        continue;
      }
      try {
        const conv = await this.d.hooks.refresh(id);
        if (conv?.status !== 'running') continue;
        this.d.log.warn({ conversation_id: id }, 'taking over a conversation whose node stopped renewing its lease');
        await this.d.hooks.recover(id);
      } finally {
        await this.d.leases.release(id).catch(() => {});
      }
    }
  }

  /** Stops the upkeep and gives up this node's leases (its loops have been stopped). */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    for (const t of this.timers) clearInterval(t);
    await this.d.leases.releaseAll().catch(() => {});
  }
}
