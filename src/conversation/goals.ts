/**
 * A `/goal` loop inside a conversation (OpenHands' `POST …/goal`, `/goal/stop`, `/goal/resume`): the
 * objective is sent as a user message and the agent runs; after each run the judge (the
 * conversation's LLM, src/agent/goal-judge.ts) audits the transcript, and the loop either ends
 * (`complete`, or `capped` after `max_iterations` audits) or sends a follow-up naming what remains
 * and runs again. Everything happens in the conversation's own history and event stream.
 *
 * The loop runs in this process, on the live conversation (`conv.goal`); its state is the record's
 * `goal` (shown in the info) and a `goal` state update at each step (start, each audit, the end), so
 * a client following the socket sees it move, and a restart or a stop leaves it resumable. A run
 * that ends paused, in error or waiting for confirmation interrupts the goal (a stuck run goes on to
 * the judge, whose follow-up gets the agent out of its loop); a user's own message supersedes it.
 */
import type { Logger } from 'pino';
import { followUp, RESUME_TEXT } from '../agent/goal-judge.js';
import { BadRequestError, ConflictError } from '../errors.js';
import type { EventLog } from '../events/log.js';
import { type GoalState, stateUpdate } from '../events/schema.js';
import type { EventDraft } from '../events/types.js';
import type { Redactor } from '../secrets/redact.js';
import type { Conversations } from './conversations.js';
import { GoalLoop } from './goal-loop.js';
import type { LiveConversation } from './live.js';
import type { ConversationRuntime } from './runtime.js';
import { stillPreparing } from './setup-phase.js';

interface GoalParts {
  conversations: Conversations;
  events: Pick<EventLog, 'append'>;
  runtime: Pick<ConversationRuntime, 'start' | 'judge'>;
  redactor: Pick<Redactor, 'redact'>;
  log: Logger;
}

const BUSY = 'Conversation run or goal loop already running.';

export class Goals {
  constructor(private readonly p: GoalParts) {}

  /** Starts a loop; 400 for an empty objective, 409 while a run or a goal is active. */
  async start(id: string, objective: string, maxIterations: number): Promise<{ success: true }> {
    if (!objective.trim()) throw new BadRequestError('Goal objective must not be empty.');
    const conv = this.idle(await this.p.conversations.require(id));
    const state: GoalState = {
      active: true,
      status: 'running',
      iteration: 0,
      max_iterations: maxIterations,
      objective: this.p.redactor.redact(objective),
      verdict: null,
    };
    this.launch(conv, state, objective);
    return { success: true };
  }

  /** Resumes the last goal that was stopped or cut short, from the audit it had reached; 400 when there is none. */
  async resume(id: string): Promise<{ success: true }> {
    const loaded = await this.p.conversations.require(id);
    const last = loaded.record.data.goal;
    if (!last || last.status === 'complete' || last.status === 'capped') {
      throw new BadRequestError('No goal to resume: none was started in this conversation, or the last one ended (complete or capped).');
    }
    const conv = this.idle(loaded);
    this.launch(conv, { ...last, active: true, status: 'running' }, RESUME_TEXT);
    return { success: true };
  }

  /** Stops the loop (not the conversation's run) and records it interrupted; a success when none runs. */
  async stop(id: string): Promise<{ success: true }> {
    const conv = await this.p.conversations.require(id);
    const loop = conv.goal;
    if (loop) {
      loop.controller.abort();
      await loop.done;
    } else if (conv.record.data.goal?.active) {
      // a goal a restart cut short: nothing runs it, it is shown interrupted
      await this.record(conv, { ...conv.record.data.goal, active: false, status: 'interrupted' });
    }
    return { success: true };
  }

  /** The conversation, registered, when nothing runs in it (409 otherwise). */
  private idle(loaded: LiveConversation): LiveConversation {
    const conv = this.p.conversations.claim(loaded);
    if (conv.goal || conv.run || conv.status === 'running') throw new ConflictError(BUSY);
    if (stillPreparing(conv.record.data)) throw new ConflictError('The workspace is still being prepared: start the goal when it is ready.');
    return conv;
  }

  private launch(conv: LiveConversation, state: GoalState, first: string): void {
    const loop = new GoalLoop();
    conv.goal = loop;
    loop.done = this.drive(conv, loop, state, first)
      .catch((err) => this.p.log.error({ conversation_id: conv.id, err: this.p.redactor.redact(String(err?.stack ?? err)) }, 'goal loop failed'))
      .finally(() => {
        if (conv.goal === loop) conv.goal = null;
      });
  }

  /** The loop: the first message, then run, audit, follow up, until done, capped, or stopped. */
  private async drive(conv: LiveConversation, loop: GoalLoop, state: GoalState, first: string): Promise<void> {
    const { signal } = loop.controller;
    const end = async (status: GoalState['status']) => {
      // a deleted conversation, or a daemon stopping, records nothing (a restart shows the goal resumable)
      if (!conv.gone && !loop.closing) await this.record(conv, { ...state, active: false, status });
    };
    try {
      await this.record(conv, state);
      let message = first;
      for (;;) {
        await this.say(conv, message);
        await this.runOnce(conv, signal);
        if (signal.aborted || conv.gone) return await end('interrupted');
        if (conv.status === 'paused' || conv.status === 'error' || conv.status === 'waiting_for_confirmation') return await end('interrupted');
        state = { ...state, iteration: state.iteration + 1 };
        const verdict = await this.p.runtime.judge(conv, state.objective, signal);
        state = { ...state, verdict: { ...verdict, missing: this.p.redactor.redact(verdict.missing) } };
        if (signal.aborted) return await end('interrupted');
        if (verdict.complete) return await end('complete');
        if (state.iteration >= state.max_iterations) return await end('capped');
        await this.record(conv, state);
        message = followUp(state.iteration, state.verdict!.missing);
      }
    } catch (err) {
      // the judge's LLM failed, or the log could not be written: the goal stays resumable
      if (!signal.aborted) this.p.log.warn({ conversation_id: conv.id, err: this.p.redactor.redact(String(err)) }, 'goal loop stopped');
      await end('interrupted').catch(() => {});
    }
  }

  /** A user message of the loop (the status a finished or stuck conversation had goes back to idle with it, as for any message). */
  private async say(conv: LiveConversation, text: string): Promise<void> {
    const message: EventDraft = { kind: 'MessageEvent', source: 'user', llm_message: { role: 'user', content: [{ type: 'text', text, cache_prompt: false }] } };
    if (conv.status === 'finished' || conv.status === 'stuck') await this.p.conversations.setStatus(conv.id, 'idle', [message]);
    else await this.p.events.append(conv.id, message);
  }

  /** Runs the agent and waits for the run to end (and for a run a message started as it ended); a stop stops the waiting, not the run. */
  private async runOnce(conv: LiveConversation, signal: AbortSignal): Promise<void> {
    const stopped = new Promise<void>((resolve) => signal.addEventListener('abort', () => resolve(), { once: true }));
    if (!conv.run) this.p.runtime.start(conv);
    for (let run = conv.run; run && !signal.aborted; run = conv.run) await Promise.race([run.done, stopped]);
  }

  private async record(conv: LiveConversation, state: GoalState): Promise<void> {
    await this.p.conversations.updateData(conv.id, { goal: state });
    await this.p.events.append(conv.id, stateUpdate('goal', state));
  }
}
