/**
 * The server-wide routes of OpenHands' agent server that read or change files without naming a
 * conversation: the file browser (`/api/file/home`, `search_subdirs`, `create_directory`, `archive`) and
 * the project readers (skills, hooks, sub-agents, given a `project_dir`). OpenHands' server runs inside
 * its sandbox, so its home and its paths are the sandbox's. Parley's equivalent is a conversation's
 * sandbox view: the conversation is found as for the other side channels (workspace-locator.ts: a
 * `conversation_id`, else the one whose workspace or declared `working_dir` the path is under, else the
 * newest), its home is its workspace (`/workspace` with the sandbox on), and every file operation goes
 * through its file service, inside its sandbox; commands (tar, git for the archive) run through its
 * launcher. The daemon never lists, opens or creates a path on the host for these routes, and a path
 * leading out of the workspace is a 403 with the reason.
 */
import { daemonGitShellPrelude } from '../workspace/git-process.js';
import type { ChildProcess } from 'node:child_process';
import { posix } from 'node:path';
import { ConflictError, ForbiddenError, NotFoundError, PayloadTooLargeError, RequestValidationError, UnavailableError } from '../errors.js';
import { FileOpError, type WorkspaceFiles } from '../sandbox/files.js';
import { PathOutsideError, type PathView } from '../sandbox/path-view.js';
import { createWorkspace } from '../sandbox/workspace-dir.js';
import type { Conversations } from './conversations.js';
import { FileBytes, MAX_DOWNLOAD_BYTES } from './side-channels.js';
import { locateWorkspacePath } from './workspace-locator.js';

/** How the browser reaches a conversation's workspace (the sandbox's view, file service and launcher). */
export interface BrowserAccess {
  ready(): Promise<void>;
  view(workspaceDir: string): PathView;
  files(conversationId: string, workspaceDir: string): WorkspaceFiles;
  launcher(conversationId: string): {
    spawn(argv: string[], opts: { cwd: string; env: Record<string, string>; stdio?: ('ignore' | 'pipe')[] }): ChildProcess;
    env(extra?: Record<string, string | undefined>): Record<string, string>;
  };
}

/** A located path: the conversation, its files, and the path as it sees it (null: none given). */
export interface ProjectFiles {
  conversationId: string;
  files: WorkspaceFiles;
  /** The path asked for, as the conversation sees it; its workspace when none was given. */
  dir: string;
}

/** What OpenHands' archive leaves out by default (bulky, rebuildable) and what it never includes (credentials in .git). */
const DEFAULT_EXCLUDES = [
  '.git/',
  'node_modules/',
  '.venv/',
  'venv/',
  '__pycache__/',
  '.mypy_cache/',
  '.pytest_cache/',
  '.ruff_cache/',
  'dist/',
  'build/',
  '.next/',
  'target/',
  '*.pyc',
];
const GIT_CREDENTIAL_FILES = ['.git/config', '.git/config.worktree', '.git/credentials', '.git/.git-credentials', '.git/FETCH_HEAD', '.git/logs'];
const ARCHIVE_TIMEOUT_MS = 120_000;

const pathIssue = (msg: string, input: unknown) =>
  new RequestValidationError([{ type: 'value_error', loc: ['query', 'path'], msg: `Value error, ${msg}`, input }]);

/** A file operation's failure as these routes answer it (never a 500, never a host path). */
function refused(err: unknown, input: unknown): never {
  if (err instanceof PathOutsideError) throw new ForbiddenError(err.message);
  if (err instanceof FileOpError) {
    switch (err.code) {
      case 'OUTSIDE':
        throw new ForbiddenError(err.message);
      case 'ELOOP':
        throw new ForbiddenError('The path is a symbolic link; it was not followed.');
      case 'EACCES':
      case 'EPERM':
      case 'EROFS':
        throw new ForbiddenError('Permission denied: the conversation may not change or read that path.');
      case 'ENOENT':
        throw new NotFoundError('Directory not found');
      case 'ENOTDIR':
      case 'EEXIST':
      case 'NOT_REGULAR':
        throw pathIssue('the path exists and is not a directory', input);
      case 'ENOSPC':
      case 'EDQUOT':
        throw new UnavailableError('No space left on the disk of the workspace.');
      case 'TIMEOUT':
      case 'UNAVAILABLE':
        throw new UnavailableError("The conversation's files cannot be reached right now (its sandbox is not running); try again.");
      default:
        throw pathIssue(err.message, input);
    }
  }
  throw err;
}

export class WorkspaceBrowser {
  constructor(
    private readonly conversations: Conversations,
    private readonly workspaceRoot: string,
    private readonly access: BrowserAccess,
  ) {}

