/**
 * The agent loop: one run per conversation at most. Each step builds the prompt from the log,
 * calls the LLM with the tool schemas, records ActionEvent → ObservationEvent (or AgentErrorEvent),
 * and moves the status machine. Messages that arrive during a run are taken at the next step.
 */
import crypto from 'node:crypto';
import type { Logger } from 'pino';
import { z } from 'zod';
import type { AgentConversations } from './conversation-data.js';
import type { EventLog } from '../events/log.js';
import { stateUpdate, type EventOf, type ParleyEvent } from '../events/schema.js';
import { ConflictError } from '../errors.js';
import { ProviderError } from '../llm/provider-error.js';
import type { LlmClient, LlmResponse, LlmToolSpec } from '../llm/types.js';
import { actionOf, type Tool, type ToolContext } from '../tools/types.js';
import { metrics } from '../metrics.js';
import type { Redactor } from '../secrets/redact.js';
import { timedTool } from './instrument.js';
import { buildSystemPrompt, estimateTokens, eventsToMessages, MessageView, toolCallInput } from './prompt.js';
import { StuckWindow } from './stuck.js';

interface AgentDeps {
  /** The LLM for this conversation, or null when none is configured. */
  llm(conversationId: string): Promise<LlmClient | null>;
  tools(conversationId: string): Promise<Tool[]>;
  workspaceDir(conversationId: string): string;
  /** How the agent sees its workspace: the path its processes see and whether they are sandboxed. */
  workspaceView?(conversationId: string): { dir: string; sandboxed: boolean };
  env(conversationId: string): Promise<Record<string, string>>;
  /**
   * The instructions of the system prompt: the conversation's, the repository's (read from the
   * workspace when `reload`: at a run's first step) and the knowledge the user's messages trigger.
   */
  instructions(conversationId: string, userTexts: string[], reload: boolean): Promise<string[]>;
  maxIterations: number;
  /** Share of the model's context window the prompt may use before condensing. */
  contextBudgetRatio?: number;
  /** Release per-conversation resources (shells, MCP servers). */
  release(conversationId: string): Promise<void>;
  /** The daemon stops: release every conversation's resources. */
  releaseAll(): Promise<void>;
  /** An interrupt: stop every process the conversation runs (its sandbox), background ones included. */
  interrupted?(conversationId: string): Promise<void>;
  /** A run ended and no other run follows: the conversation is idle (e.g. stop its MCP servers later). */
  idle?(conversationId: string): void;
  /** The conversation's own step limit and stuck detection (agent-server create); absent: the defaults. */
  limits?(conversationId: string): Promise<{ maxIterations: number | null; stuckDetection: boolean; confirm: boolean }>;
  /** Token counts of each LLM call of the conversation (its `stats`). */
  usage?(conversationId: string, usage: LlmResponse['usage']): Promise<void>;
}

interface Run {
  controller: AbortController;
  pauseRequested: boolean;
  /** Set when a message arrives: the loop must not finish without looking at it. */
  newInput: boolean;
  done: Promise<void>;
  nudged: boolean;
  /** The newest event seq the loop has read: a user message after it has not been seen. */
  seenSeq: number;
}

class Interrupted extends Error {}

/** The plug between the conversation service and whatever runs the agent. */
export interface AgentRuntime {
  /** Starts a run loop unless one is active; false when one is already running. */
  start(conversationId: string): boolean;
  isRunning(conversationId: string): boolean;
  /** A message arrived: a running loop takes it at its next step. */
  notifyMessage(conversationId: string): void;
  /** Stop between steps. */
  pause(conversationId: string): Promise<void>;
  /** Cancel the in-flight LLM call or tool now. */
  interrupt(conversationId: string): Promise<void>;
  /** The conversation is being deleted: stop everything it owns. */
  dispose(conversationId: string): Promise<void>;
  close(): Promise<void>;
  /** Condense the conversation's history now; false when there is nothing to condense. */
  condense?(conversationId: string): Promise<boolean>;
  /** A side question to the LLM with the conversation's context; nothing is added to the conversation. */
  ask?(conversationId: string, question: string): Promise<string>;
  /** The conversation waits for confirmation: run its pending actions (accept) or reject them. */
  confirm?(conversationId: string, accept: boolean, reason: string | null): Promise<void>;
}

