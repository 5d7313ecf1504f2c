/**
 * The daemon's side of a conversation's file service (file-helper.mjs, which runs inside the
 * conversation's sandbox): every file operation for the conversation is a request on a pipe, so
 * the daemon never opens, lists, creates or removes a workspace path on the host, and no request
 * can block a thread of the daemon (it waits for a frame, with a deadline).
 *
 * The helper is not trusted: a frame larger than the request allows ends the channel, a malformed
 * one too, and a request that does not finish within its deadline ends it (the helper is killed;
 * the next request starts the conversation's sandbox again).
 */
import type { PathView } from './path-view.js';
import type { Readable, Writable } from 'node:stream';

/** What the service reports of a path (symlinks followed). */
export interface FileInfo {
  type: 'file' | 'dir' | 'symlink' | 'fifo' | 'socket' | 'char' | 'block' | 'other';
  size: number;
  mode: number;
  mtimeMs: number;
}

export interface ListEntry {
  /** The path as the conversation sees it. */
  path: string;
  dir: boolean;
}

export interface Listing {
  entries: ListEntry[];
  /** Hidden names at the first level, left out. */
  hidden: number;
  /** Stopped at the entry or time limit. */
  truncated: boolean;
}

/**
 * A conversation's files, by the paths its processes see (`/workspace/…` in a sandbox, the host
 * path of the workspace without one). Errors are FileOpErrors.
 */
export interface WorkspaceFiles {
  /** The workspace as the conversation sees it. */
  readonly root: string;
  /** `p` as the conversation sees it (a host path of the workspace is translated; nothing is resolved). */
  visible(p: string): string;
  /** null when the path does not exist. */
  stat(p: string): Promise<FileInfo | null>;
  /** The path with its links resolved (inside the workspace, else an OUTSIDE error). */
  realpath(p: string): Promise<string>;
  /** A regular file's bytes; TOO_LARGE beyond `maxBytes`. */
  read(p: string, maxBytes: number): Promise<Buffer>;
  /** A regular file's first `maxBytes` bytes and its whole size. */
  head(p: string, maxBytes: number): Promise<{ data: Buffer; size: number }>;
  /** `read`, or, when the path is a directory, its listing (`list`'s): one request for a view. */
  readOrList(p: string, maxBytes: number, list: { depth?: number; max?: number; hidden?: boolean }): Promise<{ data: Buffer } | { listing: Listing }>;
  /** `exclusive`: must not exist; `create`: made when missing; `existing`: must exist. Never truncates before the checks. */
  write(p: string, data: string | Uint8Array, opts: { mode: 'exclusive' | 'create' | 'existing'; mkdirs?: boolean }): Promise<void>;
  /** Removes a file or a link (a directory is refused); false when there was nothing. */
  remove(p: string): Promise<boolean>;
  mkdirs(p: string): Promise<void>;
  list(p: string, opts?: { depth?: number; max?: number; hidden?: boolean }): Promise<Listing>;
  /** Bytes of disk the given directories use (as the conversation sees them). */
  usage(paths: string[]): Promise<{ bytes: number; files: number; complete: boolean }>;
  /** Empties a directory (it stays). */
  clear(p: string): Promise<void>;
}

export type FileOpCode =
  | 'ENOENT'
  | 'ENOTDIR'
  | 'EISDIR'
  | 'EEXIST'
  | 'EACCES'
  | 'EPERM'
  | 'ELOOP'
  | 'EINVAL'
  | 'ENOSPC'
  | 'EDQUOT'
  | 'EROFS'
  | 'OUTSIDE'
  | 'NOT_REGULAR'
  | 'TOO_LARGE'
  | 'TIMEOUT'
  | 'UNAVAILABLE'
  | 'EIO';

export class FileOpError extends Error {
  override name = 'FileOpError';
  constructor(
    readonly code: FileOpCode,
    message: string,
    /** NOT_REGULAR: what the path is instead; TOO_LARGE: the file's size. */
    readonly detail: { type?: FileInfo['type']; size?: number } = {},
  ) {
    super(message);
  }
}

/** The largest header the daemon accepts (a listing travels in it); data is bounded by what each request asks for. */
const MAX_HEADER = 8 * 1024 * 1024;
/** A request the service has not answered by then ends the channel. */
export const FILE_OP_TIMEOUT_MS = 30_000;

const KNOWN_CODES = new Set<string>([
  'ENOENT',
  'ENOTDIR',
  'EISDIR',
  'EEXIST',
  'EACCES',
  'EPERM',
  'ELOOP',
  'EINVAL',
  'ENOSPC',
  'EDQUOT',
  'EROFS',
  'OUTSIDE',
  'NOT_REGULAR',
  'TOO_LARGE',
]);

