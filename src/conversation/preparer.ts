/**
 * Workspace preparation, in the background after a conversation is created: its directory, the
 * clone and checkout of its repository, the setup script, a `replay_json` replay, and the first
 * message of a suggested task or microagent; then the run loop when one was requested. Each phase
 * is recorded in the conversation's data (and as an event when there is real work).
 */
import type { Config } from '../config.js';
import type { Conversations } from './conversations.js';
import type { LiveConversation } from './live.js';
import type { ReplayPlan } from './replay.js';
import type { ConversationPreparer, ConversationRuntime, PrepareOptions } from './runtime.js';
import type { EventLog } from '../events/log.js';
import type { Redactor } from '../secrets/redact.js';
import type { Settings } from '../secrets/settings.js';
import { gitCredentialEnv } from '../workspace/askpass.js';
import { cloneRepository } from '../workspace/git.js';
import { runSetupScript } from '../workspace/setup-script.js';
import { createMicroagentMessage, suggestedTaskMessage } from '../workspace/tasks.js';
import { createWorkspace, workspacePath } from '../sandbox/workspace-dir.js';
import { stateUpdate } from '../events/schema.js';
import type { SetupPhase, SetupState } from './setup-phase.js';

interface PreparerOptions {
  workspaceRoot: string;
  /** Hosts a repository may be cloned from (GIT_ALLOWED_HOSTS). */
  allowedHosts: Config['gitAllowedHosts'];
  /** Where the git askpass helper is written. */
  helperDir: string;
  /** Runs a replay plan's recorded steps in the workspace; resolves with the number of actions run. */
  replay(conversationId: string, workspaceDir: string, plan: ReplayPlan, signal: AbortSignal): Promise<{ actions: number }>;
}

export class WorkspacePreparer implements ConversationPreparer {
  constructor(
    private readonly conversations: Conversations,
    private readonly events: EventLog,
    private readonly settings: Settings,
    private readonly runtime: Pick<ConversationRuntime, 'start'>,
    private readonly redactor: Redactor,
    private readonly opts: PreparerOptions,
  ) {}

  async prepare(id: string, opts?: PrepareOptions): Promise<void> {
    const { conversations, events } = this;
    const conv = await conversations.require(id);
    await conv.sandbox.ready;
    // conv.record.data is replaced by every update: read it fresh, never through a saved reference
    const d = conv.record.data;
    // phases are reported as events when there is real work (a clone, a setup script, a replay);
    // a conversation without a repository only gets its directory
    const visible = !!d.selected_repository || !!opts?.replay;
    const phase = async (p: SetupPhase, detail?: string) => {
      const setup: SetupState = { phase: p, ...(detail ? { detail } : {}) };
      await conversations.updateData(id, { setup });
      if (visible || p === 'error') await events.append(id, stateUpdate('setup', setup));
    };
    const fail = async (err: unknown, fallbackCode: string) => {
      conversations.takeRunRequest(conv); // no run follows a failed preparation
      const detail = this.redactor.redact((err as Error)?.message ?? String(err));
      await phase('error', detail);
      await events.append(id, { kind: 'ConversationErrorEvent', source: 'environment', code: (err as { code?: string }).code ?? fallbackCode, detail });
      await conversations.setStatus(id, 'error');
    };
    await phase('preparing');
    // the directory is made when something needs it (a clone, a replay, the first command or file)
    const dir = visible ? await createWorkspace(this.opts.workspaceRoot, id) : workspacePath(this.opts.workspaceRoot, id);
    let first: string | null = null;
    try {
      if (d.selected_repository) await this.cloneAndSetUp(conv, dir, phase);
      // the first message from a template, when the request asked for one (checked at creation)
      const task = d.suggested_task;
      const micro = d.create_microagent;
      if (task) first = suggestedTaskMessage({ ...task, git_provider: task.git_provider ?? d.git_provider ?? undefined });
      else if (micro) first = createMicroagentMessage(micro);
    } catch (err) {
      await fail(err, 'WorkspaceSetupFailed');
      return;
    }
    if (opts?.replay && !(await this.replay(conv, dir, opts.replay, phase, fail))) return;
    if (first)
      await events.append(id, {
        kind: 'MessageEvent',
        source: 'user',
        llm_message: { role: 'user', content: [{ type: 'text', text: first, cache_prompt: false }] },
      });
    await phase('ready');
    // requested at creation, or by a message sent while preparing (startRun sets it)
    const wantsRun = conversations.takeRunRequest(conv) || !!first;
    if (wantsRun) {
      if (conv.status === 'finished') await conversations.setStatus(id, 'idle');
      this.runtime.start(conversations.claim(conv));
    }
  }

