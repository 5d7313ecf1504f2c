/**
 * Conversation lifecycle and status machine. Knows no HTTP: the router calls it, the bridge
 * calls the router. Every event goes through `append`, which redacts, stores (committed) and
 * publishes to the conversation's topic.
 */
import crypto from 'node:crypto';
import type { Logger } from 'pino';
import {
  type AddGitProvidersRequest,
  type McpConfig,
  type NewConversationRequest,
  type SendMessageRequest,
  EXECUTION_STATUSES,
  PROVIDERS,
} from '../api/schemas.js';
import { ConflictError, NotFoundError, RequestValidationError, type ValidationIssue } from '../errors.js';
import type { EventBus } from '../events/bus.js';
import { EncodedEvent, nowIso, type EventDraft, type ParleyEvent } from '../events/types.js';
import type { SecretBox } from '../secrets/crypto.js';
import { metrics } from '../metrics.js';
import type { Redactor } from '../secrets/redact.js';
import type { ConversationRecord, Store } from '../store/types.js';
import { mcpSecretValues, mergeMcpConfig, redactMcpConfig as redactMcp, type McpConfig as McpModuleConfig } from '../tools/mcp/config.js';
import { normalizeRepository } from '../workspace/git.js';
import { validateSuggestedTask } from '../workspace/tasks.js';
import { Sandbox } from '../sandbox/launcher.js';
import { parseReplay, replayText, type ReplayPlan } from './replay.js';
import { agentServerInfo, type AgentServerContext } from './agent-server.js';
import { seqPageStart } from './event-search.js';
import type { AgentRuntime, ConversationPreparer, PrepareOptions } from './runtime.js';
import { pageByBytes, STORE_READ_BYTES } from '../events/page.js';
import { assertItemsFit } from './message-limits.js';

const appended = metrics.eventsAppended.child();
const published = metrics.eventsPublished.child();

export type ExecutionStatus = (typeof EXECUTION_STATUSES)[number];
export type Provider = (typeof PROVIDERS)[number];

export interface StoredProvider {
  provider: Provider;
  token: string | null;
  host: string | null;
  user_id: string | null;
}

const PROVIDER_KIND = 'provider';
const SETTINGS_KIND = 'settings';
export const SECRET_KIND = 'custom';

function emptyMcp(): McpConfig {
  return { sse_servers: [], stdio_servers: [], shttp_servers: [] };
}

/** The API's complete shape (every list present) of an MCP config from the MCP module. */
function complete(c: McpModuleConfig): McpConfig {
  return {
    sse_servers: (c.sse_servers ?? []).map((s) => ({ url: s.url, api_key: s.api_key })),
    stdio_servers: (c.stdio_servers ?? []).map((s) => ({ name: s.name, command: s.command, args: s.args ?? [], env: s.env ?? {} })),
    shttp_servers: (c.shttp_servers ?? []).map((s) => ({ url: s.url, api_key: s.api_key, timeout: s.timeout })),
  };
}

/** Default MCP config plus the conversation's, de-duplicated by normalised url (HTTP) and name (stdio); the conversation's entry wins. */
export const mergeMcpConfigs = (base: McpConfig, extra: McpConfig | null | undefined): McpConfig => complete(mergeMcpConfig(base, extra));
export const mcpSecrets = (cfg: McpConfig): string[] => mcpSecretValues(cfg);
export const redactMcpConfig = (cfg: McpConfig): McpConfig => complete(redactMcp(cfg));

/** In-memory state of a conversation that has been touched since start (lazy). */
interface LiveConversation {
  record: ConversationRecord;
  /** The status the service acts on (changes at once). */
  status: ExecutionStatus;
  /** The status clients are shown: it follows committed execution_status events, so a client never sees a status its event log does not hold yet. */
  shown?: ExecutionStatus;
}

export interface CreateResult {
  status: 'ok';
  conversation_id: string;
  /** = conversation_id (the agent-server shape's name for it). */
  id: string;
  message: string | null;
  conversation_status: 'STARTING' | 'RUNNING';
}

