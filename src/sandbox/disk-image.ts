/**
 * SANDBOX_DISK_MB enforced by the kernel: one ext4 image per conversation, `<state>/disk.img` (a
 * sparse file, 0600, the daemon's), loop-mounted on the host at `<state>/disk` while its sandbox
 * lives. It holds the conversation's workspace, /tmp and HOME (`disk/{workspace,tmp,home}`, the
 * sandbox uid's), which the holder binds into the sandbox; the workspace's host path
 * (`WORKSPACE_ROOT/<id>`) is a link to `disk/workspace` (while the image is not mounted, an empty
 * directory under its mount point: the path is always a directory, its files are in the image). A write past the image's size fails with
 * ENOSPC inside the sandbox, whatever holds the blocks — files unlinked while open included, which
 * a walk of names cannot see. On the host the image takes what its files take (`discard`: freed
 * blocks are given back to the data disk at once), so disk relief counts its allocated blocks.
 *
 * Made with mkfs.ext4 without a journal (a 10 GiB image takes ~4 MB of the host at once; with the
 * default journal 69 MB), without the blocks kept to grow it while mounted (resize_inode: 4.2 of those
 * 4.4 MB, and two thirds of mkfs's CPU; an image is never grown) and no reserved blocks: a new 10 GiB
 * image takes 228 KB of the host. Checked with `e2fsck -p` before each later mount (an
 * image is only left unclean by a crash of the machine); mounted nodev,nosuid. Only a root daemon can
 * mount, and only on one machine at a time: a daemon that is not root, cluster mode (WORKSPACE_ROOT
 * shared by several nodes, each of which could mount the same image) and workspaces made before
 * images (a directory with files, kept as it is) are measured instead (disk-quota.ts).
 *
 * Costs (2-core machine, load ~2): a new 10 GiB image ~10–20 ms (mkfs; 3 ms of CPU), made with the spare holder
 * ahead of the conversation that takes it; mounting an existing one ~70 ms (e2fsck and mount), when a
 * conversation's sandbox starts again; unmounting ~60 ms, when it closes.
 */
import { childProcess } from '../builtins.js';
import fs from 'node:fs';
import path from 'node:path';
import { helper } from './processes.js';
import { findProgram } from './programs.js';
import { runToEnd, type Spawner } from './spawner.js';

/** The programs images are made, checked and mounted with (e2fsprogs, util-linux). */
export interface DiskTools {
  mkfs: string;
  e2fsck: string | null;
  mount: string;
  umount: string;
  /** coreutils' sync (`sync -f`: syncfs(2) on a mount before it is unmounted). */
  sync: string | null;
  /** What runs them (off the daemon's event loop). */
  spawner: Spawner;
  /** The launcher is stopping: no image is made or mounted any more (its stop unmounts what is). */
  stopping?: boolean;
}

/** What an image holds: the directories bound into the sandbox. */
const IMAGE_DIRS = ['workspace', 'tmp', 'home'] as const;

const imageFile = (state: string) => path.join(state, 'disk.img');
export const imageMount = (state: string) => path.join(state, 'disk');

/** The tools, or why images cannot be used here (then the disk bound is measured). */
export function findDiskTools(spawner: Spawner): DiskTools | string {
  if (process.getuid?.() !== 0) return 'the daemon is not root (mounting a per-conversation disk needs root)';
  if (!fs.existsSync('/dev/loop-control')) return 'there is no /dev/loop-control (loop devices)';
  const mkfs = findProgram('mkfs.ext4');
  if (!mkfs) return 'mkfs.ext4 was not found (apt-get install e2fsprogs)';
  const mount = findProgram('mount');
  const umount = findProgram('umount');
  if (!mount || !umount) return 'mount and umount (util-linux) were not found';
  return { mkfs, e2fsck: findProgram('e2fsck'), mount, umount, sync: findProgram('sync'), spawner };
}

