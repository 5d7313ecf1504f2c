/**
 * The sandbox's modes: keyless daemons, setup.sh and the prompt, DATA_DIR under a shown directory,
 * SANDBOX_MAX_LIVE, the modes at start (an unprivileged daemon and the systemd unit: sandbox-unit.test.ts).
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { describe, test } from 'node:test';
import { allEvents, waitStatus } from './support/conversation-api.js';
import { daemonArgs, ROOT, startDaemon, tempDir, waitFor } from './support/daemon.js';

import { startScriptedLlm } from './support/scripted-llm.js';
import { startGitServer } from './support/git-server.js';

import { SESSION, LLM_KEY, CANARIES, rev, hostProcesses, harness } from './support/sandbox-harness.js';

const ROOT_RUN = process.getuid?.() === 0;

describe('sandbox: the daemon API from inside a sandbox without a session key', { timeout: 300_000 }, () => {
  const httpGet = (port: number, url: string) =>
    `exec 3<>/dev/tcp/127.0.0.1/${port} && printf 'GET ${url} HTTP/1.1\\r\\nHost: 127.0.0.1\\r\\n` +
    `Connection: close\\r\\n\\r\\n' >&3 && cat <&3 || echo NO-CONNECTION`;

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

  test('SANDBOX=auto, SANDBOX_NETWORK=host, no key: warns at start that agents reach the API (documented gap; bwrap refuses, "modes at start")', async () => {
    const h = await harness({ SESSION_API_KEY: '', SANDBOX: 'auto', SANDBOX_NETWORK: 'host' });
    try {
      // logged when the probe decides (after the port opened), once
      await waitFor(() => h.d.output.some((l) => l.includes('"sandbox":"api-reachable"')), 'the warning', 30_000);
      const warnings = h.d.output.filter((l) => l.includes('"sandbox":"api-reachable"'));
      assert.equal(warnings.length, 1, h.d.output.join('\n'));
      assert.match(warnings[0]!, /set SESSION_API_KEY or SANDBOX_NETWORK=none/);
      // what the warning is about: the keyless API answers a sandboxed process (docs/security.md, "Without a session key")
      const a = await h.create();
      const r = await h.sh(a, httpGet(h.d.port, '/alive'));
      assert.match(r.text, /HTTP\/1\.1 200/);
    } finally {
      await h.close();
    }
  });
});

describe('sandbox: setup.sh and the system prompt', { timeout: 300_000 }, () => {
  test('a cloned repository\'s setup.sh runs in the sandbox; the prompt says "sandboxed"', async () => {
    const git = await startGitServer({ token: 'gh-SANDBOX-token-1234' });
    // the agent's own git reaches the git server on the host's loopback: that one port is allowed
    const h = await harness({ SANDBOX_ALLOW_NETS: `127.0.0.1:${new URL(git.url).port}` });
    const tag = `setup-escape-${process.pid}-${Date.now()}`;
    try {
      await git.createRepo(
        'acme/sbx',
        {
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
        },
        { private: true },
      );
      assert.equal(
        (await h.req('POST', '/api/add-git-providers', { provider_tokens: { github: { token: 'gh-SANDBOX-token-1234', host: git.url } } })).status,
        200,
      );
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
      // the cloned files belong to the sandbox's uid (SANDBOX_UID as root, else the daemon's user)
      assert.equal(fs.statSync(path.join(h.ws(id), 'README.md')).uid, process.getuid!() === 0 ? 65533 : process.getuid!());
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

describe('sandbox: DATA_DIR under a directory the sandbox shows', { timeout: 300_000 }, () => {
  test('DATA_DIR inside a SANDBOX_RO_BINDS directory stays invisible (masked), the rest of it is shown', async () => {
    const outer = tempDir('parley-sbx-outer-');
    // a directory shown to the sandboxes is readable by their uid (as a toolchain under /opt is)
    fs.chmodSync(outer, 0o755);
    fs.writeFileSync(path.join(outer, 'visible.txt'), 'SHOWN', { mode: 0o644 });
    const dataDir = path.join(outer, 'data');
    const llm = await startScriptedLlm();
    // (keyless: with SANDBOX=bwrap that needs SANDBOX_NETWORK=none; the network plays no part here)
    const d = await startDaemon(
      { LLM_MODEL: 'openai/scripted', LLM_BASE_URL: llm.url, LLM_API_KEY: LLM_KEY, SANDBOX: 'bwrap', SANDBOX_NETWORK: 'none', SANDBOX_RO_BINDS: outer },
      dataDir,
    );
    try {
      const id = (await d.req('POST', '/api/conversations', {})).body.conversation_id;
      await waitStatus(d.req, id, 'idle');
      llm.push(
        {
          toolCalls: [
            {
              name: 'terminal',
              arguments: {
                command: `cat ${outer}/visible.txt; echo; ls -A ${dataDir} | wc -l; cat ${dataDir}/secret.key ${dataDir}/parley.pid; ls ${dataDir}/workspaces`,
              },
            },
          ],
        },
        { text: 'done' },
      );
      await d.req('POST', `/api/conversations/${id}/events`, { content: [{ text: 'go' }], run: true });
      await waitStatus(d.req, id, 'finished');
      const evs = await allEvents(d.req, id);
      const text = evs.find((e) => e.kind === 'ObservationEvent').observation.content[0].text as string;
      // (what the daemon warned of says why, should a sandbox not have started)
      assert.match(text, /^SHOWN$/m, d.output.filter((l) => /"level":(40|50)/.test(l)).join('\n'));
      assert.match(text, /^0$/m, 'DATA_DIR is an empty directory inside');
      assert.match(text, /No such file or directory/);
      assert.ok(fs.existsSync(path.join(dataDir, 'parley.pid')), 'the host DATA_DIR is intact');
      assert.ok(!text.includes(`${fs.readFileSync(path.join(dataDir, 'parley.pid'), 'utf8').trim()}\n`), 'parley.pid not read');
    } finally {
      await d.stop();
      await llm.close();
      fs.rmSync(outer, { recursive: true, force: true });
    }
  });
});

describe('sandbox: SANDBOX_MAX_LIVE', { timeout: 300_000 }, () => {
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
      // the cap leaves room for no spare beyond one, which the gauge shows once it is ready
      const spares = async () =>
        (await (await fetch(`http://127.0.0.1:${port}/metrics`)).text())
          .match(/^parley_sandbox_spares\{.*$/gm)
          ?.sort()
          .join('\n');
      await waitFor(
        async () => (await spares()) === 'parley_sandbox_spares{state="ready"} 1\nparley_sandbox_spares{state="starting"} 0',
        'one spare ready',
        60_000,
      );
      const again = await h.sh(ids[0]!, 'echo back');
      assert.match(again.text, /back/);
      assert.match(again.text, /new shell was started/);
    } finally {
      await h.close();
    }
  });
});

describe('sandbox: modes at start', { timeout: 300_000 }, () => {
  /**
   * Starts the daemon; once it listens (or prints `stopAt`) it is stopped (SIGTERM), unless `failing`: the probe that
   * decides SANDBOX=bwrap cannot be honoured runs after the port is open, so such a daemon is left
   * to exit by itself (killed after 60 s if it does not).
   */
  const run = async (env: Record<string, string>, failing = false, stopAt = /"port":\d+.*listening on/) => {
    const daemon = await daemonArgs();
    return new Promise<{ code: number | null; stderr: string; stdout: string }>((resolve) => {
      const dir = tempDir();
      const p = spawn(process.execPath, daemon, {
        cwd: ROOT,
        env: { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: dir, PORT: '0', DATA_DIR: dir, SESSION_API_KEY: SESSION, ...env },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let stderr = '';
      let stdout = '';
      p.stderr.on('data', (c: Buffer) => (stderr += c.toString('utf8')));
      p.stdout.on('data', (c: Buffer) => {
        stdout += c.toString('utf8');
        if (!failing && stopAt.test(stdout)) p.kill('SIGTERM');
      });
      const stuck = failing ? setTimeout(() => p.kill('SIGKILL'), 60_000) : null;
      p.on('exit', (code) => {
        if (stuck) clearTimeout(stuck);
        fs.rmSync(dir, { recursive: true, force: true });
        resolve({ code, stderr, stdout });
      });
    });
  };

  test('SANDBOX=bwrap with BWRAP_PATH pointing nowhere exits 1 with one line', async () => {
    const r = await run({ SANDBOX: 'bwrap', BWRAP_PATH: '/nonexistent/bwrap' }, true);
    assert.equal(r.code, 1);
    const lines = r.stderr.trim().split('\n');
    assert.equal(lines.length, 1, r.stderr);
    assert.match(lines[0]!, /^parley: SANDBOX=bwrap but BWRAP_PATH=\/nonexistent\/bwrap does not exist: install bubblewrap/);
  });

  test('SANDBOX=bwrap with no bwrap on PATH exits 1 with one line', async () => {
    const r = await run({ SANDBOX: 'bwrap', PATH: '/nonexistent' }, true);
    assert.equal(r.code, 1);
    assert.equal(r.stderr.trim().split('\n').length, 1, r.stderr);
    assert.match(r.stderr, /bwrap was not found on PATH/);
  });

  test('SANDBOX=bwrap, host network, no key: exits 1 with one line (agents would reach the keyless API); with SANDBOX_NETWORK=none it starts', async () => {
    const r = await run({ SANDBOX: 'bwrap', SESSION_API_KEY: '', SANDBOX_NETWORK: 'host' }, true);
    assert.equal(r.code, 1);
    assert.equal(r.stderr.trim().split('\n').length, 1, r.stderr);
    assert.match(
      r.stderr,
      /^parley: invalid configuration: SESSION_API_KEY: required with SANDBOX=bwrap and SANDBOX_NETWORK=host .*set a key or SANDBOX_NETWORK=none/,
    );
    const none = await run({ SANDBOX: 'bwrap', SESSION_API_KEY: '', SANDBOX_NETWORK: 'none' });
    assert.match(none.stdout, /"port":\d+.*listening on/, none.stderr);
  });

  test('SANDBOX=bwrap with bwrap but without nsenter (util-linux) exits 1 with one line naming it', async () => {
    const dir = tempDir();
    try {
      fs.symlinkSync('/usr/bin/bwrap', path.join(dir, 'bwrap'));
      const r = await run({ SANDBOX: 'bwrap', PATH: dir }, true);
      assert.equal(r.code, 1);
      assert.equal(r.stderr.trim().split('\n').length, 1, r.stderr);
      assert.match(r.stderr, /^parley: SANDBOX=bwrap but nsenter, setpriv, unshare \(util-linux\) not found on PATH/);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  test("SANDBOX_SERVICE_UID equal to the sandbox's uid exits 1 with one line (the file service must be another uid)", {
    skip: !ROOT_RUN && 'ids are chosen only by a root daemon',
  }, async () => {
    const r = await run({ SANDBOX: 'bwrap', SANDBOX_UID: '65533', SANDBOX_SERVICE_UID: '65533' }, true);
    assert.equal(r.code, 1);
    assert.equal(r.stderr.trim().split('\n').length, 1, r.stderr);
    assert.match(r.stderr, /^parley: invalid configuration: SANDBOX_SERVICE_UID: the file service's ids \(65533:65533\) must differ from the sandbox's/);
  });

  test('SANDBOX=auto without bwrap warns once and starts with plain processes', async () => {
    // the probe decides after the port opens: stopped once it warned
    const r = await run({ SANDBOX: 'auto', BWRAP_PATH: '/nonexistent/bwrap' }, false, /UNSANDBOXED/);
    assert.match(r.stdout, /"port":\d+.*listening on/, r.stderr);
    const warnings = r.stdout.split('\n').filter((l) => /UNSANDBOXED/.test(l));
    assert.equal(warnings.length, 1, r.stdout);
    assert.match(warnings[0]!, /"level":40/);
  });
});
