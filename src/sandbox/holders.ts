/**
 * The holders' pool: the spare holders started ahead for the next conversations (as many as the
 * recent arrivals need), taking one, the refill, burst and quiet rules, a spare's lower CPU priority
 * (priority.ts). How one holder is started and what keeps the agent off it:
 * holder-launch.ts; their directories on the host: holder-dirs.ts.
 *
 * A holder has a cgroup of its own (cgroup.ts), named after it: every process of it joins it before
 * its first instruction, so a spare's cgroup, taken, is its conversation's. With per-conversation
 * disks (disk-image.ts) a spare comes with a new image of its own, which becomes its conversation's.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { Disks } from './disk-image.js';
import { canRenice, niceJoinedSession, SPARE_NICE, setNice } from './priority.js';
import { Arrivals } from './arrivals.js';
import { allEnded } from './processes.js';
import { fifosAhead, Holder, type HolderSetup } from './holder-launch.js';
import { adoptDirs, adoptImageDirs, adoptWithContents, imageDirs, makeStateDirs, ownWorkspace, removeSpares } from './holder-dirs.js';
import { fdLine, joinerArgv, translateEnv, type JoinSetup } from './join.js';
import { signalGroup } from '../process-group.js';
import { VISIBLE_WORKSPACE } from './settings.js';
import { plainDirs } from './view.js';

export { Holder, type HolderSetup } from './holder-launch.js';

/**
 * How long after a spare was taken the next one starts, outside a burst. A holder's start is a node
 * (the file service), bwrap, slirp4netns and nft, started from the daemon's main thread (a spawn
 * blocks it until the child has exec'd): begun 50 ms after the take, as it was, it competed on a
 * 2-core machine with what the conversation that took the spare does next — its shell's start, its
 * first command, the LLM's answer taken up, some 20–60 ms.
 */
const REFILL_MS = 1000;

/**
 * A burst: conversations begun faster than spares come. After a conversation had to start a holder of
 * its own (no spare ready), for this long the next spares start as soon as that holder is ready and
 * again right after each take, rather than REFILL_MS later: the next conversation is likely to come
 * sooner, and a spare's start (~0.2 s) is then shorter than its wait would be.
 */
const BURST_MS = 10_000;

/**
 * In a burst, how long after a take the next spare starts: the start's spawns block the main thread
 * (each until its child has exec'd) and its processes take a core, so begun at once they land in the
 * first steps of the conversation that took the spare.
 */
const BURST_REFILL_MS = 60;

/**
 * Arrivals (takes) further apart than this are no burst: the arrival rate is forgotten, and the spares
 * beyond the first are closed once no conversation took one for this long.
 */
const QUIET_MS = 5000;

/** The most time between the starts of spares started to make up the number the arrivals need. */
const STAGGER_MS = 100;

/**
 * A spare that died untaken (killed from outside, or it never started: bwrap or its disk failing) is
 * replaced after RETRY_MS, and after twice as long for each spare after it that died young too (not
 * ready for STABLE_MS), up to RETRY_MAX_MS: spares that cannot start are not restarted in a loop.
 */
const RETRY_MS = 1000;
const RETRY_MAX_MS = 60_000;
const STABLE_MS = 10_000;

/** FIFOs made ahead for the first commands of a spare's shell. */
const AHEAD_FIFOS = 8;

/** Spares at most, whatever the arrival rate. */
const MAX_SPARES = 6;

/**
 * What a spare is reckoned to hold of the memory (its file service, bwrap, the egress tool):
 * spares beyond the first take at most a quarter of the free memory at this much each.
 */
const SPARE_MB = 64;

