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
 * Protocol, on stdin/stdout: frames of [u32 LE header length][u32 LE data length][header JSON][data].
 * The first frame out says the service is ready. Requests are answered in order, one at a time.
 * Every operation is bounded: opens never block (O_NONBLOCK, then only regular files are read or
 * written: a FIFO, a device or a socket is refused), reads stop at the byte limit the request
 * gives, listings and walks stop at an entry and a time limit. What the daemon receives is bounded
 * by it again (it does not trust this process).
 *
 * argv: `--root <dir>`: the workspace as this process sees it (/workspace in a sandbox).
 */
import fs from 'node:fs';
import path from 'node:path';

// what it creates is as private as what the conversation's shell creates (bwrap ran with 022)
process.umask(0o077);
const rootArg = process.argv.indexOf('--root');
const ROOT = path.resolve(rootArg > 0 ? (process.argv[rootArg + 1] ?? '/workspace') : '/workspace');
const C = fs.constants;
const MAX_HEADER = 1 << 20;
const MAX_DATA = 256 << 20;
/** Names read from one directory at most (a listing sorts them first). */
const MAX_DIR_NAMES = 100_000;

class OpError extends Error {
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
function realRoot() {
  try {
    return fs.realpathSync(ROOT);
  } catch {
    throw new OpError('ENOENT', `The workspace ${ROOT} does not exist yet.`);
  }
}

/**
 * The path with every existing component resolved; refused when it is outside the workspace
 * before or after resolution (the agent is told so: "outside the workspace", in its own terms).
 * @param {string} p
 */
function resolve(p) {
  if (typeof p !== 'string' || !path.isAbsolute(p)) throw new OpError('EINVAL', `The path ${String(p)} is not absolute.`);
  const abs = path.resolve(p);
  if (inside(ROOT, abs) === null) throw new OpError('OUTSIDE', `The path ${p} is outside the workspace: only files under ${ROOT} can be read or written.`);
  const base = realRoot();
  const rel = inside(ROOT, abs) ?? '';
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
        let link = false;
        try {
          link = fs.lstatSync(next).isSymbolicLink();
        } catch {
          /* really missing */
        }
        if (link) throw outside(p, parts.slice(0, i + 1));
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
  const at = path.join(ROOT, ...parts);
  return new OpError(
    'OUTSIDE',
    `The path ${p} leads outside the workspace (${at} is a symbolic link pointing outside ${ROOT}); it was not opened. Only files inside the workspace can be read or written.`,
  );
}

/** The file an fd names must still be inside the workspace (a directory swapped for a link between resolve and open). @param {number} fd @param {string} p */
function checkOpened(fd, p) {
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
function typeOf(st) {
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
function info(st) {
  return { type: typeOf(st), size: st.size, mode: st.mode & 0o7777, mtimeMs: st.mtimeMs };
}

/** @param {string} p @param {string} type */
function notRegular(p, type) {
  return new OpError(
    'NOT_REGULAR',
    `The path ${p} is not a regular file (it is a ${type === 'dir' ? 'directory' : type === 'fifo' ? 'named pipe (FIFO)' : type === 'char' || type === 'block' ? 'device' : type}); only regular files can be read or written.`,
    { type },
  );
}

const ops = {
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
        return { listing: ops.list({ ...h.list, path: h.path }) };
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
    let real = resolve(h.path);
    if (h.mkdirs) {
      fs.mkdirSync(path.dirname(real), { recursive: true });
      // the parents exist now: resolve again (one of them may have been a link)
      real = resolve(h.path);
    }
    if (real === realRoot()) throw new OpError('EISDIR', `The path ${h.path} is the workspace itself.`);
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
   * Entries under a directory, breadth of `depth` levels, names sorted, at most `max` entries and
   * `ms` milliseconds. Hidden names are counted (at the first level) and left out unless `hidden`.
   * @param {{path: string, depth?: number, max?: number, hidden?: boolean, ms?: number}} h
   */
  list(h) {
    const real = resolve(h.path);
    const depth = Math.max(1, Math.min(Number(h.depth) || 1, 8));
    const max = Math.max(1, Math.min(Number(h.max) || 1000, 100_000));
    const deadline = Date.now() + Math.max(10, Math.min(Number(h.ms) || 2000, 30_000));
    /** @type {{path: string, dir: boolean}[]} */
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
        if (entries.length >= max || Date.now() > deadline) {
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
        entries.push({ path: shownPath, dir: isDir });
        if (isDir && level < depth && !e.isSymbolicLink()) walk(full, shownPath, level + 1);
      }
    };
    walk(real, path.resolve(h.path), 1);
    return { entries, hidden: hiddenCount, truncated };
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
    for (const top of h.paths ?? []) {
      let dev;
      try {
        dev = fs.lstatSync(top).dev;
      } catch {
        continue;
      }
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
};

/** @param {object} header @param {Buffer} [data] */
function send(header, data) {
  const head = Buffer.from(JSON.stringify(header), 'utf8');
  const d = data ?? Buffer.alloc(0);
  const pre = Buffer.allocUnsafe(8);
  pre.writeUInt32LE(head.length, 0);
  pre.writeUInt32LE(d.length, 4);
  process.stdout.write(d.length > 0 ? Buffer.concat([pre, head, d]) : Buffer.concat([pre, head]));
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
    const code = typeof e?.code === 'string' ? e.code : 'EIO';
    // messages of system errors name the path as the request gave it, never a resolved one
    const message = err instanceof OpError ? err.message : `${code} (${h?.path ?? ''})`;
    send({ id, ok: false, code, message, ...(err instanceof OpError && err.detail ? { detail: err.detail } : {}) });
  }
}

let pending = Buffer.alloc(0);
process.stdin.on('data', (chunk) => {
  pending = pending.length === 0 ? chunk : Buffer.concat([pending, chunk]);
  while (pending.length >= 8) {
    const hl = pending.readUInt32LE(0);
    const dl = pending.readUInt32LE(4);
    if (hl > MAX_HEADER || dl > MAX_DATA) process.exit(2);
    if (pending.length < 8 + hl + dl) break;
    let header;
    try {
      header = JSON.parse(pending.subarray(8, 8 + hl).toString('utf8'));
    } catch {
      process.exit(2);
    }
    const data = Buffer.from(pending.subarray(8 + hl, 8 + hl + dl));
    pending = pending.subarray(8 + hl + dl);
    handle(header, data);
  }
});
// the daemon's end closed (it exited): so does the sandbox
process.stdin.on('end', () => process.exit(0));
process.stdout.on('error', () => process.exit(0));
send({ id: 0, ok: true, ready: true });
