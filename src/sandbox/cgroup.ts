/**
 * Per-conversation cgroups for the sandbox limits (memory, number of processes, CPU), under one
 * parent whose memory limit bounds all sandboxes together (SANDBOX_TOTAL_MEMORY_MB).
 *
 * - cgroup v2 (what systemd gives a service with `Delegate=yes`): the daemon moves itself into a
 *   `daemon` leaf of its own cgroup (a v2 cgroup with children may hold no process), enables the
 *   memory and pids (and cpu, when delegated) controllers for the children, and creates
 *   `sandboxes/` next to it (memory.max = the total) with `sandbox-<conversation>` in it:
 *   memory.max, memory.swap.max=0, pids.max, cpu.max. Kill: cgroup.kill.
 * - cgroup v1 (a writable memory and pids hierarchy, e.g. as root): `parley/d<daemon pid>` under
 *   the daemon's own cgroup in each hierarchy (its memory.limit_in_bytes = the total), with one
 *   cgroup per sandbox in it: memory.limit_in_bytes (and memsw), pids.max, and in the cpu hierarchy
 *   (when writable) cpu.cfs_quota_us.
 * One cgroup per sandbox (`sandbox-<n>`, named by the holder: a spare holder's becomes its
 * conversation's when it is taken, and a cgroup cannot be renamed under v2). Every process of the
 * sandbox joins it before it execs anything (join.ts), so everything it starts is counted from the
 * first fork. When neither is writable, detect() returns null (the launcher then refuses to start
 * unless SANDBOX_LIMITS=unenforced).
 *
 * A sandbox's cgroup is made and removed off the event loop (`make`, `remove`): a cgroup's mkdir,
 * its limits' writes and its rmdir take the kernel a millisecond or more each, and a spare's start
 * comes in the middle of other conversations' turns.
 */
import fs from 'node:fs';
import path from 'node:path';
import { isAlive } from '../process-group.js';

export interface CgroupLimits {
  memoryBytes: number;
  pids: number;
  /** All sandboxes together. */
  totalMemoryBytes: number;
  /** CPUs one conversation may use (cpu quota), null: no quota (siblings share CPU equally under contention). */
  cpus: number | null;
}

/** The quota period (µs) of a CPU limit. */
const CPU_PERIOD_US = 100_000;

export interface ConversationCgroup {
  /** Its directory in the memory (v1) or unified (v2) hierarchy. */
  dir: string;
  /** `cgroup.procs` files a process writes its pid into to join (one per hierarchy). */
  procsFiles: string[];
  /** Makes its directories and sets its limits (before any process joins it); rejects when it cannot. */
  make(): Promise<void>;
  /** Moves a running process (and its threads) into it; false when it is gone or cannot be moved. */
  add(pid: number): Promise<boolean>;
  /** Pids currently in the cgroup (host pid namespace). */
  pids(): number[];
  /** SIGKILL to every process in it. */
  killAll(): void;
  /** Removes the cgroup directories; false while processes are still leaving it (retry). */
  remove(): Promise<boolean>;
}

export interface CgroupBackend {
  kind: 'cgroup-v2' | 'cgroup-v1';
  /** Whether a CPU quota is enforced (the cpu controller is there and writable). */
  cpu: boolean;
  /** One named `name`, not made yet (`make`). */
  create(name: string): ConversationCgroup;
  /** Removes the daemon's own (empty) directories at shutdown. */
  close(): void;
}

interface Mount {
  dir: string;
  type: string;
  options: string[];
}

function mounts(): Mount[] {
  try {
    return fs
      .readFileSync('/proc/self/mounts', 'utf8')
      .split('\n')
      .map((l) => l.split(' '))
      .filter((f) => f.length >= 4 && (f[2] === 'cgroup' || f[2] === 'cgroup2'))
      .map((f) => ({ dir: f[1]!.replace(/\\040/g, ' '), type: f[2]!, options: f[3]!.split(',') }));
  } catch {
    return [];
  }
}