/** What a conversation's steps read, kept up to date with the log instead of reread at every step. */
interface History {
  view: MessageView;
  stuck: StuckWindow;
  /** The newest seq taken in. */
  seq: number;
}

/** Histories kept for conversations run recently (the least recently run is dropped beyond this). */
const MAX_HISTORIES = 64;

const runsStarted = metrics.agentRuns.child();
const steps = metrics.agentSteps.child();

export class AgentRuntimeImpl implements AgentRuntime {
  private runs = new Map<string, Run>();
  private histories = new Map<string, History>();
  private rerun = new Set<string>();
  /** Conversations whose actions waiting for confirmation were accepted: the next run executes them first. */
  private confirmed = new Set<string>();

  constructor(
    private readonly conversations: AgentConversations,
    private readonly events: EventLog,
    private readonly redactor: Redactor,
    private readonly deps: AgentDeps,
    private readonly log: Logger,
  ) {
    metrics.agentRunning.read(() => [[[], this.runs.size]]);
  }

  isRunning(id: string): boolean {
    return this.runs.has(id);
  }

  start(id: string): boolean {
    if (this.runs.has(id)) return false;
    const run: Run = { controller: new AbortController(), pauseRequested: false, newInput: false, done: Promise.resolve(), nudged: false, seenSeq: 0 };
    this.runs.set(id, run);
    this.conversations.loopHere(id, true);
    runsStarted.inc();
    run.done = this.loop(id, run)
      .catch((err) => this.log.error({ conversation_id: id, err: this.redactor.redact(String(err?.stack ?? err)) }, 'run loop failed'))
      .finally(() => this.afterRun(id, run));
    return true;
  }

  /**
   * A message that arrived while the run was ending (after the loop last read the log, before the
   * run was gone: its sender saw a running loop and left it to us) is never stranded: a new run
   * takes it, unless the run ended because the user paused or interrupted it.
   */
  private async afterRun(id: string, run: Run): Promise<void> {
    this.runs.delete(id);
    this.conversations.loopHere(id, false);
    metrics.agentRunsEnded.inc(this.conversations.status(id) ?? 'deleted');
    try {
      const pending = this.rerun.delete(id) || run.newInput;
      const status = this.conversations.status(id);
      if (pending && status !== undefined && status !== 'paused' && status !== 'waiting_for_confirmation' && !run.controller.signal.aborted) {
        if ((await this.events.hasUserMessageAfter(id, run.seenSeq)) && !this.runs.has(id)) {
          this.log.debug({ conversation_id: id }, 'a message arrived as the run ended: running again');
          if (this.conversations.status(id) === 'finished' || this.conversations.status(id) === 'stuck') await this.conversations.setStatus(id, 'idle');
          if (this.start(id)) return;
        }
      }
    } catch (err) {
      this.log.warn({ conversation_id: id, err: this.redactor.redact(String(err)) }, 'checking for messages after a run failed');
    }
    if (!this.runs.has(id)) this.deps.idle?.(id);
  }

  notifyMessage(id: string): void {
    const run = this.runs.get(id);
    if (run) run.newInput = true;
    else this.rerun.add(id);
  }

  async pause(id: string): Promise<void> {
    const run = this.runs.get(id);
    if (run) run.pauseRequested = true;
  }

  async interrupt(id: string): Promise<void> {
    const run = this.runs.get(id);
    if (run) {
      run.controller.abort(new Interrupted('interrupted'));
      await Promise.race([run.done, new Promise((r) => setTimeout(r, 5000))]);
    }
    await this.deps.interrupted?.(id);
  }

  /**
   * The conversation's history with every event committed so far: only the events after the ones
   * already taken are read; built from the whole log the first time (after a start) and again after
   * a condensation.
   */
  private async history(id: string): Promise<History> {
    let h = this.histories.get(id);
    if (h) {
      const fresh = await this.events.after(id, h.seq);
      h.view.add(fresh);
      h.stuck.add(fresh);
      h.seq = fresh[fresh.length - 1]?.seq ?? h.seq;
    }
    if (!h || h.view.stale) {
      const all = await this.events.after(id);
      h = { view: MessageView.of(all), stuck: new StuckWindow(), seq: all[all.length - 1]?.seq ?? 0 };
      h.stuck.add(all);
    }
    this.histories.delete(id); // re-inserted: the map's order is the order conversations were last used
    this.histories.set(id, h);
    if (this.histories.size > MAX_HISTORIES) this.histories.delete(this.histories.keys().next().value!);
    return h;
  }