interface Pending {
  id: number;
  maxData: number;
  resolve(v: { header: Record<string, unknown>; data: Buffer }): void;
  reject(e: Error): void;
  timer: NodeJS.Timeout;
}

/**
 * The framed request/response pipe to one running file service. `onBroken` is called once when
 * the channel can no longer be used (the service exited, lied about a size, or timed out); the
 * owner then kills it.
 */
export class FileChannel {
  private nextId = 1;
  private readonly queue: Pending[] = [];
  private buf: Buffer = Buffer.alloc(0);
  private broken: string | null = null;
  /** Resolves with the first frame (the service is ready), rejects when it ends before. */
  readonly ready: Promise<void>;
  private readyResolve!: () => void;
  private readyReject!: (e: Error) => void;
  private isReady = false;

  constructor(
    private readonly input: Writable,
    output: Readable,
    private readonly onBroken: (why: string) => void,
    private readonly timeoutMs = FILE_OP_TIMEOUT_MS,
  ) {
    this.ready = new Promise<void>((resolve, reject) => {
      this.readyResolve = resolve;
      this.readyReject = reject;
    });
    this.ready.catch(() => {});
    input.on('error', () => this.break('the file service is gone'));
    output.on('data', (chunk: Buffer) => this.onData(chunk));
    output.on('end', () => this.break('the file service ended'));
    output.on('error', () => this.break('the file service ended'));
  }

  get usable(): boolean {
    return this.broken === null;
  }

  /** Sends one request; `maxData`: the most data bytes its answer may carry. */
  request(header: Record<string, unknown>, data: Uint8Array | null, maxData = 0): Promise<{ header: Record<string, unknown>; data: Buffer }> {
    if (this.broken) return Promise.reject(new FileOpError('UNAVAILABLE', this.broken));
    const id = this.nextId++;
    const head = Buffer.from(JSON.stringify({ ...header, id }), 'utf8');
    const body = data ?? new Uint8Array(0);
    const pre = Buffer.allocUnsafe(8);
    pre.writeUInt32LE(head.length, 0);
    pre.writeUInt32LE(body.byteLength, 4);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(
        () => this.break(`a file operation (${String(header.op)}) did not finish within ${Math.round(this.timeoutMs / 1000)} s`, 'TIMEOUT'),
        this.timeoutMs,
      );
      timer.unref();
      this.queue.push({ id, maxData, resolve, reject, timer });
      // one write: the service reads one chunk per request (a frame split in three costs wake-ups)
      this.input.write(body.byteLength > 0 ? Buffer.concat([pre, head, body]) : Buffer.concat([pre, head]));
    });
  }

  /** Ends the channel: every request waiting gets the reason. */
  break(why: string, code: FileOpCode = 'UNAVAILABLE'): void {
    if (this.broken) return;
    this.broken = why;
    this.buf = Buffer.alloc(0);
    if (!this.isReady) this.readyReject(new Error(why));
    for (const p of this.queue.splice(0)) {
      clearTimeout(p.timer);
      p.reject(new FileOpError(code, why));
    }
    this.onBroken(why);
  }

  private onData(chunk: Buffer): void {
    if (this.broken) return;
    this.buf = this.buf.length === 0 ? chunk : Buffer.concat([this.buf, chunk]);
    while (this.buf.length >= 8 && !this.broken) {
      const hl = this.buf.readUInt32LE(0);
      const dl = this.buf.readUInt32LE(4);
      const want = this.queue[0];
      // the first frame is the ready frame; any other frame must fit what its request allows
      if (hl > MAX_HEADER || dl > (this.isReady ? (want?.maxData ?? 0) : 0)) return this.break('the file service sent a frame larger than allowed');
      if (this.buf.length < 8 + hl + dl) return;
      let header: Record<string, unknown>;
      try {
        header = JSON.parse(this.buf.subarray(8, 8 + hl).toString('utf8')) as Record<string, unknown>;
      } catch {
        return this.break('the file service sent a malformed frame');
      }
      const data = Buffer.from(this.buf.subarray(8 + hl, 8 + hl + dl));
      this.buf = this.buf.subarray(8 + hl + dl);
      if (!this.isReady) {
        this.isReady = true;
        this.readyResolve();
        continue;
      }
      if (this.queue[0]?.id !== header.id) return this.break('the file service answered out of order');
      const p = this.queue.shift()!;
      clearTimeout(p.timer);
      if (header.ok === true) p.resolve({ header, data });
      else {
        const code = typeof header.code === 'string' && KNOWN_CODES.has(header.code) ? (header.code as FileOpCode) : 'EIO';
        const d = (header.detail ?? {}) as { type?: unknown; size?: unknown };
        const detail = { ...(typeof d.type === 'string' ? { type: d.type as FileInfo['type'] } : {}), ...(typeof d.size === 'number' ? { size: d.size } : {}) };
        p.reject(new FileOpError(code, typeof header.message === 'string' ? header.message.slice(0, 2000) : 'the file operation failed', detail));
      }
    }
  }
}

