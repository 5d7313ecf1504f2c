/**
 * OpenHands' agent-server shape on top of the conversation service: the create request that
 * `@openhands/typescript-client` sends, conversation search, title/tags, conversation secrets, the
 * final response (the info fields it reads are projected in agent-server-info.ts; the settings the
 * agent reads, in agent/conversation-data.ts). Knows no HTTP; the router calls these with the parts
 * they declare (AgentServerParts).
 *
 * What the client says about the host is never trusted: `workspace.working_dir` is recorded as
 * the name the client gave the workspace, and the conversation gets its own directory like every
 * other (its path is what `workspace.working_dir` shows).
 */
import { toParleyModel, UnknownModelError } from '../llm/catalog.js';
import crypto from 'node:crypto';
import { ConfirmationPolicy, type StoredLlm } from '../agent/conversation-data.js';
import { ConflictError, RequestValidationError } from '../errors.js';
import type { ContentItem } from '../events/content.js';
import type { MessageRole } from '../events/schema.js';
import type { ParleyEvent } from '../events/types.js';
import type { EventLog } from '../events/log.js';
import type { Redactor } from '../secrets/redact.js';
import type { Settings } from '../secrets/settings.js';
import type { Conversations } from './conversations.js';
import type { ParsedRecord, RecordData } from './record-data.js';
import { deriveTitle, type ConversationOps } from './service.js';

/** The policy's schema, for the API's request schemas. */
export { ConfirmationPolicy };

type SecretInput = string | { value: string; description?: string | null };

/** What an agent-server create may ask for (the API validates the request against its own schema). */
interface AgentLlmInput {
  model?: string | null;
  api_key?: string | null;
  base_url?: string | null;
}

interface StartConversation {
  agent?: { llm?: AgentLlmInput | null } | null;
  agent_settings?: { llm?: AgentLlmInput | null } | null;
  agent_profile_id?: string | null;
  workspace?: { working_dir?: string | null } | null;
  initial_message?: { role: MessageRole; content: ContentItem[]; run: boolean } | null;
  max_iterations?: number | null;
  stuck_detection?: boolean | null;
  confirmation_policy?: ConfirmationPolicy | null;
  secrets?: Record<string, SecretInput> | null;
  conversation_id?: string | null;
  tags?: Record<string, string> | null;
}

/** A model as the OpenHands client names it → Parley's `provider/model` (the LLM catalog's translation); a 422 at `loc` when Parley cannot run it. */
export function parleyModel(model: string, baseUrl: string | null | undefined, loc: (string | number)[] = ['body', 'agent', 'llm', 'model']): string {
  try {
    return toParleyModel(model, baseUrl);
  } catch (err) {
    if (!(err instanceof UnknownModelError)) throw err;
    throw new RequestValidationError([{ type: 'value_error', loc, msg: `Value error, ${err.message}`, input: model.trim() }]);
  }
}

// ---- create ---------------------------------------------------------------------------------

/** The parts the operations below use, each the narrowest it can be (the composition root's Core has them all). */
export interface AgentServerParts {
  conversations: Conversations;
  service: Pick<ConversationOps, 'createConversation' | 'sendMessage' | 'confirm'>;
  settings: Pick<Settings, 'seal'>;
  redactor: Pick<Redactor, 'redact'>;
  events: Pick<EventLog, 'query'>;
  /** An agent profile's launch (agent-server-features.ts launchAgentProfile); absent: `agent_profile_id` is refused. */
  launch?: (profileId: string) => Promise<AgentLaunch>;
}

/** What a conversation started from an agent profile gets: its LLM (sealed key), its MCP servers (null: the settings' all), its provenance. */
export interface AgentLaunch {
  llm: StoredLlm | null;
  mcpConfigSealed: string | null;
  launched: { profile_id: string; revision: number };
}

