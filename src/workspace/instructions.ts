/**
 * Repository instructions read from the cloned repository (the workspace root):
 *
 * - `AGENTS.md` at the root, any case (`agents.md`, `Agents.md`; `AGENT.md` also accepted),
 *   name `agents`: always on;
 * - `.cursorrules` (name `cursorrules`) and the legacy `.openhands_instructions`
 *   (name `openhands_instructions`): always on;
 * - `.openhands/microagents/**\/*.md` (README.md excluded) with optional YAML front matter
 *   (`name`, `type: repo|knowledge|task`, `triggers`): `type: repo` or no triggers → always on;
 *   triggers → triggered (`type: task` also gets the trigger `/<name>`). No front matter → always.
 *
 * The repository is untrusted input: every file is read through the conversation's file service,
 * inside its sandbox (a link can only lead to what the sandbox sees, and one leading out of the
 * workspace is ignored), each file is cut at `maxBytes` (64 KiB) with a note, binary files are
 * skipped, and at most `maxFiles` microagent files are read. Problems are reported in `warnings`
 * instead of failing the load.
 */
import { posix } from 'node:path';
import { FileOpError, type WorkspaceFiles } from '../sandbox/files.js';
import { parseFrontMatter, type FrontMatterValue } from './front-matter.js';

interface AlwaysInstruction {
  name: string;
  /** Path relative to the repository root. */
  source: string;
  content: string;
}

export interface TriggeredInstruction {
  name: string;
  source: string;
  triggers: string[];
  content: string;
}

export interface RepoInstructions {
  always: AlwaysInstruction[];
  triggered: TriggeredInstruction[];
  warnings: string[];
}

interface LoadInstructionsOptions {
  maxBytes?: number;
  maxFiles?: number;
  /** Files asked for before the one being handled is answered (READ_AHEAD; 1: one request at a time). */
  readAhead?: number;
}

const DEFAULT_MAX_INSTRUCTION_BYTES = 64 * 1024;
const DEFAULT_MAX_FILES = 200;
const MAX_DEPTH = 8;

/** Cuts a buffer at `max` bytes without splitting a UTF-8 sequence. */
function utf8Prefix(buf: Buffer, max: number): Buffer {
  if (buf.length <= max) return buf;
  let end = max;
  while (end > 0 && (buf[end]! & 0xc0) === 0x80) end--;
  return buf.subarray(0, end);
}

type ReadOutcome = { ok: true; text: string } | { ok: false; warning: string | null };

/** A file of the repository, through the file service (which refuses links out of the workspace). */
async function readInside(files: WorkspaceFiles, path: string, source: string, maxBytes: number): Promise<ReadOutcome> {
  let head: { data: Buffer; size: number };
  try {
    head = await files.head(path, maxBytes + 4);
  } catch (err) {
    if (err instanceof FileOpError && err.code === 'OUTSIDE') return { ok: false, warning: `${source}: ignored (links outside the repository)` };
    if (err instanceof FileOpError && (err.code === 'ENOENT' || err.code === 'NOT_REGULAR' || err.code === 'ENOTDIR')) return { ok: false, warning: null };
    return { ok: false, warning: `${source}: could not be opened` };
  }
  const data = head.data;
  if (data.includes(0)) return { ok: false, warning: `${source}: ignored (binary file)` };
  const truncated = head.size > maxBytes;
  let text = utf8Prefix(data, maxBytes).toString('utf8');
  if (truncated) {
    text += `\n\n[Note: ${source} is ${head.size} bytes; only the first ${maxBytes} bytes were loaded.]`;
  }
  return { ok: true, text };
}

function asList(v: FrontMatterValue | undefined): string[] {
  if (v == null) return [];
  const list = Array.isArray(v) ? v : [v];
  return list.map((s) => s.trim()).filter(Boolean);
}

function asString(v: FrontMatterValue | undefined): string | null {
  if (typeof v === 'string' && v.trim()) return v.trim();
  return null;
}

/**
 * Loads the repository's instructions (the workspace of `files`, as the conversation sees it); see
 * the file comment. Never throws for repository content.
 */
