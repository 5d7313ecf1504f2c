/**
 * Side channels: /api/file/upload and /download.
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
import { CANARY, TRIES, swappingConversation, type SwappingConversation } from './support/attack.js';

describe('uploads and downloads against a swapping agent', { timeout: 170_000 }, () => {
  let c: SwappingConversation;
  before(async () => {
    c = await swappingConversation();
  });
  after(() => c?.close());

  test(`${TRIES}× each of upload, download and download of a canary's name through the swapped directory: no canary, no 5xx, no host path`, async () => {
    for (let i = 0; i < TRIES; i++) {
      const form = new FormData();
      form.append('file', new Blob([`uploaded ${i}\n`]), 'u.txt');
      const up = await fetch(`${c.d.url}/api/file/upload?${c.q(`/workspace/d/up-${i}.txt`)}`, { method: 'POST', body: form, headers: c.H });
      c.check({ status: up.status, text: await up.text() }, 'upload');
      c.check(await c.d.req('GET', `/api/file/download?${c.q('/workspace/d/f.txt')}`, undefined, c.H), 'download');
      c.check(await c.d.req('GET', `/api/file/download?${c.q('/workspace/d/secret.txt')}`, undefined, c.H), 'download of a canary name');
    }
    c.canary.unchanged();
    assert.equal(fs.readFileSync(c.dataCanary, 'utf8'), `${CANARY} data dir\n`);
    // the attack met both states: 200s (the directory) and refusals (the link)
    assert.ok((c.statuses.get(200) ?? 0) > 0 && (c.statuses.get(403) ?? 0) + (c.statuses.get(422) ?? 0) > 0, JSON.stringify([...c.statuses]));
  });
});