/** Runs a program to its end: its exit code (-1: it could not run or was killed) and its last line of stderr. */
async function exec(spawner: Spawner | null, argv: string[], timeoutMs = 60_000): Promise<{ code: number; why: string }> {
  const env = { PATH: '/usr/sbin:/usr/bin:/sbin:/bin' };
  if (spawner) {
    const r = await runToEnd(spawner, argv[0]!, argv.slice(1), { env, timeoutMs });
    return { code: r.code, why: `${path.basename(argv[0]!)}: ${r.stderr.trim().split('\n').pop() || r.signal || 'failed'}` };
  }
  return new Promise((resolve) => {
    helper(
      childProcess().execFile(argv[0]!, argv.slice(1), { env, timeout: timeoutMs }, (err, _out, stderr) => {
        const code = err ? (typeof err.code === 'number' ? err.code : -1) : 0;
        resolve({ code, why: `${path.basename(argv[0]!)}: ${String(stderr).trim().split('\n').pop() || err?.message || 'failed'}` });
      }),
    );
  });
}

async function run(spawner: Spawner | null, argv: string[], timeoutMs?: number): Promise<void> {
  const r = await exec(spawner, argv, timeoutMs);
  if (r.code !== 0) throw new Error(r.why);
}

/** Mount points under `dir` (from /proc/self/mountinfo, deepest first). */
function mountsUnder(dir: string): string[] {
  let info: string;
  try {
    info = fs.readFileSync('/proc/self/mountinfo', 'utf8');
  } catch {
    return [];
  }
  const root = path.resolve(dir);
  const out: string[] = [];
  for (const line of info.split('\n')) {
    const at = line.split(' ')[4];
    if (!at) continue;
    const p = at.replace(/\\([0-7]{3})/g, (_m, o: string) => String.fromCharCode(Number.parseInt(o, 8)));
    if (p === root || p.startsWith(`${root}/`)) out.push(p);
  }
  return out.sort((a, b) => b.length - a.length);
}

function isMounted(mountPoint: string): boolean {
  return mountsUnder(mountPoint).includes(path.resolve(mountPoint));
}

/**
 * The host's disk blocks an image holds (what it costs the data disk: its files, unlinked ones
 * still open included); 0 without one.
 */
export function imageBytes(state: string): number {
  try {
    return fs.statSync(imageFile(state)).blocks * 512;
  } catch {
    return 0;
  }
}

/**
 * Makes a new image of `sizeMb` in `state` and mounts it, its directories the sandbox uid's
 * (`owner`; null: the daemon's). Nothing is left behind when it fails.
 */
async function createImage(tools: DiskTools, state: string, sizeMb: number, owner: { uid: number; gid: number } | null): Promise<void> {
  const file = imageFile(state);
  await fs.promises.mkdir(state, { recursive: true, mode: 0o700 });
  const fh = await fs.promises.open(file, fs.constants.O_CREAT | fs.constants.O_EXCL | fs.constants.O_RDWR, 0o600);
  try {
    await fh.truncate(sizeMb * 1024 * 1024);
  } finally {
    await fh.close();
  }
  try {
    // -m 0: no blocks reserved for root (no process of the sandbox is root); no journal, no blocks
    // reserved to grow it while mounted: see the header
    if (tools.stopping) throw new Error('the sandbox launcher is stopping');
    await run(tools.spawner, [tools.mkfs, '-q', '-F', '-m', '0', '-O', '^has_journal,^resize_inode', '-E', 'root_owner=0:0,lazy_itable_init=1', file]);
    await mountImage(tools, state, owner, false);
  } catch (e) {
    fs.rmSync(file, { force: true });
    throw e;
  }
}

/**
 * Mounts the image in `state` at `state/disk` unless it is mounted already, checking it first
 * (`check`: an image that was unmounted, by a stop or a crash), and makes the directories it must
 * hold (a new image's, or one an agent emptied).
 */
