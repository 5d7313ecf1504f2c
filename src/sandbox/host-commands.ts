/**
 * Short host commands (mkfs, mount, umount, e2fsck, mkfifo, a new sandbox's seal), run by one small
 * `sh` the daemon keeps instead of each being spawned by the daemon.
 *
 * A spawn from the daemon forks the whole process, and the calling thread waits until the child has
 * exec'd: on a 2-core machine 13–21 ms per spawn of the daemon (a bare node process: ~4 ms), in which
 * its event loop serves nothing. A spare sandbox's start ran up to seven of them, most of them while
 * another conversation's turn was in progress. The runner is a shell of about a megabyte: its forks
 * and execs take its own time, on the other CPU; the daemon writes one line and reads two.
 *
 * The protocol, one line each way: the daemon writes `<id> <command>` (a shell command, every
 * argument quoted: `shellCommand`); the runner starts it in the background (stdin /dev/null, stdout
 * discarded) and writes `<id> p <pid>`, then once it has ended `<id> <exit status>`, followed for a
 * failure by the end of its stderr (newlines as \x01). A command with a newline in it could not be
 * one line: it is spawned directly, as before. A command past its timeout is killed with everything
 * it started (the processes below its pid) and reported with exit code -1. A command that says
 * something while it runs (`onMessage`: the daemon writes `+<id>`) has the runner's stdout as fd 9
 * and its id as `$i`, and writes `<id> m <text>` lines there; no other command has that fd.
 */
