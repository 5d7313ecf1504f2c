/**
 * Cloning a conversation's repository with the stored provider tokens.
 *
 * Layout: the repository is cloned INTO the workspace directory itself, so the agent's shell,
 * `.openhands/setup.sh` and the repository instructions all start at the repository root.
 * The workspace must therefore be empty before the clone; a workspace that already holds a clone
 * of the same remote is reused (resume), anything else is refused.
 *
 * Authentication (see askpass.ts): the token is handed to the git child process only, through
 * environment variables read by a GIT_ASKPASS script kept outside the workspace. It is never put
 * in a URL, in `.git/config`, in a workspace file, or on a command line; `origin` is the plain
 * http(s) URL. `credential.helper` is reset for the clone and in the repository's config, so no
 * helper configured on the machine can store the token either.
 *
 * Which sources are tried:
 * - `provider` given: that provider's host (stored host or default), with its token when stored,
 *   anonymously otherwise.
 * - no `provider`: every provider with a token, in the order github, gitlab, bitbucket,
 *   enterprise_sso; then anonymously every other stored host, then github.com (public
 *   repositories need no token).
 * Every failure becomes a CloneError whose message names each source tried and why it failed,
 * with every token removed.
 */
import { posix, relative, resolve, isAbsolute } from 'node:path';
import type { WorkspaceFiles } from '../sandbox/files.js';
import { randomBytes } from 'node:crypto';
import { Redactor } from '../secrets/redact.js';
import { askpassOrigin, ensureAskpassScript } from './askpass.js';
import { baseChildEnv } from '../sandbox/child-env.js';
import type { ProcessLauncher } from '../sandbox/types.js';
import { runGit, type GitResult } from './git-process.js';
import { GIT_PROVIDERS, InvalidHostError, providerBaseUrl, tokenCredentials, type GitProvider, type ProviderCredential } from './providers.js';

type ClonePhase = 'cloning' | 'checking_out' | 'ready';

export type CloneErrorCode =
  | 'invalid_repository'
  | 'invalid_branch'
  | 'invalid_host'
  | 'invalid_options'
  | 'workspace_not_empty'
  | 'auth_failed'
  | 'auth_required'
  | 'not_found'
  | 'unreachable'
  | 'branch_not_found'
  | 'timeout'
  | 'aborted'
  | 'git_failed';

export interface CloneAttempt {
  provider: GitProvider | null;
  baseUrl: string;
  authenticated: boolean;
  code: CloneErrorCode;
  reason: string;
}

export class CloneError extends Error {
  override name = 'CloneError';
  constructor(
    message: string,
    readonly code: CloneErrorCode,
    readonly attempts: CloneAttempt[] = [],
  ) {
    super(message);
  }
}

export interface CloneOptions {
  /** The conversation's workspace; the repository is cloned into it (it must be empty). */
  workspaceDir: string;
  /** `owner/repo` (GitLab subgroups `group/sub/repo` allowed); a trailing `.git` is ignored. */
  repository: string;
  provider: GitProvider | null;
  /** The stored provider tokens. */
  providers: ProviderCredential[];
  /** `selected_branch`: checked out after the clone (a branch, or a tag as a detached HEAD). */
  branch?: string | null;
  /** Created when no branch is given. Default `parley/<8 random hex>`. */
  workBranch?: string;
  /** Daemon-owned directory OUTSIDE the workspace holding the askpass script. */
  helperDir: string;
  /**
   * The conversation's sandbox: every git command runs in it, the clone too (as the sandbox's uid,
   * with the daemon's network: the host was checked against GIT_ALLOWED_HOSTS). Without one (tests,
   * SANDBOX=none's plain launcher) git runs as a plain process.
   */
  sandbox?: ProcessLauncher;
  /** The workspace's files (the conversation's file service: the workspace is looked at and emptied through it). */
  files: WorkspaceFiles;
  signal?: AbortSignal;
  onPhase?: (phase: ClonePhase, detail?: string) => void;
  /** The daemon's redaction (applied to every error message). */
  redact: (s: string) => string;
  /** Commit identity written to the repository's config. */
  gitIdentity?: { name?: string; email?: string };
  /** Limit for the clone itself (default 15 minutes). */
  timeoutMs?: number;
  /** GIT_ALLOWED_HOSTS: `host` or `host:port` entries the clone may reach; null or absent: any. */
  allowedHosts?: string[] | null;
}

