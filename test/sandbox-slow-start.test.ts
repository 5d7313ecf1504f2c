/**
 * A sandboxed shell waits for its sandbox as long as the sandbox may take to start. The shell joins
 * its conversation's holder, which may still be starting on a loaded machine: the shell's own start
 * allowance (10 s) must not run out first. Made slow from the host: the spawner that starts holders is
 * stopped (SIGSTOP) when a conversation's first command comes, and let go 12 s later (past the shell's
 * allowance, within the holder's 30 s). Real bwrap, the in-process launcher, no spare holder.
 */
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { describe, test } from 'node:test';
import { DEFAULT_SANDBOX_SETTINGS, Sandbox } from '../src/sandbox/launcher.js';
import { createTerminalTool } from '../src/tools/terminal/tool.js';
import { removeDir, tempDir } from './support/daemon.js';

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

describe('a sandboxed shell and a sandbox slow to start', { timeout: 180_000 }, () => {
  test('the shell waits for a holder still starting past its own 10 s, and the command runs once the holder is up', async () => {
    const dir = tempDir();
    const workspaceRoot = path.join(dir, 'ws');
    fs.mkdirSync(workspaceRoot, { recursive: true });
    const sb = await Sandbox.open({ ...DEFAULT_SANDBOX_SETTINGS, mode: 'bwrap', network: 'none', spareHolder: false }, { workspaceRoot });
    const t = createTerminalTool({ sandbox: sb, noOutputTimeoutMs: 30_000 });
    const id = crypto.randomUUID();
    const ctx = {
      conversationId: id,
      workspaceDir: path.join(workspaceRoot, id.replace(/-/g, '')),
      signal: new AbortController().signal,
      env: {},
      redact: (s: string) => s,
    };
    fs.mkdirSync(ctx.workspaceDir);
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
