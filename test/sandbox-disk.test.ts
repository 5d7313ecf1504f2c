/**
 * What a sandbox holds on disk counts, files it unlinked while holding them open included, judged
 * from the host by the data disk's own numbers (statfs of a tmpfs this test mounts for DATA_DIR):
 * - a disk image per conversation (a root daemon's default): three processes writing to deleted
 *   files get ENOSPC at SANDBOX_DISK_MB, and the data disk grows by no more than that;
 * - measured (SANDBOX_DISK=measured, as without root or in cluster mode): the daemon counts the
 *   unlinked files from the host and stops the conversation (DiskQuotaExceeded), which frees them;
 * - disk relief on a full data disk stops the conversation holding the space in unlinked files,
 *   not an innocent one with more visible files.
 * Root only (mounting the tmpfs, images, cgroups).
 */
import assert from 'node:assert/strict';
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { once } from 'node:events';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { Disks, type DiskTools, findDiskTools, imageBytes, imageMount } from '../src/sandbox/disk-image.js';
import { findProgram } from '../src/sandbox/programs.js';
import { Spawner } from '../src/sandbox/spawner.js';
import { allEvents } from './support/conversation-api.js';
import { removeDir, startDaemon, tempDir, waitFor, type DaemonHandle } from './support/daemon.js';
import { startScriptedLlm, type ScriptedLlm } from './support/scripted-llm.js';

const ROOT_RUN = process.getuid?.() === 0;
const MiB = 1024 * 1024;

/**
 * A writer (python3 in the sandbox): opens a file, unlinks it, writes 1 MiB at a time (`pace`
 * seconds apart, at most `max`) until a write fails, writes what happened over the start of
 * `result` (made first: once the disk is full no new block can be had), and keeps the file open.
 * It starts writing once each of the `n` writers has made its result file (`res-*` beside its
 * own): on a loaded machine one that started late found the disk filled by the others and could
 * not make its own.
 */
const WRITER = String.raw`
import errno, os, sys, time
path, result, pace, most, writers = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
r = open(result, 'wb', buffering=0)
r.write(b' ' * 64)
f = open(path, 'wb', buffering=0)
os.unlink(path)
here = os.path.dirname(result)
while len([n for n in os.listdir(here) if n.startswith('res-')]) < writers:
    time.sleep(0.01)
chunk, n, what = b'x' * (1 << 20), 0, 'NOLIMIT'
try:
    while n < most:
        f.write(chunk)
        n += 1
        if pace: time.sleep(pace)
except OSError as e:
    what = errno.errorcode.get(e.errno, str(e.errno))
r.seek(0)
r.write(('%s %d\n' % (what, n)).encode())
r.close()
time.sleep(600)
`;

/** Used bytes of the file system at `dir` (what df says). */
function used(dir: string): number {
  const s = fs.statfsSync(dir);
  return (s.blocks - s.bfree) * s.bsize;
}

/**
 * One turn running `command`: its output. `toEnd: false` returns once the command answered, without waiting for the
 * run to end (a run whose last append waits for disk relief to free the space its own processes hold).
 */
async function turn(d: DaemonHandle, llm: ScriptedLlm, id: string, command: string, timeout = 120, toEnd = true): Promise<string> {
  const before = (await allEvents(d.req, id)).length;
  llm.push({ toolCalls: [{ name: 'terminal', arguments: { command, timeout } }] }, { text: 'done' });
  assert.equal((await d.req('POST', `/api/conversations/${id}/events`, { content: [{ text: 'go' }], run: true })).status, 200);
  const obs = await waitFor(
    async () => (await allEvents(d.req, id)).slice(before).find((e) => e.kind === 'ObservationEvent')?.observation,
    'the command answered',
    150_000,
  );
  if (toEnd) await waitFor(async () => (await d.req('GET', `/api/conversations/${id}`)).body.execution_status !== 'running', 'the turn ended', 120_000);
  return (obs.content as { text?: string }[]).map((c) => c.text ?? '').join('');
}