  async dispose(id: string): Promise<void> {
    this.histories.delete(id);
    await this.interrupt(id);
    await this.deps.release(id);
  }

  async close(): Promise<void> {
    await Promise.all([...this.runs.keys()].map((id) => this.interrupt(id)));
    await this.deps.releaseAll();
  }

  private async loop(id: string, run: Run): Promise<void> {
    const eventLog = this.events;
    const conversations = this.conversations;
    await conversations.setStatus(id, 'running');
    const llm = await this.deps.llm(id);
    if (!llm) {
      await eventLog.append(id, {
        kind: 'ConversationErrorEvent',
        source: 'environment',
        code: 'LLMNotConfigured',
        detail: 'No LLM is configured. Set LLM_MODEL (and LLM_API_KEY / LLM_BASE_URL) or POST /api/settings, then run again.',
      });
      await conversations.setStatus(id, 'error');
      return;
    }
    const tools = await this.deps.tools(id);
    const byName = new Map(tools.map((t) => [t.name, t]));
    const specs: LlmToolSpec[] = tools.map((t) => ({
      name: t.name,
      description: t.description,
      inputSchema:
        t.jsonSchema ?? stripSchemaMeta(z.toJSONSchema(t.parameters as z.ZodType, { io: 'input', unrepresentable: 'any' }) as Record<string, unknown>),
    }));
    const specsJson = JSON.stringify(specs);
    const workspaceDir = this.deps.workspaceDir(id);
    const limits = await this.deps.limits?.(id);
    const maxIterations = limits?.maxIterations ?? this.deps.maxIterations;
    let condensedForContextError = false;

    if (this.confirmed.delete(id)) {
      const ctx = {
        conversationId: id,
        workspaceDir,
        signal: run.controller.signal,
        env: await this.deps.env(id),
        redact: (t: string) => this.redactor.redact(t),
      } satisfies ToolContext;
      let finishedByAction = false;
      for (const a of await this.pendingActions(id)) {
        const tool = byName.get(a.tool_name);
        const parsed = tool ? (tool.parameters as z.ZodType).safeParse(toolCallInput(a)) : undefined;
        if (!tool || !parsed?.success) {
          await eventLog.append(id, {
            kind: 'AgentErrorEvent',
            source: 'agent',
            tool_name: a.tool_name,
            tool_call_id: a.tool_call_id,
            error: `${a.tool_name} can no longer run (its tool or arguments are not valid now).`,
          });
          continue;
        }
        if ((await this.executeCall(id, run, ctx, tool, parsed.data, a)) === 'finished') finishedByAction = true;
        if (run.controller.signal.aborted) return this.afterInterrupt(id);
      }
      if (finishedByAction && !run.newInput) {
        await conversations.setStatus(id, 'finished');
        return;
      }
    }

    for (let iteration = 1; ; iteration++) {
      if (run.pauseRequested) {
        await eventLog.append(id, { kind: 'PauseEvent', source: 'user' });
        await conversations.setStatus(id, 'paused');
        return;
      }
      if (iteration > maxIterations) {
        await eventLog.append(id, {
          kind: 'ConversationErrorEvent',
          source: 'environment',
          code: 'MaxIterationsReached',
          detail: `The run stopped after ${maxIterations} steps (max_iterations). Send a message or run again to continue.`,
        });
        await conversations.setStatus(id, 'error');
        return;
      }
      run.newInput = false;
      const history = await this.history(id);
      run.seenSeq = Math.max(run.seenSeq, history.seq);
      const { messages, systemNotes, chars } = history.view.build();
      const instructions = await this.deps.instructions(id, history.view.userTexts, iteration === 1);
      const seen = this.deps.workspaceView?.(id) ?? { dir: workspaceDir, sandboxed: false };
      const system = buildSystemPrompt({
        workspaceDir: seen.dir,
        sandboxed: seen.sandboxed,
        toolNames: tools.map((t) => t.name),
        instructions: [...instructions, ...systemNotes],
      });
      if (!history.view.hasSystemPrompt) {
        const definitions = tools.map((t, i) => ({
          kind: t.kind,
          name: t.name,
          title: t.name,
          description: t.description,
          parameters: specs[i]!.inputSchema,
          action_type: t.actionKind,
        }));
        await eventLog.append(id, { kind: 'SystemPromptEvent', source: 'agent', system_prompt: { type: 'text', text: system }, tools: definitions });
      }
      const budget = Math.floor(llm.contextWindow * (this.deps.contextBudgetRatio ?? 0.8));
      if (estimateTokens(system + specsJson, chars) > budget && (await this.condenseHistory(id, llm, await this.events.after(id), run))) continue;

      steps.inc();
      let response: LlmResponse;
      const responseId = crypto.randomUUID();
      try {
        response = await llm.complete({
          system,
          messages,
          tools: specs,
          signal: run.controller.signal,
          onTextDelta: (delta) => eventLog.publishTransient(id, { kind: 'StreamingDeltaEvent', source: 'agent', content: delta }),
          onRetry: ({ attempt, delayMs, error }) =>
            void eventLog.append(id, stateUpdate('llm_retry', { attempt, delay_ms: delayMs, code: error.code, detail: error.detail })),
        });
      } catch (err) {
        if (run.controller.signal.aborted) return this.afterInterrupt(id);
        if (err instanceof ProviderError && err.code === 'ContextWindowExceeded' && !condensedForContextError) {
          condensedForContextError = true;
          if (await this.condenseHistory(id, llm, await this.events.after(id), run)) continue;
        }
        const code = err instanceof ProviderError ? err.code : 'AgentError';
        const detail = err instanceof ProviderError ? err.detail : `The agent failed: ${(err as Error)?.message ?? String(err)}`;
        await eventLog.append(id, { kind: 'ConversationErrorEvent', source: 'environment', code, detail: this.redactor.redact(detail) });
        await conversations.setStatus(id, 'error');
        return;
      }

      await this.deps.usage?.(id, response.usage);
      if (response.toolCalls.length === 0) {
        await eventLog.append(id, {
          kind: 'MessageEvent',
          source: 'agent',
          llm_response_id: responseId,
          llm_message: { role: 'assistant', content: [{ type: 'text', text: response.text }] },
        });
        if (run.newInput) continue;
        await conversations.setStatus(id, 'finished');
        return;
      }

      let finished = false;
      // the policy may have changed during the run: read it at every step
      // a lone finish or think does nothing to confirm (as in OpenHands' agent)
      const harmless = response.toolCalls.every((c) => byName.get(c.name)?.actionKind === 'FinishAction' || byName.get(c.name)?.actionKind === 'ThinkAction');
      const confirm = !harmless && (await this.deps.limits?.(id))?.confirm === true;
      let waiting = false;
      const ctxBase = {
        conversationId: id,
        workspaceDir,
        signal: run.controller.signal,
        env: await this.deps.env(id),
        redact: (t: string) => this.redactor.redact(t),
      } satisfies ToolContext;
      for (const [i, call] of response.toolCalls.entries()) {
        // interrupted: the calls after the one that was cut short are not recorded (nothing ran them)
        if (run.controller.signal.aborted) break;
        const tool = call.error ? undefined : byName.get(call.name);
        const parsed = tool ? (tool.parameters as z.ZodType).safeParse(call.input) : undefined;
        const action = await eventLog.append(id, {
          kind: 'ActionEvent',
          source: 'agent',
          tool_name: call.name,
          tool_call_id: call.id,
          llm_response_id: responseId,
          thought: i === 0 && response.text ? [{ type: 'text', text: response.text }] : [],
          action: tool && parsed?.success ? actionOf(tool, parsed.data) : null,
          tool_call: { id: call.id, name: call.name, arguments: call.rawInput, origin: 'completion' },
        });
        if (run.controller.signal.aborted) break;
        const error = (msg: string) =>
          eventLog.append(id, { kind: 'AgentErrorEvent', source: 'agent', tool_name: call.name, tool_call_id: call.id, error: msg });
        if (!tool || !parsed) {
          await error(call.error ?? `Unknown tool "${call.name}". Available tools: ${[...byName.keys()].join(', ')}.`);
          continue;
        }
        if (!parsed.success) {
          await error(
            `Invalid arguments for ${call.name}: ${parsed.error.issues.map((x) => `${x.path.join('.') || '(root)'}: ${x.message}`).join('; ')}. Fix the arguments and call the tool again.`,
          );
          continue;
        }
        if (confirm) {
          waiting = true; // recorded, run once the user accepts (respond_to_confirmation)
          continue;
        }
        const outcome = await this.executeCall(id, run, ctxBase, tool, parsed.data, action as EventOf<'ActionEvent'>);
        if (outcome === 'aborted') break;
        if (outcome === 'finished') finished = true;
      }
      if (run.controller.signal.aborted) return this.afterInterrupt(id);
      if (waiting) {
        await conversations.setStatus(id, 'waiting_for_confirmation');
        return;
      }
      if (finished && !run.newInput) {
        await conversations.setStatus(id, 'finished');
        return;
      }
      const verdict = limits?.stuckDetection === false ? { stuck: false as const } : (await this.history(id)).stuck.verdict(run.nudged);
      if (verdict.stuck) {
        await eventLog.append(id, {
          kind: 'ConversationErrorEvent',
          source: 'environment',
          code: 'AgentStuck',
          detail: `${verdict.reason} Send a message to continue.`,
        });
        await conversations.setStatus(id, 'stuck');
        return;
      }
      if (verdict.nudge) {
        run.nudged = true;
        await eventLog.append(id, { kind: 'AgentErrorEvent', source: 'environment', error: verdict.nudge });
      }
    }
  }

