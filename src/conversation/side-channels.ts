/**
 * The workspace side channels of OpenHands' agent server (`/api/bash`, `/api/file`, `/api/git`,
 * `/api/tools`), confined to one conversation's workspace: the locator says which conversation and
 * which path (workspace-locator.ts); every file operation goes through the conversation's file
 * service (inside its sandbox when the sandbox is on: sandbox/files.ts), and commands and git run
 * through its launcher. A path outside is a ForbiddenError (403) with the reason in the
 * conversation's terms; the daemon never opens or lists a workspace path on the host.
 */
import path from 'node:path';
import type { Sandbox } from '../sandbox/index.js';
import { FileOpError, type WorkspaceFiles } from '../sandbox/files.js';
import { PathOutsideError, type PathView } from '../sandbox/path-view.js';
import { BUILTIN_TOOL_NAMES } from '../events/tool-catalog.js';
import { ForbiddenError, NotFoundError, PayloadTooLargeError, RequestValidationError, UnavailableError } from '../errors.js';
import { BashCommands, type BashSearch, type CommandLauncher } from '../workspace/bash-commands.js';
import { gitChanges, gitDiff } from '../workspace/git-changes.js';
import type { GitRunOptions } from '../workspace/git-process.js';
import { createWorkspace } from '../sandbox/workspace-dir.js';
import { conversationSecretValues } from '../agent/conversation-data.js';
import type { Redactor } from '../secrets/redact.js';
import type { Settings } from '../secrets/settings.js';
import type { Conversations } from './conversations.js';
import { locateWorkspacePath } from './workspace-locator.js';
import { FileStream, UploadSource } from './file-transfer.js';

export { FileBytes } from './file-transfer.js';

/** How the side channels reach a conversation's workspace: its view, its files and its launcher. */
interface WorkspaceAccess {
  /** Resolves when processes can be started and files reached (the sandbox's start-up probe). */
  ready(): Promise<void>;
  /** The workspace as the conversation's processes see it (paths are translated, nothing resolved on the host). */
  view(workspaceDir: string): PathView;
  /** The conversation's file service. */
  files(conversationId: string, workspaceDir: string): WorkspaceFiles;
  launcher(conversationId: string): CommandLauncher & { env(extra?: Record<string, string | undefined>): Record<string, string> };
  /** runGit options that run git the way the conversation's other git runs. */
  gitOptions(conversationId: string): Omit<GitRunOptions, 'cwd'>;
}

/** The largest file /api/file/download answers (a larger one: use the terminal, or split it). */
export const MAX_DOWNLOAD_BYTES = 64 * 1024 * 1024;
/** The largest file /api/file/upload takes (MAX_BODY_BYTES when that is larger): it streams, so memory does not bound it. */
export const MAX_UPLOAD_BYTES = 64 * 1024 * 1024;

/**
 * A file operation's failure as the API answers it, never a 500 and never a host path: the file
 * service's messages name paths only as the conversation sees them. A path outside the workspace
 * (or a link out of it), a link, or a file the sandbox may not touch is 403; a service that could
 * not answer (its sandbox did not start, an operation ran out of time, the disk is full) is 503.
 */
function refused(err: unknown): never {
  if (err instanceof PathOutsideError) throw new ForbiddenError(err.message);
  if (err instanceof FileOpError) {
    switch (err.code) {
      case 'OUTSIDE':
        throw new ForbiddenError(err.message);
      case 'ELOOP':
        throw new ForbiddenError('The path is a symbolic link; it was not read or written.');
      case 'EACCES':
      case 'EPERM':
      case 'EROFS':
        throw new ForbiddenError('Permission denied: the conversation may not change or read that path.');
      case 'ENOSPC':
      case 'EDQUOT':
        throw new UnavailableError('No space left on the disk of the workspace.');
      case 'EMFILE':
        throw new UnavailableError('Too many file transfers at once in this conversation; try again when one has finished.');
      case 'TIMEOUT':
      case 'UNAVAILABLE':
      case 'EBADF':
        throw new UnavailableError(
          `The conversation's files cannot be reached right now (${err.code === 'TIMEOUT' ? 'an operation ran out of time' : 'its sandbox is not running'}); ` +
            'try again.',
        );
      default:
        throw new RequestValidationError([{ type: 'value_error', loc: ['query', 'path'], msg: `Value error, ${err.message}`, input: null }]);
    }
  }
  throw err;
}