/** `POST /api/conversations` with the agent-server body: create (or return, for a known `conversation_id`) and answer with the info. */
export async function startConversation(c: AgentServerParts, req: StartConversation) {
  if (req.conversation_id && (await c.conversations.load(req.conversation_id))) return c.conversations.get(req.conversation_id);
  const llm = req.agent?.llm ?? req.agent_settings?.llm;
  const data: Partial<RecordData> = {};
  if (req.agent_profile_id) {
    if (req.agent || req.agent_settings || !c.launch) {
      const msg = c.launch ? 'give agent_profile_id without agent or agent_settings: the profile is the agent' : 'agent profiles are not available here';
      throw new RequestValidationError([{ type: 'value_error', loc: ['body', 'agent_profile_id'], msg: `Value error, ${msg}`, input: req.agent_profile_id }]);
    }
    const launch = await c.launch(req.agent_profile_id);
    if (launch.llm) data.llm = launch.llm;
    if (launch.mcpConfigSealed) data.mcp_config_sealed = launch.mcpConfigSealed;
    data.launched_profile = launch.launched;
  }
  if (llm && (llm.model || llm.api_key || llm.base_url)) {
    data.llm = {
      model: llm.model ? parleyModel(llm.model, llm.base_url) : null,
      base_url: llm.base_url ?? null,
      api_key_sealed: llm.api_key ? c.settings.seal(llm.api_key) : null,
    } satisfies StoredLlm;
  }
  if (req.max_iterations) data.max_iterations = req.max_iterations;
  if (req.stuck_detection !== undefined && req.stuck_detection !== null) data.stuck_detection = req.stuck_detection;
  if (req.confirmation_policy) data.confirmation_policy = req.confirmation_policy;
  if (req.tags) data.tags = req.tags;
  if (req.workspace?.working_dir) data.declared_working_dir = req.workspace.working_dir;
  const created = await c.service.createConversation({ conversation_id: req.conversation_id ?? crypto.randomUUID() });
  const id = created.conversation_id;
  await c.conversations.updateData(id, data);
  if (req.secrets) await setConversationSecrets(c, id, req.secrets);
  const msg = req.initial_message;
  if (msg?.content.length) {
    const text = msg.content.flatMap((c) => (c.type === 'text' ? [c.text] : [])).join('\n');
    const title = deriveTitle({ initial_user_msg: text });
    if (title) await c.conversations.setTitle(id, c.redactor.redact(title));
    await c.service.sendMessage(id, { role: msg.role, content: msg.content, run: msg.run });
  }
  return c.conversations.get(id);
}

// ---- secrets ------------------------------------------------------------------------------------

/** Merges secrets into the conversation's (encrypted at rest, masked everywhere, exported to its shell). */
export async function setConversationSecrets(c: Pick<AgentServerParts, 'conversations' | 'settings'>, id: string, secrets: Record<string, SecretInput>) {
  const conv = await c.conversations.require(id);
  const sealed = { ...conv.record.data.secrets_sealed };
  for (const [name, s] of Object.entries(secrets)) {
    const value = typeof s === 'string' ? s : s.value;
    sealed[name] = c.settings.seal(value);
  }
  await c.conversations.updateData(id, { secrets_sealed: sealed });
  return { success: true as const };
}

// ---- conversation-level operations ---------------------------------------------------------------

type ConversationInfo = Awaited<ReturnType<Conversations['get']>>;

type SortOrder = 'CREATED_AT' | 'UPDATED_AT' | 'CREATED_AT_DESC' | 'UPDATED_AT_DESC';

/** Every conversation's record (newest first), read page by page from the store. */
export async function allRecords(conversations: Conversations): Promise<ParsedRecord[]> {
  const out: ParsedRecord[] = [];
  let cursor: { created_at: string; id: string } | null = null;
  for (;;) {
    const rows = await conversations.records(500, cursor);
    out.push(...rows);
    if (rows.length < 500) return out;
    const last = rows[rows.length - 1]!;
    cursor = { created_at: last.created_at, id: last.id };
  }
}

function matches(r: ParsedRecord, status: string | null | undefined, tag: string | null | undefined, conversations: Conversations): boolean {
  if (status && (conversations.status(r.id) ?? r.execution_status) !== status) return false;
  if (tag) {
    // `key=value` or `key`
    const [k, v] = tag.split('=', 2) as [string, string | undefined];
    const tags = r.data.tags ?? {};
    if (!(k in tags) || (v !== undefined && tags[k] !== v)) return false;
  }
  return true;
}

