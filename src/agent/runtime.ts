/**
 * The agent loop: one run per conversation at most, kept on the conversation (`conv.run`). Each
 * step builds the prompt from the log, calls the LLM with the tool schemas, records ActionEvent →
 * ObservationEvent (or AgentErrorEvent), and moves the status machine. Messages that arrive during a
 * run are taken at the next step; one that arrives as the run ends starts another (`messageArrived`
 * and `afterRun`: the one place of that rule).
 */
import crypto from 'node:crypto';
import type { Logger } from 'pino';
import type * as z from 'zod';
import type { EventLog } from '../events/log.js';
import { stateUpdate, type EventOf } from '../events/schema.js';
import type { EventDraft } from '../events/types.js';
import { mark, tracing } from '../events/turn-trace.js';
import { ConflictError } from '../errors.js';
import { ProviderError } from '../llm/provider-error.js';
import type { LlmClient, LlmRequest, LlmResponse } from '../llm/types.js';
import { actionOf, type Tool, type ToolContext } from '../tools/types.js';
import { metrics } from '../metrics.js';
import type { Redactor } from '../secrets/redact.js';
import { conversationLimits, recordUsage } from './conversation-data.js';
import { condenseHistory, pendingActions, recordInterrupt } from './condense.js';
import { type GoalVerdict, judgeGoal } from './goal-judge.js';
import type { Histories } from './history.js';
import { timedTool } from './instrument.js';
import type { Instructions } from './instructions.js';
import type { AgentConversation, AgentConversations } from './live-conversation.js';
import type { LlmSource } from './llm-source.js';
import { buildSystemPrompt, estimateTokens, eventsToMessages, toolCallInput } from './prompt.js';
import { Run } from './run.js';
import { predictsRisk, RISK_INSTRUCTIONS, shouldConfirm, type StoredAnalyzer, takeRisk } from './security-analyzer.js';
import type { ToolBox } from './tool-box.js';
import { readOnly, ToolSets, type ToolSet } from './tool-sets.js';

interface RuntimeParts {
  conversations: AgentConversations;
  events: EventLog;
  redactor: Redactor;
  llm: LlmSource;
  tools: ToolBox;
  instructions: Instructions;
  histories: Histories;
  /** The conversation's workspace on the host, and how its processes see it (the path, and whether they are sandboxed). */
  workspace: { dir(conv: AgentConversation): string; view(conv: AgentConversation): { dir: string; sandboxed: boolean } };
  maxIterations: number;
  /** Share of the model's context window the prompt may use before condensing. */
  contextBudgetRatio?: number;
  log: Logger;
}

/** What a run set up before its first step: the LLM, the tools and their schemas, the limits. */
interface RunSetup extends ToolSet {
  llm: LlmClient;
  /** The conversation's own LLM and security analyzer the LLM and the schemas were made for: a switch during the run takes effect at the next step. */
  llmData: unknown;
  analyzer: StoredAnalyzer | null | undefined;
  workspaceDir: string;
  maxIterations: number;
  stuckDetection: boolean;
  /** A context-window error was answered by condensing once (a second one ends the run). */
  condensedForContextError: boolean;
}

/** How a step ended: the loop goes on, or the run is over. */
type StepEnd = 'next' | 'stop';

/**
 * How long an LLM call runs before the conversation's sandbox is started for the tools its answer may
 * call. A model answers in hundreds of milliseconds at best, so the sandbox (~30 ms with its network)
 * is still up before the answer; an answer that comes sooner (a local or scripted model) is not held
 * up by the process starts, and one with a tool call starts the sandbox itself.
 */
const PREWARM_AFTER_MS = 20;

const runsStarted = metrics.agentRuns.child();
const steps = metrics.agentSteps.child();

export class AgentRuntime {
  private running = 0;
  private readonly toolSets = new ToolSets();

  constructor(private readonly p: RuntimeParts) {
    metrics.agentRunning.read(() => [[[], this.running]]);
  }

