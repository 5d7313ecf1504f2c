import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { randomBytes } from 'node:crypto';
import net from 'node:net';
import { chmod, lstat, mkdir, mkdtemp, readdir, readFile, realpath, rm, stat, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startGitServer, type GitHttpServer } from './support/git-server.js';
import {
  createWorkspace,
  removeWorkspace,
  cloneRepository,
  CloneError,
  askpassEnv,
  gitCredentialEnv,
  askpassHostMap,
  providerBaseUrl,
  loadRepoInstructions,
  selectTriggered,
  parseFrontMatter,
  runSetupScript,
  suggestedTaskMessage,
  validateSuggestedTask,
  createMicroagentMessage,
  SuggestedTaskError,
  type ProviderCredential,
  type CloneOptions,
} from '../src/workspace/index.js';
import { waitFor } from './support/daemon.js';
import { Sandbox } from '../src/sandbox/launcher.js';

/** The file service of a directory (a plain process, as with SANDBOX=none): what instructions are read through. */
const plainFiles = Sandbox.none(tmpdir());
const filesOf = (dir: string) => plainFiles.files(`files:${dir}`, dir);
after(() => plainFiles.close());

const execFileAsync = promisify(execFile);
const CANARY = `canary-${randomBytes(12).toString('hex')}`;
const BAD_CANARY = `badcanary-${randomBytes(12).toString('hex')}`;
const identity = (s: string) => s;

async function gitOut(cwd: string, args: string[]): Promise<string> {
  const { stdout } = await execFileAsync('git', args, { cwd, encoding: 'utf8' });
  return stdout.trim();
}

/** Every regular file under `dir` (including .git), as paths. */
async function walk(dir: string, out: string[] = []): Promise<string[]> {
  for (const name of await readdir(dir)) {
    const p = join(dir, name);
    const st = await lstat(p);
    if (st.isDirectory()) await walk(p, out);
    else if (st.isFile() || st.isSymbolicLink()) out.push(p);
  }
  return out;
}

async function assertNoTokenInTree(dir: string, token: string): Promise<void> {
  const files = await walk(dir);
  assert.ok(files.length > 0);
  for (const f of files) {
    const st = await lstat(f);
    if (!st.isFile()) continue;
    const buf = await readFile(f);
    assert.equal(buf.includes(token), false, `token found in ${f}`);
    for (const user of ['', 'x-access-token:']) {
      const b64 = Buffer.from(`${user}${token}`).toString('base64').replace(/=+$/, '');
      assert.equal(buf.includes(b64), false, `base64 token found in ${f}`);
    }
  }
}

async function closedPort(): Promise<number> {
  const srv = net.createServer();
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  const port = (srv.address() as net.AddressInfo).port;
  await new Promise<void>((r) => srv.close(() => r()));
  return port;
}

/** True once `pid` is gone or a zombie (an orphan may wait a while for PID 1 to reap it). */
async function waitDead(pid: number, ms = 15_000): Promise<boolean> {
  const gone = async () => {
    try {
      process.kill(pid, 0);
    } catch {
      return true;
    }
    const stat = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => '');
    const state = stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
    return !stat || state === 'Z' || state === 'X';
  };
  return waitFor(gone, `process ${pid} to end`, ms).then(
    () => true,
    () => false,
  );
}

function newId(): string {
  return randomBytes(16).toString('hex');
}

async function expectCloneError(p: Promise<unknown>, code: string): Promise<CloneError> {
  try {
    await p;
  } catch (err) {
    assert.ok(err instanceof CloneError, `expected CloneError, got ${String(err)}`);
    assert.equal(err.code, code, `code ${err.code}: ${err.message}`);
    return err;
  }
  assert.fail(`expected CloneError ${code}`);
}

describe('workspace directories', () => {
  let root: string;
  before(async () => {
    root = await mkdtemp(join(tmpdir(), 'parley-ws-root-'));
  });
  after(async () => {
    await rm(root, { recursive: true, force: true });
  });

  test('createWorkspace makes <root>/<id hex> (0700) from dashed or hex ids; removeWorkspace deletes it', async () => {
    const dashed = '0B7C6F1E-1111-4222-8333-444455556666';
    const dir = await createWorkspace(root, dashed);
    assert.equal(dir, join(root, '0b7c6f1e111142228333444455556666'));
    const st = await stat(dir);
    assert.ok(st.isDirectory());
    assert.equal(st.mode & 0o777, 0o700);
    assert.equal(await createWorkspace(root, '0b7c6f1e111142228333444455556666'), dir, 'idempotent, hex form');
    await writeFile(join(dir, 'f.txt'), 'x');
    await removeWorkspace(dir);
    await assert.rejects(stat(dir));
    await removeWorkspace(dir); // missing: no error
  });

  test('rejects ids that are not UUIDs and refuses to remove non-workspace dirs', async () => {
    await assert.rejects(createWorkspace(root, '../escape'));
    await assert.rejects(createWorkspace(root, 'not-a-uuid'));
    await assert.rejects(removeWorkspace(root), /Refusing/);
    assert.ok((await stat(root)).isDirectory());
  });
});

