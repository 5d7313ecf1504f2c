import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import * as z from 'zod';
import { createFileEditorTool, type FileEditorTool } from '../src/tools/file-editor.js';
import { Sandbox } from '../src/sandbox/launcher.js';
import type { ToolContext } from '../src/tools/types.js';
import type { FileEditorObservation as ToolObservation } from '../src/tools/file-editor.js';

let root: string;
let tool: FileEditorTool;
let sandbox: Sandbox;
let seq = 0;

function makeCtx(conversationId = `fe-${++seq}`): ToolContext {
  const ws = fs.mkdtempSync(path.join(root, 'ws-'));
  return {
    conversationId,
    workspaceDir: ws,
    signal: new AbortController().signal,
    env: {},
    redact: (t) => t.split('TOPSECRET').join('<secret_hidden>'),
  };
}

function textOf(obs: ToolObservation): string {
  const c = obs.content[0];
  assert.ok(c && c.type === 'text');
  return c.text;
}

function ed(ctx: ToolContext, params: Record<string, unknown>): Promise<ToolObservation> {
  return tool.execute(tool.parameters.parse(params), ctx);
}

function write(file: string, content: string | Buffer): string {
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(file, content);
  return file;
}

before(() => {
  root = fs.mkdtempSync(path.join(os.tmpdir(), 'parley-fe-test-'));
  sandbox = Sandbox.none(root);
  tool = createFileEditorTool({ files: (ctx) => sandbox.files(ctx.conversationId, ctx.workspaceDir) });
});

after(async () => {
  await sandbox.close();
  fs.rmSync(root, { recursive: true, force: true });
});