/** Three writers started in the background (results in /workspace/res-N), the script written first. */
const writers = (pace: number, most: number) =>
  `echo ${Buffer.from(WRITER).toString('base64')} | base64 -d > /tmp/w.py && ` +
  `for i in 1 2 3; do (python3 /tmp/w.py /tmp/held-$i /workspace/res-$i ${pace} ${most} 3 > /dev/null 2>&1 &); done; echo writing`;

describe('disk bounds count what a sandbox holds', { skip: !ROOT_RUN && 'needs root: a tmpfs of its own, disk images', timeout: 420_000 }, () => {
  let llm: ScriptedLlm;
  const mounts: string[] = [];
  before(async () => {
    llm = await startScriptedLlm();
  });
  after(async () => {
    await llm?.close();
    for (const m of mounts) {
      try {
        execFileSync('umount', ['-l', m]);
      } catch {
        /* gone */
      }
      removeDir(m);
    }
  });
  /** A data directory on a tmpfs of `mb` MiB of this test's own. */
  const smallDisk = (mb: number) => {
    // (a turn cut short by a stop leaves its final answer in the shared script: each test starts from an empty one)
    llm.clear();
    const mnt = tempDir('parley-disk-');
    execFileSync('mount', ['-t', 'tmpfs', '-o', `size=${mb}m,mode=0700`, 'tmpfs', mnt]);
    mounts.push(mnt);
    return mnt;
  };

  test('a disk image per conversation: three processes writing to deleted files get ENOSPC at SANDBOX_DISK_MB; the data disk grows by no more', async () => {
    const mnt = smallDisk(160);
    const d = await startDaemon(
      // (no journal reserve: it is made in the background and would show in the data disk's numbers)
      { LLM_MODEL: 'openai/scripted', LLM_BASE_URL: llm.url, SANDBOX: 'bwrap', SANDBOX_NETWORK: 'none', SANDBOX_DISK_MB: '32', DISK_RESERVE_MB: '0' },
      path.join(mnt, 'data'),
    );
    try {
      const info = (await d.req('GET', '/server_info')).body.sandbox;
      assert.equal(info.limits.disk, 'image', JSON.stringify(info));
      const id = (await d.req('POST', '/api/conversations', {})).body.conversation_id;
      assert.match(await turn(d, llm, id, 'df -k /workspace /tmp | tail -n +2'), /\s\/workspace\n.*\s\/tmp/, 'the workspace and /tmp are on its disk');
      const base = used(mnt);
      assert.match(await turn(d, llm, id, writers(0, 400)), /writing/);
      const out = await turn(d, llm, id, 'for i in $(seq 600); do [ "$(cat res-* 2>/dev/null | wc -l)" = 3 ] && break; sleep 0.1; done; cat res-*');
      const results = out
        .split('\n')
        .map((l) => l.trim())
        .filter((l) => /^[A-Z]+ \d+$/.test(l));
      assert.equal(results.length, 3, out);
      const written = results.reduce((n, l) => n + Number(l.split(' ')[1]), 0);
      console.log(`image of 32 MiB: ${results.join(', ')}; the data disk grew ${((used(mnt) - base) / MiB).toFixed(1)} MiB`);
      for (const r of results) assert.match(r, /^ENOSPC /);
      assert.ok(written <= 32, `${written} MiB written under a 32 MiB disk`);
      // judged from the host: the data disk holds what the image holds, the deleted files included, and no more than its size
      assert.ok(used(mnt) - base <= 34 * MiB, `the data disk grew ${used(mnt) - base} bytes`);
      assert.ok(used(mnt) - base >= 20 * MiB, 'the deleted files take the data disk, through the image');
      // the conversation goes on within its disk once the writers are gone (closing its sandbox frees what they held)
      await d.req('POST', `/api/conversations/${id}/interrupt`);
      await waitFor(() => used(mnt) - base < 8 * MiB, 'the held blocks given back to the data disk', 60_000).catch((e: Error) => {
        const left = execFileSync(
          'sh',
          ['-c', `du -sk ${mnt}/data/* ${mnt}/data/workspaces/.sandbox/* 2>&1; ps -eo pid,stat,args | grep 'w.py' | grep -v grep; true`],
          { encoding: 'utf8' },
        );
        throw new Error(`${e.message}: ${((used(mnt) - base) / MiB).toFixed(1)} MiB above the start\n${left}`);
      });
      assert.match(await turn(d, llm, id, 'echo fine > /tmp/after && cat /tmp/after'), /fine/);
    } finally {
      await d.stop();
    }
  });

  test('measured (SANDBOX_DISK=measured): files unlinked while held open count; the conversation is stopped and told why, which frees them', async () => {
    const mnt = smallDisk(256);
    const d = await startDaemon(
      {
        LLM_MODEL: 'openai/scripted',
        LLM_BASE_URL: llm.url,
        SANDBOX: 'bwrap',
        SANDBOX_NETWORK: 'none',
        SANDBOX_DISK_MB: '24',
        SANDBOX_DISK: 'measured',
        DISK_RESERVE_MB: '0',
      },
      path.join(mnt, 'data'),
    );
    try {
      assert.equal((await d.req('GET', '/server_info')).body.sandbox.limits.disk, 'measured');
      const id = (await d.req('POST', '/api/conversations', {})).body.conversation_id;
      const base = used(mnt);
      let peak = 0;
      const watch = setInterval(() => (peak = Math.max(peak, used(mnt) - base)), 20);
      try {
        // three writers at 5 MiB/s each, in the background: nothing the walk of names can see (together they
        // reach the 180 MiB below in 12 s: the time the bound has to stop them on a busy machine)
        assert.match(await turn(d, llm, id, writers(0.2, 60)), /writing/);
        const ev = await waitFor(
          async () => (await allEvents(d.req, id)).find((e) => e.kind === 'ConversationErrorEvent' && e.code === 'DiskQuotaExceeded'),
          'the bound to stop the conversation',
          60_000,
        );
        assert.match(ev.detail, /over its 24 MiB/);
        // stopping it ended the writers, and with them what they held (the daemon's own files grow a little meanwhile)
        await waitFor(() => used(mnt) - base < Math.max(8 * MiB, peak - 20 * MiB), 'the held blocks freed', 30_000).catch((e: Error) => {
          throw new Error(`${e.message}: ${((used(mnt) - base) / MiB).toFixed(1)} MiB above the start, ${(peak / MiB).toFixed(1)} at the peak`);
        });
      } finally {
        clearInterval(watch);
      }
      console.log(`measured 24 MiB bound: stopped at a peak of ${(peak / MiB).toFixed(1)} MiB held in deleted files`);
      assert.ok(peak >= 24 * MiB && peak < 180 * MiB, `peak ${peak}`);
    } finally {
      await d.stop();
    }
  });

  test('full data disk: relief stops the conversation holding it in unlinked files, not one with more visible files; the daemon keeps a reserve', async () => {
    const mnt = smallDisk(112);
    const d = await startDaemon(
      { LLM_MODEL: 'openai/scripted', LLM_BASE_URL: llm.url, SANDBOX: 'bwrap', SANDBOX_NETWORK: 'none', SANDBOX_DISK_MB: '0', DISK_RESERVE_MB: '4' },
      path.join(mnt, 'data'),
    );
    try {
      const innocent = (await d.req('POST', '/api/conversations', {})).body.conversation_id;
      const culprit = (await d.req('POST', '/api/conversations', {})).body.conversation_id;
      assert.match(await turn(d, llm, innocent, 'for i in $(seq 30); do head -c 1048576 /dev/zero > big-$i; done; du -sm . | cut -f1'), /^3\d$/m);
      // the culprit's three writers fill what is left of the disk with deleted files, and hold them
      assert.match(await turn(d, llm, culprit, writers(0, 400), 120, false), /writing/);
      const ev = await waitFor(
        async () => (await allEvents(d.req, culprit)).find((e) => e.kind === 'ConversationErrorEvent' && e.code === 'DiskFull'),
        'relief to stop the culprit',
        90_000,
      );
      assert.ok(ev);
      const errors = (await allEvents(d.req, innocent)).filter((e) => e.kind === 'ConversationErrorEvent');
      assert.deepEqual(errors, [], 'the innocent conversation was not stopped');
      // the daemon's own appends went on (its reserve), and the space came back once the culprit's processes were gone
      assert.equal((await d.req('POST', `/api/conversations/${innocent}/events`, { content: [{ text: 'still here' }] })).status, 200);
      await waitFor(() => fs.statfsSync(mnt).bavail * fs.statfsSync(mnt).bsize > 40 * MiB, 'the space given back', 60_000);
      // through the bash route, not a turn: the culprit's run may still hold its scripted answer in the shared queue
      const ls = await d.req('POST', '/api/bash/execute_bash_command', { command: 'ls big-* | wc -l', conversation_id: innocent, timeout: 60 });
      assert.match(String(ls.body.stdout), /^30$/m, "the innocent one's files are all there");
    } finally {
      await d.stop();
    }
  });

  test('disk image: files survive the sandbox (remounted); pre-disk workspaces stay measured dirs; DELETE+KEEP_WORKSPACES leaves a plain dir', async () => {
    const mnt = smallDisk(192);
    const d = await startDaemon(
      {
        LLM_MODEL: 'openai/scripted',
        LLM_BASE_URL: llm.url,
        SANDBOX: 'bwrap',
        SANDBOX_NETWORK: 'none',
        SANDBOX_DISK_MB: '48',
        SANDBOX_IDLE_CLOSE_MS: '1000',
        KEEP_WORKSPACES: '1',
      },
      path.join(mnt, 'data'),
    );
    const ws = (id: string) => path.join(mnt, 'data', 'workspaces', id.replace(/-/g, ''));
    const state = (id: string) => path.join(mnt, 'data', 'workspaces', '.sandbox', id.replace(/-/g, ''));
    try {
      const a = (await d.req('POST', '/api/conversations', {})).body.conversation_id;
      assert.match(await turn(d, llm, a, 'mkdir -p d && echo kept > d/f && echo t > /tmp/t && echo h > ~/h && ln -s d/f link && echo made'), /made/);
      // judged from the host: the workspace's path leads into its image (0600, the daemon's), mounted while the sandbox lives
      assert.ok(fs.lstatSync(ws(a)).isSymbolicLink());
      assert.equal(fs.readFileSync(path.join(ws(a), 'd', 'f'), 'utf8'), 'kept\n');
      const img = fs.statSync(path.join(state(a), 'disk.img'));
      assert.equal(img.mode & 0o777, 0o600);
      assert.equal(img.uid, 0);
      assert.ok(fs.readFileSync('/proc/self/mountinfo', 'utf8').includes(path.join(state(a), 'disk')));
      // idle: the sandbox closes and its image is unmounted; the next command finds everything
      await waitFor(
        () => !fs.readFileSync('/proc/self/mountinfo', 'utf8').includes(path.join(state(a), 'disk')),
        'the image unmounted after the idle close',
        60_000,
      );
      assert.match(await turn(d, llm, a, 'cat d/f /tmp/t ~/h; readlink link'), /^kept\nt\nh\nd\/f$/m);
      // a workspace made before disks (a directory with files): kept as it is, measured
      const b = (await d.req('POST', '/api/conversations', {})).body.conversation_id;
      fs.mkdirSync(ws(b), { recursive: true });
      fs.writeFileSync(path.join(ws(b), 'old.txt'), 'old\n', { mode: 0o644 });
      assert.match(await turn(d, llm, b, 'cat old.txt; df -k . | tail -1'), /^old$/m);
      assert.ok(fs.lstatSync(ws(b)).isDirectory() && !fs.existsSync(path.join(state(b), 'disk.img')), 'no image for it');
      // DELETE with KEEP_WORKSPACES: the workspace copied out to a plain directory, the image gone
      assert.equal((await d.req('DELETE', `/api/conversations/${a}`)).status, 200);
      assert.ok(fs.lstatSync(ws(a)).isDirectory(), 'a plain directory now');
      assert.equal(fs.readFileSync(path.join(ws(a), 'd', 'f'), 'utf8'), 'kept\n');
      assert.equal(fs.readlinkSync(path.join(ws(a), 'link')), 'd/f', 'links as links');
      assert.equal(fs.statSync(path.join(ws(a), 'd', 'f')).uid, 65533, "the sandbox uid's files");
      assert.ok(!fs.existsSync(state(a)), 'its image and state directory removed');
    } finally {
      await d.stop();
    }
    assert.deepEqual(
      fs
        .readFileSync('/proc/self/mountinfo', 'utf8')
        .split('\n')
        .filter((l) => l.includes(mnt) && !l.split(' ')[4]!.endsWith(path.basename(mnt))),
      [],
      'the stop left no image mounted',
    );
  });
});

