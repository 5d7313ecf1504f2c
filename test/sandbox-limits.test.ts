/**
 * Sums and disks, judged from the host: all sandboxes together stay under SANDBOX_TOTAL_MEMORY_MB
 * (one parent cgroup, enforced by the kernel), and where SANDBOX_DISK_MB is measured a conversation
 * over it has its processes stopped with an event that says why, on a small tmpfs the test mounts
 * for DATA_DIR (disk images and unlinked files: sandbox-disk.test.ts).
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { allEvents } from './support/conversation-api.js';
import { startDaemon, tempDir, waitFor, type DaemonHandle } from './support/daemon.js';
import { startScriptedLlm, type ScriptedLlm } from './support/scripted-llm.js';

const ROOT_RUN = process.getuid?.() === 0;

/** Host pids whose command line is exactly `argv`. */
function pidsOf(argv: string[]): number[] {
  const want = `${argv.join('\0')}\0`;
  return fs
    .readdirSync('/proc')
    .filter((p) => /^\d+$/.test(p))
    .filter((p) => {
      try {
        return fs.readFileSync(`/proc/${p}/cmdline`, 'utf8') === want;
      } catch {
        return false;
      }
    })
    .map(Number);
}

/** The memory cgroup directory of a host process (v1 memory hierarchy or v2). */
function memoryCgroupOf(pid: number): string {
  const lines = fs.readFileSync(`/proc/${pid}/cgroup`, 'utf8').split('\n');
  const v1 = lines.find((l) => /^\d+:[^:]*\bmemory\b[^:]*:/.test(l));
  if (v1) return path.join('/sys/fs/cgroup/memory', v1.split(':')[2]!);
  const v2 = lines.find((l) => l.startsWith('0::'))!;
  const mount = fs
    .readFileSync('/proc/self/mounts', 'utf8')
    .split('\n')
    .find((l) => l.split(' ')[2] === 'cgroup2')!
    .split(' ')[1]!;
  return path.join(mount, v2.slice(3));
}

const limitOf = (dir: string) => {
  for (const f of ['memory.limit_in_bytes', 'memory.max']) if (fs.existsSync(path.join(dir, f))) return Number(fs.readFileSync(path.join(dir, f), 'utf8'));
  throw new Error(`no memory limit in ${dir}`);
};

async function turn(d: DaemonHandle, llm: ScriptedLlm, id: string, command: string, timeout = 120): Promise<any> {
  const before = (await allEvents(d.req, id)).length;
  llm.push({ toolCalls: [{ name: 'terminal', arguments: { command, timeout } }] }, { text: 'done' });
  assert.equal((await d.req('POST', `/api/conversations/${id}/events`, { content: [{ text: 'go' }], run: true })).status, 200);
  return waitFor(
    async () => (await allEvents(d.req, id)).slice(before).find((e) => e.kind === 'ObservationEvent')?.observation,
    'the command answered',
    150_000,
  );
}