export class ConversationService {
  private live = new Map<string, LiveConversation>();
  private loading = new Map<string, Promise<LiveConversation | null>>();
  runtime: AgentRuntime | null = null;
  /** Per-conversation MCP server states (set by the agent runtime). */
  mcpStatus: ((conversationId: string) => Promise<unknown[]>) | null = null;
  preparer: ConversationPreparer | null = null;
  /** Largest content item a message may carry (MAX_EVENT_BYTES); set by the composition root. */
  maxEventBytes = 2 * 1024 * 1024;
  /** The per-conversation process launcher (src/sandbox/); set by the composition root. */
  sandbox: Sandbox = Sandbox.none();
  readonly startedAt = Date.now();
  lastActivity = Date.now();

  constructor(
    readonly store: Store,
    readonly bus: EventBus,
    readonly box: SecretBox,
    readonly redactor: Redactor,
    readonly log: Logger,
    /** Paths and the server's LLM, for the agent-server fields of the info (agent, workspace, persistence_dir). */
    readonly agentServer?: AgentServerContext,
  ) {}

  /** Called by the store after each commit: publish in seq order. */
  onCommit = (conversationId: string, events: EncodedEvent[]): void => {
    appended.inc(events.length);
    published.inc(events.length);
    for (const ev of events) this.bus.publish(conversationId, ev);
    const live = this.live.get(conversationId);
    const last = events[events.length - 1];
    if (live && last) {
      live.record.updated_at = last.event.timestamp;
      for (const { event: ev } of events) if (ev.kind === 'ConversationStateUpdateEvent' && ev.key === 'execution_status') live.shown = ev.value as ExecutionStatus;
    }
  };

  /** Loads secret values into the redactor and repairs conversations a crash left running. */
  async start(): Promise<void> {
    for (const p of await this.getProviders()) this.redactor.add(p.token);
    for (const s of await this.store.listSecrets(SECRET_KIND)) this.redactor.add(this.open(s.sealed));
    this.redactor.add((await this.getLlmSettings()).llm_api_key);
    this.redactor.add(...mcpSecrets(await this.defaultMcpConfig()));
    for (const rec of await this.store.conversationsWithStatus(['running'])) {
      const conv = await this.load(rec.id);
      if (!conv) continue;
      await this.append(rec.id, {
        kind: 'ConversationErrorEvent',
        source: 'environment',
        code: 'DaemonRestarted',
        detail: 'The daemon restarted while this conversation was running. Send a message or run it again to continue.',
      });
      await this.setStatus(rec.id, 'error');
    }
  }

  private open(sealed: string | null): string | null {
    if (!sealed) return null;
    try {
      return this.box.decrypt(sealed);
    } catch {
      this.log.error('a stored secret could not be decrypted (was SECRET_KEY changed?)');
      return null;
    }
  }

  // ---- loading ------------------------------------------------------------------------------

  /** The conversation's live state, loaded on first use. Null when it does not exist. */
  async load(id: string): Promise<LiveConversation | null> {
    const hit = this.live.get(id);
    if (hit) return hit;
    let p = this.loading.get(id);
    if (!p) {
      p = this.store.getConversation(id).then((record) => {
        this.loading.delete(id);
        if (!record) return null;
        const existing = this.live.get(id);
        if (existing) return existing;
        const conv = { record, status: record.execution_status as ExecutionStatus };
        this.live.set(id, conv);
        return conv;
      });
      this.loading.set(id, p);
    }
    return p;
  }

  async require(id: string): Promise<LiveConversation> {
    const conv = await this.load(id);
    if (!conv) throw new NotFoundError('Conversation not found');
    return conv;
  }

  /** Another node deleted the conversation: its state here goes. */
  forget(id: string): void {
    this.live.delete(id);
  }

  status(id: string): ExecutionStatus | undefined {
    return this.live.get(id)?.status;
  }

  // ---- events -------------------------------------------------------------------------------

  /** Redact, store (committed), publish. */
  append(conversationId: string, draft: EventDraft): Promise<ParleyEvent> {
    this.lastActivity = Date.now();
    return this.store.append(conversationId, this.redactor.redactDeep(draft));
  }

  appendMany(conversationId: string, drafts: EventDraft[]): Promise<ParleyEvent[]> {
    this.lastActivity = Date.now();
    return this.store.appendMany(conversationId, drafts.map((d) => this.redactor.redactDeep(d)));
  }