  /** Starts a run loop unless one is active; false when one is already running. */
  start(conv: AgentConversation): boolean {
    if (conv.run) return false;
    const run = new Run();
    conv.run = run;
    this.running++;
    runsStarted.inc();
    mark(conv.id, 'run started');
    run.done = this.loop(conv, run)
      .catch((err) => this.p.log.error({ conversation_id: conv.id, err: this.p.redactor.redact(String(err?.stack ?? err)) }, 'run loop failed'))
      .finally(() => this.afterRun(conv, run));
    return true;
  }

  /**
   * A message was appended to the conversation: a running loop takes it at its next step, and does
   * not finish without looking at it (`afterRun` starts another run for it when it came too late).
   * False when no loop runs here: the caller starts one if the message asked for a run.
   */
  messageArrived(conv: AgentConversation): boolean {
    if (!conv.run) return false;
    conv.run.newInput = true;
    return true;
  }

  /**
   * A message that arrived while the run was ending (after the loop last read the log, before the
   * run was gone: its sender saw a running loop and left it to us) is never stranded: a new run
   * takes it, unless the run ended because the user paused or interrupted it.
   */
  private async afterRun(conv: AgentConversation, run: Run): Promise<void> {
    const id = conv.id;
    if (conv.run === run) conv.run = null;
    this.running--;
    metrics.agentRunsEnded.inc(conv.gone ? 'deleted' : conv.status);
    try {
      const status = conv.gone ? undefined : conv.status;
      if (run.newInput && status !== undefined && status !== 'paused' && status !== 'waiting_for_confirmation' && !run.controller.signal.aborted) {
        if ((await this.p.events.hasUserMessageAfter(id, run.seenSeq)) && !conv.run) {
          this.p.log.debug({ conversation_id: id }, 'a message arrived as the run ended: running again');
          if (conv.status === 'finished' || conv.status === 'stuck') await this.p.conversations.setStatus(id, 'idle');
          if (this.start(conv)) return;
        }
      }
    } catch (err) {
      this.p.log.warn({ conversation_id: id, err: this.p.redactor.redact(String(err)) }, 'checking for messages after a run failed');
    }
    if (!conv.run) this.p.tools.idle(conv);
  }

  /** Stop between steps. */
  pause(conv: AgentConversation): void {
    if (conv.run) conv.run.pauseRequested = true;
  }

  private async loop(conv: AgentConversation, run: Run): Promise<void> {
    try {
      const setup = await this.setUp(conv, run);
      if (!setup) return;
      mark(conv.id, 'run set up');
      if (conv.confirmed) {
        conv.confirmed = false;
        await this.begin(conv, run);
        if ((await this.runConfirmed(conv, run, setup)) === 'stop') return;
      }
      for (let iteration = 1; ; iteration++) {
        if ((await this.step(conv, run, setup, iteration)) === 'stop') return;
      }
    } finally {
      // a commit that failed fails the run (as it did when it was awaited where it was made)
      await run.committed();
    }
  }

  /**
   * The run's status becomes `running`, the first time in one commit with `then` (a first step's system
   * prompt), after the status event; afterwards `then` is appended alone. The status waits for the run's
   * first events so that a step's first commit is one, made while the LLM is asked.
   */
  private begin(conv: AgentConversation, run: Run, then: EventDraft[] = []): Promise<unknown> {
    if (run.begun) return then.length > 0 ? this.p.events.appendMany(conv.id, then) : Promise.resolve();
    run.begun = true;
    return this.p.conversations.setStatus(conv.id, 'running', [], then);
  }

  /** The LLM, the tools and the limits of a run; null (and status error) when no LLM is configured. */
  private async setUp(conv: AgentConversation, run: Run): Promise<RunSetup | null> {
    const llm = await this.p.llm.of(conv);
    if (!llm) {
      await this.begin(conv, run);
      await this.p.events.append(conv.id, {
        kind: 'ConversationErrorEvent',
        source: 'environment',
        code: 'LLMNotConfigured',
        detail: 'No LLM is configured. Set LLM_MODEL (and LLM_API_KEY / LLM_BASE_URL) or POST /api/settings, then run again.',
      });
      await this.p.conversations.setStatus(conv.id, 'error');
      return null;
    }
    const analyzer = conv.record.data.security_analyzer;
    const limits = conversationLimits(conv);
    return {
      ...this.toolSets.of(await this.p.tools.forRun(conv), predictsRisk(analyzer)),
      llm,
      llmData: conv.record.data.llm,
      analyzer,
      workspaceDir: this.p.workspace.dir(conv),
      maxIterations: limits.maxIterations ?? this.p.maxIterations,
      stuckDetection: limits.stuckDetection,
      condensedForContextError: false,
    };
  }