async function mountImage(tools: DiskTools, state: string, owner: { uid: number; gid: number } | null, check = true): Promise<void> {
  const mnt = imageMount(state);
  // (off the event loop, as every file operation here: the data disk's and a new image's first
  // metadata writes can wait milliseconds, beside other conversations' turns)
  await fs.promises.mkdir(mnt, { recursive: true, mode: 0o700 });
  if (!isMounted(mnt)) {
    // an image still attached to a loop device is in use (a lazy unmount whose last user has not
    // ended): never checked then, and mount takes that device again (util-linux), not a second one
    if (check && tools.e2fsck && !attached(imageFile(state))) {
      // 0: clean, 1: errors corrected; anything else: it is not mounted
      const r = await exec(tools.spawner, [tools.e2fsck, '-p', imageFile(state)]);
      if (r.code !== 0 && r.code !== 1) throw new Error(r.why);
    }
    // under the mount point, hidden while the image is mounted: an empty directory the workspace's
    // link leads to while it is not (the conversation has a workspace, its files are in the image)
    await fs.promises.mkdir(path.join(mnt, 'workspace'), { recursive: true, mode: 0o700 });
    // (-t: mount need not probe the image for its type, ~2 ms of CPU a mount)
    if (tools.stopping) throw new Error('the sandbox launcher is stopping');
    await run(tools.spawner, [tools.mount, '-t', 'ext4', '-o', 'loop,nodev,nosuid,discard', imageFile(state), mnt]);
  }
  for (const d of IMAGE_DIRS) {
    const p = path.join(mnt, d);
    try {
      await fs.promises.mkdir(p, { mode: 0o700 });
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'EEXIST') continue;
      throw e;
    }
    if (owner) await fs.promises.lchown(p, owner.uid, owner.gid);
  }
}

/** Whether a loop device is backed by `file` (same inode), from /sys/block/loop<n>/loop/backing_file. */
function attached(file: string): boolean {
  let target: fs.Stats;
  try {
    target = fs.statSync(file);
  } catch {
    return false;
  }
  let devices: string[] = [];
  try {
    devices = fs.readdirSync('/sys/block').filter((d) => d.startsWith('loop'));
  } catch {
    return false;
  }
  for (const d of devices) {
    try {
      const backing = fs
        .readFileSync(`/sys/block/${d}/loop/backing_file`, 'utf8')
        .trim()
        .replace(/ \(deleted\)$/, '');
      const st = fs.statSync(backing);
      if (st.ino === target.ino && st.dev === target.dev) return true;
    } catch {
      /* not attached, or its file is gone */
    }
  }
  return false;
}

/**
 * Unmounts the image in `state` (once the sandbox's processes are gone). A mount something on the
 * host still uses (a shell whose directory is in it) is detached lazily: the kernel ends it when that
 * is gone, and a later mount of the same file reuses its loop device (util-linux), never a second one.
 */
async function unmountImage(tools: DiskTools, state: string): Promise<void> {
  const mnt = imageMount(state);
  if (!isMounted(mnt)) return;
  await writeOut(tools, [mnt]);
  await run(tools.spawner, [tools.umount, mnt]).catch(() => run(tools.spawner, [tools.umount, '-l', mnt]));
}

/**
 * Writes out the file systems mounted at `points` (syncfs(2), by `sync -f`). An unmount writes a
 * file system out only when it removes its last mount: a copy of the mount in a namespace not yet
 * gone (a holder still ending after its wait ran out, or a process that made a namespace of its
 * own) keeps it alive, its new files in memory, the image on the host without them.
 */
async function writeOut(tools: DiskTools, points: string[]): Promise<void> {
  if (tools.sync) await run(tools.spawner, [tools.sync, '-f', '--', ...points]).catch(() => {});
}

/** Unmounts every mount under `dir` (a daemon that was killed left its images mounted). */
export async function unmountAll(tools: DiskTools, dir: string): Promise<void> {
  const points = mountsUnder(dir);
  if (points.length === 0) return;
  await writeOut(tools, points);
  await run(tools.spawner, [tools.umount, ...points]).catch(() => run(tools.spawner, [tools.umount, '-l', ...mountsUnder(dir)]).catch(() => {}));
}

/**
 * Copies the workspace out of the image into `dest` (an empty directory), owners, modes and links
 * as they are (KEEP_WORKSPACES: a deleted conversation's workspace stays a plain directory).
 */
export function copyWorkspaceOut(state: string, dest: string): Promise<void> {
  return run(null, ['cp', '-a', '--', `${path.join(imageMount(state), 'workspace')}/.`, `${dest}/`], 600_000);
}