/** `GET /api/conversations/search`: filtered by status (and tag), sorted, paged by offset. */
export async function searchConversations(
  conversations: Conversations,
  q: { page_id?: string | null; limit: number; status?: string | null; sort_order: SortOrder; tag?: string | null },
): Promise<{ items: ConversationInfo[]; next_page_id: string | null }> {
  let start = 0;
  if (q.page_id) {
    if (!/^\d{1,9}$/.test(q.page_id)) {
      throw new RequestValidationError([
        { type: 'value_error', loc: ['query', 'page_id'], msg: 'Value error, page_id is not a page id returned by this endpoint', input: q.page_id },
      ]);
    }
    start = Number(q.page_id);
  }
  const key = q.sort_order.startsWith('UPDATED') ? 'updated_at' : 'created_at';
  const desc = q.sort_order.endsWith('_DESC');
  const rows = (await allRecords(conversations)).filter((r) => matches(r, q.status, q.tag, conversations));
  rows.sort((a, b) => (a[key] < b[key] ? -1 : a[key] > b[key] ? 1 : a.id < b.id ? -1 : 1) * (desc ? -1 : 1));
  const page = rows.slice(start, start + q.limit);
  const items: ConversationInfo[] = [];
  for (const r of page) items.push(await conversations.get(r.id));
  return { items, next_page_id: start + q.limit < rows.length ? String(start + q.limit) : null };
}

export async function countConversations(conversations: Conversations, q: { status?: string | null; tag?: string | null }): Promise<number> {
  return (await allRecords(conversations)).filter((r) => matches(r, q.status, q.tag, conversations)).length;
}

/** `GET /api/conversations?ids=…`: in the order asked, null for an unknown id. */
export async function getConversations(conversations: Conversations, ids: string[]): Promise<(ConversationInfo | null)[]> {
  const out: (ConversationInfo | null)[] = [];
  for (const id of ids) out.push((await conversations.load(id)) ? await conversations.get(id) : null);
  return out;
}

/** `PATCH /api/conversations/{id}`: title and/or tags. */
export async function updateConversation(
  c: Pick<AgentServerParts, 'conversations' | 'redactor'>,
  id: string,
  patch: { title?: string | null; tags?: Record<string, string> | null },
) {
  await c.conversations.require(id);
  if (patch.title !== undefined && patch.title !== null) await c.conversations.setTitle(id, c.redactor.redact(patch.title));
  if (patch.tags !== undefined) await c.conversations.updateData(id, { tags: patch.tags ?? {} });
  return { success: true as const };
}

/** The text of the agent's last answer: its finish message, else its last message. */
export async function agentFinalResponse(c: Pick<AgentServerParts, 'conversations' | 'events'>, id: string): Promise<{ response: string }> {
  await c.conversations.require(id);
  let before: number | null = null;
  for (;;) {
    const page: ParleyEvent[] = await c.events.query(id, { desc: true, limit: 200, beforeSeq: before, source: 'agent' });
    for (const e of page) {
      if (e.kind === 'ActionEvent' && e.action?.kind === 'FinishAction') return { response: e.action.message };
      if (e.kind === 'MessageEvent' && e.llm_message.role === 'assistant') {
        return { response: e.llm_message.content.flatMap((c) => (c.type === 'text' ? [c.text] : [])).join('\n') };
      }
    }
    if (page.length < 200) return { response: '' };
    before = page[page.length - 1]!.seq!;
  }
}

/**
 * `POST …/events/respond_to_confirmation`: the actions waiting for confirmation run (accept) or are
 * answered with a UserRejectObservation each (reject). Only while the conversation waits for one.
 */
export async function respondToConfirmation(c: Pick<AgentServerParts, 'conversations' | 'service'>, id: string, accept: boolean, reason: string | null) {
  await c.conversations.require(id);
  if (c.conversations.status(id) !== 'waiting_for_confirmation') throw new ConflictError('No action is waiting for confirmation');
  await c.service.confirm(id, accept, reason);
  return { success: true as const };
}
