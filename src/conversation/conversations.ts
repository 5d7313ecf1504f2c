/**
 * Conversations and their status machine: the in-memory state of each conversation touched since
 * start (loaded on first use), its stored record, the status the daemon acts on and the status
 * clients are shown, and the conversation info every read returns.
 */
import crypto from 'node:crypto';
import type { Logger } from 'pino';
import * as z from 'zod';
import { NotFoundError, RequestValidationError } from '../errors.js';
import type { EventLog } from '../events/log.js';
import { GoalState, stateUpdate, stateUpdateValue, type EventOf } from '../events/schema.js';
import type { EncodedEvent, EventDraft } from '../events/types.js';
import { isoTime } from '../iso-time.js';
import type { Redactor } from '../secrets/redact.js';
import type { Settings } from '../secrets/settings.js';
import type { ConversationRecord, ConversationStore } from '../store/types.js';
import { redactMcpConfig, fullMcpConfig, type FullMcpConfig } from '../secrets/mcp-config.js';
import { stillPreparing } from './setup-phase.js';
import { parseRecord, parseStoredKey, storedObject, type ParsedRecord, type RecordData, type RecordKey } from './record-data.js';
import { agentServerInfo, type AgentServerContext } from './agent-server-info.js';
import { appServerInfo, RUNTIME_STATUS, untitled, type AppServerContext } from './app-server-info.js';
import { EXECUTION_STATUSES, type ExecutionStatus } from '../events/schema.js';
import type { Sandbox } from '../sandbox/index.js';
import { type CloseReason, diskStopDetail, LiveConversation, type LiveParts } from './live.js';

export { EXECUTION_STATUSES, LiveConversation };

/** What every read of a conversation returns (REST, tRPC, the socket's first frame). */
export const ConversationInfo = z
  .object({
    conversation_id: z.string(),
    id: z.string(),
    title: z.string().nullable(),
    created_at: z.string(),
    updated_at: z.string(),
    execution_status: z.enum(EXECUTION_STATUSES),
    conversation_status: z.string(),
    status: z.string(),
    selected_repository: z.string().nullable(),
    selected_branch: z.string().nullable(),
    git_provider: z.string().nullable(),
    last_seq: z.number().int(),
    /** Cluster mode: the node running the conversation's agent loop (null: none). */
    node_id: z.string().nullable().optional(),
    setup: z.unknown().optional(),
    mcp_config: z.unknown().optional(),
    // OpenHands agent-server fields (src/conversation/agent-server.ts)
    agent: z
      .object({
        kind: z.string(),
        llm: z
          .object({
            model: z.string().nullable(),
            base_url: z.string().nullable(),
            api_key: z.string().nullable().meta({ description: '"**********" when a key is set; never the key' }),
          })
          .loose(),
      })
      .loose()
      .optional(),
    workspace: z.object({ kind: z.literal('LocalWorkspace'), working_dir: z.string().nullable() }).optional(),
    confirmation_policy: z.object({ kind: z.string() }).loose().optional(),
    security_analyzer: z.object({ kind: z.string() }).loose().nullable().optional(),
    persistence_dir: z.string().nullable().optional(),
    max_iterations: z.number().int().nullable().optional(),
    stuck_detection: z.boolean().optional(),
    stats: z.object({ usage_to_metrics: z.record(z.string(), z.unknown()) }).optional(),
    tags: z.record(z.string(), z.string()).optional(),
    /** Its `/goal` loop's last state (src/conversation/goals.ts), or null. */
    goal: GoalState.nullable().optional(),
    forked_from_conversation_id: z.string().nullable().optional(),
    forked_from_event_id: z.string().nullable().optional(),
    /** The agent profile it was started from. */
    launched_profile: z.object({ profile_id: z.string(), revision: z.number() }).nullable().optional(),
    // OpenHands' app-server fields (src/conversation/app-server.ts)
    last_updated_at: z.string().optional(),
    runtime_status: z.string().optional(),
    url: z.string().optional(),
    session_api_key: z.string().nullable().optional().meta({ description: "This conversation's own key: it opens this conversation's routes only" }),
    conversation_version: z.literal('V1').optional(),
    sub_conversation_ids: z.array(z.string()).optional(),
    pr_number: z.array(z.number()).optional(),
    trigger: z.string().nullable().optional(),
  })
  .meta({ id: 'ConversationInfo', title: 'ConversationInfo' });