  /** Runs one validated tool call and records its observation (or the error that answers it). */
  private async executeCall(
    id: string,
    run: Run,
    ctx: ToolContext,
    tool: Tool,
    input: unknown,
    action: EventOf<'ActionEvent'>,
  ): Promise<'ok' | 'finished' | 'error' | 'aborted'> {
    const eventLog = this.events;
    try {
      const observation = await timedTool(action.tool_name, ctx.signal, () => tool.execute(input, ctx));
      await eventLog.append(id, {
        kind: 'ObservationEvent',
        source: 'environment',
        tool_name: action.tool_name,
        tool_call_id: action.tool_call_id,
        action_id: action.id,
        observation,
      });
    } catch (err) {
      if (run.controller.signal.aborted) return 'aborted';
      await eventLog.append(id, {
        kind: 'AgentErrorEvent',
        source: 'agent',
        tool_name: action.tool_name,
        tool_call_id: action.tool_call_id,
        error: `${action.tool_name} failed: ${(err as Error)?.message ?? String(err)}`,
      });
      return 'error';
    }
    return tool.actionKind === 'FinishAction' ? 'finished' : 'ok';
  }

  /** Tool calls recorded with a runnable action and not answered yet (waiting for confirmation). */
  private async pendingActions(id: string): Promise<EventOf<'ActionEvent'>[]> {
    const events = await this.events.after(id);
    const answered = new Set<string>();
    for (const e of events)
      if ((e.kind === 'ObservationEvent' || e.kind === 'AgentErrorEvent' || e.kind === 'UserRejectObservation') && e.tool_call_id) answered.add(e.tool_call_id);
    return events.filter((e): e is EventOf<'ActionEvent'> => e.kind === 'ActionEvent' && e.action !== null && !answered.has(e.tool_call_id));
  }

