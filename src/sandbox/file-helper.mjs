// @ts-check
/**
 * The file service of one conversation, run INSIDE its sandbox (the holder's first process, with
 * the conversation's uid, namespaces and view, no capability): every file operation the daemon
 * does for the conversation — the file editor, uploads, downloads, the diff's current side,
 * repository instructions, replayed writes — is a request to this process. A path the agent swaps
 * for a symlink between a check and an open can only lead to what the sandbox already sees: the
 * kernel is the boundary, not a check in the daemon. (With SANDBOX=none it runs as a plain process
 * for the same protocol and bounds, confined by the checks below only.)
 *
 * Plain JavaScript with node's built-ins only, so the daemon's node runs it as it is.
 *
 * Protocol, on stdin/stdout: frames of [u32 LE header length][u32 LE data length][header JSON][data]
 * (src/sandbox/file-protocol.ts is the daemon's side of it). The first frame out says the service is
 * ready. Requests are answered in order, one at a time; each names the most data its answer may
 * carry (`dataMax`). Every operation is bounded: opens never block (O_NONBLOCK, then only regular
 * files are read or written: a FIFO, a device or a socket is refused), reads stop at the byte limit
 * the request gives, listings and walks stop at an entry, a byte and a time limit (a listing travels
 * in the data: `d` or `f`, the path, NUL). Downloads and uploads move in chunks through a handle
 * (open/chunk/close, create/append/commit), so neither side holds a whole file. What the daemon
 * receives is bounded and checked by it again (it does not trust this process).
 *
 * argv: `--root <dir>`: the workspace as this process sees it (/workspace in a sandbox); `--root-later`:
 * none yet, the first request (`root`) gives it (SANDBOX=none's service started ahead of its conversation).
 */
import fs from 'node:fs';
import path from 'node:path';
import {
  C,
  checkOpened,
  info,
  MAX_CHUNK,
  MAX_DATA,
  MAX_DIR_NAMES,
  MAX_HANDLES,
  MAX_HEADER,
  notRegular,
  OpError,
  realRoot,
  resolve,
  setRoot,
  typeOf,
} from './file-paths.mjs';

// what it creates is as private as what the conversation's shell creates (bwrap ran with 022)
process.umask(0o077);
// `--as U:G` (a root daemon's sandbox): it reads and writes as the conversation's uid and gid
// (effective ids), while its real and saved ids stay its own, which keeps the agent off it
// (src/sandbox/holder-launch.ts)
const asArg = process.argv.indexOf('--as');
if (asArg > 0) {
  const [u, g] = String(process.argv[asArg + 1])
    .split(':')
    .map(Number);
  process.setegid(/** @type {number} */ (g));
  process.seteuid(/** @type {number} */ (u));
}

