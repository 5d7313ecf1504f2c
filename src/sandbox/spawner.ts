/**
 * The daemon's side of the spawner (spawner-process.pl, whose header says why it is a process of its own,
 * why perl, and what its protocol is): the sandboxes' host-side programs are started there, off the daemon's
 * event loop, and each comes back as a `RemoteChild`, which behaves as the ChildProcess the code
 * that starts it used before (pid, stdio streams, kill, 'exit' and 'close').
 *
 * The spawner is started with the sandbox's probe and ends with the launcher's close, or with the
 * daemon: its channel's end, or the SIGTERM of setpriv's --pdeathsig when the daemon dies, makes it
 * kill what it started and exit. Should it end first, every process it started is
 * killed (their groups) and reported as killed, and the next spawn starts a new spawner.
 */
import type { ChildProcess } from 'node:child_process';
import { EventEmitter } from 'node:events';
import os from 'node:os';
import { fileURLToPath } from 'node:url';
import type { Socket } from 'node:net';
import { Duplex, type Writable } from 'node:stream';
import { childProcess } from '../builtins.js';
import { signalGroup } from '../process-group.js';
import { canRenice, setGroupNice } from './priority.js';
import { helper, type ProcessLike } from './processes.js';
import { findProgram } from './programs.js';
import { callNumbers, NS_FLAGS } from './seccomp.js';

/** spawner-process.pl in the checkout, or next to the build (scripts/build.mjs copies it into dist/). */
const SPAWNER = fileURLToPath(new URL('./spawner-process.pl', import.meta.url));

/** Its nice value (a root daemon's): a holder's start waits on it at every step. */
const SPAWNER_NICE = -5;

/**
 * A stdio slot (spawner-process.pl): no stream, a stream relayed by the spawner, a socket of the
 * daemon's own, an fd of the daemon, or bytes the program reads there (written with its start: no
 * round trip before it can read them).
 */
export type Slot = 'ignore' | 'pipe' | 'direct' | number | { data: Uint8Array };

export interface SpawnSpec {
  file: string;
  args: string[];
  env: Record<string, string>;
  stdio: Slot[];
  cwd?: string;
  uid?: number;
  gid?: number;
  /** Its nice value, set as soon as it exists (default 0: not the spawner's own). */
  nice?: number;
  /** The signal it gets when its parent (the spawner's forker) dies (PR_SET_PDEATHSIG), set once it has its ids. */
  pdeathsig?: NodeJS.Signals;
  /**
   * Namespaces it enters before its exec, in this order, once it has its ids (as util-linux `nsenter
   * --preserve-credentials` would): each one of its own fds (a slot) on a namespace file.
   */
  enter?: { fd: number; ns: keyof typeof NS_FLAGS }[];
}

/** A relayed slot: what is written goes to the child's end, what it writes is read here. */
class Relayed extends Duplex {
  constructor(private readonly out: (t: 'write' | 'end' | 'destroy', data?: Buffer) => void) {
    // (each slot is used one way: its end read, or the child's exit, ends the other side too)
    super({ allowHalfOpen: false });
  }

  override _read(): void {}

  override _write(chunk: Buffer, _enc: BufferEncoding, done: (err?: Error | null) => void): void {
    this.out('write', chunk);
    done();
  }

  override _final(done: (err?: Error | null) => void): void {
    this.out('end');
    done();
  }

  override _destroy(err: Error | null, done: (err?: Error | null) => void): void {
    this.out('destroy');
    done(err);
  }
}

/** A process the spawner started. */
export class RemoteChild extends EventEmitter implements ProcessLike {
  exitCode: number | null = null;
  signalCode: NodeJS.Signals | null = null;
  readonly stdio: Array<Duplex | Socket | null>;

  constructor(
    readonly pid: number,
    slots: Slot[],
    /** The sockets of its 'direct' slots, by slot. */
    direct: Map<number, Socket>,
    send: (m: object) => void,
    id: number,
  ) {
    super();
    this.stdio = slots.map((s, slot) => {
      if (s === 'direct') return direct.get(slot) ?? null;
      if (s !== 'pipe') return null;
      return new Relayed((t, data) => send({ t, id, slot, data: data?.toString('hex') }));
    });
  }

  get stdin(): Duplex | Socket | null {
    return this.stdio[0] ?? null;
  }

  get stdout(): Duplex | Socket | null {
    return this.stdio[1] ?? null;
  }

  get stderr(): Duplex | Socket | null {
    return this.stdio[2] ?? null;
  }

