/**
 * file_editor: view (directory and file), create, str_replace, insert, undo_edit.
 *
 * The sandbox attacked the way a prompt-injected agent would, judged from the host.
 * Inside its sandbox the agent swaps a directory of its workspace with a symbolic link to a host
 * directory in a tight loop (renameat2 RENAME_EXCHANGE, test/support/attack.ts) while the daemon
 * works through that directory for the conversation. The host directory holds canaries (a 0600 file,
 * files the sandbox's uid could read if it ever saw them): none may be read, listed, created or
 * removed, no answer is a 5xx or names a host path, and the attack must meet both states (the
 * directory and the link), so it can fail.
 */
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { Sandbox } from '../src/sandbox/launcher.js';
import { createFileEditorTool, type FileEditorTool } from '../src/tools/file-editor.js';
import type { ToolContext } from '../src/tools/types.js';
import { CANARY, RUN_AS, SWAPPER, TRIES, canaryDir } from './support/attack.js';
import { tempDir, waitFor } from './support/daemon.js';

describe('file_editor against a swapping agent (the tool over a real bwrap sandbox)', { timeout: 600_000 }, () => {
  let root: string;
  let sb: Sandbox;
  let tool: FileEditorTool;
  const id = crypto.randomUUID();
  let ctx: ToolContext;
  let canary: ReturnType<typeof canaryDir>;

  before(async () => {
    root = tempDir('parley-attack-fe-');
    canary = canaryDir('parley-canary-fe-');
    sb = await Sandbox.open(
      { mode: 'bwrap', network: 'none', memoryMb: 512, pids: 128, fileSizeMb: 64, maxLive: 8, roBinds: [], runAs: RUN_AS },
      { workspaceRoot: root },
    );
    tool = createFileEditorTool({ files: (c) => sb.files(c.conversationId, c.workspaceDir) });
    ctx = { conversationId: id, workspaceDir: sb.hostWorkspace(id), signal: new AbortController().signal, env: {}, redact: (t) => t };
    sb.spawn(id, ['python3', '-c', SWAPPER, '/workspace', canary.dir], { env: sb.env(), stdio: 'ignore' });
    await waitFor(() => fs.existsSync(path.join(sb.hostWorkspace(id), 'swapping')), 'the swapper runs', 60_000);
  });
  after(async () => {
    fs.writeFileSync(path.join(sb.hostWorkspace(id), 'stop'), '');
    await sb.close();
  });

  const ed = (params: Record<string, unknown>) => tool.execute(tool.parameters.parse(params), ctx);
  const text = (o: { content: { type: string; text?: string }[] }) => o.content.map((c) => c.text ?? '').join('');

  test(`${TRIES}× each of view (dir, file), create, str_replace, insert, undo_edit via the swapped dir: no canary read, listed, created, removed`, async () => {
    const outcomes = new Map<string, number>();
    const note = (k: string) => outcomes.set(k, (outcomes.get(k) ?? 0) + 1);
    for (let i = 0; i < TRIES; i++) {
      const obs = [
        await ed({ command: 'view', path: '/workspace/d' }),
        await ed({ command: 'view', path: '/workspace/d/f.txt' }),
        await ed({ command: 'view', path: '/workspace/d/secret.txt' }),
        await ed({ command: 'create', path: `/workspace/d/new-${i}.txt`, file_text: 'x\n' }),
        await ed({ command: 'undo_edit', path: `/workspace/d/new-${i}.txt` }),
        await ed({ command: 'create', path: `/workspace/d/sub/n-${i}.txt`, file_text: 'y\n' }),
        await ed({ command: 'str_replace', path: '/workspace/d/f.txt', old_str: 'line two', new_str: `line two ${i}` }),
        await ed({ command: 'insert', path: '/workspace/d/f.txt', insert_line: 0, new_str: `top ${i}` }),
        await ed({ command: 'undo_edit', path: '/workspace/d/f.txt' }),
        await ed({ command: 'undo_edit', path: `/workspace/d/sub/n-${i}.txt` }),
      ];
      for (const o of obs) {
        const t = text(o);
        assert.ok(!t.includes(CANARY), `a canary was read: ${t.slice(0, 300)}`);
        assert.ok(!t.includes(canary.dir), `the host directory was listed or named: ${t.slice(0, 300)}`);
        note(o.is_error ? (/outside the workspace/.test(t) ? 'refused: outside' : 'error') : 'ok');
      }
    }
    canary.unchanged();
    // the attack really ran: some operations met the link, others the directory
    assert.ok((outcomes.get('refused: outside') ?? 0) > 0 && (outcomes.get('ok') ?? 0) > 0, JSON.stringify([...outcomes]));
  });
});