  /** The conversation's LLM or security analyzer changed during the run (switch_llm, switch_profile, security_analyzer): the next request uses the new ones. */
  private async switched(conv: AgentConversation, setup: RunSetup): Promise<void> {
    setup.llmData = conv.record.data.llm;
    setup.llm = (await this.p.llm.of(conv)) ?? setup.llm;
    setup.analyzer = conv.record.data.security_analyzer;
    Object.assign(setup, this.toolSets.of(setup.tools, predictsRisk(setup.analyzer)));
  }

  private async toolContext(conv: AgentConversation, run: Run, setup: RunSetup): Promise<ToolContext> {
    return {
      conversationId: conv.id,
      workspaceDir: setup.workspaceDir,
      signal: run.controller.signal,
      env: await this.p.tools.env(conv),
      redact: (t: string) => this.p.redactor.redact(t),
    };
  }

  /** The actions the user accepted (respond_to_confirmation) run first. */
  private async runConfirmed(conv: AgentConversation, run: Run, setup: RunSetup): Promise<StepEnd> {
    const ctx = await this.toolContext(conv, run, setup);
    let finishedByAction = false;
    for (const a of await pendingActions(this.p.events, conv.id)) {
      const tool = setup.byName.get(a.tool_name);
      const parsed = tool ? (tool.parameters as z.ZodType).safeParse(takeRisk(toolCallInput(a), true, null).input) : undefined;
      if (!tool || !parsed?.success) {
        await this.p.events.append(conv.id, {
          kind: 'AgentErrorEvent',
          source: 'agent',
          tool_name: a.tool_name,
          tool_call_id: a.tool_call_id,
          error: `${a.tool_name} can no longer run (its tool or arguments are not valid now).`,
        });
        continue;
      }
      if ((await this.executeCall(conv, run, ctx, tool, parsed.data, a)) === 'finished') finishedByAction = true;
      if (run.controller.signal.aborted) {
        await recordInterrupt(this.p.events, this.p.conversations, conv.id);
        return 'stop';
      }
    }
    if (finishedByAction && !run.newInput) {
      await this.p.conversations.setStatus(conv.id, 'finished');
      return 'stop';
    }
    return 'next';
  }