const ops = {
  /** The workspace of a service started ahead of its conversation (`--root-later`), once. @param {{path: string}} h */
  root(h) {
    setRoot(h.path);
    return {};
  },

  /** @param {{path: string}} h */
  stat(h) {
    const real = resolve(h.path);
    try {
      return { info: info(fs.statSync(real)) };
    } catch (err) {
      const code = /** @type {NodeJS.ErrnoException} */ (err).code;
      if (code === 'ENOENT' || code === 'ENOTDIR') return { info: null };
      throw err;
    }
  },

  /** @param {{path: string}} h */
  realpath(h) {
    return { path: resolve(h.path) };
  },

  /**
   * A regular file's bytes, at most `max`: a larger file is TOO_LARGE, unless `head` (its first
   * `max` bytes, and its size). With `list`, a directory is listed (as `list` does) instead.
   * @param {{path: string, max: number, head?: boolean, list?: {depth?: number, max?: number, hidden?: boolean}}} h
   */
  read(h) {
    const real = resolve(h.path);
    const max = Math.max(0, Math.min(Number(h.max) || 0, MAX_DATA));
    const fd = fs.openSync(real, C.O_RDONLY | C.O_NONBLOCK | C.O_NOFOLLOW);
    try {
      checkOpened(fd, h.path);
      const st = fs.fstatSync(fd);
      // one request for "show me this": a directory is listed instead (the file editor's view)
      if (st.isDirectory() && h.list) {
        fs.closeSync(fd);
        const { data, ...listing } = ops.list({ ...h.list, path: h.path, dataMax: h.dataMax });
        return { listing, data };
      }
      if (!st.isFile()) throw notRegular(h.path, typeOf(st));
      if (h.head) {
        const buf = Buffer.allocUnsafe(Math.min(max, st.size));
        const n = buf.length > 0 ? fs.readSync(fd, buf, 0, buf.length, 0) : 0;
        return { data: buf.subarray(0, n), info: info(st) };
      }
      if (st.size > max) throw new OpError('TOO_LARGE', `The file ${h.path} has ${st.size} bytes; at most ${max} can be read.`, { size: st.size });
      // a file that grows while it is read stops at the limit too
      const buf = Buffer.allocUnsafe(Math.min(max + 1, Math.max(st.size + 1, 64 * 1024)));
      let n = 0;
      for (;;) {
        if (n === buf.length) {
          if (n > max) break;
          throw new OpError('TOO_LARGE', `The file ${h.path} grew past ${max} bytes while it was read.`);
        }
        const r = fs.readSync(fd, buf, n, buf.length - n, n);
        if (r === 0) break;
        n += r;
      }
      if (n > max) throw new OpError('TOO_LARGE', `The file ${h.path} grew past ${max} bytes while it was read.`);
      return { data: buf.subarray(0, n), info: info(st) };
    } finally {
      try {
        fs.closeSync(fd);
      } catch {
        /* closed by checkOpened */
      }
    }
  },

  /** @param {{path: string, mode: 'exclusive'|'create'|'existing', mkdirs?: boolean, fileMode?: number}} h @param {Buffer} data */
  write(h, data) {
    const real = writeTarget(h);
    const flags = C.O_WRONLY | C.O_NONBLOCK | C.O_NOFOLLOW | (h.mode === 'existing' ? 0 : C.O_CREAT) | (h.mode === 'exclusive' ? C.O_EXCL : 0);
    let created = h.mode === 'exclusive';
    if (h.mode === 'create') {
      try {
        fs.lstatSync(real);
      } catch {
        created = true;
      }
    }
    const fd = fs.openSync(real, flags, typeof h.fileMode === 'number' ? h.fileMode & 0o777 : 0o644);
    try {
      try {
        checkOpened(fd, h.path);
      } catch (err) {
        if (created) fs.rmSync(real, { force: true });
        throw err;
      }
      const st = fs.fstatSync(fd);
      if (!st.isFile()) throw notRegular(h.path, typeOf(st));
      fs.ftruncateSync(fd, 0);
      let off = 0;
      while (off < data.length) off += fs.writeSync(fd, data, off, data.length - off, off);
      return { bytes: data.length };
    } finally {
      try {
        fs.closeSync(fd);
      } catch {
        /* closed by checkOpened */
      }
    }
  },

  /** Removes a file (or a link: never what it points to); a directory is refused. @param {{path: string}} h */
  remove(h) {
    const real = resolve(path.dirname(h.path));
    const target = path.join(real, path.basename(h.path));
    let st;
    try {
      st = fs.lstatSync(target);
    } catch {
      return { removed: false };
    }
    if (st.isDirectory()) throw new OpError('EISDIR', `The path ${h.path} is a directory; it was not removed.`);
    fs.unlinkSync(target);
    return { removed: true };
  },

  /** @param {{path: string}} h */
  mkdirs(h) {
    const real = resolve(h.path);
    fs.mkdirSync(real, { recursive: true });
    resolve(h.path);
    return {};
  },

  /**
   * Entries under a directory, breadth of `depth` levels, names sorted, at most `max` entries, the
   * answer's `dataMax` bytes and `ms` milliseconds; in the data: `d` or `f`, the path, NUL. Hidden
   * names are counted (at the first level) and left out unless `hidden`.
   * @param {{path: string, depth?: number, max?: number, hidden?: boolean, ms?: number, dataMax?: number}} h
   */
  list(h) {
    const real = resolve(h.path);
    const depth = Math.max(1, Math.min(Number(h.depth) || 1, 8));
    const max = Math.max(1, Math.min(Number(h.max) || 1000, 100_000));
    const deadline = Date.now() + Math.max(10, Math.min(Number(h.ms) || 2000, 30_000));
    let budget = Math.max(0, Number(h.dataMax) || 0);
    /** @type {Buffer[]} */
    const entries = [];
    let hiddenCount = 0;
    let truncated = false;
    const st = fs.statSync(real);
    if (!st.isDirectory()) throw new OpError('ENOTDIR', `The path ${h.path} is not a directory.`);
    /** @param {string} dir @param {string} shown @param {number} level */
    const walk = (dir, shown, level) => {
      /** @type {fs.Dir} */
      let d;
      try {
        d = fs.opendirSync(dir);
      } catch {
        return;
      }
      /** @type {fs.Dirent[]} */
      const names = [];
      try {
        for (let e = d.readSync(); e !== null; e = d.readSync()) {
          // a huge directory is read up to a bound (names are sorted before they are shown)
          if (names.length >= MAX_DIR_NAMES || Date.now() > deadline) {
            truncated = true;
            break;
          }
          names.push(e);
        }
      } finally {
        d.closeSync();
      }
      names.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
      for (const e of names) {
        if (e.name.startsWith('.') && !h.hidden) {
          if (level === 1) hiddenCount++;
          continue;
        }
        if (truncated || entries.length >= max || Date.now() > deadline) {
          truncated = true;
          return;
        }
        const full = path.join(dir, e.name);
        let isDir = e.isDirectory();
        if (e.isSymbolicLink()) {
          try {
            isDir = fs.statSync(full).isDirectory();
          } catch {
            isDir = false;
          }
        }
        const shownPath = path.join(shown, e.name);
        const entry = Buffer.from(`${isDir ? 'd' : 'f'}${shownPath}\0`, 'utf8');
        if (entry.length > budget) {
          truncated = true;
          return;
        }
        budget -= entry.length;
        entries.push(entry);
        if (isDir && level < depth && !e.isSymbolicLink()) walk(full, shownPath, level + 1);
      }
    };
    walk(real, path.resolve(h.path), 1);
    return { hidden: hiddenCount, truncated, count: entries.length, data: Buffer.concat(entries) };
  },

  /**
   * Disk use of the given directories in bytes (allocated blocks; a file with several links is
   * counted once; the walk stays on each directory's file system), stopping after `ms`.
   * @param {{paths: string[], ms?: number}} h
   */
  usage(h) {
    const deadline = Date.now() + Math.max(10, Math.min(Number(h.ms) || 10_000, 60_000));
    const seen = new Set();
    let bytes = 0;
    let files = 0;
    let complete = true;
    for (const top of Array.isArray(h.paths) ? h.paths : []) {
      const dev = fs.lstatSync(top, { throwIfNoEntry: false })?.dev;
      if (dev === undefined) continue;
      /** @type {string[]} */
      const stack = [top];
      while (stack.length > 0) {
        if (Date.now() > deadline) {
          complete = false;
          break;
        }
        const p = /** @type {string} */ (stack.pop());
        let st;
        try {
          st = fs.lstatSync(p);
        } catch {
          continue;
        }
        if (st.dev !== dev) continue;
        if (st.nlink > 1 && !st.isDirectory()) {
          const key = `${st.dev}:${st.ino}`;
          if (seen.has(key)) continue;
          seen.add(key);
        }
        bytes += st.blocks * 512;
        files++;
        if (st.isDirectory()) {
          let names;
          try {
            names = fs.readdirSync(p);
          } catch {
            continue;
          }
          for (const n of names) stack.push(path.join(p, n));
        }
      }
    }
    return { bytes, files, complete };
  },

  /** Removes everything under a directory, never following a link (the directory itself stays). @param {{path: string}} h */
  clear(h) {
    const real = resolve(h.path);
    for (const name of fs.readdirSync(real)) fs.rmSync(path.join(real, name), { recursive: true, force: true });
    return {};
  },

  /** A regular file of at most `max` bytes opened for `chunk` reads (a download). @param {{path: string, max: number}} h */
  open(h) {
    const fd = fs.openSync(resolve(h.path), C.O_RDONLY | C.O_NONBLOCK | C.O_NOFOLLOW);
    checkOpened(fd, h.path);
    try {
      const st = fs.fstatSync(fd);
      if (!st.isFile()) throw notRegular(h.path, typeOf(st));
      const max = Math.max(0, Number(h.max) || 0);
      if (st.size > max) throw new OpError('TOO_LARGE', `The file ${h.path} has ${st.size} bytes; at most ${max} can be read.`, { size: st.size });
      return { handle: addHandle({ fd, pos: 0, left: st.size, tmp: null, target: '' }), info: info(st) };
    } catch (err) {
      fs.closeSync(fd);
      throw err;
    }
  },

  /**
   * The next bytes of an opened file, at most the answer's `dataMax` (none at its end, or past the size it was
   * opened with).
   * @param {{handle: number, dataMax: number}} h
   */
  chunk(h) {
    const e = handleOf(h.handle, false);
    const want = Math.min(Math.max(0, Number(h.dataMax) || 0), MAX_CHUNK, e.left);
    const buf = Buffer.allocUnsafe(want);
    const n = want > 0 ? fs.readSync(e.fd, buf, 0, want, e.pos) : 0;
    e.pos += n;
    e.left -= n;
    return { data: buf.subarray(0, n) };
  },

  /**
   * A new file next to `path` (a hidden name in the same directory), written by `append` and put in
   * place by `commit`: an upload that fails or is cut off leaves the path as it was.
   * @param {{path: string, mkdirs?: boolean}} h
   */
  create(h) {
    const real = writeTarget(h);
    const st = fs.lstatSync(real, { throwIfNoEntry: false });
    if (st?.isDirectory()) throw new OpError('EISDIR', `The path ${h.path} is a directory.`);
    if (st && !st.isFile()) throw notRegular(h.path, typeOf(st));
    const tmp = path.join(path.dirname(real), `.${path.basename(real).slice(0, 100)}.upload-${Math.random().toString(36).slice(2, 10)}`);
    const fd = fs.openSync(tmp, C.O_WRONLY | C.O_CREAT | C.O_EXCL | C.O_NOFOLLOW | C.O_NONBLOCK, 0o644);
    try {
      checkOpened(fd, h.path);
    } catch (err) {
      fs.rmSync(tmp, { force: true });
      throw err;
    }
    return { handle: addHandle({ fd, pos: 0, left: 0, tmp, target: h.path }) };
  },

  /** @param {{handle: number}} h @param {Buffer} data */
  append(h, data) {
    const e = handleOf(h.handle, true);
    let off = 0;
    while (off < data.length) off += fs.writeSync(e.fd, data, off, data.length - off, e.pos + off);
    e.pos += data.length;
    return { bytes: e.pos };
  },

  /** Puts a created file in place of its path (a regular file there is replaced, keeping its mode). @param {{handle: number}} h */
  commit(h) {
    const e = handleOf(h.handle, true);
    handles.delete(h.handle);
    const tmp = /** @type {string} */ (e.tmp);
    try {
      const real = resolve(e.target);
      // the directory may have been swapped meanwhile: the file is only ever moved within it
      if (path.dirname(real) !== path.dirname(tmp))
        throw new OpError('OUTSIDE', `The directory of ${e.target} changed while it was uploaded; it was not written.`);
      let st = null;
      try {
        st = fs.lstatSync(real);
      } catch {
        /* a new file */
      }
      if (st?.isDirectory()) throw new OpError('EISDIR', `The path ${e.target} is a directory.`);
      if (st && !st.isFile()) throw notRegular(e.target, typeOf(st));
      if (st) fs.fchmodSync(e.fd, st.mode & 0o7777);
      fs.renameSync(tmp, real);
      return { bytes: e.pos };
    } catch (err) {
      fs.rmSync(tmp, { force: true });
      throw err;
    } finally {
      fs.closeSync(e.fd);
    }
  },

  /** Ends a transfer: an opened file is closed, a created one removed. @param {{handle: number}} h */
  close(h) {
    const e = handles.get(h.handle);
    if (!e) return {};
    handles.delete(h.handle);
    fs.closeSync(e.fd);
    if (e.tmp) fs.rmSync(e.tmp, { force: true });
    return {};
  },
};