export type ConversationInfo = z.output<typeof ConversationInfo>;

/** What a read of a conversation shows: a live one, or a record listed without loading it. */
type Shown = Pick<LiveConversation, 'record' | 'status' | 'shown'>;

/**
 * Memory of loaded conversations (bounded, docs/security.md): at most this many stay loaded, and their records at
 * most this many bytes; beyond either, idle ones go, least recently used first (a later read loads
 * them again). The fields that may be large and are read rarely (the conversation's instructions,
 * its sealed MCP config, the image URLs it was created with) are not kept in memory above LARGE_FIELD_BYTES: `field()` reads them from
 * the store when needed.
 */
const MAX_RESIDENT = 2000;
const RESIDENT_BYTES = 32 * 1024 * 1024;
interface ResidentLimits {
  /** MAX_LOADED_CONVERSATIONS. */
  count?: number;
  bytes?: number;
}
const LARGE_FIELD_BYTES = 16 * 1024;
const LARGE_FIELDS = new Set<RecordKey>(['conversation_instructions', 'mcp_config_sealed', 'image_urls']);
/** Records with a malformed key are reported once per key while this many reports are remembered. */
const MALFORMED_REPORTS = 10_000;

/** Cluster mode (src/cluster/): other nodes share the store; one of them may run a conversation's loop. */
export interface SharedStore {
  /** The node holding the conversation's lease, shown as `node_id`. */
  ownerOf(id: string): Promise<string | null>;
}

/**
 * The registry of live conversations: the one object of each conversation touched since start
 * (live.ts), loaded on first use, and nothing else kept by a conversation's id.
 */
export class Conversations {
  private live = new Map<string, LiveConversation>();
  /** Loads under way: several requests for a conversation read it from the store once. */
  private loading = new Map<string, Promise<LiveConversation | null>>();
  /** The estimated bytes of the loaded records (each object's `bytes`). */
  private residentBytes = 0;
  private malformedReported = new Set<string>();

  constructor(
    private readonly store: ConversationStore,
    private readonly events: EventLog,
    private readonly settings: Settings,
    private readonly redactor: Redactor,
    /** What every live conversation shares (its sandbox, shell, files). */
    private readonly liveParts: LiveParts,
    /** Paths and the server's LLM, for the agent-server fields of the info (agent, workspace, persistence_dir). */
    private readonly agentServer?: AgentServerContext,
    /** Set in cluster mode: a read re-reads the conversation unless its loop runs here. */
    private readonly shared?: SharedStore,
    private readonly limits: ResidentLimits = {},
    /** Where a record's malformed keys are reported (record-data.ts). */
    private readonly log?: Pick<Logger, 'warn'>,
    /** Each conversation's own key, for the app-server fields of the info. */
    private readonly appServer?: AppServerContext,
  ) {}

  /** The store reports each commit here: the record's updated_at and the shown status follow it. */
  committed(conversationId: string, events: EncodedEvent[]): void {
    const live = this.live.get(conversationId);
    const last = events[events.length - 1];
    if (!live || !last) return;
    live.record.updated_at = last.event.timestamp;
    for (const { event: ev } of events) live.shown = stateUpdateValue(ev, 'execution_status') ?? live.shown;
  }

  /** Conversations a crash or a stop left running get a ConversationErrorEvent and the status error. */
  async recoverInterrupted(log: Logger): Promise<void> {
    for (const rec of await this.store.conversationsWithStatus(['running'])) {
      if (!(await this.load(rec.id))) continue;
      log.info({ conversation_id: rec.id }, 'the daemon restarted while this conversation was running');
      try {
        await this.setStatus(rec.id, 'error', [
          ...(await this.unansweredActions(rec.id)).map((a) => ({
            kind: 'AgentErrorEvent' as const,
            source: 'environment' as const,
            tool_name: a.tool_name,
            tool_call_id: a.tool_call_id,
            error: 'The daemon restarted while this tool call ran: its result is unknown (it may have run in part).',
          })),
          {
            kind: 'ConversationErrorEvent',
            source: 'environment',
            code: 'DaemonRestarted',
            detail: 'The daemon restarted while this conversation was running. Send a message or run it again to continue.',
          },
        ]);
      } catch (err) {
        // e.g. a full disk: the daemon starts all the same; a message or a run continues the conversation
        log.warn({ conversation_id: rec.id, err: (err as Error).message }, 'could not record the restart in the conversation');
      }
    }
  }