  /** A live-only event (no seq, not stored), e.g. StreamingDeltaEvent. */
  publishTransient(conversationId: string, draft: EventDraft): void {
    const ev = { id: crypto.randomUUID(), timestamp: nowIso(), ...this.redactor.redactDeep(draft) } as ParleyEvent;
    published.inc();
    this.bus.publish(conversationId, new EncodedEvent(ev));
  }

  async setStatus(id: string, status: ExecutionStatus): Promise<void> {
    const conv = await this.require(id);
    if (conv.status === status) return;
    conv.status = status;
    conv.record.execution_status = status;
    await this.store.updateConversation(id, { execution_status: status });
    await this.append(id, { kind: 'ConversationStateUpdateEvent', source: 'environment', key: 'execution_status', value: status });
  }

  /** Merge-patch the conversation's stored data (repository, setup state, ...). */
  async updateData(id: string, patch: Record<string, unknown>): Promise<void> {
    const conv = await this.require(id);
    conv.record.data = { ...conv.record.data, ...patch };
    await this.store.updateConversation(id, { data: conv.record.data });
  }

  async setTitle(id: string, title: string): Promise<void> {
    const conv = await this.require(id);
    conv.record.title = title;
    await this.store.updateConversation(id, { title });
  }

  // ---- the three operations of the interface --------------------------------------------------

  async createConversation(req: NewConversationRequest): Promise<CreateResult> {
    // everything that can be refused is refused now (422), never later in the background
    assertItemsFit([{ text: req.initial_user_msg ?? '' }, { image_urls: req.image_urls ?? [] }], this.maxEventBytes, 'initial_user_msg/image_urls');
    const replay = checkNewConversation(req);
    // a replay runs its recorded actions, not the LLM: only a message sent meanwhile starts a run
    const willRun = !!(req.initial_user_msg || req.suggested_task || req.create_microagent);
    if (req.conversation_id) {
      const existing = await this.load(req.conversation_id);
      if (existing) return this.join(existing, req);
    }
    const id = req.conversation_id ?? crypto.randomUUID();
    const now = nowIso();
    const mcp = mergeMcpConfigs(await this.defaultMcpConfig(), req.mcp_config);
    this.redactor.add(...mcpSecrets(mcp));
    const record: ConversationRecord = {
      id,
      title: this.redactTitle(deriveTitle({ ...req, initial_user_msg: req.initial_user_msg ?? replayText(replay?.firstMessage ?? null) })),
      created_at: now,
      updated_at: now,
      execution_status: 'idle',
      data: {
        selected_repository: req.repository ?? req.suggested_task?.repo ?? req.create_microagent?.repo ?? null,
        selected_branch: req.selected_branch ?? null,
        git_provider: req.git_provider ?? req.suggested_task?.git_provider ?? req.create_microagent?.git_provider ?? null,
        conversation_instructions: req.conversation_instructions ?? null,
        image_urls: req.image_urls ?? null,
        suggested_task: req.suggested_task ?? null,
        create_microagent: req.create_microagent ?? null,
        replay_json: req.replay_json ? true : null,
        mcp_config_sealed: this.box.encrypt(JSON.stringify(mcp)),
        setup: { phase: 'pending' },
        // preparation starts the loop when it is done
        run_requested: willRun,
      },
    };
    try {
      await this.store.createConversation(record);
    } catch (err) {
      // a concurrent create with the same id won: this one joins it
      const existing = req.conversation_id ? await this.load(id) : null;
      if (existing) return this.join(existing, req);
      throw err;
    }
    this.live.set(id, { record, status: 'idle' });
    // reserved before the first await: a run requested meanwhile waits for this preparation
    if (this.preparer) this.preparing.add(id);
    this.log.info({ conversation_id: id }, 'conversation created');
    if (req.initial_user_msg || req.image_urls?.length) {
      await this.append(id, userMessage(req.initial_user_msg ?? '', req.image_urls ?? []));
    }
    if (replay?.firstMessage) {
      await this.append(id, { kind: 'MessageEvent', source: 'user', llm_message: { role: 'user', content: replay.firstMessage } });
    }
    if (this.preparer) {
      this.launchPreparer(id, replay ? { replay } : undefined);
    } else if (willRun) {
      this.startRun(id);
    }
    return { status: 'ok', conversation_id: id, id, message: null, conversation_status: willRun || replay ? 'RUNNING' : 'STARTING' };
  }