/**
 * The real path a write goes to, its parents made first when asked (then resolved again: one may have been a link).
 * @param {{path: string, mkdirs?: boolean}} h
 */
function writeTarget(h) {
  let real = resolve(h.path);
  if (h.mkdirs) {
    fs.mkdirSync(path.dirname(real), { recursive: true });
    real = resolve(h.path);
  }
  if (real === realRoot()) throw new OpError('EISDIR', `The path ${h.path} is the workspace itself.`);
  return real;
}

/** @typedef {{fd: number, pos: number, left: number, tmp: string | null, target: string}} Transfer */
/** @type {Map<number, Transfer>} */
const handles = new Map();
let nextHandle = 1;

/** @param {Transfer} t */
function addHandle(t) {
  if (handles.size < MAX_HANDLES) return (handles.set(nextHandle, t), nextHandle++);
  fs.closeSync(t.fd);
  if (t.tmp) fs.rmSync(t.tmp, { force: true });
  throw new OpError('EMFILE', `More than ${MAX_HANDLES} transfers at once in this conversation; try again when one has finished.`);
}

/** @param {unknown} n @param {boolean} writing */
function handleOf(n, writing) {
  const e = handles.get(/** @type {number} */ (n));
  if (!e || (e.tmp !== null) !== writing) throw new OpError('EBADF', "The transfer is not open (the conversation's sandbox may have restarted).");
  return e;
}