  kill(signal: NodeJS.Signals = 'SIGTERM'): boolean {
    if (this.exitCode !== null || this.signalCode !== null) return false;
    try {
      process.kill(this.pid, signal);
      return true;
    } catch {
      return false;
    }
  }

  /** From the spawner: what the child wrote on `slot` (null: its end). */
  received(slot: number, data: Buffer | null): void {
    const s = this.stdio[slot];
    if (s instanceof Relayed) s.push(data);
  }

  exited(code: number | null, signal: NodeJS.Signals | null): void {
    if (this.exitCode !== null || this.signalCode !== null) return;
    this.exitCode = code;
    this.signalCode = signal;
    this.emit('exit', code, signal);
  }

  closed(): void {
    for (const s of this.stdio) if (s instanceof Relayed && !s.readableEnded) s.push(null);
    this.emit('close', this.exitCode, this.signalCode);
  }
}

type Message =
  /** `forker`: the parent of every program it starts. */
  | { t: 'ready'; pid: number; forker: number }
  | { t: 'direct'; id: number; slot: number }
  | { t: 'spawned'; id: number; pid: number }
  | { t: 'failed'; id: number; code: string | null; message: string }
  /** `data`: hex. */
  | { t: 'data'; id: number; slot: number; data: string }
  | { t: 'eof'; id: number; slot: number }
  | { t: 'exit'; id: number; code: number | null; signal: NodeJS.Signals | null }
  | { t: 'close'; id: number }
  /** The FIFOs of a 'mkfifo' request made, or the first failure. */
  | { t: 'made'; id: number; error?: string };

interface Pending {
  spec: SpawnSpec;
  resolve: (c: RemoteChild) => void;
  reject: (e: Error) => void;
  /** Its 'direct' slots' sockets, as they came. */
  direct: Map<number, Socket>;
}

export class Spawner {
  private proc: ChildProcess | null = null;
  private seq = 0;
  private readonly pending = new Map<number, Pending>();
  /** Those waiting until no spawn is pending (`answered`). */
  private idleWaiters: (() => void)[] = [];
  private readonly live = new Map<number, RemoteChild>();
  /** 'mkfifo' requests not answered yet. */
  private readonly fifoRequests = new Map<number, { resolve: () => void; reject: (e: Error) => void }>();
  private closed = false;
  /** The spawner's forker's pid, once it said it ('ready'). */
  private forker: Promise<number> = Promise.resolve(0);
  private forkerKnown: { resolve: (pid: number) => void; reject: (e: Error) => void } | null = null;

  /**
   * `setpriv`: util-linux's, for --pdeathsig (null: none, the channel's end alone ends it); `perl`:
   * perl-base's, which runs it.
   */
  constructor(
    private readonly setpriv: string | null,
    private readonly perl: string | null = findProgram('perl', ''),
  ) {}

  /** The spawner's pid (started when there is none); its forker is the parent of every process it starts. */
  get pid(): number {
    return this.process().pid!;
  }

  /**
   * Starts `spec` (a function: made with the pid of the process whose child the program will be, once
   * the spawner says it); resolves once it runs, rejects when it could not be started.
   */
  async spawn(spec: SpawnSpec | ((parentPid: number) => SpawnSpec)): Promise<RemoteChild> {
    if (this.closed) throw new Error('the sandbox launcher is closed');
    const proc = this.process();
    let s: SpawnSpec;
    if (typeof spec === 'function') {
      const forker = await this.forker;
      if (this.proc !== proc) throw new Error('the sandbox spawner ended');
      s = spec(forker);
    } else s = spec;
    const id = ++this.seq;
    return new Promise<RemoteChild>((resolve, reject) => {
      if (!proc.connected) return reject(new Error('the sandbox spawner is not running'));
      this.pending.set(id, { spec: s, resolve, reject, direct: new Map() });
      const stdio = s.stdio.map((slot) => (typeof slot === 'object' ? { data: Buffer.from(slot.data).toString('hex') } : slot));
      const pdeathsig = s.pdeathsig ? os.constants.signals[s.pdeathsig] : 0;
      const enter = s.enter?.map((e) => ({ fd: e.fd, type: NS_FLAGS[e.ns] }));
      proc.send({ t: 'spawn', id, ...s, stdio, pdeathsig, enter });
    });
  }

  /**
   * Makes FIFOs (mode 600) at `paths`, in the spawner itself: no program is started for them. Rejects
   * with the first that could not be made (the others are made all the same).
   */
  mkfifo(paths: string[]): Promise<void> {
    if (this.closed) return Promise.reject(new Error('the sandbox launcher is closed'));
    const proc = this.process();
    const id = ++this.seq;
    return new Promise<void>((resolve, reject) => {
      if (!proc.connected) return reject(new Error('the sandbox spawner is not running'));
      this.fifoRequests.set(id, { resolve, reject });
      proc.send({ t: 'mkfifo', id, paths });
    });
  }