export async function loadRepoInstructions(files: WorkspaceFiles, opts: LoadInstructionsOptions = {}): Promise<RepoInstructions> {
  const maxBytes = opts.maxBytes ?? DEFAULT_MAX_INSTRUCTION_BYTES;
  const maxFiles = opts.maxFiles ?? DEFAULT_MAX_FILES;
  const window = Math.max(1, opts.readAhead ?? READ_AHEAD);
  const result: RepoInstructions = { always: [], triggered: [], warnings: [] };
  const root = files.root;
  const byName = new Map<string, AlwaysInstruction | TriggeredInstruction>();
  const add = (item: AlwaysInstruction | TriggeredInstruction) => {
    if (byName.has(item.name)) {
      result.warnings.push(`${item.source}: replaces the earlier instructions named "${item.name}"`);
      byName.delete(item.name);
    }
    byName.set(item.name, item);
  };

  // asked with the root's listing, not after it: the service answers the two back to back, not a round trip each
  const microDir = posix.join(root, '.openhands', 'microagents');
  const microStat = files.stat(microDir).then(
    (st) => ({ st }),
    (err: unknown) => ({ err }),
  );

  // Root files.
  let rootEntries: string[];
  try {
    rootEntries = (await files.list(root, { depth: 1, hidden: true, max: 10_000 })).entries.map((e) => posix.basename(e.path));
  } catch {
    return result; // no workspace yet
  }
  const agentFiles = rootEntries.filter((n) => /^agents?\.md$/i.test(n)).sort((a, b) => rank(a) - rank(b) || (a < b ? -1 : 1));
  const rootFiles: [string, string][] = [];
  if (agentFiles[0]) rootFiles.push(['agents', agentFiles[0]]);
  if (rootEntries.includes('.cursorrules')) rootFiles.push(['cursorrules', '.cursorrules']);
  if (rootEntries.includes('.openhands_instructions')) rootFiles.push(['openhands_instructions', '.openhands_instructions']);
  const rootReads = ahead(rootFiles, window, ([, file]) => readInside(files, posix.join(root, file), file, maxBytes));
  for (const [name, file] of rootFiles) {
    const r = (await rootReads.next()).value!;
    if (!r.ok) {
      if (r.warning) result.warnings.push(r.warning);
      continue;
    }
    const fm = parseFrontMatter(r.text);
    const content = (fm.data ? fm.body : r.text).trim();
    if (content) add({ name, source: file, content });
  }

  // Microagents: `.md` files under .openhands/microagents (links to directories are not followed).
  let micro: { path: string; dir: boolean }[] | null = null;
  try {
    const stat = await microStat;
    if ('err' in stat) throw stat.err;
    if (stat.st?.type === 'dir') micro = (await files.list(microDir, { depth: MAX_DEPTH, hidden: true, max: maxFiles * 20 })).entries;
  } catch (err) {
    if (err instanceof FileOpError && err.code === 'OUTSIDE') result.warnings.push('.openhands/microagents: ignored (links outside the repository)');
  }
  const mdFiles = (micro ?? []).filter((e) => !e.dir && /\.md$/i.test(e.path) && posix.basename(e.path).toLowerCase() !== 'readme.md').map((e) => e.path);
  if (mdFiles.length > maxFiles) result.warnings.push(`.openhands/microagents: more than ${maxFiles} files; the rest were ignored`);
  const chosen = mdFiles.slice(0, maxFiles);
  const reads = ahead(chosen, window, (file) => readInside(files, file, posix.relative(root, file), maxBytes));
  for (const file of chosen) {
    const source = posix.relative(root, file);
    const r = (await reads.next()).value!;
    if (!r.ok) {
      if (r.warning) result.warnings.push(r.warning);
      continue;
    }
    const fm = parseFrontMatter(r.text);
    if (fm.error) result.warnings.push(`${source}: ${fm.error}; loaded as plain text`);
    const data = fm.data ?? {};
    const content = fm.body.trim();
    if (!content) continue;
    const defaultName = posix.relative(microDir, file).replace(/\.md$/i, '');
    const name = asString(data.name) ?? defaultName;
    const type = asString(data.type)?.toLowerCase() ?? null;
    const triggers = asList(data.triggers);
    const isTask = type === 'task' || (data.inputs != null && type !== 'repo' && type !== 'knowledge');
    if (isTask) triggers.push(`/${name}`);
    if (type === 'repo' || triggers.length === 0) add({ name, source, content });
    else add({ name, source, triggers: [...new Set(triggers)], content });
  }

  for (const item of byName.values()) {
    if ('triggers' in item) result.triggered.push(item);
    else result.always.push(item);
  }
  return result;
}

/** Reads asked before the one being handled is answered (each holds at most the byte limit). */
const READ_AHEAD = 8;

/**
 * `read(item)` for each item, in order, with up to `window` asked ahead of the one consumed: the
 * service answers queued requests back to back instead of waiting a round trip for each. `read`
 * must not reject (readInside does not).
 */
async function* ahead<T, R>(items: readonly T[], window: number, read: (item: T) => Promise<R>): AsyncGenerator<R, void> {
  const asked: Promise<R>[] = [];
  for (let i = 0; i < items.length; i++) {
    while (asked.length < items.length && asked.length < i + window) asked.push(read(items[asked.length]!));
    yield await asked[i]!;
    delete asked[i];
  }
}

function rank(fileName: string): number {
  const order = ['AGENTS.md', 'agents.md', 'AGENT.md', 'agent.md'];
  const i = order.indexOf(fileName);
  return i < 0 ? order.length : i;
}

/**
 * The triggered instructions whose trigger occurs in the user's text (case-insensitive
 * substring match, as OpenHands does: the trigger `docker` matches "Dockerfile").
 */
export function selectTriggered<T extends { triggers: string[] }>(triggered: T[], userText: string): T[] {
  const text = userText.toLowerCase();
  return triggered.filter((t) => t.triggers.some((tr) => tr.trim() !== '' && text.includes(tr.trim().toLowerCase())));
}