describe('a new disk image', { skip: !ROOT_RUN && 'needs root: disk images', timeout: 120_000 }, () => {
  test('of 10 GiB takes under 1 MiB of the host once made and mounted (no journal, no blocks kept to grow it), and holds 10 GiB', async () => {
    const root = tempDir('parley-image-');
    const spawner = new Spawner(findProgram('setpriv'));
    const tools = findDiskTools(spawner);
    assert.equal(typeof tools, 'object', String(tools));
    const disks = new Disks(tools as DiskTools, 10240, null, root);
    const state = path.join(root, 'state');
    let key: string | null = null;
    try {
      key = await disks.acquire(state);
      const bytes = imageBytes(state);
      assert.ok(bytes > 0 && bytes < 1024 * 1024, `the image holds ${bytes} bytes of the host`);
      const total = Number(
        execFileSync('df', ['-k', '--output=size', imageMount(state)], { encoding: 'utf8' })
          .trim()
          .split('\n')[1],
      );
      assert.ok(total > 10_000_000 && total <= 10_485_760, `its filesystem: ${total} KiB`);
    } finally {
      if (key) await disks.release(key, state);
      await spawner.close();
      removeDir(root);
    }
  });

  test('once the launcher is stopping, no image is made or mounted (its stop unmounts what is, and nothing comes after)', async () => {
    const root = tempDir('parley-image-');
    const spawner = new Spawner(findProgram('setpriv'));
    const tools = findDiskTools(spawner) as DiskTools;
    const disks = new Disks(tools, 64, null, root);
    try {
      disks.stop();
      const state = path.join(root, '.sandbox', 'late');
      await assert.rejects(disks.acquire(state), /stopping/);
      assert.ok(!fs.readFileSync('/proc/self/mountinfo', 'utf8').includes(root), 'nothing mounted under it');
    } finally {
      await disks.unmountStale();
      await spawner.close();
      fs.rmSync(root, { recursive: true, force: true });
    }
  });

  test('unmounted while a copy of its mount lives on in another namespace (a holder still ending), it holds the files written to it', async () => {
    const root = tempDir('parley-image-');
    const spawner = new Spawner(findProgram('setpriv'));
    const tools = findDiskTools(spawner) as DiskTools;
    const disks = new Disks(tools, 64, null, root);
    const states = [path.join(root, '.sandbox', 'a'), path.join(root, '.sandbox', 'b')];
    const keepers: ChildProcess[] = [];
    try {
      for (const [i, state] of states.entries()) {
        const key = await disks.acquire(state);
        fs.writeFileSync(path.join(imageMount(state), 'workspace', 'f'), `written ${i}\n`);
        // a mount namespace of its own (private: the host's unmount does not reach it) keeps the file system alive
        const keeper = spawn('unshare', ['-m', '--propagation', 'private', 'sh', '-c', 'echo; exec sleep 600'], { stdio: ['ignore', 'pipe', 'ignore'] });
        keepers.push(keeper);
        await once(keeper.stdout!, 'data');
        // the first released as a conversation's sandbox closes, the second at the daemon's stop
        if (i === 0) await disks.release(key, state);
      }
      disks.stop();
      await disks.unmountStale();
      for (const [i, state] of states.entries()) {
        assert.ok(!fs.readFileSync('/proc/self/mountinfo', 'utf8').includes(imageMount(state)), 'unmounted on the host');
        const inImage = execFileSync('debugfs', ['-R', 'cat /workspace/f', path.join(state, 'disk.img')], {
          encoding: 'utf8',
          stdio: ['ignore', 'pipe', 'ignore'],
        });
        assert.equal(inImage, `written ${i}\n`, 'the file is in the image on the host');
      }
    } finally {
      for (const k of keepers) k.kill('SIGKILL');
      await Promise.all(keepers.map((k) => (k.exitCode === null && k.signalCode === null ? once(k, 'exit') : null)));
      await spawner.close();
      removeDir(root);
    }
  });
});