/** @param {object} header @param {Buffer} [data] */
function send(header, data = Buffer.alloc(0)) {
  const head = Buffer.from(JSON.stringify(header), 'utf8');
  const pre = Buffer.allocUnsafe(8);
  pre.writeUInt32LE(head.length, 0);
  pre.writeUInt32LE(data.length, 4);
  process.stdout.write(Buffer.concat([pre, head, data]));
}

/** @param {any} h @param {Buffer} data */
function handle(h, data) {
  const id = h?.id;
  const op = /** @type {keyof typeof ops} */ (h?.op);
  try {
    if (typeof op !== 'string' || !Object.hasOwn(ops, op)) throw new OpError('EINVAL', `unknown operation ${String(op)}`);
    const out = /** @type {any} */ (ops[op])(h, data);
    const { data: outData, ...rest } = out ?? {};
    send({ id, ok: true, ...rest }, outData);
  } catch (err) {
    const e = /** @type {NodeJS.ErrnoException} */ (err);
    const code = typeof e?.code === 'string' && /^[A-Z][A-Z0-9_]{0,63}$/.test(e.code) ? e.code : 'EIO';
    // messages of system errors name the path as the request gave it, never a resolved one
    const message = (err instanceof OpError ? err.message : `${code} (${typeof h?.path === 'string' ? h.path : ''})`).slice(0, 8000);
    send({ id, ok: false, code, message, ...(err instanceof OpError && err.detail ? { detail: err.detail } : {}) });
  }
}

