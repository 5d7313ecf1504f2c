/**
 * One node of a cluster: routes each request that drives a conversation's agent loop to the node
 * holding its lease, keeps this node's leases alive, and takes over the conversations of nodes
 * that died.
 *
 * Routing: `run`, `pause`, `interrupt`, a message with `run`, a create that joins an existing
 * conversation, `delete`, `confirm`, `condense` and `ask` go to the lease holder as a NATS request on
 * `<prefix>.node.<node>`; the holder runs the same operation locally and answers with its result
 * or error. `routedOps` below is the one list of them, typed by the service's own signatures. With
 * no holder, the receiving node takes the lease when the operation may start the loop, and runs it.
 * The lease is kept while the loop runs or the workspace is being prepared (a preparation ends by
 * starting the loop when one was requested), and released after.
 *
 * Fail-over: every LEASE_TTL_MS / 2 each node looks for conversations shown `running` without a
 * live lease; the node that takes such a lease applies the crash-recovery rule (an error event,
 * status `error`) and releases it. A node starting up voids the leases left under its name.
 */
import type { NatsConnection } from '@nats-io/transport-node';
import type { Logger } from 'pino';
import type { ConversationOps } from '../conversation/service.js';
import { errorFromWire, errorToWire, UnavailableError, type WireError } from '../errors.js';
import type { Leases } from './leases.js';

/**
 * The operations routed to a conversation's lease holder: every operation of the service but
 * resuming preparations (each node resumes those whose lease it takes).
 */
type Ops = Omit<ConversationOps, 'resumePreparations'>;
type OpName = keyof Ops;
/** Each operation as a function of its own parameters (what lets `route` call the one it names with its arguments). */
type OpFns = { [K in OpName]: (...args: Parameters<Ops[K]>) => ReturnType<Ops[K]> };
type Result<K extends OpName> = Awaited<ReturnType<Ops[K]>>;

/** How an operation is routed (its line in `routedOps`); sent with it to the owner. */
interface Route {
  /** The conversation it drives. */
  conversation: string;
  /** It may start the conversation's loop: the node that runs it takes the lease first. */
  startsLoop?: boolean;
  /** It deletes the conversation: the lease is released after it. */
  ends?: boolean;
  /** It calls the LLM: the owner may take 2 minutes to answer. */
  slow?: boolean;
}

/** A live conversation as the node keeps its lease on it (`conv.lease`, src/conversation/live.ts). */
interface Leased {
  readonly id: string;
  /** This node holds the lease; `idle`: the loop had stopped at the last renewal (the lease goes at the next one). */
  lease: { idle: boolean } | null;
}

/** What the node needs of the rest of the core. */
interface NodeHooks {
  /** The live conversation, if it is loaded here. */
  loaded(id: string): Leased | undefined;
  /** The live conversation, loaded when it is not; null when it does not exist. */
  load(id: string): Promise<Leased | null>;
  /** The conversations loaded here that hold a lease. */
  leased(): Iterable<Leased>;
  /** Whether this node's runtime runs the conversation's loop now. */
  isRunning(id: string): boolean;
  /** A message was appended on another node: this node's loop takes it at its next step. */
  messageArrived(id: string): void;
  /** Stop this node's loop (its lease was lost). */
  stopLocal(id: string): Promise<void>;
  /** Re-read the conversation from the store (another node may have changed it); null when it is gone. */
  refresh(id: string): Promise<{ status: string } | null>;
  /** Its workspace preparation phase (undefined: none). */
  setupPhase(id: string): Promise<string | undefined>;
  /** The crash-recovery rule: an error event, status error. */
  recover(id: string): Promise<void>;
}

/** A routed operation on the wire: its name, its arguments, how it is routed. Written by `ask`, read by the owner's subscription. */
type Request = { [K in OpName]: { op: K; args: Parameters<Ops[K]>; route: Route } }[OpName];

/** The owner's answer: the result, or its error by its kind (ERROR_KINDS), rebuilt here as the same kind so every door answers its status. */
type Reply<K extends OpName> = { ok: Result<K> } | { error: WireError };

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** A node id as one NATS subject token. */
const token = (nodeId: string) => nodeId.replace(/[^A-Za-z0-9_-]/g, '_');

/** The lease holder did not answer a routed operation (it died, its lease expires, or NATS is down): 503. */
class OwnerSilentError extends UnavailableError {
  constructor(owner: string, ttlMs: number) {
    super(`the node running this conversation (${owner}) does not answer; try again (its lease expires within ${ttlMs} ms)`);
  }
}

/** `orElse` when the conversation's owner did not answer (`err`); any other error is thrown again. */
function ifOwnerSilent<T>(err: unknown, orElse: () => Promise<T>): Promise<T> {
  if (err instanceof OwnerSilentError) return orElse();
  throw err;
}

interface ClusterNodeDeps {
  nc: NatsConnection;
  prefix: string;
  leases: Leases;
  /** This node's service: what a routed operation runs here. */
  local: OpFns;
  hooks: NodeHooks;
  log: Logger;
  /**
   * How long a routed request waits for the owner's answer before it answers 503 (default: the
   * lease TTL, at least 10 s; `condense` and `ask`, which call the LLM, wait 2 minutes).
   */
  requestTimeoutMs?: number;
}

