/**
 * The per-conversation sandbox launcher: every process the agent causes (the terminal's shell,
 * setup.sh, git after the clone, stdio MCP servers) is started through `spawn()`.
 *
 * bwrap mode: each process runs in its own `bwrap` (new user, pid, ipc and uts namespaces, and a
 * network namespace with only loopback when SANDBOX_NETWORK=none; the system read-only, the
 * conversation's workspace read-write at /workspace, private /tmp and HOME, its own /proc,
 * --die-with-parent, --new-session, all capabilities dropped). The processes of one conversation
 * share one cgroup (memory, pids), so the limits are per conversation. A bwrap per process costs
 * a few milliseconds (scripts/bench-sandbox.ts) and keeps kill-all simple: killing the outer bwrap
 * ends its pid namespace (the namespace's init dies through --die-with-parent, and the kernel kills
 * every process in it), and so does the daemon's death, kill -9 included.
 *
 * none mode: plain processes in their own process group, with the same built environment (never
 * the daemon's) and the same kill-all bookkeeping.
 *
 * Paths: callers pass host paths (cwd, environment values under a mapped directory); they are
 * translated to what the sandbox sees.
 */
import { spawn as spawnChild, type ChildProcess, type StdioOptions } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import type { Logger } from 'pino';
import { baseChildEnv } from '../workspace/child-env.js';
import { workspacePath } from '../workspace/workspace.js';
import { detectCgroups, type CgroupBackend, type ConversationCgroup } from './cgroup.js';
import { PathView } from './path-view.js';
import type { ProcessLauncher } from './types.js';
import { signalGroup } from '../process-group.js';

export type SandboxModeSetting = 'auto' | 'bwrap' | 'none';

export interface SandboxSettings {
  mode: SandboxModeSetting;
  network: 'host' | 'none';
  memoryMb: number;
  pids: number;
  fileSizeMb: number;
  /** Most conversations with live sandboxed processes; the least recently used idle one is closed. */
  maxLive: number;
  /** The bwrap binary (BWRAP_PATH), else `bwrap` from PATH. */
  bwrapPath?: string;
  /** Extra host directories mounted read-only at the same path (SANDBOX_RO_BINDS). */
  roBinds: string[];
}

export const DEFAULT_SANDBOX_SETTINGS: SandboxSettings = {
  mode: 'none',
  network: 'host',
  memoryMb: 4096,
  pids: 512,
  fileSizeMb: 1024,
  maxLive: 64,
  roBinds: [],
};

/** A host directory shown inside every sandbox (read-only) at `inside`. */
export interface MappedDir {
  host: string;
  inside: string;
}

export interface Bind {
  host: string;
  inside: string;
  rw?: boolean;
}

export interface SandboxSpawnOptions {
  /** Working directory as a host path (inside the workspace) or a visible path. Default: the workspace. */
  cwd?: string;
  /** The complete environment (build it with `sandbox.env()`); host paths of mapped dirs are translated. */
  env: Record<string, string>;
  stdio?: StdioOptions;
  /** The workspace on the host; default: the conversation's directory under WORKSPACE_ROOT. */
  workspaceDir?: string;
  /** Extra per-process mounts (e.g. the terminal's FIFO directory). */
  binds?: Bind[];
}

/** What /server_info reports. */
export interface SandboxInfo {
  mode: 'bwrap' | 'none';
  requested: SandboxModeSetting;
  network: 'host' | 'none';
  workspace: string;
  limits: {
    enforced_by: 'cgroup-v2' | 'cgroup-v1' | 'rlimit' | 'none';
    memory_mb: number | null;
    pids: number | null;
    file_size_mb: number | null;
  };
  /** Why auto fell back to plain processes. */
  warning?: string;
}

export class SandboxUnavailableError extends Error {
  override name = 'SandboxUnavailableError';
}

export const VISIBLE_WORKSPACE = '/workspace';
const VISIBLE_HOME = '/home/agent';

