/**
 * The DATA_DIR lock is one the kernel drops with its process: a daemon started the README's way
 * (`npm start`) and killed with SIGKILL of its process group comes back at once on the same
 * DATA_DIR (even when the dead daemon lingers as an unreaped zombie), and a stale `parley.pid`
 * naming a live unrelated process does not block a start.
 */
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { describe, test } from 'node:test';
import { ensureBuilt, ROOT, startDaemon, tempDir, waitFor } from './support/daemon.js';
import { isAlive } from './support/processes.js';

interface Started {
  proc: ChildProcess;
  url: string;
  output: string[];
}

/** `npm start` in its own process group; resolves once the daemon logs its port. */
async function npmStart(dataDir: string): Promise<Started> {
  await ensureBuilt(); // else npm start would build dist/ itself, under daemons other test files start from it
  const proc = spawn('npm', ['start'], {
    cwd: ROOT,
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { PATH: process.env.PATH!, HOME: process.env.HOME ?? '/tmp', PORT: '0', DATA_DIR: dataDir, LOG_LEVEL: 'info' },
  });
  const output: string[] = [];
  return new Promise((resolve, reject) => {
    const onData = (chunk: Buffer) => {
      output.push(chunk.toString('utf8'));
      const m = /"port":(\d+).*listening on/.exec(output.join(''));
      if (m) resolve({ proc, url: `http://127.0.0.1:${m[1]}`, output });
    };
    proc.stdout!.on('data', onData);
    proc.stderr!.on('data', onData);
    proc.on('exit', (code) => reject(new Error(`npm start exited with ${code} before listening:\n${output.join('')}`)));
    setTimeout(() => reject(new Error(`npm start did not listen in 30 s:\n${output.join('')}`)), 30_000).unref();
  });
}

const killGroup = (p: ChildProcess, signal: NodeJS.Signals) => {
  try {
    process.kill(-p.pid!, signal);
  } catch {
    // already gone
  }
};

describe('DATA_DIR lock', { timeout: 300_000 }, () => {
  test('npm start, SIGKILL of its process group, start again at once on the same DATA_DIR: it starts and has the data', async () => {
    const dir = tempDir();
    const first = await npmStart(dir);
    const created = await fetch(`${first.url}/api/conversations`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' });
    const id = ((await created.json()) as { conversation_id: string }).conversation_id;
    const daemonPid = Number(fs.readFileSync(path.join(dir, 'parley.pid'), 'utf8'));
    assert.ok(daemonPid > 0 && daemonPid !== first.proc.pid, 'parley.pid names the daemon, a child of npm');
    killGroup(first.proc, 'SIGKILL'); // no reaping of the daemon, no wait: start again at once
    let second: Started | undefined;
    let newPid = 0;
    try {
      second = await npmStart(dir);
      const got = await fetch(`${second.url}/api/conversations/${id}`);
      assert.equal(got.status, 200, 'the restarted daemon serves the conversation made before the kill');
      newPid = Number(fs.readFileSync(path.join(dir, 'parley.pid'), 'utf8'));
      assert.ok(newPid !== daemonPid && isAlive(newPid), 'parley.pid names the new, live daemon');
    } finally {
      if (second) killGroup(second.proc, 'SIGTERM');
    }
    await new Promise<void>((r) => (second!.proc.exitCode !== null ? r() : second!.proc.on('exit', () => r())));
    // npm may exit before its daemon; and what the killed daemon had started (its sandbox probe runs
    // after the port opens) ends by itself: the directory is removed once nothing writes in it
    await waitFor(() => !newPid || !isAlive(newPid), 'the second daemon to exit', 30_000);
    let why = '';
    await waitFor(
      () => {
        try {
          fs.rmSync(dir, { recursive: true, force: true });
          return true;
        } catch (e) {
          why = String(e);
          return false;
        }
      },
      'the data directory to be removable',
      30_000,
    ).catch((e: Error) => {
      // what still holds it: the error, the mounts under it, the processes with a file in it
      const mounts = fs
        .readFileSync('/proc/self/mountinfo', 'utf8')
        .split('\n')
        .filter((l) => l.includes(dir));
      const holders = fs
        .readdirSync('/proc')
        .filter((p) => /^\d+$/.test(p))
        .filter((p) => {
          try {
            return fs.readdirSync(`/proc/${p}/fd`).some((f) => fs.readlinkSync(`/proc/${p}/fd/${f}`).startsWith(dir));
          } catch {
            return false;
          }
        });
      const named = holders.map((p) => `${p} ${fs.readFileSync(`/proc/${p}/cmdline`, 'utf8').replace(/\0/g, ' ').slice(0, 120)}`);
      throw new Error(`${e.message}: ${why}; mounts: ${mounts.join(' | ')}; processes: ${named.join(' | ')}`);
    });
  });

  test('a stale parley.pid naming a live unrelated process does not block a start', async () => {
    const dir = tempDir();
    fs.writeFileSync(path.join(dir, 'parley.pid'), `${process.pid}\n`); // this test runner: alive, not a daemon
    fs.writeFileSync(path.join(dir, 'parley.lock'), ''); // and a lock file left behind
    const d = await startDaemon({}, dir);
    assert.equal((await d.req('GET', '/health')).status, 200);
    assert.equal(fs.readFileSync(path.join(dir, 'parley.pid'), 'utf8').trim(), String(d.proc.pid));
    await d.stop();
    assert.ok(!fs.existsSync(path.join(dir, 'parley.pid')), 'a clean stop removes parley.pid');
    fs.rmSync(dir, { recursive: true, force: true, maxRetries: 10 }); // a stopping daemon may still be closing files in it
  });

  test("a parley.lock that is not the lock's format (another tool, an older version) is replaced; the lock still excludes a second daemon", async () => {
    for (const foreign of [Buffer.from('pid 4242 holds this\n'), Buffer.alloc(8192, 0xa5)]) {
      const dir = tempDir();
      fs.writeFileSync(path.join(dir, 'parley.lock'), foreign);
      const d = await startDaemon({}, dir);
      try {
        assert.equal((await d.req('GET', '/health')).status, 200);
        await assert.rejects(startDaemon({}, dir, { startTimeoutMs: 60_000 }), /is in use by another Parley process \(pid \d+\)/);
      } finally {
        await d.stop();
      }
      fs.rmSync(dir, { recursive: true, force: true, maxRetries: 10 });
    }
  });

  test('a parley.lock that is a symlink is not followed: the start fails with the reason and the target is untouched', async () => {
    const dir = tempDir();
    const target = path.join(dir, 'elsewhere.txt');
    fs.writeFileSync(target, "not a database, and not Parley's to empty");
    fs.symlinkSync(target, path.join(dir, 'parley.lock'));
    await assert.rejects(startDaemon({}, dir, { startTimeoutMs: 60_000 }), /ELOOP|symbolic link|not a database/);
    assert.equal(fs.readFileSync(target, 'utf8'), "not a database, and not Parley's to empty");
    fs.rmSync(dir, { recursive: true, force: true, maxRetries: 10 });
  });
});
