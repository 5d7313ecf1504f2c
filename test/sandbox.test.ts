/**
 * The per-conversation bubblewrap sandbox, driven through the public API with the scripted LLM and
 * judged from the host: files on disk, /proc of the host, the daemon's own liveness.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { allEvents, waitStatus } from './support/conversation-api.js';
import { ROOT, startDaemon, tempDir, waitFor, type DaemonHandle } from './support/daemon.js';
import { startScriptedLlm, type ScriptedLlm } from './support/scripted-llm.js';
import { startGitServer } from './support/git-server.js';
import { hostPid } from './support/processes.js';
import { Sandbox, DEFAULT_SANDBOX_SETTINGS } from '../src/sandbox/launcher.js';
import { fileURLToPath } from 'node:url';

const SESSION = 'sess-SANDBOXCANARY-4711';
const LLM_KEY = 'sk-SANDBOXCANARY-llm-0815';
const SECRET_KEY = 'secretkey-SANDBOXCANARY-0042';
const CANARIES = [SESSION, LLM_KEY, SECRET_KEY];
const H = { 'X-Session-API-Key': SESSION };
const rev = (s: string) => [...s].reverse().join('');

/** Host processes whose command line contains `marker` (read from the host's /proc). */
function hostProcesses(marker: string): number[] {
  const out: number[] = [];
  for (const d of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const cmd = fs.readFileSync(`/proc/${d}/cmdline`, 'utf8').replace(/\0/g, ' ');
      const state = fs.readFileSync(`/proc/${d}/stat`, 'utf8').split(') ')[1]?.[0];
      if (cmd.includes(marker) && state !== 'Z') out.push(Number(d));
    } catch {
      /* gone */
    }
  }
  return out;
}

/**
 * The one host process whose command line contains `marker`, once it is there: a job started with
 * `(cmd &)` may not have exec'd yet when the command that started it returns.
 */
async function hostProcess(marker: string): Promise<number> {
  const found = await waitFor(() => (hostProcesses(marker).length === 1 ? hostProcesses(marker)[0] : undefined), `one process "${marker}"`, 10_000);
  return found!;
}

/** The namespace a host process is in (`pid:[4026…]`), or null when it is gone. */
function nsOf(pid: number, kind = 'pid'): string | null {
  try {
    return fs.readlinkSync(`/proc/${pid}/ns/${kind}`);
  } catch {
    return null;
  }
}

/** Host processes in the pid namespace `ns` (zombies have no namespace links). */
function pidsInNs(ns: string): number[] {
  return fs.readdirSync('/proc').filter((d) => /^\d+$/.test(d) && nsOf(Number(d)) === ns).map(Number);
}

/** Every living descendant of `root` on the host (through the parent links in /proc/<pid>/stat). */
function descendants(root: number): number[] {
  const parent = new Map<number, number>();
  for (const d of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const stat = fs.readFileSync(`/proc/${d}/stat`, 'utf8');
      const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      if (f[0] !== 'Z') parent.set(Number(d), Number(f[1]));
    } catch {
      /* gone */
    }
  }
  const out: number[] = [];
  for (const pid of parent.keys()) {
    for (let p = parent.get(pid); p !== undefined && p > 1; p = parent.get(p)) {
      if (p === root) {
        out.push(pid);
        break;
      }
    }
  }
  return out;
}

const alive = (pids: number[]) =>
  pids.filter((p) => {
    try {
      return !/\) Z /.test(fs.readFileSync(`/proc/${p}/stat`, 'utf8'));
    } catch {
      return false;
    }
  });

const TSX_LOADER = import.meta.resolve('tsx');
const STDIO_SERVER = fileURLToPath(new URL('./support/mcp-servers/stdio-server.ts', import.meta.url));

interface Harness {
  d: DaemonHandle;
  llm: ScriptedLlm;
  req: DaemonHandle['req'];
  /** Creates a conversation (its workspace exists once this returns). */
  create(): Promise<string>;
  /** Runs tool calls (one LLM response each) then a final answer; returns the observations. */
  run(id: string, calls: { name: string; arguments: object }[]): Promise<any[]>;
  /** One terminal command; the observation's text. */
  sh(id: string, command: string, timeout?: number): Promise<{ text: string; exit: number | null }>;
  ws(id: string): string;
  close(): Promise<void>;
}

async function harness(env: Record<string, string> = {}): Promise<Harness> {
  const llm = await startScriptedLlm();
  const d = await startDaemon({
    LLM_MODEL: 'openai/scripted',
    LLM_BASE_URL: llm.url,
    LLM_API_KEY: LLM_KEY,
    SESSION_API_KEY: SESSION,
    SECRET_KEY,
    SANDBOX: 'bwrap',
    ...env,
  });
  const req: DaemonHandle['req'] = (m, p, b, h) => d.req(m, p, b, { ...H, ...h });
  const h: Harness = {
    d,
    llm,
    req,
    async create() {
      const r = await req('POST', '/api/conversations', {});
      assert.equal(r.status, 200, r.text);
      const id = r.body.conversation_id as string;
      await waitFor(async () => (await req('GET', `/api/conversations/${id}`)).body.execution_status === 'idle', 'conversation ready', 20_000);
      // created on first use: nothing on disk until something runs
      assert.ok(!fs.existsSync(h.ws(id)), 'no workspace before first use');
      fs.mkdirSync(h.ws(id), { recursive: true });
      return id;
    },
    async run(id, calls) {
      const before = (await allEvents(req, id)).length;
      llm.push(...calls.map((c) => ({ toolCalls: [c] })), { text: 'done' });
      const r = await req('POST', `/api/conversations/${id}/events`, { content: [{ text: 'go' }], run: true });
      assert.equal(r.status, 200, r.text);
      await waitFor(async () => {
        const evs = await allEvents(req, id);
        return evs.slice(before).some((e) => e.kind === 'MessageEvent' && e.source === 'agent');
      }, 'the run answered', 60_000);
      await waitFor(async () => (await req('GET', `/api/conversations/${id}`)).body.execution_status !== 'running', 'run ended', 20_000);
      return (await allEvents(req, id)).slice(before).filter((e) => e.kind === 'ObservationEvent').map((e) => e.observation);
    },
    async sh(id, command, timeout) {
      const [o] = await h.run(id, [{ name: 'terminal', arguments: { command, ...(timeout ? { timeout } : {}) } }]);
      return { text: o.content.map((c: any) => c.text ?? '').join('\n'), exit: o.exit_code };
    },
    ws: (id) => path.join(d.dataDir, 'workspaces', id.replace(/-/g, '')),
    async close() {
      await d.stop();
      await llm.close();
      fs.rmSync(d.dataDir, { recursive: true, force: true });
    },
  };
  return h;
}