interface Live {
  procs: Set<ChildProcess>;
  busy: boolean;
  lastUsed: number;
  cgroup: ConversationCgroup | null;
}

function which(name: string): string | null {
  if (name.includes('/')) return fs.existsSync(name) ? path.resolve(name) : null;
  for (const dir of (process.env.PATH ?? '/usr/local/bin:/usr/bin:/bin').split(':')) {
    if (!dir) continue;
    const p = path.join(dir, name);
    try {
      fs.accessSync(p, fs.constants.X_OK);
      return p;
    } catch {
      /* next */
    }
  }
  return null;
}

function killTree(p: ChildProcess): void {
  if (!p.pid || signalGroup(p.pid, 'SIGKILL')) return;
  try {
    process.kill(p.pid, 'SIGKILL');
  } catch {
    /* gone */
  }
}

export class Sandbox {
  readonly mode: 'bwrap' | 'none';
  private readonly live = new Map<string, Live>();
  private readonly evictListeners = new Set<(conversationId: string) => void>();
  private closed = false;

  private constructor(
    readonly settings: SandboxSettings,
    readonly workspaceRoot: string,
    private readonly bwrap: string | null,
    private readonly cgroups: CgroupBackend | null,
    private readonly mapped: MappedDir[],
    private readonly systemArgs: string[],
    private readonly extraArgs: string[] = [],
    readonly warning?: string,
  ) {
    this.mode = bwrap ? 'bwrap' : 'none';
  }

  /** Plain processes, no probe (unit tests, tools used outside the daemon). */
  static none(workspaceRoot = '/'): Sandbox {
    return new Sandbox({ ...DEFAULT_SANDBOX_SETTINGS, mode: 'none' }, workspaceRoot, null, null, [], []);
  }

  /**
   * Probes bwrap once with the options it will use. `bwrap` mode: throws SandboxUnavailableError
   * (one actionable line) when the probe fails. `auto`: falls back to plain processes with a warning.
   */
  /**
   * @param opts.hidden host paths never visible inside, even under a mounted system directory
   *   (DATA_DIR: e.g. /opt/parley/data would otherwise show through the /opt mount)
   */
  static async open(settings: SandboxSettings, opts: { workspaceRoot: string; mapped?: MappedDir[]; hidden?: string[]; log?: Logger }): Promise<Sandbox> {
    const mapped = (opts.mapped ?? []).map((m) => ({ host: path.resolve(m.host), inside: m.inside }));
    if (settings.mode === 'none') return new Sandbox(settings, opts.workspaceRoot, null, null, mapped, []);
    const fail = (why: string): Sandbox => {
      if (settings.mode === 'bwrap') throw new SandboxUnavailableError(`SANDBOX=bwrap but ${why}`);
      const warning = `SANDBOX=auto: ${why}; agent processes run UNSANDBOXED as the daemon's user (set SANDBOX=none to silence this, or fix bwrap)`;
      opts.log?.warn({ sandbox: 'none' }, warning);
      return new Sandbox(settings, opts.workspaceRoot, null, null, mapped, [], [], warning);
    };
    const bwrap = which(settings.bwrapPath ?? 'bwrap');
    if (!bwrap) {
      return fail(
        settings.bwrapPath
          ? `BWRAP_PATH=${settings.bwrapPath} does not exist: install bubblewrap (apt-get install bubblewrap) or fix BWRAP_PATH`
          : 'bwrap was not found on PATH: install bubblewrap (apt-get install bubblewrap) or set BWRAP_PATH',
      );
    }
    const limits = { memoryBytes: settings.memoryMb * 1024 * 1024, pids: settings.pids };
    const cgroups = detectCgroups(limits);
    const hidden = [...(opts.hidden ?? []), opts.workspaceRoot, ...HIDDEN_PATHS];
    const sb = new Sandbox(settings, opts.workspaceRoot, bwrap, cgroups, mapped, systemArgs(), extraArgs(settings.roBinds, hidden));
    const probeDir = fs.mkdtempSync(path.join(opts.workspaceRoot, '.probe-'));
    try {
      const err = await sb.probe(probeDir);
      if (err) return fail(err);
    } finally {
      fs.rmSync(probeDir, { recursive: true, force: true });
    }
    const i = sb.info();
    opts.log?.info({ sandbox: i }, `sandbox: bwrap (${bwrap}), network ${i.network}, limits by ${i.limits.enforced_by}`);
    return sb;
  }