  /** Preparations under way in this process (a phase left over by a restart is not one). */
  private preparing = new Set<string>();

  /** Starts again every preparation a stop cut short (an existing clone is reused); each runs the loop when done if one was requested. */
  async resumePreparations(): Promise<void> {
    if (!this.preparer) return;
    for (const id of await this.store.conversationsWithUnfinishedSetup()) {
      if (!(await this.load(id)) || this.preparing.has(id)) continue;
      this.log.info({ conversation_id: id }, 'resuming workspace preparation after a restart');
      this.launchPreparer(id);
    }
  }

  private launchPreparer(id: string, opts?: PrepareOptions): void {
    if (!this.preparer) return;
    this.preparing.add(id);
    this.preparer
      .prepare(id, opts)
      .catch((err) => this.log.error({ conversation_id: id, err: this.redactor.redact(String(err)) }, 'preparation failed'))
      .finally(() => this.preparing.delete(id));
  }

  private async join(conv: LiveConversation, req: NewConversationRequest): Promise<CreateResult> {
    const id = conv.record.id;
    if (req.initial_user_msg || req.image_urls?.length) {
      await this.sendMessage(id, {
        role: 'user',
        content: contentOf(req.initial_user_msg ?? '', req.image_urls ?? []),
        run: true,
      });
    }
    return {
      status: 'ok',
      conversation_id: id,
      id,
      message: 'Joined existing conversation',
      conversation_status: conv.status === 'running' ? 'RUNNING' : 'STARTING',
    };
  }

  async sendMessage(id: string, msg: SendMessageRequest): Promise<{ success: true }> {
    assertItemsFit(msg.content, this.maxEventBytes, 'content');
    const conv = this.live.get(id) ?? (await this.require(id));
    const source = msg.role === 'assistant' ? 'agent' : msg.role === 'tool' ? 'environment' : 'user';
    await this.append(id, {
      kind: 'MessageEvent',
      source,
      llm_message: { role: msg.role, content: msg.content },
    });
    if (conv.status === 'finished' || conv.status === 'stuck') await this.setStatus(id, 'idle');
    if (this.runtime?.isRunning(id)) this.runtime.notifyMessage(id);
    else if (msg.run) this.startRun(id);
    return { success: true };
  }

  /** Start the loop if it can run now; preparation still under way starts it when ready. */
  startRun(id: string): boolean {
    const conv = this.live.get(id);
    if (!conv || !this.runtime) return false;
    const phase = (conv.record.data.setup as { phase?: string } | undefined)?.phase;
    // every phase before 'ready' (pending, preparing, cloning, checking_out, cloned, replaying) waits
    if (this.preparer && phase !== undefined && phase !== 'ready' && phase !== 'error') {
      conv.record.data.run_requested = true;
      // a preparation the daemon's restart cut short is started again; it runs the loop when done
      if (!this.preparing.has(id)) this.launchPreparer(id);
      return true;
    }
    return this.runtime.start(id);
  }

  async run(id: string): Promise<{ success: true }> {
    await this.require(id);
    if (this.runtime?.isRunning(id)) throw new ConflictError('Conversation already running. Wait for completion or pause first.');
    if (!this.runtime) throw new ConflictError('No agent runtime is configured');
    this.startRun(id);
    return { success: true };
  }

  async pause(id: string): Promise<{ success: true }> {
    await this.require(id);
    if (this.runtime?.isRunning(id)) await this.runtime.pause(id);
    else if (this.status(id) === 'idle') {
      await this.append(id, { kind: 'PauseEvent', source: 'user' });
      await this.setStatus(id, 'paused');
    }
    return { success: true };
  }

  async interrupt(id: string): Promise<{ success: true }> {
    await this.require(id);
    if (this.runtime?.isRunning(id)) await this.runtime.interrupt(id);
    return { success: true };
  }

