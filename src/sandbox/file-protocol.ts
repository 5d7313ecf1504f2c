/**
 * What the daemon and a conversation's file service (file-service.pl, inside its sandbox) say to
 * each other, and what the daemon accepts back. The service runs where the agent may reach it, so
 * every answer is hostile input: its size is bounded before it is read (a frame's header and data
 * have limits), its header is counted before it is parsed (src/body-shape.ts: a dense header cannot
 * cost more than a small multiple of its bytes), and every field of it is checked against the
 * answer the request asked for (types, ranges, paths). An answer that fails any of this is a
 * protocol violation: the channel ends, and with it the conversation's sandbox.
 *
 * Frames, both ways: [u32 LE header length][u32 LE data length][header JSON][data]. Every request
 * carries `id` and `dataMax` (the most data bytes its answer may carry: the service cuts a listing
 * there, and the daemon refuses a frame over it before reading it).
 */
import path from 'node:path';
import * as z from 'zod';
import type { ShapeLimits } from '../body-shape.js';

/** What the service reports of a path (symlinks followed). */
export interface FileInfo {
  type: 'file' | 'dir' | 'symlink' | 'fifo' | 'socket' | 'char' | 'block' | 'other';
  size: number;
  mode: number;
  mtimeMs: number;
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
  | 'EMFILE'
  | 'EBADF'
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

/** Codes the service may answer with; any other is EIO. */
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
  'EMFILE',
  'EBADF',
  'OUTSIDE',
  'NOT_REGULAR',
  'TOO_LARGE',
]);

/**
 * The largest header the daemon reads. Answers are a few fields (a listing travels in the data, as
 * NUL-separated entries), so 64 KiB leaves room for an error message naming a long path and little
 * else: an 8 MiB header of `[[],[],…]` once cost the daemon +198 MiB to parse.
 */
export const MAX_HEADER = 64 * 1024;
/** A header's structure: the richest answer (an error with its detail, a stat) has ~12 values, 3 deep. */
export const HEADER_SHAPE: ShapeLimits = { values: 64, depth: 4 };
/** The most data a listing may carry (its entries, NUL-separated): the service stops there (truncated). */
export const LIST_MAX_BYTES = 4 * 1024 * 1024;
/** The most a chunk of a streamed read or write carries (downloads and uploads). */
export const CHUNK_BYTES = 1024 * 1024;
/** A path as the conversation sees it (Linux's PATH_MAX). */
const MAX_PATH = 4096;

/** A violation of the protocol by the service: the channel ends with `reason` (never the service's own words). */
export class ProtocolViolation extends Error {
  override name = 'ProtocolViolation';
}

const Size = z.number().int().min(0).max(Number.MAX_SAFE_INTEGER);
const FileType = z.enum(['file', 'dir', 'symlink', 'fifo', 'socket', 'char', 'block', 'other']);
const Info = z.strictObject({ type: FileType, size: Size, mode: z.number().int().min(0).max(0o7777), mtimeMs: z.number().finite() });
const Handle = z
  .number()
  .int()
  .min(1)
  .max(2 ** 31);
const Path = z.string().min(1).max(MAX_PATH);

const answer = <S extends z.ZodRawShape>(shape: S) => z.strictObject({ id: z.number().int(), ok: z.literal(true), ...shape });

/** The answer each operation may give when it succeeds (every key checked; none more allowed). */
const ANSWERS: Record<string, z.ZodType> = {
  root: answer({}),
  stat: answer({ info: Info.nullable() }),
  realpath: answer({ path: Path }),
  read: answer({ info: Info.optional(), listing: z.strictObject({ hidden: Size, truncated: z.boolean(), count: Size }).optional() }),
  write: answer({ bytes: Size }),
  remove: answer({ removed: z.boolean() }),
  mkdirs: answer({}),
  list: answer({ hidden: Size, truncated: z.boolean(), count: Size }),
  usage: answer({ bytes: Size, files: Size, complete: z.boolean() }),
  clear: answer({}),
  open: answer({ handle: Handle, info: Info }),
  chunk: answer({}),
  create: answer({ handle: Handle }),
  append: answer({ bytes: Size }),
  commit: answer({ bytes: Size }),
  close: answer({}),
};