  /**
   * The tool calls of the last steps that have no result in the log (what ran when the daemon died):
   * a client watching the stream must never see an action without its answer.
   */
  private async unansweredActions(id: string): Promise<{ tool_name: string; tool_call_id: string }[]> {
    const actions = await this.events.query(id, { kind: 'ActionEvent', desc: true, limit: 64 });
    if (actions.length === 0) return [];
    const from = Math.min(...actions.map((a) => a.seq ?? 0)) - 1;
    const answered = new Set<string>();
    for (const e of await this.events.after(id, from)) {
      if ((e.kind === 'ObservationEvent' || e.kind === 'AgentErrorEvent' || e.kind === 'UserRejectObservation') && e.tool_call_id) answered.add(e.tool_call_id);
    }
    return actions
      .filter((a): a is EventOf<'ActionEvent'> => a.kind === 'ActionEvent' && !answered.has(a.tool_call_id))
      .sort((a, b) => (a.seq ?? 0) - (b.seq ?? 0))
      .map((a) => ({ tool_name: a.tool_name, tool_call_id: a.tool_call_id }));
  }

  /** The conversation's live state, loaded on first use. Null when it does not exist. */
  async load(id: string): Promise<LiveConversation | null> {
    const hit = this.live.get(id);
    if (hit && this.shared && !hit.run) return this.refresh(id);
    if (hit) return this.touch(id, hit);
    let p = this.loading.get(id);
    if (!p) {
      p = this.store.getConversation(id).then((record) => {
        this.loading.delete(id);
        if (!record) return null;
        const existing = this.live.get(id);
        if (existing) return existing;
        return this.admit(record);
      });
      this.loading.set(id, p);
    }
    return p;
  }

  /**
   * The conversation as `load` would give it when that needs no store read (loaded here, and not a
   * shared store's record whose loop runs elsewhere); undefined otherwise, and then `require` reads
   * it. The hot path asks this first: an async lookup costs it two promises and two turns.
   */
  current(id: string): LiveConversation | undefined {
    const hit = this.live.get(id);
    if (!hit || (this.shared && !hit.run)) return undefined;
    return this.touch(id, hit);
  }

  async require(id: string): Promise<LiveConversation> {
    const conv = await this.load(id);
    if (!conv) throw new NotFoundError('Conversation not found');
    return conv;
  }

  /** A conversation already loaded (no store read). */
  loaded(id: string): LiveConversation | undefined {
    return this.live.get(id);
  }

  /** Every conversation loaded here. */
  each(): Iterable<LiveConversation> {
    return this.live.values();
  }

  /**
   * A client began watching the conversation (its event socket or subscription opened): a sandbox
   * closed while it sat idle starts again now, in the background, so that the next message's first
   * step, which reads the repository's instructions through it, does not wait for its start. Only
   * when one more fits under SANDBOX_MAX_LIVE without another's being closed; in cluster mode only
   * where its loop runs (the node that runs its next turn is not known before it).
   */
  watched(conv: LiveConversation): void {
    if (conv.gone || (this.shared && !conv.lease)) return;
    conv.sandbox.prewarmIfRoom();
  }

  /** Whether the conversation's loop runs in this process (a run, or a goal loop between its runs). */
  isRunning(id: string): boolean {
    const conv = this.live.get(id);
    return !!(conv?.run || conv?.goal);
  }

  /**
   * The registered object of `conv`'s conversation, before live state is put on it (a run, a
   * preparation, a lease): `conv` again when the registry dropped it meanwhile (it held nothing), or
   * the one a later load registered, so that a conversation never has two.
   */
  claim(conv: LiveConversation): LiveConversation {
    const registered = this.live.get(conv.id);
    if (registered) return registered;
    this.live.set(conv.id, conv);
    this.residentBytes += conv.bytes;
    this.evictIdle();
    return conv;
  }