  /** The conversation a path (or none) means, its files, and the path as it sees it; 403 for a path leading out. */
  async locate(conversationId: string | null | undefined, p: string | null | undefined): Promise<ProjectFiles & { workspaceDir: string }> {
    await this.access.ready();
    const at = await locateWorkspacePath(this.conversations, this.workspaceRoot, { conversationId, path: p }).catch((err: unknown) => {
      // no conversation at all: nothing to browse yet (a named conversation that does not exist stays a 404)
      if (err instanceof NotFoundError && !conversationId)
        throw new ConflictError("No conversation workspace to browse yet: the file browser shows a conversation's sandbox view; create a conversation first");
      throw err;
    });
    await createWorkspace(this.workspaceRoot, at.conversationId);
    const files = this.access.files(at.conversationId, at.workspaceDir);
    let dir = files.root;
    if (at.target !== null) {
      try {
        dir = this.access.view(at.workspaceDir).lexical(at.target);
      } catch (err) {
        refused(err, p);
      }
    }
    return { conversationId: at.conversationId, workspaceDir: at.workspaceDir, files, dir };
  }

  /** A project directory for the skill, hook and sub-agent readers; null when none is given (nothing of a project is read). */
  async project(projectDir: string | null | undefined, conversationId?: string | null): Promise<ProjectFiles | null> {
    if (!projectDir && !conversationId) return null;
    return this.locate(conversationId, projectDir);
  }

  /** The home is the conversation's workspace; the favorites its top-level directories; the one location, the workspace. */
  async home(q: { include_hidden?: boolean; conversation_id?: string | null }) {
    const at = await this.locate(q.conversation_id, null);
    const dirs = await this.inside(at.files, (await this.subdirs(at.files, at.dir, !!q.include_hidden, null)).slice(0, 50));
    return {
      home: at.dir,
      favorites: dirs.map((d) => ({ label: d.name, path: d.path })),
      locations: [{ label: at.dir, path: at.dir }],
    };
  }

  private async subdirs(files: WorkspaceFiles, dir: string, hidden: boolean, input: unknown) {
    const listing = await files.list(dir, { depth: 1, hidden, max: 10_000 }).catch((err: unknown) => refused(err, input));
    return listing.entries
      .filter((e) => e.dir)
      .map((e) => ({ name: posix.basename(e.path), path: e.path }))
      .sort((a, b) => a.name.toLowerCase().localeCompare(b.name.toLowerCase()));
  }

  /** The entries that stay in the workspace (a link to a directory outside it is listed as a directory, and would be a 403 to open). */
  private async inside(files: WorkspaceFiles, entries: { name: string; path: string }[]) {
    const ok = await Promise.all(
      entries.map((e) =>
        files.realpath(e.path).then(
          () => true,
          () => false,
        ),
      ),
    );
    return entries.filter((_, i) => ok[i]);
  }

  /** Immediate subdirectories, sorted case-insensitively, paged by the lowercase name of the next page's first. */
  async searchSubdirs(q: { path: string; page_id?: string | null; limit: number; include_hidden?: boolean; conversation_id?: string | null }) {
    if (!posix.isAbsolute(q.path)) throw pathIssue('path must be absolute', q.path);
    const at = await this.locate(q.conversation_id, q.path);
    const st = await at.files.stat(at.dir).catch((err: unknown) => refused(err, q.path));
    if (!st) throw new NotFoundError('Directory not found');
    if (st.type !== 'dir') throw pathIssue('the path is not a directory', q.path);
    const all = await this.subdirs(at.files, at.dir, !!q.include_hidden, q.path);
    let start = q.page_id ? all.findIndex((e) => e.name.toLowerCase() === q.page_id) : 0;
    if (start < 0) start = 0;
    const items = await this.inside(at.files, all.slice(start, start + q.limit));
    return { items, next_page_id: start + q.limit < all.length ? all[start + q.limit]!.name.toLowerCase() : null };
  }

  /** Idempotent; over a file (or under one) is a 422. */
  async createDirectory(q: { path: string; conversation_id?: string | null }) {
    if (!posix.isAbsolute(q.path)) throw pathIssue('path must be absolute', q.path);
    const at = await this.locate(q.conversation_id, q.path);
    await at.files.mkdirs(at.dir).catch((err: unknown) => refused(err, q.path));
    return { success: true as const };
  }

