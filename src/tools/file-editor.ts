/**
 * `file_editor` tool: view files and directories, create files, replace a unique string, insert
 * lines, and undo edits. Mistakes the LLM can fix come back as observations with is_error=true.
 *
 * Every read and write goes through the conversation's file service (sandbox/files.ts), which runs
 * inside its sandbox: the editor never touches a workspace path on the host, and a FIFO, a device
 * or a file that never ends cannot stall it (the service refuses anything but regular files and
 * reads at most the limit).
 *
 * Why one file of this size: each command's validation, its result text and its undo record belong to the
 * tool's contract with the LLM; the file access itself is in sandbox/files.ts.
 */
import path from 'node:path';
import { FileOpError, type Listing, type WorkspaceFiles } from '../sandbox/files.js';
import type * as z from 'zod';
import { FILE_EDITOR, FILE_EDITOR_COMMANDS as COMMANDS, fileEditorParameters, type FileEditorObservation } from '../events/tool-catalog.js';
import type { ObservationContent, Tool, ToolContext } from './types.js';

const MAX_FILE_BYTES = 10 * 1024 * 1024;
const MAX_IMAGE_BYTES = 5 * 1024 * 1024;
const MAX_VIEW_CHARS = 16_000;
const MAX_DIR_ENTRIES = 1_000;
const SNIPPET_CONTEXT = 4;
const HISTORY_PER_FILE = 10;
const HISTORY_BYTES_PER_CONVERSATION = 64 * 1024 * 1024;

const IMAGE_TYPES: Record<string, string> = {
  '.png': 'image/png',
  '.jpg': 'image/jpeg',
  '.jpeg': 'image/jpeg',
  '.gif': 'image/gif',
  '.webp': 'image/webp',
  '.bmp': 'image/bmp',
};

type FileEditorParams = z.output<typeof fileEditorParameters>;
export type { FileEditorObservation };

const DESCRIPTION = `View, create and edit files.
* \`view\`: a file is shown with line numbers like \`cat -n\` (use \`view_range\` for part of a long file); \
a directory lists its files and directories up to 2 levels deep (hidden ones left out). Images are returned as images.
* \`create\`: writes \`file_text\` to a new file (parent directories are created). It refuses to overwrite an existing file.
* \`str_replace\`: replaces \`old_str\` with \`new_str\`. \`old_str\` must match EXACTLY ONE place in the file, \
including whitespace and indentation; include enough surrounding lines to make it unique.
* \`insert\`: inserts \`new_str\` after line \`insert_line\` (0 = top of the file).
* \`undo_edit\`: reverts the last edit made with this tool to the file.
Paths must be absolute. Binary files and files over 10 MiB are refused: use the terminal for those.`;

/** A mistake the LLM can correct: becomes an is_error observation. */
class EditorError extends Error {}

type HistoryEntry = { path: string; content: Buffer | null };

interface TextFile {
  text: string;
  buf: Buffer;
  /** Line ending used by the file: CRLF when most lines end with \r\n. */
  eol: '\n' | '\r\n';
  bytes: number;
}

function numberLines(lines: string[], firstLineNo: number): string {
  return lines.map((l, i) => `${String(firstLineNo + i).padStart(6)}\t${l}`).join('\n');
}

/** Splits text into display lines: no trailing empty line for a final newline, no \r, no BOM. */
function splitLines(text: string): string[] {
  if (text.length === 0) return [];
  let t = text.startsWith('\uFEFF') ? text.slice(1) : text;
  if (t.endsWith('\n')) t = t.slice(0, -1);
  return t.split('\n').map((l) => (l.endsWith('\r') ? l.slice(0, -1) : l));
}

function lineOfIndex(text: string, index: number): number {
  let n = 1;
  for (let i = text.indexOf('\n'); i !== -1 && i < index; i = text.indexOf('\n', i + 1)) n++;
  return n;
}

