/**
 * A sandboxed shell waits for its sandbox as long as the sandbox may take to start. The shell joins
 * its conversation's holder, which may still be starting on a loaded machine: the shell's own start
 * allowance (10 s) must not run out first. Made slow from the host: the spawner that starts holders is
 * stopped (SIGSTOP) when a conversation's first command comes, and let go 12 s later (past the shell's
 * allowance, within the holder's 30 s). A conversation's processes do not wait for its file service's
 * start, which its file operations do. And a sandbox that fails to start under its first processes:
 * they join the conversation's next one, once. Real bwrap, the in-process launcher, no spare holder.
 */
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { describe, test } from 'node:test';
import { DEFAULT_SANDBOX_SETTINGS, Sandbox } from '../src/sandbox/launcher.js';
import { stateDirOf } from '../src/sandbox/conversation-sandbox.js';
import { createTerminalTool } from '../src/tools/terminal/tool.js';
import { removeDir, ROOT, tempDir, waitFor } from './support/daemon.js';
import { RUN_REAL_SERVICE_JS } from './support/real-file-service.js';
import { fileServices } from './support/holders.js';

/** The sandbox's spawner (spawner-process.pl): a process of this test's, found in the host's /proc. */
function spawnerPid(): number {
  for (const name of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = fs.readFileSync(`/proc/${name}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      if (ppid === process.pid && fs.readFileSync(`/proc/${name}/cmdline`, 'utf8').includes('spawner-process')) return Number(name);
    } catch {
      /* gone meanwhile */
    }
  }
  throw new Error('no spawner process');
}

/** A new conversation's tool context, its workspace made (empty). */
function newConversation(workspaceRoot: string) {
  const id = crypto.randomUUID();
  const ctx = {
    conversationId: id,
    workspaceDir: path.join(workspaceRoot, id.replace(/-/g, '')),
    signal: new AbortController().signal,
    env: {},
    redact: (s: string) => s,
  };
  fs.mkdirSync(ctx.workspaceDir);
  return ctx;
}

describe('a sandboxed shell and a sandbox slow to start', { timeout: 180_000 }, () => {
  test('the shell waits for a holder still starting past its own 10 s, and the command runs once the holder is up', async () => {
    const dir = tempDir();
    const workspaceRoot = path.join(dir, 'ws');
    fs.mkdirSync(workspaceRoot, { recursive: true });
    const sb = await Sandbox.open({ ...DEFAULT_SANDBOX_SETTINGS, mode: 'bwrap', network: 'none', spareHolder: false }, { workspaceRoot });
    const t = createTerminalTool({ sandbox: sb, noOutputTimeoutMs: 30_000 });
    const ctx = newConversation(workspaceRoot);
    const spawner = spawnerPid();
    try {
      process.kill(spawner, 'SIGSTOP');
      let settled = false;
      const call = t.execute(t.parameters.parse({ command: 'echo "joined $((6 * 7))"' }), ctx).finally(() => (settled = true));
      await new Promise((r) => setTimeout(r, 12_000));
      // still waiting: the holder could not start meanwhile (the shell had not given up, nor run elsewhere)
      assert.equal(settled, false, 'the call waited for the holder');
      process.kill(spawner, 'SIGCONT');
      const obs = await call;
      const text = obs.content.map((c) => (c.type === 'text' ? c.text : '')).join('');
      assert.equal(obs.exit_code, 0, text);
      assert.match(text, /^joined 42$/m);
    } finally {
      try {
        process.kill(spawner, 'SIGCONT');
      } catch {
        /* gone */
      }
      await t.closeAll();
      await sb.close();
      removeDir(dir);
    }
  });
});

/**
 * An in-process launcher (no spare) and a new conversation of it whose sandbox cannot start: a file sits
 * on the host where its /tmp is made. The log keeps the warnings; with `clearAtFirst` the first warning
 * takes the file away, so that the conversation's next sandbox can start.
 */
async function blockedConversation(clearAtFirst: boolean) {
  const dir = tempDir();
  const workspaceRoot = path.join(dir, 'ws');
  fs.mkdirSync(workspaceRoot, { recursive: true });
  const warnings: { obj: Record<string, unknown>; msg: string }[] = [];
  let obstacle = '';
  const noop = () => {};
  const log = {
    warn: (obj: Record<string, unknown>, msg: string) => {
      warnings.push({ obj, msg });
      if (obstacle && clearAtFirst) fs.rmSync(obstacle);
      obstacle = '';
    },
    info: noop,
    debug: noop,
    error: noop,
    trace: noop,
  };
  const sb = await Sandbox.open({ ...DEFAULT_SANDBOX_SETTINGS, mode: 'bwrap', network: 'none', spareHolder: false }, { workspaceRoot, log: log as never });
  const ctx = newConversation(workspaceRoot);
  const state = stateDirOf(workspaceRoot, ctx.conversationId);
  fs.mkdirSync(state, { recursive: true, mode: 0o700 });
  obstacle = path.join(state, 'tmp');
  fs.writeFileSync(obstacle, '');
  const failed = () => warnings.filter((w) => w.msg === 'a sandbox could not start');
  return { dir, sb, ctx, state, warnings, failed };
}

/** Runs a process joined to the conversation's sandbox: `done` gives its exit code and output. */
function runJoined(sb: Sandbox, ctx: { conversationId: string; workspaceDir: string }, script: string) {
  const c = sb.spawn(ctx.conversationId, ['sh', '-c', script], { env: sb.env(), stdio: ['ignore', 'pipe', 'pipe'], workspaceDir: ctx.workspaceDir });
  let out = '';
  c.stdout!.on('data', (d: Buffer) => (out += d.toString('utf8')));
  c.stderr!.on('data', (d: Buffer) => (out += d.toString('utf8')));
  const done = new Promise<{ code: number | null; out: string }>((resolve) => c.on('close', (code) => resolve({ code, out })));
  return { done };
}

/** A process's cgroup in the v1 `pids` hierarchy (or the v2 one), as the host's /proc names it. */
function pidsCgroup(pid: number): string | undefined {
  const lines = fs.readFileSync(`/proc/${pid}/cgroup`, 'utf8').split('\n');
  return (lines.find((l) => /^\d+:[^:]*\bpids\b[^:]*:/.test(l)) ?? lines.find((l) => l.startsWith('0::')))?.split(':')[2];
}

describe('a sandbox that fails to start under its first processes', { timeout: 180_000 }, () => {
  test("the shell waiting for it joins the conversation's next sandbox; the failure is logged with its reason", async () => {
    const { dir, sb, ctx, state, warnings, failed } = await blockedConversation(true);
    const t = createTerminalTool({ sandbox: sb, noOutputTimeoutMs: 30_000 });
    try {
      const obs = await t.execute(t.parameters.parse({ command: 'echo "joined $((6 * 7))"' }), ctx);
      const text = obs.content.map((c) => (c.type === 'text' ? c.text : '')).join('');
      assert.equal(obs.exit_code, 0, text);
      assert.match(text, /^joined 42$/m);
      assert.equal(failed().length, 1, JSON.stringify(warnings));
      assert.equal(failed()[0]!.obj.holder, 'conversation');
      assert.match(String(failed()[0]!.obj.err), /EEXIST/);
      assert.ok(fs.statSync(path.join(state, 'tmp')).isDirectory(), "the second sandbox's /tmp");
      // the next command runs in the same (second) sandbox's shell
      const again = await t.execute(t.parameters.parse({ command: 'echo "still $((6 * 7))"' }), ctx);
      assert.match(again.content.map((c) => (c.type === 'text' ? c.text : '')).join(''), /^still 42$/m);
      assert.equal(warnings.length, 1, JSON.stringify(warnings));
    } finally {
      await t.closeAll();
      await sb.close();
      removeDir(dir);
    }
  });

  test("any joined process (an MCP server's, git's) joins the next sandbox, inside its namespaces and cgroup, as seen from the host", async (t) => {
    const { dir, sb, ctx, warnings, failed } = await blockedConversation(true);
    try {
      // three processes wait for the first sandbox together; each joins the second, the same one
      // (a sleep of a length only this test uses: found among the host's processes by its command line)
      const secs = (i: number) => 400_000 + (process.pid % 10_000) * 10 + i;
      const runs = [0, 1, 2].map((i) => runJoined(sb, ctx, `echo "in $$"; exec sleep ${secs(i)}`));
      const started = await Promise.all(runs.map(async (_, i) => (await waitFor(() => hostPid(`sleep ${secs(i)}`), `joined process ${i} runs`, 30_000))!));
      assert.equal(failed().length, 1, JSON.stringify(warnings));
      const ns = started.map((p) => fs.readlinkSync(`/proc/${p}/ns/pid`));
      assert.equal(new Set(ns).size, 1, `one sandbox: ${ns.join(' ')}`);
      assert.notEqual(ns[0], fs.readlinkSync('/proc/self/ns/pid'), "in the sandbox's pid namespace, not the host's");
      assert.notEqual(fs.readlinkSync(`/proc/${started[0]}/ns/mnt`), fs.readlinkSync('/proc/self/ns/mnt'));
      // in the second sandbox's cgroup (its init's), when the sandbox limits by cgroup
      if (sb.info().limits.pids !== null) {
        const init = fs
          .readdirSync('/proc')
          .filter((n) => /^\d+$/.test(n))
          .map(Number)
          .find((p) => {
            try {
              return fs.readlinkSync(`/proc/${p}/ns/pid`) === ns[0] && /^NSpid:\s+\d+\s+1$/m.test(fs.readFileSync(`/proc/${p}/status`, 'utf8'));
            } catch {
              return false;
            }
          })!;
        const cg = pidsCgroup(init);
        assert.ok(cg && cg !== pidsCgroup(process.pid), `the sandbox's own cgroup: ${cg}`);
        for (const p of started) assert.equal(pidsCgroup(p), cg, `joined process ${p}`);
      } else t.diagnostic('the sandbox limits without cgroups here: no cgroup to check');
      for (const p of started) process.kill(p, 'SIGKILL');
      for (const r of runs) assert.match((await r.done).out, /^in \d+$/m);
    } finally {
      await sb.close();
      removeDir(dir);
    }
  });

  test('a joined process whose next sandbox fails too exits, saying so: no third sandbox is started', async () => {
    // (the file stays: every sandbox of the conversation fails)
    const { dir, sb, ctx, warnings, failed } = await blockedConversation(false);
    try {
      const r = await runJoined(sb, ctx, 'echo "ran"').done;
      assert.equal(r.code, 125, r.out);
      assert.match(r.out, /parley: the conversation's sandbox is not running/);
      assert.doesNotMatch(r.out, /ran/);
      assert.equal(failed().length, 2, JSON.stringify(warnings));
      assert.ok(failed().every((w) => /EEXIST/.test(String(w.obj.err))));
    } finally {
      await sb.close();
      removeDir(dir);
    }
  });
});

