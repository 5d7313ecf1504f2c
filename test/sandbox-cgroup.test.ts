/**
 * Every process of a sandbox lives in that sandbox's cgroup, judged from the host's /proc: bwrap's
 * init, the file service, the processes joined to it (shells and their background jobs), and
 * everything those start — also when the file service itself forks, as one an attacker had taken
 * over would (a hostile stand-in for file-service.pl, set off from the host: children, a detached
 * grandchild, and as many more as it can start). The conversation's process limit then bounds all
 * of it, nothing of it is charged to the daemon's cgroup, and two conversations never share one.
 * The in-process launcher with real bwrap, as root (cgroups).
 */
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { describe, test } from 'node:test';
import { DEFAULT_SANDBOX_SETTINGS, Sandbox } from '../src/sandbox/launcher.js';
import { ROOT, removeDir, tempDir, waitFor } from './support/daemon.js';
import { RUN_REAL_SERVICE_JS } from './support/real-file-service.js';
import { alive, descendants, hostProcesses, nsOf, pidsInNs } from './support/sandbox-harness.js';

const ROOT_RUN = process.getuid?.() === 0;
const PIDS = 48;

/** A process's cgroup in the v1 `pids` hierarchy (or the v2 one), as /proc/<pid>/cgroup names it. */
function pidsCgroup(pid: number): string | null {
  try {
    const lines = fs.readFileSync(`/proc/${pid}/cgroup`, 'utf8').split('\n');
    const v1 = lines.find((l) => /^\d+:[^:]*\bpids\b[^:]*:/.test(l));
    return (v1 ?? lines.find((l) => l.startsWith('0::')))?.split(':')[2] ?? null;
  } catch {
    return null;
  }
}

function pidsDir(cgroup: string): string {
  const v1 = '/sys/fs/cgroup/pids';
  return fs.existsSync(path.join(v1, cgroup, 'pids.max')) ? path.join(v1, cgroup) : path.join('/sys/fs/cgroup', cgroup);
}

const cmd = (pid: number) => {
  try {
    return fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').replace(/\0/g, ' ').trim();
  } catch {
    return '';
  }
};

/** What a process is, for a failure's message: its command line, state, parent and pids in each namespace. */
const described = (pid: number) => {
  try {
    const status = fs.readFileSync(`/proc/${pid}/status`, 'utf8').split('\n');
    return `${pid} ${cmd(pid)} [${status.filter((l) => /^(State|PPid|NSpid|Threads):/.test(l)).join('; ')}]`;
  } catch {
    return `${pid} (gone)`;
  }
};