  /**
   * The sandbox launcher stopped a conversation's processes: to stay under SANDBOX_MAX_LIVE (its
   * `close('evicted')`), over SANDBOX_DISK_MB or the fullest on a full disk (`disk-quota`, `disk-full`),
   * or because its file service broke the protocol (`sandbox-fault`: what comes out of a sandbox is
   * hostile input; that sandbox ends, the conversation is told why, everything else goes on).
   */
  followSandbox(sandbox: Pick<Sandbox, 'onEvict' | 'onDiskQuota' | 'onSandboxFault'>, diskLimitMb: number | null | undefined): void {
    sandbox.onEvict((id) => void this.live.get(id)?.close('evicted'));
    sandbox.onDiskQuota((id, used, why) => {
      const detail = diskStopDetail(why, used, diskLimitMb);
      void this.load(id).then((c) => c?.close(why === 'quota' ? 'disk-quota' : 'disk-full', detail));
    });
    sandbox.onSandboxFault((id, reason) => {
      const detail = `${reason}; the conversation's sandbox was closed (its processes stopped) and starts again on the next use`;
      void this.load(id)
        .then((c) => c?.close('sandbox-fault', detail))
        .catch(() => {});
    });
  }

  /** Closes every loaded conversation (the daemon stops: `shutdown`). */
  async closeAll(reason: CloseReason): Promise<void> {
    await Promise.all([...this.live.values()].map((c) => c.close(reason)));
  }

  /** Conversations whose workspace preparation a stop cut short. */
  unfinishedSetups(): Promise<string[]> {
    return this.store.conversationsWithUnfinishedSetup();
  }

  /** The status of a loaded conversation (undefined when it is not loaded or was deleted). */
  status(id: string): ExecutionStatus | undefined {
    return this.live.get(id)?.status;
  }

  /** Re-reads the conversation from the store (another node may have changed it) unless its loop runs here. */
  async refresh(id: string): Promise<LiveConversation | null> {
    const record = await this.store.getConversation(id);
    const conv = this.live.get(id);
    if (!record) {
      await this.forget(id);
      return null;
    }
    if (!conv) return this.admit(record);
    if (!this.shared || !conv.run) {
      this.keepRecord(conv, record);
      conv.status = record.execution_status as ExecutionStatus;
      conv.shown = undefined;
    }
    return conv;
  }

  /** Another node deleted the conversation: what this node still runs of it ends, and its state here goes. */
  async forget(id: string): Promise<void> {
    const conv = this.live.get(id);
    if (!conv) return;
    this.drop(id);
    await conv.close('deleted').catch((err) => this.log?.warn({ conversation_id: id, err: String(err) }, 'closing a conversation deleted elsewhere failed'));
  }

  /** Stored records, newest first, from a (created_at, id) cursor. */
  async records(limit: number, cursor?: { created_at: string; id: string } | null): Promise<ParsedRecord[]> {
    return (await this.store.listConversations(limit, cursor)).map((r) => this.parsed(r));
  }

  /** Stores a new conversation with its first events, both in one commit; it is live (and idle) from now on. Throws when the id is taken. */
  async create(record: ParsedRecord, first: EventDraft[] = []): Promise<LiveConversation> {
    await this.store.createConversation(
      record,
      first.map((d) => this.events.toStore(d)),
    );
    return this.admit(record);
  }

  async remove(id: string): Promise<void> {
    await this.store.deleteConversation(id);
    this.drop(id);
  }

  /** Sets the status; `along` are events committed with the status event (all or none), before it, and `then` after it. */
  async setStatus(id: string, status: ExecutionStatus, along: EventDraft[] = [], then: EventDraft[] = []): Promise<void> {
    const conv = await this.require(id);
    if (conv.status === status) {
      if (along.length + then.length > 0) await this.events.appendMany(id, [...along, ...then]);
      return;
    }
    const was = conv.status;
    conv.status = status;
    conv.record.execution_status = status;
    // the store sets the stored status in the same commit as the event (store/types.ts
    // executionStatusOf): the log and the status other nodes show never disagree
    try {
      await this.events.appendMany(id, [...along, stateUpdate('execution_status', status), ...then]);
    } catch (err) {
      // not committed: the status the daemon acts on is the one the log holds
      if (conv.status === status) (conv.status = was), (conv.record.execution_status = was);
      throw err;
    }
  }