/** The host pid of the one process whose command line is `cmdline` (spaces for NULs), if it runs. */
function hostPid(cmdline: string): number | undefined {
  for (const name of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      if (fs.readFileSync(`/proc/${name}/cmdline`, 'utf8').replace(/\0/g, ' ').trim() === cmdline) return Number(name);
    } catch {
      /* gone meanwhile */
    }
  }
  return undefined;
}

/**
 * An in-process launcher whose file service, in a workspace holding `hold`, takes it away, says it runs
 * (`held`), and starts the real service only once the workspace holds `release`.
 */
async function holdingSandbox(dir: string, workspaceRoot: string, log?: unknown): Promise<Sandbox> {
  const standIn = path.join(dir, 'stand-in.mjs');
  fs.writeFileSync(
    standIn,
    [
      "import fs from 'node:fs';",
      "import { spawn } from 'node:child_process';",
      "const as = process.argv.indexOf('--as'); if (as > 0) { " +
        "const [u, g] = process.argv[as + 1].split(':').map(Number); process.setegid(g); process.seteuid(u); }",
      "if (fs.existsSync('/workspace/hold')) { fs.rmSync('/workspace/hold'); fs.writeFileSync('/workspace/held', '');",
      "while (!fs.existsSync('/workspace/release')) await new Promise((r) => setTimeout(r, 20)); }",
      RUN_REAL_SERVICE_JS,
    ].join('\n'),
    { mode: 0o644 },
  );
  fs.chmodSync(dir, 0o755);
  return Sandbox.open(
    // (the real service, which the stand-in imports, is in this checkout: shown read-only)
    { ...DEFAULT_SANDBOX_SETTINGS, mode: 'bwrap', network: 'none', spareHolder: false, roBinds: [ROOT] },
    { workspaceRoot, fileService: standIn, log: log as never },
  );
}

