/**
 * Side channels: /api/git/changes and /diff, /api/bash with a cwd; the FIFO and output directories.
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
import fs from 'node:fs';
import { after, before, describe, test } from 'node:test';
import { CANARY, ROOT_RUN, TRIES, swappingConversation, type SwappingConversation } from './support/attack.js';

describe("git, bash and the conversation's directories against a swapping agent", { timeout: 420_000 }, () => {
  let c: SwappingConversation;
  before(async () => {
    c = await swappingConversation();
  });
  after(() => c?.close());

  // git starts a process in the sandbox for each call (no file of it is read by the daemon but the
  // diff's current side, through the file service as the downloads are): a quarter as many tries
  test(`${TRIES / 4}× each of git changes, git diff (conversation or host path), bash cwd, via the swapped dir: no canary, no 5xx, no host path`, async () => {
    for (let i = 0; i < TRIES / 4; i++) {
      c.check(await c.d.req('GET', `/api/git/changes?${c.q('/workspace/d')}`, undefined, c.H), 'git changes');
      c.check(await c.d.req('GET', `/api/git/diff?${c.q('/workspace/d/secret.txt')}`, undefined, c.H), 'git diff');
      c.check(await c.d.req('GET', `/api/git/diff?${c.q(`${c.ws}/d/f.txt`)}`, undefined, c.H), 'git diff by host path');
      if (i % 5 === 0) {
        const b = await c.d.req(
          'POST',
          '/api/bash/execute_bash_command',
          { command: 'ls; cat secret.txt f.txt 2>&1; pwd', cwd: '/workspace/d', conversation_id: c.id, timeout: 30 },
          c.H,
        );
        c.check(b, 'bash in the swapped directory');
      }
    }
    c.canary.unchanged();
    assert.equal(fs.readFileSync(c.dataCanary, 'utf8'), `${CANARY} data dir\n`);
  });

  test("the conversation's FIFO and output directories: the agent cannot plant anything where the daemon makes FIFOs or saves outputs", async () => {
    const r = await c.d.req(
      'POST',
      '/api/bash/execute_bash_command',
      {
        command: `ls -ld /parley/io /parley/outputs; ln -s ${c.canary.dir} /parley/io/x 2>&1; touch /parley/outputs/x 2>&1; echo done`,
        conversation_id: c.id,
        timeout: 30,
      },
      c.H,
    );
    const out = String(r.body.stdout) + String(r.body.stderr);
    assert.match(out, /done/);
    if (ROOT_RUN)
      assert.match(
        out,
        /ln: failed to create symbolic link '\/parley\/io\/x': Permission denied/,
        "the FIFO directory is the daemon's: the sandbox cannot add to it",
      );
    assert.match(out, /Read-only file system|Permission denied/, 'outputs are read-only inside');
    c.canary.unchanged();
  });
});