describe('sandbox limits over all conversations', {
  skip: !ROOT_RUN && "needs root: a writable cgroup hierarchy and a tmpfs of the test's own",
  timeout: 420_000,
}, () => {
  let llm: ScriptedLlm;
  before(async () => {
    llm = await startScriptedLlm();
  });
  after(async () => {
    await llm?.close();
  });

  test("SANDBOX_TOTAL_MEMORY_MB: the limit of the sandboxes' parent cgroup; two conversations wanting more together cannot both hold it", async () => {
    const d = await startDaemon({
      LLM_MODEL: 'openai/scripted',
      LLM_BASE_URL: llm.url,
      SANDBOX: 'bwrap',
      SANDBOX_NETWORK: 'none',
      SANDBOX_MEMORY_MB: '160',
      SANDBOX_TOTAL_MEMORY_MB: '200',
    });
    try {
      const info = (await d.req('GET', '/server_info')).body.sandbox;
      assert.equal(info.limits.total_memory_mb, 200, JSON.stringify(info));
      assert.match(info.limits.enforced_by, /^cgroup-v[12]$/);
      const a = (await d.req('POST', '/api/conversations', {})).body.conversation_id;
      const b = (await d.req('POST', '/api/conversations', {})).body.conversation_id;
      // each holds 120 MiB (within its own 160): together 240, over the 200 of all sandboxes
      const hold = (tag: string) =>
        `python3 -c "import time; a = bytearray(120 * 1024 * 1024); a[::4096] = b'x' * len(a[::4096]); ` +
        `print('HELD-${tag}', flush=True); time.sleep(${tag === 'a' ? 60 : 61})" 2>&1; echo "exit=$?"`;
      const first = await turn(
        d,
        llm,
        a,
        `(${hold('a')}) > /tmp/a.log & sleep 0.1; until grep -q 'HELD\\|exit' /tmp/a.log; do sleep 0.2; done; cat /tmp/a.log`,
      );
      assert.match(first.content[0].text, /HELD-a/);
      const [job] = pidsOf([
        'python3',
        '-c',
        `import time; a = bytearray(120 * 1024 * 1024); a[::4096] = b'x' * len(a[::4096]); print('HELD-a', flush=True); time.sleep(60)`,
      ]);
      assert.ok(job, 'the first job holds its memory');
      // judged from the host: its cgroup's parent (all sandboxes) has the total, the cgroup its own
      const own = memoryCgroupOf(job!);
      assert.equal(limitOf(own), 160 * 1024 * 1024);
      assert.equal(limitOf(path.dirname(own)), 200 * 1024 * 1024);
      // the second takes 120 MiB more and lets it go: the kernel cannot let both hold it (it refuses the
      // second, or its OOM killer ends one of the two: which one is the kernel's choice)
      const second = await turn(
        d,
        llm,
        b,
        `python3 -c "a = bytearray(120 * 1024 * 1024); a[::4096] = b'x' * len(a[::4096]); print('HELD-b')" 2>&1; echo "exit=$?"`,
      );
      const bHeld = /HELD-b[\s\S]*exit=0/.test(second.content[0].text);
      const aAlive = fs.existsSync(`/proc/${job}`) && !/\) Z /.test(fs.readFileSync(`/proc/${job}/stat`, 'utf8'));
      assert.ok(!(bHeld && aAlive), `both held 120 MiB under a 200 MiB total: ${second.content[0].text}`);
    } finally {
      await d.stop();
    }
  });

  test("SANDBOX_CPU: a conversation's processes are in a cgroup with that CPU quota (where the cpu controller is there)", async () => {
    const d = await startDaemon({ LLM_MODEL: 'openai/scripted', LLM_BASE_URL: llm.url, SANDBOX: 'bwrap', SANDBOX_NETWORK: 'none', SANDBOX_CPU: '0.5' });
    try {
      const info = (await d.req('GET', '/server_info')).body.sandbox;
      const id = (await d.req('POST', '/api/conversations', {})).body.conversation_id;
      const marker = `9393${process.pid % 1000}`;
      await turn(d, llm, id, `(sleep ${marker} > /dev/null 2>&1 &); echo started`);
      const job = (await waitFor(() => pidsOf(['sleep', marker])[0], 'the job runs', 20_000))!;
      const lines = fs.readFileSync(`/proc/${job}/cgroup`, 'utf8').split('\n');
      const v1 = lines.find((l) => /^\d+:[^:]*\bcpu\b[^:]*:/.test(l));
      const v2 = lines.find((l) => l.startsWith('0::'));
      let quota: string | null = null;
      if (v1 && fs.existsSync(path.join('/sys/fs/cgroup/cpu', v1.split(':')[2]!, 'cpu.cfs_quota_us')))
        quota = fs.readFileSync(path.join('/sys/fs/cgroup/cpu', v1.split(':')[2]!, 'cpu.cfs_quota_us'), 'utf8').trim();
      else if (v2) {
        const f = path.join('/sys/fs/cgroup', v2.slice(3), 'cpu.max');
        if (fs.existsSync(f)) quota = fs.readFileSync(f, 'utf8').trim().split(' ')[0]!;
      }
      if (info.limits.cpus === null) {
        // no cpu controller to write: /server_info says so, and nothing claims a quota
        assert.equal(quota === null || quota === 'max' || quota === '-1', true, `no quota claimed, none set: ${quota}`);
      } else {
        assert.equal(info.limits.cpus, 0.5);
        assert.equal(quota, '50000', 'a CFS quota of half a CPU per 100 ms');
      }
    } finally {
      await d.stop();
    }
  });

  test('SANDBOX_DISK=measured: writing past SANDBOX_DISK_MB stops a conversation, event and observation say why; the daemon and others go on', async () => {
    const mnt = tempDir('parley-disk-');
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=96m', 'tmpfs', mnt]);
    let d: DaemonHandle | null = null;
    try {
      d = await startDaemon(
        // (a root daemon's default is a disk image per conversation: test/sandbox-disk.test.ts)
        { LLM_MODEL: 'openai/scripted', LLM_BASE_URL: llm.url, SANDBOX: 'bwrap', SANDBOX_NETWORK: 'none', SANDBOX_DISK_MB: '16', SANDBOX_DISK: 'measured' },
        path.join(mnt, 'data'),
      );
      assert.equal((await d.req('GET', '/server_info')).body.sandbox.limits.disk_mb, 16);
      const a = (await d.req('POST', '/api/conversations', {})).body.conversation_id;
      const b = (await d.req('POST', '/api/conversations', {})).body.conversation_id;
      const t0 = Date.now();
      // 1 MiB every 100 ms until stopped (a bounded writer: at most 60 MiB)
      const obs = await turn(d, llm, a, 'for i in $(seq 60); do head -c 1048576 /dev/zero > /workspace/fill-$i; sleep 0.1; done; echo WROTE-ALL', 120);
      const text = obs.content[0].text as string;
      assert.doesNotMatch(text, /WROTE-ALL/, 'the writer was stopped');
      assert.match(text, /SANDBOX_DISK_MB/);
      const evs = await allEvents(d.req, a);
      const ev = evs.find((e) => e.kind === 'ConversationErrorEvent' && e.code === 'DiskQuotaExceeded');
      assert.ok(ev, JSON.stringify(evs.map((e) => e.kind)));
      assert.match(ev.detail, /over its 16 MiB/);
      // judged from the host: what was written when it stopped (the worst overshoot is one poll interval of writing)
      const ws = path.join(mnt, 'data', 'workspaces', a.replace(/-/g, ''));
      const files = fs.readdirSync(ws).filter((f) => f.startsWith('fill-'));
      console.log(`disk bound 16 MiB: stopped after ${files.length} MiB written, ${Date.now() - t0} ms`);
      assert.ok(files.length >= 16 && files.length < 60, `${files.length} MiB written`);
      // another conversation and the daemon go on
      const other = await turn(d, llm, b, 'echo other-fine');
      assert.match(other.content[0].text, /other-fine/);
      // the stopped one can delete and go on (its use went down), and goes on under the bound
      const again = await turn(d, llm, a, 'rm -f /workspace/fill-*; echo cleaned');
      assert.match(again.content[0].text, /cleaned/);
      const later = await turn(d, llm, a, 'head -c 1048576 /dev/zero > /workspace/small; sleep 5; echo still-here');
      assert.match(later.content[0].text, /still-here/);
    } finally {
      await d?.stop();
      execFileSync('umount', ['-l', mnt]);
    }
  });

  test("an agent filling the shared disk (no disk bound) is stopped as its largest user; the daemon's appends go on; once space returns, all do", async () => {
    const mnt = tempDir('parley-full-');
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=96m', 'tmpfs', mnt]);
    let d: DaemonHandle | null = null;
    try {
      d = await startDaemon(
        { LLM_MODEL: 'openai/scripted', LLM_BASE_URL: llm.url, SANDBOX: 'bwrap', SANDBOX_NETWORK: 'none', SANDBOX_DISK_MB: '0', DISK_RESERVE_MB: '4' },
        path.join(mnt, 'data'),
      );
      const a = (await d.req('POST', '/api/conversations', {})).body.conversation_id;
      const b = (await d.req('POST', '/api/conversations', {})).body.conversation_id;
      // the agent writes until the disk is full, and keeps trying
      const obs = await turn(d, llm, a, 'while :; do head -c 1048576 /dev/zero >> /workspace/fill 2>/dev/null || sleep 0.2; done', 120);
      assert.match(obs.content[0].text, /the disk is full and this conversation uses the most of it/);
      const evs = await allEvents(d.req, a);
      assert.ok(
        evs.some((e) => e.kind === 'ConversationErrorEvent' && e.code === 'DiskFull'),
        JSON.stringify(evs.map((e) => e.kind)),
      );
      // the daemon's own writes: a message to the other conversation is appended (the journal's reserve)
      const sent = await d.req('POST', `/api/conversations/${b}/events`, { content: [{ text: 'still here' }] });
      assert.equal(sent.status, 200, sent.text);
      // the space returns (the host removes what the agent wrote): everything works again, without a restart
      fs.rmSync(path.join(mnt, 'data', 'workspaces', a.replace(/-/g, ''), 'fill'));
      await waitFor(
        async () => (await d!.req('POST', `/api/conversations/${b}/events`, { content: [{ text: 'after' }] })).status === 200,
        'appends work again',
        30_000,
      );
      const again = await turn(d, llm, a, 'echo back');
      assert.match(again.content[0].text, /back/);
    } finally {
      await d?.stop();
      execFileSync('umount', ['-l', mnt]);
    }
  });
});
