/**
 * The conversation lifecycle: create (or join), send a message, run, pause, interrupt, delete.
 * Knows no HTTP: the router calls it, the bridge calls the router. Conversations and their status
 * live in `Conversations`, events go through the `EventLog`, workspace preparation and the agent
 * run loop are the preparer and the runtime it is given.
 */
import crypto from 'node:crypto';
import type { Logger } from 'pino';
import { ConflictError, RequestValidationError, type ValidationIssue } from '../errors.js';
import type { ContentItem } from '../events/content.js';
import type { EventLog } from '../events/log.js';
import type { EventDraft } from '../events/types.js';
import { isoTime } from '../iso-time.js';
import type { MessageRole } from '../events/schema.js';
import type { Redactor } from '../secrets/redact.js';
import type { Settings } from '../secrets/settings.js';
import { mergeMcpConfig, fullMcpConfig, type McpConfig } from '../secrets/mcp-config.js';
import { normalizeRepository } from '../workspace/git.js';
import type { GitProvider } from '../workspace/providers.js';
import { suggestedTaskProblem, type SuggestedTask } from '../workspace/tasks.js';
import type { Conversations } from './conversations.js';
import { Goals } from './goals.js';
import type { LiveConversation } from './live.js';
import type { ParsedRecord, RecordData } from './record-data.js';
import { parseReplay, replayText, type ReplayPlan } from './replay.js';
import type { ConversationPreparer, ConversationRuntime, PrepareOptions } from './runtime.js';
import { assertFitsEvent, assertItemsFit } from './message-limits.js';
import { stillPreparing } from './setup-phase.js';

/** What a new conversation may ask for (the API validates the request against its own schema). */
interface NewConversation {
  repository?: string | null;
  git_provider?: GitProvider | null;
  selected_branch?: string | null;
  initial_user_msg?: string | null;
  image_urls?: string[] | null;
  replay_json?: string | null;
  suggested_task?: SuggestedTask | null;
  create_microagent?: { repo: string; git_provider?: GitProvider | null; title?: string | null } | null;
  conversation_instructions?: string | null;
  mcp_config?: McpConfig | null;
  conversation_id?: string | null;
}

export interface IncomingMessage {
  role: MessageRole;
  content: ContentItem[];
  /** Start the run loop when it is not running. */
  run: boolean;
}

export interface CreateResult {
  status: 'ok';
  conversation_id: string;
  /** = conversation_id (the agent-server shape's name for it). */
  id: string;
  message: string | null;
  conversation_status: 'STARTING' | 'RUNNING';
}

/** The agent's settings of a conversation a client may change while it lives (its LLM, its security analyzer, its confirmation policy). */
export type AgentSettingsPatch = Partial<Pick<RecordData, 'llm' | 'security_analyzer' | 'confirmation_policy'>>;

export class ConversationService {
  private readonly goals: Goals;

  constructor(
    private readonly conversations: Conversations,
    private readonly events: EventLog,
    private readonly settings: Settings,
    private readonly runtime: ConversationRuntime,
    private readonly preparer: ConversationPreparer,
    private readonly redactor: Redactor,
    private readonly log: Logger,
    /** MAX_EVENT_BYTES: the largest content item a message may carry. */
    private readonly maxEventBytes = 2 * 1024 * 1024,
  ) {
    this.goals = new Goals({ conversations, events, runtime, redactor, log });
  }