export interface CloneResult {
  dir: string;
  branch: string;
  provider: string | null;
  remoteUrl: string;
  /** True when an existing clone of the same remote was reused. */
  reused: boolean;
}

const DEFAULT_GIT_IDENTITY = { name: 'Parley Agent', email: 'agent@parley.local' };

const SEGMENT = /^[A-Za-z0-9_.][A-Za-z0-9_.-]*$/;

/** Validates `owner/repo` and returns it without a trailing `.git`. Throws CloneError. */
export function normalizeRepository(repository: string): string {
  const trimmed = repository.trim().replace(/\.git$/i, '');
  const segments = trimmed.split('/');
  const ok =
    segments.length >= 2 &&
    segments.length <= 20 &&
    trimmed.length <= 512 &&
    segments.every((s) => SEGMENT.test(s) && s !== '.' && s !== '..' && !s.endsWith('.lock'));
  if (!ok) {
    throw new CloneError(`Invalid repository name ${JSON.stringify(repository.slice(0, 200))}: expected "owner/repo"`, 'invalid_repository');
  }
  return trimmed;
}

/**
 * Validates a branch name: no leading `-`, no whitespace or control characters, no `@{`, and
 * `git check-ref-format --branch` must accept it (rejects `..`, `~`, `^`, `:`, `?`, `*`, `[`, `\`,
 * a trailing `.lock` or `/`, …). Throws CloneError `invalid_branch`.
 */
async function validateBranchName(name: string): Promise<void> {
  const shown = JSON.stringify(name.slice(0, 200));
  if (!name || name.length > 255 || name.startsWith('-') || /[\s\x00-\x1f\x7f]/.test(name) || name.includes('@{') || name === '@' || name === 'HEAD') {
    throw new CloneError(`Invalid branch name ${shown}`, 'invalid_branch');
  }
  const r = await runGit(['check-ref-format', '--branch', name], { env: baseChildEnv({ LC_ALL: 'C' }) });
  if (r.code !== 0 || r.stdout.trim() !== name) {
    throw new CloneError(`Invalid branch name ${shown}`, 'invalid_branch');
  }
}

interface Source {
  provider: GitProvider | null;
  baseUrl: string;
  token: string | null;
}

function credentialFor(providers: ProviderCredential[], provider: GitProvider): ProviderCredential | undefined {
  return providers.find((p) => p.provider === provider);
}

function baseUrlOrThrow(provider: GitProvider, host: string | null | undefined): string | null {
  try {
    return providerBaseUrl(provider, host);
  } catch (err) {
    if (err instanceof InvalidHostError) throw new CloneError(err.message, 'invalid_host');
    throw err;
  }
}

/** The ordered list of (host, token) sources to try; see the file comment. */
function cloneSources(provider: GitProvider | null, providers: ProviderCredential[]): Source[] {
  if (provider) {
    const cred = credentialFor(providers, provider);
    const baseUrl = baseUrlOrThrow(provider, cred?.host);
    if (!baseUrl) {
      throw new CloneError(`No host is stored for ${provider}: store one with add-git-providers`, 'invalid_host');
    }
    return [{ provider, baseUrl, token: cred?.token || null }];
  }
  const sources: Source[] = [];
  const seen = new Set<string>();
  for (const p of GIT_PROVIDERS) {
    const cred = credentialFor(providers, p);
    if (!cred?.token) continue;
    const baseUrl = baseUrlOrThrow(p, cred.host);
    if (!baseUrl) continue;
    sources.push({ provider: p, baseUrl, token: cred.token });
    seen.add(baseUrl);
  }
  const anonymous: [GitProvider, string | null | undefined][] = [
    ...GIT_PROVIDERS.flatMap((p) => {
      const cred = credentialFor(providers, p);
      return cred ? ([[p, cred.host]] as [GitProvider, string | null | undefined][]) : [];
    }),
    ['github', null],
  ];
  for (const [p, host] of anonymous) {
    const baseUrl = baseUrlOrThrow(p, host);
    if (!baseUrl || seen.has(baseUrl)) continue;
    sources.push({ provider: p, baseUrl, token: null });
    seen.add(baseUrl);
  }
  return sources;
}

