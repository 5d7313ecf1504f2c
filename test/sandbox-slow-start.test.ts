/**
 * A sandboxed shell waits for its sandbox as long as the sandbox may take to start. The shell joins
 * its conversation's holder, which may still be starting on a loaded machine: the shell's own start
 * allowance (10 s) must not run out first. Made slow from the host: the spawner that starts holders is
 * stopped (SIGSTOP) when a conversation's first command comes, and let go 12 s later (past the shell's
 * allowance, within the holder's 30 s). And a sandbox that fails to start under the shell: the shell
 * is started once more, in a new one. Real bwrap, the in-process launcher, no spare holder.
 */
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { describe, test } from 'node:test';
import { DEFAULT_SANDBOX_SETTINGS, Sandbox } from '../src/sandbox/launcher.js';
import { FILE_HELPER } from '../src/sandbox/view.js';
import { createTerminalTool } from '../src/tools/terminal/tool.js';
import { removeDir, ROOT, tempDir } from './support/daemon.js';

/** The sandbox's spawner (spawner-process.mjs): a process of this test's, found in the host's /proc. */
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

describe('a sandbox that fails to start under the shell', { timeout: 180_000 }, () => {
  test("the shell is started once more in a new sandbox; the failure is logged with bwrap's reason", async () => {
    const dir = tempDir();
    const workspaceRoot = path.join(dir, 'ws');
    fs.mkdirSync(workspaceRoot, { recursive: true });
    // a file service that ends before its first answer when its workspace holds the marker, which it
    // removes first: the conversation's first sandbox fails to start, the next one starts
    const standIn = path.join(dir, 'stand-in.mjs');
    fs.writeFileSync(
      standIn,
      [
        "import fs from 'node:fs';",
        "const as = process.argv.indexOf('--as'); if (as > 0) { " +
          "const [u, g] = process.argv[as + 1].split(':').map(Number); process.setegid(g); process.seteuid(u); }",
        "if (fs.existsSync('/workspace/fail-once')) { fs.rmSync('/workspace/fail-once'); process.stderr.write('stand-in: failing once\\n'); process.exit(3); }",
        `await import(${JSON.stringify(FILE_HELPER)});`,
      ].join('\n'),
      { mode: 0o644 },
    );
    fs.chmodSync(dir, 0o755);
    const warnings: { obj: Record<string, unknown>; msg: string }[] = [];
    const noop = () => {};
    const log = { warn: (obj: Record<string, unknown>, msg: string) => warnings.push({ obj, msg }), info: noop, debug: noop, error: noop, trace: noop };
    const sb = await Sandbox.open(
      // (the real service, which the stand-in imports, is in this checkout: shown read-only)
      { ...DEFAULT_SANDBOX_SETTINGS, mode: 'bwrap', network: 'none', spareHolder: false, roBinds: [ROOT] },
      { workspaceRoot, fileHelper: standIn, log: log as never },
    );
    const t = createTerminalTool({ sandbox: sb, noOutputTimeoutMs: 30_000 });
    const ctx = newConversation(workspaceRoot);
    const marker = path.join(ctx.workspaceDir, 'fail-once');
    fs.writeFileSync(marker, '');
    try {
      const obs = await t.execute(t.parameters.parse({ command: 'echo "joined $((6 * 7))"; ls -A /workspace | wc -l' }), ctx);
      const text = obs.content.map((c) => (c.type === 'text' ? c.text : '')).join('');
      assert.equal(obs.exit_code, 0, text);
      assert.match(text, /^joined 42$/m);
      assert.match(text, /^0$/m, 'the marker is gone: the first sandbox started its service and failed');
      assert.ok(!fs.existsSync(marker), 'removed on the host');
      const failed = warnings.filter((w) => w.msg === 'a sandbox could not start');
      assert.equal(failed.length, 1, JSON.stringify(warnings));
      assert.equal(failed[0]!.obj.holder, 'conversation');
      assert.match(String(failed[0]!.obj.err), /stand-in: failing once|exit code 3/);
      // the next command runs in the same (second) sandbox's shell
      const again = await t.execute(t.parameters.parse({ command: 'echo "still $((6 * 7))"' }), ctx);
      assert.match(again.content.map((c) => (c.type === 'text' ? c.text : '')).join(''), /^still 42$/m);
    } finally {
      await t.closeAll();
      await sb.close();
      removeDir(dir);
    }
  });
});