describe('providers and credential env', () => {
  test('providerBaseUrl: defaults, bare hosts → https, schemes kept, credentials refused', () => {
    assert.equal(providerBaseUrl('github'), 'https://github.com');
    assert.equal(providerBaseUrl('gitlab', null), 'https://gitlab.com');
    assert.equal(providerBaseUrl('bitbucket', ''), 'https://bitbucket.org');
    assert.equal(providerBaseUrl('enterprise_sso'), null);
    assert.equal(providerBaseUrl('gitlab', 'gitlab.local:8443'), 'https://gitlab.local:8443');
    assert.equal(providerBaseUrl('github', 'http://127.0.0.1:8080/'), 'http://127.0.0.1:8080');
    assert.equal(providerBaseUrl('gitlab', 'example.com/gitlab/'), 'https://example.com/gitlab');
    assert.throws(() => providerBaseUrl('github', 'https://user:pw@github.example.com'), /credentials/);
    assert.throws(() => providerBaseUrl('github', 'ftp://x.example.com'));
  });

  test('gitCredentialEnv and the host map expose only providers with tokens', () => {
    const providers: ProviderCredential[] = [
      { provider: 'github', token: 'ghp_aaaa' },
      { provider: 'gitlab', token: 'glpat_bbbb', host: 'http://GitLab.Local:8080' },
      { provider: 'bitbucket', token: null, host: 'bb.example.com' },
    ];
    assert.deepEqual(gitCredentialEnv(providers), { GITHUB_TOKEN: 'ghp_aaaa', GITLAB_TOKEN: 'glpat_bbbb' });
    assert.equal(askpassHostMap(providers), 'https://github.com=github http://gitlab.local:8080=gitlab');
  });

  test('askpass script answers by host in shell mode, holds no secret, lives in helperDir', async () => {
    const helper = await mkdtemp(join(tmpdir(), 'parley-helper-'));
    try {
      const providers: ProviderCredential[] = [
        { provider: 'github', token: CANARY, host: 'http://127.0.0.1:9' },
        { provider: 'bitbucket', token: 'someuser:apppass', host: 'bb.example.com' },
      ];
      const env = await askpassEnv(providers, helper);
      assert.ok(env.GIT_ASKPASS!.startsWith(helper));
      assert.equal(env.GIT_TERMINAL_PROMPT, '0');
      assert.equal(env.GIT_CONFIG_KEY_0, 'credential.helper');
      assert.equal((await readFile(env.GIT_ASKPASS!, 'utf8')).includes(CANARY), false);
      const ask = async (prompt: string) => (await execFileAsync(env.GIT_ASKPASS!, [prompt], { env: { PATH: process.env.PATH!, ...env } })).stdout;
      assert.equal(await ask("Username for 'http://127.0.0.1:9': "), 'x-access-token\n');
      assert.equal(await ask("Password for 'http://x-access-token@127.0.0.1:9': "), `${CANARY}\n`);
      assert.equal(await ask("Username for 'https://BB.example.com': "), 'someuser\n');
      assert.equal(await ask("Password for 'https://someuser@bb.example.com': "), 'apppass\n');
      await assert.rejects(ask("Password for 'https://unknown.example.com': "));
      // the same host over another scheme (a redirect from https to http) gets nothing (a credential is bound to its scheme too)
      await assert.rejects(ask("Password for 'http://someuser@bb.example.com': "));
      await assert.rejects(ask("Password for 'https://x-access-token@127.0.0.1:9': "));
    } finally {
      await rm(helper, { recursive: true, force: true });
    }
  });
});