/** Keeps the sources whose host GIT_ALLOWED_HOSTS names (by host, or host:port). */
function allowedSources(sources: Source[], allowed: string[] | null | undefined): Source[] {
  if (!allowed) return sources;
  const kept = sources.filter((s) => {
    const u = new URL(s.baseUrl);
    return allowed.includes(u.host.toLowerCase()) || allowed.includes(u.hostname.toLowerCase());
  });
  if (kept.length === 0) {
    const hosts = [...new Set(sources.map((s) => new URL(s.baseUrl).host))].join(', ');
    throw new CloneError(`${hosts || 'the host'} is not in GIT_ALLOWED_HOSTS (${allowed.join(', ') || 'empty'})`, 'invalid_host');
  }
  return kept;
}

function isInside(parent: string, child: string): boolean {
  const rel = relative(parent, child);
  return rel === '' || (!rel.startsWith('..') && !isAbsolute(rel));
}

function lastFatalLine(stderr: string): string {
  const lines = stderr
    .split(/\r?\n/)
    .map((l) => l.trim())
    .filter(Boolean);
  const fatal = lines.filter((l) => /^(fatal|error):/i.test(l));
  return (fatal.at(-1) ?? lines.at(-1) ?? '').slice(0, 500);
}

function classify(r: GitResult, source: Source, repo: string): { code: CloneErrorCode; reason: string } {
  const where = `${source.provider ?? 'anonymous'} at ${source.baseUrl}`;
  if (r.aborted) return { code: 'aborted', reason: 'the clone was cancelled' };
  if (r.timedOut) return { code: 'timeout', reason: `the clone from ${where} timed out` };
  const e = r.stderr;
  if (
    /Authentication failed|could not read (Username|Password)|terminal prompts disabled|HTTP Basic: Access denied|Invalid username or password/i.test(e) ||
    /returned error: 40[13]/i.test(e)
  ) {
    return source.token
      ? { code: 'auth_failed', reason: `${where} rejected the stored ${source.provider} token` }
      : {
          code: 'auth_required',
          reason: `${where} requires authentication and no ${source.provider ?? ''} token is stored`.replace(/ {2}/g, ' '),
        };
  }
  if (
    /Could not resolve host|Failed to connect|Connection refused|Connection timed out|Operation timed out|Couldn't connect/i.test(e) ||
    /Network is unreachable|No route to host|SSL certificate problem|schannel|gnutls_handshake/i.test(e)
  ) {
    return { code: 'unreachable', reason: `could not reach ${source.baseUrl} (${lastFatalLine(e)})` };
  }
  if (/not found|does not appear to be a git repository|returned error: 404|does not exist/i.test(e)) {
    return { code: 'not_found', reason: `repository ${repo} was not found at ${where}` };
  }
  return { code: 'git_failed', reason: `git clone from ${where} failed: ${lastFatalLine(e) || `exit code ${r.code}`}` };
}

const CODE_PRIORITY: CloneErrorCode[] = ['aborted', 'timeout', 'auth_failed', 'not_found', 'auth_required', 'git_failed', 'unreachable'];

function summaryCode(attempts: CloneAttempt[]): CloneErrorCode {
  for (const code of CODE_PRIORITY) if (attempts.some((a) => a.code === code)) return code;
  return 'git_failed';
}

/** The environment of a git command and where it runs. */
interface GitEnv {
  vars: Record<string, string>;
  launch?: ProcessLauncher;
}

async function currentBranch(dir: string, env: GitEnv): Promise<string | null> {
  const r = await runGit(['symbolic-ref', '--quiet', '--short', 'HEAD'], { cwd: dir, env: env.vars, launch: env.launch });
  return r.code === 0 ? r.stdout.trim() : null;
}

async function refExists(dir: string, ref: string, env: GitEnv): Promise<boolean> {
  const r = await runGit(['show-ref', '--verify', '--quiet', ref], { cwd: dir, env: env.vars, launch: env.launch });
  return r.code === 0;
}

async function checkedGit(args: string[], dir: string, env: GitEnv, scrub: (s: string) => string, code: CloneErrorCode): Promise<GitResult> {
  const r = await runGit(args, { cwd: dir, env: env.vars, launch: env.launch });
  if (r.code !== 0) throw new CloneError(scrub(`git ${args[0]} failed: ${lastFatalLine(r.stderr) || `exit code ${r.code}`}`), code);
  return r;
}

