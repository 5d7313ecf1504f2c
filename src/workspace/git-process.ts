/**
 * Runs git as a child process: arguments as an array (never a shell string), its own process
 * group (so an abort or timeout kills git and its helpers such as git-remote-http), a bounded
 * capture of stdout/stderr, a deadline, and an environment built from scratch (see child-env.ts).
 *
 * This is the daemon's own git (changes and diff for the API and the console, the clone and the
 * preparation of a repository), run in the conversation's sandbox on a repository the agent
 * controls: its `.git/config` (and what it includes), its hooks, its attributes and HOME's
 * `.gitconfig` are the agent's. So git must run nothing the repository names, and that is not
 * left to a list of the keys known to run programs (filters and diff drivers take any name, and
 * git grows new ones):
 *
 * - the kernel: git runs under RLIMIT_NPROC 0 (util-linux `prlimit`, the last program before git),
 *   so it can start no process and no thread at all: no hook, fsmonitor, filter, textconv, diff
 *   driver, pager, editor, askpass, credential helper, ssh or remote helper, whatever config names
 *   it. (A fork is refused when the uid already has as many processes as the limit; the sandbox's
 *   uid is never root, the one uid the kernel exempts.) Only the clone may start processes (its
 *   transport and index-pack): it runs before any process of the conversation, into an empty
 *   workspace, with no repository config yet;
 * - the configuration: no system or global config (GIT_CONFIG_NOSYSTEM, GIT_CONFIG_GLOBAL=/dev/null),
 *   and on the command line (which wins over the repository's own) the known executors switched
 *   off, network transports refused, and git's threads off (the limit would make them fail);
 *   status leaves submodules' worktrees alone (looking into one runs git in it).
 */
import { childProcess } from '../builtins.js';
import { signalGroup } from '../process-group.js';
import type { ProcessLauncher } from '../sandbox/types.js';

export interface GitResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
  aborted: boolean;
  timedOut: boolean;
}

export interface GitRunOptions {
  cwd?: string;
  env: Record<string, string>;
  signal?: AbortSignal;
  timeoutMs?: number;
  /** Runs git in the conversation's sandbox (src/sandbox/) instead of as a plain process. */
  launch?: ProcessLauncher;
  /** With `launch`: git keeps the daemon's network (the clone; ProcessLauncher.spawn). */
  hostNetwork?: boolean;
  /** The clone only: git may start processes (its transport), and reach the network. */
  clone?: boolean;
}

const MAX_CAPTURE = 1024 * 1024;
/** A git command with no deadline of its own gets this one (a FIFO for HEAD would block it forever). */
const DEFAULT_TIMEOUT_MS = 60_000;

/** Command-line settings of the daemon's git: they win over every config file git reads. */
const DAEMON_GIT_CONFIG = [
  'core.fsmonitor=false',
  'core.hooksPath=/dev/null',
  'core.pager=cat',
  'core.editor=:',
  'core.askPass=',
  'core.sshCommand=',
  'core.attributesFile=/dev/null',
  'credential.helper=',
  'diff.external=',
  'log.showSignature=false',
  'submodule.recurse=false',
  // threads fail under the process limit: git would die on its first one
  'core.preloadIndex=false',
  'index.threads=1',
  'checkout.workers=1',
  'pack.threads=1',
  'core.untrackedCache=false',
];

/** The environment of the daemon's git on top of the caller's: only the repository's own config is read. */
const DAEMON_GIT_ENV = {
  GIT_CONFIG_NOSYSTEM: '1',
  GIT_CONFIG_GLOBAL: '/dev/null',
  GIT_ATTR_NOSYSTEM: '1',
  GIT_PAGER: 'cat',
  PAGER: 'cat',
  GIT_EDITOR: ':',
  GIT_SEQUENCE_EDITOR: ':',
  GIT_TERMINAL_PROMPT: '0',
  // status does not rewrite the index (the agent's; and a lock file it might be waiting for)
  GIT_OPTIONAL_LOCKS: '0',
};

const quote = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;

/**
 * The same git for a shell script the daemon runs in a sandbox (e.g. an archive made with a temporary
 * index): the environment, and a `git` function that runs every git of the script as runGit does.
 * (`prlimit` execs the git program itself, not the function: the shell may still start processes.)
 */
export function daemonGitShellPrelude(): string {
  const env = Object.entries(DAEMON_GIT_ENV).map(([k, v]) => `export ${k}=${quote(v)}`);
  const config = [...DAEMON_GIT_CONFIG, 'protocol.allow=never'].map((c) => `-c ${quote(c)}`).join(' ');
  return `${env.join('; ')}; git() { prlimit --nproc=0:0 -- git --no-pager ${config} "$@"; }`;
}

/** git's argv as the daemon runs it (see the file comment). */
function daemonGitArgv(args: string[], clone = false): string[] {
  const config = [...DAEMON_GIT_CONFIG, ...(clone ? [] : ['protocol.allow=never'])].flatMap((c) => ['-c', c]);
  const git = ['git', '--no-pager', ...config, ...args];
  return clone ? git : ['prlimit', '--nproc=0:0', '--', ...git];
}

export function runGit(args: string[], opts: GitRunOptions): Promise<GitResult> {
  return new Promise((resolve, reject) => {
    if (opts.signal?.aborted) {
      resolve({ code: null, signal: null, stdout: '', stderr: '', aborted: true, timedOut: false });
      return;
    }
    const argv = daemonGitArgv(args, opts.clone);
    const env = { ...opts.env, ...DAEMON_GIT_ENV };
    const child = opts.launch
      ? opts.launch.spawn(argv, { cwd: opts.cwd ?? '.', env, stdio: ['ignore', 'pipe', 'pipe'], hostNetwork: opts.hostNetwork })
      : childProcess().spawn(argv[0]!, argv.slice(1), { cwd: opts.cwd, env, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    let aborted = false;
    let timedOut = false;
    child.stdout!.setEncoding('utf8');
    child.stderr!.setEncoding('utf8');
    child.stdout!.on('data', (d: string) => {
      if (stdout.length < MAX_CAPTURE) stdout += d;
    });
    child.stderr!.on('data', (d: string) => {
      if (stderr.length < MAX_CAPTURE) stderr += d;
    });
    const onAbort = () => {
      aborted = true;
      signalGroup(child.pid);
    };
    opts.signal?.addEventListener('abort', onAbort, { once: true });
    const timer = setTimeout(() => {
      timedOut = true;
      signalGroup(child.pid);
    }, opts.timeoutMs ?? DEFAULT_TIMEOUT_MS);
    child.on('error', (err) => {
      clearTimeout(timer);
      opts.signal?.removeEventListener('abort', onAbort);
      reject(err);
    });
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      opts.signal?.removeEventListener('abort', onAbort);
      resolve({ code, signal, stdout, stderr, aborted, timedOut });
    });
  });
}