describe("a sandbox's file service still starting", { timeout: 180_000 }, () => {
  test('the shell joins and runs before the service answers; a file operation waits for it', async () => {
    const dir = tempDir();
    const workspaceRoot = path.join(dir, 'ws');
    fs.mkdirSync(workspaceRoot, { recursive: true });
    const sb = await holdingSandbox(dir, workspaceRoot);
    const t = createTerminalTool({ sandbox: sb, noOutputTimeoutMs: 30_000 });
    const ctx = newConversation(workspaceRoot);
    fs.writeFileSync(path.join(ctx.workspaceDir, 'hold'), '');
    try {
      const obs = await t.execute(t.parameters.parse({ command: 'echo "joined $((6 * 7))"' }), ctx);
      const text = obs.content.map((c) => (c.type === 'text' ? c.text : '')).join('');
      assert.equal(obs.exit_code, 0, text);
      assert.match(text, /^joined 42$/m);
      // the service was held all along: it has not started the real one
      await waitFor(() => fs.existsSync(path.join(ctx.workspaceDir, 'held')), 'the stand-in runs', 30_000);
      const files = sb.files(ctx.conversationId, ctx.workspaceDir);
      let answered = false;
      const wrote = files.write('/workspace/hello.txt', 'hi', { mode: 'exclusive' }).then(() => (answered = true));
      await new Promise((r) => setTimeout(r, 300));
      assert.equal(answered, false, 'a file operation waits for the service');
      fs.writeFileSync(path.join(ctx.workspaceDir, 'release'), '');
      await wrote;
      assert.equal(fs.readFileSync(path.join(ctx.workspaceDir, 'hello.txt'), 'utf8'), 'hi');
    } finally {
      await t.closeAll();
      await sb.close();
      removeDir(dir);
    }
  });

  test("a service that never answers ends its sandbox within the start's 30 s; the next one serves the file operation", async () => {
    const dir = tempDir();
    const workspaceRoot = path.join(dir, 'ws');
    fs.mkdirSync(workspaceRoot, { recursive: true });
    const warnings: { obj: Record<string, unknown>; msg: string }[] = [];
    const noop = () => {};
    const log = { warn: (obj: Record<string, unknown>, msg: string) => warnings.push({ obj, msg }), info: noop, debug: noop, error: noop, trace: noop };
    const sb = await holdingSandbox(dir, workspaceRoot, log);
    const ctx = newConversation(workspaceRoot);
    // the first sandbox's service is held and never released; the next one's finds no `hold`
    fs.writeFileSync(path.join(ctx.workspaceDir, 'hold'), '');
    try {
      await sb.files(ctx.conversationId, ctx.workspaceDir).write('/workspace/hello.txt', 'hi', { mode: 'exclusive' });
      assert.equal(fs.readFileSync(path.join(ctx.workspaceDir, 'hello.txt'), 'utf8'), 'hi');
      assert.ok(fs.existsSync(path.join(ctx.workspaceDir, 'held')), 'the first service was held');
      const failed = warnings.filter((w) => w.msg === 'a sandbox could not start');
      assert.equal(failed.length, 1, JSON.stringify(warnings));
      assert.match(String(failed[0]!.obj.err), /did not start within 30 s/);
      // the second sandbox is the conversation's: closing the conversation ends it (judged from the host)
      assert.equal(sb.liveCount, 1);
      assert.equal(fileServices(process.pid).length, 1, 'the second sandbox runs, the first is gone');
      await sb.closeConversation(ctx.conversationId);
      await waitFor(() => fileServices(process.pid).length === 0, "the conversation's sandbox ended", 30_000);
    } finally {
      await sb.close();
      removeDir(dir);
    }
  });
});