  /** One step: the prompt, the LLM's answer, its tool calls run and recorded, then the stuck check. */
  private async step(conv: AgentConversation, run: Run, setup: RunSetup, iteration: number): Promise<StepEnd> {
    const { events, conversations } = this.p;
    const id = conv.id;
    if (run.pauseRequested) {
      await this.begin(conv, run);
      await events.append(id, { kind: 'PauseEvent', source: 'user' });
      await conversations.setStatus(id, 'paused');
      return 'stop';
    }
    if (iteration > setup.maxIterations) {
      await this.begin(conv, run);
      await events.append(id, {
        kind: 'ConversationErrorEvent',
        source: 'environment',
        code: 'MaxIterationsReached',
        detail: `The run stopped after ${setup.maxIterations} steps (max_iterations). Send a message or run again to continue.`,
      });
      await conversations.setStatus(id, 'error');
      return 'stop';
    }
    run.newInput = false;
    if (conv.record.data.llm !== setup.llmData || conv.record.data.security_analyzer !== setup.analyzer) await this.switched(conv, setup);
    const history = await this.p.histories.of(conv);
    run.seenSeq = Math.max(run.seenSeq, history.seq);
    const { messages, systemNotes, chars } = history.view.build();
    const instructions = await this.p.instructions.of(conv, history.view.userTexts, iteration === 1);
    const seen = this.p.workspace.view(conv);
    const system = buildSystemPrompt({
      workspaceDir: seen.dir,
      sandboxed: seen.sandboxed,
      toolNames: setup.tools.map((t) => t.name),
      instructions: [...instructions, ...systemNotes, ...(predictsRisk(setup.analyzer) ? [RISK_INSTRUCTIONS] : [])],
    });
    const prompt: EventDraft[] = history.view.hasSystemPrompt
      ? []
      : [{ kind: 'SystemPromptEvent', source: 'agent', system_prompt: { type: 'text', text: system }, tools: setup.definitions }];
    // committed while the LLM is asked (the answer is recorded after it)
    if (!run.begun || prompt.length > 0) run.unawaited(this.begin(conv, run, prompt));
    const budget = Math.floor(setup.llm.contextWindow * (this.p.contextBudgetRatio ?? 0.8));
    if (estimateTokens(system + setup.specsJson, chars) > budget) {
      await run.committed();
      if (await this.condense(conv, setup.llm, run)) return 'next';
    }

    steps.inc();
    const responseId = crypto.randomUUID();
    mark(id, 'prompt built');
    const response = await this.complete(conv, run, setup, system, messages);
    if (response === 'next' || response === 'stop') return response;
    mark(id, 'LLM answered');
    // what the step appended before asking (the status, the system prompt) is committed before the answer is recorded
    await run.committed();
    await recordUsage(conversations, conv, response.usage);
    mark(id, 'usage recorded');
    if (response.toolCalls.length === 0) {
      const answer: EventDraft = {
        kind: 'MessageEvent',
        source: 'agent',
        llm_response_id: responseId,
        llm_message: { role: 'assistant', content: [{ type: 'text', text: response.text }] },
      };
      if (run.newInput) {
        await events.append(id, answer);
        return 'next';
      }
      // the answer and the status it ends the run with, in one commit (a message that comes meanwhile starts the next run: afterRun)
      await conversations.setStatus(id, 'finished', [answer]);
      return 'stop';
    }
    return this.runToolCalls(conv, run, setup, response, responseId);
  }

  /** The LLM's answer; 'next' after a condensation made room, 'stop' when the run ended (interrupted, or an error recorded). */
  private async complete(conv: AgentConversation, run: Run, setup: RunSetup, system: string, messages: LlmRequest['messages']): Promise<LlmResponse | StepEnd> {
    const { events } = this.p;
    const id = conv.id;
    // the sandbox (and a shell closed while idle) comes up while the LLM takes its time, not before the
    // request: a text answer needs neither, and its process starts would delay an answer that comes at once
    const prewarm = setTimeout(() => void this.p.tools.prewarm(conv).catch(() => {}), PREWARM_AFTER_MS);
    try {
      return await setup.llm.complete({
        system,
        messages,
        tools: setup.specs,
        signal: run.controller.signal,
        onTextDelta: (delta) => events.publishTransient(id, { kind: 'StreamingDeltaEvent', source: 'agent', content: delta }),
        onRetry: ({ attempt, delayMs, error }) =>
          run.unawaited(events.append(id, stateUpdate('llm_retry', { attempt, delay_ms: delayMs, code: error.code, detail: error.detail }))),
        ...(tracing() ? { onPhase: (phase: string) => mark(id, phase) } : {}),
      });
    } catch (err) {
      await run.committed();
      if (run.controller.signal.aborted) {
        await recordInterrupt(events, this.p.conversations, id);
        return 'stop';
      }
      if (err instanceof ProviderError && err.code === 'ContextWindowExceeded' && !setup.condensedForContextError) {
        setup.condensedForContextError = true;
        if (await this.condense(conv, setup.llm, run)) return 'next';
      }
      const code = err instanceof ProviderError ? err.code : 'AgentError';
      const detail = err instanceof ProviderError ? err.detail : `The agent failed: ${(err as Error)?.message ?? String(err)}`;
      await events.append(id, { kind: 'ConversationErrorEvent', source: 'environment', code, detail: this.p.redactor.redact(detail) });
      await this.p.conversations.setStatus(id, 'error');
      return 'stop';
    } finally {
      clearTimeout(prewarm);
    }
  }