/** controller name ('' for v2) → own cgroup path, from /proc/self/cgroup. */
function ownCgroups(): Map<string, string> {
  const out = new Map<string, string>();
  try {
    for (const line of fs.readFileSync('/proc/self/cgroup', 'utf8').split('\n')) {
      const m = /^\d+:([^:]*):(.*)$/.exec(line);
      if (!m) continue;
      for (const c of m[1]!.split(',')) out.set(c, m[2]!);
    }
  } catch {
    /* not Linux */
  }
  return out;
}

function readPids(file: string): number[] {
  try {
    return fs.readFileSync(file, 'utf8').split('\n').filter(Boolean).map(Number);
  } catch {
    return [];
  }
}

function killPids(pids: number[]): void {
  for (const pid of pids) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      /* gone */
    }
  }
}

/**
 * SIGKILL to every process `list()` shows, again for those that appear meanwhile (a fork bomb forks
 * while it is killed), until a look shows none not already sent one (bounded). A killed process stays
 * listed until it has exited: looking until the list is empty spun through every round.
 */
function killUntilNoNew(list: () => number[]): void {
  const sent = new Set<number>();
  for (let i = 0; i < 50; i++) {
    const fresh = list().filter((p) => !sent.has(p));
    if (fresh.length === 0) return;
    killPids(fresh);
    for (const p of fresh) sent.add(p);
  }
}

function write(file: string, value: string): void {
  fs.writeFileSync(file, value);
}

function tryWrite(file: string, value: string): boolean {
  try {
    write(file, value);
    return true;
  } catch {
    return false;
  }
}

/** Writes every [file, value] in turn, off the event loop; one whose file the kernel lacks (`optional`) is skipped. */
async function writeAll(writes: [string, string, optional?: boolean][]): Promise<void> {
  for (const [file, value, optional] of writes) {
    try {
      await fs.promises.writeFile(file, value);
    } catch (e) {
      if (!optional) throw e;
    }
  }
}

async function tryWriteAsync(file: string, value: string): Promise<boolean> {
  try {
    await fs.promises.writeFile(file, value);
    return true;
  } catch {
    return false;
  }
}

function rmdirQuiet(dir: string): boolean {
  try {
    fs.rmdirSync(dir);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'ENOENT';
  }
}

async function rmdirQuietAsync(dir: string): Promise<boolean> {
  try {
    await fs.promises.rmdir(dir);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'ENOENT';
  }
}

/** Removes `root/d<pid>` directories (and their empty children) of daemons that are gone. */
function removeStale(root: string): void {
  let entries: string[];
  try {
    entries = fs.readdirSync(root);
  } catch {
    return;
  }
  for (const e of entries) {
    const m = /^d(\d+)$/.exec(e);
    if (!m) {
      // an empty leftover of an older layout (rmdir fails while a process is in it)
      if (/^[0-9a-f-]{32,36}$|^probe-\d+$|^sandbox-\d+$/.test(e)) rmdirQuiet(path.join(root, e));
      continue;
    }
    if (Number(m[1]) === process.pid || isAlive(Number(m[1]))) continue;
    const dir = path.join(root, e);
    try {
      for (const c of fs.readdirSync(dir)) {
        if (fs.statSync(path.join(dir, c)).isDirectory()) rmdirQuiet(path.join(dir, c));
      }
    } catch {
      /* gone */
    }
    rmdirQuiet(dir);
  }
}

function safeName(name: string): string {
  return name.replace(/[^A-Za-z0-9_-]/g, '_').slice(0, 64);
}

/** memory.limit_in_bytes and (with swap accounting, else skipped) memory.memsw.limit_in_bytes: no swap beyond the limit. */
function memoryLimitsV1(dir: string, bytes: number): [file: string, value: string, optional: boolean][] {
  return [
    [path.join(dir, 'memory.limit_in_bytes'), String(bytes), false],
    [path.join(dir, 'memory.memsw.limit_in_bytes'), String(bytes), true],
  ];
}