export class Holders {
  /**
   * Holders started ahead for the next conversations, oldest first (see take). As many as the
   * arrivals need (spareTarget): conversations begun every `arrivals.interval` ms while a holder takes
   * `startMs` to start need that many in the making for each to find one ready.
   */
  private readonly spares: Holder[] = [];
  private spareSeq = 0;
  /** Numbers the holders' cgroups. */
  private holderSeq = 0;
  private closed = false;
  /** How often conversations take a holder (the time between takes, the last take, the last that found no spare). */
  private readonly arrivals = new Arrivals(() => this.quietMs);
  /** How long a holder takes to start (EWMA of the last ones, ms). */
  private startMs = 250;
  private refillTimer: NodeJS.Timeout | null = null;
  /** When (performance.now) the pending refill fires. */
  private refillDue = 0;
  /** When each spare became ready (performance.now): an extra one is closed QUIET_MS after, unused. */
  private readonly readyAt = new WeakMap<Holder, number>();
  /** Spares killed while the daemon runs (no longer needed, or retired), until they are gone. */
  private readonly retiring = new Set<Holder>();
  private quietTimer: NodeJS.Timeout | null = null;
  /** Spares that died young, one after another (see RETRY_MS); 0 once one lived or was taken. */
  private failures = 0;
  /** Not before then (performance.now) is a spare started while the arrivals are quiet (stock): one died (lost). */
  private retryAt = 0;
  /** Spares the daemon took off the list itself (taken by a conversation, or retired): their end is no loss. */
  private readonly letGo = new WeakSet<Holder>();
  /** The conversations' holders that have not exited yet, by workspace (see mayMoveInto). */
  private readonly running = new Map<string, Holder>();
  /**
   * Names bwrap makes in every sandbox's /tmp (the host directory bound there) on the way to a
   * SANDBOX_RO_BINDS directory under /tmp or /var/tmp: not the conversation's, and in every spare's.
   */
  private readonly tmpMounts: Set<string>;
  /** What every ready spare starts ahead for its conversation (prestartWith), as the sandbox sees its environment. */
  private ahead: { argv: string[]; env: Record<string, string> } | null = null;
  /** How a process joins a holder (join.ts): the same for every holder of this daemon. */
  readonly joining: JoinSetup;

  constructor(
    private readonly s: HolderSetup,
    /** Per-conversation disks (null: everything on the data disk, measured). */
    private readonly disks: Disks | null,
  ) {
    this.joining = { settings: s.settings, join: s.join, hasCgroups: s.cgroups !== null, asRoot: s.ids !== null, filterHex: s.seccomp.agent.toString('hex') };
    removeSpares(path.join(s.workspaceRoot, '.sandbox'), 'stale');
    this.tmpMounts = new Set(s.settings.roBinds.map((d) => /^\/(?:var\/)?tmp\/([^/]+)/.exec(path.resolve(d))?.[1]).filter((n): n is string => n !== undefined));
  }

  /** Starts a spare holder if there is none; resolves once the oldest is ready (benchmarks wait for it). */
  async warm(): Promise<void> {
    if (!this.sparesOn) return;
    this.dropDead();
    if (this.spares.length === 0) this.spares.push(this.startSpare());
    await this.spares[0]!.ready.catch(() => {});
  }

  /**
   * Every ready spare starts `argv` in its /workspace with `env` (the terminal's shell, for its
   * conversation's first command: Sandbox.takeStarted), those ready now too. Its start (the joiner's
   * fork, sh, nsenter, perl dropping every capability and loading the filter, bash: 11–30 ms on a busy machine) then
   * falls before the conversation exists, at the spare's priority, instead of in its first command.
   */
  prestartWith(spec: { argv: string[]; env: Record<string, string> }): void {
    this.ahead = { argv: spec.argv, env: translateEnv(spec.env, this.s.mapped) };
    for (const h of this.spares) if (h.fds !== null) this.startAhead(h);
  }

