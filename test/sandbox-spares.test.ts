/**
 * The spare holders (src/sandbox/holders.ts): a burst of conversations makes the launcher keep more
 * than one spare; conversations begun at the same moment never get the same one (each runs in a pid
 * namespace of its own, and writes into its own workspace on the host); the extra spares are closed
 * once the arrivals stop; a spare killed from the host is replaced without a conversation asking,
 * each replacement later than the last while they keep dying young; and none outlives the daemon's SIGTERM (judged from the host: every process
 * the daemon started, recorded before the signal, is gone at its exit, and no spare's directory is
 * left).
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { describe, test } from 'node:test';
import { startDaemon, tempDir, waitFor } from './support/daemon.js';
import { fileServices, readySpares } from './support/holders.js';
import { descendants, livingProcesses } from './support/processes.js';
import { Sandbox, DEFAULT_SANDBOX_SETTINGS } from '../src/sandbox/launcher.js';
import { niceNewSession, parseGroup } from '../src/sandbox/priority.js';

/** The spares' directories under WORKSPACE_ROOT/.sandbox, seen from the host. */
const spareDirs = (root: string) => {
  try {
    return fs.readdirSync(path.join(root, '.sandbox')).filter((n) => n.startsWith('.spare-'));
  } catch {
    return [];
  }
};