/** WorkspaceFiles over a channel that the caller (re)starts: `channel()` gives a usable one. */
export class ChannelFiles implements WorkspaceFiles {
  constructor(
    readonly root: string,
    private readonly channel: () => Promise<FileChannel>,
  ) {}

  private async call(header: Record<string, unknown>, data: Uint8Array | null = null, maxData = 0) {
    const ch = await this.channel();
    return ch.request(header, data, maxData);
  }

  visible(p: string): string {
    return p;
  }

  async stat(p: string): Promise<FileInfo | null> {
    const r = await this.call({ op: 'stat', path: p });
    return (r.header.info as FileInfo | null) ?? null;
  }

  async realpath(p: string): Promise<string> {
    const r = await this.call({ op: 'realpath', path: p });
    return String(r.header.path);
  }

  async read(p: string, maxBytes: number): Promise<Buffer> {
    const r = await this.call({ op: 'read', path: p, max: maxBytes }, null, maxBytes);
    return r.data;
  }

  async readOrList(p: string, maxBytes: number, list: { depth?: number; max?: number; hidden?: boolean }): Promise<{ data: Buffer } | { listing: Listing }> {
    const r = await this.call(
      { op: 'read', path: p, max: maxBytes, list: { depth: list.depth ?? 1, max: list.max ?? 1000, hidden: !!list.hidden } },
      null,
      maxBytes,
    );
    const l = r.header.listing as Partial<Listing> | undefined;
    if (!l) return { data: r.data };
    return { listing: { entries: Array.isArray(l.entries) ? l.entries : [], hidden: Number(l.hidden) || 0, truncated: l.truncated === true } };
  }

  async head(p: string, maxBytes: number): Promise<{ data: Buffer; size: number }> {
    const r = await this.call({ op: 'read', path: p, max: maxBytes, head: true }, null, maxBytes);
    return { data: r.data, size: Number((r.header.info as FileInfo | undefined)?.size) || r.data.length };
  }

  async write(p: string, data: string | Uint8Array, opts: { mode: 'exclusive' | 'create' | 'existing'; mkdirs?: boolean }): Promise<void> {
    const bytes = typeof data === 'string' ? Buffer.from(data, 'utf8') : data;
    await this.call({ op: 'write', path: p, mode: opts.mode, mkdirs: !!opts.mkdirs }, bytes);
  }

  async remove(p: string): Promise<boolean> {
    const r = await this.call({ op: 'remove', path: p });
    return r.header.removed === true;
  }

  async mkdirs(p: string): Promise<void> {
    await this.call({ op: 'mkdirs', path: p });
  }

  async list(p: string, opts: { depth?: number; max?: number; hidden?: boolean } = {}): Promise<Listing> {
    const r = await this.call({ op: 'list', path: p, depth: opts.depth ?? 1, max: opts.max ?? 1000, hidden: !!opts.hidden });
    const entries = Array.isArray(r.header.entries) ? (r.header.entries as ListEntry[]) : [];
    return { entries, hidden: Number(r.header.hidden) || 0, truncated: r.header.truncated === true };
  }

  async usage(paths: string[]): Promise<{ bytes: number; files: number; complete: boolean }> {
    const r = await this.call({ op: 'usage', paths });
    return { bytes: Number(r.header.bytes) || 0, files: Number(r.header.files) || 0, complete: r.header.complete === true };
  }

  async clear(p: string): Promise<void> {
    await this.call({ op: 'clear', path: p });
  }
}

/**
 * Accepts host paths of the workspace too (callers that name files by the workspace's host path,
 * e.g. the side channels' clients) and translates them to what the conversation sees; answers
 * carry the conversation's paths.
 */
export function translatingFiles(inner: WorkspaceFiles, view: PathView): WorkspaceFiles {
  const t = (p: string) => view.toVisible(p);
  return {
    root: inner.root,
    visible: (p) => t(p),
    stat: (p) => inner.stat(t(p)),
    realpath: (p) => inner.realpath(t(p)),
    read: (p, max) => inner.read(t(p), max),
    head: (p, max) => inner.head(t(p), max),
    readOrList: (p, max, list) => inner.readOrList(t(p), max, list),
    write: (p, data, opts) => inner.write(t(p), data, opts),
    remove: (p) => inner.remove(t(p)),
    mkdirs: (p) => inner.mkdirs(t(p)),
    list: (p, opts) => inner.list(t(p), opts),
    usage: (paths) => inner.usage(paths.map(t)),
    clear: (p) => inner.clear(t(p)),
  };
}