  /**
   * Resolves once every spawn asked for so far has been answered (started or failed), or after `ms`:
   * a stop that ends the programs a start in progress left running must know them all first.
   */
  async answered(ms: number): Promise<void> {
    if (this.pending.size > 0) {
      let timer: NodeJS.Timeout | undefined;
      await new Promise<void>((resolve) => {
        this.idleWaiters.push(resolve);
        timer = setTimeout(resolve, ms);
      });
      clearTimeout(timer);
    }
    // (the code that awaited each spawn registers what it started in the turn after)
    await new Promise((r) => setImmediate(r));
  }

  /** Ends it (every process it started still running is killed with it); resolves once it has exited. */
  async close(): Promise<void> {
    this.closed = true;
    const p = this.proc;
    if (!p || p.exitCode !== null || p.signalCode !== null) return;
    const gone = new Promise<void>((r) => p.once('exit', () => r()));
    p.disconnect();
    const timer = setTimeout(() => p.kill('SIGKILL'), 3000);
    await gone;
    clearTimeout(timer);
  }

  private process(): ChildProcess {
    if (this.proc) return this.proc;
    if (this.closed) throw new Error('the sandbox launcher is closed');
    if (!this.perl) throw new Error('perl was not found in the system directories: the sandbox spawner runs on it (apt-get install perl-base)');
    const n = callNumbers();
    const forker = [n.recvmsg, n.pidfd_open, n.dup3, n.close, n.setsid, n.setgroups, n.setresgid, n.setresuid, n.exit_group, n.setns, n.prctl];
    const perl = [this.perl, SPAWNER, String(process.pid), String(n.sendmsg), ...forker.map(String)];
    const argv = this.setpriv ? [this.setpriv, '--pdeathsig', 'TERM', '--', ...perl] : perl;
    const proc = childProcess().spawn(argv[0]!, argv.slice(1), {
      env: { PATH: process.env.PATH ?? '/usr/bin:/bin' },
      stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
      serialization: 'json',
      detached: true,
    });
    // its wake-ups are on every holder's start: before the conversations' processes on a busy machine
    // (only a root daemon may raise a priority; what it starts gets 0 or the nice value asked for)
    if (canRenice() && proc.pid) {
      try {
        os.setPriority(proc.pid, SPAWNER_NICE);
      } catch {
        /* gone already */
      }
      setGroupNice(proc.pid, SPAWNER_NICE);
    }
    this.proc = proc;
    this.forker = new Promise<number>((resolve, reject) => {
      this.forkerKnown = { resolve, reject };
    });
    // (none may be waiting for it)
    this.forker.catch(() => {});
    proc.on('message', (m: Message, handle?: Socket) => this.message(m, handle ?? null));
    // (one that could not be started says so here, and no 'exit' follows)
    proc.on('error', () => proc.pid === undefined && this.lost(proc));
    proc.once('exit', () => this.lost(proc));
    return proc;
  }

  private message(m: Message, handle: Socket | null): void {
    if (m.t === 'ready') {
      // (it was forked at the spawner's start, perhaps before the spawner's priority was raised)
      if (canRenice()) {
        try {
          os.setPriority(m.forker, SPAWNER_NICE);
        } catch {
          /* gone already */
        }
      }
      return this.forkerKnown?.resolve(m.forker);
    }
    if (m.t === 'made') {
      const r = this.fifoRequests.get(m.id);
      this.fifoRequests.delete(m.id);
      return m.error === undefined ? r?.resolve() : r?.reject(new Error(m.error));
    }
    if (m.t === 'direct') {
      const p = this.pending.get(m.id);
      if (!p || !handle || p.spec.stdio[m.slot] !== 'direct') return void handle?.destroy();
      p.direct.set(m.slot, handle);
      return;
    }
    if (m.t === 'spawned' || m.t === 'failed') {
      const p = this.pending.get(m.id);
      if (!p) return;
      this.settle(m.id);
      if (m.t === 'failed') {
        for (const sock of p.direct.values()) sock.destroy();
        return p.reject(Object.assign(new Error(m.message), { code: m.code }));
      }
      if (p.spec.stdio.some((s, slot) => s === 'direct' && !p.direct.has(slot))) {
        signalGroup(m.pid, 'SIGKILL');
        for (const sock of p.direct.values()) sock.destroy();
        return p.reject(new Error("the spawner did not hand over the process's channel"));
      }
      const send = (x: object) => {
        if (this.proc?.connected) this.proc.send(x);
      };
      const child = new RemoteChild(m.pid, p.spec.stdio, p.direct, send, m.id);
      this.live.set(m.id, child);
      return p.resolve(child);
    }
    const child = this.live.get(m.id);
    if (!child) return;
    if (m.t === 'data') child.received(m.slot, Buffer.from(m.data, 'hex'));
    else if (m.t === 'eof') child.received(m.slot, null);
    // (the end comes a turn of the event loop later: its 'spawned' may have come in the same read,
    // and the code that awaited the spawn attaches its listeners only after this message)
    else if (m.t === 'exit') setImmediate(() => child.exited(m.code, m.signal));
    else {
      this.live.delete(m.id);
      setImmediate(() => child.closed());
    }
  }