  /** The clone and checkout of the conversation's repository (each phase recorded as it happens), then its setup script. */
  private async cloneAndSetUp(conv: LiveConversation, dir: string, phase: (p: SetupPhase, detail?: string) => Promise<void>): Promise<void> {
    const { conversations, events, settings } = this;
    const id = conv.id;
    const d = conv.record.data;
    const redact = (t: string) => this.redactor.redact(t);
    const providers = await settings.getProviders();
    // clone phases are recorded in the order they happen
    let phases = Promise.resolve();
    const res = await cloneRepository({
      workspaceDir: dir,
      repository: d.selected_repository!,
      provider: d.git_provider ?? null,
      providers,
      branch: d.selected_branch ?? null,
      helperDir: this.opts.helperDir,
      allowedHosts: this.opts.allowedHosts,
      sandbox: conv.sandbox.launcher(),
      files: conv.sandbox.files(dir),
      redact,
      onPhase: (p, detail) => {
        phases = phases.then(() => phase(p === 'ready' ? 'cloned' : p, detail));
        // awaited once the clone ends; a conversation deleted meanwhile must not be an unhandled rejection
        phases.catch(() => {});
      },
    }).finally(() => phases);
    await conversations.updateData(id, { branch: res.branch });
    const secrets = await settings.secretValues();
    const setup = await runSetupScript(conv.sandbox.files(dir), {
      env: { ...secrets, ...gitCredentialEnv(providers) },
      launch: conv.sandbox.launcher(),
      redact,
      onOutput: (chunk) => events.publishTransient(id, { kind: 'SetupOutputEvent', source: 'environment', output: chunk }),
    });
    if (setup.ran) {
      await events.append(id, stateUpdate('setup_script', { exit_code: setup.exitCode, timed_out: setup.timedOut, output: setup.output.slice(-20000) }));
    }
  }

  /**
   * A `replay_json` plan's recorded steps, status running then finished (idle when it had none);
   * false when the preparation ends here (it failed, or the conversation was deleted: its
   * close('deleted') aborts the replay through `conv.preparation`).
   */
  private async replay(
    conv: LiveConversation,
    dir: string,
    plan: ReplayPlan,
    phase: (p: SetupPhase, detail?: string) => Promise<void>,
    fail: (err: unknown, fallbackCode: string) => Promise<void>,
  ): Promise<boolean> {
    const { conversations } = this;
    const controller = new AbortController();
    // a preparation run without the service notes its own
    const own = !conv.preparation;
    const preparation = conv.preparation ?? (conv.preparation = { replay: null });
    preparation.replay = controller;
    try {
      await phase('replaying', `${plan.steps.length} recorded step(s)`);
      await conversations.setStatus(conv.id, 'running');
      const res = await this.opts.replay(conv.id, dir, plan, controller.signal);
      if (controller.signal.aborted) return false;
      await conversations.setStatus(conv.id, res.actions > 0 || plan.steps.length > 0 ? 'finished' : 'idle');
      return true;
    } catch (err) {
      if (!controller.signal.aborted) await fail(err, 'ReplayFailed');
      return false;
    } finally {
      if (preparation.replay === controller) preparation.replay = null;
      if (own && conv.preparation === preparation) conv.preparation = null;
    }
  }
}