  async addGitProviders(req: AddGitProvidersRequest): Promise<{ message: string }> {
    const previous = new Map((await this.getProviders()).map((p) => [p.provider, p]));
    const next = [];
    for (const provider of PROVIDERS) {
      const entry = req.provider_tokens[provider];
      if (!entry) continue;
      const token = entry.token ? entry.token : (previous.get(provider)?.token ?? null);
      this.redactor.add(token);
      next.push({
        kind: PROVIDER_KIND,
        name: provider,
        sealed: token ? this.box.encrypt(token) : null,
        meta: { host: entry.host ?? null, user_id: entry.user_id ?? null },
      });
    }
    await this.store.replaceSecrets(PROVIDER_KIND, next);
    if (req.mcp_config) {
      this.redactor.add(...mcpSecrets(req.mcp_config));
      await this.store.putSecret({ kind: SETTINGS_KIND, name: 'mcp_config', sealed: this.box.encrypt(JSON.stringify(req.mcp_config)), meta: {} });
    }
    return { message: 'Git providers stored' };
  }

  async getProviders(): Promise<StoredProvider[]> {
    return (await this.store.listSecrets(PROVIDER_KIND)).map((s) => ({
      provider: s.name as Provider,
      token: this.open(s.sealed),
      host: (s.meta.host as string | null) ?? null,
      user_id: (s.meta.user_id as string | null) ?? null,
    }));
  }

  async defaultMcpConfig(): Promise<McpConfig> {
    const s = await this.store.getSecret(SETTINGS_KIND, 'mcp_config');
    const raw = this.open(s?.sealed ?? null);
    return raw ? (JSON.parse(raw) as McpConfig) : emptyMcp();
  }

  async conversationMcpConfig(id: string): Promise<McpConfig> {
    const conv = await this.require(id);
    const raw = this.open((conv.record.data.mcp_config_sealed as string | undefined) ?? null);
    return raw ? (JSON.parse(raw) as McpConfig) : emptyMcp();
  }

  // ---- settings and custom secrets ----------------------------------------------------------

  async getLlmSettings(): Promise<{ llm_model: string | null; llm_base_url: string | null; llm_api_key: string | null }> {
    const rec = await this.store.getSecret(SETTINGS_KIND, 'llm');
    return {
      llm_model: (rec?.meta.llm_model as string | null) ?? null,
      llm_base_url: (rec?.meta.llm_base_url as string | null) ?? null,
      llm_api_key: this.open(rec?.sealed ?? null),
    };
  }

  /** The stored LLM settings without decrypting the key. */
  private async serverLlmView() {
    const rec = await this.store.getSecret(SETTINGS_KIND, 'llm');
    return { model: (rec?.meta.llm_model as string | null) ?? null, base_url: (rec?.meta.llm_base_url as string | null) ?? null, key_set: !!rec?.sealed };
  }

  async publicSettings() {
    const s = await this.getLlmSettings();
    return { llm_model: s.llm_model, llm_base_url: s.llm_base_url, llm_api_key_set: !!s.llm_api_key };
  }

  /** Absent fields keep their stored value; null clears it. */
  async saveLlmSettings(patch: { llm_model?: string | null; llm_base_url?: string | null; llm_api_key?: string | null }) {
    const cur = await this.getLlmSettings();
    const next = { ...cur, ...patch };
    this.redactor.add(next.llm_api_key);
    await this.store.putSecret({
      kind: SETTINGS_KIND,
      name: 'llm',
      sealed: next.llm_api_key ? this.box.encrypt(next.llm_api_key) : null,
      meta: { llm_model: next.llm_model, llm_base_url: next.llm_base_url },
    });
    return this.publicSettings();
  }

  async listSecrets() {
    return { secrets: (await this.store.listSecrets(SECRET_KIND)).map((s) => ({ name: s.name, description: (s.meta.description as string | null) ?? null })) };
  }

  async createSecret(name: string, value: string, description?: string | null) {
    if (await this.store.getSecret(SECRET_KIND, name)) throw new ConflictError(`Secret ${name} already exists`);
    this.redactor.add(value);
    await this.store.putSecret({ kind: SECRET_KIND, name, sealed: this.box.encrypt(value), meta: { description: description ?? null } });
    return { name, description: description ?? null };
  }

