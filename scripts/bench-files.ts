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
 *
 *   npx tsx scripts/bench-files.ts --transfer [--rounds 3] [--mib 64]
 *
 * Downloads and uploads through a real daemon (bwrap): a file of `--mib` MiB made in a conversation's
 * workspace is downloaded (GET /api/file/download, the body read to its end) and uploaded
 * (POST /api/file/upload, multipart) `--rounds` times each, against reading the same file from the
 * host's disk (fs.readFile, a baseline of the same run) — medians, and their ratio to it — while a
 * separate process asks GET /health one request after another: its worst latency during the
 * transfers, against its worst with the daemon idle for the same time.
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
const { values: args } = parseArgs({
  options: { rounds: { type: 'string' }, transfer: { type: 'boolean', default: false }, mib: { type: 'string', default: '64' } },
});
const ROUNDS = Number(args.rounds ?? (args.transfer ? 3 : 300));
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
      `${op.padEnd(14)} ${`${median(b).toFixed(2)} ms (p90 ${p90(b).toFixed(2)})`.padEnd(24)} ` +
        `${`${median(s).toFixed(2)} ms (p90 ${p90(s).toFixed(2)})`.padEnd(24)} +${(median(s) - median(b)).toFixed(2)} ms`,
    );
  }
}

/** A process asking GET /health one request after another until told to stop (a line on stdin); prints its worst latency in ms. */
const HEALTH_POLLER = `
let worst = 0, n = 0, stop = false;
process.stdin.on('data', () => (stop = true));
(async () => {
  while (!stop) {
    const t0 = performance.now();
    await fetch(process.argv[1] + '/health').then((r) => r.arrayBuffer());
    worst = Math.max(worst, performance.now() - t0);
    n++;
  }
  console.log(JSON.stringify({ worst, n }));
  process.exit(0);
})();`;

async function healthWorst<T>(url: string, fn: () => Promise<T>): Promise<{ result: T; worst: number; n: number }> {
  const { spawn } = await import('node:child_process');
  const p = spawn(process.execPath, ['-e', HEALTH_POLLER, url], { stdio: ['pipe', 'pipe', 'inherit'] });
  let out = '';
  p.stdout.on('data', (d: Buffer) => (out += d.toString()));
  await new Promise((r) => setTimeout(r, 200));
  const result = await fn();
  p.stdin.end('stop\n');
  await new Promise((r) => p.on('close', r));
  const { worst, n } = JSON.parse(out) as { worst: number; n: number };
  return { result, worst, n };
}

async function transfers(): Promise<void> {
  const { startDaemon } = await import('../test/support/daemon.js');
  const size = Number(args.mib) * 1024 * 1024;
  const d = await startDaemon({ SANDBOX: 'bwrap', SANDBOX_NETWORK: 'none' });
  try {
    const id = (await d.req('POST', '/api/conversations', {})).body.conversation_id as string;
    const made = await d.req('POST', '/api/bash/execute_bash_command', {
      command: `head -c ${size} /dev/urandom > big.bin && echo made`,
      conversation_id: id,
      timeout: 120,
    });
    if (!/made/.test(String(made.body.stdout))) throw new Error(`could not make the file: ${made.text}`);
    const host = path.join(d.dataDir, 'workspaces', id.replace(/-/g, ''), 'big.bin');
    const content = fs.readFileSync(host);
    const q = (p: string) => `conversation_id=${id}&path=${encodeURIComponent(p)}`;
    const timed = async (fn: () => Promise<void>) => {
      const t0 = performance.now();
      await fn();
      return performance.now() - t0;
    };
    const read = () => timed(async () => void (await fs.promises.readFile(host)));
    const download = () =>
      timed(async () => {
        const r = await fetch(`${d.url}/api/file/download?${q('/workspace/big.bin')}`);
        let n = 0;
        for await (const c of r.body as unknown as AsyncIterable<Uint8Array>) n += c.byteLength;
        if (r.status !== 200 || n !== size) throw new Error(`download: ${r.status}, ${n} bytes`);
      });
    const upload = () =>
      timed(async () => {
        const form = new FormData();
        form.append('file', new Blob([content]), 'up.bin');
        const r = await fetch(`${d.url}/api/file/upload?${q('/workspace/up.bin')}`, { method: 'POST', body: form });
        if (r.status !== 200) throw new Error(`upload: ${r.status} ${await r.text()}`);
      });
    await download(); // the sandbox up, the code warm
    const t: Record<'read' | 'download' | 'upload', number[]> = { read: [], download: [], upload: [] };
    const busy = await healthWorst(d.url, async () => {
      for (let i = 0; i < ROUNDS; i++) {
        t.read.push(await read());
        t.download.push(await download());
        t.upload.push(await upload());
      }
      return t.download.reduce((a, b) => a + b, 0) + t.upload.reduce((a, b) => a + b, 0);
    });
    const idle = await healthWorst(d.url, () => new Promise((r) => setTimeout(r, Math.min(busy.result, 10_000))));
    console.log(
      `bench-files --transfer: ${args.mib} MiB, ${ROUNDS} rounds, load average ${os
        .loadavg()
        .map((l) => l.toFixed(2))
        .join(' ')}`,
    );
    const base = median(t.read);
    for (const k of ['read', 'download', 'upload'] as const) {
      const m = median(t[k]);
      console.log(
        `${k.padEnd(9)} median ${m.toFixed(1).padStart(8)} ms   ${(m / base).toFixed(1).padStart(6)}× reading the file   ` +
          `(${t[k].map((x) => x.toFixed(0)).join(', ')} ms)`,
      );
    }
    console.log(
      `GET /health worst latency during the transfers ${busy.worst.toFixed(1)} ms (${busy.n} requests); idle ${idle.worst.toFixed(1)} ms (${idle.n})`,
    );
  } finally {
    await d.stop();
  }
}

await (args.transfer ? transfers() : main());