  /** Merge-patch the conversation's stored data (repository, setup state, ...). */
  async updateData(id: string, patch: Partial<RecordData>): Promise<void> {
    const conv = await this.require(id);
    conv.record.data = { ...conv.record.data, ...patch };
    const kept = conv.storedKeys;
    this.resize(conv);
    this.evictIdle(); // a preparation that ended may make room
    if (!kept) return this.store.updateConversation(id, { data: conv.record.data });
    // fields left in the store are written back with the patch, unless it replaces them
    const full = { ...storedObject((await this.store.getConversation(id))?.data), ...conv.record.data };
    for (const k of Object.keys(patch)) kept.delete(k);
    await this.store.updateConversation(id, { data: full });
  }

  /**
   * A run was asked for while the preparation is under way: the preparation starts it when it ends
   * (takeRunRequest). Kept on the loaded record (written to the store with its next update).
   */
  requestRun(conv: LiveConversation): void {
    conv.record.data.run_requested = true;
  }

  /** Whether a run waits for the preparation (asked for at create or meanwhile); the request is taken (cleared). */
  takeRunRequest(conv: LiveConversation): boolean {
    const requested = conv.record.data.run_requested === true;
    delete conv.record.data.run_requested;
    return requested;
  }

  async setTitle(id: string, title: string): Promise<void> {
    const conv = await this.require(id);
    conv.record.title = title;
    await this.store.updateConversation(id, { title });
  }

  /** The conversation's own MCP config (the default merged with the one it was created with). */
  async mcpConfig(id: string): Promise<FullMcpConfig> {
    const conv = await this.require(id);
    return this.settings.openMcp(await this.field(conv, 'mcp_config_sealed'));
  }

  /** A field of the conversation's stored data, read from the store when it is not kept in memory. */
  async field<K extends RecordKey>(conv: { record: ParsedRecord }, key: K): Promise<RecordData[K]> {
    if (!this.live.get(conv.record.id)?.storedKeys?.has(key)) return conv.record.data[key];
    return parseStoredKey((await this.store.getConversation(conv.record.id))?.data, key);
  }

  // ---- memory bound ----------------------------------------------------------------------------

  /** Keeps a conversation loaded, its large fields left in the store; evicts idle ones beyond the bounds. */
  private admit(record: ConversationRecord): LiveConversation {
    const conv = new LiveConversation({ ...record, data: {} }, this.liveParts);
    this.keepRecord(conv, record);
    this.live.set(record.id, conv);
    this.evictIdle();
    return conv;
  }

  /**
   * Puts `record` on the conversation as it stays in memory, its data parsed: large fields and
   * malformed ones left in the store (its `storedKeys`: an update writes them back), its size counted.
   */
  private keepRecord(conv: LiveConversation, record: ConversationRecord): void {
    const kept = new Set<string>();
    const { data } = this.parsed(record, (k) => kept.add(k));
    for (const k of LARGE_FIELDS) {
      if (data[k] !== undefined && fieldBytes(data[k]) > LARGE_FIELD_BYTES) {
        kept.add(k);
        delete data[k];
      }
    }
    conv.storedKeys = kept.size ? kept : null;
    conv.record = { ...record, data };
    this.resize(conv);
  }

  /** A record from the store, its data parsed; each malformed key is reported once (and handed to `malformed`). */
  private parsed(raw: ConversationRecord, malformed?: (key: RecordKey) => void): ParsedRecord {
    const { record, malformed: keys } = parseRecord(raw);
    for (const key of keys) {
      malformed?.(key);
      const report = `${raw.id} ${key}`;
      if (this.malformedReported.has(report)) continue;
      if (this.malformedReported.size >= MALFORMED_REPORTS) this.malformedReported.clear();
      this.malformedReported.add(report);
      this.log?.warn(
        { conversation_id: raw.id, key },
        'a key of the conversation record is not of the shape this version reads: it is ignored here (and kept in the store)',
      );
    }
    return record;
  }

  /** Counts the record's resident size again (its data changed). */
  private resize(conv: LiveConversation): void {
    let bytes = 512;
    for (const v of Object.values(conv.record.data)) bytes += fieldBytes(v);
    this.residentBytes += bytes - conv.bytes;
    conv.bytes = bytes;
  }

  /** Most recently used last (Map order). */
  private touch(id: string, conv: LiveConversation): LiveConversation {
    this.live.delete(id);
    this.live.set(id, conv);
    return conv;
  }

  private drop(id: string): void {
    const conv = this.live.get(id);
    if (!conv) return;
    this.live.delete(id);
    this.residentBytes -= conv.bytes;
  }