describe('cloneRepository against a real smart-HTTP git server', () => {
  let server: GitHttpServer;
  let root: string;
  let helperDir: string;

  const providersFor = (token: string | null = CANARY): ProviderCredential[] => [{ provider: 'github', token, host: server.url }];
  const clone = async (over: Partial<CloneOptions> & { repository: string }) => {
    const workspaceDir = over.workspaceDir ?? (await createWorkspace(root, newId()));
    return cloneRepository({
      provider: 'github',
      providers: providersFor(),
      helperDir,
      redact: identity,
      files: filesOf(workspaceDir),
      ...over,
      workspaceDir,
    });
  };

  before(async () => {
    server = await startGitServer({ token: CANARY });
    root = await mkdtemp(join(tmpdir(), 'parley-clone-root-'));
    helperDir = await mkdtemp(join(tmpdir(), 'parley-clone-helper-'));
    await server.createRepo(
      'acme/public',
      { 'README.md': '# public\n', 'src/a.txt': 'a\n' },
      {
        branches: { 'feature/x': { 'feature.txt': 'feature\n' } },
      },
    );
    await server.createRepo(
      'acme/private',
      { 'README.md': '# private\n' },
      {
        private: true,
        branches: { develop: { 'develop.txt': 'dev\n' } },
      },
    );
    await server.createRepo('acme/empty', {});
  });
  after(async () => {
    await server.close();
    await rm(root, { recursive: true, force: true });
    await rm(helperDir, { recursive: true, force: true });
  });

  test('public repository anonymously (host with scheme), work branch, identity, plain origin, phases', async () => {
    const phases: string[] = [];
    const ws = await createWorkspace(root, newId());
    const r = await cloneRepository({
      workspaceDir: ws,
      files: filesOf(ws),
      repository: 'acme/public',
      provider: 'gitlab',
      providers: [{ provider: 'gitlab', token: null, host: server.url }],
      workBranch: 'parley/abc12345',
      helperDir,
      redact: identity,
      onPhase: (p) => phases.push(p),
    });
    assert.equal(r.dir, ws);
    assert.equal(r.branch, 'parley/abc12345');
    assert.equal(r.provider, 'gitlab');
    assert.equal(r.remoteUrl, `${server.url}/acme/public.git`);
    assert.equal(await readFile(join(ws, 'README.md'), 'utf8'), '# public\n', 'cloned into the workspace itself');
    assert.equal(await gitOut(ws, ['rev-parse', '--abbrev-ref', 'HEAD']), 'parley/abc12345');
    assert.equal(await gitOut(ws, ['remote', 'get-url', 'origin']), `${server.url}/acme/public.git`);
    assert.equal(await gitOut(ws, ['config', 'user.name']), 'Parley Agent');
    assert.equal(await gitOut(ws, ['config', 'user.email']), 'agent@parley.local');
    assert.deepEqual(phases, ['cloning', 'checking_out', 'ready']);
  });

  test('private repository with the stored token: token never in a URL, a file, .git/config or argv; later push works', async () => {
    // A `git` wrapper first on PATH records every command line git is started with.
    const wrapDir = await mkdtemp(join(tmpdir(), 'parley-gitwrap-'));
    const argvLog = join(wrapDir, 'argv.log');
    const realGit = (await execFileAsync('sh', ['-c', 'command -v git'], { encoding: 'utf8' })).stdout.trim();
    await writeFile(join(wrapDir, 'git'), `#!/bin/sh\nprintf '%s\\n' "$*" >> '${argvLog}'\nexec '${realGit}' "$@"\n`);
    await chmod(join(wrapDir, 'git'), 0o755);
    // A HOME whose git config has a storing credential helper: it must never receive the token.
    const fakeHome = join(wrapDir, 'home');
    const credStore = join(fakeHome, 'git-credentials');
    await mkdir(fakeHome);
    await writeFile(join(fakeHome, '.gitconfig'), `[credential]\n\thelper = store --file ${credStore}\n`);
    const oldPath = process.env.PATH;
    const oldHome = process.env.HOME;
    process.env.PATH = `${wrapDir}:${oldPath}`;
    process.env.HOME = fakeHome;
    const before = server.requests.length;
    const ws = await createWorkspace(root, newId());
    let r: Awaited<ReturnType<typeof cloneRepository>>;
    try {
      r = await cloneRepository({
        workspaceDir: ws,
        files: filesOf(ws),
        repository: 'acme/private',
        provider: null,
        providers: providersFor(),
        helperDir,
        redact: identity,
        gitIdentity: { name: 'Custom Bot', email: 'bot@example.test' },
      });
    } finally {
      process.env.PATH = oldPath;
      process.env.HOME = oldHome;
    }
    assert.equal(r.provider, 'github');
    assert.equal(await readFile(join(ws, 'README.md'), 'utf8'), '# private\n');
    assert.equal(await gitOut(ws, ['config', 'user.name']), 'Custom Bot');
    assert.match(r.branch, /^parley\/[0-9a-f]{8}$/);

    const reqs = server.requests.slice(before);
    assert.ok(
      reqs.some((q) => q.status === 401),
      'the server asked for credentials',
    );
    assert.ok(
      reqs.some((q) => q.user === 'x-access-token' && q.status === 200),
      'authenticated with Basic auth',
    );
    for (const q of server.requests) assert.equal(q.url.includes(CANARY), false, `token in URL ${q.url}`);

    const config = await readFile(join(ws, '.git', 'config'), 'utf8');
    assert.equal(config.includes(CANARY), false);
    assert.match(config, new RegExp(`url = ${server.url.replace(/[.]/g, '\\.')}/acme/private\\.git`));
    await assertNoTokenInTree(ws, CANARY);
    await assertNoTokenInTree(helperDir, CANARY);

    const argv = await readFile(argvLog, 'utf8');
    assert.match(argv, /clone/);
    assert.equal(argv.includes(CANARY), false, 'token on a command line');
    assert.equal(await readFile(credStore, 'utf8').catch(() => ''), '', 'no credential helper stored the token');

    // The agent's shell: askpass env lets a later `git push` authenticate the same way.
    const env: Record<string, string> = { PATH: process.env.PATH!, HOME: fakeHome, ...(await askpassEnv(providersFor(), helperDir)) };
    assert.equal(env.GITHUB_TOKEN, CANARY);
    const script = 'echo change > change.txt && git add change.txt && git commit -q -m change && git push -q origin HEAD:refs/heads/agent-work';
    await execFileAsync('bash', ['-c', script], { cwd: ws, env });
    assert.match(await server.gitIn('acme/private', ['log', '--format=%s', 'agent-work']), /^change/);
    // Without the askpass env the same push is refused (the token is stored nowhere).
    await assert.rejects(
      execFileAsync('git', ['push', '-q', 'origin', 'HEAD:refs/heads/agent-work2'], {
        cwd: ws,
        env: { PATH: process.env.PATH!, HOME: process.env.HOME ?? tmpdir(), GIT_TERMINAL_PROMPT: '0' },
      }),
    );
    await assertNoTokenInTree(ws, CANARY);
    assert.equal(await readFile(credStore, 'utf8').catch(() => ''), '', 'the push stored no credential');
    for (const q of server.requests) assert.equal(q.url.includes(CANARY), false);
    await rm(wrapDir, { recursive: true, force: true });
  });

  test('selected branch is checked out; a tag-free unknown branch fails and leaves an empty workspace', async () => {
    const r = await clone({ repository: 'acme/private', branch: 'develop' });
    assert.equal(r.branch, 'develop');
    assert.equal(await gitOut(r.dir, ['rev-parse', '--abbrev-ref', 'HEAD']), 'develop');
    assert.equal(await readFile(join(r.dir, 'develop.txt'), 'utf8'), 'dev\n');
    assert.equal(await gitOut(r.dir, ['rev-parse', '--abbrev-ref', '@{upstream}']), 'origin/develop');

    const pub = await clone({ repository: 'acme/public', branch: 'feature/x', provider: null });
    assert.equal(pub.branch, 'feature/x');
    assert.equal(await readFile(join(pub.dir, 'feature.txt'), 'utf8'), 'feature\n');

    const ws = await createWorkspace(root, newId());
    const err = await expectCloneError(clone({ repository: 'acme/public', branch: 'nope;touch>pwned', workspaceDir: ws }), 'branch_not_found');
    assert.match(err.message, /nope;touch>pwned/);
    assert.deepEqual(await readdir(ws), [], 'workspace emptied for a retry');
  });

  test('bad branch names are rejected before any network request', async () => {
    const before = server.requests.length;
    for (const bad of ['-x', '--upload-pack=evil', 'a..b', 'has space', 'x~1', 'x^', 'a:b', '@{-1}', 'end.lock', 'tab\tx', 'HEAD']) {
      await expectCloneError(clone({ repository: 'acme/public', branch: bad }), 'invalid_branch');
    }
    await expectCloneError(clone({ repository: 'acme/public', workBranch: 'bad..work' }), 'invalid_branch');
    assert.equal(server.requests.length, before);
  });

  test('invalid repository names, hosts with credentials and a helperDir inside the workspace are refused', async () => {
    for (const bad of ['../etc/passwd', 'owner', '-x/y', 'a/../b', 'a b/c', 'a/b?x=1']) {
      await expectCloneError(clone({ repository: bad }), 'invalid_repository');
    }
    await expectCloneError(
      clone({ repository: 'acme/public', providers: [{ provider: 'github', token: null, host: 'https://u:p@h.example' }] }),
      'invalid_host',
    );
    await expectCloneError(clone({ repository: 'acme/public', provider: 'enterprise_sso', providers: [] }), 'invalid_host');
    const ws = await createWorkspace(root, newId());
    await expectCloneError(clone({ repository: 'acme/public', workspaceDir: ws, helperDir: join(ws, 'helpers') }), 'invalid_options');
  });

  test('a bad token gives CloneError auth_failed without the token anywhere', async () => {
    const ws = await createWorkspace(root, newId());
    const before = server.requests.length;
    const err = await expectCloneError(clone({ repository: 'acme/private', workspaceDir: ws, providers: providersFor(BAD_CANARY) }), 'auth_failed');
    assert.match(err.message, /acme\/private/);
    assert.match(err.message, /rejected the stored github token/);
    const everything = `${err.message}\n${err.stack}\n${JSON.stringify(err.attempts)}\n${String(err)}`;
    assert.equal(everything.includes(BAD_CANARY), false);
    assert.equal(everything.includes(CANARY), false);
    assert.ok(server.requests.slice(before).some((q) => q.status === 401 && q.headers.authorization));
    for (const q of server.requests) assert.equal(q.url.includes(BAD_CANARY), false);
    assert.deepEqual(await readdir(ws), []);
  });

  test('a private repository without a token: auth_required', async () => {
    const err = await expectCloneError(
      clone({ repository: 'acme/private', providers: [{ provider: 'github', token: null, host: server.url }] }),
      'auth_required',
    );
    assert.match(err.message, /requires authentication/);
  });

  test('a missing repository: not_found, token-free message', async () => {
    const err = await expectCloneError(clone({ repository: 'acme/missing' }), 'not_found');
    assert.match(err.message, /acme\/missing was not found/);
    assert.equal(err.message.includes(CANARY), false);
  });

  test('an unreachable host (closed port): unreachable', async () => {
    const port = await closedPort();
    const err = await expectCloneError(
      clone({ repository: 'acme/public', providers: [{ provider: 'github', token: CANARY, host: `http://127.0.0.1:${port}` }] }),
      'unreachable',
    );
    assert.match(err.message, new RegExp(`127\\.0\\.0\\.1:${port}`));
    assert.equal(err.message.includes(CANARY), false);
  });

  test('without a provider: providers with tokens in order, then anonymous stored hosts', async () => {
    const port = await closedPort();
    const phases: string[] = [];
    const r = await clone({
      repository: 'acme/private',
      provider: null,
      providers: [
        { provider: 'gitlab', token: CANARY, host: server.url },
        { provider: 'github', token: 'unused-token', host: `http://127.0.0.1:${port}` },
      ],
      onPhase: (p, d) => phases.push(`${p}:${d ?? ''}`),
    });
    assert.equal(r.provider, 'gitlab');
    assert.match(phases[0]!, new RegExp(`cloning:.*127\\.0\\.0\\.1:${port}.*github`), 'github is tried first');
    assert.match(phases[1]!, /cloning:.*gitlab/);

    const anon = await clone({
      repository: 'acme/public',
      provider: null,
      providers: [{ provider: 'bitbucket', token: null, host: server.url }],
    });
    assert.equal(anon.provider, 'bitbucket');
    assert.equal(anon.remoteUrl, `${server.url}/acme/public.git`);
  });

  test('an existing clone of the same remote is reused; other content is refused', async () => {
    const first = await clone({ repository: 'acme/public', workBranch: 'parley/resume01' });
    const before = server.requests.length;
    const again = await cloneRepository({
      workspaceDir: first.dir,
      files: filesOf(first.dir),
      repository: 'acme/public',
      provider: 'github',
      providers: providersFor(),
      workBranch: 'parley/resume01',
      helperDir,
      redact: identity,
    });
    assert.equal(again.reused, true);
    assert.equal(again.branch, 'parley/resume01');
    assert.equal(server.requests.length, before, 'no network on resume');

    const ws = await createWorkspace(root, newId());
    await writeFile(join(ws, 'stray.txt'), 'x');
    await expectCloneError(clone({ repository: 'acme/public', workspaceDir: ws }), 'workspace_not_empty');
  });

  test('an empty repository gets the work branch on its unborn HEAD', async () => {
    const r = await clone({ repository: 'acme/empty', workBranch: 'parley/empty001' });
    assert.equal(r.branch, 'parley/empty001');
    assert.equal(await gitOut(r.dir, ['symbolic-ref', '--short', 'HEAD']), 'parley/empty001');
  });

  test('an aborted clone throws CloneError aborted', async () => {
    const ac = new AbortController();
    ac.abort();
    await expectCloneError(clone({ repository: 'acme/public', signal: ac.signal }), 'aborted');
  });
});