const Failure = z.strictObject({
  id: z.number().int(),
  ok: z.literal(false),
  code: z.string().regex(/^[A-Z][A-Z0-9_]{0,63}$/),
  message: z.string().max(10_000),
  detail: z.strictObject({ type: FileType.optional(), size: Size.optional() }).optional(),
});

const Ready = z.strictObject({ id: z.literal(0), ok: z.literal(true), ready: z.literal(true) });

/** The ready frame's header, or a violation. */
export function checkReady(header: unknown): void {
  if (!Ready.safeParse(header).success) throw new ProtocolViolation('its first frame was not the ready frame');
}

/** A success answer to `op`, checked; or a violation. */
export function checkAnswer(op: string, header: unknown): Record<string, unknown> {
  const schema = ANSWERS[op];
  if (!schema) throw new ProtocolViolation(`an answer to an unknown operation (${op.slice(0, 20)})`);
  const r = schema.safeParse(header);
  if (!r.success) throw new ProtocolViolation(`its answer to ${op} was malformed (${r.error.issues[0]?.path.join('.') || 'shape'})`);
  return r.data as Record<string, unknown>;
}

/** A failure answer as the error it stands for; or a violation. */
export function failureOf(header: unknown): FileOpError {
  const r = Failure.safeParse(header);
  if (!r.success) throw new ProtocolViolation(`a failure answer was malformed (${r.error.issues[0]?.path.join('.') || 'shape'})`);
  const f = r.data;
  const code = KNOWN_CODES.has(f.code) ? (f.code as FileOpCode) : 'EIO';
  const detail = { ...(f.detail?.type ? { type: f.detail.type } : {}), ...(f.detail?.size !== undefined ? { size: f.detail.size } : {}) };
  return new FileOpError(code, f.message.slice(0, 2000), detail);
}

/** `p` is a normalised absolute path at or under `dir` (both as the conversation sees them). */
function isUnder(dir: string, p: string): boolean {
  if (p.length > MAX_PATH || !p.startsWith('/') || p.includes('\0') || path.posix.normalize(p) !== p) return false;
  if (p === dir) return true;
  return p.startsWith(dir.endsWith('/') ? dir : `${dir}/`);
}

/** A path in an answer must be under `dir`; a violation otherwise. */
export function checkPathUnder(dir: string, p: string, what: string): string {
  if (!isUnder(dir, p)) throw new ProtocolViolation(`${what} named a path outside ${dir}`);
  return p;
}

/**
 * A listing's entries from its data: `d` or `f`, the path, NUL; at most `count` of them, each under
 * the listed directory and at most `depth` levels below it. Linear in the data's bytes.
 */
export function parseListing(data: Buffer, dir: string, count: number, max: number, depth: number): { path: string; dir: boolean }[] {
  if (count > max) throw new ProtocolViolation(`a listing had ${count} entries where at most ${max} were asked for`);
  dir = path.posix.resolve(dir);
  const entries: { path: string; dir: boolean }[] = [];
  const base = dir === '/' ? '' : dir;
  const levels = (p: string) => {
    let n = 0;
    for (let i = base.length; i < p.length; i++) if (p.charCodeAt(i) === 0x2f) n++;
    return n;
  };
  let at = 0;
  while (at < data.length) {
    const end = data.indexOf(0, at);
    if (end < 0) throw new ProtocolViolation('a listing entry was not terminated');
    const kind = data[at];
    if ((kind !== 0x64 && kind !== 0x66) || entries.length >= count) throw new ProtocolViolation('a listing entry was malformed');
    const p = data.toString('utf8', at + 1, end);
    if (p === dir || !isUnder(dir, p) || levels(p) > depth) throw new ProtocolViolation('a listing named a path outside the listed directory');
    entries.push({ path: p, dir: kind === 0x64 });
    at = end + 1;
  }
  if (entries.length !== count) throw new ProtocolViolation('a listing had fewer entries than it said');
  return entries;
}
