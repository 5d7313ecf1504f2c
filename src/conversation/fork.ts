/**
 * Forking a conversation (OpenHands' `POST /api/conversations/{id}/fork`): a new conversation with the
 * source's events (all of them, or the branch up to `from_event_id`), its agent settings (LLM and key,
 * limits, policy, analyzer, secrets, MCP servers), its title and tags unless the request names others,
 * its token counts when `reset_metrics` is false, and a copy of its workspace. From then on the two are
 * independent: nothing of one is shared with the other.
 *
 * The events are copied with new ids (an event id names one event of one conversation); the references
 * between them (an observation's action, a condensation's forgotten events) follow. A tool call the
 * copy leaves without an answer (the source waited for a confirmation, or was running) is answered with
 * an error in the fork, so its history is one the LLM accepts; the fork is `idle`.
 *
 * The workspace is copied by the sandboxes, never by the daemon on the host: `tar -c` runs inside the
 * source's sandbox (it sees only its workspace, and archives a link as a link) and `tar -x` inside the
 * fork's (it writes only there). A link in the source that points out of the workspace is copied as
 * that link: it leads nowhere the fork's processes could not already go, and the daemon never follows
 * one. A source whose agent swaps a directory for a link while it is copied can only make its own
 * sandbox's view be archived.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import type { Logger } from 'pino';
import { ConflictError, NotFoundError, UnavailableError } from '../errors.js';
import type { EventLog } from '../events/log.js';
import { stateUpdate } from '../events/schema.js';
import type { EventDraft, ParleyEvent } from '../events/types.js';
import { isoTime } from '../iso-time.js';
import type { ProcessLauncher } from '../sandbox/types.js';
import { createWorkspace } from '../sandbox/workspace-dir.js';
import type { Conversations } from './conversations.js';
import type { ParsedRecord, RecordData } from './record-data.js';
import { stillPreparing } from './setup-phase.js';

export interface ForkRequest {
  id?: string | null;
  title?: string | null;
  tags?: Record<string, string> | null;
  reset_metrics: boolean;
  from_event_id?: string | null;
}

interface ForkParts {
  conversations: Conversations;
  events: Pick<EventLog, 'query' | 'get' | 'lastSeq' | 'appendMany' | 'append' | 'end'>;
  /** The conversations' sandboxes: a process in one, and where its workspace is on the host. */
  sandbox: { ready: Promise<void>; forConversation(id: string): ProcessLauncher; hostWorkspace(id: string): string };
  workspaceRoot: string;
  log: Logger;
}

/** Events copied per commit (a fork of a long conversation is written in pages, never held whole). */
const PAGE = 500;
/** How long the workspace copy may take. */
const COPY_TIMEOUT_MS = 10 * 60_000;

/** The source's data a fork keeps (the rest is the source's own history: its creation, its preparation, its goal). */
const KEPT: (keyof RecordData)[] = [
  'llm',
  'max_iterations',
  'stuck_detection',
  'confirmation_policy',
  'security_analyzer',
  'secrets_sealed',
  'selected_repository',
  'selected_branch',
  'branch',
  'git_provider',
  'declared_working_dir',
  'tags',
];
/** Kept too, read from the store when they are too large to be held in memory. */
const KEPT_LARGE = ['conversation_instructions', 'mcp_config_sealed'] as const;

export class Forks {
  constructor(private readonly p: ForkParts) {}

  /** Forks `sourceId`; the new conversation's id. */
  async fork(sourceId: string, req: ForkRequest): Promise<string> {
    const { conversations, events } = this.p;
    const source = await conversations.require(sourceId);
    if (stillPreparing(source.record.data)) throw new ConflictError('The workspace is still being prepared: fork the conversation when it is ready.');
    let upTo = await events.lastSeq(sourceId);
    if (req.from_event_id) {
      const at = await events.get(sourceId, req.from_event_id);
      if (!at?.seq) throw new NotFoundError(`Event not found: ${req.from_event_id}`);
      upTo = at.seq;
    }
    const id = req.id ?? crypto.randomUUID();
    if (await conversations.load(id)) throw new ConflictError(`Conversation with id ${id} already exists`);

    const data: RecordData = { setup: { phase: 'ready' }, forked_from_conversation_id: sourceId, forked_from_event_id: req.from_event_id ?? null };
    const d = source.record.data as Record<string, unknown>;
    for (const k of KEPT) if (d[k] !== undefined) (data as Record<string, unknown>)[k] = d[k];
    for (const k of KEPT_LARGE) {
      const v = await conversations.field(source, k);
      if (v !== undefined) (data as Record<string, unknown>)[k] = v;
    }
    if (req.tags) data.tags = req.tags;
    if (!req.reset_metrics && source.record.data.usage) data.usage = source.record.data.usage;
    const now = isoTime();
    const record: ParsedRecord = {
      id,
      title: req.title ?? source.record.title,
      created_at: now,
      updated_at: now,
      execution_status: 'idle',
      data,
    };

    const copy = new EventCopy();
    const pages = this.pages(sourceId, upTo);
    const first = await pages.next();
    try {
      await conversations.create(record, first.done ? [] : copy.drafts(first.value));
    } catch (err) {
      if (await conversations.load(id)) throw new ConflictError(`Conversation with id ${id} already exists`);
      throw err;
    }
    try {
      for (let page = await pages.next(); !page.done; page = await pages.next()) await events.appendMany(id, copy.drafts(page.value));
      // what the copy left unanswered is answered, and the fork is idle whatever the source's last status was
      await events.appendMany(id, [...copy.unanswered(), stateUpdate('execution_status', 'idle')]);
      await this.copyWorkspace(sourceId, id);
    } catch (err) {
      await this.discard(id);
      throw err;
    }
    this.p.log.info({ conversation_id: id, source: sourceId, events: copy.count }, 'conversation forked');
    return id;
  }