/**
 * The service's operations through the node: the one list of them, each line saying which
 * conversation it drives and how it is routed. A message that does not ask for a run is appended
 * here (the store is shared) and the loop's node told on `<prefix>.msg`; a create with a new id runs
 * here and takes the lease (nobody else knows the id yet).
 */
export function routedOps(n: ClusterNode, local: Pick<ConversationOps, 'resumePreparations'>): ConversationOps {
  return {
    createConversation: async (req) =>
      req.conversation_id && (await n.exists(req.conversation_id))
        ? n.route('createConversation', { conversation: req.conversation_id, startsLoop: true }, req)
        : n.createHere(req),
    sendMessage: (id, msg) =>
      msg.run
        ? // an owner that does not answer: the message is kept (committed here), its run is the owner's, or after a takeover anyone's
          n
            .route('sendMessage', { conversation: id, startsLoop: true }, id, msg)
            .catch((err) => ifOwnerSilent(err, () => n.appendHere(id, { ...msg, run: false })))
        : n.appendHere(id, msg),
    run: (id) => n.route('run', { conversation: id, startsLoop: true }, id),
    pause: (id) => n.route('pause', { conversation: id }, id),
    interrupt: (id) => n.route('interrupt', { conversation: id }, id),
    deleteConversation: (id) => n.route('deleteConversation', { conversation: id, ends: true }, id),
    // accepting runs the waiting actions: it takes the lease like run
    confirm: (id, accept, reason) => n.route('confirm', { conversation: id, startsLoop: accept }, id, accept, reason),
    condense: (id) => n.route('condense', { conversation: id, slow: true }, id),
    ask: (id, question) => n.route('ask', { conversation: id, slow: true }, id, question),
    // the agent's settings change where its loop runs (the run under way reads them at its next step)
    updateAgentSettings: (id, patch) => n.route('updateAgentSettings', { conversation: id }, id, patch),
    // a goal loop starts runs: it takes the lease like run, and runs where the loop runs
    startGoal: (id, objective, max) => n.route('startGoal', { conversation: id, startsLoop: true }, id, objective, max),
    resumeGoal: (id) => n.route('resumeGoal', { conversation: id, startsLoop: true }, id),
    stopGoal: (id) => n.route('stopGoal', { conversation: id }, id),
    // preparations a stop cut short are resumed by whichever node takes their lease first
    resumePreparations: () => local.resumePreparations((id) => n.hold(id)),
  };
}

export class ClusterNode {
  private timers: NodeJS.Timeout[] = [];
  private closed = false;
  private readonly nodeId: string;

  constructor(private readonly d: ClusterNodeDeps) {
    this.nodeId = d.leases.nodeId;
  }