class V1Backend implements CgroupBackend {
  readonly kind = 'cgroup-v1';
  readonly cpu: boolean;
  constructor(
    private readonly memoryBase: string,
    private readonly pidsBase: string,
    private readonly cpuBase: string | null,
    private readonly limits: CgroupLimits,
  ) {
    this.cpu = cpuBase !== null && limits.cpus !== null;
    fs.mkdirSync(memoryBase, { recursive: true });
    // every sandbox together (hierarchical accounting: the children are charged to it)
    const [limit, memsw] = memoryLimitsV1(memoryBase, limits.totalMemoryBytes);
    write(limit![0], limit![1]);
    tryWrite(memsw![0], memsw![1]);
  }

  close(): void {
    rmdirQuiet(this.memoryBase);
    rmdirQuiet(this.pidsBase);
    if (this.cpuBase) rmdirQuiet(this.cpuBase);
  }

  create(name: string): ConversationCgroup {
    const mem = path.join(this.memoryBase, safeName(name));
    const pids = path.join(this.pidsBase, safeName(name));
    const cpu = this.cpu ? path.join(this.cpuBase!, safeName(name)) : null;
    const limits = this.limits;
    const files = [path.join(mem, 'cgroup.procs'), path.join(pids, 'cgroup.procs'), ...(cpu ? [path.join(cpu, 'cgroup.procs')] : [])];
    const list = () => [...new Set([...readPids(files[0]!), ...readPids(files[1]!)])];
    return {
      dir: mem,
      procsFiles: files,
      async make() {
        for (const d of [mem, pids, ...(cpu ? [cpu] : [])]) await fs.promises.mkdir(d, { recursive: true });
        await writeAll([
          ...memoryLimitsV1(mem, limits.memoryBytes),
          [path.join(pids, 'pids.max'), String(limits.pids)],
          ...(cpu
            ? ([
                [path.join(cpu, 'cpu.cfs_period_us'), String(CPU_PERIOD_US)],
                [path.join(cpu, 'cpu.cfs_quota_us'), String(Math.round(limits.cpus! * CPU_PERIOD_US))],
              ] as [string, string][])
            : []),
        ]);
      },
      add: async (pid) => {
        for (const f of files) if (!(await tryWriteAsync(f, String(pid)))) return false;
        return true;
      },
      pids: list,
      killAll: () => killUntilNoNew(list),
      async remove() {
        const a = await rmdirQuietAsync(mem);
        const b = await rmdirQuietAsync(pids);
        const c = cpu ? await rmdirQuietAsync(cpu) : true;
        return a && b && c;
      },
    };
  }

  static detect(limits: CgroupLimits, all: Mount[], own: Map<string, string>): V1Backend | null {
    const base = (ctrl: string): string | null => {
      const m = all.find((x) => x.type === 'cgroup' && x.options.includes(ctrl));
      const p = own.get(ctrl);
      if (!m || p === undefined) return null;
      const root = path.join(m.dir, p, 'parley');
      removeStale(root);
      // one directory per daemon: a daemon killed with -9 leaves empty cgroups that the next start removes
      return path.join(root, `d${process.pid}`);
    };
    const mem = base('memory');
    const pids = base('pids');
    if (!mem || !pids) return null;
    // the cpu controller is optional: without it, no quota (docs/configuration.md: SANDBOX_CPU)
    let cpu: string | null = null;
    try {
      cpu = base('cpu');
      if (cpu) fs.mkdirSync(cpu, { recursive: true });
    } catch {
      cpu = null;
    }
    return new V1Backend(mem, pids, cpu, limits);
  }
}

class V2Backend implements CgroupBackend {
  readonly kind = 'cgroup-v2';
  constructor(
    /** `sandboxes/` under the daemon's cgroup: the parent of every conversation's. */
    private readonly base: string,
    private readonly limits: CgroupLimits,
    readonly cpu: boolean,
  ) {}