describe('repository instructions', () => {
  let repo: string;
  let outside: string;
  before(async () => {
    repo = await mkdtemp(join(tmpdir(), 'parley-instr-'));
    outside = await mkdtemp(join(tmpdir(), 'parley-outside-'));
    await writeFile(join(outside, 'secret.md'), 'TOP SECRET HOST FILE');
    await writeFile(join(repo, 'agents.md'), '# Agents\nUse pnpm.\n');
    await writeFile(join(repo, '.cursorrules'), 'Prefer small functions.\n');
    const m = join(repo, '.openhands', 'microagents');
    await mkdir(join(m, 'k8s'), { recursive: true });
    await writeFile(join(m, 'repo.md'), '---\nname: repo_rules\ntype: repo\ntriggers: [ignored]\n---\nAlways run tests.\n');
    await writeFile(join(m, 'docker.md'), '---\nname: docker\ntype: knowledge\ntriggers: [docker, "container"]  # inline\n---\nDocker tips.\n');
    await writeFile(join(m, 'k8s', 'kube.md'), '---\r\nname: kube\r\ntriggers:\r\n  - kubectl\r\n  - "helm chart"\r\n---\r\nKube tips.\r\n');
    await writeFile(join(m, 'plain.md'), 'No front matter here.\n');
    await writeFile(join(m, 'README.md'), 'This folder holds microagents.\n');
    await writeFile(join(m, 'big.md'), `---\nname: big\n---\n${'x'.repeat(70 * 1024)}`);
    await writeFile(join(m, 'task.md'), '---\nname: release\ntype: task\ninputs:\n  - name: version\n    description: v\n---\nDo a release.\n');
    await symlink(join(outside, 'secret.md'), join(m, 'leak.md'));
  });
  after(async () => {
    await rm(repo, { recursive: true, force: true });
    await rm(outside, { recursive: true, force: true });
  });

  test('loads AGENTS.md (any case), .cursorrules and microagents into always / triggered', async () => {
    const r = await loadRepoInstructions(filesOf(repo));
    const always = Object.fromEntries(r.always.map((a) => [a.name, a]));
    assert.deepEqual(Object.keys(always).sort(), ['agents', 'big', 'cursorrules', 'plain', 'repo_rules']);
    assert.equal(always.agents!.source, 'agents.md');
    assert.equal(always.agents!.content, '# Agents\nUse pnpm.');
    assert.equal(always.cursorrules!.content, 'Prefer small functions.');
    assert.equal(always.repo_rules!.content, 'Always run tests.');
    assert.equal(always.plain!.source, '.openhands/microagents/plain.md');
    assert.equal(always.plain!.content, 'No front matter here.');

    const triggered = Object.fromEntries(r.triggered.map((t) => [t.name, t]));
    assert.deepEqual(Object.keys(triggered).sort(), ['docker', 'kube', 'release']);
    assert.deepEqual(triggered.docker!.triggers, ['docker', 'container']);
    assert.equal(triggered.docker!.content, 'Docker tips.');
    assert.deepEqual(triggered.kube!.triggers, ['kubectl', 'helm chart']);
    assert.equal(triggered.kube!.source, '.openhands/microagents/k8s/kube.md');
    assert.deepEqual(triggered.release!.triggers, ['/release']);
  });

  test('size limit with a note; symlinks out of the repository ignored with a warning', async () => {
    const r = await loadRepoInstructions(filesOf(repo));
    const big = r.always.find((a) => a.name === 'big')!;
    assert.ok(big.content.length < 66 * 1024);
    assert.match(big.content, /only the first 65536 bytes were loaded/);
    const all = JSON.stringify(r);
    assert.equal(all.includes('TOP SECRET'), false);
    assert.ok(r.warnings.some((w) => w.includes('leak.md')));
  });

  test('AGENTS.md is preferred over other casings; a missing dir gives empty results', async () => {
    const d = await mkdtemp(join(tmpdir(), 'parley-instr2-'));
    try {
      await writeFile(join(d, 'Agents.md'), 'mixed');
      await writeFile(join(d, 'AGENTS.md'), 'upper');
      const r = await loadRepoInstructions(filesOf(d));
      assert.deepEqual(
        r.always.map((a) => [a.source, a.content]),
        [['AGENTS.md', 'upper']],
      );
      const none = await loadRepoInstructions(filesOf(join(d, 'missing')));
      assert.deepEqual(none.always, []);
      assert.deepEqual(none.triggered, []);
    } finally {
      await rm(d, { recursive: true, force: true });
    }
  });

  test('many microagents, read ahead of one another: each keeps its own text, in the listing order (a later name replaces an earlier)', async () => {
    const d = await mkdtemp(join(tmpdir(), 'parley-instr3-'));
    try {
      const m = join(d, '.openhands', 'microagents');
      await mkdir(m, { recursive: true });
      const names = Array.from({ length: 30 }, (_, i) => `m${String(i).padStart(2, '0')}`);
      for (const n of names) {
        // m07 and m23 share a name; m12 is binary
        const name = n === 'm07' || n === 'm23' ? 'shared' : n;
        await writeFile(
          join(m, `${n}.md`),
          n === 'm12' ? Buffer.from([0, 1, 2]) : `---\nname: ${name}\n---\ntext of ${n} ${'y'.repeat(Number(n.slice(1)) * 97)}\n`,
        );
      }
      const r = await loadRepoInstructions(filesOf(d));
      for (const a of r.always)
        assert.equal(a.content, `text of ${a.source.slice(-6, -3)} ${'y'.repeat(Number(a.source.slice(-5, -3)) * 97)}`.trim(), a.source);
      const sources = r.always.map((a) => a.source.slice(-6, -3));
      assert.deepEqual(
        [...sources].sort(),
        names.filter((n) => n !== 'm07' && n !== 'm12'),
      );
      assert.equal(r.always.find((a) => a.name === 'shared')!.source, '.openhands/microagents/m23.md');
      assert.deepEqual(r.warnings, [
        '.openhands/microagents/m12.md: ignored (binary file)',
        '.openhands/microagents/m23.md: replaces the earlier instructions named "shared"',
      ]);
    } finally {
      await rm(d, { recursive: true, force: true });
    }
  });

  test('selectTriggered matches trigger words case-insensitively', async () => {
    const { triggered } = await loadRepoInstructions(filesOf(repo));
    const names = (text: string) =>
      selectTriggered(triggered, text)
        .map((t) => t.name)
        .sort();
    assert.deepEqual(names('Please fix the DOCKER build'), ['docker']);
    assert.deepEqual(names('update the Helm Chart and run KUBECTL apply'), ['kube']);
    assert.deepEqual(names('run /release now'), ['release']);
    assert.deepEqual(names('nothing relevant'), []);
  });

  test('parseFrontMatter: scalars, quotes, flow and block lists, block scalars, unterminated', () => {
    const r = parseFrontMatter(
      "---\nname: 'it''s'\nversion: \"1.0\"\nlist: [a, 'b, c', d]\nblock:\n  - x # c\n  - 'y'\ntext: |\n  line1\n  line2\nempty:\n---\nbody\n",
    );
    assert.deepEqual(r.data, {
      name: "it's",
      version: '1.0',
      list: ['a', 'b, c', 'd'],
      block: ['x', 'y'],
      text: 'line1\nline2',
      empty: null,
    });
    assert.equal(r.body, 'body\n');
    const u = parseFrontMatter('---\nname: x\nno end');
    assert.equal(u.data, null);
    assert.ok(u.error);
    assert.equal(parseFrontMatter('# title').data, null);
  });
});

