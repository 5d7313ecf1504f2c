/**
 * How a process enters a conversation's sandbox, and how a holder is supervised: the `sh` that
 * sets the rlimits and joins the conversation's cgroup before anything else runs, then (a joiner)
 * util-linux `nsenter` into the holder's namespaces and perl's loader (its session, every capability
 * dropped, the seccomp filter) — or (a holder) bwrap run under that `sh` as the supervisor of its
 * process group.
 */
import type { ChildProcess, StdioOptions } from 'node:child_process';
import type { Writable } from 'node:stream';
import { childProcess } from '../builtins.js';
import type { ConversationCgroup } from './cgroup.js';
import { seccompLoader } from './seccomp.js';
import type { MappedDir, SandboxSettings } from './settings.js';

/** How a process joins its conversation's sandbox (util-linux, perl). */
export interface JoinTools {
  nsenter: string;
  setpriv: string;
  /**
   * What runs inside a sandbox, found in the system's directories (which every sandbox shows): perl
   * loads the seccomp filter in a joined process (seccomp.ts) and starts the file service
   * (service-start.ts). The daemon's PATH may name another first that the sandbox does not show.
   */
  inside: { perl: string };
}

/** The daemon's fds on a holder's namespace files, its root and /workspace (a joiner opens /proc/<daemon>/fd/<n>). */
export interface HolderFds {
  user: number;
  pid: number;
  mnt: number;
  ipc: number;
  uts: number;
  /** Only when the holder's differs from the daemon's (--unshare-cgroup-try). */
  cgroup: number | null;
  /** Only when the sandbox has a network of its own (egress, none). */
  net: number | null;
  root: number;
  cwd: number;
}

/** What joining needs of the daemon's sandbox: the settings in force, the tools, the seccomp filter. */
export interface JoinSetup {
  settings: SandboxSettings;
  join: JoinTools;
  hasCgroups: boolean;
  /** A root daemon: nsenter sets the sandbox's ids itself. */
  asRoot: boolean;
  /** The agent's seccomp program, in hex (seccomp.ts). */
  filterHex: string;
}

/** What a joiner needs of its holder (holder-launch.ts). */
export interface JoinTarget {
  readonly cgroup: ConversationCgroup | null;
  readonly ready: Promise<void>;
  readonly fds: HolderFds | null;
  /** The daemon ended it (closed, evicted, stopping): a joiner waiting for it is not given another. */
  readonly stopped: boolean;
  /** Its joiners not yet exited (or a token for one being started): its fds stay open while any is. */
  readonly users: Set<object>;
  /** Closes its fds once it is dead and no joiner is left. */
  release(): void;
}

/** The stdio of a joiner: the caller's three, then fd 3 = the pipe that carries the holder's fd numbers. */
function joinerStdio(stdio: StdioOptions | undefined): StdioOptions {
  if (Array.isArray(stdio) && stdio.length > 3) throw new Error('a sandboxed process gets stdin, stdout and stderr only (fd 3 carries the sandbox)');
  const base = stdio === undefined || typeof stdio === 'string' ? [stdio ?? 'pipe', stdio ?? 'pipe', stdio ?? 'pipe'] : [...stdio];
  while (base.length < 3) base.push('pipe');
  return [...base, 'pipe'] as StdioOptions;
}

/**
 * Starts `argv` in a holder's sandbox, in its /workspace, with `env` as the sandbox sees it (translateEnv):
 * the `sh` of wrapCommand waits on fd 3 for the holder's fd numbers and cgroup, written once the holder is
 * ready. A holder whose start fails is replaced once by `replace` (the conversation's next holder: the
 * joiner has not entered anything yet, so it joins that one instead); with none, or when that one fails
 * too, nothing is written: the joiner says so and exits. The joiner is one of its holder's users until it exits.
 */