describe('sandbox (bwrap, host network)', { timeout: 300_000 }, () => {
  let h: Harness;
  let a: string;
  let b: string;
  before(async () => {
    h = await harness({ SANDBOX_MEMORY_MB: '128', SANDBOX_PIDS: '64', SANDBOX_NETWORK: 'host' });
    a = await h.create();
    b = await h.create();
    fs.writeFileSync(path.join(h.ws(b), 'secret.txt'), 'B-PRIVATE-CONTENT-1234\n');
  });
  after(async () => {
    await h?.close();
  });

  test('/server_info reports the sandbox and its limits', async () => {
    const r = await h.req('GET', '/server_info');
    assert.equal(r.body.sandbox.mode, 'bwrap');
    assert.equal(r.body.sandbox.network, 'host');
    assert.equal(r.body.sandbox.limits.memory_mb, 128);
    assert.match(r.body.sandbox.limits.enforced_by, /^(cgroup-v1|cgroup-v2|rlimit)$/);
  });

  test("the shell sees its workspace at /workspace; files are the sandbox uid's on the host (the daemon's when it is not root); no capability, no_new_privs", async () => {
    const m = `6464${process.pid % 1000}`;
    const r = await h.sh(a, `pwd; echo hi > mine.txt; id -u; (sleep ${m} >/dev/null 2>&1 &)`);
    assert.match(r.text, /^\/workspace$/m);
    assert.match(r.text, /^0$/m, "uid 0 of the conversation's user namespace");
    // as root the sandbox is SANDBOX_UID/SANDBOX_GID (default 65533), never root on the host
    const uid = process.getuid!() === 0 ? 65533 : process.getuid!();
    const gid = process.getuid!() === 0 ? 65533 : process.getgid!();
    const st = fs.statSync(path.join(h.ws(a), 'mine.txt'));
    assert.equal(st.uid, uid);
    assert.equal(st.gid, gid);
    // judged from the host: that uid, every capability set empty, no_new_privs
    const [job] = (await waitFor(() => (hostProcesses(`sleep ${m}`).length ? hostProcesses(`sleep ${m}`) : null), "the job runs", 10_000))!;
    const status = fs.readFileSync(`/proc/${job}/status`, 'utf8');
    assert.match(status, new RegExp(`^Uid:\\s+${uid}\\s+${uid}\\s+${uid}\\s+${uid}$`, 'm'));
    assert.match(status, new RegExp(`^Gid:\\s+${gid}\\s+${gid}\\s+${gid}\\s+${gid}$`, 'm'));
    assert.match(status, /^Groups:\s*$/m, 'no supplementary group (not root\'s)');
    for (const set of ['CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb']) assert.match(status, new RegExp(`^${set}:\\s+0+$`, 'm'), set);
    assert.match(status, /^NoNewPrivs:\s+1$/m);
    process.kill(job!, 'SIGKILL');
  });

  test("another conversation's workspace and DATA_DIR are not visible", async () => {
    const r = await h.sh(
      a,
      `cat ${h.ws(b)}/secret.txt; ls ${h.ws(b)}; ls ${h.d.dataDir}; cat ${h.d.dataDir}/*.db; ls ${path.dirname(h.ws(b))}; cat /workspace/../${path.basename(h.ws(b))}/secret.txt; echo END`,
    );
    assert.doesNotMatch(r.text, /B-PRIVATE-CONTENT/);
    assert.match(r.text, /No such file or directory/);
    // nothing listed: only error messages name those paths
    assert.doesNotMatch(r.text, /^(secret\.txt|parley\.db|parley\.lock|parley\.pid|secret\.key|journal.*|workspaces)$/m, 'a listing leaked');
  });

  test("the daemon's environment and /proc are out of reach", async () => {
    const pid = h.d.proc.pid!;
    const r = await h.sh(a, `cat /proc/${pid}/environ; ls /proc | grep -c '^[0-9]'; env | rev > env-rev.txt; cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n' | rev >> env-rev.txt; env | sort > env.txt`);
    assert.match(r.text, /No such file or directory/);
    // judged from the host: the files the shell wrote hold no daemon secret, not even reversed
    const dumped = fs.readFileSync(path.join(h.ws(a), 'env-rev.txt'), 'utf8') + fs.readFileSync(path.join(h.ws(a), 'env.txt'), 'utf8');
    for (const c of CANARIES) {
      assert.ok(!dumped.includes(c) && !dumped.includes(rev(c)), `${c} reached the sandbox`);
    }
    for (const name of ['SESSION_API_KEY', 'LLM_API_KEY', 'SECRET_KEY', 'DATA_DIR', 'LLM_BASE_URL']) {
      assert.doesNotMatch(dumped, new RegExp(`^${name}=`, 'm'), `${name} is in the shell's environment`);
    }
    assert.match(dumped, /^HOME=\/home\/agent$/m);
  });

  test('kill -9 of the daemon from inside fails and the daemon lives', async () => {
    const pid = h.d.proc.pid!;
    const r = await h.sh(a, `kill -9 ${pid}; echo rc=$?; kill -9 -1; echo after`);
    assert.match(r.text, /rc=1/);
    assert.equal(h.d.proc.exitCode, null);
    assert.equal((await h.req('GET', '/alive')).status, 200);
    // kill -1 inside only reached the sandbox's own processes: the next command gets a fresh shell
    const again = await h.sh(a, 'echo still-here');
    assert.match(again.text, /still-here/);
  });

  test('writes outside the workspace (/tmp, /, /usr, DATA_DIR) leave nothing on the host', async () => {
    const tag = `escape-${process.pid}-${Date.now()}`;
    const r = await h.sh(
      a,
      `touch /tmp/${tag} /var/tmp/${tag} /${tag} ~/${tag}; ls /tmp/${tag}; touch /usr/${tag} /etc/${tag} ${h.d.dataDir}/${tag}; echo END`,
    );
    assert.match(r.text, /END/);
    for (const p of [`/tmp/${tag}`, `/var/tmp/${tag}`, `/${tag}`, `/usr/${tag}`, `/etc/${tag}`, path.join(h.d.dataDir, tag), path.join(process.env.HOME ?? '/root', tag)]) {
      assert.ok(!fs.existsSync(p), `${p} exists on the host`);
    }
  });

  test('file_editor: outside paths, .. and planted symlinks are refused without content', async () => {
    const other = h.ws(b);
    await h.sh(a, `ln -sfn ${other} /workspace/other; ln -sfn ${h.d.dataDir} /workspace/data; ln -sfn ${other}/secret.txt /workspace/s.txt; ln -sfn /nonexistent/x /workspace/dangling; echo ok`);
    // the links exist on the host, pointing outside
    assert.equal(fs.readlinkSync(path.join(h.ws(a), 'other')), other);
    const obs = await h.run(a, [
      { name: 'file_editor', arguments: { command: 'view', path: '/workspace/other/secret.txt' } },
      { name: 'file_editor', arguments: { command: 'view', path: '/workspace/s.txt' } },
      { name: 'file_editor', arguments: { command: 'view', path: '/workspace/data' } },
      { name: 'file_editor', arguments: { command: 'view', path: `/workspace/../${path.basename(other)}/secret.txt` } },
      { name: 'file_editor', arguments: { command: 'view', path: `${other}/secret.txt` } },
      { name: 'file_editor', arguments: { command: 'create', path: '/workspace/other/planted.txt', file_text: 'x' } },
      { name: 'file_editor', arguments: { command: 'create', path: '/workspace/dangling', file_text: 'x' } },
      { name: 'file_editor', arguments: { command: 'view', path: '/etc/hostname' } },
    ]);
    assert.equal(obs.length, 8);
    for (const o of obs) {
      const text = o.content.map((c: any) => c.text).join('\n');
      assert.equal(o.is_error, true, text);
      assert.match(text, /outside the workspace/, text);
      assert.doesNotMatch(text, /B-PRIVATE-CONTENT|sqlite|\.db/);
    }
    assert.ok(!fs.existsSync(path.join(other, 'planted.txt')));
    assert.ok(!fs.existsSync('/nonexistent/x'));
    // inside the workspace it works, at either name
    const ok = await h.run(a, [
      { name: 'file_editor', arguments: { command: 'create', path: '/workspace/ok.txt', file_text: 'fine\n' } },
      { name: 'file_editor', arguments: { command: 'view', path: `${h.ws(a)}/ok.txt` } },
    ]);
    assert.equal(ok[0].is_error, false, JSON.stringify(ok[0]));
    assert.match(ok[1].content[0].text, /fine/);
    assert.equal(fs.readFileSync(path.join(h.ws(a), 'ok.txt'), 'utf8'), 'fine\n');
  });

  test('a long output is saved where the shell can read it (read-only)', async () => {
    const [o] = await h.run(a, [{ name: 'terminal', arguments: { command: 'seq 1 40000' } }]);
    assert.match(o.full_output_path, /^\/parley\/outputs\//);
    const r = await h.sh(a, `wc -l < ${o.full_output_path}; echo x >> ${o.full_output_path}; echo rc=$?`);
    assert.match(r.text, /^40000$/m);
    assert.match(r.text, /Read-only file system/);
  });

  test('the host network is reachable with SANDBOX_NETWORK=host (control for the none test)', async () => {
    const r = await h.sh(a, `(exec 3<>/dev/tcp/127.0.0.1/${h.d.port}) 2>/dev/null && echo CONNECTED || echo REFUSED`);
    assert.match(r.text, /CONNECTED/);
  });

  test('a memory hog is stopped by its limit; the daemon and another conversation keep working', async () => {
    const r = await h.sh(a, `python3 -c "x = bytearray(1024*1024*1024); x[::4096] = b'1' * (len(x)//4096); print('ALLOCATED')"; echo "rc=$?"`, 60);
    assert.doesNotMatch(r.text, /ALLOCATED/);
    assert.match(r.text, /rc=(137|1)\b|Killed|MemoryError/);
    assert.equal((await h.req('GET', '/alive')).status, 200);
    assert.match((await h.sh(b, 'echo b-works')).text, /b-works/);
  });

  test('a fork bomb is held by the pids limit while another conversation works; DELETE leaves no process', async () => {
    const bomb = `bomb-${process.pid}`;
    await h.sh(a, `printf '%s\\n' 'f() { f | f & }; f' > ${bomb}.sh; (nice -n 19 timeout 600 bash ${bomb}.sh >/dev/null 2>&1 &); echo started`);
    await waitFor(() => hostProcesses(`${bomb}.sh`).length >= 40, 'the bomb grew', 30_000);
    // held: never more processes than SANDBOX_PIDS (64) in the conversation
    for (let i = 0; i < 10; i++) {
      assert.ok(hostProcesses(`${bomb}.sh`).length <= 64, `${hostProcesses(`${bomb}.sh`).length} bomb processes`);
      await new Promise((r) => setTimeout(r, 50));
    }
    assert.match((await h.sh(b, 'echo b-still-works')).text, /b-still-works/);
    assert.equal((await h.req('DELETE', `/api/conversations/${a}`)).status, 200);
    await waitFor(() => hostProcesses(`${bomb}.sh`).length === 0, 'no bomb process left after DELETE', 20_000);
  });

  test('background processes are gone after DELETE', async () => {
    const c = await h.create();
    const marker = `4242${process.pid % 1000}`;
    await h.sh(c, `(sleep ${marker} &); nohup sleep ${marker}1 >/dev/null 2>&1 & setsid sleep ${marker}2 & echo started`);
    await waitFor(() => hostProcesses(`sleep ${marker}`).length === 3, 'three sleeps running', 10_000);
    assert.equal((await h.req('DELETE', `/api/conversations/${c}`)).status, 200);
    await waitFor(() => hostProcesses(`sleep ${marker}`).length === 0, 'no sleep left after DELETE', 10_000);
  });

  test('interrupt stops every process of the conversation, background ones included', async () => {
    const c = await h.create();
    const marker = `5353${process.pid % 1000}`;
    // a run whose command is still running, with a background job started before it
    h.llm.push({ toolCalls: [{ name: 'terminal', arguments: { command: `(sleep ${marker} &); sleep ${marker}1`, timeout: 600 } }] });
    await h.req('POST', `/api/conversations/${c}/events`, { content: [{ text: 'go' }], run: true });
    await waitFor(() => hostProcesses(`sleep ${marker}`).length === 2, 'sleeps running', 10_000);
    assert.equal((await h.req('POST', `/api/conversations/${c}/interrupt`, {})).status < 300, true);
    await waitFor(() => hostProcesses(`sleep ${marker}`).length === 0, 'no sleep left after interrupt', 10_000);
    assert.match((await h.sh(c, 'echo fresh-shell')).text, /fresh-shell/);
    // also with no run active: a server left in the background is stopped
    await h.sh(c, `(sleep ${marker}2 &); echo started`);
    await waitFor(() => hostProcesses(`sleep ${marker}2`).length === 1, 'background sleep running', 10_000);
    assert.equal((await h.req('POST', `/api/conversations/${c}/interrupt`, {})).status < 300, true);
    await waitFor(() => hostProcesses(`sleep ${marker}2`).length === 0, 'no sleep left after an idle interrupt', 10_000);
  });
});

describe('sandbox: one sandbox per conversation', { timeout: 180_000 }, () => {
  test('the shell, setup.sh and a stdio MCP server share one set of namespaces (user, pid, mount, ipc, uts) and one /tmp; another conversation does not; DELETE ends it; a dead sandbox is recreated', async () => {
    const h = await harness();
    const git = await startGitServer({ token: 'gh-SANDBOX-token-5678' });
    const m = `9191${process.pid % 1000}`;
    try {
      await git.createRepo('acme/one', {
        'README.md': '# one\n',
        '.openhands/setup.sh': [`echo FROM-SETUP-${m} > /tmp/setup-${m}`, `echo cached > ~/.cache-${m}`, `(sleep ${m}1 >/dev/null 2>&1 &)`, 'echo SETUP-DONE', ''].join('\n'),
      }, { private: true });
      assert.equal((await h.req('POST', '/api/add-git-providers', { provider_tokens: { github: { token: 'gh-SANDBOX-token-5678', host: git.url } } })).status, 200);
      const r = await h.req('POST', '/api/conversations', {
        repository: 'acme/one',
        git_provider: 'github',
        mcp_config: { stdio_servers: [{ name: 'local', command: process.execPath, args: ['--import', TSX_LOADER, STDIO_SERVER, 'local'] }] },
      });
      const a = r.body.conversation_id as string;
      await waitFor(async () => ['ready', 'error'].includes((await h.req('GET', `/api/conversations/${a}`)).body.setup?.phase), 'prepared', 60_000);
      // the MCP server starts with the run; its `pid` tool names it on the host
      const [pidObs] = await h.run(a, [{ name: 'pid', arguments: {} }]);
      const mcpPid = hostPid(pidObs.content.map((c: any) => c.text).join(''));
      assert.ok(mcpPid > 0, JSON.stringify(pidObs));
      const shell = await h.sh(a, `cat /tmp/setup-${m}; cat ~/.cache-${m}; (sleep ${m}2 >/dev/null 2>&1 &); ps -eo pid,args; echo "NSFDS $(ls -l /proc/$$/fd | grep -cE '(user|pid):\\[')"`);
      assert.match(shell.text, /^NSFDS 0$/m, "the shell closed the sandbox's namespace fds");
      assert.match(shell.text, new RegExp(`FROM-SETUP-${m}`), 'the shell reads what setup.sh wrote to /tmp');
      assert.match(shell.text, /^cached$/m, 'and to HOME');
      assert.match(shell.text, new RegExp(`sleep ${m}1`), "ps in the shell shows setup.sh's background job");
      assert.match(shell.text, /parley-test-pid-/, 'ps in the shell shows the MCP server');
      // judged from the host: one pid (and user) namespace for all of them, not the host's
      const setupJob = await hostProcess(`sleep ${m}1`);
      const shellJob = await hostProcess(`sleep ${m}2`);
      const nsA = nsOf(shellJob)!;
      assert.notEqual(nsA, nsOf(process.pid));
      assert.equal(nsOf(setupJob), nsA);
      assert.equal(nsOf(mcpPid), nsA);
      // and every other namespace: one sandbox, not one per process
      for (const kind of ['user', 'mnt', 'ipc', 'uts']) {
        const shared = nsOf(shellJob, kind);
        assert.notEqual(shared, nsOf(process.pid, kind), `${kind}: not the host's`);
        assert.equal(nsOf(setupJob, kind), shared, `${kind}: setup.sh's job`);
        assert.equal(nsOf(mcpPid, kind), shared, `${kind}: the MCP server`);
      }
      // /tmp and HOME live on the host outside the workspace, private to the daemon's user
      const state = path.join(h.d.dataDir, 'workspaces', '.sandbox', a.replace(/-/g, ''));
      assert.equal(fs.readFileSync(path.join(state, 'tmp', `setup-${m}`), 'utf8'), `FROM-SETUP-${m}\n`);
      assert.equal(fs.statSync(path.join(state, 'tmp')).mode & 0o777, 0o700);
      assert.ok(!fs.existsSync(path.join(h.ws(a), `setup-${m}`)));

      // another conversation: its own namespace and /tmp
      const b = await h.create();
      const other = await h.sh(b, `ls -A /tmp; ls -A ~; (sleep ${m}3 >/dev/null 2>&1 &); ps -eo args | grep -c "sleep ${m}[12]"`);
      assert.doesNotMatch(other.text, new RegExp(`setup-${m}|cache-${m}`));
      assert.match(other.text, /^0$/m, "another conversation's processes are not visible");
      const bJob = await hostProcess(`sleep ${m}3`);
      const nsB = nsOf(bJob!)!;
      assert.notEqual(nsB, nsA);
      for (const kind of ['user', 'mnt', 'ipc', 'uts']) assert.notEqual(nsOf(bJob!, kind), nsOf(shellJob, kind), `${kind}: per conversation`);

      // DELETE: nothing of the namespace is left on the host, nor its /tmp and HOME
      assert.equal((await h.req('DELETE', `/api/conversations/${a}`)).status, 200);
      await waitFor(() => pidsInNs(nsA).length === 0, "no process of the deleted conversation's namespace left", 10_000).catch(() => {
        throw new Error(`left over: ${pidsInNs(nsA).join(',')}`);
      });
      assert.ok(!fs.existsSync(state), 'the sandbox /tmp and HOME are removed');
      assert.ok(pidsInNs(nsB).length > 0, 'the other conversation is untouched');

      // the sandbox dies (its init killed from the host): the next command recreates it
      const init = pidsInNs(nsB).find((p) => /^NSpid:\s+\d+\s+1$/m.test(fs.readFileSync(`/proc/${p}/status`, 'utf8')));
      assert.ok(init, 'the namespace has an init');
      process.kill(init!, 'SIGKILL');
      await waitFor(() => pidsInNs(nsB).length === 0, 'the dead sandbox left nothing', 10_000);
      const again = await h.sh(b, `echo back; (sleep ${m}4 >/dev/null 2>&1 &)`);
      assert.match(again.text, /back/);
      assert.match(again.text, /new shell was started/);
      const bJob2 = await hostProcess(`sleep ${m}4`);
      // a new sandbox: a namespace's inode number is reused once it is freed, its init's host pid is not (yet)
      const init2 = pidsInNs(nsOf(bJob2)!).find((p) => /^NSpid:\s+\d+\s+1$/m.test(fs.readFileSync(`/proc/${p}/status`, 'utf8')));
      assert.ok(init2 && init2 !== init, `a new sandbox (init ${init2}, the killed one ${init})`);
    } finally {
      await git.close();
      await h.close();
    }
  });
});

describe('sandbox: the launcher (in-process, real bwrap)', { timeout: 60_000 }, () => {
  test('background jobs outlive the process that started them until the idle sandbox is closed; joined processes keep no namespace fds', async () => {
    const root = tempDir();
    const sb = await Sandbox.open({ ...DEFAULT_SANDBOX_SETTINGS, mode: 'bwrap', idleCloseMs: 1500 }, { workspaceRoot: root });
    const id = crypto.randomUUID();
    const m = `7373${process.pid % 1000}`;
    const out = (argv: string[]) =>
      new Promise<string>((resolve) => {
        const c = sb.spawn(id, argv, { env: sb.env(), stdio: ['ignore', 'pipe', 'pipe'] });
        let text = '';
        c.stdout!.on('data', (d: Buffer) => (text += d.toString('utf8')));
        c.stderr!.on('data', (d: Buffer) => (text += d.toString('utf8')));
        c.on('close', () => resolve(text));
      });
    try {
      assert.equal(sb.enabled, true);
      // like setup.sh starting a server: the script ends, the job stays in the conversation's sandbox
      await out(['sh', '-c', `(sleep ${m} >/dev/null 2>&1 &); echo started`]);
      const [job] = (await waitFor(() => (hostProcesses(`sleep ${m}`).length === 1 ? hostProcesses(`sleep ${m}`) : null), 'the job runs', 10_000))!;
      const fds = await out(['sh', '-c', 'ls /proc/$$/fd; true']); // sh's own fds (true: sh does not exec ls)
      const open = fds.trim().split(/\s+/);
      assert.ok(open.includes('2') && !open.includes('3') && !open.includes('4'), `fds of a joined process: ${open.join(' ')}`);
      assert.equal(sb.liveCount, 1);
      assert.equal(sb.processCount, 0);
      assert.ok(nsOf(job!), 'still running after the script ended');
      // nothing started through the launcher for idleCloseMs: the sandbox closes, the job with it
      await waitFor(() => hostProcesses(`sleep ${m}`).length === 0, 'the idle sandbox closed', 15_000);
      assert.equal(sb.liveCount, 0);
      assert.ok(fs.existsSync(sb.stateDir(id)), '/tmp and HOME stay until DELETE');
      await sb.removeConversation(id);
      assert.ok(!fs.existsSync(sb.stateDir(id)));
    } finally {
      await sb.close();
      fs.rmSync(root, { recursive: true, force: true });
    }
  });
});

describe('sandbox: a holder whose bwrap dies early', { timeout: 60_000 }, () => {
  test('what bwrap leaves in its process group when it exits (its first child, blocked until bwrap lets it go on) is killed with it', async () => {
    // a bwrap that, from its second start on (the first is the probe's), leaves a child behind and
    // exits, as a real one killed between its clone and its go-ahead (by --die-with-parent when the
    // daemon dies, or by SIGPIPE on --info-fd) leaves its first child blocked, forever
    const dir = tempDir();
    const marker = `8181${process.pid % 1000}`;
    const fake = path.join(dir, 'bwrap');
    fs.writeFileSync(fake, `#!/bin/sh\nn=$(cat ${dir}/count 2>/dev/null || echo 0); echo $((n + 1)) > ${dir}/count\nif [ "$n" -ge 1 ]; then sleep ${marker} & exit 1; fi\nexec /usr/bin/bwrap "$@"\n`, { mode: 0o755 });
    const sb = await Sandbox.open({ ...DEFAULT_SANDBOX_SETTINGS, mode: 'bwrap', bwrapPath: fake, spareHolder: false }, { workspaceRoot: dir });
    try {
      assert.equal(sb.enabled, true, 'the probe passed (the real bwrap)');
      const c = sb.spawn(crypto.randomUUID(), ['true'], { env: sb.env(), stdio: ['ignore', 'ignore', 'pipe'] });
      let stderr = '';
      c.stderr!.on('data', (d: Buffer) => (stderr += d.toString('utf8')));
      const code = await new Promise<number | null>((resolve) => c.on('close', resolve));
      assert.notEqual(code, 0, 'the process could not join a sandbox that died');
      assert.match(stderr, /sandbox is not running/);
      assert.equal(fs.readFileSync(path.join(dir, 'count'), 'utf8').trim(), '2');
      await waitFor(() => hostProcesses(`sleep ${marker}`).length === 0, 'nothing of the failed holder left', 10_000).catch(() => {
        throw new Error(`left behind: ${hostProcesses(`sleep ${marker}`).join(',')}`);
      });
    } finally {
      for (const p of hostProcesses(`sleep ${marker}`)) process.kill(p, 'SIGKILL');
      await sb.close();
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('sandbox: one set of namespaces per conversation (in-process launcher, real bwrap)', { timeout: 60_000 }, () => {
  test('SANDBOX_NETWORK=none: a server one process starts on the loopback is reached by the next one, System V IPC is shared; another conversation reaches neither', async () => {
    const root = tempDir();
    // a mapped directory (as the askpass helper's) that nothing has written to yet
    const helpers = path.join(root, 'helpers');
    const sb = await Sandbox.open({ ...DEFAULT_SANDBOX_SETTINGS, mode: 'bwrap', network: 'none' }, { workspaceRoot: root, mapped: [{ host: helpers, inside: '/parley/helpers' }] });
    const a = crypto.randomUUID();
    const b = crypto.randomUUID();
    const port = 20000 + (process.pid % 20000);
    const out = (id: string, script: string) =>
      new Promise<string>((resolve) => {
        const c = sb.spawn(id, ['sh', '-c', script], { env: sb.env(), stdio: ['ignore', 'pipe', 'pipe'] });
        let text = '';
        c.stdout!.on('data', (d: Buffer) => (text += d.toString('utf8')));
        c.stderr!.on('data', (d: Buffer) => (text += d.toString('utf8')));
        c.on('close', () => resolve(text));
      });
    const connect = `node -e "require('net').connect(${port}, '127.0.0.1').on('data', (d) => console.log(String(d))).on('error', (e) => console.log('ERR', e.code))"`;
    try {
      // like setup.sh starting a dev server: the script ends, the server stays
      await out(a, `(node -e "require('net').createServer((s) => s.end('pong-${port}')).listen(${port}, '127.0.0.1', () => console.log('up'))" > /tmp/server.log 2>&1 &)`);
      const log = path.join(sb.stateDir(a), 'tmp', 'server.log');
      await waitFor(() => fs.existsSync(log) && fs.readFileSync(log, 'utf8').includes('up'), 'the server listens', 20_000);
      const [server] = hostProcesses(`pong-${port}`);
      assert.ok(server, 'the server runs');
      assert.notEqual(nsOf(server!, 'net'), nsOf(process.pid, 'net'), "its own network namespace, not the host's");
      // the host does not reach it (its loopback is the sandbox's), the same conversation does
      const fromHost = await new Promise<string>((resolve) => {
        const s = net.connect(port, '127.0.0.1');
        s.on('data', (d) => resolve(String(d)));
        s.on('error', (e: NodeJS.ErrnoException) => resolve(`ERR ${e.code}`));
      });
      assert.match(fromHost, /^ERR ECONNREFUSED$/);
      assert.match(await out(a, connect), new RegExp(`^pong-${port}$`, 'm'), 'the next process of the conversation reaches it');
      assert.match(await out(b, connect), /^ERR ECONNREFUSED$/m, 'another conversation does not');
      // System V IPC: a queue made by one process is seen by the next, not by another conversation
      assert.match(await out(a, `ipcmk -Q -p 0600 >/dev/null && ipcs -q`), /0x[0-9a-f]+/);
      const listedA = await out(a, 'ipcs -q');
      const listedB = await out(b, 'ipcs -q');
      assert.equal((listedA.match(/^0x[0-9a-f]+ /gm) ?? []).length, 1, listedA);
      assert.equal((listedB.match(/^0x[0-9a-f]+ /gm) ?? []).length, 0, listedB);
      // the mapped directory is shown in a sandbox that started before anything was written there
      // (b's holder was the spare, started with the launcher)
      fs.writeFileSync(path.join(helpers, 'askpass'), 'ASKPASS-SHOWN\n');
      assert.match(await out(b, 'cat /parley/helpers/askpass'), /^ASKPASS-SHOWN$/m);
    } finally {
      await sb.removeConversation(a);
      await sb.removeConversation(b);
      await sb.close();
      fs.rmSync(root, { recursive: true, force: true });
    }
  });
});

describe('sandbox: SANDBOX_NETWORK=none and kill -9 of the daemon', { timeout: 120_000 }, () => {
  test('no network: not even the daemon port is reachable', async () => {
    const h = await harness({ SANDBOX_NETWORK: 'none' });
    try {
      assert.equal((await h.req('GET', '/server_info')).body.sandbox.network, 'none');
      const id = await h.create();
      const r = await h.sh(id, `(exec 3<>/dev/tcp/127.0.0.1/${h.d.port}) 2>/dev/null && echo CONNECTED || echo REFUSED; ip -o link 2>/dev/null | grep -v ' lo:' | wc -l; cat /proc/net/dev | tail -n +3 | cut -d: -f1`);
      assert.match(r.text, /REFUSED/);
      assert.doesNotMatch(r.text, /CONNECTED/);
      assert.doesNotMatch(r.text, /eth|ens|wlan|docker/);
    } finally {
      await h.close();
    }
  });

  test('a daemon shutdown (SIGTERM) leaves no sandboxed process, background jobs included', async () => {
    const h = await harness();
    try {
      const id = await h.create();
      const marker = `8686${process.pid % 1000}`;
      await h.sh(id, `(sleep ${marker} &); setsid sleep ${marker}1 & echo started`);
      await waitFor(() => hostProcesses(`sleep ${marker}`).length === 2, 'sleeps running', 10_000);
      // everything the daemon started: shells, the conversation's holder (its init and pid 2), the spare holder
      const started = descendants(h.d.proc.pid!);
      const ns = nsOf(hostProcesses(`sleep ${marker}`)[0]!)!;
      assert.ok(pidsInNs(ns).length >= 4, 'init, pid 2, bash, the sleeps');
      assert.equal(await h.d.stop('SIGTERM'), 0);
      const ws = path.join(h.d.dataDir, 'workspaces');
      await waitFor(() => hostProcesses(`sleep ${marker}`).length === 0 && hostProcesses(ws).length === 0 && pidsInNs(ns).length === 0 && alive(started).length === 0, 'nothing left after shutdown', 10_000);
    } finally {
      await h.close();
    }
  });

  test('after kill -9 of the daemon no sandboxed process survives', async () => {
    const h = await harness();
    try {
      const id = await h.create();
      const marker = `6464${process.pid % 1000}`;
      await h.sh(id, `(sleep ${marker} &); nohup sleep ${marker}1 >/dev/null 2>&1 & setsid sleep ${marker}2 & echo started`);
      await waitFor(() => hostProcesses(`sleep ${marker}`).length === 3, 'sleeps running', 10_000);
      const started = descendants(h.d.proc.pid!);
      const ns = nsOf(hostProcesses(`sleep ${marker}`)[0]!)!;
      h.d.proc.kill('SIGKILL');
      await h.d.exited;
      // nothing in the sandbox (sleeps, shells, its init), no bwrap of this daemon (its argv names the
      // workspace), nothing the daemon had started (the spare holder included)
      const ws = path.join(h.d.dataDir, 'workspaces');
      const left = () => [...hostProcesses(`sleep ${marker}`), ...hostProcesses(ws), ...pidsInNs(ns), ...alive(started)];
      await waitFor(() => left().length === 0, 'no sandboxed process left', 10_000).catch(() => {
        throw new Error(`left over: ${left().join(',')}`);
      });
    } finally {
      await h.close();
    }
  });
});

describe('sandbox: the daemon API from inside a sandbox without a session key', { timeout: 180_000 }, () => {
  const httpGet = (port: number, url: string) =>
    `exec 3<>/dev/tcp/127.0.0.1/${port} && printf 'GET ${url} HTTP/1.1\\r\\nHost: 127.0.0.1\\r\\nConnection: close\\r\\n\\r\\n' >&3 && cat <&3 || echo NO-CONNECTION`;

  test('SANDBOX_NETWORK=none: another conversation cannot be read through the keyless API', async () => {
    const h = await harness({ SESSION_API_KEY: '', SANDBOX_NETWORK: 'none' });
    try {
      const victim = await h.create();
      await h.sh(victim, 'echo VICTIM-MARKER-3131');
      const a = await h.create();
      // from the host the keyless API answers (control) …
      assert.match((await fetch(`http://127.0.0.1:${h.d.port}/api/conversations/${victim}/events/search?limit=100`)).status.toString(), /^200$/);
      // … from the sandbox it cannot even be reached
      const r = await h.sh(a, httpGet(h.d.port, `/api/conversations/${victim}/events/search?limit=100`));
      assert.match(r.text, /NO-CONNECTION/);
      assert.doesNotMatch(r.text, /VICTIM-MARKER|HTTP\/1\.1 200/);
      assert.ok(!h.d.output.some((l) => l.includes('api-reachable')), 'no warning with network none');
    } finally {
      await h.close();
    }
  });

  test('SANDBOX=auto, SANDBOX_NETWORK=host without a key: the daemon warns at start that agents reach its API (the documented gap; SANDBOX=bwrap refuses it, see "modes at start")', async () => {
    const h = await harness({ SESSION_API_KEY: '', SANDBOX: 'auto', SANDBOX_NETWORK: 'host' });
    try {
      const warnings = h.d.output.filter((l) => l.includes('"sandbox":"api-reachable"'));
      assert.equal(warnings.length, 1, h.d.output.join('\n'));
      assert.match(warnings[0]!, /set SESSION_API_KEY or SANDBOX_NETWORK=none/);
      // what the warning is about: the keyless API answers a sandboxed process (README, Trust model)
      const a = await h.create();
      const r = await h.sh(a, httpGet(h.d.port, '/alive'));
      assert.match(r.text, /HTTP\/1\.1 200/);
    } finally {
      await h.close();
    }
  });
});

describe('sandbox: setup.sh and the system prompt', { timeout: 120_000 }, () => {
  test('a cloned repository\'s setup.sh runs in the sandbox; the prompt says "sandboxed"', async () => {
    const h = await harness();
    const git = await startGitServer({ token: 'gh-SANDBOX-token-1234' });
    const tag = `setup-escape-${process.pid}-${Date.now()}`;
    try {
      await git.createRepo('acme/sbx', {
        'README.md': '# sbx\n',
        '.openhands/setup.sh': [
          'echo "PWD=$(pwd)"',
          `ls ${h.d.dataDir} >/dev/null 2>&1 && echo DATADIR-VISIBLE`,
          `cat /proc/${h.d.proc.pid}/environ >/dev/null 2>&1 && echo DAEMON-ENV-VISIBLE`,
          'env | rev > .env-rev',
          `touch /tmp/${tag}`,
          'echo "UID=$(id -u)"',
          'echo SETUP-DONE',
          '',
        ].join('\n'),
      }, { private: true });
      assert.equal((await h.req('POST', '/api/add-git-providers', { provider_tokens: { github: { token: 'gh-SANDBOX-token-1234', host: git.url } } })).status, 200);
      const r = await h.req('POST', '/api/conversations', { repository: 'acme/sbx', git_provider: 'github' });
      const id = r.body.conversation_id;
      await waitFor(async () => ['ready', 'error'].includes((await h.req('GET', `/api/conversations/${id}`)).body.setup?.phase), 'prepared', 60_000);
      const evs = await allEvents(h.req, id);
      const out = evs.find((e) => e.key === 'setup_script')?.value.output ?? '';
      assert.match(out, /SETUP-DONE/, out);
      assert.match(out, /^PWD=\/workspace$/m);
      assert.match(out, new RegExp(`^UID=${process.getuid!()}$`, 'm'));
      assert.doesNotMatch(out, /DATADIR-VISIBLE|DAEMON-ENV-VISIBLE/);
      assert.ok(!fs.existsSync(`/tmp/${tag}`), 'setup.sh wrote to the host /tmp');
      const dumped = fs.readFileSync(path.join(h.ws(id), '.env-rev'), 'utf8');
      for (const c of CANARIES) assert.ok(!dumped.includes(rev(c)), `${c} reached setup.sh`);
      // the cloned files belong to the daemon's user
      assert.equal(fs.statSync(path.join(h.ws(id), 'README.md')).uid, process.getuid!());
      const obs = await h.sh(id, 'cat README.md');
      assert.match(obs.text, /# sbx/);
      // the agent's git authenticates through the askpass helper shown read-only in the sandbox
      const fetched = await h.sh(id, 'echo "$GIT_ASKPASS"; git fetch origin && git ls-remote origin >/dev/null && echo FETCH-OK');
      assert.match(fetched.text, /^\/parley\/helpers\//m);
      assert.match(fetched.text, /FETCH-OK/, fetched.text);
      const sys = (await allEvents(h.req, id)).find((e) => e.kind === 'SystemPromptEvent');
      assert.match(sys.system_prompt.text, /sandboxed workspace/);
      assert.match(sys.system_prompt.text, /working directory is \/workspace\b/);
    } finally {
      await git.close();
      await h.close();
    }
  });

  test('SANDBOX=none: still a built environment; the prompt does not claim a sandbox', async () => {
    const h = await harness({ SANDBOX: 'none' });
    try {
      assert.equal((await h.req('GET', '/server_info')).body.sandbox.mode, 'none');
      const id = await h.create();
      await h.sh(id, 'env | rev > env-rev.txt');
      const dumped = fs.readFileSync(path.join(h.ws(id), 'env-rev.txt'), 'utf8');
      for (const c of CANARIES) assert.ok(!dumped.includes(rev(c)), `${c} reached the shell`);
      const sys = (await allEvents(h.req, id)).find((e) => e.kind === 'SystemPromptEvent');
      assert.doesNotMatch(sys.system_prompt.text, /sandbox/i);
    } finally {
      await h.close();
    }
  });
});

describe('sandbox: DATA_DIR under a directory the sandbox shows', { timeout: 120_000 }, () => {
  test('DATA_DIR inside a SANDBOX_RO_BINDS directory stays invisible (masked), the rest of it is shown', async () => {
    const outer = tempDir('parley-sbx-outer-');
    fs.writeFileSync(path.join(outer, 'visible.txt'), 'SHOWN');
    const dataDir = path.join(outer, 'data');
    const llm = await startScriptedLlm();
    // (keyless: with SANDBOX=bwrap that needs SANDBOX_NETWORK=none; the network plays no part here)
    const d = await startDaemon({ LLM_MODEL: 'openai/scripted', LLM_BASE_URL: llm.url, LLM_API_KEY: LLM_KEY, SANDBOX: 'bwrap', SANDBOX_NETWORK: 'none', SANDBOX_RO_BINDS: outer }, dataDir);
    try {
      const id = (await d.req('POST', '/api/conversations', {})).body.conversation_id;
      await waitStatus(d.req, id, 'idle');
      llm.push({ toolCalls: [{ name: 'terminal', arguments: { command: `cat ${outer}/visible.txt; echo; ls -A ${dataDir} | wc -l; cat ${dataDir}/secret.key ${dataDir}/parley.pid; ls ${dataDir}/workspaces` } }] }, { text: 'done' });
      await d.req('POST', `/api/conversations/${id}/events`, { content: [{ text: 'go' }], run: true });
      await waitStatus(d.req, id, 'finished');
      const evs = await allEvents(d.req, id);
      const text = evs.find((e) => e.kind === 'ObservationEvent').observation.content[0].text as string;
      assert.match(text, /^SHOWN$/m);
      assert.match(text, /^0$/m, 'DATA_DIR is an empty directory inside');
      assert.match(text, /No such file or directory/);
      assert.ok(fs.existsSync(path.join(dataDir, 'parley.pid')), 'the host DATA_DIR is intact');
      assert.ok(!text.includes(fs.readFileSync(path.join(dataDir, 'parley.pid'), 'utf8').trim() + '\n'), 'parley.pid not read');
    } finally {
      await d.stop();
      await llm.close();
      fs.rmSync(outer, { recursive: true, force: true });
    }
  });
});

describe('sandbox: SANDBOX_MAX_LIVE', { timeout: 120_000 }, () => {
  test('beyond the cap the least recently used idle sandbox is closed; its shell comes back on the next command', async () => {
    const h = await harness({ SANDBOX_MAX_LIVE: '2', METRICS_PORT: '0' });
    try {
      const ids = [await h.create(), await h.create(), await h.create()];
      const marker = `7575${process.pid % 1000}`;
      await h.sh(ids[0]!, `(sleep ${marker}0 &); echo one`);
      await h.sh(ids[1]!, `(sleep ${marker}1 &); echo two`);
      await waitFor(() => hostProcesses(`sleep ${marker}0`).length === 1 && hostProcesses(`sleep ${marker}1`).length === 1, 'two sandboxes live', 10_000);
      await h.sh(ids[2]!, `(sleep ${marker}2 &); echo three`);
      // the first (least recently used, idle) one was closed, background job included
      await waitFor(() => hostProcesses(`sleep ${marker}0`).length === 0, 'the LRU sandbox closed', 10_000);
      assert.equal(hostProcesses(`sleep ${marker}1`).length, 1);
      assert.equal(hostProcesses(`sleep ${marker}2`).length, 1);
      const port = Number(/"metrics_port":(\d+)/.exec(h.d.output.join('\n'))?.[1]);
      const metrics = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
      assert.match(metrics, /^parley_sandboxes\{mode="bwrap"\} 2$/m);
      const again = await h.sh(ids[0]!, 'echo back');
      assert.match(again.text, /back/);
      assert.match(again.text, /new shell was started/);
    } finally {
      await h.close();
    }
  });
});

/**
 * Where an unprivileged daemon finds the code: the checkout bind-mounted (in the daemon's private
 * mount namespace only) on an empty directory under /var/lib, as the unit's WorkingDirectory would
 * be. The checkout itself may sit where nobody cannot go (a 0700 temporary directory, /root) or
 * where the unit's PrivateTmp/ProtectHome would hide it (/tmp, /home).
 */
function appDir(): string {
  const app = fs.mkdtempSync('/var/lib/parley-unit-app-');
  fs.chmodSync(app, 0o755);
  return app;
}

/** sh -c AS_APP sh <checkout> <app dir> cmd…: runs cmd in <app dir> with the checkout mounted there. */
const AS_APP = 'mount --bind "$1" "$2" && cd "$2" && shift 2 && exec "$@"';

describe('sandbox: an unprivileged daemon (as under the systemd unit)', { timeout: 120_000, skip: process.getuid?.() !== 0 && 'needs root to switch to nobody' }, () => {
  test('as nobody, with no capabilities and no_new_privs: bwrap works, limits fall back to rlimits, files stay the user\'s', async () => {
    const llm = await startScriptedLlm();
    const dir = tempDir();
    fs.chmodSync(dir, 0o755);
    fs.chownSync(dir, 65534, 65534);
    const data = path.join(dir, 'data');
    fs.mkdirSync(data);
    fs.chownSync(data, 65534, 65534);
    // what User=… CapabilityBoundingSet= NoNewPrivileges=yes give the daemon
    const app = appDir();
    const p = spawn('unshare', ['--mount', '--propagation', 'private', 'sh', '-c', AS_APP, 'sh', ROOT, app, 'setpriv', '--reuid=65534', '--regid=65534', '--clear-groups', '--bounding-set=-all', '--inh-caps=-all', '--no-new-privs', process.execPath, '--import', 'tsx', 'bridge/main.ts'], {
      cwd: ROOT,
      env: { PATH: '/usr/local/bin:/usr/bin:/bin', HOME: dir, PORT: '0', DATA_DIR: data, SANDBOX: 'bwrap', SESSION_API_KEY: SESSION, LOG_LEVEL: 'info', LLM_MODEL: 'openai/scripted', LLM_BASE_URL: llm.url, LLM_API_KEY: LLM_KEY, SANDBOX_MEMORY_MB: '256' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    p.stdout.on('data', (c: Buffer) => (out += c.toString('utf8')));
    p.stderr.on('data', (c: Buffer) => (out += c.toString('utf8')));
    const exited = new Promise((r) => p.on('exit', r));
    try {
      const port = Number((await waitFor(() => /"port":(\d+).*listening on/.exec(out), 'listening', 30_000))![1]);
      const call = async (m: string, u: string, b?: unknown) => {
        const r = await fetch(`http://127.0.0.1:${port}${u}`, { method: m, headers: { ...H, ...(b ? { 'content-type': 'application/json' } : {}) }, body: b ? JSON.stringify(b) : undefined });
        return r.json() as Promise<any>;
      };
      const info = await call('GET', '/server_info');
      assert.equal(info.sandbox.mode, 'bwrap');
      assert.equal(info.sandbox.limits.enforced_by, 'rlimit');
      assert.equal(info.sandbox.limits.pids, null, 'no per-conversation process limit is claimed without a cgroup');
      const id = (await call('POST', '/api/conversations', {})).conversation_id;
      await waitFor(async () => (await call('GET', `/api/conversations/${id}`)).execution_status === 'idle', 'idle', 20_000);
      llm.push({ toolCalls: [{ name: 'terminal', arguments: { command: 'id -u; pwd; touch mine.txt; ulimit -f; ulimit -d' } }] }, { text: 'done' });
      await call('POST', `/api/conversations/${id}/events`, { content: [{ text: 'go' }], run: true });
      await waitFor(async () => (await call('GET', `/api/conversations/${id}`)).execution_status === 'finished', 'finished', 30_000);
      const evs = (await call('GET', `/api/conversations/${id}/events/search?limit=100`)).items;
      const text = evs.find((e: any) => e.kind === 'ObservationEvent').observation.content[0].text;
      // uid 0 of the conversation's user namespace (no capability), the daemon's user on the host
      assert.match(text, /^0\n\/workspace\n/, text);
      assert.match(text, new RegExp(`^${1024 * 1024}$`, 'm'), 'RLIMIT_FSIZE: 1 GiB (bash counts KiB)');
      assert.match(text, new RegExp(`^${256 * 1024}$`, 'm'), 'RLIMIT_DATA (KiB)');
      const st = fs.statSync(path.join(data, 'workspaces', id.replace(/-/g, ''), 'mine.txt'));
      assert.equal(st.uid, 65534);
    } finally {
      p.kill('SIGTERM');
      await exited;
      await llm.close();
      fs.rmSync(dir, { recursive: true, force: true });
      fs.rmdirSync(app);
    }
  });
});

/**
 * What the unit's restrictions do to the daemon, emulated where that is possible without systemd
 * (as root: a private mount namespace, then setpriv to nobody). Emulated: User= (nobody),
 * CapabilityBoundingSet= / AmbientCapabilities= (empty), NoNewPrivileges=yes, UMask=0077,
 * LimitNOFILE (up to the hard limit here), the unit's Environment= lines (env -i), ProtectSystem=strict
 * with ReadWritePaths/StateDirectory (every mount read-only but the state directory),
 * PrivateTmp=yes, ProtectHome=yes, ProtectProc=invisible (a proc mounted with hidepid=invisible),
 * and the relaxation ProtectKernelTunables=no (the second test shows bwrap failing without it).
 * Not emulated (need systemd or a seccomp loader): RestrictNamespaces, SystemCallFilter,
 * RestrictAddressFamilies, LockPersonality, RestrictRealtime, ProtectClock, ProtectKernelModules,
 * ProtectHostname, PrivateDevices, Delegate=yes (cgroup v2; this machine has v1 only), KillMode.
 */
const UNIT_EMULATION = String.raw`set -e
STATE=$1; TUNABLES=$2; CHECKOUT=$3; APP=$4; shift 4
mount --bind "$CHECKOUT" "$APP"
cd "$APP"
mount --bind "$STATE" "$STATE"
mount -t tmpfs -o mode=1777 tmpfs /tmp
mount -t tmpfs -o mode=1777 tmpfs /var/tmp
for d in /home /root /run/user; do if [ -d "$d" ]; then mount -t tmpfs -o ro,mode=0755 tmpfs "$d"; fi; done
findmnt -rn -o TARGET | sort -r | while read -r m; do
  case "$m" in /proc|/proc/*|/sys|/sys/*|/dev|/dev/*|"$STATE"|/tmp|/var/tmp|/home|/root|/run/user) continue;; esac
  mount -o remount,bind,ro "$m" 2>/dev/null || echo "could not make $m read-only" >&2
done
mount -t proc -o hidepid=invisible,nosuid,nodev,noexec proc /proc
if [ "$TUNABLES" = yes ]; then mount --bind /proc/sys /proc/sys; mount -o remount,bind,ro /proc/sys; fi
umask 077
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
exec setpriv --reuid=65534 --regid=65534 --clear-groups --bounding-set=-all --inh-caps=-all --no-new-privs "$@"`;

describe('sandbox: scripts/parley.service', { timeout: 180_000 }, () => {
  const unitFile = path.join(ROOT, 'scripts/parley.service');
  const unit = fs.readFileSync(unitFile, 'utf8');
  const run = (cmd: string, args: string[]) =>
    new Promise<{ code: number | null; out: string }>((resolve) => {
      const p = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'] });
      let out = '';
      p.stdout.on('data', (c: Buffer) => (out += c.toString('utf8')));
      p.stderr.on('data', (c: Buffer) => (out += c.toString('utf8')));
      p.on('error', (e) => resolve({ code: -1, out: String(e) }));
      p.on('exit', (code) => resolve({ code, out }));
    });
  const hasAnalyze = fs.existsSync('/usr/bin/systemd-analyze') || fs.existsSync('/bin/systemd-analyze');

  test('systemd-analyze verify accepts the unit (and does flag a broken copy); the offline security check passes the sandbox settings', { skip: !hasAnalyze && 'no systemd-analyze' }, async () => {
    const ok = await run('systemd-analyze', ['verify', unitFile]);
    assert.equal(ok.code, 0, ok.out);
    assert.equal(ok.out.trim(), '', `verify complained:\n${ok.out}`);
    // control: verify prints what it cannot parse (its exit code stays 0 for that)
    const dir = tempDir();
    try {
      const bad = path.join(dir, 'parley.service');
      fs.writeFileSync(bad, unit.replace(/^RestrictNamespaces=.*$/m, 'RestrictNamespaces=user mnt nonsense'));
      assert.match((await run('systemd-analyze', ['verify', bad])).out, /Failed to parse namespace type/);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
    const sec = await run('systemd-analyze', ['security', '--offline=true', '--no-pager', unitFile]);
    assert.equal(sec.code, 0, sec.out);
    assert.match(sec.out, /✓ NoNewPrivileges=/);
    assert.match(sec.out, /✓ PrivateTmp=/);
    assert.match(sec.out, /✓ ProtectHome=/);
    // the relaxation bwrap needs: user namespaces allowed
    assert.match(sec.out, /✗ RestrictNamespaces=~user/);
    const level = Number(/Overall exposure level for parley\.service: ([\d.]+)/.exec(sec.out)?.[1]);
    assert.ok(level > 0 && level < 5, `exposure ${level}`);
  });

  test('every namespace, socket family and system call the sandboxes used (strace) is allowed by the unit', { skip: (!hasAnalyze || !fs.existsSync('/usr/bin/strace')) && 'needs strace and systemd-analyze' }, async () => {
    const dir = tempDir();
    const traces = path.join(dir, 'traces');
    fs.mkdirSync(traces);
    // the holders (bwrap) and the processes joining them (nsenter, found first on PATH), traced with their children
    const wrapper = path.join(dir, 'bwrap');
    fs.writeFileSync(wrapper, `#!/bin/sh\nexec /usr/bin/strace -ff -qq -o ${traces}/t /usr/bin/bwrap "$@"\n`, { mode: 0o755 });
    const bin = path.join(dir, 'bin');
    fs.mkdirSync(bin);
    fs.writeFileSync(path.join(bin, 'nsenter'), `#!/bin/sh\nexec /usr/bin/strace -ff -qq -o ${traces}/n /usr/bin/nsenter "$@"\n`, { mode: 0o755 });
    const h = await harness({ BWRAP_PATH: wrapper, PATH: `${bin}:${process.env.PATH ?? '/usr/bin:/bin'}` });
    try {
      const id = await h.create();
      const r = await h.sh(id, 'echo hi > /tmp/x && cat /tmp/x && ps -e >/dev/null && git --version >/dev/null && echo TRACED');
      assert.match(r.text, /TRACED/);
    } finally {
      await h.close();
    }
    try {
      const text = fs.readdirSync(traces).map((f) => fs.readFileSync(path.join(traces, f), 'utf8')).join('\n');
      const calls = new Set([...text.matchAll(/^(?:<\.\.\. )?([a-z_][a-z0-9_]*)(?:\(| resumed>)/gm)].map((m) => m[1]!));
      assert.ok(calls.has('pivot_root') && calls.has('setns') && calls.has('chroot') && calls.has('execve'), [...calls].join(' '));
      assert.ok(fs.readdirSync(traces).some((f) => f.startsWith('n.')), 'the joining processes were traced');
      // SystemCallFilter=~…: none of the denied groups' calls was made
      const groups = /^SystemCallFilter=~(.*)$/m.exec(unit)![1]!.trim().split(/\s+/);
      const listed = (await run('systemd-analyze', ['syscall-filter', '--no-pager', ...groups])).out;
      const denied = new Set(listed.split('\n').map((l) => l.trim()).filter((l) => /^[a-z_][a-z0-9_]*$/.test(l)));
      assert.ok(denied.has('ptrace') && denied.has('reboot'), 'the groups were listed');
      assert.deepEqual([...calls].filter((c) => denied.has(c)), [], 'calls the unit would refuse');
      // RestrictNamespaces=: the namespaces created or joined
      const allowed = /^RestrictNamespaces=(.*)$/m.exec(unit)![1]!.trim().split(/\s+/);
      const names: Record<string, string> = { NS: 'mnt', USER: 'user', PID: 'pid', IPC: 'ipc', UTS: 'uts', NET: 'net', CGROUP: 'cgroup', TIME: 'time' };
      const used = new Set([...text.matchAll(/CLONE_NEW([A-Z]+)/g)].map((m) => names[m[1]!] ?? m[1]!));
      assert.ok(used.has('user') && used.has('pid') && used.has('mnt'), [...used].join(' '));
      assert.deepEqual([...used].filter((n) => !allowed.includes(n)), [], 'namespaces the unit would refuse');
      // RestrictAddressFamilies=
      const families = /^RestrictAddressFamilies=(.*)$/m.exec(unit)![1]!.trim().split(/\s+/);
      const opened = new Set([...text.matchAll(/^socket\((AF_[A-Z0-9]+)/gm)].map((m) => m[1]!));
      assert.deepEqual([...opened].filter((f) => !families.includes(f)), [], 'socket families the unit would refuse');
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  const emulated = async (tunables: 'yes' | 'no') => {
    const state = fs.mkdtempSync('/var/lib/parley-unit-test-');
    fs.chmodSync(state, 0o750);
    fs.chownSync(state, 65534, 65534);
    // the unit's Environment= lines, its DATA_DIR/HOME (/var/lib/parley) moved to this test's state directory
    const env = [...unit.matchAll(/^Environment=(.*)$/gm)].map((m) => m[1]!.replaceAll('/var/lib/parley', state));
    assert.ok(env.includes('SANDBOX=bwrap') && env.includes(`DATA_DIR=${state}`), env.join(' '));
    const exec = /^ExecStart=(.*)$/m.exec(unit)![1]!.split(/\s+/);
    const llm = await startScriptedLlm();
    const app = appDir();
    const p = spawn(
      'unshare',
      ['--mount', '--propagation', 'private', 'sh', '-c', UNIT_EMULATION, 'sh', state, tunables, ROOT, app, 'env', '-i', 'PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin', ...env, 'PORT=0', `SESSION_API_KEY=${SESSION}`, 'LOG_LEVEL=info', 'LLM_MODEL=openai/scripted', `LLM_BASE_URL=${llm.url}`, `LLM_API_KEY=${LLM_KEY}`, ...exec],
      { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let out = '';
    p.stdout.on('data', (c: Buffer) => (out += c.toString('utf8')));
    p.stderr.on('data', (c: Buffer) => (out += c.toString('utf8')));
    const exited = new Promise<number | null>((r) => p.on('exit', r));
    return {
      state,
      llm,
      exited,
      output: () => out,
      async close() {
        p.kill('SIGTERM');
        await exited;
        await llm.close();
        fs.rmSync(state, { recursive: true, force: true });
        fs.rmdirSync(app);
      },
    };
  };

  test('under the unit\'s emulated restrictions (nobody, no capabilities, no_new_privs, UMask, read-only system, private /tmp, ProtectHome, ProtectProc=invisible) the sandbox works', { skip: process.getuid?.() !== 0 && 'needs root to emulate the unit' }, async () => {
    const u = await emulated('no');
    try {
      const port = Number((await waitFor(() => /"port":(\d+).*listening on/.exec(u.output()), 'listening', 60_000).catch(() => {
        throw new Error(u.output());
      }))![1]);
      const call = async (m: string, url: string, b?: unknown) => {
        const r = await fetch(`http://127.0.0.1:${port}${url}`, { method: m, headers: { ...H, ...(b ? { 'content-type': 'application/json' } : {}) }, body: b ? JSON.stringify(b) : undefined });
        return r.json() as Promise<any>;
      };
      const info = await call('GET', '/server_info');
      assert.equal(info.sandbox.mode, 'bwrap', u.output());
      const id = (await call('POST', '/api/conversations', {})).conversation_id;
      await waitFor(async () => (await call('GET', `/api/conversations/${id}`)).execution_status === 'idle', 'idle', 20_000);
      // (the locked directories: what a non-root daemon must still be able to remove on DELETE)
      u.llm.push({ toolCalls: [{ name: 'terminal', arguments: { command: 'id -u; pwd; echo shared > /tmp/t; touch mine.txt; mkdir -p /tmp/locked/in locked/in; touch /tmp/locked/in/f locked/in/f; chmod 0 /tmp/locked/in /tmp/locked locked/in locked' } }] }, { text: 'done' });
      await call('POST', `/api/conversations/${id}/events`, { content: [{ text: 'go' }], run: true });
      await waitFor(async () => (await call('GET', `/api/conversations/${id}`)).execution_status === 'finished', 'finished', 30_000);
      const evs = (await call('GET', `/api/conversations/${id}/events/search?limit=100`)).items;
      const text = evs.find((e: any) => e.kind === 'ObservationEvent').observation.content[0].text;
      assert.match(text, /^0\n\/workspace\n/, text);
      const hex = id.replace(/-/g, '');
      const mine = fs.statSync(path.join(u.state, 'workspaces', hex, 'mine.txt'));
      assert.equal(mine.uid, 65534);
      assert.equal(mine.mode & 0o777, 0o600, 'UMask=0077 reaches the agent');
      assert.equal(fs.readFileSync(path.join(u.state, 'workspaces', '.sandbox', hex, 'tmp', 't'), 'utf8'), 'shared\n');
      assert.equal(fs.statSync(path.join(u.state, 'secret.key')).mode & 0o077, 0, 'the key file is private');
      assert.equal(fs.statSync(path.join(u.state, 'workspaces', '.sandbox', hex, 'tmp', 'locked')).mode & 0o777, 0);
      assert.equal((await fetch(`http://127.0.0.1:${port}/api/conversations/${id}`, { method: 'DELETE', headers: H })).status, 200);
      assert.ok(!fs.existsSync(path.join(u.state, 'workspaces', '.sandbox', hex)), "the sandbox's /tmp and HOME are removed, locked directories included");
      assert.ok(!fs.existsSync(path.join(u.state, 'workspaces', hex)), 'the workspace is removed, locked directories included');
    } finally {
      await u.close();
    }
  });

  test('why ProtectKernelTunables=no: with /proc/sys read-only bwrap cannot mount /proc and SANDBOX=bwrap exits 1 with one line', { skip: process.getuid?.() !== 0 && 'needs root to emulate the unit' }, async () => {
    const u = await emulated('yes');
    try {
      assert.equal(await u.exited, 1, u.output());
      assert.match(u.output(), /^parley: SANDBOX=bwrap but the bwrap probe failed: .*Can't mount proc/m);
    } finally {
      await u.close();
    }
  });
});

describe('sandbox: modes at start', { timeout: 60_000 }, () => {
  const run = (env: Record<string, string>) =>
    new Promise<{ code: number | null; stderr: string; stdout: string }>((resolve) => {
      const dir = tempDir();
      const p = spawn(process.execPath, ['--import', 'tsx', 'bridge/main.ts'], {
        cwd: ROOT,
        env: { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: dir, PORT: '0', DATA_DIR: dir, SESSION_API_KEY: SESSION, ...env },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let stderr = '';
      let stdout = '';
      p.stderr.on('data', (c: Buffer) => (stderr += c.toString('utf8')));
      p.stdout.on('data', (c: Buffer) => {
        stdout += c.toString('utf8');
        if (/"port":\d+.*listening on/.test(stdout)) p.kill('SIGTERM');
      });
      p.on('exit', (code) => {
        fs.rmSync(dir, { recursive: true, force: true });
        resolve({ code, stderr, stdout });
      });
    });

  test('SANDBOX=bwrap with BWRAP_PATH pointing nowhere exits 1 with one line', async () => {
    const r = await run({ SANDBOX: 'bwrap', BWRAP_PATH: '/nonexistent/bwrap' });
    assert.equal(r.code, 1);
    const lines = r.stderr.trim().split('\n');
    assert.equal(lines.length, 1, r.stderr);
    assert.match(lines[0]!, /^parley: SANDBOX=bwrap but BWRAP_PATH=\/nonexistent\/bwrap does not exist: install bubblewrap/);
  });

  test('SANDBOX=bwrap with no bwrap on PATH exits 1 with one line', async () => {
    const r = await run({ SANDBOX: 'bwrap', PATH: '/nonexistent' });
    assert.equal(r.code, 1);
    assert.equal(r.stderr.trim().split('\n').length, 1, r.stderr);
    assert.match(r.stderr, /bwrap was not found on PATH/);
  });

  test('SANDBOX=bwrap with the host network and no session key exits 1 with one line (agents would reach the keyless API); with SANDBOX_NETWORK=none it starts', async () => {
    const r = await run({ SANDBOX: 'bwrap', SESSION_API_KEY: '' });
    assert.equal(r.code, 1);
    assert.equal(r.stderr.trim().split('\n').length, 1, r.stderr);
    assert.match(r.stderr, /^parley: invalid configuration: SESSION_API_KEY: required with SANDBOX=bwrap and SANDBOX_NETWORK=host .*set a key or SANDBOX_NETWORK=none/);
    const none = await run({ SANDBOX: 'bwrap', SESSION_API_KEY: '', SANDBOX_NETWORK: 'none' });
    assert.match(none.stdout, /"port":\d+.*listening on/, none.stderr);
  });

  test('SANDBOX=bwrap with bwrap but without nsenter (util-linux) exits 1 with one line naming it', async () => {
    const dir = tempDir();
    try {
      fs.symlinkSync('/usr/bin/bwrap', path.join(dir, 'bwrap'));
      const r = await run({ SANDBOX: 'bwrap', PATH: dir });
      assert.equal(r.code, 1);
      assert.equal(r.stderr.trim().split('\n').length, 1, r.stderr);
      assert.match(r.stderr, /^parley: SANDBOX=bwrap but nsenter, setsid, setpriv \(util-linux\) not found on PATH/);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  test('SANDBOX=auto without bwrap warns once and starts with plain processes', async () => {
    const r = await run({ SANDBOX: 'auto', BWRAP_PATH: '/nonexistent/bwrap' });
    assert.match(r.stdout, /"port":\d+.*listening on/, r.stderr);
    const warnings = r.stdout.split('\n').filter((l) => /UNSANDBOXED/.test(l));
    assert.equal(warnings.length, 1, r.stdout);
    assert.match(warnings[0]!, /"level":40/);
  });
});
