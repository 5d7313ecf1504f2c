/**
 * A live conversation: one object for everything this process holds about a conversation it has
 * touched since it started, owned by the registry (conversations.ts). Its record and status (the
 * registry's), its run, confirmation and history (the runtime's), its sandbox, shell and MCP
 * servers, its workspace preparation (the service's and the preparer's) and, in cluster mode, its
 * lease (the node's) are fields of it, and it ends in one place, `close(reason)`, whatever the
 * reason. docs/architecture-conversation.md has the whole picture.
 */
import type { Logger } from 'pino';
import { type ConversationSandbox, sandboxOf } from '../agent/conversation-sandbox.js';
import type { History } from '../agent/history.js';
import type { InstructionsCache } from '../agent/instructions.js';
import type { AgentConversation, CloseReason } from '../agent/live-conversation.js';
import type { McpServers } from '../agent/mcp-servers.js';
import type { Run } from '../agent/run.js';
import type { BuiltinTools } from '../agent/tool-box.js';
import type { EventLog } from '../events/log.js';
import type { ExecutionStatus } from '../events/schema.js';
import type { Sandbox } from '../sandbox/index.js';
import { removeWorkspace, workspacePath } from '../sandbox/workspace-dir.js';
import type { ShellPool } from '../tools/terminal/pool.js';
import type { GoalLoop } from './goal-loop.js';
import type { ParsedRecord } from './record-data.js';

export type { CloseReason };

/** What every live conversation shares: made once by the composition root, handed to the registry. */
export interface LiveParts {
  events: Pick<EventLog, 'append'>;
  /** The conversation's part of the sandbox (src/agent/conversation-sandbox.ts). */
  sandboxOf(id: string): ConversationSandbox;
  /** The conversations' shells (the terminal's pool). */
  shells: Pick<ShellPool, 'close' | 'running'>;
  /** The built-in tools forget a deleted conversation (the file editor's undo history, the terminal's saved outputs). */
  forgetTools(id: string): Promise<void>;
  /** Its workspace on the host; `keep`: KEEP_WORKSPACES (a deleted conversation's workspace stays). */
  workspace: { dir(id: string): string; keep: boolean };
  log: Logger;
}

/** The parts of the daemon's live conversations: the sandbox launcher's, the built-in tools', the workspaces under WORKSPACE_ROOT. */
export function liveParts(p: {
  events: LiveParts['events'];
  sandbox: Sandbox;
  builtins: Pick<BuiltinTools, 'shells' | 'forget'>;
  workspaceRoot: string;
  keepWorkspaces: boolean;
  log: Logger;
}): LiveParts {
  return {
    events: p.events,
    sandboxOf: (id) => sandboxOf(p.sandbox, id),
    shells: p.builtins.shells,
    forgetTools: (id) => p.builtins.forget(id),
    workspace: { dir: (id) => workspacePath(p.workspaceRoot, id), keep: p.keepWorkspaces },
    log: p.log,
  };
}

/** A workspace preparation running in this process (clone, setup script, replay). */
interface Preparation {
  /** The replay under way, stopped when the conversation is deleted. */
  replay: AbortController | null;
}

/** Cluster mode: this node holds the conversation's lease. */
interface Lease {
  /** The loop had stopped at the last renewal: the lease goes at the next one. */
  idle: boolean;
}

/**
 * What each reason ends (docs/architecture-conversation.md, "Closing"): the preparation, the run,
 * the shell (with what the running command's observation says), the MCP servers (closed, or
 * disposed of: forgotten), the sandbox (closed, or removed with its state on the host), and for a
 * deleted conversation what it left on disk. A conversation's error event says why its processes
 * were stopped for disk.
 */
const CLOSING: Record<CloseReason, { preparation?: true; run?: true; shell?: true; mcp?: 'close' | 'dispose'; sandbox?: 'close' | 'remove'; error?: string }> =
  {
    deleted: { preparation: true, run: true, shell: true, mcp: 'dispose', sandbox: 'remove' },
    interrupted: { run: true, shell: true, mcp: 'close', sandbox: 'close' },
    // the launcher closes the sandbox itself: the MCP servers stop quietly (no failure event) and start again with the next run
    evicted: { mcp: 'close' },
    'disk-quota': { shell: true, error: 'DiskQuotaExceeded' },
    'disk-full': { shell: true, error: 'DiskFull' },
    // its file service broke the protocol: the launcher closes the sandbox itself (the next use starts a new one)
    'sandbox-fault': { shell: true, error: 'SandboxProtocolError' },
    idle: { mcp: 'close' },
    // the launcher closes every sandbox after
    shutdown: { run: true, shell: true, mcp: 'close' },
  };