  async createConversation(req: NewConversation): Promise<CreateResult> {
    // everything that can be refused is refused now (422), never later in the background
    assertItemsFit([{ text: req.initial_user_msg ?? '' }, { image_urls: req.image_urls ?? [] }], this.maxEventBytes, 'initial_user_msg/image_urls');
    const replay = checkNewConversation(req, this.maxEventBytes);
    // a replay runs its recorded actions, not the LLM: only a message sent meanwhile starts a run
    const willRun = !!(req.initial_user_msg || req.suggested_task || req.create_microagent);
    if (req.conversation_id) {
      const existing = await this.conversations.load(req.conversation_id);
      if (existing) return this.join(existing, req);
    }
    const id = req.conversation_id ?? crypto.randomUUID();
    const now = isoTime();
    const mcp = fullMcpConfig(mergeMcpConfig(await this.settings.defaultMcpConfig(), req.mcp_config));
    const mcpSealed = this.settings.sealMcp(mcp); // its secrets are redacted from here on (the title too)
    const title = deriveTitle({ ...req, initial_user_msg: req.initial_user_msg ?? replayText(replay?.firstMessage ?? null) });
    const record: ParsedRecord = {
      id,
      title: title === null ? null : this.redactor.redact(title),
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
        mcp_config_sealed: mcpSealed,
        setup: { phase: 'pending' },
        // preparation starts the loop when it is done
        run_requested: willRun,
      },
    };
    // the first message is stored with the record, in one commit: a create that answers an error leaves nothing behind
    const first: EventDraft[] = [];
    if (req.initial_user_msg || req.image_urls?.length) first.push(userMessage(req.initial_user_msg ?? '', req.image_urls ?? []));
    if (replay?.firstMessage) first.push({ kind: 'MessageEvent', source: 'user', llm_message: { role: 'user', content: replay.firstMessage } });
    let conv: LiveConversation;
    try {
      conv = await this.conversations.create(record, first);
    } catch (err) {
      // a concurrent create with the same id won: this one joins it
      const existing = req.conversation_id ? await this.conversations.load(id) : null;
      if (existing) return this.join(existing, req);
      throw err;
    }
    this.log.info({ conversation_id: id }, 'conversation created');
    this.launchPreparer(conv, replay ? { replay } : undefined);
    return { status: 'ok', conversation_id: id, id, message: null, conversation_status: willRun || replay ? 'RUNNING' : 'STARTING' };
  }

  /** Starts again every preparation a stop cut short (an existing clone is reused); each runs the loop when done if one was requested. */
  async resumePreparations(take: (id: string) => Promise<boolean> = async () => true): Promise<void> {
    for (const id of await this.conversations.unfinishedSetups()) {
      const loaded = await this.conversations.load(id);
      if (!loaded || loaded.preparation || !(await take(id))) continue;
      const conv = this.conversations.claim(loaded);
      if (conv.preparation) continue;
      this.log.info({ conversation_id: id }, 'resuming workspace preparation after a restart');
      this.launchPreparer(conv);
    }
  }

  /** The preparation runs in this process: `conv.preparation` says so until it ends. */
  private launchPreparer(conv: LiveConversation, opts?: PrepareOptions): void {
    const id = conv.id;
    const preparation = { replay: null };
    conv.preparation = preparation;
    this.preparer
      .prepare(id, opts)
      .catch((err) => this.log.error({ conversation_id: id, err: this.redactor.redact(String(err)) }, 'preparation failed'))
      .finally(() => {
        if (conv.preparation === preparation) conv.preparation = null;
        // nothing of the preparation (a clone, setup.sh, a replay's steps) runs after this line
        this.log.debug({ conversation_id: id }, 'workspace preparation ended');
      });
  }

  private async join(conv: LiveConversation, req: NewConversation): Promise<CreateResult> {
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

  async sendMessage(id: string, msg: IncomingMessage): Promise<{ success: true }> {
    assertItemsFit(msg.content, this.maxEventBytes, 'content');
    const conv = this.conversations.current(id) ?? (await this.conversations.require(id));
    const source = msg.role === 'assistant' ? 'agent' : msg.role === 'tool' ? 'environment' : 'user';
    const message: EventDraft = { kind: 'MessageEvent', source, llm_message: { role: msg.role, content: msg.content } };
    // the message and the status it brings back commit together: an error answer means no event
    if (conv.status === 'finished' || conv.status === 'stuck') await this.conversations.setStatus(id, 'idle', [message]);
    else await this.events.append(id, message);
    // a loop running here takes it (runtime.messageArrived: the one place of that rule); else it starts one if asked to
    const live = this.conversations.claim(conv);
    // the user's own message supersedes a goal loop (the run goes on; the goal is left resumable)
    if (live.goal) void this.goals.stop(id);
    if (!this.runtime.messageArrived(live) && msg.run) this.startRun(live);
    return { success: true };
  }

  /** Start the loop if it can run now; preparation still under way starts it when ready. */
  private startRun(conv: LiveConversation): boolean {
    // every phase before 'ready' (pending, preparing, cloning, checking_out, cloned, replaying) waits
    if (stillPreparing(conv.record.data)) {
      this.conversations.requestRun(conv);
      // a preparation the daemon's restart cut short is started again; it runs the loop when done
      if (!conv.preparation) this.launchPreparer(conv);
      return true;
    }
    return this.runtime.start(conv);
  }

  async run(id: string): Promise<{ success: true }> {
    const conv = this.conversations.claim(await this.conversations.require(id));
    if (conv.run) throw new ConflictError('Conversation already running. Wait for completion or pause first.');
    this.startRun(conv);
    return { success: true };
  }

  async pause(id: string): Promise<{ success: true }> {
    const conv = await this.conversations.require(id);
    if (conv.run) this.runtime.pause(conv);
    else if (conv.status === 'idle') {
      await this.events.append(id, { kind: 'PauseEvent', source: 'user' });
      await this.conversations.setStatus(id, 'paused');
    }
    return { success: true };
  }

  async interrupt(id: string): Promise<{ success: true }> {
    // also when no run is active: the conversation's processes (background jobs) are stopped
    await (await this.conversations.require(id)).close('interrupted');
    return { success: true };
  }

  async deleteConversation(id: string): Promise<{ success: true }> {
    await (await this.conversations.require(id)).close('deleted');
    await this.conversations.remove(id);
    this.events.end(id); // its subscribers are closed, here and on every other node
    this.log.info({ conversation_id: id }, 'conversation deleted');
    return { success: true };
  }

  /** The actions waiting for confirmation run (accept) or are answered with a rejection each. */
  async confirm(id: string, accept: boolean, reason: string | null): Promise<void> {
    await this.runtime.confirm(this.conversations.claim(await this.conversations.require(id)), accept, reason);
  }

  /** Condense the conversation's history now; false when there is nothing to condense. */
  async condense(id: string): Promise<boolean> {
    return this.runtime.condenseNow(await this.conversations.require(id));
  }

  /** A question to the agent outside the conversation's history. */
  async ask(id: string, question: string): Promise<string> {
    return this.runtime.ask(await this.conversations.require(id), question);
  }

  /** Changes the agent's settings where its loop runs: the run under way uses them from its next step. */
  async updateAgentSettings(id: string, patch: AgentSettingsPatch): Promise<{ success: true }> {
    await this.conversations.require(id);
    await this.conversations.updateData(id, patch);
    return { success: true };
  }

  /** A `/goal` loop in the conversation (goals.ts). */
  startGoal(id: string, objective: string, maxIterations: number): Promise<{ success: true }> {
    return this.goals.start(id, objective, maxIterations);
  }

  stopGoal(id: string): Promise<{ success: true }> {
    return this.goals.stop(id);
  }

  resumeGoal(id: string): Promise<{ success: true }> {
    return this.goals.resume(id);
  }
}