  /** The step's tool calls in order, each recorded and answered; then the status they leave and the stuck check. */
  private async runToolCalls(conv: AgentConversation, run: Run, setup: RunSetup, response: LlmResponse, responseId: string): Promise<StepEnd> {
    const { events, conversations } = this.p;
    const id = conv.id;
    const { byName } = setup;
    let finished = false;
    // the policy may have changed during the run: read it at every step
    // a lone finish or think does nothing to confirm (as in OpenHands' agent)
    const harmless = response.toolCalls.every((c) => {
      const t = byName.get(c.name);
      return t !== undefined && readOnly(t);
    });
    // each call's risk (the model's, with the LLM analyzer): the step waits when the policy holds any of them
    const analyzer = conv.record.data.security_analyzer;
    const calls = response.toolCalls.map((call) => {
      const tool = call.error ? undefined : byName.get(call.name);
      return { call, tool, ...takeRisk(call.input, !tool || readOnly(tool), analyzer) };
    });
    const policy = conv.record.data.confirmation_policy;
    const confirm = !harmless && calls.some((c) => c.tool && !c.error && shouldConfirm(policy, c.risk));
    let waiting = false;
    const ctx = await this.toolContext(conv, run, setup);
    for (const [i, { call, tool, input, risk, error: riskError }] of calls.entries()) {
      // interrupted: the calls after the one that was cut short are not recorded (nothing ran them)
      if (run.controller.signal.aborted) break;
      const parsed = tool && !riskError ? (tool.parameters as z.ZodType).safeParse(input) : undefined;
      const action = await events.append(id, {
        kind: 'ActionEvent',
        source: 'agent',
        tool_name: call.name,
        tool_call_id: call.id,
        llm_response_id: responseId,
        thought: i === 0 && response.text ? [{ type: 'text', text: response.text }] : [],
        action: tool && parsed?.success ? actionOf(tool, parsed.data) : null,
        tool_call: { id: call.id, name: call.name, arguments: call.rawInput, origin: 'completion' },
        ...(predictsRisk(analyzer) ? { security_risk: risk } : {}),
      });
      if (run.controller.signal.aborted) break;
      const error = (msg: string) => events.append(id, { kind: 'AgentErrorEvent', source: 'agent', tool_name: call.name, tool_call_id: call.id, error: msg });
      if (!tool || !parsed) {
        await error(call.error ?? riskError ?? `Unknown tool "${call.name}". Available tools: ${[...byName.keys()].join(', ')}.`);
        continue;
      }
      if (!parsed.success) {
        await error(
          `Invalid arguments for ${call.name}: ${parsed.error.issues.map((x) => `${x.path.join('.') || '(root)'}: ${x.message}`).join('; ')}. ` +
            'Fix the arguments and call the tool again.',
        );
        continue;
      }
      if (confirm) {
        waiting = true; // recorded, run once the user accepts (respond_to_confirmation)
        continue;
      }
      const outcome = await this.executeCall(conv, run, ctx, tool, parsed.data, action as EventOf<'ActionEvent'>);
      if (outcome === 'aborted') break;
      if (outcome === 'finished') finished = true;
    }
    if (run.controller.signal.aborted) {
      await recordInterrupt(events, conversations, id);
      return 'stop';
    }
    if (waiting) {
      await conversations.setStatus(id, 'waiting_for_confirmation');
      return 'stop';
    }
    if (finished && !run.newInput) {
      await conversations.setStatus(id, 'finished');
      return 'stop';
    }
    return this.stuckCheck(conv, run, setup);
  }

  /** Stuck detection after a step: status stuck, or a nudge once. */
  private async stuckCheck(conv: AgentConversation, run: Run, setup: RunSetup): Promise<StepEnd> {
    const verdict = setup.stuckDetection === false ? { stuck: false as const } : (await this.p.histories.of(conv)).stuck.verdict(run.nudged);
    if (verdict.stuck) {
      await this.p.events.append(conv.id, {
        kind: 'ConversationErrorEvent',
        source: 'environment',
        code: 'AgentStuck',
        detail: `${verdict.reason} Send a message to continue.`,
      });
      await this.p.conversations.setStatus(conv.id, 'stuck');
      return 'stop';
    }
    if (verdict.nudge) {
      run.nudged = true;
      await this.p.events.append(conv.id, { kind: 'AgentErrorEvent', source: 'environment', error: verdict.nudge });
    }
    return 'next';
  }