  /**
   * Through the spawner, as a holder's programs are (the daemon's event loop does not wait on the
   * fork), its stdio handed over to the daemon as sockets. (Also for a spare taken while its network
   * was still being attached: a take counts a spare with its fds open as ready, and its joiners wait
   * for it. Not once a process has joined it: its conversation's shell, if it had a first command, is
   * one of them.)
   */
  private startAhead(h: Holder): void {
    const spec = this.ahead;
    const fds = h.fds;
    if (!spec || !fds || h.dead || h.started || this.closed || h.users.size > 0) return;
    const full = joinerArgv(this.joining, spec.argv);
    const started: NonNullable<Holder['started']> = { proc: null, argv: spec.argv, env: spec.env };
    h.started = started;
    // the holder's fds stay open from now until the joiner has exited (it opens them by number)
    const token = {};
    h.users.add(token);
    const release = () => {
      h.users.delete(token);
      h.release();
    };
    const nice = h.nice;
    this.s.spawner
      .spawn({ file: full[0]!, args: full.slice(1), env: spec.env, stdio: ['direct', 'direct', 'direct', { data: Buffer.from(fdLine(fds, h.cgroup)) }], nice })
      .then(
        (child) => {
          child.once('exit', release);
          if (h.started !== started || h.dead) return signalGroup(child.pid, 'SIGKILL');
          started.proc = child;
          // FIFOs for its first commands: none to wait for then (no process of a conversation runs in a spare to swap them)
          fifosAhead(this.s.spawner, h.dirs.io, AHEAD_FIFOS).then((made) => {
            if (h.started === started && !h.dead) started.fifos = made;
          });
          // taken while it was being started: the priority the take gave the spare's processes
          if (h.nice !== nice) setNice(h.pids(), h.nice);
          // its sessions (setsid) are groups of their own, at nice 0 until given the spare's
          else
            niceJoinedSession(
              () => h.pids(),
              nice,
              () => h.started !== started || h.dead || h.nice !== nice,
            );
        },
        () => {
          if (h.started === started) h.started = null;
          release();
        },
      );
  }

  /** Spares alive (ready or starting): what the daemon holds ahead of demand. */
  get spareCount(): number {
    return this.spares.filter((h) => !h.dead).length;
  }

  /** Spares ready to be taken. */
  get readySpares(): number {
    return this.spares.filter((h) => !h.dead && h.fds !== null).length;
  }

  /**
   * A holder for a conversation. A spare (started ahead, ready by now, so a new conversation's
   * first process only waits for its own join) binds directories of its own under
   * `.sandbox/.spare-<pid>-<n>/`: it is adopted by renaming them to the conversation's workspace and
   * state directory — bind mounts follow the directory, not its name (adoptDirs: the workspace is
   * missing or empty and the state directory is missing, a new conversation; with disks, the state
   * directory holds the spare's image, mounted, and the workspace becomes a link into it). A
   * conversation whose directories exist with content (its sandbox was closed while idle, evicted,
   * or the daemon restarted) takes it too when it has no disk: their top-level entries are moved into
   * the spare's directories (adoptWithContents). Otherwise (a conversation with its own disk, a
   * workspace elsewhere, too many entries, a rename refused) a new holder binds the conversation's
   * directories, and the spare waits for the next one. A spare leaves the list before it is given:
   * no two conversations ever get the same one.
   */
  take(workspace: string, state: string): Holder {
    const now = performance.now();
    // (the probe's holder, before any spare, is no arrival)
    if (this.spareSeq > 0) this.arrivals.take(now);
    this.dropDead();
    const spare = this.spares.find((h) => h.fds !== null);
    if (spare && this.adopt(spare, workspace, state)) {
      this.spares.splice(this.spares.indexOf(spare), 1);
      this.letGo.add(spare);
      this.failures = 0;
      if (spare.nice !== 0) {
        spare.nice = 0;
        setNice(spare.pids(), 0);
      }
      this.refill(this.bursting(now) ? BURST_REFILL_MS : undefined);
      return this.track(workspace, spare);
    }
    const own = this.startOwn(workspace, state);
    if (this.spareSeq > 0 && this.sparesOn && this.spareCount < this.spareTarget()) {
      // the spares were taken and the next are not ready: a burst (BURST_MS); the next spares start
      // once this holder is ready, not beside its start (the probe's holder, before any spare, is none)
      this.arrivals.cold(now);
      void own.ready.catch(() => {}).then(() => this.refill(0));
    }
    return this.track(workspace, own);
  }

