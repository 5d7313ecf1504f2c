/**
 * A holder's directories on the host: a conversation's state directory (its /tmp, HOME, the
 * terminal's FIFOs and saved outputs) and workspace made for its sandbox uid, and a spare holder's
 * directories given to the conversation that takes it, by renames only (holders.ts decides when).
 */
import fs from 'node:fs';
import path from 'node:path';
import { isAlive } from '../process-group.js';
import { imageMount, type Disks } from './disk-image.js';
import { STATE_DIRS } from './settings.js';
import { plainDirs, type ViewDirs } from './view.js';

/** A holder's directories, as the holder records them (the adoption moves them to the conversation's paths). */
interface HolderDirs {
  dirs: ViewDirs;
  state: string;
}

type Owner = { uid: number; gid: number } | null;

/**
 * A conversation's state directory: its /tmp, HOME, the terminal's FIFOs and saved outputs (0700
 * each; with a disk of its own, /tmp and HOME are on it instead). With a sandbox uid (the daemon is
 * root), /tmp and HOME are that uid's; the FIFO and output directories stay the daemon's, which the
 * sandbox may only enter (it cannot put anything there).
 */
export async function makeStateDirs(state: string, owner: Owner, image: boolean): Promise<void> {
  const own = image ? [] : ['tmp', 'home'];
  for (const d of ['', 'io', 'outputs', ...own]) await fs.promises.mkdir(path.join(state, d), { recursive: true, mode: 0o700 });
  if (!owner) return;
  for (const d of own) await fs.promises.lchown(path.join(state, d), owner.uid, owner.gid);
  for (const d of ['io', 'outputs']) await fs.promises.chmod(path.join(state, d), 0o711);
}

/** The directories of a holder whose workspace, /tmp and HOME are on the conversation's disk (mounted at `state/disk`). */
export function imageDirs(state: string): ViewDirs {
  const disk = imageMount(state);
  return {
    workspace: path.join(disk, 'workspace'),
    tmp: path.join(disk, 'tmp'),
    home: path.join(disk, 'home'),
    io: path.join(state, 'io'),
    outputs: path.join(state, 'outputs'),
  };
}

/** The workspace directory (not what is in it) belongs to the sandbox uid, so its processes can write there. */
export async function ownWorkspace(dir: string, owner: Owner): Promise<void> {
  await fs.promises.mkdir(dir, { recursive: true, mode: 0o700 });
  if (owner) await fs.promises.lchown(dir, owner.uid, owner.gid);
}

/**
 * Gives a spare holder with a disk to a new conversation (its state directory missing): the spare's
 * state directory, its image mounted in it, is renamed to the conversation's (a mount follows the
 * directory it is on, and so do the holder's binds), and the workspace's host path becomes a link
 * into the image (an empty directory there is removed first). False, with everything as it was,
 * when the state directory exists or the rename is refused.
 */
export function adoptImageDirs(spare: HolderDirs, workspace: string, state: string, disks: Disks): boolean {
  const dir = path.dirname(spare.state);
  if (fs.existsSync(state)) return false;
  try {
    fs.mkdirSync(path.dirname(state), { recursive: true, mode: 0o700 });
    fs.renameSync(spare.state, state);
  } catch {
    return false;
  }
  spare.state = state;
  spare.dirs = imageDirs(state);
  try {
    disks.linkWorkspace(workspace, state);
  } catch {
    /* the sandbox has its files; only the host's path to them is missing */
  }
  removeLater(dir);
  return true;
}

/**
 * Gives a spare holder's directories to a conversation: its workspace renamed onto the
 * conversation's (missing, or an empty directory: rename replaces it), its state directory onto the
 * conversation's (missing). False, with everything as it was, when either is in use.
 */
export function adoptDirs(spare: HolderDirs, workspace: string, state: string): boolean {
  const dir = path.dirname(spare.state);
  if (fs.existsSync(state)) return false;
  try {
    fs.mkdirSync(path.dirname(workspace), { recursive: true, mode: 0o700 });
    fs.renameSync(spare.dirs.workspace, workspace);
  } catch {
    return false;
  }
  try {
    fs.renameSync(spare.state, state);
  } catch {
    try {
      fs.renameSync(workspace, spare.dirs.workspace);
      fs.mkdirSync(workspace, { mode: 0o700 });
    } catch {
      /* the spare's workspace stays the conversation's: the spare is not reused */
    }
    return false;
  }
  spare.dirs = plainDirs(workspace, state);
  spare.state = state;
  removeLater(dir);
  return true;
}

/**
 * More top-level entries than this (in the workspace, or one state directory) and a returning
 * conversation starts a holder of its own: the moves are synchronous, and 2,000 renames took 40 ms
 * on the 2-core machine (load 4), a fair part of what a holder's start costs it.
 */
const MOVE_MAX_ENTRIES = 2000;

