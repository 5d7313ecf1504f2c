/**
 * What moving the file editor's I/O into the sandbox costs (the budget: a `view` or `create` may
 * add at most 2 ms): the file editor of this checkout, whose every read and write is a request to
 * the conversation's file service inside its bwrap sandbox, against the file editor as it was
 * before (commit f3174a7: checks and I/O in the daemon, on host paths), in the same run,
 * alternating, on a warm sandbox.
 *
 *   npx tsx scripts/bench-files.ts [--rounds 300]
 *
 * Each round: `view` of a 200-line file, `view` of a directory (2 levels, ~60 entries), `create` of
 * a new file, `str_replace` in it; median and p90 per operation in ms, and what the sandbox adds.
 * The machine's load average is printed: on a busy machine the added figure is mostly the two
 * context switches of a request (daemon → service → daemon).
 */
import { execFileSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { Sandbox, DEFAULT_SANDBOX_SETTINGS } from '../src/sandbox/launcher.js';
import { createFileEditorTool } from '../src/tools/file-editor.js';
import type { Tool, ToolContext } from '../src/tools/types.js';

const BEFORE = 'f3174a7';
const { values: args } = parseArgs({ options: { rounds: { type: 'string', default: '300' } } });
const ROUNDS = Number(args.rounds);
const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const p90 = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length * 0.9)]!;

/** The file editor of BEFORE, imported from a copy of its two files next to today's modules it needs. */
async function editorBefore(): Promise<{ tool: Tool; dir: string }> {
  const dir = fs.mkdtempSync(path.join(ROOT, '.bench-files-'));
  const show = (p: string) => execFileSync('git', ['show', `${BEFORE}:${p}`], { cwd: ROOT, encoding: 'utf8' });
  fs.mkdirSync(path.join(dir, 'src/tools'), { recursive: true });
  fs.mkdirSync(path.join(dir, 'src/sandbox'), { recursive: true });
  fs.writeFileSync(path.join(dir, 'src/tools/file-editor.ts'), show('src/tools/file-editor.ts'));
  fs.writeFileSync(path.join(dir, 'src/sandbox/path-view.ts'), show('src/sandbox/path-view.ts'));
  fs.symlinkSync(path.join(ROOT, 'src/tools/types.ts'), path.join(dir, 'src/tools/types.ts'));
  fs.symlinkSync(path.join(ROOT, 'src/events'), path.join(dir, 'src/events'));
  const mod = await import(path.join(dir, 'src/tools/file-editor.ts'));
  const { PathView } = await import(path.join(dir, 'src/sandbox/path-view.ts'));
  // as the daemon wired it: the workspace at /workspace
  const tool = mod.createFileEditorTool({ view: (ctx: ToolContext) => new PathView(ctx.workspaceDir, '/workspace') }) as Tool;
  return { tool, dir };
}

function fill(ws: string): void {
  fs.writeFileSync(path.join(ws, 'big.py'), `${Array.from({ length: 200 }, (_, i) => `line ${i} = ${'x'.repeat(40)}`).join('\n')}\n`);
  for (let d = 0; d < 6; d++) {
    fs.mkdirSync(path.join(ws, `dir${d}`), { recursive: true });
    for (let f = 0; f < 9; f++) fs.writeFileSync(path.join(ws, `dir${d}`, `f${f}.txt`), 'x\n');
  }
}

async function main(): Promise<void> {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'parley-bench-files-'));
  const runAs = process.getuid?.() === 0 ? { uid: 65533, gid: 65533 } : null;
  const sb = await Sandbox.open({ ...DEFAULT_SANDBOX_SETTINGS, mode: 'bwrap', network: 'none', runAs }, { workspaceRoot: root });
  const before = await editorBefore();
  const now = createFileEditorTool({ files: (c) => sb.files(c.conversationId, c.workspaceDir) }) as unknown as Tool;
  const id = crypto.randomUUID();
  const ws = sb.hostWorkspace(id);
  const ctx: ToolContext = { conversationId: id, workspaceDir: ws, signal: new AbortController().signal, env: {}, redact: (t) => t };
  // the sandbox up and its workspace filled (through a shell in it: files are the sandbox uid's)
  const sh = sb.spawn(id, ['/bin/sh', '-c', 'true'], { env: sb.env(), stdio: 'ignore' });
  await new Promise((r) => sh.on('close', r));
  fill(ws);
  if (runAs) execFileSync('chown', ['-R', `${runAs.uid}:${runAs.gid}`, ws]);
  const ops = (i: number, tag: string) =>
    [
      ['view file', { command: 'view', path: '/workspace/big.py' }],
      ['view dir', { command: 'view', path: '/workspace' }],
      ['create', { command: 'create', path: `/workspace/new-${tag}-${i}.txt`, file_text: 'one\ntwo\n' }],
      ['str_replace', { command: 'str_replace', path: `/workspace/new-${tag}-${i}.txt`, old_str: 'two', new_str: 'three' }],
    ] as const;
  const times: Record<string, Record<string, number[]>> = { before: {}, sandbox: {} };
  const run = async (name: 'before' | 'sandbox', tool: Tool, i: number) => {
    for (const [op, params] of ops(i, name)) {
      const t0 = performance.now();
      const obs = (await tool.execute(tool.parameters.parse(params), ctx)) as { is_error: boolean; content: { text?: string }[] };
      const dt = performance.now() - t0;
      if (obs.is_error) throw new Error(`${name} ${op}: ${obs.content[0]?.text}`);
      (times[name]![op] ??= []).push(dt);
    }
  };
  try {
    for (let i = 0; i < 20; i++) {
      await run('before', before.tool, -i - 1);
      await run('sandbox', now, -i - 1);
    }
    times.before = {};
    times.sandbox = {};
    for (let i = 0; i < ROUNDS; i++) {
      if (i % 2) {
        await run('before', before.tool, i);
        await run('sandbox', now, i);
      } else {
        await run('sandbox', now, i);
        await run('before', before.tool, i);
      }
    }
  } finally {
    await sb.close();
    fs.rmSync(before.dir, { recursive: true, force: true });
    fs.rmSync(root, { recursive: true, force: true });
  }
  console.log(
    `bench-files: ${ROUNDS} rounds, load average ${os
      .loadavg()
      .map((l) => l.toFixed(2))
      .join(' ')}, ${runAs ? 'as root (sandbox uid 65533)' : 'unprivileged'}`,
  );
  console.log('operation      before (in the daemon)   sandbox (file service)   added (median)');
  for (const op of Object.keys(times.before!)) {
    const b = times.before![op]!;
    const s = times.sandbox![op]!;
    console.log(
      `${op.padEnd(14)} ${`${median(b).toFixed(2)} ms (p90 ${p90(b).toFixed(2)})`.padEnd(24)} ${`${median(s).toFixed(2)} ms (p90 ${p90(s).toFixed(2)})`.padEnd(24)} +${(median(s) - median(b)).toFixed(2)} ms`,
    );
  }
}

await main();