  close(): void {
    /* the conversations' cgroups are removed one by one; the daemon's own cgroup stays */
  }

  create(name: string): ConversationCgroup {
    const dir = path.join(this.base, safeName(name));
    const { limits, cpu } = this;
    const procs = path.join(dir, 'cgroup.procs');
    return {
      dir,
      procsFiles: [procs],
      async make() {
        await fs.promises.mkdir(dir, { recursive: true });
        await writeAll([
          [path.join(dir, 'memory.max'), String(limits.memoryBytes)],
          // (optional: no swap controller)
          [path.join(dir, 'memory.swap.max'), '0', true],
          [path.join(dir, 'pids.max'), String(limits.pids)],
          ...(cpu ? ([[path.join(dir, 'cpu.max'), `${Math.round(limits.cpus! * CPU_PERIOD_US)} ${CPU_PERIOD_US}`]] as [string, string][]) : []),
        ]);
      },
      add: (pid) => tryWriteAsync(procs, String(pid)),
      pids: () => readPids(procs),
      killAll() {
        try {
          write(path.join(dir, 'cgroup.kill'), '1');
        } catch {
          killUntilNoNew(() => readPids(procs));
        }
      },
      remove: () => rmdirQuietAsync(dir),
    };
  }

  static detect(limits: CgroupLimits, all: Mount[], own: Map<string, string>): V2Backend | null {
    const m = all.find((x) => x.type === 'cgroup2');
    const p = own.get('');
    if (!m || p === undefined) return null;
    const mine = path.join(m.dir, p);
    let controllers: string[];
    try {
      controllers = fs.readFileSync(path.join(mine, 'cgroup.controllers'), 'utf8').trim().split(/\s+/);
    } catch {
      return null;
    }
    if (!controllers.includes('memory') || !controllers.includes('pids')) return null;
    // children with controllers need the daemon out of the parent: move it into a `daemon` leaf
    const enabled = fs.readFileSync(path.join(mine, 'cgroup.subtree_control'), 'utf8');
    if (!/\bmemory\b/.test(enabled) || !/\bpids\b/.test(enabled)) {
      const leaf = path.join(mine, 'daemon');
      fs.mkdirSync(leaf, { recursive: true });
      for (const pid of readPids(path.join(mine, 'cgroup.procs'))) {
        try {
          write(path.join(leaf, 'cgroup.procs'), String(pid));
        } catch {
          /* exited */
        }
      }
      write(path.join(mine, 'cgroup.subtree_control'), '+memory +pids');
    }
    const cpu = limits.cpus !== null && controllers.includes('cpu') && tryWrite(path.join(mine, 'cgroup.subtree_control'), '+cpu');
    // one parent for every sandbox: its memory.max bounds them all
    const parent = path.join(mine, 'sandboxes');
    fs.mkdirSync(parent, { recursive: true });
    write(path.join(parent, 'cgroup.subtree_control'), cpu ? '+memory +pids +cpu' : '+memory +pids');
    write(path.join(parent, 'memory.max'), String(limits.totalMemoryBytes));
    try {
      write(path.join(parent, 'memory.swap.max'), '0');
    } catch {
      /* no swap controller */
    }
    return new V2Backend(parent, limits, cpu);
  }
}

/**
 * The first usable backend (v2 with memory+pids delegated, else writable v1), proven by creating
 * and removing a probe cgroup; null when the daemon cannot manage cgroups.
 */
export async function detectCgroups(limits: CgroupLimits): Promise<CgroupBackend | null> {
  const all = mounts();
  const own = ownCgroups();
  for (const detect of [V2Backend.detect, V1Backend.detect]) {
    try {
      const b = detect(limits, all, own);
      if (!b) continue;
      const probe = b.create(`probe-${process.pid}`);
      await probe.make();
      await probe.remove();
      return b;
    } catch {
      /* not writable: try the next */
    }
  }
  return null;
}