  private get quietMs(): number {
    return this.s.settings.spareQuietMs ?? QUIET_MS;
  }

  /**
   * How many spares the arrivals need. Conversations that come further apart than a holder's start
   * (with a margin: the starts compete with the conversations on the CPU) find the one spare ready, it
   * being started at once after a take in a burst (`bursting`). Closer together, one spare is in the
   * making per interval of a holder's start (`startMs / interval`), and one more is ready, so a take
   * that comes a little early still finds one, at most MAX_SPARES. Once they stopped (QUIET_MS), as
   * many as the latest burst had takes, for a while (Arrivals.held). Bounded by SANDBOX_MAX_LIVE less
   * the live conversations' holders, and by the free memory.
   */
  private spareTarget(now = performance.now()): number {
    const interval = this.arrivals.interval;
    let want = 1;
    if (this.isQuiet(now)) want = this.arrivals.held(now, this.s.settings.spareHoldMs);
    else if (interval !== null && interval < 1.5 * this.startMs) want = Math.min(MAX_SPARES, Math.ceil((this.startMs + BURST_REFILL_MS) / interval) + 1);
    if (want <= 1) return 1;
    const byMemory = Math.floor(os.freemem() / 4 / (SPARE_MB * 1024 * 1024));
    return Math.max(1, Math.min(want, this.s.settings.maxLive - this.running.size, byMemory));
  }

  private isQuiet(now: number): boolean {
    return now - this.arrivals.lastTake >= this.quietMs;
  }

  /**
   * With the arrivals stopped, one more of the spares held for the next burst (spareTarget) starts
   * when none is starting: each once the one before it is ready, at the spares' priority. Not before
   * a spare that died young is due to be replaced (lost), unless this is that replacement (`due`).
   */
  private stock(due = false): void {
    if (!this.sparesOn || (!due && performance.now() < this.retryAt) || !this.isQuiet(performance.now())) return;
    this.dropDead();
    if (this.spares.some((h) => h.fds === null) || this.spares.length >= this.spareTarget()) return;
    this.spares.push(this.startSpare());
    this.armQuiet();
  }

  private get refillMs(): number {
    return this.s.settings.spareRefillMs ?? REFILL_MS;
  }

  /** Conversations come faster than a spare refilled REFILL_MS after a take would be ready for them. */
  private bursting(now: number): boolean {
    const interval = this.arrivals.interval;
    return now - this.arrivals.lastCold < BURST_MS || (interval !== null && interval < this.refillMs + this.startMs);
  }

  /**
   * The arrivals stopped: with no take for QUIET_MS, the spares held for the next burst are made up
   * (stock), and a spare beyond them (beyond one, once HOLD_MS has passed) is closed once it has been
   * ready for QUIET_MS (one still starting is let finish: its start is paid for already); down to one,
   * the rate is forgotten. Looked at again while there are more than one.
   */
  private quiet(): void {
    this.quietTimer = null;
    this.dropDead();
    const now = performance.now();
    const q = this.quietMs;
    const target = this.spareTarget(now);
    if (this.spares.length > target && this.isQuiet(now)) {
      // the ready ones are kept first
      const keep = new Set([...new Set([...this.spares.filter((h) => h.fds !== null), ...this.spares])].slice(0, target));
      for (const h of [...this.spares]) {
        const since = this.readyAt.get(h);
        if (keep.has(h) || since === undefined || now - since < q) continue;
        this.spares.splice(this.spares.indexOf(h), 1);
        this.retire(h);
      }
    }
    this.stock();
    if (this.spares.length <= 1 && target <= 1) {
      this.arrivals.forget();
      return;
    }
    this.armQuiet();
  }