  async confirm(id: string, accept: boolean, reason: string | null): Promise<void> {
    if (this.runs.has(id)) throw new ConflictError('The conversation is running');
    if (accept) {
      this.confirmed.add(id);
      if (!this.start(id)) this.confirmed.delete(id);
      return;
    }
    for (const a of await this.pendingActions(id)) {
      await this.events.append(id, {
        kind: 'UserRejectObservation',
        source: 'user',
        tool_name: a.tool_name,
        tool_call_id: a.tool_call_id,
        action_id: a.id,
        rejection_reason: reason || 'User rejected the action',
        rejection_source: 'user',
      });
    }
    await this.conversations.setStatus(id, 'idle');
  }

  async condense(id: string): Promise<boolean> {
    if (this.runs.has(id)) throw new ConflictError('The conversation is running: pause it first');
    const llm = await this.requireLlm(id);
    const controller = new AbortController();
    return this.condenseHistory(id, llm, await this.events.after(id), { controller });
  }

  async ask(id: string, question: string): Promise<string> {
    const llm = await this.requireLlm(id);
    const { messages, systemNotes } = eventsToMessages(await this.events.after(id));
    const system = buildSystemPrompt({
      workspaceDir: this.deps.workspaceDir(id),
      toolNames: [],
      instructions: [...systemNotes, 'Answer the question below from what you know of this session; do not call tools.'],
    });
    const res = await llm.complete({ system, messages: [...messages, { role: 'user', content: [{ type: 'text', text: question }] }], tools: [] });
    return this.redactor.redact(res.text);
  }

