// @ts-check
/**
 * The file service's paths (file-helper.mjs, which runs INSIDE the conversation's sandbox, is the
 * service): the workspace it serves (`--root`), its bounds, its errors, and how a request's path is
 * resolved and kept inside the workspace. Plain JavaScript with node's built-ins only, beside
 * file-helper.mjs wherever it is (the sandbox binds both, scripts/build.mjs copies both).
 */
import fs from 'node:fs';
import path from 'node:path';
const rootArg = process.argv.indexOf('--root');
/**
 * The workspace: given at the start (`--root`, /workspace when absent), or, for a service started
 * ahead of its conversation (`--root-later`: SANDBOX=none's spare), by its first request (`setRoot`),
 * once. Nothing is served before.
 * @type {string | null}
 */
let ROOT = rootArg > 0 ? path.resolve(process.argv[rootArg + 1] ?? '/workspace') : process.argv.includes('--root-later') ? null : '/workspace';

/** The workspace of a service started with `--root-later`: an absolute path, set once. @param {unknown} dir */
export function setRoot(dir) {
  if (ROOT !== null) throw new OpError('EINVAL', 'The workspace of this file service is set already.');
  if (typeof dir !== 'string' || !path.isAbsolute(dir) || dir.includes('\0')) throw new OpError('EINVAL', 'The workspace must be an absolute path.');
  ROOT = path.resolve(dir);
}

/** The workspace as given; refused until it is. */
function root() {
  if (ROOT === null) throw new OpError('ENOENT', 'This file service has no workspace yet.');
  return ROOT;
}
export const C = fs.constants;
export const MAX_HEADER = 1 << 20;
export const MAX_DATA = 256 << 20;
/** A chunk of a streamed read or write at most (the daemon asks for 1 MiB). */
export const MAX_CHUNK = 4 << 20;
/** Files open for streamed transfers at once. */
export const MAX_HANDLES = 32;
/** Names read from one directory at most (a listing sorts them first). */
export const MAX_DIR_NAMES = 100_000;

export class OpError extends Error {
  /** @param {string} code @param {string} message @param {{type?: string, size?: number}} [detail] what the daemon may tell apart */
  constructor(code, message, detail) {
    super(message);
    this.code = code;
    this.detail = detail;
  }
}

/** `child` relative to `root` ('' for root itself), or null when outside. @param {string} root @param {string} child */
function inside(root, child) {
  if (child === root) return '';
  const rel = path.relative(root, child);
  if (rel === '' || rel.startsWith('..') || path.isAbsolute(rel)) return null;
  return rel;
}

/** The workspace's real path (it is a mount point in a sandbox; a directory of the host without). */
export function realRoot() {
  try {
    return fs.realpathSync(root());
  } catch (err) {
    if (err instanceof OpError) throw err;
    throw new OpError('ENOENT', `The workspace ${ROOT} does not exist yet.`);
  }
}

/**
 * The path with every existing component resolved; refused when it is outside the workspace
 * before or after resolution (the agent is told so: "outside the workspace", in its own terms).
 * @param {string} p
 */
export function resolve(p) {
  if (typeof p !== 'string' || !path.isAbsolute(p)) throw new OpError('EINVAL', `The path ${String(p)} is not absolute.`);
  const abs = path.resolve(p);
  const top = root();
  if (inside(top, abs) === null) throw new OpError('OUTSIDE', `The path ${p} is outside the workspace: only files under ${top} can be read or written.`);
  const base = realRoot();
  const rel = inside(top, abs) ?? '';
  const parts = rel === '' ? [] : rel.split(path.sep);
  let real = base;
  let i = 0;
  for (; i < parts.length; i++) {
    const next = path.join(real, /** @type {string} */ (parts[i]));
    let resolved;
    try {
      resolved = fs.realpathSync(next);
    } catch (err) {
      const code = /** @type {NodeJS.ErrnoException} */ (err).code;
      if (code === 'ENOENT') {
        // a link whose target is missing is refused as a link, not taken as a name to create
        if (fs.lstatSync(next, { throwIfNoEntry: false })?.isSymbolicLink()) throw outside(p, parts.slice(0, i + 1));
        break;
      }
      if (code === 'ENOTDIR') break;
      throw err;
    }
    if (inside(base, resolved) === null) throw outside(p, parts.slice(0, i + 1));
    real = resolved;
  }
  return path.join(real, ...parts.slice(i));
}

/** @param {string} p @param {string[]} parts */
function outside(p, parts) {
  const top = root();
  const at = path.join(top, ...parts);
  return new OpError(
    'OUTSIDE',
    `The path ${p} leads outside the workspace (${at} is a symbolic link pointing outside ${top}); it was not opened. ` +
      'Only files inside the workspace can be read or written.',
  );
}

/** The file an fd names must still be inside the workspace (a directory swapped for a link between resolve and open). @param {number} fd @param {string} p */
export function checkOpened(fd, p) {
  let real;
  try {
    real = fs.readlinkSync(`/proc/self/fd/${fd}`);
  } catch {
    return;
  }
  if (inside(realRoot(), real) === null) {
    fs.closeSync(fd);
    throw new OpError('OUTSIDE', `The path ${p} led outside the workspace while it was opened; it was not read or written.`);
  }
}

/** @param {fs.Stats} st */
export function typeOf(st) {
  if (st.isFile()) return 'file';
  if (st.isDirectory()) return 'dir';
  if (st.isSymbolicLink()) return 'symlink';
  if (st.isFIFO()) return 'fifo';
  if (st.isSocket()) return 'socket';
  if (st.isCharacterDevice()) return 'char';
  if (st.isBlockDevice()) return 'block';
  return 'other';
}

/** @param {fs.Stats} st */
export function info(st) {
  return { type: typeOf(st), size: st.size, mode: st.mode & 0o7777, mtimeMs: st.mtimeMs };
}

/** @param {string} p @param {string} type */
export function notRegular(p, type) {
  const kind = type === 'dir' ? 'directory' : type === 'fifo' ? 'named pipe (FIFO)' : type === 'char' || type === 'block' ? 'device' : type;
  return new OpError('NOT_REGULAR', `The path ${p} is not a regular file (it is a ${kind}); only regular files can be read or written.`, { type });
}