  /** Runs `true` in a sandbox built exactly like the real ones; an error line or null. */
  private probe(dir: string): Promise<string | null> {
    return new Promise((resolve) => {
      const argv = this.wrap(null, [...this.bwrapArgs(dir, VISIBLE_WORKSPACE, []), '--', 'true']);
      const child = spawnChild(argv[0]!, argv.slice(1), { env: { PATH: baseChildEnv().PATH! }, stdio: ['ignore', 'ignore', 'pipe'] });
      let stderr = '';
      child.stderr!.on('data', (d: Buffer) => (stderr += d.toString('utf8')));
      child.on('error', (e) => resolve(`bwrap could not be started (${e.message})`));
      child.on('close', (code) => {
        if (code === 0) return resolve(null);
        const line = stderr.trim().split('\n').pop() ?? '';
        let hint = '';
        if (/user namespace|Operation not permitted|setting up uid map|No permissions/i.test(line)) {
          hint = ' (unprivileged user namespaces are disabled or blocked: sysctl kernel.unprivileged_userns_clone=1, or an AppArmor profile for bwrap on Ubuntu 24.04+, or systemd RestrictNamespaces)';
        }
        resolve(`the bwrap probe failed: ${line || `exit code ${code}`}${hint}`);
      });
    });
  }

  get enabled(): boolean {
    return this.mode === 'bwrap';
  }

  info(): SandboxInfo {
    const on = this.enabled;
    const by = !on ? 'none' : this.cgroups ? this.cgroups.kind : 'rlimit';
    return {
      mode: this.mode,
      requested: this.settings.mode,
      network: on ? this.settings.network : 'host',
      workspace: on ? VISIBLE_WORKSPACE : 'host path',
      limits: {
        enforced_by: by,
        memory_mb: by === 'none' ? null : this.settings.memoryMb,
        // RLIMIT_NPROC counts every process of the user, not of the conversation: not a pids limit
        pids: by === 'cgroup-v1' || by === 'cgroup-v2' ? this.settings.pids : null,
        file_size_mb: on ? this.settings.fileSizeMb : null,
      },
      ...(this.warning ? { warning: this.warning } : {}),
    };
  }

  /** The workspace on the host. */
  hostWorkspace(conversationId: string): string {
    return workspacePath(this.workspaceRoot, conversationId);
  }

  /** Where the conversation's processes see their workspace. */
  visibleWorkspace(hostWorkspaceDir: string): string {
    return this.enabled ? VISIBLE_WORKSPACE : hostWorkspaceDir;
  }

  /** The file view of a workspace (file_editor and anything else using agent-chosen paths). */
  pathView(hostWorkspaceDir: string): PathView {
    return new PathView(hostWorkspaceDir, this.visibleWorkspace(hostWorkspaceDir));
  }

  /**
   * The environment of a sandboxed process: PATH, locale, proxies, CA bundles (see child-env.ts),
   * HOME and TMPDIR of the sandbox, plus `extra` (the conversation's secrets, tool settings).
   * Never the daemon's own environment.
   */
  env(extra: Record<string, string | undefined> = {}): Record<string, string> {
    const sandboxed = this.enabled ? { HOME: VISIBLE_HOME, TMPDIR: '/tmp', USER: 'agent', LOGNAME: 'agent' } : {};
    const env = baseChildEnv({ ...sandboxed, ...extra });
    return env;
  }

  /** Number of conversations with live sandboxed processes (metrics). */
  get liveCount(): number {
    let n = 0;
    for (const l of this.live.values()) if (l.procs.size > 0) n++;
    return n;
  }

