/**
 * The per-conversation bubblewrap sandbox, driven through the public API with the scripted LLM and
 * judged from the host: files on disk, /proc of the host, the daemon's own liveness.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { waitFor } from './support/daemon.js';
import { startGitServer } from './support/git-server.js';
import { hostPid } from './support/processes.js';
import { helperArgs } from './support/helper-programs.js';

import { CANARIES, rev, hostProcesses, hostProcess, nsOf, holdNs, pidsInNs, sandboxTmp, type Harness, harness } from './support/sandbox-harness.js';

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

  test("the shell sees its workspace at /workspace; files are the sandbox uid's on the host (the daemon's if not root); no caps, no_new_privs", async () => {
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
    const [job] = (await waitFor(() => (hostProcesses(`sleep ${m}`).length ? hostProcesses(`sleep ${m}`) : null), 'the job runs', 10_000))!;
    const status = fs.readFileSync(`/proc/${job}/status`, 'utf8');
    assert.match(status, new RegExp(`^Uid:\\s+${uid}\\s+${uid}\\s+${uid}\\s+${uid}$`, 'm'));
    assert.match(status, new RegExp(`^Gid:\\s+${gid}\\s+${gid}\\s+${gid}\\s+${gid}$`, 'm'));
    assert.match(status, /^Groups:\s*$/m, "no supplementary group (not root's)");
    for (const set of ['CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb']) assert.match(status, new RegExp(`^${set}:\\s+0+$`, 'm'), set);
    assert.match(status, /^NoNewPrivs:\s+1$/m);
    // a session of its own, led by the conversation's shell (no terminal of the host's to inject into)
    const stat = (pid: number | string) => fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
    const [sid, tty] = [Number(stat(job!)[3]), Number(stat(job!)[4])];
    assert.notEqual(sid, Number(stat(h.d.proc.pid!)[3]), "not the daemon's session");
    assert.equal(fs.readFileSync(`/proc/${sid}/comm`, 'utf8').trim(), 'bash', 'the shell leads it');
    assert.equal(tty, 0, 'no controlling terminal');
    process.kill(job!, 'SIGKILL');
  });

  test("another conversation's workspace and DATA_DIR are not visible", async () => {
    const r = await h.sh(
      a,
      `cat ${h.ws(b)}/secret.txt; ls ${h.ws(b)}; ls ${h.d.dataDir}; cat ${h.d.dataDir}/*.db; ` +
        `ls ${path.dirname(h.ws(b))}; cat /workspace/../${path.basename(h.ws(b))}/secret.txt; echo END`,
    );
    assert.doesNotMatch(r.text, /B-PRIVATE-CONTENT/);
    assert.match(r.text, /No such file or directory/);
    // nothing listed: only error messages name those paths
    assert.doesNotMatch(r.text, /^(secret\.txt|parley\.db|parley\.lock|parley\.pid|secret\.key|journal.*|workspaces)$/m, 'a listing leaked');
  });

  test("the daemon's environment and /proc are out of reach", async () => {
    const pid = h.d.proc.pid!;
    const r = await h.sh(
      a,
      `cat /proc/${pid}/environ; ls /proc | grep -c '^[0-9]'; env | rev > env-rev.txt; ` +
        `cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n' | rev >> env-rev.txt; env | sort > env.txt`,
    );
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
    // the sandbox's pid namespace, read on the host from a process running in it
    const marker = `6161${process.pid % 1000}`;
    await h.sh(a, `(sleep ${marker} &); echo started`);
    await waitFor(() => hostProcesses(`sleep ${marker}`).length === 1, 'the marker sleep running', 30_000);
    const ns = nsOf(hostProcesses(`sleep ${marker}`)[0]!);
    assert.ok(ns && ns !== nsOf(process.pid), 'the sandbox has a pid namespace of its own');
    const r = await h.sh(a, `kill -9 ${pid}; echo rc=$?; kill -9 -1; echo after`);
    assert.match(r.text, /rc=1/);
    assert.equal(h.d.proc.exitCode, null);
    assert.equal((await h.req('GET', '/alive')).status, 200);
    // kill -1 inside reaches the agent's own processes but the shell that sends it (the marker job
    // dies): the sandbox's init and its file service are another uid's (a root daemon's sandbox) and
    // stay, and so does the sandbox. (A daemon that is not root: its file service is the agent's uid,
    // and kill -1 ends it and with it the sandbox; the next command starts a new one.)
    await waitFor(() => hostProcesses(`sleep ${marker}`).length === 0, "the agent's job was killed", 30_000);
    if (process.getuid!() === 0) assert.ok(pidsInNs(ns!).length >= 3, 'its init, file service and shell are still there');
    const again = await h.sh(a, 'echo still-here');
    assert.match(again.text, /still-here/);
    assert.equal(h.d.proc.exitCode, null);
  });

  test('writes outside the workspace (/tmp, /, /usr, DATA_DIR) leave nothing on the host', async () => {
    const tag = `escape-${process.pid}-${Date.now()}`;
    const r = await h.sh(
      a,
      `touch /tmp/${tag} /var/tmp/${tag} /${tag} ~/${tag}; ls /tmp/${tag}; touch /usr/${tag} /etc/${tag} ${h.d.dataDir}/${tag}; echo END`,
    );
    assert.match(r.text, /END/);
    for (const p of [
      `/tmp/${tag}`,
      `/var/tmp/${tag}`,
      `/${tag}`,
      `/usr/${tag}`,
      `/etc/${tag}`,
      path.join(h.d.dataDir, tag),
      path.join(process.env.HOME ?? '/root', tag),
    ]) {
      assert.ok(!fs.existsSync(p), `${p} exists on the host`);
    }
  });

  test('file_editor: outside paths, .. and planted symlinks are refused without content', async () => {
    const other = h.ws(b);
    await h.sh(
      a,
      `ln -sfn ${other} /workspace/other; ln -sfn ${h.d.dataDir} /workspace/data; ` +
        `ln -sfn ${other}/secret.txt /workspace/s.txt; ln -sfn /nonexistent/x /workspace/dangling; echo ok`,
    );
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
  test("shell, setup.sh, stdio MCP: shared namespaces (user, pid, mount, ipc, uts) and /tmp, not another's; DELETE ends it; recreated when dead", async () => {
    const h = await harness();
    const git = await startGitServer({ token: 'gh-SANDBOX-token-5678' });
    const m = `9191${process.pid % 1000}`;
    const held: { release(): void }[] = [];
    try {
      await git.createRepo(
        'acme/one',
        {
          'README.md': '# one\n',
          '.openhands/setup.sh': [
            `echo FROM-SETUP-${m} > /tmp/setup-${m}`,
            `echo cached > ~/.cache-${m}`,
            `(sleep ${m}1 >/dev/null 2>&1 &)`,
            'echo SETUP-DONE',
            '',
          ].join('\n'),
        },
        { private: true },
      );
      assert.equal(
        (await h.req('POST', '/api/add-git-providers', { provider_tokens: { github: { token: 'gh-SANDBOX-token-5678', host: git.url } } })).status,
        200,
      );
      const r = await h.req('POST', '/api/conversations', {
        repository: 'acme/one',
        git_provider: 'github',
        mcp_config: { stdio_servers: [{ name: 'local', command: process.execPath, args: [...(await helperArgs('stdio-server')), 'local'] }] },
      });
      const a = r.body.conversation_id as string;
      await waitFor(async () => ['ready', 'error'].includes((await h.req('GET', `/api/conversations/${a}`)).body.setup?.phase), 'prepared', 60_000);
      // the MCP server starts with the run; its `pid` tool names it on the host
      const [pidObs] = await h.run(a, [{ name: 'pid', arguments: {} }]);
      const mcpPid = hostPid(pidObs.content.map((c: any) => c.text).join(''));
      assert.ok(mcpPid > 0, JSON.stringify(pidObs));
      const shell = await h.sh(
        a,
        `cat /tmp/setup-${m}; cat ~/.cache-${m}; (sleep ${m}2 >/dev/null 2>&1 &); ` +
          `ps -eo pid,args; echo "NSFDS $(ls -l /proc/$$/fd | grep -cE '(user|pid):\\[')"`,
      );
      assert.match(shell.text, /^NSFDS 0$/m, "the shell closed the sandbox's namespace fds");
      assert.match(shell.text, new RegExp(`FROM-SETUP-${m}`), 'the shell reads what setup.sh wrote to /tmp');
      assert.match(shell.text, /^cached$/m, 'and to HOME');
      assert.match(shell.text, new RegExp(`sleep ${m}1`), "ps in the shell shows setup.sh's background job");
      assert.match(shell.text, /parley-test-pid-/, 'ps in the shell shows the MCP server');
      // judged from the host: one pid (and user) namespace for all of them, not the host's
      const setupJob = await hostProcess(`sleep ${m}1`);
      const shellJob = await hostProcess(`sleep ${m}2`);
      const heldA = holdNs(shellJob);
      held.push(heldA);
      const nsA = heldA.ns;
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
      const tmp = sandboxTmp(h.d.dataDir, a);
      assert.equal(fs.readFileSync(path.join(tmp, `setup-${m}`), 'utf8'), `FROM-SETUP-${m}\n`);
      assert.equal(fs.statSync(tmp).mode & 0o777, 0o700);
      assert.ok(!fs.existsSync(path.join(h.ws(a), `setup-${m}`)));

      // another conversation: its own namespace and /tmp
      const b = await h.create();
      const other = await h.sh(b, `ls -A /tmp; ls -A ~; (sleep ${m}3 >/dev/null 2>&1 &); ps -eo args | grep -c "sleep ${m}[12]"`);
      assert.doesNotMatch(other.text, new RegExp(`setup-${m}|cache-${m}`));
      assert.match(other.text, /^0$/m, "another conversation's processes are not visible");
      const bJob = await hostProcess(`sleep ${m}3`);
      const heldB = holdNs(bJob!);
      held.push(heldB);
      const nsB = heldB.ns;
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
      // a new sandbox: the killed one's namespace is held (its number not reused), and its init's host pid is not reused (yet)
      assert.notEqual(nsOf(bJob2), nsB, 'a new pid namespace');
      const init2 = pidsInNs(nsOf(bJob2)!).find((p) => /^NSpid:\s+\d+\s+1$/m.test(fs.readFileSync(`/proc/${p}/status`, 'utf8')));
      assert.ok(init2 && init2 !== init, `a new sandbox (init ${init2}, the killed one ${init})`);
    } finally {
      for (const n of held) n.release();
      await git.close();
      await h.close();
    }
  });
});