describe('setup script', () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'parley-setup-'));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });
  const writeScript = async (body: string) => {
    await mkdir(join(dir, '.openhands'), { recursive: true });
    await writeFile(join(dir, '.openhands', 'setup.sh'), body);
  };

  test('absent: ran false', async () => {
    const r = await runSetupScript(filesOf(dir));
    assert.equal(r.ran, false);
  });

  test('success: runs in the repo with the given env, output redacted and streamed, daemon env not inherited', async () => {
    process.env.PARLEY_DAEMON_ONLY_SECRET = 'daemon-secret-value';
    try {
      await writeScript('echo "cwd=$(pwd)"\necho "token=$MY_TOKEN"\necho "daemon=${PARLEY_DAEMON_ONLY_SECRET:-unset}"\necho err >&2\ntouch setup-ran\n');
      const chunks: string[] = [];
      const r = await runSetupScript(filesOf(dir), {
        env: { MY_TOKEN: 'supersecret123' },
        redact: (s) => s.split('supersecret123').join('<secret_hidden>'),
        onOutput: (c) => chunks.push(c),
      });
      assert.equal(r.ran, true);
      assert.equal(r.exitCode, 0);
      assert.equal(r.timedOut, false);
      assert.ok(r.output.includes(`cwd=${await realpath(dir)}\n`), r.output);
      assert.match(r.output, /token=<secret_hidden>/);
      assert.match(r.output, /daemon=unset/);
      assert.match(r.output, /err/);
      assert.equal(r.output.includes('supersecret123'), false);
      assert.equal(chunks.join(''), r.output);
      assert.ok((await stat(join(dir, 'setup-ran'))).isFile());
    } finally {
      delete process.env.PARLEY_DAEMON_ONLY_SECRET;
    }
  });

  test('failure: exit code reported', async () => {
    await writeScript('echo failing\nexit 3\n');
    const r = await runSetupScript(filesOf(dir));
    assert.equal(r.ran, true);
    assert.equal(r.exitCode, 3);
    assert.equal(r.timedOut, false);
    assert.match(r.output, /failing/);
  });

  test('timeout: the whole process group is killed', async () => {
    await writeScript('sleep 30 &\necho $! > bg.pid\necho started\nsleep 30\n');
    const t0 = Date.now();
    const r = await runSetupScript(filesOf(dir), { timeoutMs: 500, killGraceMs: 300 });
    assert.ok(Date.now() - t0 < 5000, 'returned promptly');
    assert.equal(r.timedOut, true);
    assert.equal(r.exitCode, null);
    assert.match(r.output, /started/);
    assert.match(r.output, /timed out/);
    const bgPid = Number((await readFile(join(dir, 'bg.pid'), 'utf8')).trim());
    assert.equal(await waitDead(bgPid), true, 'background child killed too');
  });

  test('abort signal stops the script', async () => {
    await writeScript('echo go\nsleep 30\n');
    const ac = new AbortController();
    setTimeout(() => ac.abort(), 300);
    const r = await runSetupScript(filesOf(dir), { signal: ac.signal, killGraceMs: 200 });
    assert.equal(r.aborted, true);
    assert.equal(r.exitCode, null);
  });
});