describe('file_editor tool', () => {
  it('has a flat object schema that converts to JSON Schema', () => {
    const schema = z.toJSONSchema(tool.parameters) as {
      type: string;
      properties: Record<string, { enum?: string[] }>;
      required: string[];
    };
    assert.equal(schema.type, 'object');
    assert.deepEqual(schema.properties.command!.enum, ['view', 'create', 'str_replace', 'insert', 'undo_edit']);
    assert.deepEqual(schema.required.sort(), ['command', 'path']);
    for (const k of ['file_text', 'old_str', 'new_str', 'insert_line', 'view_range']) assert.ok(k in schema.properties);
    assert.ok(!('oneOf' in schema) && !('anyOf' in schema));
    assert.equal(tool.name, 'file_editor');
  });

  it('rejects a relative path, suggesting the absolute path in the workspace', async () => {
    const ctx = makeCtx();
    const obs = await ed(ctx, { command: 'view', path: 'src/app.py' });
    assert.equal(obs.is_error, true);
    assert.equal(obs.kind, 'FileEditorObservation');
    assert.equal(obs.command, 'view');
    assert.equal(obs.path, 'src/app.py');
    assert.match(textOf(obs), /absolute path/);
    assert.ok(textOf(obs).includes(path.join(ctx.workspaceDir, 'src/app.py')));
  });

  it('creates a file (with parent directories) and refuses to overwrite one', async () => {
    const ctx = makeCtx();
    const file = path.join(ctx.workspaceDir, 'new/dir/a.txt');
    const obs = await ed(ctx, { command: 'create', path: file, file_text: 'one\ntwo\n' });
    assert.equal(obs.is_error, false, textOf(obs));
    assert.match(textOf(obs), /created/);
    assert.equal(fs.readFileSync(file, 'utf8'), 'one\ntwo\n');
    const again = await ed(ctx, { command: 'create', path: file, file_text: 'other' });
    assert.equal(again.is_error, true);
    assert.match(textOf(again), /already exists/);
    assert.equal(fs.readFileSync(file, 'utf8'), 'one\ntwo\n');
    const missing = await ed(ctx, { command: 'create', path: path.join(ctx.workspaceDir, 'b.txt') });
    assert.equal(missing.is_error, true);
    assert.match(textOf(missing), /file_text/);
    const empty = await ed(ctx, { command: 'create', path: path.join(ctx.workspaceDir, 'empty.txt'), file_text: '' });
    assert.equal(empty.is_error, false);
    assert.equal(fs.readFileSync(path.join(ctx.workspaceDir, 'empty.txt'), 'utf8'), '');
  });

  it('views a file like cat -n, with view_range', async () => {
    const ctx = makeCtx();
    const file = write(path.join(ctx.workspaceDir, 'v.txt'), 'alpha\nbeta\ngamma\ndelta\n');
    const all = await ed(ctx, { command: 'view', path: file });
    assert.equal(all.is_error, false);
    assert.equal(textOf(all), `Here's the result of running \`cat -n\` on ${file}:\n     1\talpha\n     2\tbeta\n     3\tgamma\n     4\tdelta\n`);
    const part = await ed(ctx, { command: 'view', path: file, view_range: [2, 3] });
    assert.match(textOf(part), /\n {5}2\tbeta\n {5}3\tgamma\n$/);
    assert.ok(!textOf(part).includes('alpha'));
    const toEnd = await ed(ctx, { command: 'view', path: file, view_range: [3, -1] });
    assert.match(textOf(toEnd), /\n {5}3\tgamma\n {5}4\tdelta\n$/);
    const bad = await ed(ctx, { command: 'view', path: file, view_range: [9, 10] });
    assert.equal(bad.is_error, true);
    assert.match(textOf(bad), /\[1, 4\]/);
    const clamped = await ed(ctx, { command: 'view', path: file, view_range: [4, 99] });
    assert.equal(clamped.is_error, false);
    assert.match(textOf(clamped), / {5}4\tdelta/);
  });

  it('clips the view of a long file and says how to see the rest', async () => {
    const ctx = makeCtx();
    const file = write(path.join(ctx.workspaceDir, 'long.txt'), Array.from({ length: 5000 }, (_, i) => `line number ${i + 1}`).join('\n'));
    const obs = await ed(ctx, { command: 'view', path: file });
    assert.ok(textOf(obs).length < 17_000);
    assert.match(textOf(obs), /response clipped/);
    assert.match(textOf(obs), /view_range/);
  });

  it('lists a directory two levels deep without hidden items', async () => {
    const ctx = makeCtx();
    const ws = ctx.workspaceDir;
    write(path.join(ws, 'top.txt'), 'x');
    write(path.join(ws, 'src/main.ts'), 'x');
    write(path.join(ws, 'src/deep/inner.ts'), 'x');
    write(path.join(ws, '.git/config'), 'x');
    write(path.join(ws, '.env'), 'x');
    write(path.join(ws, 'src/.hidden'), 'x');
    const obs = await ed(ctx, { command: 'view', path: ws });
    const text = textOf(obs);
    assert.equal(obs.is_error, false);
    assert.match(text, /up to 2 levels deep/);
    assert.ok(text.includes(`${ws}/top.txt`));
    assert.ok(text.includes(`${ws}/src/`));
    assert.ok(text.includes(`${ws}/src/main.ts`));
    assert.ok(text.includes(`${ws}/src/deep/`));
    assert.ok(!text.includes('inner.ts'), 'third level is not listed');
    assert.ok(!text.includes(`${ws}/.git`), '.git is hidden');
    assert.ok(!text.includes(`${ws}/.env`));
    assert.ok(!text.includes('.hidden'));
    assert.match(text, /2 hidden files\/directories/);
  });

  it('str_replace replaces exactly one match and returns a numbered snippet', async () => {
    const ctx = makeCtx();
    const file = write(path.join(ctx.workspaceDir, 's.py'), 'def f():\n    return 1\n\ndef g():\n    return 2\n');
    const obs = await ed(ctx, { command: 'str_replace', path: file, old_str: '    return 2', new_str: '    x = "$&$1"\n    return x' });
    assert.equal(obs.is_error, false, textOf(obs));
    assert.equal(fs.readFileSync(file, 'utf8'), 'def f():\n    return 1\n\ndef g():\n    x = "$&$1"\n    return x\n');
    assert.match(textOf(obs), / {5}5\t {4}x = "\$&\$1"\n {5}6\t {4}return x/);
    assert.match(textOf(obs), / {5}1\tdef f\(\):/, 'context lines are included');
    assert.match(textOf(obs), /Review the changes/);
  });

  it('str_replace lists the line numbers when old_str occurs several times, and explains a missing match', async () => {
    const ctx = makeCtx();
    const content = 'a = 1\nprint(a)\nb = 2\nprint(a)\n';
    const file = write(path.join(ctx.workspaceDir, 'm.py'), content);
    const multi = await ed(ctx, { command: 'str_replace', path: file, old_str: 'print(a)', new_str: 'print(b)' });
    assert.equal(multi.is_error, true);
    assert.match(textOf(multi), /Multiple occurrences/);
    assert.match(textOf(multi), /\[2,\s*4\]/);
    const none = await ed(ctx, { command: 'str_replace', path: file, old_str: 'print(c)', new_str: 'x' });
    assert.equal(none.is_error, true);
    assert.match(textOf(none), /did not appear verbatim/);
    const ws = await ed(ctx, { command: 'str_replace', path: file, old_str: 'b  =  2', new_str: 'b = 3' });
    assert.equal(ws.is_error, true);
    assert.match(textOf(ws), /whitespace/);
    assert.match(textOf(ws), /line 3/);
    const same = await ed(ctx, { command: 'str_replace', path: file, old_str: 'a = 1', new_str: 'a = 1' });
    assert.equal(same.is_error, true);
    assert.match(textOf(same), /must be different/);
    const noOld = await ed(ctx, { command: 'str_replace', path: file, new_str: 'x' });
    assert.equal(noOld.is_error, true);
    assert.match(textOf(noOld), /old_str/);
    assert.equal(fs.readFileSync(file, 'utf8'), content, 'failed edits change nothing');
  });

  it('insert adds lines after insert_line (0 = top) and keeps a missing final newline', async () => {
    const ctx = makeCtx();
    const file = write(path.join(ctx.workspaceDir, 'i.txt'), 'one\ntwo\nthree\n');
    let obs = await ed(ctx, { command: 'insert', path: file, insert_line: 0, new_str: 'zero' });
    assert.equal(obs.is_error, false, textOf(obs));
    assert.equal(fs.readFileSync(file, 'utf8'), 'zero\none\ntwo\nthree\n');
    assert.match(textOf(obs), / {5}1\tzero/);
    obs = await ed(ctx, { command: 'insert', path: file, insert_line: 2, new_str: 'one-a\none-b\n' });
    assert.equal(fs.readFileSync(file, 'utf8'), 'zero\none\none-a\none-b\ntwo\nthree\n');
    assert.match(textOf(obs), / {5}3\tone-a\n {5}4\tone-b/);
    obs = await ed(ctx, { command: 'insert', path: file, insert_line: 6, new_str: 'last' });
    assert.equal(fs.readFileSync(file, 'utf8'), 'zero\none\none-a\none-b\ntwo\nthree\nlast\n');
    const bad = await ed(ctx, { command: 'insert', path: file, insert_line: 99, new_str: 'x' });
    assert.equal(bad.is_error, true);
    assert.match(textOf(bad), /\[0, 7\]/);
    const noNl = write(path.join(ctx.workspaceDir, 'n.txt'), 'a\nb');
    await ed(ctx, { command: 'insert', path: noNl, insert_line: 1, new_str: 'mid' });
    assert.equal(fs.readFileSync(noNl, 'utf8'), 'a\nmid\nb');
    await ed(ctx, { command: 'insert', path: noNl, insert_line: 3, new_str: 'end' });
    assert.equal(fs.readFileSync(noNl, 'utf8'), 'a\nmid\nb\nend');
    const empty = write(path.join(ctx.workspaceDir, 'e.txt'), '');
    await ed(ctx, { command: 'insert', path: empty, insert_line: 0, new_str: 'first' });
    assert.equal(fs.readFileSync(empty, 'utf8'), 'first\n');
  });

  it('keeps CRLF line endings when editing', async () => {
    const ctx = makeCtx();
    const file = write(path.join(ctx.workspaceDir, 'w.txt'), 'a\r\nb\r\nc\r\n');
    const obs = await ed(ctx, { command: 'str_replace', path: file, old_str: 'a\nb', new_str: 'A\nB' });
    assert.equal(obs.is_error, false, textOf(obs));
    assert.equal(fs.readFileSync(file, 'utf8'), 'A\r\nB\r\nc\r\n');
    await ed(ctx, { command: 'insert', path: file, insert_line: 1, new_str: 'x' });
    assert.equal(fs.readFileSync(file, 'utf8'), 'A\r\nx\r\nB\r\nc\r\n');
  });

  it('undo_edit restores previous versions per file and per conversation', async () => {
    const ctx = makeCtx();
    const file = write(path.join(ctx.workspaceDir, 'u.txt'), 'v1\n');
    await ed(ctx, { command: 'str_replace', path: file, old_str: 'v1', new_str: 'v2' });
    await ed(ctx, { command: 'str_replace', path: file, old_str: 'v2', new_str: 'v3' });
    // Another conversation has no history for this file.
    const other = { ...makeCtx(), workspaceDir: ctx.workspaceDir };
    const foreign = await ed(other, { command: 'undo_edit', path: file });
    assert.equal(foreign.is_error, true);
    assert.match(textOf(foreign), /No edit history/);
    let obs = await ed(ctx, { command: 'undo_edit', path: file });
    assert.equal(obs.is_error, false);
    assert.equal(fs.readFileSync(file, 'utf8'), 'v2\n');
    assert.match(textOf(obs), /undone/);
    obs = await ed(ctx, { command: 'undo_edit', path: file });
    assert.equal(fs.readFileSync(file, 'utf8'), 'v1\n');
    obs = await ed(ctx, { command: 'undo_edit', path: file });
    assert.equal(obs.is_error, true);
    // Undoing a create removes the file.
    const created = path.join(ctx.workspaceDir, 'created.txt');
    await ed(ctx, { command: 'create', path: created, file_text: 'x' });
    obs = await ed(ctx, { command: 'undo_edit', path: created });
    assert.equal(obs.is_error, false);
    assert.ok(!fs.existsSync(created));
    // closeConversation forgets the history.
    await ed(ctx, { command: 'str_replace', path: file, old_str: 'v1', new_str: 'v9' });
    tool.closeConversation(ctx.conversationId);
    obs = await ed(ctx, { command: 'undo_edit', path: file });
    assert.equal(obs.is_error, true);
  });

  it('refuses binary, non-UTF-8 and huge files with a reason', async () => {
    const ctx = makeCtx();
    const bin = write(path.join(ctx.workspaceDir, 'b.bin'), Buffer.from([0x41, 0x00, 0x42, 0x0a]));
    let obs = await ed(ctx, { command: 'view', path: bin });
    assert.equal(obs.is_error, true);
    assert.match(textOf(obs), /binary/);
    obs = await ed(ctx, { command: 'str_replace', path: bin, old_str: 'A', new_str: 'C' });
    assert.equal(obs.is_error, true);
    const latin = write(path.join(ctx.workspaceDir, 'l.txt'), Buffer.from([0x63, 0x61, 0x66, 0xe9, 0x0a]));
    obs = await ed(ctx, { command: 'view', path: latin });
    assert.equal(obs.is_error, true);
    assert.match(textOf(obs), /UTF-8/);
    const huge = path.join(ctx.workspaceDir, 'huge.txt');
    fs.writeFileSync(huge, 'x');
    fs.truncateSync(huge, 11 * 1024 * 1024);
    obs = await ed(ctx, { command: 'view', path: huge });
    assert.equal(obs.is_error, true);
    assert.match(textOf(obs), /too large/);
    obs = await ed(ctx, { command: 'insert', path: huge, insert_line: 0, new_str: 'x' });
    assert.equal(obs.is_error, true);
    assert.match(textOf(obs), /too large/);
  });

  it('reports missing paths and directories used with edit commands', async () => {
    const ctx = makeCtx();
    const missing = path.join(ctx.workspaceDir, 'nope.txt');
    let obs = await ed(ctx, { command: 'view', path: missing });
    assert.equal(obs.is_error, true);
    assert.match(textOf(obs), /does not exist/);
    obs = await ed(ctx, { command: 'str_replace', path: ctx.workspaceDir, old_str: 'a', new_str: 'b' });
    assert.equal(obs.is_error, true);
    assert.match(textOf(obs), /directory/);
    assert.equal(obs.path, ctx.workspaceDir);
  });

  it('redacts secrets in what it returns and returns images as image content', async () => {
    const ctx = makeCtx();
    const file = write(path.join(ctx.workspaceDir, '.env'), 'TOKEN=TOPSECRET\n');
    const obs = await ed(ctx, { command: 'view', path: file });
    assert.ok(!JSON.stringify(obs).includes('TOPSECRET'));
    assert.match(textOf(obs), /TOKEN=<secret_hidden>/);
    const png = Buffer.from('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==', 'base64');
    const img = write(path.join(ctx.workspaceDir, 'dot.png'), png);
    const imgObs = await ed(ctx, { command: 'view', path: img });
    assert.equal(imgObs.is_error, false);
    const image = imgObs.content.find((c) => c.type === 'image');
    assert.ok(image && image.type === 'image');
    assert.equal(image.image_urls[0], `data:image/png;base64,${png.toString('base64')}`);
  });
});