  private async requireLlm(id: string): Promise<LlmClient> {
    const llm = await this.deps.llm(id);
    if (!llm) throw new ConflictError('No LLM is configured');
    return llm;
  }

  /** Every tool call left without a result gets an AgentErrorEvent; status paused. */
  private async afterInterrupt(id: string): Promise<void> {
    const eventLog = this.events;
    const conversations = this.conversations;
    const events = await this.events.after(id);
    const answered = new Set<string>();
    for (const e of events)
      if ((e.kind === 'ObservationEvent' || e.kind === 'AgentErrorEvent' || e.kind === 'UserRejectObservation') && e.tool_call_id) answered.add(e.tool_call_id);
    for (const a of events) {
      if (a.kind === 'ActionEvent' && !answered.has(a.tool_call_id)) {
        await eventLog.append(id, {
          kind: 'AgentErrorEvent',
          source: 'agent',
          tool_name: a.tool_name,
          tool_call_id: a.tool_call_id,
          error: 'Tool call interrupted before completion. The conversation was paused.',
        });
      }
    }
    await eventLog.append(id, { kind: 'InterruptEvent', source: 'user' });
    await conversations.setStatus(id, 'paused');
  }

  /** Summarise the older half of the history into a Condensation event. False when nothing can be condensed. */
  private async condenseHistory(id: string, llm: LlmClient, events: ParleyEvent[], run: Pick<Run, 'controller'>): Promise<boolean> {
    let previous: EventOf<'Condensation'> | undefined;
    for (const e of events) if (e.kind === 'Condensation') previous = e;
    const already = new Set(previous?.forgotten_event_ids ?? []);
    const candidates = events.filter(
      (e) => !already.has(e.id) && e.kind !== 'SystemPromptEvent' && e.kind !== 'Condensation' && e.kind !== 'ConversationStateUpdateEvent',
    );
    if (candidates.length < 4) return false;
    let cut = Math.floor(candidates.length / 2);
    // never split an action from its result: move the cut past any ObservationEvent
    const answersACall = (e: ParleyEvent) =>
      e.kind === 'ObservationEvent' || e.kind === 'UserRejectObservation' || (e.kind === 'AgentErrorEvent' && !!e.tool_call_id);
    while (cut < candidates.length && answersACall(candidates[cut]!)) cut++;
    const forget = candidates.slice(0, cut);
    const { messages } = eventsToMessages([...(previous ? [previous] : []), ...forget]);
    const transcript = JSON.stringify(messages).slice(0, Math.floor(llm.contextWindow * 2));
    const res = await llm.complete({
      system:
        'You summarise the history of a coding agent session. Keep: the user goals and requirements, decisions made, files changed, commands run and their important results, and what remains to do. Be concise and factual.',
      messages: [{ role: 'user', content: [{ type: 'text', text: `Summarise this session history:\n${transcript}` }] }],
      tools: [],
      signal: run.controller.signal,
    });
    await this.events.append(id, {
      kind: 'Condensation',
      source: 'environment',
      forgotten_event_ids: [...already, ...forget.map((e) => e.id)],
      summary: res.text,
    });
    return true;
  }
}

function stripSchemaMeta(schema: Record<string, unknown>): Record<string, unknown> {
  const { $schema: _s, ...rest } = schema;
  return rest;
}