  async updateSecret(name: string, value: string | null | undefined, description?: string | null) {
    const cur = await this.store.getSecret(SECRET_KIND, name);
    if (!cur) throw new NotFoundError(`Secret ${name} not found`);
    if (value) this.redactor.add(value);
    await this.store.putSecret({
      kind: SECRET_KIND,
      name,
      sealed: value ? this.box.encrypt(value) : cur.sealed,
      meta: { description: description !== undefined ? description : (cur.meta.description ?? null) },
    });
    return { success: true as const };
  }

  async deleteSecret(name: string) {
    if (!(await this.store.deleteSecret(SECRET_KIND, name))) throw new NotFoundError(`Secret ${name} not found`);
    return { success: true as const };
  }

  /** Custom secrets as environment variables for the agent's shell. */
  async secretValues(): Promise<Record<string, string>> {
    const out: Record<string, string> = {};
    for (const s of await this.store.listSecrets(SECRET_KIND)) {
      const v = this.open(s.sealed);
      if (v) out[s.name] = v;
    }
    return out;
  }

  async conversationMcp(id: string) {
    await this.require(id);
    const cfg = redactMcpConfig(await this.conversationMcpConfig(id));
    return { config: cfg, servers: this.mcpStatus ? await this.mcpStatus(id) : [] };
  }

  private redactTitle(t: string | null): string | null {
    return t === null ? null : this.redactor.redact(t);
  }

  // ---- reads --------------------------------------------------------------------------------

  async info(conv: LiveConversation) {
    const d = conv.record.data;
    const lastSeq = await this.store.lastSeq(conv.record.id);
    const status = conv.shown ?? conv.status;
    const running = status === 'running';
    return {
      conversation_id: conv.record.id,
      id: conv.record.id,
      title: this.redactTitle(conv.record.title),
      created_at: conv.record.created_at,
      updated_at: conv.record.updated_at,
      execution_status: status,
      conversation_status: running ? 'RUNNING' : status === 'error' ? 'ERROR' : 'STOPPED',
      status: running ? 'RUNNING' : status === 'error' ? 'ERROR' : 'STOPPED',
      selected_repository: (d.selected_repository as string | null) ?? null,
      selected_branch: (d.selected_branch as string | null) ?? null,
      git_provider: (d.git_provider as string | null) ?? null,
      last_seq: lastSeq,
      setup: d.setup ?? null,
      mcp_config: redactMcpConfig(await this.conversationMcpConfig(conv.record.id)),
      ...agentServerInfo(conv.record, this.agentServer, await this.serverLlmView()),
    };
  }

  async getConversation(id: string) {
    return this.info(await this.require(id));
  }

  async listConversations(pageId: string | null | undefined, limit: number) {
    let cursor: { created_at: string; id: string } | null = null;
    if (pageId) {
      try {
        const [created_at, cid] = JSON.parse(Buffer.from(pageId, 'base64url').toString('utf8')) as [string, string];
        if (typeof created_at === 'string' && typeof cid === 'string') cursor = { created_at, id: cid };
      } catch {
        throw new RequestValidationError([{ type: 'value_error', loc: ['query', 'page_id'], msg: 'Value error, page_id is not a page id returned by this endpoint', input: pageId }]);
      }
    }
    const rows = await this.store.listConversations(limit + 1, cursor);
    const page = rows.slice(0, limit);
    const next = rows[limit];
    const items = [];
    for (const r of page) items.push(await this.info(this.live.get(r.id) ?? { record: r, status: r.execution_status as ExecutionStatus }));
    return {
      items,
      next_page_id: next ? Buffer.from(JSON.stringify([next.created_at, next.id])).toString('base64url') : null,
    };
  }

  async deleteConversation(id: string): Promise<{ success: true }> {
    await this.require(id);
    await this.runtime?.dispose(id);
    await this.preparer?.dispose?.(id);
    await this.store.deleteConversation(id);
    this.live.delete(id);
    this.bus.end(id); // its subscribers are closed, here and on every other node
    this.log.info({ conversation_id: id }, 'conversation deleted');
    return { success: true };
  }