describe('task templates', () => {
  const base = { repo: 'acme/widgets', issue_number: 42, title: 'Fix the frobnicator' };

  test('provider words, token variable, repo, number and title in every task type', () => {
    for (const task_type of ['MERGE_CONFLICTS', 'FAILING_CHECKS', 'UNRESOLVED_COMMENTS', 'OPEN_ISSUE'] as const) {
      const gh = suggestedTaskMessage({ ...base, git_provider: 'github', task_type });
      const gl = suggestedTaskMessage({ ...base, git_provider: 'gitlab', task_type });
      const bb = suggestedTaskMessage({ ...base, git_provider: 'bitbucket', task_type });
      for (const m of [gh, gl, bb]) {
        assert.match(m, /acme\/widgets/);
        assert.match(m, /#42/);
        assert.match(m, /"Fix the frobnicator"/);
      }
      assert.match(gh, /pull request/);
      assert.match(gh, /GITHUB_TOKEN/);
      assert.match(gl, /merge request/);
      assert.doesNotMatch(gl, /pull request/);
      assert.match(gl, /GITLAB_TOKEN/);
      assert.match(bb, /pull request/);
      assert.match(bb, /BITBUCKET_TOKEN/);
    }
    assert.match(suggestedTaskMessage({ ...base, git_provider: 'github', task_type: 'MERGE_CONFLICTS' }), /merge conflicts/i);
    assert.match(suggestedTaskMessage({ ...base, git_provider: 'gitlab', task_type: 'FAILING_CHECKS' }), /GitLab CI/);
    assert.match(suggestedTaskMessage({ ...base, git_provider: 'github', task_type: 'UNRESOLVED_COMMENTS' }), /review comment/);
  });

  test('defaults: no provider → GitHub words, no task type → open issue', () => {
    const m = suggestedTaskMessage(base);
    assert.equal(m, suggestedTaskMessage({ ...base, git_provider: 'github', task_type: 'OPEN_ISSUE' }));
    assert.match(m, /resolve issue #42/);
    assert.match(m, /GITHUB_TOKEN/);
  });

  test('validation: enterprise_sso only for OPEN_ISSUE; bad numbers, repos, types', () => {
    assert.equal(validateSuggestedTask({ ...base, git_provider: 'enterprise_sso', task_type: 'OPEN_ISSUE' }), null);
    const sso = suggestedTaskMessage({ ...base, git_provider: 'enterprise_sso' });
    assert.match(sso, /issue #42/);
    assert.doesNotMatch(sso, /_TOKEN/);
    for (const t of ['MERGE_CONFLICTS', 'FAILING_CHECKS', 'UNRESOLVED_COMMENTS'] as const) {
      assert.match(validateSuggestedTask({ ...base, git_provider: 'enterprise_sso', task_type: t })!, /enterprise_sso/);
      assert.throws(() => suggestedTaskMessage({ ...base, git_provider: 'enterprise_sso', task_type: t }), SuggestedTaskError);
    }
    assert.match(validateSuggestedTask({ ...base, issue_number: 0 })!, /positive integer/);
    assert.match(validateSuggestedTask({ ...base, issue_number: 1.5 })!, /positive integer/);
    assert.match(validateSuggestedTask({ ...base, repo: 'nope' })!, /owner\/repo/);
    assert.match(validateSuggestedTask({ ...base, task_type: 'OPEN_PR' as never })!, /Unsupported task type/);
  });

  test('createMicroagentMessage names the microagent file and uses the title', () => {
    const m = createMicroagentMessage({ repo: 'acme/widgets', title: 'Build & Test Guide' });
    assert.match(m, /acme\/widgets/);
    assert.match(m, /Build & Test Guide/);
    assert.match(m, /\.openhands\/microagents\/build-test-guide\.md/);
    assert.match(m, /type: repo/);
    const d = createMicroagentMessage({ repo: 'acme/widgets' });
    assert.match(d, /\.openhands\/microagents\/repo\.md/);
    assert.match(d, /describes the repository acme\/widgets/);
  });
});
