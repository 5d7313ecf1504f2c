/**
 * The workspace side channels of OpenHands' agent server (`/api/bash`, `/api/file`, `/api/git`,
 * `/api/tools`), confined to one conversation's workspace: the locator says which conversation and
 * which path (workspace-locator.ts), the workspace access confines the path (symlinks and `..`
 * included) and starts processes (the conversation's sandbox when it is on). A path outside is a
 * ForbiddenError (403) with the reason.
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import type { Sandbox } from '../sandbox/index.js';
import { ConfinedFiles, PathOutsideError } from '../sandbox/path-view.js';
import { ForbiddenError, NotFoundError, RequestValidationError } from '../errors.js';
import { BashCommands, type BashSearch, type CommandLauncher } from '../workspace/bash-commands.js';
import { gitChanges, gitDiff } from '../workspace/git-changes.js';
import type { GitRunOptions } from '../workspace/git-process.js';
import { createWorkspace } from '../workspace/workspace.js';
import { conversationSecretValues } from './agent-server.js';
import type { Redactor } from '../secrets/redact.js';
import type { Settings } from '../secrets/settings.js';
import type { Conversations } from './conversations.js';
import { locateWorkspacePath } from './workspace-locator.js';

/** How the side channels reach a conversation's workspace: path confinement and process start. */
interface WorkspaceAccess {
  /** `p` (absolute: a host path in the workspace, or one in the view its processes have) checked to stay inside; throws with the reason when it does not. */
  resolve(workspaceDir: string, p: string): { host: string; visible: string };
  /** Where the conversation's processes see the workspace. */
  visibleWorkspace(workspaceDir: string): string;
  launcher(conversationId: string): CommandLauncher & { env(extra?: Record<string, string | undefined>): Record<string, string> };
  /** runGit options that run git the way the conversation's other git runs. */
  gitOptions(conversationId: string): Omit<GitRunOptions, 'cwd'>;
  /** Reads and writes on a resolved path that stay inside the workspace while the file is opened (no check-then-open window). */
  files(workspaceDir: string): Pick<ConfinedFiles, 'readFile' | 'writeFile'>;
}

/** A path that led outside the workspace while it was opened is refused like one outside at the check. */
async function confined<T>(io: Promise<T>): Promise<T> {
  try {
    return await io;
  } catch (err) {
    if (err instanceof PathOutsideError || (err as NodeJS.ErrnoException).code === 'ELOOP') throw new ForbiddenError(err instanceof PathOutsideError ? err.message : 'The path is a symbolic link; it was not read or written.');
    throw err;
  }
}

/** A file's bytes, answered raw (not as JSON) by the bridge. */
export class FileBytes {
  constructor(
    readonly name: string,
    readonly bytes: Uint8Array,
  ) {}
}

/** A command for /api/bash (the API validates the request against its own schema). */
interface BashRequest {
  command: string;
  cwd?: string | null;
  /** Seconds. */
  timeout: number;
  conversation_id?: string | null;
}

export const TOOL_NAMES = ['terminal', 'file_editor', 'task_tracker', 'think', 'finish'];

export class SideChannels {
  readonly bash: BashCommands;

  constructor(
    private readonly conversations: Conversations,
    private readonly settings: Settings,
    private readonly redactor: Redactor,
    private readonly workspaceRoot: string,
    private readonly access: WorkspaceAccess,
  ) {
    this.bash = new BashCommands((t) => redactor.redact(t));
  }

  private async locate(conversationId: string | null | undefined, p: string | null | undefined) {
    const at = await locateWorkspacePath(this.conversations, this.workspaceRoot, { conversationId, path: p });
    await createWorkspace(this.workspaceRoot, at.conversationId);
    let resolved: { host: string; visible: string } | null = null;
    if (at.target !== null) {
      try {
        resolved = this.access.resolve(at.workspaceDir, at.target);
      } catch (err) {
        throw new ForbiddenError((err as Error).message);
      }
    }
    return { ...at, resolved };
  }

  private async env(id: string): Promise<Record<string, string>> {
    const secrets = { ...(await this.settings.secretValues()), ...(await conversationSecretValues(this.conversations, this.settings, id)) };
    return this.access.launcher(id).env(secrets);
  }