  /** Number of live sandboxed processes started through the launcher (their children not counted). */
  get processCount(): number {
    let n = 0;
    for (const l of this.live.values()) n += l.procs.size;
    return n;
  }

  /** Called when a conversation's sandbox is closed to stay under SANDBOX_MAX_LIVE. */
  onEvict(fn: (conversationId: string) => void): () => void {
    this.evictListeners.add(fn);
    return () => this.evictListeners.delete(fn);
  }

  /** Marks the conversation busy (a command runs) or idle; idle sandboxes may be closed (LRU). */
  setBusy(conversationId: string, busy: boolean): void {
    if (this.closed) return;
    const l = busy ? this.enter(conversationId) : this.live.get(conversationId);
    if (!l) return;
    l.busy = busy;
    l.lastUsed = Date.now();
    this.retireIfEmpty(conversationId, l);
  }

  /** A conversation with no process left and nothing running gives its cgroup back. */
  private retireIfEmpty(conversationId: string, l: Live): void {
    if (l.busy || l.procs.size > 0 || this.live.get(conversationId) !== l) return;
    this.live.delete(conversationId);
    if (l.cgroup) void this.removeCgroup(conversationId, l.cgroup);
  }

  private readonly removing = new Set<Promise<void>>();

  /** The kernel empties a cgroup a moment after its last process was reaped: retry for a while. */
  private removeCgroup(conversationId: string, cg: ConversationCgroup): Promise<void> {
    if (cg.remove()) return Promise.resolve();
    const p = (async () => {
      for (let i = 0; i < 40; i++) {
        await new Promise((r) => setTimeout(r, 50));
        if (this.live.has(conversationId)) return; // in use again: the same directory serves it
        if (cg.pids().length > 0) cg.killAll();
        if (cg.remove()) return;
      }
    })();
    this.removing.add(p);
    void p.finally(() => this.removing.delete(p));
    return p;
  }

  /**
   * Starts `argv` for the conversation. The workspace directory must exist. Returns the child (the
   * outer bwrap in bwrap mode); its stdio is the command's.
   */
  spawn(conversationId: string, argv: string[], opts: SandboxSpawnOptions): ChildProcess {
    if (this.closed) throw new Error('the sandbox launcher is closed');
    if (argv.length === 0) throw new Error('empty command');
    const host = opts.workspaceDir ?? this.hostWorkspace(conversationId);
    // workspaces are created on first use (a conversation that never runs anything has none)
    fs.mkdirSync(host, { recursive: true, mode: 0o700 });
    const live = this.enter(conversationId);
    let child: ChildProcess;
    if (!this.enabled) {
      child = spawnChild(argv[0]!, argv.slice(1), {
        cwd: opts.cwd ?? host,
        env: opts.env,
        stdio: opts.stdio ?? 'pipe',
        detached: true,
      });
    } else {
      const view = this.pathView(host);
      const cwd = opts.cwd ? view.toVisible(opts.cwd) : VISIBLE_WORKSPACE;
      const full = this.wrap(live.cgroup, [...this.bwrapArgs(host, cwd, opts.binds ?? []), '--', ...argv]);
      child = spawnChild(full[0]!, full.slice(1), {
        env: this.translateEnv(opts.env),
        stdio: opts.stdio ?? 'pipe',
        detached: true,
      });
    }
    live.procs.add(child);
    const forget = () => {
      live.procs.delete(child);
      live.lastUsed = Date.now();
      this.retireIfEmpty(conversationId, live);
    };
    child.once('exit', forget);
    child.once('error', forget);
    return child;
  }

  /** The launcher of one conversation, for code that only starts processes (setup.sh, git, MCP servers). */
  forConversation(conversationId: string): ProcessLauncher {
    return {
      spawn: (argv, o) => this.spawn(conversationId, argv, { cwd: o.cwd, env: o.env, stdio: o.stdio }),
      env: (extra) => this.env(extra),
    };
  }