/** Checks out `branch` (or creates `workBranch` when none is given); returns the branch name. */
async function checkout(
  dir: string,
  repo: string,
  branch: string | null,
  workBranch: string,
  createWorkBranch: boolean,
  env: GitEnv,
  scrub: (s: string) => string,
): Promise<string> {
  const current = await currentBranch(dir, env);
  if (branch) {
    if (current === branch) return branch;
    if (await refExists(dir, `refs/heads/${branch}`, env)) {
      await checkedGit(['checkout', '-q', branch, '--'], dir, env, scrub, 'git_failed');
    } else if (await refExists(dir, `refs/remotes/origin/${branch}`, env)) {
      await checkedGit(['checkout', '-q', '-b', branch, '--track', `origin/${branch}`], dir, env, scrub, 'git_failed');
    } else if (await refExists(dir, `refs/tags/${branch}`, env)) {
      await checkedGit(['checkout', '-q', '--detach', `refs/tags/${branch}`], dir, env, scrub, 'git_failed');
    } else {
      throw new CloneError(`Branch ${JSON.stringify(branch)} does not exist in ${repo}`, 'branch_not_found');
    }
    return branch;
  }
  if (!createWorkBranch || current === workBranch) return current ?? workBranch;
  if (await refExists(dir, `refs/heads/${workBranch}`, env)) {
    await checkedGit(['checkout', '-q', workBranch, '--'], dir, env, scrub, 'git_failed');
    return workBranch;
  }
  const hasCommit = (await runGit(['rev-parse', '--verify', '--quiet', 'HEAD'], { cwd: dir, env: env.vars, launch: env.launch })).code === 0;
  if (hasCommit) {
    await checkedGit(['checkout', '-q', '-b', workBranch], dir, env, scrub, 'git_failed');
  } else {
    // An empty repository: HEAD is unborn, point it at the work branch.
    await checkedGit(['symbolic-ref', 'HEAD', `refs/heads/${workBranch}`], dir, env, scrub, 'git_failed');
  }
  return workBranch;
}

/** Clones `opts.repository` into `opts.workspaceDir`; see the file comment. Throws CloneError. */
export async function cloneRepository(opts: CloneOptions): Promise<CloneResult> {
  const tokens = new Redactor();
  tokens.add(...opts.providers.map((p) => p.token));
  const scrub = (s: string): string => tokens.redact(opts.redact(s));
  try {
    return await cloneInner(opts, scrub);
  } catch (err) {
    if (err instanceof CloneError) {
      const attempts = err.attempts.map((a) => ({ ...a, reason: scrub(a.reason) }));
      throw new CloneError(scrub(err.message), err.code, attempts);
    }
    const message = err instanceof Error ? err.message : String(err);
    throw new CloneError(scrub(`Could not clone ${opts.repository}: ${message}`), 'git_failed');
  }
}

/** The error when no source could be cloned: each attempt's reason. */
function cloneFailed(repo: string, attempts: CloneAttempt[]): CloneError {
  const detail = attempts.length === 1 ? attempts[0]!.reason : attempts.map((a, i) => `(${i + 1}) ${a.reason}`).join('; ');
  return new CloneError(`Could not clone ${repo}: ${detail}`, summaryCode(attempts), attempts);
}