  private armQuiet(): void {
    if (this.quietTimer || this.closed) return;
    this.quietTimer = setTimeout(() => this.quiet(), Math.max(100, this.quietMs / 4));
    this.quietTimer.unref();
  }

  /** Kills a spare no conversation will get; a stop waits for it to be gone too (close). */
  private retire(h: Holder): void {
    this.letGo.add(h);
    this.retiring.add(h);
    void h.released.then(() => this.retiring.delete(h));
    h.kill();
  }

  private dropDead(): void {
    for (let i = this.spares.length - 1; i >= 0; i--) if (this.spares[i]!.dead) this.spares.splice(i, 1);
  }

  private get sparesOn(): boolean {
    return !this.closed && this.s.settings.spareHolder !== false;
  }

  /** Gives the spare to the conversation, when its directories allow (see take). */
  private adopt(spare: Holder, workspace: string, state: string): boolean {
    if (spare.image) return this.ownDisk(workspace) && adoptImageDirs(spare, workspace, state, this.disks!);
    if (adoptDirs(spare, workspace, state)) return true;
    return this.mayMoveInto(workspace) && this.adoptWithContents(spare, workspace, state);
  }

  /**
   * Whether the conversation's workspace is (or is to be) on a disk of its own: disks are on, it is
   * a conversation's own workspace (`WORKSPACE_ROOT/<id hex>`, never a directory the daemon was
   * given, nor the probe's), and it is not a directory of files made before disks were (that one
   * stays as it is, measured).
   */
  private ownDisk(workspace: string): boolean {
    if (!this.disks || path.dirname(workspace) !== path.resolve(this.s.workspaceRoot) || !/^[0-9a-f]{32}$/.test(path.basename(workspace))) return false;
    let st: fs.Stats;
    try {
      st = fs.lstatSync(workspace);
    } catch {
      return true;
    }
    if (st.isSymbolicLink()) return true;
    return st.isDirectory() && fs.readdirSync(workspace).length === 0;
  }

  /**
   * The spares the arrivals need, `delayMs` from now (default REFILL_MS, or the spareRefillMs setting:
   * the conversation that took the last one goes first); a refill already due sooner stays as it is.
   */
  private refill(delayMs = this.refillMs): void {
    // (takes coming closer together than the delay must not keep putting it off)
    const due = performance.now() + delayMs;
    if (this.refillTimer && this.refillDue <= due) return;
    if (this.refillTimer) clearTimeout(this.refillTimer);
    this.refillDue = due;
    this.refillTimer = setTimeout(() => {
      this.refillTimer = null;
      if (!this.sparesOn) return;
      this.dropDead();
      // (quiet: the spares held are made up one after another, not at once)
      if (this.isQuiet(performance.now())) return this.stock(true);
      if (this.spares.length >= this.spareTarget()) return;
      this.spares.push(this.startSpare());
      if (this.spares.length > 1) this.armQuiet();
      // the next one the time between arrivals later (staggered: Arrivals.staggerMs)
      if (this.spares.length < this.spareTarget()) this.refill(this.arrivals.staggerMs(STAGGER_MS));
    }, delayMs);
    this.refillTimer.unref();
  }

  /**
   * adoptWithContents, and a spare that could not be given its directories back whole (a rename
   * undone failed) is retired: killed, never handed to another conversation, its directory kept
   * under a name no clean-up removes (`.kept.spare-…`).
   */
  private adoptWithContents(spare: Holder, workspace: string, state: string): boolean {
    // the FIFOs made ahead for its shell go: the conversation brings its own, and its io directory moves in
    for (const f of spare.started?.fifos?.splice(0) ?? []) fs.rmSync(f.path, { force: true });
    const r = adoptWithContents(spare, workspace, state, this.tmpMounts);
    if (r !== 'stuck') return r === 'adopted';
    const dir = path.dirname(spare.state);
    this.spares.splice(this.spares.indexOf(spare), 1);
    spare.state = '';
    try {
      fs.renameSync(dir, path.join(path.dirname(dir), `.kept${path.basename(dir)}`));
    } catch {
      /* stays as it is */
    }
    this.retire(spare);
    this.refill();
    return false;
  }