/**
 * Gives a spare holder's directories to a conversation whose workspace and state directory exist
 * with content (its sandbox was closed while idle, evicted, or the daemon restarted): their
 * top-level entries are renamed into the spare's directories (the very inodes its holder has
 * mounted), the directories' modes copied, then the spare's directories are put at the
 * conversation's paths in place of the emptied ones. Same filesystem, one rename per top-level
 * entry, nothing copied.
 *
 * The workspace's contents are the agent's: rename(2) does not follow the last component of either
 * path (a symlink moves as the link), and every other component is the daemon's (the workspace root,
 * the conversation's directory, `.sandbox/`, the state directories — mount sources, which nothing
 * inside a sandbox can rename or replace; and no sandbox of the conversation runs: mayMoveInto).
 * The emptied workspace is replaced by a rename, which fails unless it is still empty: nothing
 * written meanwhile can be lost. 'refused', with everything moved back, when any step fails;
 * 'stuck' when moving back failed too (the spare then holds some of the conversation's files).
 */
export function adoptWithContents(
  spare: HolderDirs,
  workspace: string,
  state: string,
  /** Names in /tmp that are mount points bwrap made (a SANDBOX_RO_BINDS directory under /tmp): in both, neither moved. */
  tmpMounts: ReadonlySet<string> = new Set(),
): 'adopted' | 'refused' | 'stuck' {
  const dir = path.dirname(spare.state);
  const undo: (() => void)[] = [];
  // modes are copied last: a directory that is moved needs write permission on itself
  const modes: [string, number][] = [];
  /** The entries of `from` renamed into `to` (empty but for `skip`); `from`'s mode is `to`'s once it is at `from`'s path. */
  const moveInto = (from: string, to: string, skip: ReadonlySet<string> = new Set()) => {
    const a = fs.lstatSync(from);
    const b = fs.lstatSync(to);
    if (!a.isDirectory() || a.dev !== b.dev) throw new Error('not a directory on the same filesystem');
    // names as bytes: an agent's name need not be UTF-8
    const names = fs.readdirSync(from, { encoding: 'buffer' }).filter((n) => !skip.has(n.toString('latin1')));
    if (names.length > MOVE_MAX_ENTRIES || fs.readdirSync(to).some((n) => !skip.has(n))) throw new Error('too many entries');
    const at = (dir: string, name: Buffer) => Buffer.concat([Buffer.from(`${dir}/`), name]);
    for (const name of names) {
      fs.renameSync(at(from, name), at(to, name));
      undo.push(() => fs.renameSync(at(to, name), at(from, name)));
    }
    if ((a.mode & 0o7777) !== (b.mode & 0o7777)) modes.push([from, a.mode & 0o7777]);
  };
  try {
    moveInto(workspace, spare.dirs.workspace);
    const stateThere = fs.existsSync(state);
    // (nothing but the state directories is ever made there: anything else stays where it is)
    if (stateThere && fs.readdirSync(state).some((n) => !STATE_DIRS.includes(n))) throw new Error('unknown entries');
    if (stateThere) {
      for (const d of STATE_DIRS)
        if (fs.existsSync(path.join(state, d))) moveInto(path.join(state, d), path.join(spare.state, d), d === 'tmp' ? tmpMounts : undefined);
    }
    fs.renameSync(spare.dirs.workspace, workspace);
    undo.push(() => {
      fs.renameSync(workspace, spare.dirs.workspace);
      fs.mkdirSync(workspace, { mode: 0o700 });
    });
    // the emptied state directory goes with the spare's (removed below)
    if (stateThere) {
      fs.renameSync(state, path.join(dir, 'emptied-state'));
      undo.push(() => fs.renameSync(path.join(dir, 'emptied-state'), state));
    }
    fs.renameSync(spare.state, state);
  } catch {
    for (const step of undo.reverse()) {
      try {
        step();
      } catch {
        return 'stuck';
      }
    }
    return 'refused';
  }
  spare.dirs = plainDirs(workspace, state);
  spare.state = state;
  for (const [d, mode] of modes) {
    try {
      fs.chmodSync(d, mode);
    } catch {
      /* the mode the spare's directory had (0700, or 0711) */
    }
  }
  removeLater(dir);
  return 'adopted';
}

/** The adopted spare's emptied directory goes off the conversation's path (a removal takes ms under load). */
function removeLater(dir: string): void {
  fs.promises.rm(dir, { recursive: true, force: true }).catch(() => {
    /* removeSpares, at the next start */
  });
}

/**
 * Removes spare holders' directories under `dir`: `stale`, those of daemons that are gone (a crash leaves
 * them; at a start); `own`, what is left of this daemon's (a stop, once their disks are unmounted).
 */
export function removeSpares(dir: string, whose: 'stale' | 'own'): void {
  let names: string[];
  try {
    names = fs.readdirSync(dir);
  } catch {
    return;
  }
  for (const name of names) {
    const m = /^\.spare-(\d+)-\d+$/.exec(name);
    if (!m) continue;
    const pid = Number(m[1]);
    if (whose === 'own' ? pid !== process.pid : pid === process.pid || isAlive(pid)) continue;
    try {
      fs.rmSync(path.join(dir, name), { recursive: true, force: true });
    } catch {
      /* a stale one at the next start */
    }
  }
}