function countLines(s: string): number {
  return s.length === 0 ? 1 : s.split('\n').length;
}

function isInt(n: unknown): n is number {
  return typeof n === 'number' && Number.isInteger(n);
}

function tooLarge(abs: string, size: number | null): EditorError {
  const how = size === null ? 'over 10 MiB' : `${(size / 1024 / 1024).toFixed(1)} MiB; the limit is ${MAX_FILE_BYTES / 1024 / 1024} MiB`;
  return new EditorError(`The file ${abs} is too large (${how}). Use the terminal to work with it (e.g. \`head\`, \`sed -n\`, \`grep -n\`).`);
}

function shorten(s: string, max = 200): string {
  return s.length <= max ? s : `${s.slice(0, max)}...`;
}

class FileEditor {
  private readonly history = new Map<string, HistoryEntry[]>();

  /** @param filesOf the conversation's file service (sandbox/files.ts) */
  constructor(private readonly filesOf: (ctx: ToolContext) => WorkspaceFiles) {}

  async execute(params: FileEditorParams, ctx: ToolContext): Promise<FileEditorObservation> {
    const command = params.command;
    const rawPath = params.path ?? '';
    const files = this.filesOf(ctx);
    try {
      const abs = this.checkPath(rawPath, files);
      switch (command) {
        case 'view':
          return await this.view(abs, params, ctx, files);
        case 'create':
          return await this.create(abs, params, ctx, files);
        case 'str_replace':
          return await this.strReplace(abs, params, ctx, files);
        case 'insert':
          return await this.insert(abs, params, ctx, files);
        case 'undo_edit':
          return await this.undo(abs, ctx, files);
        default:
          throw new EditorError(`Unknown command \`${String(command)}\`. Allowed commands: ${COMMANDS.map((c) => `\`${c}\``).join(', ')}.`);
      }
    } catch (err) {
      const message = err instanceof EditorError ? err.message : this.describeError(err, rawPath);
      return this.obs(ctx, command, rawPath, [{ type: 'text', text: message }], true);
    }
  }

  closeConversation(conversationId: string): void {
    this.history.delete(conversationId);
  }

  closeAll(): void {
    this.history.clear();
  }

  // -------------------------------------------------------------------------- helpers

  private obs(
    ctx: ToolContext,
    command: string,
    filePath: string,
    content: ObservationContent[],
    isError: boolean,
    extra: { prev_exist?: boolean } = {},
  ): FileEditorObservation {
    return {
      kind: 'FileEditorObservation',
      content: content.map((c) => (c.type === 'text' ? { type: 'text', text: ctx.redact(c.text) } : c)),
      is_error: isError,
      command,
      path: ctx.redact(filePath),
      ...extra,
    };
  }

  /** What a failed file operation tells the agent (the service's message says it in the conversation's terms). */
  private describeError(err: unknown, p: string): string {
    if (!(err instanceof FileOpError)) return `Error while accessing ${p}: ${(err as Error)?.message ?? String(err)}`;
    switch (err.code) {
      case 'EACCES':
      case 'EPERM':
        return `Permission denied for ${p}.`;
      case 'ENOENT':
        return `The path ${p} does not exist. Please provide a valid path.`;
      case 'ENOTDIR':
        return `A component of the path ${p} is not a directory.`;
      case 'EISDIR':
        return `The path ${p} is a directory.`;
      case 'ELOOP':
        return `The path ${p} is a symbolic link (or leads through too many); it was not opened.`;
      case 'ENOSPC':
      case 'EDQUOT':
        return `No space left to write ${p}.`;
      case 'EROFS':
        return `The path ${p} is on a read-only file system.`;
      case 'TIMEOUT':
      case 'UNAVAILABLE':
        return `The file operation on ${p} could not be done: ${err.message}.`;
      default:
        return err.message;
    }
  }

  /** The path as the conversation sees it; refuses relative paths (the rest — outside, links out — is the file service's). */
  private checkPath(p: string, files: WorkspaceFiles): string {
    if (typeof p !== 'string' || p.trim() === '') {
      throw new EditorError('Parameter `path` is required: give the absolute path of a file or directory.');
    }
    if (!path.isAbsolute(p)) {
      const suggestion = path.resolve(files.root, p);
      throw new EditorError(`Invalid \`path\` parameter: ${p}. The path should be an absolute path, starting with \`/\`. Maybe you meant ${suggestion}?`);
    }
    return files.visible(path.resolve(p));
  }

  /**
   * A regular file's bytes, in one request (no stat first): what is there instead, or too much of
   * it, becomes the message the agent can act on.
   */
  private async readFile(abs: string, command: string, files: WorkspaceFiles, max: number): Promise<Buffer>;
  private async readFile(
    abs: string,
    command: string,
    files: WorkspaceFiles,
    max: number,
    list: { depth: number; max: number },
  ): Promise<{ data: Buffer } | { listing: Listing }>;
  private async readFile(
    abs: string,
    command: string,
    files: WorkspaceFiles,
    max: number,
    list?: { depth: number; max: number },
  ): Promise<Buffer | { data: Buffer } | { listing: Listing }> {
    try {
      return list ? await files.readOrList(abs, max, list) : await files.read(abs, max);
    } catch (err) {
      if (!(err instanceof FileOpError)) throw err;
      if (err.code === 'ENOENT' || err.code === 'ENOTDIR') throw new EditorError(`The path ${abs} does not exist. Please provide a valid path.`);
      if (err.code === 'NOT_REGULAR' && err.detail.type === 'dir') {
        throw new EditorError(`The path ${abs} is a directory and only the \`view\` command can be used on directories.`);
      }
      if (err.code === 'NOT_REGULAR') throw new EditorError(`The path ${abs} is not a regular file; \`${command}\` works on regular files only.`);
      if (err.code === 'TOO_LARGE') throw tooLarge(abs, err.detail.size ?? null);
      throw err;
    }
  }

  /** Reads a text file; refuses binary and non-UTF-8 content. */
  private async readText(abs: string, command: string, files: WorkspaceFiles): Promise<TextFile> {
    return this.decodeText(abs, await this.readFile(abs, command, files, MAX_FILE_BYTES));
  }

  private decodeText(abs: string, buf: Buffer): TextFile {
    if (buf.includes(0)) {
      throw new EditorError(`The file ${abs} appears to be binary (it contains NUL bytes); file_editor only handles text files.`);
    }
    let text: string;
    try {
      text = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true }).decode(buf);
    } catch {
      throw new EditorError(`The file ${abs} is not valid UTF-8 text (it may be binary or use another encoding); file_editor only handles UTF-8 text files.`);
    }
    const crlf = (text.match(/\r\n/g) ?? []).length;
    const lf = (text.match(/\n/g) ?? []).length - crlf;
    return { text, buf, eol: crlf > lf ? '\r\n' : '\n', bytes: buf.length };
  }

  private historyOf(conversationId: string): HistoryEntry[] {
    let h = this.history.get(conversationId);
    if (!h) {
      h = [];
      this.history.set(conversationId, h);
    }
    return h;
  }

  private pushHistory(conversationId: string, abs: string, content: Buffer | null): void {
    const h = this.historyOf(conversationId);
    h.push({ path: abs, content });
    // At most HISTORY_PER_FILE versions per file, and a memory cap per conversation (oldest go first).
    const forFile = h.filter((e) => e.path === abs);
    if (forFile.length > HISTORY_PER_FILE) h.splice(h.indexOf(forFile[0]!), 1);
    let total = h.reduce((n, e) => n + (e.content?.length ?? 0), 0);
    while (total > HISTORY_BYTES_PER_CONVERSATION && h.length > 1) {
      const dropped = h.shift()!;
      total -= dropped.content?.length ?? 0;
    }
  }

  private popHistory(conversationId: string, abs: string): HistoryEntry | null {
    const h = this.history.get(conversationId);
    if (!h) return null;
    for (let i = h.length - 1; i >= 0; i--) {
      if (h[i]!.path === abs) return h.splice(i, 1)[0]!;
    }
    return null;
  }

  /** cat -n style snippet of the lines around [fromLine, toLine] of `text`. */
  private snippet(text: string, fromLine: number, toLine: number): string {
    const lines = splitLines(text);
    const start = Math.max(1, fromLine - SNIPPET_CONTEXT);
    const end = Math.min(lines.length, Math.max(toLine, fromLine) + SNIPPET_CONTEXT);
    return numberLines(lines.slice(start - 1, end), start);
  }

  private editedMessage(abs: string, text: string, fromLine: number, toLine: number): string {
    return (
      `The file ${abs} has been edited. Here's the result of running \`cat -n\` on a snippet of ${abs}:\n` +
      `${this.snippet(text, fromLine, toLine)}\n` +
      'Review the changes and make sure they are as expected. Edit the file again if necessary.'
    );
  }

  // -------------------------------------------------------------------------- view

  private async view(abs: string, params: FileEditorParams, ctx: ToolContext, files: WorkspaceFiles): Promise<FileEditorObservation> {
    const mime = IMAGE_TYPES[path.extname(abs).toLowerCase()];
    if (mime) {
      const data = await files.read(abs, MAX_IMAGE_BYTES).catch((err: unknown) => {
        if (err instanceof FileOpError && err.code === 'TOO_LARGE') {
          throw new EditorError(`The image ${abs} is too large to view (${err.detail.size ?? 'over'} bytes; the limit is ${MAX_IMAGE_BYTES} bytes).`);
        }
        throw err;
      });
      return this.obs(
        ctx,
        'view',
        abs,
        [
          { type: 'text', text: `Image file ${abs} (${data.length} bytes, ${mime}):` },
          { type: 'image', image_urls: [`data:${mime};base64,${data.toString('base64')}`] },
        ],
        false,
      );
    }
    // one request, a file or a directory
    const got = await this.readFile(abs, 'view', files, MAX_FILE_BYTES, { depth: 2, max: MAX_DIR_ENTRIES });
    if ('listing' in got) {
      if (params.view_range !== undefined) {
        throw new EditorError('The `view_range` parameter is not allowed when `path` points to a directory.');
      }
      return this.obs(ctx, 'view', abs, [{ type: 'text', text: this.listingText(abs, got.listing) }], false);
    }
    const { text } = this.decodeText(abs, got.data);
    const lines = splitLines(text);
    const n = lines.length;
    let start = 1;
    let end = n;
    const notes: string[] = [];
    if (params.view_range !== undefined) {
      const vr = params.view_range;
      if (!Array.isArray(vr) || vr.length !== 2 || !vr.every(isInt)) {
        throw new EditorError('Invalid `view_range` parameter: it should be a list of two integers, e.g. [10, 40] or [10, -1].');
      }
      [start, end] = vr as [number, number];
      if (n === 0) {
        throw new EditorError(`Invalid \`view_range\` parameter: ${JSON.stringify(vr)}. The file ${abs} is empty.`);
      }
      if (start < 1 || start > n) {
        throw new EditorError(
          `Invalid \`view_range\` parameter: ${JSON.stringify(vr)}. Its first element \`${start}\` should be within the range of lines of the file: [1, ${n}].`,
        );
      }
      if (end === -1) end = n;
      else if (end < start) {
        throw new EditorError(
          `Invalid \`view_range\` parameter: ${JSON.stringify(vr)}. Its second element \`${end}\` should be -1 or at least the first element \`${start}\`.`,
        );
      } else if (end > n) {
        notes.push(`Note: the file has only ${n} lines, so lines ${start}-${n} are shown.`);
        end = n;
      }
    }
    if (n === 0) {
      return this.obs(ctx, 'view', abs, [{ type: 'text', text: `The file ${abs} is empty.` }], false);
    }
    // Clip to MAX_VIEW_CHARS at a line boundary (a single huge line is cut itself).
    const shown: string[] = [];
    let size = 0;
    let last = start - 1;
    for (let i = start; i <= end; i++) {
      let line = `${String(i).padStart(6)}\t${lines[i - 1]}`;
      if (size + line.length + 1 > MAX_VIEW_CHARS) {
        if (shown.length === 0) {
          line = `${line.slice(0, MAX_VIEW_CHARS)} [... line cut: it is ${lines[i - 1]!.length} characters long]`;
          shown.push(line);
          last = i;
        }
        break;
      }
      shown.push(line);
      size += line.length + 1;
      last = i;
    }
    let out = `Here's the result of running \`cat -n\` on ${abs}:\n${shown.join('\n')}\n`;
    if (last < end) {
      out +=
        `<response clipped><NOTE>Only lines ${start}-${last} of ${n} are shown to save context. ` +
        `To see more, use \`view_range\` (e.g. [${last + 1}, ${Math.min(n, last + 400)}]) or search with \`grep -n\` in the terminal.</NOTE>\n`;
    }
    if (notes.length) out += `${notes.join('\n')}\n`;
    return this.obs(ctx, 'view', abs, [{ type: 'text', text: out }], false);
  }

  private listingText(abs: string, listing: Listing): string {
    const out = listing.entries.map((e) => (e.dir ? `${e.path}/` : e.path));
    const hidden = listing.hidden;
    let text = `Here's the files and directories up to 2 levels deep in ${abs}, excluding hidden items:\n${abs}/\n`;
    text += out.length ? `${out.join('\n')}\n` : '(empty directory)\n';
    if (listing.truncated) text += `[Listing stopped after ${out.length} entries. View a subdirectory to see more.]\n`;
    if (hidden > 0) {
      const one = hidden === 1;
      text += `\n${hidden} hidden file${one ? '' : 's'}/director${one ? 'y' : 'ies'} in this directory ${one ? 'is' : 'are'} excluded. `;
      text += `You can use 'ls -la ${abs}' to see them.\n`;
    }
    return text;
  }

  // -------------------------------------------------------------------------- create

  private async create(abs: string, params: FileEditorParams, ctx: ToolContext, files: WorkspaceFiles): Promise<FileEditorObservation> {
    if (typeof params.file_text !== 'string') {
      throw new EditorError('Parameter `file_text` is required for command: create.');
    }
    // exclusive: never overwrites (one request; what is there is looked at only when something is)
    try {
      await files.write(abs, params.file_text, { mode: 'exclusive', mkdirs: true });
    } catch (err) {
      if (!(err instanceof FileOpError && (err.code === 'EEXIST' || err.code === 'EISDIR'))) throw err;
      if ((await files.stat(abs).catch(() => null))?.type === 'dir') {
        throw new EditorError(`The path ${abs} is a directory and only the \`view\` command can be used on directories.`);
      }
      throw new EditorError(
        `File already exists at: ${abs}. Cannot overwrite files using command \`create\`. ` +
          'Use `str_replace` or `insert` to change it, or delete it first in the terminal.',
      );
    }
    this.pushHistory(ctx.conversationId, abs, null);
    const lines = splitLines(params.file_text).length;
    return this.obs(ctx, 'create', abs, [{ type: 'text', text: `File created successfully at: ${abs} (${lines} line${lines === 1 ? '' : 's'}).` }], false, {
      prev_exist: false,
    });
  }

  // -------------------------------------------------------------------------- str_replace

  private async strReplace(abs: string, params: FileEditorParams, ctx: ToolContext, files: WorkspaceFiles): Promise<FileEditorObservation> {
    if (typeof params.old_str !== 'string') {
      throw new EditorError('Parameter `old_str` is required for command: str_replace.');
    }
    if (params.old_str === '') {
      throw new EditorError('Parameter `old_str` must not be empty. To add text, use the `insert` command.');
    }
    let oldStr = params.old_str;
    let newStr = params.new_str ?? '';
    if (oldStr === newStr) throw new EditorError('`new_str` and `old_str` must be different.');
    const { text, eol, buf: original } = await this.readText(abs, 'str_replace', files);
    // An LLM writes \n; a CRLF file keeps its line endings.
    if (eol === '\r\n' && !oldStr.includes('\r')) {
      oldStr = oldStr.replace(/\n/g, '\r\n');
      newStr = newStr.replace(/\r?\n/g, '\r\n');
    }
    const positions: number[] = [];
    for (let i = text.indexOf(oldStr); i !== -1; i = text.indexOf(oldStr, i + 1)) positions.push(i);
    if (positions.length === 0) {
      throw new EditorError(this.noMatchMessage(abs, text, params.old_str));
    }
    if (positions.length > 1) {
      const lines = [...new Set(positions.map((p) => lineOfIndex(text, p)))];
      throw new EditorError(
        `No replacement was performed. Multiple occurrences of old_str \`${shorten(params.old_str)}\` in lines ${JSON.stringify(lines)}. ` +
          'Please ensure it is unique: include more surrounding lines in old_str.',
      );
    }
    const at = positions[0]!;
    // Plain slicing: no `$&`-style replacement patterns are interpreted in new_str.
    const updated = text.slice(0, at) + newStr + text.slice(at + oldStr.length);
    await files.write(abs, updated, { mode: 'existing' });
    this.pushHistory(ctx.conversationId, abs, original);
    const fromLine = lineOfIndex(updated, at);
    const toLine = fromLine + countLines(newStr.replace(/\r\n/g, '\n')) - 1;
    return this.obs(ctx, 'str_replace', abs, [{ type: 'text', text: this.editedMessage(abs, updated, fromLine, toLine) }], false, {
      prev_exist: true,
    });
  }

  /** Explains a failed match, pointing at near matches (whitespace differences) when there are some. */
  private noMatchMessage(abs: string, text: string, oldStr: string): string {
    let msg = `No replacement was performed, old_str \`${shorten(oldStr)}\` did not appear verbatim in ${abs}.`;
    const norm = (s: string) => s.replace(/\s+/g, ' ').trim();
    const want = splitLines(oldStr).map(norm);
    while (want.length && want[0] === '') want.shift();
    while (want.length && want[want.length - 1] === '') want.pop();
    if (want.length > 0) {
      const have = splitLines(text).map(norm);
      const hits: number[] = [];
      for (let i = 0; i + want.length <= have.length && hits.length < 5; i++) {
        let ok = true;
        for (let j = 0; j < want.length && ok; j++) {
          if (want.length === 1) ok = have[i]!.includes(want[0]!);
          else ok = have[i + j] === want[j];
        }
        if (ok) hits.push(i + 1);
      }
      if (hits.length > 0) {
        const ranges = hits.map((h) => (want.length === 1 ? `${h}` : `${h}-${h + want.length - 1}`));
        msg +=
          ' A match that differs only in whitespace or indentation was found at ' +
          `line${hits.length === 1 && want.length === 1 ? '' : 's'} ${ranges.join(', ')}: ` +
          'view those lines and copy the text exactly, including indentation.';
      }
    }
    if (oldStr.includes('<secret_hidden>')) {
      msg += ' Note: `<secret_hidden>` stands for a secret value hidden from you; edit around it instead of including it.';
    }
    return msg;
  }

  // -------------------------------------------------------------------------- insert

  private async insert(abs: string, params: FileEditorParams, ctx: ToolContext, files: WorkspaceFiles): Promise<FileEditorObservation> {
    if (params.insert_line === undefined) throw new EditorError('Parameter `insert_line` is required for command: insert.');
    if (typeof params.new_str !== 'string') throw new EditorError('Parameter `new_str` is required for command: insert.');
    const { text, eol, buf: original } = await this.readText(abs, 'insert', files);
    const bom = text.startsWith('\uFEFF') ? '\uFEFF' : '';
    const lines = splitLines(text);
    const n = lines.length;
    const at = params.insert_line;
    if (!isInt(at) || at < 0 || at > n) {
      throw new EditorError(`Invalid \`insert_line\` parameter: ${at}. It should be within the range of lines of the file: [0, ${n}] (0 inserts at the top).`);
    }
    let ins = params.new_str.replace(/\r\n/g, '\n');
    if (ins.endsWith('\n')) ins = ins.slice(0, -1);
    const newLines = ins.split('\n');
    // Insert by character offset so that the rest of the file is kept byte for byte.
    let insText = newLines.join(eol);
    let offset: number;
    if (at === 0) {
      offset = bom.length;
      insText += eol;
    } else {
      let idx = -1;
      for (let k = 0; k < at; k++) {
        idx = text.indexOf('\n', idx + 1);
        if (idx === -1) break;
      }
      if (idx === -1) {
        // After the last line of a file that does not end with a newline.
        offset = text.length;
        insText = eol + insText;
      } else {
        offset = idx + 1;
        insText += eol;
      }
    }
    const updated = text.slice(0, offset) + insText + text.slice(offset);
    await files.write(abs, updated, { mode: 'existing' });
    this.pushHistory(ctx.conversationId, abs, original);
    return this.obs(ctx, 'insert', abs, [{ type: 'text', text: this.editedMessage(abs, updated, at + 1, at + newLines.length) }], false, { prev_exist: true });
  }

  // -------------------------------------------------------------------------- undo

  private async undo(abs: string, ctx: ToolContext, files: WorkspaceFiles): Promise<FileEditorObservation> {
    const entry = this.popHistory(ctx.conversationId, abs);
    if (!entry) throw new EditorError(`No edit history found for ${abs}.`);
    if (entry.content === null) {
      // the file (or whatever the agent put in its place: a link is removed, never its target)
      await files.remove(abs);
      return this.obs(
        ctx,
        'undo_edit',
        abs,
        [{ type: 'text', text: `Last edit to ${abs} undone successfully: the file had been created by that edit and was removed.` }],
        false,
      );
    }
    await files.write(abs, entry.content, { mode: 'create', mkdirs: true });
    let text = `Last edit to ${abs} undone successfully.`;
    try {
      const restored = new TextDecoder('utf-8', { ignoreBOM: true }).decode(entry.content);
      const lines = splitLines(restored);
      let body = numberLines(lines, 1);
      if (body.length > MAX_VIEW_CHARS) {
        body = `${body.slice(0, MAX_VIEW_CHARS)}\n<response clipped><NOTE>Use \`view\` with \`view_range\` to see the rest.</NOTE>`;
      }
      text += ` Here's the result of running \`cat -n\` on ${abs}:\n${body}\n`;
    } catch {
      /* not shown */
    }
    return this.obs(ctx, 'undo_edit', abs, [{ type: 'text', text }], false);
  }
}

export type FileEditorTool = Tool<FileEditorParams, FileEditorObservation> & {
  readonly editor: FileEditor;
  closeConversation(conversationId: string): void;
  closeAll(): void;
};

export function createFileEditorTool(opts: { files: (ctx: ToolContext) => WorkspaceFiles }): FileEditorTool {
  const editor = new FileEditor(opts.files);
  return {
    name: FILE_EDITOR.name,
    kind: FILE_EDITOR.kind,
    actionKind: FILE_EDITOR.actionKind,
    description: DESCRIPTION,
    parameters: fileEditorParameters,
    editor,
    execute: (params, ctx) => editor.execute(params, ctx),
    closeConversation: (id) => editor.closeConversation(id),
    closeAll: () => editor.closeAll(),
  };
}