  private evictIdle(): void {
    const count = this.limits.count ?? MAX_RESIDENT;
    const bytes = this.limits.bytes ?? RESIDENT_BYTES;
    if (this.live.size <= count && this.residentBytes <= bytes) return;
    for (const [id, conv] of this.live) {
      if (this.live.size <= count && this.residentBytes <= bytes) return;
      if (evictable(conv)) this.drop(id);
    }
  }

  /** Loaded conversations and the bytes of their records (for tests and metrics). */
  get resident(): { count: number; bytes: number } {
    return { count: this.live.size, bytes: this.residentBytes };
  }

  // ---- reads --------------------------------------------------------------------------------

  private async info(conv: Shown) {
    const d = conv.record.data;
    const lastSeq = await this.events.lastSeq(conv.record.id);
    const status = conv.shown ?? conv.status;
    const shown = status === 'running' ? 'RUNNING' : status === 'error' ? 'ERROR' : 'STOPPED';
    return {
      conversation_id: conv.record.id,
      id: conv.record.id,
      // OpenHands' default for a conversation without a title (app-server-info.ts)
      title: conv.record.title === null ? untitled(conv.record.id) : this.redactor.redact(conv.record.title),
      created_at: conv.record.created_at,
      updated_at: conv.record.updated_at,
      execution_status: status,
      conversation_status: shown,
      // OpenHands' meaning: the runtime's status (app-server.ts); the agent's is execution_status
      status: RUNTIME_STATUS,
      selected_repository: d.selected_repository ?? null,
      selected_branch: d.selected_branch ?? null,
      git_provider: d.git_provider ?? null,
      last_seq: lastSeq,
      ...(this.shared ? { node_id: await this.shared.ownerOf(conv.record.id) } : {}),
      setup: d.setup ?? null,
      mcp_config: fullMcpConfig(redactMcpConfig(this.settings.openMcp(await this.field(conv, 'mcp_config_sealed')))),
      ...agentServerInfo(conv.record, this.agentServer, await this.settings.llmView()),
      ...appServerInfo(conv.record, this.appServer),
    };
  }

  async get(id: string) {
    return this.info(await this.require(id));
  }

  async list(pageId: string | null | undefined, limit: number) {
    let cursor: { created_at: string; id: string } | null = null;
    if (pageId) {
      try {
        const [created_at, cid] = JSON.parse(Buffer.from(pageId, 'base64url').toString('utf8')) as [string, string];
        if (typeof created_at === 'string' && typeof cid === 'string') cursor = { created_at, id: cid };
      } catch {
        throw new RequestValidationError([
          { type: 'value_error', loc: ['query', 'page_id'], msg: 'Value error, page_id is not a page id returned by this endpoint', input: pageId },
        ]);
      }
    }
    const rows = await this.store.listConversations(limit + 1, cursor);
    const page = rows.slice(0, limit);
    const next = rows[limit];
    const items = [];
    for (const r of page) items.push(await this.info(this.live.get(r.id) ?? { record: this.parsed(r), status: r.execution_status as ExecutionStatus }));
    return {
      items,
      // OpenHands' app reads the page as `results`: the same items, under both names
      results: items,
      next_page_id: next ? Buffer.from(JSON.stringify([next.created_at, next.id])).toString('base64url') : null,
    };
  }

  /** The socket-only snapshot sent first on every subscription. */
  async fullState(id: string) {
    const conv = await this.require(id);
    return {
      kind: 'ConversationStateUpdateEvent',
      id: crypto.randomUUID(),
      timestamp: isoTime(),
      source: 'environment',
      key: 'full_state',
      value: await this.info(conv),
    };
  }
}

function fieldBytes(v: unknown): number {
  return typeof v === 'string' ? v.length : JSON.stringify(v ?? null).length;
}

/**
 * Only a conversation nothing holds may go: not running (here or, by its status, on another node),
 * not being prepared (the preparation and a message sent meanwhile share its in-memory record, run
 * request included), no shell or MCP server running, no lease held. A run request left in the store by a
 * preparation that ended (ready or failed) waits for nothing and holds nothing.
 */
function evictable(conv: LiveConversation): boolean {
  return conv.status !== 'running' && !stillPreparing(conv.record.data) && !conv.holding;
}