/** Runs `argv` in conversation `id`'s sandbox: its exit code, its stdout and its stderr. */
function runIn(sb: Sandbox, root: string, id: string, argv: string[]): Promise<{ code: number | null; out: string; err: string }> {
  return new Promise((resolve) => {
    const c = sb.spawn(id, argv, { workspaceDir: path.join(root, id.replace(/-/g, '')), env: sb.env(), stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    c.stdout!.on('data', (d: Buffer) => (out += d.toString('utf8')));
    c.stderr!.on('data', (d: Buffer) => (err += d.toString('utf8')));
    c.on('close', (code) => resolve({ code, out, err }));
  });
}

describe('sandbox: spare holders kept ahead of a burst (in-process launcher, real bwrap)', { timeout: 170_000 }, () => {
  test('a burst raises the spares; conversations begun at once each get a holder of their own; the extras are closed once the arrivals stop', async () => {
    const root = tempDir();
    // (spareHoldMs 0: no spares held for a next burst, tested below)
    const sb = await Sandbox.open({ ...DEFAULT_SANDBOX_SETTINGS, mode: 'bwrap', spareQuietMs: 1500, spareHoldMs: 0 }, { workspaceRoot: root });
    const run = async (id: string, script: string) => {
      const r = await runIn(sb, root, id, ['sh', '-c', script]);
      return { code: r.code, out: r.out + r.err };
    };
    try {
      await sb.warm();
      assert.equal(sb.spares.alive, 1, 'one spare before any conversation');
      // six conversations' sandboxes asked for at the same moment: the first takes the spare, the
      // others start holders of their own, and the rate of arrivals asks for more than one spare
      const first = Array.from({ length: 6 }, () => crypto.randomUUID());
      for (const id of first) sb.prepare(id);
      await waitFor(() => sb.spares.ready >= 2, 'two spares or more ready after the burst', 120_000);
      // as many conversations as there are spares ready, and one more, begun in the same tick
      const n = sb.spares.ready;
      const readyDirs = spareDirs(root).length;
      assert.ok(readyDirs >= n, `the spares' directories on the host: ${readyDirs}`);
      const second = Array.from({ length: n + 1 }, () => crypto.randomUUID());
      const results = await Promise.all(second.map((id) => run(id, `echo ${id} > /workspace/who && readlink /proc/self/ns/pid`)));
      for (const r of results) assert.equal(r.code, 0, r.out);
      const namespaces = results.map((r) => r.out.trim());
      assert.equal(new Set(namespaces).size, second.length, `one pid namespace per conversation: ${namespaces.join(', ')}`);
      // judged from the host: each conversation wrote into its own workspace, none into another's
      for (const id of second) assert.equal(fs.readFileSync(path.join(root, id.replace(/-/g, ''), 'who'), 'utf8').trim(), id);
      // no arrivals for spareQuietMs: back to one spare, on the host too
      await waitFor(() => sb.spares.alive === 1 && spareDirs(root).length === 1, 'the spares back to one once the arrivals stopped', 60_000);
    } finally {
      await sb.close();
      fs.rmSync(root, { recursive: true, force: true });
    }
  });

  test('once a burst stops, as many spares as it had conversations are held (made up if one dies); the next burst takes them all; then one', async () => {
    const root = tempDir();
    const burst = 5;
    const sb = await Sandbox.open({ ...DEFAULT_SANDBOX_SETTINGS, mode: 'bwrap', spareQuietMs: 1000, spareHoldMs: 25_000 }, { workspaceRoot: root });
    try {
      await sb.warm();
      const first = Array.from({ length: burst }, () => crypto.randomUUID());
      for (const id of first) sb.prepare(id);
      // (their holders closed: every ready holder left on the host is then a spare)
      await Promise.all(first.map((id) => sb.closeConversation(id)));
      // no conversation asks: the arrivals stopped, and spares for a burst of that size are held, judged
      // from the host: that many ready holders (empty workspace, sealed view), one directory each
      const held = () => sb.spares.ready === burst && readySpares(process.pid).length === burst && spareDirs(root).length === burst;
      await waitFor(held, `${burst} spares ready after the burst`, 120_000);
      // two of them killed from the host (their bwrap): made up again while the arrivals stay quiet
      const killed = readySpares(process.pid).slice(0, 2);
      for (const p of killed) process.kill(parentOf(p), 'SIGKILL');
      await waitFor(() => killed.every((p) => !fs.existsSync(`/proc/${p}`)), 'the killed spares gone');
      await waitFor(() => held() && readySpares(process.pid).every((p) => !killed.includes(p)), `${burst} spares held again after the kills`, 120_000);
      // the next burst, all in one tick: each conversation takes a held spare (none starts a holder of its own)
      const second = Array.from({ length: burst }, () => crypto.randomUUID());
      for (const id of second) sb.prepare(id);
      assert.equal(sb.spares.alive, 0, 'every held spare was taken, one by each conversation');
      const ns = await Promise.all(second.map(async (id) => (await runIn(sb, root, id, ['readlink', '/proc/self/ns/pid'])).out.trim()));
      assert.equal(new Set(ns).size, burst, `one pid namespace per conversation: ${ns.join(', ')}`);
      // held again, then back to one spare once spareHoldMs has passed since the last take
      await Promise.all(second.map((id) => sb.closeConversation(id)));
      await waitFor(held, `${burst} spares held again`, 120_000);
      await waitFor(() => sb.spares.alive === 1 && spareDirs(root).length === 1, 'one spare once the hold is over', 90_000);
    } finally {
      await sb.close();
      fs.rmSync(root, { recursive: true, force: true });
    }
  });
});

/** Runs `fn` with an in-process bwrap sandbox whose one spare is ready (its file service's pid), then closes it. */
async function withSpare(fn: (sb: Sandbox, root: string, spare: number) => Promise<void>): Promise<void> {
  const root = tempDir();
  const sb = await Sandbox.open({ ...DEFAULT_SANDBOX_SETTINGS, mode: 'bwrap' }, { workspaceRoot: root });
  try {
    await sb.warm();
    // the start-up probe's holder may still be on its way out: the spare is then the one file service left
    await waitFor(() => fileServices(process.pid).length === 1 && readySpares(process.pid).length === 1, 'the spare alone, ready', 60_000);
    const [spare] = readySpares(process.pid);
    assert.ok(spare, 'the spare holder runs');
    await fn(sb, root, spare);
  } finally {
    await sb.close();
    fs.rmSync(root, { recursive: true, force: true });
  }
}

/** The nice values of a process's threads (field 19 of /proc/<pid>/task/<tid>/stat). */
const niceOf = (pid: number) =>
  fs.readdirSync(`/proc/${pid}/task`).map((t) => {
    const st = fs.readFileSync(`/proc/${pid}/task/${t}/stat`, 'utf8');
    return Number(st.slice(st.lastIndexOf(')') + 2).split(' ')[16]);
  });

describe('sandbox: a spare waits at a lower CPU priority (root daemon)', { timeout: 170_000, skip: process.getuid?.() !== 0 && 'needs root' }, () => {
  test('the spare starts niced; the conversation that takes it gets the normal priority back, every thread of its file service', async () => {
    await withSpare(async (sb, root, spare) => {
      // (niced as it starts, and every process of it again once it is ready)
      await waitFor(() => niceOf(spare).every((n) => n === 10), "the spare's file service niced", 30_000).catch(() => {});
      assert.ok(
        niceOf(spare).every((n) => n === 10),
        `the spare's file service is niced: ${niceOf(spare).join(' ')}`,
      );
      const id = crypto.randomUUID();
      const { out } = await runIn(sb, root, id, ['sh', '-c', 'cut -d" " -f19 /proc/self/stat']);
      assert.equal(out.trim(), '0', "the conversation's process runs at the normal priority");
      assert.ok(
        niceOf(spare).every((n) => n === 0),
        `the taken holder's file service is back to the normal priority: ${niceOf(spare).join(' ')}`,
      );
    });
  });
});

/** The session group (autogroup) a process is in: its name and nice value ('root': the root group, an empty file). */
const groupOf = (pid: number | 'self') => parseGroup(fs.readFileSync(`/proc/${pid}/autogroup`, 'utf8'));
const niceOfGroup = (pid: number) => {
  const g = groupOf(pid);
  return g === 'root' ? null : g.nice;
};

test("a process's session group as /proc/<pid>/autogroup says it; an empty file is the root group (no session group of its own)", () => {
  assert.deepEqual(parseGroup('/autogroup-3104 nice 10\n'), { name: '/autogroup-3104', nice: 10 });
  assert.deepEqual(parseGroup('/autogroup-7 nice -5\n'), { name: '/autogroup-7', nice: -5 });
  assert.equal(parseGroup(''), 'root');
});

const noAutogroups = (() => {
  if (process.getuid?.() !== 0) return 'needs root';
  try {
    if (fs.readFileSync('/proc/sys/kernel/sched_autogroup_enabled', 'utf8').trim() === '1') return false;
  } catch {
    /* a kernel without them */
  }
  return 'the kernel does not group processes by session (sched_autogroup_enabled is not 1)';
})();

describe('sandbox: a spare waits at a lower CPU priority where the kernel weighs sessions (autogroups)', { timeout: 170_000, skip: noAutogroups }, () => {
  test("the spare's session groups are niced, given back to 0 when taken; the daemon's own group is never touched", async () => {
    await withSpare(async (sb, root, spare) => {
      // every sandbox process leads a session of its own: its own nice value only orders it within
      // that session, the group's is what counts against the daemon's
      // (the daemon may be in a session group of its own, or in the root group: started by an init that
      // gave it no session, as some CI runners do; /proc/self/autogroup is then empty)
      const own = groupOf('self');
      assert.notDeepEqual(groupOf(spare), own, "the spare's file service is in a session of its own");
      await waitFor(() => niceOfGroup(spare) === 10, "the spare's session group niced", 30_000).catch(() => {});
      assert.equal(niceOfGroup(spare), 10, "the spare's session group is niced");
      const id = crypto.randomUUID();
      const c = sb.spawn(id, ['true'], { workspaceDir: path.join(root, id.replace(/-/g, '')), env: sb.env(), stdio: ['ignore', 'ignore', 'inherit'] });
      await new Promise((r) => c.on('close', r));
      assert.equal(niceOfGroup(spare), 0, "the taken holder's session group is back to the normal priority");
      assert.deepEqual(groupOf('self'), own, "the daemon's own group is untouched");
    });
  });
});

describe('sandbox: what a spare starts ahead waits at its priority where the kernel weighs sessions (autogroups)', {
  timeout: 170_000,
  skip: noAutogroups,
}, () => {
  test('the process a spare starts ahead leads a session of its own, whose group is niced too; given back to 0 when taken', async () => {
    await withSpare(async (sb, root, spare) => {
      const marker = String(4000 + Math.floor(Math.random() * 1000));
      const argv = (pid: number) => {
        try {
          return fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8');
        } catch {
          return '';
        }
      };
      sb.prestart(['sleep', marker], {});
      const ahead = await waitFor(() => descendants(process.pid).find((p) => argv(p) === `sleep\0${marker}\0`), 'the process started ahead', 30_000);
      const group = groupOf(ahead!);
      assert.ok(group !== 'root' && group.name !== (groupOf(spare) as { name: string }).name, 'it leads a session (a group) of its own');
      await waitFor(() => niceOfGroup(ahead!) === 10, 'its session group niced', 30_000).catch(() => {});
      assert.equal(niceOfGroup(ahead!), 10, "the group of the process started ahead is niced as the spare's are");
      const id = crypto.randomUUID();
      const c = sb.spawn(id, ['true'], { workspaceDir: path.join(root, id.replace(/-/g, '')), env: sb.env(), stdio: ['ignore', 'ignore', 'inherit'] });
      await new Promise((r) => c.on('close', r));
      assert.equal(niceOfGroup(ahead!), 0, 'taken: its group is back to the normal priority');
    });
  });
});

describe('sandbox: a spare starts at its priority where the kernel weighs sessions (autogroups)', { timeout: 60_000, skip: noAutogroups }, () => {
  test('the session a process makes after its pid is known (as bwrap --new-session does) is niced as soon as it exists', async () => {
    // not a group leader: setsid(1) then makes the new session in place (the same pid), as bwrap's init does
    const c = spawn('sh', ['-c', 'sleep 0.2; exec setsid sleep 30'], { stdio: 'ignore' });
    let stop = false;
    try {
      const own = groupOf('self');
      niceNewSession(c.pid!, process.pid, 10, () => stop);
      await waitFor(
        () => {
          const g = groupOf(c.pid!);
          return g !== 'root' && (own === 'root' || g.name !== own.name);
        },
        'the new session',
        10_000,
      );
      await waitFor(() => niceOfGroup(c.pid!) === 10, "the new session's group niced", 10_000).catch(() => {});
      assert.equal(niceOfGroup(c.pid!), 10, "the new session's group is niced");
      assert.deepEqual(groupOf('self'), own, "this process's own group is untouched");
    } finally {
      stop = true;
      c.kill('SIGKILL');
    }
  });
});

/** A process's parent, from the host's /proc. */
const parentOf = (pid: number) => {
  const st = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  return Number(st.slice(st.lastIndexOf(')') + 2).split(' ')[1]);
};

describe('sandbox: a spare that dies untaken is replaced (in-process launcher, real bwrap)', { timeout: 170_000 }, () => {
  test('a spare killed from the host is replaced with no conversation asking; while they keep dying young, each replacement starts later', async () => {
    const root = tempDir();
    const retryMs = 400;
    const sb = await Sandbox.open({ ...DEFAULT_SANDBOX_SETTINGS, mode: 'bwrap', spareRetryMs: retryMs }, { workspaceRoot: root });
    try {
      await sb.warm();
      await waitFor(() => fileServices(process.pid).length === 1 && readySpares(process.pid).length === 1, 'the spare alone, ready', 60_000);
      let spare = readySpares(process.pid)[0]!;
      const gaps: number[] = [];
      for (let i = 0; i < 4; i++) {
        const killed = spare;
        const killedAt = performance.now();
        // its bwrap inside, the first process of its pid namespace: everything of the spare dies with it
        process.kill(parentOf(killed), 'SIGKILL');
        await waitFor(() => fileServices(process.pid).some((p) => p !== killed), `a new spare after kill ${i + 1}`, 60_000);
        gaps.push(performance.now() - killedAt);
        await waitFor(() => readySpares(process.pid).some((p) => p !== killed), `the new spare ready after kill ${i + 1}`, 60_000);
        spare = readySpares(process.pid).find((p) => p !== killed)!;
      }
      // each died young (ready less than 10 s): the replacements came after 400, 800, 1600, 3200 ms at the least
      for (const [i, g] of gaps.entries()) {
        assert.ok(g >= retryMs * 2 ** i * 0.95, `replacement ${i + 1} started ${g.toFixed(0)} ms after the kill: ${gaps.map((x) => x.toFixed(0))}`);
      }
      assert.equal(sb.spares.alive, 1, 'one spare, as before the kills');
    } finally {
      await sb.close();
      fs.rmSync(root, { recursive: true, force: true });
    }
  });
});

describe('sandbox: no spare outlives the daemon', { timeout: 170_000 }, () => {
  test('SIGTERM after a burst of conversations: exit 0, no spare holder process and no spare directory left', async () => {
    const key = 'spares-test-session-key';
    const d = await startDaemon({ SANDBOX: 'bwrap', SESSION_API_KEY: key, LOG_LEVEL: 'info' });
    const req = (m: string, p: string, body?: unknown) => d.req(m, p, body, { 'X-Session-API-Key': key });
    const root = path.join(d.dataDir, 'workspaces');
    try {
      // eight conversations begun at once, each running a command in its sandbox
      const outs = await Promise.all(
        Array.from({ length: 8 }, async () => {
          const id = (await req('POST', '/api/conversations', {})).body.conversation_id as string;
          const r = await req('POST', '/api/bash/execute_bash_command', { command: 'readlink /proc/self/ns/pid', conversation_id: id, timeout: 120 });
          assert.equal(r.status, 200, r.text);
          return String(r.body.stdout).trim();
        }),
      );
      assert.equal(new Set(outs).size, 8, `one pid namespace per conversation: ${outs.join(', ')}`);
      // the burst asked for spares ahead of the next conversations
      await waitFor(() => spareDirs(root).length >= 2, 'more than one spare after the burst', 120_000);
      const before = descendants(d.proc.pid!);
      const code = await d.stop('SIGTERM');
      assert.equal(code, 0);
      const now = livingProcesses();
      const left = before.filter((p) => now.has(p));
      assert.deepEqual(left, [], 'no process the daemon started (its spares included) is alive once it exited');
      assert.deepEqual(spareDirs(root), [], "no spare's directory is left");
    } finally {
      await d.stop('SIGKILL');
      fs.rmSync(d.dataDir, { recursive: true, force: true });
    }
  });
});
