/**
 * SANDBOX=none's file service started ahead (src/sandbox/plain-files.ts): a service without a
 * workspace takes one from its first request, once, and serves nothing before; a daemon's launcher
 * keeps one ready after a conversation used its own, the next conversation's first file operation
 * is served by it (judged from the host: no new service started for it, its file in its own
 * workspace), another is started after, and none outlives the launcher.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { FileChannel, FileOpError } from '../src/sandbox/files.js';
import { DEFAULT_SANDBOX_SETTINGS, Sandbox } from '../src/sandbox/launcher.js';
import { findProgram } from '../src/sandbox/programs.js';
import { FILE_SERVICE, serviceProgram } from '../src/sandbox/view.js';
import { tempDir, waitFor } from './support/daemon.js';
import { descendants, livingProcesses } from './support/processes.js';

const code = (c: string) => (e: unknown) => e instanceof FileOpError && e.code === c;

/** A file service of its own, spoken to through a channel as the daemon does. */
function service(args: string[], cwd: string) {
  const [program, ...first] = serviceProgram(findProgram('perl')!, FILE_SERVICE);
  const proc = spawn(program!, [...first, ...args], { cwd, stdio: ['pipe', 'pipe', 'ignore'] });
  const channel = new FileChannel(proc.stdin, proc.stdout, () => proc.kill('SIGKILL'));
  const ask = (header: Record<string, unknown>) => channel.request(header, null).then((a) => a.header);
  return { ask, end: () => proc.kill('SIGKILL') };
}

const cmdline = (pid: number) => {
  try {
    return fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
  } catch {
    return [];
  }
};

test('a service started without a workspace serves nothing until its first request gives it one, and takes no other after', { timeout: 60_000 }, async (t) => {
  const root = tempDir('parley-plain-spare-');
  const ws = path.join(root, 'ws');
  fs.mkdirSync(ws);
  fs.writeFileSync(path.join(root, 'outside.txt'), 'OUTSIDE');
  const later = service(['--root-later'], root);
  const given = service(['--root', ws], root);
  t.after(() => {
    later.end();
    given.end();
    fs.rmSync(root, { recursive: true, force: true });
  });
  await assert.rejects(later.ask({ op: 'stat', path: path.join(ws, 'x') }), (e: unknown) => code('ENOENT')(e) && /no workspace yet/.test(String(e)));
  await assert.rejects(later.ask({ op: 'root', path: 'ws' }), code('EINVAL'));
  assert.equal((await later.ask({ op: 'root', path: ws })).ok, true);
  fs.writeFileSync(path.join(ws, 'in.txt'), 'IN');
  assert.equal((await later.ask({ op: 'stat', path: path.join(ws, 'in.txt') })).info !== null, true);
  await assert.rejects(later.ask({ op: 'stat', path: path.join(root, 'outside.txt') }), code('OUTSIDE'));
  // once given, never another (nor for a service started with its workspace)
  await assert.rejects(later.ask({ op: 'root', path: root }), code('EINVAL'));
  await assert.rejects(later.ask({ op: 'stat', path: path.join(root, 'outside.txt') }), code('OUTSIDE'));
  await assert.rejects(given.ask({ op: 'root', path: root }), code('EINVAL'));
  await assert.rejects(given.ask({ op: 'stat', path: path.join(root, 'outside.txt') }), code('OUTSIDE'));
});

test("a daemon's none launcher: the next conversation's first file operation is served by the service started ahead", { timeout: 60_000 }, async (t) => {
  const root = tempDir('parley-plain-spare-');
  const sb = await Sandbox.open({ ...DEFAULT_SANDBOX_SETTINGS, mode: 'none' }, { workspaceRoot: root });
  t.after(async () => {
    if (!sb.isClosed) await sb.close();
    fs.rmSync(root, { recursive: true, force: true });
  });
  const services = () => descendants(process.pid).filter((p) => cmdline(p).some((a) => a.endsWith('/file-service.pl')));
  const wsA = path.join(root, 'a');
  const wsB = path.join(root, 'b');
  await sb.files('conversation-a', wsA).write(path.join(wsA, 'a.txt'), 'A', { mode: 'create' });
  // after the first conversation used its own, one is started ahead (without a workspace)
  const spare = (await waitFor(() => sb.plain.sparePid, 'a service started ahead', 30_000))!;
  await sb.plain.warm();
  assert.equal(sb.plain.sparePid, spare, 'ready, the same service');
  assert.ok(cmdline(spare).includes('--root-later'), `started without a workspace: ${cmdline(spare).join(' ')}`);
  const before = new Set(services());
  await sb.files('conversation-b', wsB).write(path.join(wsB, 'b.txt'), 'B', { mode: 'create' });
  // judged from the host: B's file is in B's workspace, and B's operation started no service of its own
  assert.equal(fs.readFileSync(path.join(wsB, 'b.txt'), 'utf8'), 'B');
  assert.equal(fs.existsSync(path.join(wsA, 'b.txt')), false);
  assert.ok(livingProcesses().has(spare), 'the service started ahead serves B');
  assert.deepEqual(
    services().filter((p) => !before.has(p) && cmdline(p).includes(wsB)),
    [],
    'no service was started with B as its workspace',
  );
  // and the next one is started after it was taken
  const next = (await waitFor(() => (sb.plain.sparePid !== spare ? sb.plain.sparePid : null), 'another service started ahead', 30_000))!;
  assert.notEqual(next, spare);
  await sb.close();
  const alive = livingProcesses();
  assert.deepEqual(
    [spare, next].filter((p) => alive.has(p)),
    [],
    'no service outlives the launcher',
  );
});