describe('every process of a sandbox is in its cgroup', { skip: !ROOT_RUN && 'needs root: a writable cgroup hierarchy', timeout: 120_000 }, () => {
  test("init, file service and its forks (hostile stand-in), shells, jobs: in the sandbox's cgroup, under its process limit; others have theirs", async () => {
    const dir = tempDir();
    const marker = `3737${process.pid % 1000}`;
    const standIn = path.join(dir, 'stand-in.mjs');
    fs.writeFileSync(
      standIn,
      [
        "import { spawn } from 'node:child_process';",
        "import fs from 'node:fs';",
        // forks as a file service an attacker had taken over would, once the test signals it from the host
        // (only A's, and only once A's own commands have run: the forks fill the limit its joiners need)
        "process.once('SIGUSR2', () => {",
        `for (let i = 0; i < 3; i++) spawn('sleep', ['${marker}'], { stdio: 'ignore' }).on('error', () => {});`,
        `spawn('/bin/sh', ['-c', '(setsid sleep ${marker}1 > /dev/null 2>&1 &); exit 0'], { stdio: 'ignore' }).on('error', () => {});`,
        `let n = 0; const more = () => { try { spawn('sleep', ['${marker}2'], { stdio: 'ignore' }).on('error', () => {}); } catch {} ` +
          `if (++n < 150) setTimeout(more, 2); };`,
        'more();',
        '});',
        // (the real service's effective ids first: its code may be where only the conversation's uid can go, a checkout under /tmp)
        "const as = process.argv.indexOf('--as'); if (as > 0) { " +
          "const [u, g] = process.argv[as + 1].split(':').map(Number); process.setegid(g); process.seteuid(u); }",
        RUN_REAL_SERVICE_JS,
      ].join('\n'),
      { mode: 0o644 },
    );
    fs.chmodSync(dir, 0o755);
    fs.mkdirSync(path.join(dir, 'ws'), { mode: 0o700 });
    const sb = await Sandbox.open(
      { ...DEFAULT_SANDBOX_SETTINGS, mode: 'bwrap', network: 'none', pids: PIDS, spareHolder: false, roBinds: [ROOT] },
      { workspaceRoot: path.join(dir, 'ws'), fileService: standIn },
    );
    const a = crypto.randomUUID();
    const b = crypto.randomUUID();
    const run = (id: string, script: string) =>
      new Promise<string>((resolve) => {
        const c = sb.spawn(id, ['sh', '-c', script], {
          env: sb.env(),
          stdio: ['ignore', 'pipe', 'pipe'],
          workspaceDir: path.join(dir, 'ws', id.replace(/-/g, '')),
        });
        let text = '';
        c.stdout!.on('data', (d: Buffer) => (text += d.toString('utf8')));
        c.stderr!.on('data', (d: Buffer) => (text += d.toString('utf8')));
        c.on('close', () => resolve(text));
      });
    try {
      assert.match(await run(a, `(sleep ${marker}3 > /dev/null 2>&1 &); (setsid sleep ${marker}4 > /dev/null 2>&1 &); echo started`), /started/);
      assert.match(await run(b, `(sleep ${marker}5 > /dev/null 2>&1 &); echo started`), /started/);
      const jobA = (await waitFor(() => hostProcesses(`sleep ${marker}3`)[0], "A's job runs", 30_000))!;
      const jobB = (await waitFor(() => hostProcesses(`sleep ${marker}5`)[0], "B's job runs", 30_000))!;
      const nsA = nsOf(jobA)!;
      const nsB = nsOf(jobB)!;
      const ours = (ns: string) => pidsInNs(ns);
      // the conversation's cgroup is the one its joined processes are in; its init and file service are in it too
      const cgA = pidsCgroup(jobA)!;
      const cgB = pidsCgroup(jobB)!;
      assert.ok(cgA && cgB && cgA !== cgB, `one cgroup per conversation: ${cgA} ${cgB}`);
      const initA = ours(nsA).find((p) => /^NSpid:\s+\d+\s+1$/m.test(fs.readFileSync(`/proc/${p}/status`, 'utf8')))!;
      const serviceA = ours(nsA).find((p) => /^NSpid:\s+\d+\s+2$/m.test(fs.readFileSync(`/proc/${p}/status`, 'utf8')))!;
      assert.equal(pidsCgroup(initA), cgA, "bwrap's init is in the conversation's cgroup");
      assert.equal(pidsCgroup(serviceA), cgA, "the file service is in the conversation's cgroup");
      // the stand-in's children of A's sandbox, and its forks up to the limit
      process.kill(serviceA, 'SIGUSR2');
      await waitFor(() => hostProcesses(`sleep ${marker}1`).length >= 1, 'the forks run', 30_000);
      assert.notEqual(cgA, pidsCgroup(process.pid), "not the daemon's");
      assert.equal(Number(fs.readFileSync(path.join(pidsDir(cgA), 'pids.max'), 'utf8')), PIDS);
      for (const [ns, cg] of [
        [nsA, cgA],
        [nsB, cgB],
      ] as const) {
        const pids = ours(ns);
        assert.ok(pids.length >= 3, `init, the service and jobs: ${pids.length}`);
        // (a process on its way out has left its cgroup already: one of the stand-in's forks that ended
        // just now reads as the root cgroup until its parent reaps it; those are let end, not counted)
        const isOutside = (p: number) => pidsCgroup(p) !== null && pidsCgroup(p) !== cg && alive([p]).length === 1;
        const suspects = pids.filter(isOutside);
        await waitFor(() => suspects.every((p) => !isOutside(p)), 'the processes on their way out to end', 2_000).catch(() => {});
        const outside = suspects.filter(isOutside).map((p) => `${p} ${pidsCgroup(p)} ${cmd(p)}`);
        assert.deepEqual(outside, [], 'every process of the pid namespace is in the sandbox cgroup');
      }
      // what runs on the host for the sandboxes (supervisors, bwrap, joiners) is in theirs too
      const hostSide = descendants(process.pid).filter((p) => /bwrap|nsenter|parley: seccomp/.test(cmd(p)));
      assert.ok(hostSide.length >= 2, hostSide.map(cmd).join('\n'));
      for (const p of hostSide) assert.ok([cgA, cgB].includes(pidsCgroup(p)!), `${p} ${cmd(p)} in ${pidsCgroup(p)}`);
      // the stand-in's forks were held by the conversation's process limit (the sandbox counts them all)
      const current = Number(fs.readFileSync(path.join(pidsDir(cgA), 'pids.current'), 'utf8'));
      assert.ok(current <= PIDS, `${current} tasks under a limit of ${PIDS}`);
      assert.ok(hostProcesses(`sleep ${marker}2`).length < 150, 'not every fork succeeded');
      // closing the conversation ends all of it, the cgroup goes
      await sb.closeConversation(a);
      assert.deepEqual(alive(ours(nsA)).map(described), [], 'nothing of it is alive (a zombie reparented to the host init is not)');
      await waitFor(() => !fs.existsSync(pidsDir(cgA)), 'the cgroup removed', 10_000);
    } finally {
      await sb.close();
      removeDir(dir);
    }
  });
});
