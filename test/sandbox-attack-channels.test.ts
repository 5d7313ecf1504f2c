/**
 * The sandbox attacked the way a prompt-injected agent would (issue 20.2, 20.3), judged from the
 * host. Inside its sandbox, the agent swaps a directory of its workspace with a symbolic link to a
 * host directory in a tight loop (renameat2 RENAME_EXCHANGE), while every file operation the daemon
 * does for the conversation — the file editor's view, create, str_replace, insert and undo_edit,
 * and the side channels' upload, download, git changes, git diff and bash cwd — is tried hundreds
 * of times through that directory. The host directory holds canaries (a 0600 file, a file the
 * sandbox's uid could read if it ever saw it): none may be read, listed, created or removed, and no
 * answer is a 5xx. Then FIFOs and endless files left behind an undo_edit: nothing stalls the daemon.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { CANARY, ROOT_RUN, SWAPPER, TRIES, canaryDir } from './support/attack.js';
import { startDaemon, waitFor, type DaemonHandle } from './support/daemon.js';
import { startScriptedLlm, type ScriptedLlm } from './support/scripted-llm.js';

describe('side channels and the daemon against a swapping agent', { timeout: 900_000 }, () => {
  let d: DaemonHandle;
  let llm: ScriptedLlm;
  let canary: ReturnType<typeof canaryDir>;
  let dataCanary: string;
  const key = 'attack-session-key-0042';
  const H = { 'X-Session-API-Key': key };
  let id: string;
  let ws: string;

  before(async () => {
    llm = await startScriptedLlm();
    canary = canaryDir('parley-canary-sc-');
    d = await startDaemon({ LLM_MODEL: 'openai/scripted', LLM_BASE_URL: llm.url, SESSION_API_KEY: key, SANDBOX: 'bwrap', SANDBOX_NETWORK: 'none' });
    // a 0600 file of the daemon's own, as the report's `GET /api/git/diff` read one
    dataCanary = path.join(d.dataDir, 'canary-0600.txt');
    fs.writeFileSync(dataCanary, `${CANARY} data dir\n`, { mode: 0o600 });
    const r = await d.req('POST', '/api/conversations', {}, H);
    id = r.body.conversation_id;
    ws = path.join(d.dataDir, 'workspaces', id.replace(/-/g, ''));
    // a repository, so git changes and diff have work to do
    const started = await d.req(
      'POST',
      '/api/bash/execute_bash_command',
      { command: 'git init -q . && git -c user.email=a@b -c user.name=a commit -q --allow-empty -m init && echo ok', conversation_id: id, timeout: 60 },
      H,
    );
    assert.match(String(started.body.stdout), /ok/, JSON.stringify(started.body));
    const script = Buffer.from(SWAPPER).toString('base64');
    const swap = await d.req('POST', '/api/bash/start_bash_command', { command: `echo ${script} | base64 -d > /tmp/swap.py && python3 /tmp/swap.py /workspace ${canary.dir} > /dev/null 2>&1`, conversation_id: id, timeout: 3600 }, H);
    assert.equal(swap.status, 200, swap.text);
    await waitFor(() => fs.existsSync(path.join(ws, 'swapping')), 'the swapper runs', 60_000);
  });
  after(async () => {
    if (ws) fs.writeFileSync(path.join(ws, 'stop'), '');
    await d?.stop();
    await llm?.close();
  });

  test(`${TRIES}× each of upload and download, ${TRIES / 4}× git changes and git diff, a bash cwd, through the swapped directory: no canary, no 5xx`, async () => {
    const statuses = new Map<number, number>();
    const check = (r: { status: number; text: string }, what: string) => {
      statuses.set(r.status, (statuses.get(r.status) ?? 0) + 1);
      assert.ok(r.status < 500, `${what}: ${r.status} ${r.text.slice(0, 300)}`);
      assert.ok(!r.text.includes(CANARY), `${what} answered a canary: ${r.text.slice(0, 300)}`);
      assert.ok(!r.text.includes(canary.dir) && !r.text.includes(d.dataDir), `${what} named a host path: ${r.text.slice(0, 300)}`);
    };
    const q = (p: string) => `conversation_id=${id}&path=${encodeURIComponent(p)}`;
    for (let i = 0; i < TRIES; i++) {
      const form = new FormData();
      form.append('file', new Blob([`uploaded ${i}\n`]), 'u.txt');
      const up = await fetch(`${d.url}/api/file/upload?${q(`/workspace/d/up-${i}.txt`)}`, { method: 'POST', body: form, headers: H });
      check({ status: up.status, text: await up.text() }, 'upload');
      check(await d.req('GET', `/api/file/download?${q('/workspace/d/f.txt')}`, undefined, H), 'download');
      check(await d.req('GET', `/api/file/download?${q('/workspace/d/secret.txt')}`, undefined, H), 'download of a canary name');
      // git starts a process in the sandbox for each call: a quarter as many
      if (i % 4 === 0) {
        check(await d.req('GET', `/api/git/changes?${q('/workspace/d')}`, undefined, H), 'git changes');
        check(await d.req('GET', `/api/git/diff?${q('/workspace/d/secret.txt')}`, undefined, H), 'git diff');
        check(await d.req('GET', `/api/git/diff?${q(`${ws}/d/f.txt`)}`, undefined, H), 'git diff by host path');
      }
      if (i % 20 === 0) {
        const b = await d.req('POST', '/api/bash/execute_bash_command', { command: 'ls; cat secret.txt f.txt 2>&1; pwd', cwd: '/workspace/d', conversation_id: id, timeout: 30 }, H);
        check(b, 'bash in the swapped directory');
      }
    }
    canary.unchanged();
    assert.equal(fs.readFileSync(dataCanary, 'utf8'), `${CANARY} data dir\n`);
    // the attack met both states: 200s (the directory) and refusals (the link)
    assert.ok((statuses.get(200) ?? 0) > 0 && (statuses.get(403) ?? 0) + (statuses.get(422) ?? 0) > 0, JSON.stringify([...statuses]));
  });

  test("the conversation's /tmp, HOME, FIFO and output directories: the daemon never follows what the agent puts there", async () => {
    // the agent tries to replace the terminal's FIFO directory and plant links where the daemon writes
    const r = await d.req(
      'POST',
      '/api/bash/execute_bash_command',
      { command: `ls -ld /parley/io /parley/outputs; ln -s ${canary.dir} /parley/io/x 2>&1; touch /parley/outputs/x 2>&1; echo done`, conversation_id: id, timeout: 30 },
      H,
    );
    assert.match(String(r.body.stdout) + String(r.body.stderr), /done/);
    if (ROOT_RUN) assert.match(String(r.body.stdout) + String(r.body.stderr), /ln: failed to create symbolic link '\/parley\/io\/x': Permission denied/, 'the FIFO directory is the daemon\'s: the sandbox cannot add to it');
    assert.match(String(r.body.stdout) + String(r.body.stderr), /Read-only file system|Permission denied/, 'outputs are read-only inside');
    canary.unchanged();
  });
});