  /** Kills every process of the conversation (background ones included) and frees its cgroup. */
  async closeConversation(conversationId: string): Promise<void> {
    const l = this.live.get(conversationId);
    if (!l) return;
    this.live.delete(conversationId);
    for (const p of l.procs) killTree(p);
    l.cgroup?.killAll();
    await Promise.all(
      [...l.procs].map(
        (p) =>
          new Promise<void>((resolve) => {
            if (p.exitCode !== null || p.signalCode !== null) return resolve();
            const t = setTimeout(resolve, 3000);
            p.once('exit', () => {
              clearTimeout(t);
              resolve();
            });
          }),
      ),
    );
    if (l.cgroup) await this.removeCgroup(conversationId, l.cgroup);
  }

  async close(): Promise<void> {
    this.closed = true;
    await Promise.all([...this.live.keys()].map((id) => this.closeConversation(id)));
    await Promise.all([...this.removing]);
    this.cgroups?.close();
  }

  // ------------------------------------------------------------------ internals

  private enter(conversationId: string): Live {
    let l = this.live.get(conversationId);
    if (!l) {
      let cgroup: ConversationCgroup | null = null;
      if (this.enabled && this.cgroups) cgroup = this.cgroups.create(conversationId);
      l = { procs: new Set(), busy: false, lastUsed: Date.now(), cgroup };
      this.live.set(conversationId, l);
      this.evictIfNeeded(conversationId);
    }
    l.lastUsed = Date.now();
    return l;
  }

  private evictIfNeeded(except: string): void {
    const max = this.settings.maxLive;
    if (max <= 0) return;
    const withProcs = [...this.live.entries()].filter(([id, l]) => id !== except && l.procs.size > 0);
    let over = withProcs.length + 1 - max;
    if (over <= 0) return;
    const idle = withProcs.filter(([, l]) => !l.busy).sort((a, b) => a[1].lastUsed - b[1].lastUsed);
    for (const [id] of idle) {
      if (over-- <= 0) break;
      // listeners first (e.g. MCP managers detach quietly), then the processes are killed
      for (const fn of this.evictListeners) fn(id);
      void this.closeConversation(id);
    }
  }

  private translateEnv(env: Record<string, string>): Record<string, string> {
    if (this.mapped.length === 0) return env;
    const out: Record<string, string> = {};
    for (const [k, v] of Object.entries(env)) {
      let val = v;
      for (const m of this.mapped) if (val === m.host || val.startsWith(m.host + '/')) val = m.inside + val.slice(m.host.length);
      out[k] = val;
    }
    return out;
  }

  /**
   * One `sh` around bwrap: the file size limit (ulimit -f, 512-byte blocks in POSIX sh), the data
   * limit when there is no cgroup (ulimit -d, KiB), and the cgroup join before exec, so every process
   * of the sandbox is counted from its first fork. One exec more than bwrap alone, no prlimit process.
   */
  private wrap(cgroup: ConversationCgroup | null, bwrapArgs: string[]): string[] {
    let script = `ulimit -f ${this.settings.fileSizeMb * 2048} || exit 125; `;
    if (!this.cgroups) script += `ulimit -d ${this.settings.memoryMb * 1024} || exit 125; `;
    script += 'n=$1; shift; while [ "$n" -gt 0 ]; do echo $$ > "$1" || exit 125; shift; n=$((n-1)); done; exec "$@"';
    const files = cgroup?.procsFiles ?? [];
    return ['/bin/sh', '-c', script, 'sh', String(files.length), ...files, this.bwrap!, ...bwrapArgs];
  }