export function joinHolder(
  b: JoinSetup,
  holder: JoinTarget,
  argv: string[],
  opts: { env: Record<string, string>; stdio?: StdioOptions; hostNetwork?: boolean },
  replace: () => JoinTarget | null = () => null,
): ChildProcess {
  const full = joinerArgv(b, argv, opts.hostNetwork);
  const child = childProcess().spawn(full[0]!, full.slice(1), { env: opts.env, stdio: joinerStdio(opts.stdio), detached: true });
  let target = holder;
  target.users.add(child);
  const control = child.stdio[3] as Writable | null;
  control?.on('error', () => {
    /* the child is gone */
  });
  const exited = () => child.exitCode !== null || child.signalCode !== null;
  const hand = (h: JoinTarget, again: boolean) =>
    h.ready.then(
      () => {
        const f = h.fds;
        control?.end(f ? fdLine(f, h.cgroup) : undefined);
      },
      () => {
        const next = again && !h.stopped && !exited() ? replace() : null;
        if (!next || next === h) return control?.end();
        next.users.add(child);
        h.users.delete(child);
        h.release();
        target = next;
        hand(next, false);
      },
    );
  hand(holder, true);
  const release = () => {
    target.users.delete(child);
    target.release();
  };
  child.once('exit', release);
  child.once('error', release);
  return child;
}

/** The whole command line of a joiner running `argv` (the `sh` of wrapCommand first; the holder it joins comes on its fd 3). */
export function joinerArgv(b: JoinSetup, argv: string[], hostNetwork = false): string[] {
  return wrapCommand(b, null, [...joinArgs(b.join, b.asRoot, b.filterHex), ...argv], hostNetwork ? 'join-host-network' : 'join');
}

/** What a joiner's `sh` reads on fd 3: the numbers of the daemon's fds on the holder, then its cgroup's procs files. */
export function fdLine(f: HolderFds, cgroup: ConversationCgroup | null): string {
  const files = cgroup?.procsFiles ?? [];
  // (the joiner splits the line on spaces; the daemon names its cgroups without any)
  if (files.some((p) => /\s/.test(p))) throw new Error(`a cgroup path with a space: ${JSON.stringify(files)}`);
  return `${f.user} ${f.pid} ${f.mnt} ${f.ipc} ${f.uts} ${f.root} ${f.cwd} ${f.cgroup ?? 'x'} ${f.net ?? 'x'} ${files.join(' ')}\n`;
}

/** An environment as the sandbox sees it: values naming a mapped host directory name it where the sandbox shows it. */
export function translateEnv(env: Record<string, string>, mapped: MappedDir[]): Record<string, string> {
  if (mapped.length === 0) return env;
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(env)) {
    let val = v;
    for (const m of mapped) if (val === m.host || val.startsWith(`${m.host}/`)) val = m.inside + val.slice(m.host.length);
    out[k] = val;
  }
  return out;
}

/**
 * One `sh` around a joiner or a holder: the file size limit (ulimit -f, 512-byte blocks in POSIX sh), the
 * data limit when there is no cgroup (ulimit -d, KiB), and the cgroup join before exec, so every
 * process of the sandbox is counted from its first fork. A joiner (`join`) reads the numbers of
 * the daemon's fds on the holder and the procs files of the holder's cgroup from fd 3 (written once
 * the holder is ready: the joiner may be spawned before, and the holder it joins may be another than
 * the one it was spawned for, see joinHolder; nothing when it failed), joins the cgroup, then execs
 * `nsenter` with them (/proc/<daemon>/fd/<n>: the holder's pid is never looked up again, so a reused
 * pid cannot put a process in another sandbox); nsenter does not fork into the pid namespace (it would
 * wait for its child's stops too), the loader does: see seccompLoader;
 * `join-host-network` leaves out the network namespace (the clone: the daemon's network, before any
 * process of the conversation runs).
 *
 * A holder (`supervise`) is not exec'd but run under the `sh`, which stays as the supervisor of its
 * process group: bwrap's first child waits on an eventfd until bwrap's parent has set it up, so a
 * bwrap parent that dies early (SIGKILL by its --die-with-parent when the daemon dies, SIGPIPE
 * writing --info-fd to a dead daemon) leaves that child blocked forever, with a pid namespace and
 * no parent. The supervisor gets SIGTERM when its parent dies (the spawner's `pdeathsig`, which the
 * caller asks for; a parent gone before that was set shows as a changed $PPID), and when bwrap exits for any reason it kills the
 * whole group, that child included (before its setsid it is in the group). Its cgroup, `cgroup`, is
 * made before it starts.
 */