// received chunks are kept in a list and a frame is joined once, when it is complete (joining each
// chunk to the ones before was quadratic in a frame's size)
/** @type {Buffer[]} */
let chunks = [];
let have = 0;
/** @type {{hl: number, dl: number} | null} */
let frame = null;
process.stdin.on('data', (chunk) => {
  chunks.push(chunk);
  have += chunk.length;
  for (;;) {
    if (!frame) {
      if (have < 8) return;
      const all = chunks.length === 1 ? chunks[0] : Buffer.concat(chunks);
      frame = { hl: all.readUInt32LE(0), dl: all.readUInt32LE(4) };
      if (frame.hl > MAX_HEADER || frame.dl > MAX_DATA) process.exit(2);
      chunks = [all];
    }
    const need = 8 + frame.hl + frame.dl;
    if (have < need) return;
    const all = chunks.length === 1 ? chunks[0] : Buffer.concat(chunks, have);
    let header;
    try {
      header = JSON.parse(all.toString('utf8', 8, 8 + frame.hl));
    } catch {
      process.exit(2);
    }
    const data = all.subarray(8 + frame.hl, need);
    chunks = have > need ? [all.subarray(need)] : [];
    have -= need;
    frame = null;
    handle(header, data);
  }
});
// the daemon's end closed (it exited): so does the sandbox
process.stdin.on('end', () => process.exit(0));
process.stdout.on('error', () => process.exit(0));
send({ id: 0, ok: true, ready: true });