/** Whether images work here: a small one made, mounted and removed (the probe). */
export async function probeImages(tools: DiskTools, dir: string): Promise<string | null> {
  const state = fs.mkdtempSync(path.join(dir, '.probe-disk-'));
  try {
    await createImage(tools, state, 8, null);
    await unmountImage(tools, state);
    return null;
  } catch (e) {
    return (e as Error).message;
  } finally {
    await unmountImage(tools, state).catch(() => {});
    fs.rmSync(state, { recursive: true, force: true });
  }
}

/**
 * The daemon's per-conversation disks: each image mounted while a holder uses it (two holders of
 * one conversation overlap while the old one ends: counted, so the first to end does not unmount the
 * other's), its operations one after another per image.
 */
export class Disks {
  /** Holders using an image, by the image file's inode (stable while its state directory is renamed). */
  private readonly users = new Map<string, number>();
  private readonly queue = new Map<string, Promise<unknown>>();

  constructor(
    readonly tools: DiskTools,
    readonly sizeMb: number,
    /** The sandbox uid (root daemon), owner of the image's directories. */
    private readonly owner: { uid: number; gid: number } | null,
    private readonly workspaceRoot: string,
  ) {}

  /** `fn` after every earlier operation on the same image. */
  private serial<T>(key: string, fn: () => Promise<T>): Promise<T> {
    const before = this.queue.get(key) ?? Promise.resolve();
    const p = before.then(fn, fn);
    const settled = p.catch(() => {});
    this.queue.set(key, settled);
    void settled.then(() => {
      if (this.queue.get(key) === settled) this.queue.delete(key);
    });
    return p;
  }

  /** Mounts the image in `state` (made when there is none) for one more holder; its key for release(). */
  async acquire(state: string): Promise<string> {
    if (!fs.existsSync(imageFile(state))) await createImage(this.tools, state, this.sizeMb, this.owner);
    const st = fs.statSync(imageFile(state));
    const key = `${st.dev}:${st.ino}`;
    await this.serial(key, async () => {
      await mountImage(this.tools, state, this.owner);
      this.users.set(key, (this.users.get(key) ?? 0) + 1);
    });
    return key;
  }

  /** One holder less uses the image (now in `state`): unmounted when none does (at a stop, all at once by unmountStale). */
  release(key: string, state: string): Promise<void> {
    return this.serial(key, async () => {
      const n = (this.users.get(key) ?? 1) - 1;
      if (n > 0) {
        this.users.set(key, n);
        return;
      }
      this.users.delete(key);
      if (!this.stopping) await unmountImage(this.tools, state).catch(() => {});
    });
  }

  /** The daemon stops: images are unmounted together once every sandbox is gone (one umount, not one each). */
  private stopping = false;
  stop(): void {
    this.stopping = true;
    this.tools.stopping = true;
  }

  /**
   * The workspace's host path (`WORKSPACE_ROOT/<id>`) as a link to the image's workspace directory,
   * relative (the tree may move): an empty directory there is replaced, a link is made again.
   */
  linkWorkspace(workspace: string, state: string): void {
    const target = path.relative(path.dirname(workspace), path.join(imageMount(state), 'workspace'));
    let st: fs.Stats | null = null;
    try {
      st = fs.lstatSync(workspace);
    } catch {
      /* none */
    }
    if (st?.isSymbolicLink()) {
      if (fs.readlinkSync(workspace) === target) return;
      fs.unlinkSync(workspace);
    } else if (st?.isDirectory()) fs.rmdirSync(workspace);
    fs.symlinkSync(target, workspace);
  }

  /** Whether `state` holds an image (the conversation's workspace is on its own disk). */
  has(state: string): boolean {
    return fs.existsSync(imageFile(state));
  }

  /** Unmounts whatever is still mounted under the sandboxes' directory (a stop, or what a killed daemon left). */
  unmountStale(): Promise<void> {
    this.users.clear();
    return unmountAll(this.tools, path.join(this.workspaceRoot, '.sandbox'));
  }
}
