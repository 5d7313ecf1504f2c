/**
 * A conversation's disk image is let go once its sandbox is gone: closed while idle, the image is
 * unmounted and its loop device detached; deleted, the image's blocks go back to the data disk. The
 * daemon kept an fd on each holder's /workspace after the holder ended, which held the filesystem
 * mounted (in no namespace), the loop device attached and a deleted image allocated until the daemon
 * stopped. Judged from the host: /sys/block/loop* and the daemon's fds.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { describe, test } from 'node:test';
import { waitFor } from './support/daemon.js';
import { terminalTurn, useScriptedDaemon } from './support/scripted-daemon.js';

/** The loop devices whose backing file is under `dir` (a deleted one keeps its path, marked "(deleted)"), with their device numbers. */
function loopsUnder(dir: string): { name: string; backing: string; dev: string }[] {
  const out: { name: string; backing: string; dev: string }[] = [];
  for (const name of fs.readdirSync('/sys/block').filter((b) => b.startsWith('loop'))) {
    try {
      const backing = fs.readFileSync(`/sys/block/${name}/loop/backing_file`, 'utf8').trim();
      if (backing.startsWith(`${dir}/`)) out.push({ name, backing, dev: fs.readFileSync(`/sys/block/${name}/dev`, 'utf8').trim() });
    } catch {
      /* not attached */
    }
  }
  return out;
}

/** The daemon's fds on a filesystem of device `dev` ("major:minor"). */
function fdsOn(pid: number, dev: string): string[] {
  const [major, minor] = dev.split(':').map(Number) as [number, number];
  const out: string[] = [];
  for (const fd of fs.readdirSync(`/proc/${pid}/fd`)) {
    try {
      const st = fs.statSync(`/proc/${pid}/fd/${fd}`);
      // (st_dev as the kernel packs it: major in bits 8–19, minor in bits 0–7 and 20–31)
      if (((st.dev >> 8) & 0xfff) === major && ((st.dev & 0xff) | ((st.dev >> 12) & 0xfff00)) === minor)
        out.push(`${fd} → ${fs.readlinkSync(`/proc/${pid}/fd/${fd}`)}`);
    } catch {
      /* closed meanwhile */
    }
  }
  return out;
}

/**
 * The daemon's fds on the filesystem the loop device `loop` held, once that device was detached. A detached
 * device is attached again for the next image made (a spare's, a conversation's beside this one): its number
 * is then another filesystem's, and the fds on it are that one's. (The old filesystem held the device while
 * anything held it, so its detach already says that nothing did.)
 */
function fdsOnDetached(pid: number, loop: { name: string; backing: string; dev: string }): string[] {
  let now: string | null = null;
  try {
    now = fs.readFileSync(`/sys/block/${loop.name}/loop/backing_file`, 'utf8').trim();
  } catch {
    /* not attached */
  }
  if (now !== null && now.replace(/ \(deleted\)$/, '') !== loop.backing.replace(/ \(deleted\)$/, '')) return [];
  return fdsOn(pid, loop.dev);
}

describe("a conversation's disk image is let go with its sandbox", { timeout: 300_000 }, () => {
  const s = useScriptedDaemon({ SANDBOX: 'bwrap', SANDBOX_NETWORK: 'none', SANDBOX_DISK: 'image', SANDBOX_IDLE_CLOSE_MS: '2000' });
  const stateOf = (id: string) => path.join(s.d.dataDir, 'workspaces', '.sandbox', id.replace(/-/g, ''));
  const ours = (id: string) => loopsUnder(stateOf(id));

  test('closed while idle: its loop device is detached and the daemon holds nothing on its filesystem', async () => {
    const id = (await s.d.req('POST', '/api/conversations', {})).body.conversation_id;
    assert.match(await terminalTurn(s, id, 'echo kept > kept.txt && echo made'), /^made$/m);
    const [loop] = ours(id);
    assert.ok(loop, 'the image is on a loop device while the sandbox runs');
    await waitFor(() => ours(id).length === 0, `the loop device detached after the idle close (${loop.name})`, 60_000);
    assert.deepEqual(fdsOnDetached(s.d.proc.pid!, loop), [], "no fd of the daemon on the image's filesystem");
    // and it comes back with its files
    assert.match(await terminalTurn(s, id, 'cat kept.txt'), /^kept$/m);
  });

  test("deleted: its image's loop device is detached while the daemon runs (the image's blocks go back to the data disk)", async () => {
    const id = (await s.d.req('POST', '/api/conversations', {})).body.conversation_id;
    // data the image holds (its blocks on the data disk)
    assert.match(await terminalTurn(s, id, 'head -c 8388608 /dev/urandom > big.bin && sync && echo written'), /^written$/m);
    const [loop] = ours(id);
    assert.ok(loop, 'the image is on a loop device');
    assert.equal((await s.d.req('DELETE', `/api/conversations/${id}`)).status, 200);
    await waitFor(() => ours(id).length === 0, `the deleted image's loop device detached (${loop.name})`, 60_000);
    // (its file unlinked, the image's blocks are freed with the last reference to it, which was the loop device;
    // the data disk's free space itself is not asked: the tests running beside this one move it too)
    assert.deepEqual(fdsOnDetached(s.d.proc.pid!, loop), [], "no fd of the daemon on the image's filesystem");
  });
});