export function wrapCommand(
  s: { settings: SandboxSettings; join: JoinTools; hasCgroups: boolean },
  cgroup: ConversationCgroup | null,
  argv: string[],
  mode: 'join' | 'join-host-network' | 'supervise',
  /** The pid that starts it (a holder's: the spawner's). */
  parent = process.pid,
): string[] {
  let script = `ulimit -f ${s.settings.fileSizeMb * 2048} || exit 125; `;
  if (!s.hasCgroups) script += `ulimit -d ${s.settings.memoryMb * 1024} || exit 125; `;
  if (mode !== 'supervise') {
    const d = `/proc/${process.pid}/fd`;
    // (the cgroup's procs files are the rest of the line: split on spaces, never globbed)
    script +=
      'read -r u p m i t r w c n g <&3 || { echo "parley: the conversation\'s sandbox is not running" >&2; exit 125; }; exec 3<&-; ' +
      'set -f; for f in $g; do echo $$ > "$f" || exit 125; done; set +f; ' +
      `o="--no-fork --user=${d}/$u --pid=${d}/$p --mount=${d}/$m --ipc=${d}/$i --uts=${d}/$t --root=${d}/$r --wd=${d}/$w"; ` +
      `[ "$c" = x ] || o="$o --cgroup=${d}/$c"; ${mode === 'join' ? `[ "$n" = x ] || o="$o --net=${d}/$n"; ` : ''}` +
      `exec ${s.join.nsenter} $o "$@"`;
  } else {
    // (umask 022 for bwrap: the directories it makes on the way to a mount point must be enterable
    // by the sandbox's uid; the conversation's own processes keep the daemon's 077; the supervisor
    // keeps no copy of bwrap's fds, its channel to the file service above all: see holder-launch.ts)
    script += 'k=$1; shift; while [ "$k" -gt 0 ]; do echo $$ > "$1" || exit 125; shift; k=$((k-1)); done; ';
    script += `[ "$PPID" = ${parent} ] || exit 125; trap 'kill -KILL 0' TERM; umask 022; "$@" & exec 3<&- 4<&- 5<&- 6<&- 7<&- 8<&- 9<&-; wait $!; kill -KILL 0`;
  }
  if (mode !== 'supervise') return ['/bin/sh', '-c', script, 'sh', ...argv];
  const files = cgroup?.procsFiles ?? [];
  return ['/bin/sh', '-c', script, 'sh', String(files.length), ...files, ...argv];
}

/**
 * nsenter's arguments after the namespaces, then the command. As root nsenter clears the groups and
 * becomes uid 0 of the user namespace (the sandbox uid on the host); otherwise the daemon's uid,
 * which is 0 inside (--preserve-credentials: nsenter could not set groups in an unprivileged user
 * namespace). Then perl runs the loader (seccomp.ts): not dumpable, a fork into the pid namespace
 * whose parent waits outside it; in the child its own session, SIGKILL when that parent dies, every
 * capability entering the user namespace gave dropped (uid 0 would keep them across exec),
 * no_new_privs, the sandbox's seccomp filter (a joined process does not inherit the holder's), and
 * the command.
 */
function joinArgs(j: JoinTools, asRoot: boolean, filterHex: string): string[] {
  const creds = asRoot ? [] : ['--preserve-credentials'];
  loader ??= seccompLoader();
  return [...creds, '--', j.inside.perl, '-e', loader, '--', filterHex];
}
let loader: string | undefined;