/** A command for /api/bash (the API validates the request against its own schema). */
interface BashRequest {
  command: string;
  cwd?: string | null;
  /** Seconds. */
  timeout: number;
  conversation_id?: string | null;
}

/** The built-in tools' names (the API's listTools), from the tool catalog. */
export const TOOL_NAMES = BUILTIN_TOOL_NAMES;

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
    await this.access.ready();
    const at = await locateWorkspacePath(this.conversations, this.workspaceRoot, { conversationId, path: p });
    await createWorkspace(this.workspaceRoot, at.conversationId);
    const view = this.access.view(at.workspaceDir);
    // lexical only (`..` and foreign roots): links are the file service's to follow, inside the sandbox
    let visible: string | null = null;
    if (at.target !== null) {
      try {
        visible = view.lexical(at.target);
      } catch (err) {
        refused(err);
      }
    }
    return { ...at, visible, files: this.access.files(at.conversationId, at.workspaceDir) };
  }

  private async env(id: string): Promise<Record<string, string>> {
    const secrets = { ...(await this.settings.secretValues()), ...(await conversationSecretValues(this.conversations, this.settings, id)) };
    return this.access.launcher(id).env(secrets);
  }

  private async startCommand(req: BashRequest) {
    const at = await this.locate(req.conversation_id, req.cwd);
    const cwd = at.visible ?? at.files.root;
    const stat = await at.files.stat(cwd).catch(refused);
    if (stat?.type !== 'dir')
      throw new RequestValidationError([
        { type: 'value_error', loc: ['body', 'cwd'], msg: `Value error, ${req.cwd} is not a directory of the workspace`, input: req.cwd },
      ]);
    return this.bash.start(this.access.launcher(at.conversationId), {
      conversationId: at.conversationId,
      command: req.command,
      hostCwd: this.access.view(at.workspaceDir).toHost(cwd),
      shownCwd: cwd,
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

  /**
   * The file's bytes are given whole (tRPC, bounded by the body limit) or as they arrive (REST's
   * multipart body): then they go to the service a chunk at a time into a new file that replaces
   * the path only once all of it is there (an upload cut short changes nothing).
   */
  async upload(q: { path: string; conversation_id?: string | null; content: Uint8Array | UploadSource }) {
    const at = await this.locate(q.conversation_id, q.path);
    const target = at.visible!;
    if (target === at.files.root) throw new ForbiddenError('The path names the workspace itself; give a file path inside it');
    const failed = (err: unknown): never => {
      if (err instanceof FileOpError && (err.code === 'EISDIR' || err.code === 'NOT_REGULAR' || err.code === 'ENOTDIR')) {
        throw new RequestValidationError([{ type: 'value_error', loc: ['query', 'path'], msg: `Value error, ${err.message}`, input: q.path }]);
      }
      refused(err);
    };
    const content = q.content;
    if (!(content instanceof UploadSource)) {
      await at.files.write(target, content, { mode: 'create', mkdirs: true }).catch(failed);
      return { success: true as const, path: target, file_size: content.byteLength };
    }
    const out = await at.files.openWrite(target, { mkdirs: true }).catch(failed);
    let size: number;
    try {
      for (let chunk = await content.next(); chunk !== null; chunk = await content.next()) await out.write(chunk);
      size = await out.commit();
    } catch (err) {
      await out.abort();
      // the body's own refusals (413, 422) pass as they are
      if (err instanceof FileOpError) failed(err);
      throw err;
    }
    return { success: true as const, path: target, file_size: size };
  }

  /** A regular file, opened in its sandbox and read as the response goes out (FileStream). */
  async download(q: { path: string; conversation_id?: string | null }) {
    const at = await this.locate(q.conversation_id, q.path);
    const file = at.visible!;
    const notFile = () =>
      new RequestValidationError([
        { type: 'value_error', loc: ['query', 'path'], msg: `Value error, ${q.path} is not a file of the workspace`, input: q.path },
      ]);
    // one request: what is not a regular file is answered as such
    const reader = await at.files.openRead(file, MAX_DOWNLOAD_BYTES).catch((err: unknown) => {
      if (err instanceof FileOpError && err.code === 'TOO_LARGE')
        throw new PayloadTooLargeError(`${q.path} is larger than ${MAX_DOWNLOAD_BYTES} bytes, the most a download answers; read it in parts with /api/bash`);
      if (err instanceof FileOpError && (err.code === 'NOT_REGULAR' || err.code === 'ENOENT' || err.code === 'ENOTDIR')) throw notFile();
      refused(err);
    });
    return new FileStream(path.basename(file), reader);
  }

  /**
   * A file of the conversation's workspace served as it is (a page, its scripts and images): the
   * path is below the workspace (`..` and links out of it refused as everywhere), a directory serves
   * its `index.html`, and what is not a file there is a 404.
   */
  async serveWorkspaceFile(q: { conversation_id: string; file_path?: string | null }) {
    const at = await this.locate(q.conversation_id, q.file_path || '.');
    let file = at.visible!;
    const stat = await at.files.stat(file).catch(refused);
    if (stat?.type === 'dir') file = path.join(file, 'index.html');
    const reader = await at.files.openRead(file, MAX_DOWNLOAD_BYTES).catch((err: unknown) => {
      if (err instanceof FileOpError && err.code === 'TOO_LARGE') throw new PayloadTooLargeError(`The file is larger than ${MAX_DOWNLOAD_BYTES} bytes`);
      if (err instanceof FileOpError && (err.code === 'NOT_REGULAR' || err.code === 'ENOENT' || err.code === 'ENOTDIR')) {
        throw new NotFoundError('File not found');
      }
      refused(err);
    });
    return new FileStream(path.basename(file), reader, true);
  }

  async gitChanges(q: { path: string; conversation_id?: string | null }) {
    const at = await this.locate(q.conversation_id, q.path);
    const res = await gitChanges(this.access.view(at.workspaceDir).toHost(at.visible!), this.access.gitOptions(at.conversationId));
    // a workspace that is not a git repository has no changes (OpenHands' app asks for every conversation's)
    if ('error' in res && /not a git repository/i.test(res.error)) return [];
    if ('error' in res)
      throw new RequestValidationError([
        { type: 'value_error', loc: ['query', 'path'], msg: `Value error, ${this.redactor.redact(res.error)}`, input: q.path },
      ]);
    return res;
  }

  async gitDiff(q: { path: string; conversation_id?: string | null; ref?: string | null }) {
    const at = await this.locate(q.conversation_id, q.path);
    const host = this.access.view(at.workspaceDir).toHost(at.visible!);
    return gitDiff(host, this.access.gitOptions(at.conversationId), q.ref ?? 'HEAD', (p, max) => at.files.read(p, max));
  }
}

/** The side channels reach a workspace like the agent does: the sandbox's view, file service and launcher. */
export function sandboxAccess(sandbox: Sandbox): WorkspaceAccess {
  return {
    ready: () => sandbox.ready,
    view: (workspaceDir) => sandbox.pathView(workspaceDir),
    files: (id, workspaceDir) => sandbox.files(id, workspaceDir),
    launcher: (id) => sandbox.forConversation(id),
    gitOptions: (id) => ({ env: sandbox.env({ LC_ALL: 'C', GIT_TERMINAL_PROMPT: '0' }), launch: sandbox.forConversation(id) }),
  };
}