/** Why the launcher stopped a conversation's processes for disk, as its error event and its running command say it. */
export function diskStopDetail(why: 'quota' | 'disk-full', usedBytes: number, limitMb: number | null | undefined): string {
  const mib = `${(usedBytes / 1024 / 1024).toFixed(1)} MiB of disk (workspace, /tmp and HOME)`;
  return why === 'quota'
    ? `the conversation uses ${mib}, over its ${limitMb} MiB (SANDBOX_DISK_MB): its processes were stopped; delete files to go on`
    : `the disk is full and this conversation uses the most of it (${mib}): its processes were stopped; delete files to go on`;
}

export class LiveConversation implements AgentConversation {
  /** Its data parsed (record-data.ts); keys left in the store (`storedKeys`) are not in it (Conversations.field reads them). */
  record: ParsedRecord;
  /** The status the daemon acts on (changes at once). */
  status: ExecutionStatus;
  /** The status clients are shown: it follows committed execution_status events, so a client never sees a status its event log does not hold yet. */
  shown?: ExecutionStatus;
  /** What its record costs the registry's memory bound, and the keys of its data left in the store (large and malformed ones). */
  bytes = 0;
  storedKeys: Set<string> | null = null;

  run: Run | null = null;
  confirmed = false;
  history: History | null = null;
  instructions: InstructionsCache | null = null;
  mcp: McpServers | null = null;
  preparation: Preparation | null = null;
  /** The `/goal` loop running here (goals.ts); its state is the record's `goal`. */
  goal: GoalLoop | null = null;
  lease: Lease | null = null;
  /** It was deleted. */
  gone = false;
  private sandboxPart: ConversationSandbox | null = null;

  constructor(
    record: ParsedRecord,
    private readonly parts: LiveParts,
  ) {
    this.record = record;
    this.status = record.execution_status as ExecutionStatus;
  }

  get id(): string {
    return this.record.id;
  }

  get sandbox(): ConversationSandbox {
    this.sandboxPart ??= this.parts.sandboxOf(this.id);
    return this.sandboxPart;
  }

  /** Something live holds it (a run, a preparation, a goal loop, a shell, running MCP servers, a lease): the registry keeps it loaded. */
  get holding(): boolean {
    return (
      this.run !== null ||
      this.preparation !== null ||
      this.goal !== null ||
      this.lease !== null ||
      (this.mcp?.active ?? false) ||
      this.parts.shells.running(this.id)
    );
  }

  /** Ends what `reason` ends (CLOSING); `detail`: what a command cut short is told (disk). */
  async close(reason: CloseReason, detail?: string): Promise<void> {
    const how = CLOSING[reason];
    const id = this.id;
    if (how.preparation) this.preparation?.replay?.abort();
    // deleted, or the daemon stops: the goal loop ends without a word (an interrupt lets it see the run paused and say so)
    if ((reason === 'deleted' || reason === 'shutdown') && this.goal) {
      this.goal.closing = true;
      this.goal.controller.abort();
    }
    if (how.run) await this.run?.stop();
    // the error event is on its way while the shell closes: clients hear why before the cut command's observation
    const error = how.error && this.parts.events.append(id, { kind: 'ConversationErrorEvent', source: 'environment', code: how.error, detail: detail ?? '' });
    if (how.shell) await this.parts.shells.close(id, detail ?? 'closed');
    if (error) await error.catch(() => {});
    if (how.mcp === 'close' && !(reason === 'idle' && this.run)) await this.mcp?.close();
    if (how.mcp === 'dispose') {
      await this.mcp?.dispose();
      this.mcp = null;
    }
    if (how.sandbox === 'close') await this.sandbox.close();
    if (reason !== 'deleted') return;
    // what it left on disk: the sandbox's /tmp and HOME, saved outputs, the workspace
    await this.sandbox.remove();
    await this.parts.forgetTools(id);
    this.history = null;
    this.instructions = null;
    this.confirmed = false;
    this.gone = true;
    if (!this.parts.workspace.keep) await removeWorkspace(this.parts.workspace.dir(id)).catch(() => {});
  }
}