  /** The source's events up to `upTo`, a page at a time. */
  private async *pages(sourceId: string, upTo: number): AsyncGenerator<ParleyEvent[]> {
    for (let after = 0; after < upTo; ) {
      const page = (await this.p.events.query(sourceId, { afterSeq: after, limit: PAGE })).filter((e) => e.seq! <= upTo);
      if (!page.length) return;
      yield page;
      after = page[page.length - 1]!.seq!;
    }
  }

  /** `tar -c` in the source's sandbox piped into `tar -x` in the fork's (see the header). */
  private async copyWorkspace(sourceId: string, forkId: string): Promise<void> {
    const { sandbox } = this.p;
    const from = sandbox.hostWorkspace(sourceId);
    const to = await createWorkspace(this.p.workspaceRoot, forkId);
    if (!fs.existsSync(from)) return; // the source never used its workspace
    await sandbox.ready;
    const src = sandbox.forConversation(sourceId);
    const dst = sandbox.forConversation(forkId);
    const env = src.env({ LC_ALL: 'C' });
    const reader = src.spawn(['tar', '-cf', '-', '.'], { cwd: from, env, stdio: ['ignore', 'pipe', 'pipe'] });
    const writer = dst.spawn(['tar', '-xf', '-'], { cwd: to, env, stdio: ['pipe', 'ignore', 'pipe'] });
    reader.stdout!.pipe(writer.stdin!);
    writer.stdin!.on('error', () => reader.kill('SIGKILL'));
    const timer = setTimeout(() => {
      reader.kill('SIGKILL');
      writer.kill('SIGKILL');
    }, COPY_TIMEOUT_MS);
    const tail = (c: typeof reader) => {
      let text = '';
      c.stderr!.on('data', (b: Buffer) => {
        if (text.length < 2048) text += b.toString('utf8');
      });
      return () => text.trim().split('\n').slice(-2).join(' ');
    };
    const [readerErr, writerErr] = [tail(reader), tail(writer)];
    const exit = (c: typeof reader) => new Promise<number | null>((resolve) => (c.once('error', () => resolve(-1)), c.once('close', (code) => resolve(code))));
    const [r, w] = await Promise.all([exit(reader), exit(writer)]);
    clearTimeout(timer);
    // tar -c says 1 when a file changed while it was read (the source's agent may be working): the copy is what it saw
    if (r !== 0 && r !== 1)
      this.p.log.warn({ conversation_id: forkId, exit: r, stderr: readerErr() }, "some of the source's workspace could not be read for the fork");
    if (w !== 0) throw new UnavailableError(`The workspace could not be copied to the fork (${writerErr() || `tar exit ${w}`}); try again.`);
  }

  /** A fork that failed half way goes, with whatever it left. */
  private async discard(id: string): Promise<void> {
    try {
      await (await this.p.conversations.require(id)).close('deleted');
      await this.p.conversations.remove(id);
      this.p.events.end(id);
    } catch (err) {
      this.p.log.warn({ conversation_id: id, err: String(err) }, 'a failed fork could not be removed');
    }
  }
}

/** The source's events as the fork's: new ids, the references between them following, timestamps kept. */
class EventCopy {
  private readonly ids = new Map<string, string>();
  /** Tool calls recorded and not answered yet, by call id. */
  private readonly open = new Map<string, { tool_name: string; tool_call_id: string }>();
  count = 0;

  drafts(events: ParleyEvent[]): EventDraft[] {
    return events.map((e) => {
      this.count++;
      const id = crypto.randomUUID();
      this.ids.set(e.id, id);
      const { seq: _seq, id: _id, ...rest } = e;
      const draft = { ...rest, id } as EventDraft & Record<string, unknown>;
      if ('action_id' in draft && typeof draft.action_id === 'string') draft.action_id = this.ids.get(draft.action_id) ?? draft.action_id;
      if (e.kind === 'Condensation') draft.forgotten_event_ids = e.forgotten_event_ids.map((f) => this.ids.get(f) ?? f);
      if (e.kind === 'ActionEvent') this.open.set(e.tool_call_id, { tool_name: e.tool_name, tool_call_id: e.tool_call_id });
      if ((e.kind === 'ObservationEvent' || e.kind === 'AgentErrorEvent' || e.kind === 'UserRejectObservation') && e.tool_call_id)
        this.open.delete(e.tool_call_id);
      return draft;
    });
  }

  unanswered(): EventDraft[] {
    return [...this.open.values()].map((a) => ({
      kind: 'AgentErrorEvent',
      source: 'environment',
      tool_name: a.tool_name,
      tool_call_id: a.tool_call_id,
      error: 'This tool call did not run here: the conversation was forked before it ran or was confirmed.',
    }));
  }
}