import type { ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import { childProcess } from '../builtins.js';
import { signalGroup } from '../process-group.js';

/** What a host command ended with: its exit status (-1: killed at its timeout, or it could not run) and the end of its stderr. */
export interface HostResult {
  code: number;
  stderr: string;
}

const RUNNER =
  // biome-ignore lint/suspicious/noTemplateCurlyInString: the shell's own parameter expansions
  'while IFS= read -r l; do i=${l%% *}; c=${l#* }; w=; case $i in +*) i=${i#+}; w=1;; esac; ' +
  '{ [ -z "$w" ] || exec 9>&1; e=$(eval "$c" 2>&1 >/dev/null); r=$?; ' +
  'if [ "$r" = 0 ]; then echo "$i 0"; else m=$(printf %s "$e" | tail -c 1000 | tr "\\n" "\\001"); echo "$i $r $m"; fi; } & ' +
  'echo "$i p $!"; done; wait';

const PATH_ENV = '/usr/sbin:/usr/bin:/sbin:/bin';

/** `argv` as one shell command: each argument single-quoted, so nothing in it is the shell's. */
export function shellCommand(argv: string[]): string {
  return argv.map((a) => `'${a.replaceAll("'", `'\\''`)}'`).join(' ');
}

interface Pending {
  resolve: (r: HostResult) => void;
  timer: NodeJS.Timeout;
  onMessage?: (text: string) => void;
}

let runner: { proc: ChildProcess; pending: Map<number, Pending> } | null = null;
let seq = 0;
/** The pids of the commands running, by id (what a timeout kills). */
const pids = new Map<number, number>();
/** Commands past their timeout whose pid has not come yet: killed when it does. */
const overdue = new Set<number>();

function startRunner(): NonNullable<typeof runner> {
  // its own session: a terminal's ^C to the daemon's group does not reach a mkfs half done
  const proc = childProcess().spawn('/bin/sh', ['-c', RUNNER], { cwd: '/', env: { PATH: PATH_ENV }, stdio: ['pipe', 'pipe', 'ignore'], detached: true });
  const r = { proc, pending: new Map<number, Pending>() };
  let buffered = '';
  proc.stdout!.setEncoding('utf8');
  proc.stdout!.on('data', (d: string) => {
    buffered += d;
    let nl = buffered.indexOf('\n');
    while (nl >= 0) {
      answer(r.pending, buffered.slice(0, nl));
      buffered = buffered.slice(nl + 1);
      nl = buffered.indexOf('\n');
    }
  });
  proc.stdin!.on('error', () => {});
  const gone = () => {
    if (runner === r) runner = null;
    for (const [id, p] of r.pending) finish(r.pending, id, p, { code: -1, stderr: 'the host command runner ended' });
  };
  proc.once('exit', gone);
  proc.once('error', gone);
  proc.unref();
  (proc.stdout as unknown as { unref?: () => void }).unref?.();
  return r;
}

function answer(pending: Map<number, Pending>, line: string): void {
  const sp = line.indexOf(' ');
  const id = Number(line.slice(0, sp));
  const p = pending.get(id);
  const rest = line.slice(sp + 1);
  if (rest.startsWith('p ')) {
    const pid = Number(rest.slice(2));
    if (p) pids.set(id, pid);
    // past its timeout before its pid came
    else if (overdue.delete(id)) killJob(pid);
    return;
  }
  if (!p) return;
  if (rest.startsWith('m ')) return p.onMessage?.(rest.slice(2));
  const sp2 = rest.indexOf(' ');
  const code = Number(sp2 < 0 ? rest : rest.slice(0, sp2));
  finish(pending, id, p, { code, stderr: sp2 < 0 ? '' : rest.slice(sp2 + 1).replaceAll('\x01', '\n') });
}

function finish(pending: Map<number, Pending>, id: number, p: Pending, r: HostResult): void {
  pending.delete(id);
  pids.delete(id);
  clearTimeout(p.timer);
  p.resolve(r);
}

/** Runs a shell command (`shellCommand`) on the host to its end; never rejects. `onMessage`: what it says on fd 9 (see above). */
export function hostCommand(command: string, timeoutMs = 60_000, onMessage?: (text: string) => void): Promise<HostResult> {
  if (command.includes('\n') || command.includes('\0')) {
    if (onMessage) return Promise.resolve({ code: -1, stderr: 'a command that says something while it runs must be one line' });
    return spawnDirect(command, timeoutMs);
  }
  runner ??= startRunner();
  const r = runner;
  const id = ++seq;
  return new Promise<HostResult>((resolve) => {
    const timer = setTimeout(() => {
      const pid = pids.get(id);
      if (pid) killJob(pid);
      else overdue.add(id);
      finish(r.pending, id, p, { code: -1, stderr: 'timed out' });
    }, timeoutMs);
    const p: Pending = { resolve, timer, onMessage };
    r.pending.set(id, p);
    r.proc.stdin!.write(`${onMessage ? '+' : ''}${id} ${command}\n`);
  });
}

/** `hostCommand` that rejects, with the program's last line of stderr, unless it exited 0. */
export async function runOnHost(argv: string[], timeoutMs?: number): Promise<void> {
  const r = await hostCommand(shellCommand(argv), timeoutMs);
  if (r.code !== 0) throw new Error(`${argv[0]!.split('/').pop()}: ${lastLine(r.stderr) || (r.code === -1 ? 'timed out' : `exit code ${r.code}`)}`);
}

export const lastLine = (s: string): string => s.trim().split('\n').pop() ?? '';

/** A command the runner cannot take (a newline in it): `sh -c` spawned by the daemon. */
function spawnDirect(command: string, timeoutMs: number): Promise<HostResult> {
  return new Promise((resolve) => {
    const p = childProcess().spawn('/bin/sh', ['-c', command], { cwd: '/', env: { PATH: PATH_ENV }, stdio: ['ignore', 'ignore', 'pipe'], detached: true });
    let stderr = '';
    const timer = setTimeout(() => signalGroup(p.pid), timeoutMs);
    p.stderr!.on('data', (d: Buffer) => (stderr = (stderr + d.toString('utf8')).slice(-1000)));
    p.once('error', (e) => {
      clearTimeout(timer);
      resolve({ code: -1, stderr: e.message });
    });
    p.once('close', (code) => {
      clearTimeout(timer);
      resolve({ code: code ?? -1, stderr });
    });
  });
}

/** Kills a job of the runner: its subshell and every process below it. */
function killJob(pid: number): void {
  for (const p of [...below(pid).reverse(), pid]) {
    try {
      process.kill(p, 'SIGKILL');
    } catch {
      /* gone */
    }
  }
}

/** The processes below `root` now (parent links of /proc/<pid>/stat). */
function below(root: number): number[] {
  const children = new Map<number, number[]>();
  for (const d of fs.readdirSync('/proc')) {
    if (d.charCodeAt(0) > 57) continue;
    try {
      const stat = fs.readFileSync(`/proc/${d}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      children.set(ppid, [...(children.get(ppid) ?? []), Number(d)]);
    } catch {
      /* gone meanwhile */
    }
  }
  const out: number[] = [];
  const walk = (p: number) => {
    for (const c of children.get(p) ?? []) {
      out.push(c);
      walk(c);
    }
  };
  walk(root);
  return out;
}

/**
 * A stop: kills the commands still running with the runner (their group is the runner's), or with
 * `graceful` lets them finish, and waits (at most `ms`) until the runner has exited.
 */
export async function endHostCommands(ms: number, graceful = false): Promise<void> {
  const r = runner;
  if (!r) return;
  runner = null;
  const exited = new Promise<void>((resolve) => {
    if (r.proc.exitCode !== null || r.proc.signalCode !== null) return resolve();
    const t = setTimeout(resolve, ms);
    r.proc.once('exit', () => {
      clearTimeout(t);
      resolve();
    });
  });
  if (graceful || r.pending.size === 0) r.proc.stdin!.end();
  else signalGroup(r.proc.pid);
  await exited;
}