async function cloneInner(opts: CloneOptions, scrub: (s: string) => string): Promise<CloneResult> {
  const repo = normalizeRepository(opts.repository);
  const branch = opts.branch?.trim() ? opts.branch.trim() : null;
  if (branch) await validateBranchName(branch);
  const workBranch = opts.workBranch ?? `parley/${randomBytes(4).toString('hex')}`;
  if (!branch) await validateBranchName(workBranch);

  const dir = resolve(opts.workspaceDir);
  if (!opts.helperDir) throw new CloneError('helperDir is required', 'invalid_options');
  const helperDir = resolve(opts.helperDir);
  if (isInside(dir, helperDir)) throw new CloneError('helperDir must be outside the workspace', 'invalid_options');
  const files = opts.files;
  const st = await files.stat(files.root).catch(() => null);
  if (st?.type !== 'dir') throw new CloneError(`Workspace directory ${files.root} does not exist`, 'invalid_options');

  const sources = allowedSources(cloneSources(opts.provider, opts.providers), opts.allowedHosts);
  const askpass = await ensureAskpassScript(helperDir);
  const gitEnv = (extra: Record<string, string> = {}) =>
    baseChildEnv({
      LC_ALL: 'C',
      GIT_TERMINAL_PROMPT: '0',
      GIT_ASKPASS: askpass,
      GIT_ALLOW_PROTOCOL: 'http:https',
      ...extra,
    });
  const cloneVars = { LC_ALL: 'C', GIT_TERMINAL_PROMPT: '0', GIT_ASKPASS: askpass, GIT_ALLOW_PROTOCOL: 'http:https' };
  // git runs in the conversation's sandbox when there is one
  const env: GitEnv = opts.sandbox ? { vars: opts.sandbox.env(cloneVars), launch: opts.sandbox } : { vars: gitEnv() };
  const identity = { ...DEFAULT_GIT_IDENTITY, ...opts.gitIdentity };

  // Resume: an existing clone of one of the candidate remotes is reused as it is.
  const entries = (await files.list(files.root, { depth: 1, hidden: true, max: 10 })).entries;
  if (entries.length > 0) {
    let origin: string | null = null;
    if ((await files.stat(posix.join(files.root, '.git')).catch(() => null)) !== null) {
      const r = await runGit(['remote', 'get-url', 'origin'], { cwd: dir, env: env.vars, launch: env.launch });
      origin = r.code === 0 ? r.stdout.trim() : null;
    }
    const match = sources.find((s) => `${s.baseUrl}/${repo}.git` === origin);
    if (!match || !origin) {
      throw new CloneError(`Workspace ${files.root} is not empty and holds no clone of ${repo}`, 'workspace_not_empty');
    }
    opts.onPhase?.('checking_out', branch ?? opts.workBranch ?? undefined);
    const checkedOut = await checkout(dir, repo, branch, workBranch, opts.workBranch !== undefined, env, scrub);
    opts.onPhase?.('ready', 'existing clone reused');
    return { dir, branch: checkedOut, provider: match.provider, remoteUrl: origin, reused: true };
  }

  const attempts: CloneAttempt[] = [];
  let chosen: Source | null = null;
  for (const source of sources) {
    const url = `${source.baseUrl}/${repo}.git`;
    opts.onPhase?.('cloning', `${repo} from ${source.baseUrl}${source.token ? ` with the ${source.provider} token` : ''}`);
    const creds = source.token && source.provider ? tokenCredentials(source.provider, source.token) : null;
    const credEnv: Record<string, string> = creds
      ? { PARLEY_ASKPASS_USERNAME: creds.username, PARLEY_ASKPASS_PASSWORD: creds.password, PARLEY_ASKPASS_ORIGIN: askpassOrigin(source.baseUrl) }
      : {};
    // into the workspace itself (`.`): in a sandbox, as its uid, with the daemon's network
    const r = await runGit(['clone', '--no-progress', '--', url, '.'], {
      cwd: dir,
      env: opts.sandbox ? opts.sandbox.env({ ...cloneVars, ...credEnv }) : gitEnv(credEnv),
      launch: opts.sandbox,
      hostNetwork: true,
      clone: true,
      signal: opts.signal,
      timeoutMs: opts.timeoutMs ?? 15 * 60_000,
    });
    if (r.code === 0 && !r.aborted && !r.timedOut) {
      chosen = source;
      break;
    }
    await files.clear(files.root);
    const { code, reason } = classify(r, source, repo);
    attempts.push({ provider: source.provider, baseUrl: source.baseUrl, authenticated: !!source.token, code, reason });
    if (code === 'aborted' || code === 'timeout') break;
  }
  if (!chosen) throw cloneFailed(repo, attempts);

  const remoteUrl = `${chosen.baseUrl}/${repo}.git`;
  try {
    await checkedGit(['config', 'user.name', identity.name], dir, env, scrub, 'git_failed');
    await checkedGit(['config', 'user.email', identity.email], dir, env, scrub, 'git_failed');
    // An empty value resets the helper list: nothing configured on the machine can store a token.
    await checkedGit(['config', 'credential.helper', ''], dir, env, scrub, 'git_failed');
    opts.onPhase?.('checking_out', branch ?? workBranch);
    const checkedOut = await checkout(dir, repo, branch, workBranch, true, env, scrub);
    const origin = (await runGit(['remote', 'get-url', 'origin'], { cwd: dir, env: env.vars, launch: env.launch })).stdout.trim();
    if (origin !== remoteUrl) {
      await checkedGit(['remote', 'set-url', 'origin', remoteUrl], dir, env, scrub, 'git_failed');
    }
    opts.onPhase?.('ready', checkedOut);
    return { dir, branch: checkedOut, provider: chosen.provider, remoteUrl, reused: false };
  } catch (err) {
    // Leave an empty workspace so a retry starts from scratch.
    await files.clear(files.root).catch(() => {});
    throw err;
  }
}