  private async startCommand(req: BashRequest) {
    const at = await this.locate(req.conversation_id, req.cwd);
    const hostCwd = at.resolved?.host ?? at.workspaceDir;
    const stat = await fs.stat(hostCwd).catch(() => null);
    if (!stat?.isDirectory()) throw new RequestValidationError([{ type: 'value_error', loc: ['body', 'cwd'], msg: `Value error, ${req.cwd} is not a directory of the workspace`, input: req.cwd }]);
    return this.bash.start(this.access.launcher(at.conversationId), {
      conversationId: at.conversationId,
      command: req.command,
      hostCwd,
      shownCwd: at.resolved?.visible ?? this.access.visibleWorkspace(at.workspaceDir),
      timeoutS: req.timeout,
      env: await this.env(at.conversationId),
    });
  }

  async executeBash(req: BashRequest) {
    return (await this.startCommand(req)).done;
  }

  async startBash(req: BashRequest) {
    return (await this.startCommand(req)).command;
  }

  searchBash(q: BashSearch) {
    return this.bash.search(q);
  }

  getBashEvent(id: string) {
    const e = this.bash.get(id);
    if (!e) throw new NotFoundError('Bash event not found');
    return e;
  }

  async upload(q: { path: string; conversation_id?: string | null; content: Uint8Array }) {
    const at = await this.locate(q.conversation_id, q.path);
    const target = at.resolved!.host;
    if (target === path.resolve(at.workspaceDir)) throw new ForbiddenError('The path names the workspace itself; give a file path inside it');
    await fs.mkdir(path.dirname(target), { recursive: true });
    // the parent was created only now: confine again before writing (a symlink may sit on the way)
    const checked = this.access.resolve(at.workspaceDir, at.target!);
    await confined(this.access.files(at.workspaceDir).writeFile(checked.host, Buffer.from(q.content.buffer, q.content.byteOffset, q.content.byteLength), { create: true }));
    return { success: true as const, path: checked.visible, file_size: q.content.byteLength };
  }

  async download(q: { path: string; conversation_id?: string | null }) {
    const at = await this.locate(q.conversation_id, q.path);
    const file = at.resolved!.host;
    const stat = await fs.stat(file).catch(() => null);
    if (!stat?.isFile()) throw new RequestValidationError([{ type: 'value_error', loc: ['query', 'path'], msg: `Value error, ${q.path} is not a file of the workspace`, input: q.path }]);
    return new FileBytes(path.basename(file), await confined(this.access.files(at.workspaceDir).readFile(file)));
  }

  async gitChanges(q: { path: string; conversation_id?: string | null }) {
    const at = await this.locate(q.conversation_id, q.path);
    const res = await gitChanges(at.resolved!.host, this.access.gitOptions(at.conversationId));
    if ('error' in res) throw new RequestValidationError([{ type: 'value_error', loc: ['query', 'path'], msg: `Value error, ${this.redactor.redact(res.error)}`, input: q.path }]);
    return res;
  }

  async gitDiff(q: { path: string; conversation_id?: string | null; ref?: string | null }) {
    const at = await this.locate(q.conversation_id, q.path);
    return gitDiff(at.resolved!.host, this.access.gitOptions(at.conversationId), q.ref ?? 'HEAD');
  }
}

/** The side channels reach a workspace like the agent does: the sandbox's path view and launcher. */
export function sandboxAccess(sandbox: Sandbox): WorkspaceAccess {
  return {
    resolve: (workspaceDir, p) => sandbox.pathView(workspaceDir).resolve(p),
    visibleWorkspace: (workspaceDir) => sandbox.visibleWorkspace(workspaceDir),
    launcher: (id) => sandbox.forConversation(id),
    gitOptions: (id) => ({ env: sandbox.env({ LC_ALL: 'C', GIT_TERMINAL_PROMPT: '0' }), launch: sandbox.forConversation(id) }),
    files: (workspaceDir) => new ConfinedFiles(sandbox.pathView(workspaceDir)),
  };
}