  /**
   * The directory as a gzip tarball (`tar.gz`), or its working-tree changes as a git patch (`git-delta`:
   * every change, untracked files included, against `base_ref`, else HEAD, else the empty tree), made
   * inside the conversation's sandbox. The default excludes leave out bulky rebuildable directories; git's
   * credential-bearing files are never in a tarball.
   */
  async archive(q: {
    path: string;
    format: 'git-delta' | 'tar.gz';
    base_ref?: string | null;
    use_default_excludes: boolean;
    exclude?: string[] | null;
    conversation_id?: string | null;
  }): Promise<FileBytes> {
    if (!posix.isAbsolute(q.path)) throw pathIssue('path must be absolute', q.path);
    const at = await this.locate(q.conversation_id, q.path);
    const st = await at.files.stat(at.dir).catch((err: unknown) => refused(err, q.path));
    if (!st) throw new NotFoundError('Directory not found');
    if (st.type !== 'dir') throw pathIssue('the path is not a directory', q.path);
    const excludes = [...(q.use_default_excludes ? DEFAULT_EXCLUDES : []), ...(q.exclude ?? [])];
    const cwd = this.access.view(at.workspaceDir).toHost(at.dir);
    const name = posix.basename(at.dir) || 'workspace';
    if (q.format === 'tar.gz') {
      const args = ['tar', '-czf', '-', ...[...excludes, ...GIT_CREDENTIAL_FILES].map((e) => `--exclude=${e.replace(/\/$/, '')}`), '.'];
      return new FileBytes(`${name}.tar.gz`, await this.run(at.conversationId, args, cwd));
    }
    const specs = excludes.flatMap((raw) => {
      const pat = raw.replace(/\/$/, '');
      const dirOnly = raw.endsWith('/');
      const base = pat.includes('/') ? pat : `**/${pat}`;
      return dirOnly ? [`:(glob,exclude)${base}/**`] : [`:(glob,exclude)${base}`, `:(glob,exclude)${base}/**`];
    });
    // a temporary index: the repository's own index and working tree are left as they are
    // (every git of it runs as the daemon's own: nothing the repository names runs, src/workspace/git-process.ts)
    const script = [
      daemonGitShellPrelude(),
      'set -e',
      'idx=$(mktemp)',
      'trap \'rm -f "$idx"\' EXIT',
      'base="$1"; shift',
      'git rev-parse --is-inside-work-tree >/dev/null',
      'export GIT_INDEX_FILE="$idx"',
      'git read-tree HEAD 2>/dev/null || git read-tree --empty',
      'git add -A -- . "$@"',
      'if [ -z "$base" ]; then base=$(git rev-parse -q --verify HEAD || git hash-object -t tree /dev/null); fi',
      'git -c core.quotepath=off diff --cached --binary --no-textconv --no-ext-diff "$base" -- . "$@"',
    ].join('\n');
    return new FileBytes(`${name}.patch`, await this.run(at.conversationId, ['sh', '-c', script, 'archive', q.base_ref ?? '', ...specs], cwd));
  }

  /** A command's stdout (bounded), run through the conversation's launcher; its failure is a 422 with git's or tar's words. */
  private run(conversationId: string, argv: string[], cwd: string): Promise<Buffer> {
    const launcher = this.access.launcher(conversationId);
    return new Promise((resolve, reject) => {
      const child = launcher.spawn(argv, { cwd, env: launcher.env({ LC_ALL: 'C', GIT_TERMINAL_PROMPT: '0' }), stdio: ['ignore', 'pipe', 'pipe'] });
      const chunks: Buffer[] = [];
      let size = 0;
      let stderr = '';
      let over = false;
      const timer = setTimeout(() => child.kill('SIGKILL'), ARCHIVE_TIMEOUT_MS);
      child.stdout!.on('data', (b: Buffer) => {
        size += b.length;
        if (size > MAX_DOWNLOAD_BYTES) {
          over = true;
          child.kill('SIGKILL');
        } else chunks.push(b);
      });
      child.stderr!.on('data', (b: Buffer) => {
        if (stderr.length < 4096) stderr += b.toString('utf8');
      });
      child.on('error', (err) => {
        clearTimeout(timer);
        reject(new UnavailableError(`The archive could not be made: ${err.message}`));
      });
      child.on('close', (code) => {
        clearTimeout(timer);
        if (over) return reject(new PayloadTooLargeError(`The archive is larger than ${MAX_DOWNLOAD_BYTES} bytes; exclude more, or use /api/bash`));
        if (code !== 0) return reject(pathIssue(`the archive could not be made (${stderr.trim().split('\n').slice(-2).join(' ') || `exit ${code}`})`, null));
        resolve(Buffer.concat(chunks));
      });
    });
  }
}