  async searchEvents(
    id: string,
    q: { page_id?: string | null; limit: number; kind?: string | null; source?: string | null; sort_order: 'TIMESTAMP' | 'TIMESTAMP_DESC'; after_seq?: number | null },
  ) {
    await this.require(id);
    const desc = q.sort_order === 'TIMESTAMP_DESC';
    const start = seqPageStart(q.page_id);
    const items = await this.store.query(id, {
      kind: q.kind,
      source: q.source,
      desc,
      limit: q.limit + 1,
      afterSeq: desc ? q.after_seq : Math.max(q.after_seq ?? 0, start !== null ? start - 1 : 0),
      beforeSeq: desc && start !== null ? start + 1 : null,
      maxBytes: STORE_READ_BYTES,
    });
    const { page, next } = pageByBytes(items, q.limit);
    return { items: page, next_page_id: next ? String(next.seq) : null };
  }

  async countEvents(id: string, q: { kind?: string | null; source?: string | null; after_seq?: number | null }) {
    await this.require(id);
    return this.store.count(id, { kind: q.kind, source: q.source, afterSeq: q.after_seq });
  }

  async getEvent(id: string, eventId: string) {
    await this.require(id);
    const ev = await this.store.get(id, eventId);
    if (!ev) throw new NotFoundError('Event not found');
    return ev;
  }

  /** The socket-only snapshot sent first on every subscription. */
  async fullState(id: string) {
    const conv = await this.require(id);
    return { kind: 'ConversationStateUpdateEvent', id: crypto.randomUUID(), timestamp: nowIso(), source: 'environment', key: 'full_state', value: await this.info(conv) };
  }
}

export function contentOf(text: string, imageUrls: string[]) {
  const content: ({ type: 'text'; text: string; cache_prompt: boolean } | { type: 'image'; image_urls: string[]; cache_prompt: boolean })[] = [];
  if (text) content.push({ type: 'text', text, cache_prompt: false });
  if (imageUrls.length) content.push({ type: 'image', image_urls: imageUrls, cache_prompt: false });
  return content;
}

export function userMessage(text: string, imageUrls: string[]): EventDraft {
  return { kind: 'MessageEvent', source: 'user', llm_message: { role: 'user', content: contentOf(text, imageUrls) } };
}

/**
 * The checks of a new conversation that the schema cannot express (all reported at once, 422):
 * replay_json parses into a plan and comes without another first message; repository names are
 * `owner/repo`; a suggested task is a combination its templates support.
 */
function checkNewConversation(req: NewConversationRequest): ReplayPlan | null {
  const issues: ValidationIssue[] = [];
  const valueError = (loc: (string | number)[], msg: string) => issues.push({ type: 'value_error', loc: ['body', ...loc], msg: `Value error, ${msg}` });
  let plan: ReplayPlan | null = null;
  if (req.replay_json) {
    const other = req.initial_user_msg ? 'initial_user_msg' : req.image_urls?.length ? 'image_urls' : req.suggested_task ? 'suggested_task' : req.create_microagent ? 'create_microagent' : null;
    if (other) valueError(['replay_json'], `replay_json cannot be combined with ${other}: a replay supplies its own first message`);
    const parsed = parseReplay(req.replay_json);
    if (parsed.ok) plan = parsed.plan;
    else issues.push(...parsed.issues);
  }
  const repoName = (value: string | null | undefined, loc: string[]) => {
    if (value === null || value === undefined) return;
    try {
      normalizeRepository(value);
    } catch (err) {
      valueError(loc, (err as Error).message);
    }
  };
  repoName(req.repository, ['repository']);
  repoName(req.create_microagent?.repo, ['create_microagent', 'repo']);
  if (req.suggested_task) {
    const task = req.suggested_task;
    const problem = validateSuggestedTask({ ...task, git_provider: task.git_provider ?? req.git_provider ?? undefined });
    if (problem) {
      const field = /^suggested_task\.(\w+)/.exec(problem)?.[1] ?? (/git provider/i.test(problem) ? 'git_provider' : 'task_type');
      valueError(['suggested_task', field], problem);
    }
  }
  if (issues.length) throw new RequestValidationError(issues);
  return plan;
}

export function deriveTitle(req: NewConversationRequest): string | null {
  const t = req.suggested_task?.title ?? req.create_microagent?.title ?? req.initial_user_msg ?? req.repository;
  if (!t) return null;
  const line = t.trim().split('\n')[0] ?? '';
  return line.length > 60 ? `${line.slice(0, 57)}...` : line || null;
}