  private track(workspace: string, h: Holder): Holder {
    this.running.set(workspace, h);
    void h.gone.then(() => {
      if (this.running.get(workspace) === h) this.running.delete(workspace);
    });
    return h;
  }

  /**
   * Whether a workspace's contents may be moved into the spare's: it is a conversation's own
   * (`WORKSPACE_ROOT/<id hex>`, never a directory the daemon was given), and no earlier holder of it
   * is still ending — its processes die with its pid namespace, and until its bwrap has exited one
   * of them could still write there.
   */
  private mayMoveInto(workspace: string): boolean {
    if (path.dirname(workspace) !== path.resolve(this.s.workspaceRoot)) return false;
    return !this.running.get(workspace)?.running;
  }

  /**
   * A holder with a cgroup of its own. With a disk (`link`: the workspace's host path, a link into
   * it once it is mounted, or null for a spare's), the image in its state directory is mounted (made
   * when there is none) before its bwrap starts, and unmounted once it has ended.
   */
  private launch(workspace: string, state: string, disk: { link: string | null } | null, spare = false): Holder {
    const owner = this.s.ids?.agent ?? null;
    const cgroup = this.s.cgroups?.create(`sandbox-${++this.holderSeq}`) ?? null;
    const disks = this.disks;
    let key: string | null = null;
    let preparing: Promise<void> = Promise.resolve();
    // (off the event loop: the directories' and the cgroup's making take the kernel milliseconds,
    // and a spare starts in the middle of other conversations' turns)
    const prepare = () =>
      (preparing = (async () => {
        await makeStateDirs(state, owner, disk !== null);
        if (!disk) await ownWorkspace(workspace, owner);
        await cgroup?.make();
        if (!disk || !disks) return;
        key = await disks.acquire(state);
        if (disk.link) disks.linkWorkspace(disk.link, state);
      })());
    const h = new Holder(this.s, disk ? imageDirs(state) : plainDirs(workspace, state), state, cgroup, prepare, spare);
    h.image = disk !== null;
    const t0 = performance.now();
    // (the whole start, its file service up: a conversation's own holder is ready before, a spare not)
    h.ready
      .then(() => h.files!.ready)
      .then(
        () => (this.startMs = 0.7 * this.startMs + 0.3 * (performance.now() - t0)),
        () => {},
      );
    // (a conversation's file service may still be starting once its holder is ready: one that ended before it answered did not start either)
    void h.gone.then(() => {
      if (h.stopped) return;
      const what = { holder: spare ? 'spare' : 'conversation', err: h.endReason };
      if (h.served) this.s.log?.info(what, 'a sandbox ended');
      else this.s.log?.warn(what, 'a sandbox could not start');
    });
    h.released = h.gone.then(async () => {
      // a start stopped during its preparation: the disk it was making or mounting is there (and
      // released below) once that has settled, and nothing of it is made after its directory is removed
      await preparing.catch(() => {});
      if (cgroup) await this.removeCgroup(h);
      else await allEnded(h.killed, 5000);
      if (key) await disks!.release(key, h.state);
    });
    return h;
  }

  /** A conversation's own holder: on its disk (made, or its image mounted again), or on the data disk. */
  private startOwn(workspace: string, state: string): Holder {
    return this.launch(workspace, state, this.ownDisk(workspace) ? { link: workspace } : null);
  }