/**
 * Every operation on a conversation's lifecycle, as the API calls it: the service's public methods
 * (no other list of them), run by the service itself on one node, and with several by the cluster's
 * routed operations in front of it (`routedOps` in src/cluster/node.ts, which the compiler holds to
 * this type: a new public method is routed or the build fails).
 */
export type ConversationOps = Pick<ConversationService, keyof ConversationService>;

function contentOf(text: string, imageUrls: string[]): ContentItem[] {
  const content: ContentItem[] = [];
  if (text) content.push({ type: 'text', text, cache_prompt: false });
  if (imageUrls.length) content.push({ type: 'image', image_urls: imageUrls, cache_prompt: false });
  return content;
}

function userMessage(text: string, imageUrls: string[]): EventDraft {
  return { kind: 'MessageEvent', source: 'user', llm_message: { role: 'user', content: contentOf(text, imageUrls) } };
}

/**
 * The checks of a new conversation that the schema cannot express (all reported at once, 422):
 * replay_json parses into a plan and comes without another first message; repository names are
 * `owner/repo`; a suggested task is a combination its templates support.
 */
function checkNewConversation(req: NewConversation, maxEventBytes: number): ReplayPlan | null {
  const issues: ValidationIssue[] = [];
  const valueError = (loc: (string | number)[], msg: string) => issues.push({ type: 'value_error', loc: ['body', ...loc], msg: `Value error, ${msg}` });
  let plan: ReplayPlan | null = null;
  if (req.replay_json) {
    const other = req.initial_user_msg
      ? 'initial_user_msg'
      : req.image_urls?.length
        ? 'image_urls'
        : req.suggested_task
          ? 'suggested_task'
          : req.create_microagent
            ? 'create_microagent'
            : null;
    if (other) valueError(['replay_json'], `replay_json cannot be combined with ${other}: a replay supplies its own first message`);
    const parsed = parseReplay(req.replay_json);
    if (parsed.ok) plan = parsed.plan;
    else issues.push(...parsed.issues);
    // each replayed item becomes an event: one over MAX_EVENT_BYTES is refused (413), not cut
    if (plan?.firstMessage) assertFitsEvent(plan.firstMessage, maxEventBytes, 'replay_json (its first user message)');
    for (const step of plan?.steps ?? []) assertFitsEvent(step, maxEventBytes, `replay_json[${step.index}]`);
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
    const problem = suggestedTaskProblem({ ...task, git_provider: task.git_provider ?? req.git_provider ?? undefined });
    if (problem) valueError(['suggested_task', problem.field], problem.message);
  }
  if (issues.length) throw new RequestValidationError(issues);
  return plan;
}

export function deriveTitle(req: NewConversation): string | null {
  const t = req.suggested_task?.title ?? req.create_microagent?.title ?? req.initial_user_msg ?? req.repository;
  if (!t) return null;
  const line = t.trim().split('\n')[0] ?? '';
  return line.length > 60 ? `${line.slice(0, 57)}...` : line || null;
}