  async start(): Promise<void> {
    await this.d.leases.releaseAll();
    this.d.nc.subscribe(`${this.d.prefix}.node.${token(this.nodeId)}`, {
      callback: (err, msg) => {
        if (err) return;
        // written by `ask` on another node of this cluster: typed by the same table
        const req: Request = JSON.parse(decoder.decode(msg.data));
        this.serveRequest(req).then(
          (ok) => msg.respond(encoder.encode(JSON.stringify({ ok: ok ?? null }))),
          (e: unknown) => msg.respond(encoder.encode(JSON.stringify({ error: errorToWire(e) }))),
        );
      },
    });
    this.d.nc.subscribe(`${this.d.prefix}.msg`, {
      callback: (err, msg) => {
        if (err) return;
        const id = decoder.decode(msg.data);
        if (this.d.hooks.isRunning(id)) this.d.hooks.messageArrived(id);
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

  /** Whether the conversation exists (read from the store: another node may have created it). */
  async exists(id: string): Promise<boolean> {
    return (await this.d.hooks.refresh(id)) !== null;
  }

  /** A create with a new id: here, and the lease covers the preparation and the run it may start. */
  async createHere(req: Parameters<Ops['createConversation']>[0]): Promise<Result<'createConversation'>> {
    const res = await this.d.local.createConversation(req);
    await this.hold(res.conversation_id);
    return res;
  }

  /**
   * A message that does not ask for a run is appended here (the store is shared) and the node
   * running the loop, if any, is told on `<prefix>.msg` to take it at its next step: no lease
   * lookup on the hot path.
   */
  async appendHere(id: string, msg: Parameters<Ops['sendMessage']>[1]): Promise<Result<'sendMessage'>> {
    const out = await this.d.local.sendMessage(id, msg);
    try {
      this.d.nc.publish(`${this.d.prefix}.msg`, encoder.encode(id));
    } catch {
      // NATS down: the loop reads the message from the store at its next step
    }
    return out;
  }

  /** Sends the operation to the lease holder, or runs it here (taking the lease first when it may start the loop). */
  async route<K extends OpName>(op: K, how: Route, ...args: Parameters<Ops[K]>): Promise<Result<K>> {
    const id = how.conversation;
    for (let attempt = 0; attempt < 3; attempt++) {
      const owner = await this.unavailableOnError(this.d.leases.owner(id));
      if (owner && owner !== this.nodeId) {
        const reply = await this.ask(owner, op, how, args);
        if (reply) return reply.ok;
        // the owner does not answer: it died (its lease expires) or NATS is down
        throw new OwnerSilentError(owner, this.d.leases.ttlMs);
      }
      if (how.startsLoop && !(await this.hold(id))) continue; // another node took it meanwhile: ask it
      return this.serve(op, how, args, true);
    }
    throw new UnavailableError('the conversation changed owner several times; try again');
  }

  /** A request another node routed here. */
  private serveRequest(req: Request): Promise<unknown> {
    return this.serve(req.op, req.route, req.args);
  }

  /**
   * Runs a routed operation here (this node holds the lease, or nobody does). The local operation
   * reads the conversation from the store first (another node may have changed it).
   */
  private async serve<K extends OpName>(op: K, how: Route, args: Parameters<Ops[K]>, held = false): Promise<Result<K>> {
    if (!held && how.startsLoop) await this.hold(how.conversation);
    const out = await this.d.local[op](...args);
    if (how.ends) await this.drop(how.conversation);
    return out;
  }

  /** Asks `owner` to run the operation; undefined when it does not answer. */
  private async ask<K extends OpName>(owner: string, op: K, how: Route, args: Parameters<Ops[K]>): Promise<{ ok: Result<K> } | undefined> {
    let reply: Reply<K>;
    try {
      const timeout = how.slow ? 120_000 : (this.d.requestTimeoutMs ?? Math.max(10_000, this.d.leases.ttlMs));
      const msg = await this.d.nc.request(`${this.d.prefix}.node.${token(owner)}`, encoder.encode(JSON.stringify({ op, args, route: how })), { timeout });
      // the owner's answer to this request: typed by the same table
      reply = JSON.parse(decoder.decode(msg.data));
    } catch {
      return undefined;
    }
    if ('error' in reply) throw errorFromWire(reply.error);
    return reply;
  }

  private async unavailableOnError<T>(p: Promise<T>): Promise<T> {
    try {
      return await p;
    } catch (err) {
      throw err instanceof UnavailableError ? err : new UnavailableError(`PostgreSQL unavailable: ${err instanceof Error ? err.message : String(err)}`);
    }
  }

  // ---- leases -------------------------------------------------------------------------------

  /** Takes (or keeps) the conversation's lease, kept on its live object (`conv.lease`); false when another node holds it. */
  async hold(id: string): Promise<boolean> {
    if (!(await this.unavailableOnError(this.d.leases.acquire(id)))) return false;
    const conv = this.d.hooks.loaded(id) ?? (await this.d.hooks.load(id));
    if (conv) conv.lease ??= { idle: false };
    // (no such conversation: the operation answers 404; nothing holds the lease)
    else await this.d.leases.release(id).catch(() => {});
    return true;
  }

  private async drop(id: string): Promise<void> {
    const conv = this.d.hooks.loaded(id);
    if (conv) conv.lease = null;
    await this.d.leases.release(id).catch(() => {});
  }

  /** Renews the leases of loops running (or preparing) here; releases the others. */
  private async renew(): Promise<void> {
    if (this.closed) return;
    const held = [...this.d.hooks.leased()];
    const lost = await this.d.leases.renew(held.map((c) => c.id));
    for (const id of lost) this.leaseLost(id);
    for (const conv of held) {
      const lease = conv.lease;
      if (!lease) continue; // lost, or dropped meanwhile
      if (this.d.hooks.isRunning(conv.id)) {
        lease.idle = false;
        continue;
      }
      const phase = await this.d.hooks.setupPhase(conv.id);
      if (phase !== undefined && phase !== 'ready' && phase !== 'error') continue; // still preparing
      // released one renewal after the loop stopped: a run that ends as a message arrives is
      // followed by another (runtime.ts afterRun), which still needs the lease
      if (lease.idle) await this.drop(conv.id);
      else lease.idle = true;
    }
  }

  /**
   * Another node holds the conversation's lease now (this node could not renew it in time: it was
   * stalled or cut off, and the other node applied the crash-recovery rule). The loop here stops;
   * whatever it would still write is refused by the store (the fence, src/cluster/index.ts).
   */
  leaseLost(id: string): void {
    const conv = this.d.hooks.loaded(id);
    if (conv) conv.lease = null;
    if (!this.d.hooks.isRunning(id)) return;
    this.d.log.warn({ conversation_id: id }, 'lease lost to another node: stopping the agent loop here');
    void this.d.hooks.stopLocal(id).catch(() => {});
  }

  /** Conversations left running by a node that died: the first node to take the lease recovers each. */
  private async takeOver(): Promise<void> {
    if (this.closed) return;
    for (const id of await this.d.leases.orphans()) {
      if (!(await this.d.leases.acquire(id))) continue;
      const mine = this.d.hooks.loaded(id);
      if (mine && (mine.lease || this.d.hooks.isRunning(id))) {
        // this node's own work, whose lease lapsed (a renewal came late): it is renewed, and kept
        mine.lease ??= { idle: false };
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