  private startSpare(): Holder {
    const dir = path.join(this.s.workspaceRoot, '.sandbox', `.spare-${process.pid}-${++this.spareSeq}`);
    const h = this.launch(path.join(dir, 'workspace'), path.join(dir, 'state'), this.disks ? { link: null } : null, true);
    if (canRenice()) h.nice = SPARE_NICE;
    h.ready.then(
      () => {
        // every process it started: one forked before the nice value was set at its spawn did not inherit it
        if (h.nice !== 0) setNice(h.pids(), h.nice);
        this.readyAt.set(h, performance.now());
        warmService(h);
        this.startAhead(h);
        this.stock();
      },
      () => {},
    );
    void h.gone.then(() => this.lost(h));
    // a spare that dies or is closed before a conversation adopted it leaves nothing behind (its image unmounted first)
    void h.released.then(() => {
      if (path.dirname(h.state) !== dir) return;
      try {
        fs.rmSync(dir, { recursive: true, force: true });
      } catch {
        /* its disk is still mounted (a stop unmounts every disk at the end): removeSpareDirs then */
      }
    });
    return h;
  }

  /**
   * A spare ended: when no conversation took it and the daemon did not retire or close it, it died —
   * its replacement starts RETRY_MS later, or later still after other spares that died young (back to
   * RETRY_MS once one was ready for STABLE_MS before it ended, or one was taken).
   */
  private lost(h: Holder): void {
    if (this.letGo.has(h) || !this.sparesOn) return;
    this.dropDead();
    const since = this.readyAt.get(h);
    this.failures = since !== undefined && performance.now() - since >= STABLE_MS ? 0 : this.failures + 1;
    const base = this.s.settings.spareRetryMs ?? RETRY_MS;
    const delay = Math.min(RETRY_MAX_MS, base * 2 ** Math.max(0, this.failures - 1));
    this.retryAt = performance.now() + delay;
    this.refill(delay);
  }

  /**
   * The cgroup of a holder that has ended, removed once the kernel has emptied it. What it holds then
   * ends by itself (the pid namespace is gone; a joiner still waiting for the holder says why it
   * cannot join, then exits); anything still there after a second is killed.
   */
  private async removeCgroup(h: Holder): Promise<void> {
    const cg = h.cgroup!;
    const seen = h.killed;
    for (let i = 0; i < 60; i++) {
      for (const p of cg.pids()) seen.add(p);
      if (i >= 20 && cg.pids().length > 0) cg.killAll();
      if (await cg.remove()) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    // a process leaves its cgroup before it has finished exiting: gone only once it has
    await allEnded(seen, 5000);
  }

  /** Removes what is left of this daemon's spares' directories (a stop, once their disks are unmounted). */
  removeSpareDirs(): void {
    removeSpares(path.join(this.s.workspaceRoot, '.sandbox'), 'own');
  }

  /** Kills the spares (the live ones are the launcher's to close) and waits for them to be gone. */
  async close(): Promise<void> {
    this.closed = true;
    if (this.refillTimer) clearTimeout(this.refillTimer);
    if (this.quietTimer) clearTimeout(this.quietTimer);
    const spares = [...this.spares.splice(0), ...this.retiring];
    for (const h of spares) h.kill();
    await Promise.all(
      spares.map(async (h) => {
        await h.released;
        await h.egress?.close();
      }),
    );
  }
}

/**
 * A ready spare's file service answers the kinds of request a conversation's run begins with (its
 * repository instructions: a listing of /workspace, a stat, a read), so their code is compiled
 * before it is taken: a new service's first listing took 4–10 ms at load 7–20, about 1 ms once
 * warm. Nothing is written; what it answers is not used.
 */
function warmService(h: Holder): void {
  const ignore = () => {};
  const missing = `${VISIBLE_WORKSPACE}/.openhands/microagents`;
  for (const header of [
    { op: 'list', path: VISIBLE_WORKSPACE, depth: 1, max: 1000, hidden: false },
    { op: 'stat', path: missing },
    { op: 'read', path: `${missing}/repo.md`, max: 1 },
  ]) {
    h.files?.request(header, null, 1).then(ignore, ignore);
  }
}