  private bwrapArgs(hostWorkspace: string, cwd: string, binds: Bind[]): string[] {
    const a = [
      '--unshare-user',
      '--unshare-pid',
      '--unshare-ipc',
      '--unshare-uts',
      '--unshare-cgroup-try',
      ...(this.settings.network === 'none' ? ['--unshare-net'] : []),
      '--die-with-parent',
      '--new-session',
      '--cap-drop',
      'ALL',
      '--hostname',
      'sandbox',
      ...this.systemArgs,
      '--proc',
      '/proc',
      '--dev',
      '/dev',
      '--tmpfs',
      '/tmp',
      '--dir',
      '/var/tmp',
      ...this.extraArgs,
      '--dir',
      VISIBLE_HOME,
      '--bind',
      hostWorkspace,
      VISIBLE_WORKSPACE,
    ];
    for (const m of this.mapped) if (fs.existsSync(m.host)) a.push('--ro-bind', m.host, m.inside);
    for (const b of binds) a.push(b.rw ? '--bind' : '--ro-bind', b.host, b.inside);
    a.push('--chdir', cwd);
    return a;
  }
}

/** Read-only system mounts: /usr, /etc, /opt and the /bin, /lib… entries as they are on the host. */
function systemArgs(): string[] {
  const a: string[] = [];
  for (const dir of ['/usr', '/etc', '/opt']) if (fs.existsSync(dir)) a.push('--ro-bind', dir, dir);
  for (const dir of ['/bin', '/sbin', '/lib', '/lib32', '/lib64', '/libx32']) {
    let st: fs.Stats;
    try {
      st = fs.lstatSync(dir);
    } catch {
      continue;
    }
    if (st.isSymbolicLink()) a.push('--symlink', fs.readlinkSync(dir), dir);
    else if (st.isDirectory()) a.push('--ro-bind', dir, dir);
  }
  // /etc/resolv.conf is often a symlink into /run (systemd-resolved): mount its target
  try {
    const real = fs.realpathSync('/etc/resolv.conf');
    if (!real.startsWith('/etc/') && !real.startsWith('/usr/')) a.push('--ro-bind', real, real);
  } catch {
    /* no resolver configuration */
  }
  // host keys and password hashes are readable by root: never show them
  for (const f of ['/etc/shadow', '/etc/gshadow', '/etc/shadow-', '/etc/gshadow-']) {
    if (fs.existsSync(f)) a.push('--ro-bind', '/dev/null', f);
  }
  try {
    for (const f of fs.readdirSync('/etc/ssh')) if (/^ssh_host_.*_key$/.test(f)) a.push('--ro-bind', '/dev/null', `/etc/ssh/${f}`);
  } catch {
    /* no sshd */
  }
  return a;
}

/** Daemon secrets that live under a mounted system directory: /etc/parley/parley.env (the systemd unit's EnvironmentFile). */
const HIDDEN_PATHS = ['/etc/parley'];

/**
 * SANDBOX_RO_BINDS (after the private /tmp, so a directory under /tmp can be shown too), then the
 * hidden paths masked wherever a mount above would show them: an empty tmpfs over a directory,
 * /dev/null over a file. Masks follow every mount, so nothing mounted later re-exposes them.
 */
function extraArgs(extra: string[], hidden: string[]): string[] {
  const a: string[] = [];
  const shown = ['/usr', '/etc', '/opt', '/bin', '/sbin', '/lib', '/lib32', '/lib64', '/libx32'];
  for (const dir of extra) {
    if (!dir || !fs.existsSync(dir)) continue;
    a.push('--ro-bind', path.resolve(dir), path.resolve(dir));
    shown.push(path.resolve(dir));
  }
  const under = (p: string, root: string) => p === root || p.startsWith(root.endsWith('/') ? root : `${root}/`);
  const masked: string[] = [];
  for (const h of [...hidden].sort((x, y) => x.length - y.length)) {
    let p: string;
    try {
      p = fs.realpathSync(h);
    } catch {
      continue;
    }
    if (!shown.some((root) => under(p, root) || under(path.resolve(h), root))) continue;
    for (const name of new Set([p, path.resolve(h)])) {
      if (!shown.some((root) => under(name, root)) || masked.some((m) => under(name, m))) continue;
      masked.push(name);
      if (fs.statSync(p).isDirectory()) a.push('--tmpfs', name);
      else a.push('--ro-bind', '/dev/null', name);
    }
  }
  return a;
}
