/**
 * The daemon's side of a conversation's file service (file-service.pl, which runs inside the
 * conversation's sandbox): every file operation for the conversation is a request on a pipe, so
 * the daemon never opens, lists, creates or removes a workspace path on the host, and no request
 * can block a thread of the daemon (it waits for a frame, with a deadline).
 *
 * The service is not trusted (file-channel.ts reads its frames, file-protocol.ts says what it may
 * answer): anything malformed, out of order, oversized or late ends the channel and the sandbox
 * with it; the next request starts the conversation's sandbox again.
 */
import type { PathView } from './path-view.js';
import type { FileChannel, Answer } from './file-channel.js';
import { CHUNK_BYTES, checkPathUnder, FileOpError, LIST_MAX_BYTES, parseListing, ProtocolViolation, type FileInfo } from './file-protocol.js';

export { FileChannel } from './file-channel.js';
export { FileOpError, type FileInfo } from './file-protocol.js';

interface ListEntry {
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
  /** A regular file opened for reading in chunks (downloads); TOO_LARGE beyond `maxBytes`. Close it. */
  openRead(p: string, maxBytes: number): Promise<FileReader>;
  /** A new file written in chunks, put in place of `p` only by `commit` (uploads). Commit or abort it. */
  openWrite(p: string, opts: { mkdirs?: boolean }): Promise<FileWriter>;
}

/** A file being read in chunks: its size when opened, and its bytes from the start. */
export interface FileReader {
  readonly info: FileInfo;
  /** The next bytes (at most `max`, at most CHUNK_BYTES); empty at the end of the file. */
  read(max?: number): Promise<Buffer>;
  close(): Promise<void>;
}

/** A file being written in chunks; nothing is in place until `commit`. */
export interface FileWriter {
  write(data: Uint8Array): Promise<void>;
  /** Puts the file in place of the path (a regular file there is replaced, keeping its mode); its size. */
  commit(): Promise<number>;
  /** Drops what was written (nothing changes at the path). */
  abort(): Promise<void>;
}

/** WorkspaceFiles over a channel that the caller (re)starts: `channel()` gives a usable one. */
export class ChannelFiles implements WorkspaceFiles {
  constructor(
    readonly root: string,
    private readonly channel: () => Promise<FileChannel>,
  ) {}

  private async call(header: Record<string, unknown>, data: Uint8Array | null = null, maxData = 0, check?: (a: Answer) => void) {
    const ch = await this.channel();
    return ch.request(header, data, maxData, check);
  }

  visible(p: string): string {
    return p;
  }

  async stat(p: string): Promise<FileInfo | null> {
    const r = await this.call({ op: 'stat', path: p });
    return (r.header.info as FileInfo | null) ?? null;
  }

  async realpath(p: string): Promise<string> {
    const r = await this.call({ op: 'realpath', path: p }, null, 0, (a) => checkPathUnder(this.root, a.header.path as string, 'realpath'));
    return r.header.path as string;
  }

  async read(p: string, maxBytes: number): Promise<Buffer> {
    const r = await this.call({ op: 'read', path: p, max: maxBytes }, null, maxBytes, noListing);
    return r.data;
  }

  async readOrList(p: string, maxBytes: number, list: { depth?: number; max?: number; hidden?: boolean }): Promise<{ data: Buffer } | { listing: Listing }> {
    const depth = list.depth ?? 1;
    const max = list.max ?? 1000;
    let listing: Listing | null = null;
    const r = await this.call({ op: 'read', path: p, max: maxBytes, list: { depth, max, hidden: !!list.hidden } }, null, Math.max(maxBytes, 0), (a) => {
      const l = a.header.listing as { hidden: number; truncated: boolean; count: number } | undefined;
      if (l) listing = { entries: parseListing(a.data, p, l.count, max, depth), hidden: l.hidden, truncated: l.truncated };
    });
    return listing ? { listing } : { data: r.data };
  }

  async head(p: string, maxBytes: number): Promise<{ data: Buffer; size: number }> {
    const r = await this.call({ op: 'read', path: p, max: maxBytes, head: true }, null, maxBytes, (a) => {
      noListing(a);
      const info = a.header.info as FileInfo | undefined;
      if (!info || a.data.length > info.size) throw new ProtocolViolation('its answer to a head read was malformed');
    });
    return { data: r.data, size: (r.header.info as FileInfo).size };
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
    const depth = opts.depth ?? 1;
    const max = opts.max ?? 1000;
    let entries: ListEntry[] = [];
    const r = await this.call({ op: 'list', path: p, depth, max, hidden: !!opts.hidden }, null, LIST_MAX_BYTES, (a) => {
      entries = parseListing(a.data, p, a.header.count as number, max, depth);
    });
    return { entries, hidden: r.header.hidden as number, truncated: r.header.truncated as boolean };
  }

  async usage(paths: string[]): Promise<{ bytes: number; files: number; complete: boolean }> {
    const r = await this.call({ op: 'usage', paths });
    return { bytes: r.header.bytes as number, files: r.header.files as number, complete: r.header.complete as boolean };
  }

  async clear(p: string): Promise<void> {
    await this.call({ op: 'clear', path: p });
  }

  async openRead(p: string, maxBytes: number): Promise<FileReader> {
    const ch = await this.channel();
    const r = await ch.request({ op: 'open', path: p, max: maxBytes }, null);
    const info = r.header.info as FileInfo;
    const handle = r.header.handle as number;
    if (info.type !== 'file' || info.size > maxBytes) {
      ch.fault('opened what it should have refused');
      throw new FileOpError('UNAVAILABLE', "the conversation's file service failed");
    }
    let closed = false;
    return {
      info,
      // the same channel throughout: a service that was restarted meanwhile does not know the handle
      read: async (max = CHUNK_BYTES) => (await ch.request({ op: 'chunk', handle }, null, Math.min(max, CHUNK_BYTES))).data,
      close: async () => {
        if (closed || !ch.usable) return;
        closed = true;
        await ch.request({ op: 'close', handle }, null).catch(() => {});
      },
    };
  }

  async openWrite(p: string, opts: { mkdirs?: boolean }): Promise<FileWriter> {
    const ch = await this.channel();
    const r = await ch.request({ op: 'create', path: p, mkdirs: !!opts.mkdirs }, null);
    const handle = r.header.handle as number;
    let done = false;
    // the last append sent: the next is sent before it is answered (the service writes them in order),
    // so at most two chunks wait for the service, whatever the file's size
    let last: Promise<unknown> = Promise.resolve();
    return {
      write: async (data) => {
        for (let at = 0; at < data.byteLength; at += CHUNK_BYTES) {
          const before = last;
          last = ch.request({ op: 'append', handle }, data.subarray(at, Math.min(at + CHUNK_BYTES, data.byteLength)));
          last.catch(() => {});
          await before;
        }
      },
      commit: async () => {
        await last;
        done = true;
        return (await ch.request({ op: 'commit', handle }, null)).header.bytes as number;
      },
      abort: async () => {
        await last.catch(() => {});
        if (done || !ch.usable) return;
        done = true;
        await ch.request({ op: 'close', handle }, null).catch(() => {});
      },
    };
  }
}

/** A read of a file's bytes must not answer with a listing. */
function noListing(a: Answer): void {
  if (a.header.listing !== undefined) throw new ProtocolViolation('it answered a read with a listing');
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
    openRead: (p, max) => inner.openRead(t(p), max),
    openWrite: (p, opts) => inner.openWrite(t(p), opts),
  };
}