  /** A spawn was answered: once none is pending, those waiting for that (`answered`) go on. */
  private settle(id: number): void {
    this.pending.delete(id);
    if (this.pending.size > 0) return;
    const waiters = this.idleWaiters;
    this.idleWaiters = [];
    for (const w of waiters) w();
  }

  /** The spawner ended: what it started is killed, those waiting are told; the next spawn starts another. */
  private lost(proc: ChildProcess): void {
    if (this.proc !== proc) return;
    this.proc = null;
    this.forkerKnown?.reject(new Error('the sandbox spawner ended'));
    for (const [id, p] of this.pending) {
      this.settle(id);
      p.reject(new Error('the sandbox spawner ended'));
    }
    for (const r of this.fifoRequests.values()) r.reject(new Error('the sandbox spawner ended'));
    this.fifoRequests.clear();
    for (const c of this.live.values()) {
      signalGroup(c.pid, 'SIGKILL');
      c.exited(null, 'SIGKILL');
      c.closed();
    }
    this.live.clear();
  }
}

/**
 * Runs a program to its end through `spawner` (a helper while it runs: a stop ends it): its exit code
 * (-1: it could not be started, or was killed at `timeoutMs`) and the end of its stderr.
 */
export async function runToEnd(
  spawner: Spawner,
  file: string,
  args: string[],
  opts: { env: Record<string, string>; timeoutMs: number; uid?: number; gid?: number },
): Promise<{ code: number; signal: NodeJS.Signals | null; stderr: string }> {
  let child: RemoteChild;
  try {
    child = helper(await spawner.spawn({ file, args, env: opts.env, uid: opts.uid, gid: opts.gid, stdio: ['ignore', 'ignore', 'pipe'] }));
  } catch (e) {
    return { code: -1, signal: null, stderr: (e as Error).message };
  }
  let stderr = '';
  child.stderr!.on('data', (d: Buffer) => (stderr = (stderr + d.toString('utf8')).slice(-2000)));
  const timer = setTimeout(() => signalGroup(child.pid, 'SIGKILL'), opts.timeoutMs);
  timer.unref();
  return new Promise((resolve) =>
    child.once('close', (code: number | null, signal: NodeJS.Signals | null) => {
      clearTimeout(timer);
      resolve({ code: code ?? -1, signal, stderr });
    }),
  );
}

/**
 * Starts `spec` through `spawner`, or with none in this process (a 'direct' slot is then a plain
 * pipe, a number the fd itself); resolves once it runs, rejects with why it could not be started.
 */
export function launch(spawner: Spawner | null, spec: SpawnSpec): Promise<ProcessLike> {
  if (spawner) return spawner.spawn(spec);
  if (spec.enter?.length || spec.pdeathsig) return Promise.reject(new Error('namespaces to enter and a parent-death signal need the spawner'));
  const stdio = spec.stdio.map((s) => (s === 'direct' || typeof s === 'object' ? 'pipe' : s));
  const child = childProcess().spawn(spec.file, spec.args, { env: spec.env, cwd: spec.cwd, uid: spec.uid, gid: spec.gid, stdio, detached: true });
  if (child.pid === undefined) return new Promise((_, reject) => child.once('error', reject));
  spec.stdio.forEach((s, i) => {
    if (typeof s !== 'object') return;
    const w = child.stdio[i] as Writable;
    w.on('error', () => {});
    w.end(s.data);
  });
  if (spec.nice) {
    try {
      os.setPriority(child.pid, spec.nice);
    } catch {
      /* gone already */
    }
    setGroupNice(child.pid, spec.nice);
  }
  return Promise.resolve(child);
}
