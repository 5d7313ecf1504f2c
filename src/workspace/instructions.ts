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
 * The repository is untrusted input: symlinks pointing outside it are ignored (a repository
 * must not be able to pull `~/.ssh/id_rsa` into the prompt), each file is cut at `maxBytes`
 * (64 KiB) with a note, binary files are skipped, and at most `maxFiles` microagent files are
 * read. Problems are reported in `warnings` instead of failing the load.
 */
import { open, readdir, realpath } from 'node:fs/promises';
import { join, relative, isAbsolute, sep } from 'node:path';
import { parseFrontMatter, type FrontMatterValue } from './front-matter.js';

export interface AlwaysInstruction {
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
}

export const DEFAULT_MAX_INSTRUCTION_BYTES = 64 * 1024;
const DEFAULT_MAX_FILES = 200;
const MAX_DEPTH = 8;

function inside(root: string, path: string): boolean {
  const rel = relative(root, path);
  return rel !== '' && !rel.startsWith('..') && !isAbsolute(rel);
}

/** Cuts a buffer at `max` bytes without splitting a UTF-8 sequence. */
function utf8Prefix(buf: Buffer, max: number): Buffer {
  if (buf.length <= max) return buf;
  let end = max;
  while (end > 0 && (buf[end]! & 0xc0) === 0x80) end--;
  return buf.subarray(0, end);
}

type ReadOutcome = { ok: true; text: string } | { ok: false; warning: string | null };

async function readInside(root: string, path: string, source: string, maxBytes: number): Promise<ReadOutcome> {
  let real: string;
  try {
    real = await realpath(path);
  } catch {
    return { ok: false, warning: null };
  }
  if (!inside(root, real)) return { ok: false, warning: `${source}: ignored (links outside the repository)` };
  const fh = await open(real, 'r').catch(() => null);
  if (!fh) return { ok: false, warning: `${source}: could not be opened` };
  try {
    const st = await fh.stat();
    if (!st.isFile()) return { ok: false, warning: null };
    const want = Math.min(st.size, maxBytes + 4);
    const buf = Buffer.alloc(want);
    const { bytesRead } = await fh.read(buf, 0, want, 0);
    const data = buf.subarray(0, bytesRead);
    if (data.includes(0)) return { ok: false, warning: `${source}: ignored (binary file)` };
    const truncated = st.size > maxBytes;
    let text = utf8Prefix(data, maxBytes).toString('utf8');
    if (truncated) {
      text += `\n\n[Note: ${source} is ${st.size} bytes; only the first ${maxBytes} bytes were loaded.]`;
    }
    return { ok: true, text };
  } finally {
    await fh.close();
  }
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

async function walkMarkdown(
  root: string,
  dir: string,
  depth: number,
  out: string[],
  limit: number,
  warnings: string[],
): Promise<void> {
  if (depth > MAX_DEPTH || out.length >= limit) return;
  const entries = await readdir(dir, { withFileTypes: true }).catch(() => []);
  entries.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  for (const e of entries) {
    if (out.length >= limit) {
      warnings.push(`.openhands/microagents: more than ${limit} files; the rest were ignored`);
      return;
    }
    const full = join(dir, e.name);
    if (e.isDirectory()) {
      await walkMarkdown(root, full, depth + 1, out, limit, warnings);
    } else if ((e.isFile() || e.isSymbolicLink()) && /\.md$/i.test(e.name) && e.name.toLowerCase() !== 'readme.md') {
      out.push(full);
    }
  }
}

/** Loads the repository's instructions; see the file comment. Never throws for repository content. */
export async function loadRepoInstructions(dir: string, opts: LoadInstructionsOptions = {}): Promise<RepoInstructions> {
  const maxBytes = opts.maxBytes ?? DEFAULT_MAX_INSTRUCTION_BYTES;
  const maxFiles = opts.maxFiles ?? DEFAULT_MAX_FILES;
  const result: RepoInstructions = { always: [], triggered: [], warnings: [] };
  let root: string;
  try {
    root = await realpath(dir);
  } catch {
    return result;
  }
  const byName = new Map<string, AlwaysInstruction | TriggeredInstruction>();
  const add = (item: AlwaysInstruction | TriggeredInstruction) => {
    if (byName.has(item.name)) {
      result.warnings.push(`${item.source}: replaces the earlier instructions named "${item.name}"`);
      byName.delete(item.name);
    }
    byName.set(item.name, item);
  };

  // Root files.
  const rootEntries = await readdir(root).catch(() => [] as string[]);
  const agentFiles = rootEntries
    .filter((n) => /^agents?\.md$/i.test(n))
    .sort((a, b) => rank(a) - rank(b) || (a < b ? -1 : 1));
  const rootFiles: [string, string][] = [];
  if (agentFiles[0]) rootFiles.push(['agents', agentFiles[0]]);
  if (rootEntries.includes('.cursorrules')) rootFiles.push(['cursorrules', '.cursorrules']);
  if (rootEntries.includes('.openhands_instructions')) rootFiles.push(['openhands_instructions', '.openhands_instructions']);
  for (const [name, file] of rootFiles) {
    const r = await readInside(root, join(root, file), file, maxBytes);
    if (!r.ok) {
      if (r.warning) result.warnings.push(r.warning);
      continue;
    }
    const fm = parseFrontMatter(r.text);
    const content = (fm.data ? fm.body : r.text).trim();
    if (content) add({ name, source: file, content });
  }

  // Microagents.
  const microDir = join(root, '.openhands', 'microagents');
  let microReal: string | null = null;
  try {
    microReal = await realpath(microDir);
  } catch {
    microReal = null;
  }
  if (microReal && inside(root, microReal)) {
    const files: string[] = [];
    await walkMarkdown(root, microReal, 0, files, maxFiles, result.warnings);
    for (const file of files) {
      const source = relative(root, file).split(sep).join('/');
      const r = await readInside(root, file, source, maxBytes);
      if (!r.ok) {
        if (r.warning) result.warnings.push(r.warning);
        continue;
      }
      const fm = parseFrontMatter(r.text);
      if (fm.error) result.warnings.push(`${source}: ${fm.error}; loaded as plain text`);
      const data = fm.data ?? {};
      const content = fm.body.trim();
      if (!content) continue;
      const defaultName = relative(microReal, file).split(sep).join('/').replace(/\.md$/i, '');
      const name = asString(data.name) ?? defaultName;
      const type = asString(data.type)?.toLowerCase() ?? null;
      const triggers = asList(data.triggers);
      const isTask = type === 'task' || (data.inputs != null && type !== 'repo' && type !== 'knowledge');
      if (isTask) triggers.push(`/${name}`);
      if (type === 'repo' || triggers.length === 0) add({ name, source, content });
      else add({ name, source, triggers: [...new Set(triggers)], content });
    }
  } else if (microReal) {
    result.warnings.push('.openhands/microagents: ignored (links outside the repository)');
  }

  for (const item of byName.values()) {
    if ('triggers' in item) result.triggered.push(item);
    else result.always.push(item);
  }
  return result;
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