  /** Runs one validated tool call and records its observation (or the error that answers it). */
  private async executeCall(
    conv: AgentConversation,
    run: Run,
    ctx: ToolContext,
    tool: Tool,
    input: unknown,
    action: EventOf<'ActionEvent'>,
  ): Promise<'ok' | 'finished' | 'error' | 'aborted'> {
    const { events } = this.p;
    try {
      // the action reaches its subscribers before the tool starts: what a tool does synchronously at its
      // start (a sandbox's first process is a fork of the daemon) would otherwise hold it back
      await afterDelivery();
      const observation = await timedTool(action.tool_name, ctx.signal, () => tool.execute(input, ctx));
      await events.append(conv.id, {
        kind: 'ObservationEvent',
        source: 'environment',
        tool_name: action.tool_name,
        tool_call_id: action.tool_call_id,
        action_id: action.id,
        observation,
      });
    } catch (err) {
      if (run.controller.signal.aborted) return 'aborted';
      await events.append(conv.id, {
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

  /** The conversation waits for confirmation: its pending actions run (accept) or each is answered with a rejection. */
  async confirm(conv: AgentConversation, accept: boolean, reason: string | null): Promise<void> {
    if (conv.run) throw new ConflictError('The conversation is running');
    if (accept) {
      conv.confirmed = true;
      if (!this.start(conv)) conv.confirmed = false;
      return;
    }
    for (const a of await pendingActions(this.p.events, conv.id)) {
      await this.p.events.append(conv.id, {
        kind: 'UserRejectObservation',
        source: 'user',
        tool_name: a.tool_name,
        tool_call_id: a.tool_call_id,
        action_id: a.id,
        rejection_reason: reason || 'User rejected the action',
        rejection_source: 'user',
      });
    }
    await this.p.conversations.setStatus(conv.id, 'idle');
  }

  /** Condense the conversation's history now; false when there is nothing to condense. */
  async condenseNow(conv: AgentConversation): Promise<boolean> {
    if (conv.run) throw new ConflictError('The conversation is running: pause it first');
    return this.condense(conv, await this.requireLlm(conv), { controller: new AbortController() });
  }

  private async condense(conv: AgentConversation, llm: LlmClient, run: Pick<Run, 'controller'>): Promise<boolean> {
    return condenseHistory(this.p.events, conv.id, llm, await this.p.events.after(conv.id), run.controller.signal);
  }

  /** A side question to the LLM with the conversation's context; nothing is added to the conversation. */
  async ask(conv: AgentConversation, question: string): Promise<string> {
    const llm = await this.requireLlm(conv);
    const { messages, systemNotes } = eventsToMessages(await this.p.events.after(conv.id));
    const system = buildSystemPrompt({
      workspaceDir: this.p.workspace.dir(conv),
      toolNames: [],
      instructions: [...systemNotes, 'Answer the question below from what you know of this session; do not call tools.'],
    });
    const res = await llm.complete({ system, messages: [...messages, { role: 'user', content: [{ type: 'text', text: question }] }], tools: [] });
    return this.p.redactor.redact(res.text);
  }

  /** A `/goal` audit: the conversation's LLM judges whether the objective is done, from its history (nothing is added to it). */
  async judge(conv: AgentConversation, objective: string, signal?: AbortSignal): Promise<GoalVerdict> {
    return judgeGoal(await this.requireLlm(conv), objective, await this.p.events.after(conv.id), signal);
  }

  private async requireLlm(conv: AgentConversation): Promise<LlmClient> {
    const llm = await this.p.llm.of(conv);
    if (!llm) throw new ConflictError('No LLM is configured');
    return llm;
  }
}

/**
 * Resolves in the event loop's next turn. What was published is written to the sockets at the end of
 * a turn (the server's writes are batched per turn): a promise or one setImmediate still runs in the
 * same turn, before that.
 */
export function afterDelivery(): Promise<void> {
  return new Promise((resolve) => setImmediate(() => setImmediate(resolve)));
}
