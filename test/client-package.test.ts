/**
 * `parley/client` and `parley/server` as another project gets them: `npm pack` (its `prepare`
 * builds lib/ with the declarations), the tarball installed into a fresh project, TypeScript
 * checking that project's calls against the installed declarations alone (a right call passes, a
 * misspelt field fails naming it), the installed `parley serve` running the daemon and the
 * compiled call running against it, the installed `parley ls`, and the embedded core running a
 * conversation end to end.
 *
 * Offline and without touching the checkout's builds: the package is packed from a copy of the
 * working tree (its node_modules linked), so the checkout's dist/ and lib/, which other test files
 * run, are never rebuilt under them; the fresh project installs with a lockfile made from the
 * checkout's, so every package comes from npm's cache. Install scripts are skipped: the only one
 * that matters, better-sqlite3's native build, would compile SQLite for minutes; the addon this
 * checkout built (same version, same Node) is copied in its place. The whole file has the runner's
 * per-file limit (3 minutes): the work happens on a tmpfs where there is one, the dependencies
 * are installed while the tarball is packed, one tsc run checks all three sources, and the daemon
 * runs from the installed build rather than through tsx.
 */
import assert from 'node:assert/strict';
import { execFile as execFileCb, execFileSync, spawn, type ChildProcess } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { promisify } from 'node:util';
import { ROOT, tempDir, waitFor } from './support/daemon.js';
import { startScriptedLlm, type ScriptedLlm } from './support/scripted-llm.js';

/** Children run asynchronously: the scripted LLM they talk to answers from this process. */
const execFile = promisify(execFileCb);

const KEY = 'client-package-test-key';
const TSC = path.join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc');
let work: string;
let tarball: string;
let project: string;
let llm: ScriptedLlm;
let daemon: ChildProcess | undefined;
/** How long the set-up took (reported by the first test: this file runs close to the per-file limit on a busy machine). */
const timings: string[] = [];

/**
 * Where the copy, the tarball and the project go: a tmpfs when there is one that allows running
 * programs (npm's 8,000 small files of the project install in ~60 % of the time there and are
 * removed in 1 s instead of 14 s at load average 20), else the temporary directory.
 */
function scratchDir(): string {
  const shm = fs
    .readFileSync('/proc/mounts', 'utf8')
    .split('\n')
    .find((l) => l.split(' ')[1] === '/dev/shm' && l.split(' ')[2] === 'tmpfs');
  const base = shm && !/\bnoexec\b/.test(shm.split(' ')[3] ?? '') ? '/dev/shm' : os.tmpdir();
  const dir = fs.mkdtempSync(path.join(base, 'parley-package-'));
  process.once('exit', () => fs.rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** A copy of the working tree (tracked and new files, without tests), node_modules linked. */
function copyCheckout(to: string): void {
  const files = execFileSync('git', ['ls-files', '--cached', '--others', '--exclude-standard', '-z'], { cwd: ROOT, encoding: 'utf8' }).split('\0');
  for (const f of files) {
    if (!f || f.startsWith('test/') || !fs.existsSync(path.join(ROOT, f))) continue;
    fs.mkdirSync(path.dirname(path.join(to, f)), { recursive: true });
    fs.copyFileSync(path.join(ROOT, f), path.join(to, f));
  }
  fs.symlinkSync(path.join(ROOT, 'node_modules'), path.join(to, 'node_modules'));
}

/**
 * A project depending on the tarball (and @types/node), with a lockfile taken from the checkout's:
 * the same versions Parley was built and tested with, each in npm's cache. Made in two steps so
 * that the long one overlaps the packing: `seedDependencies` installs Parley's dependencies while
 * the tarball is being built (a project that needs them), `installTarball` then turns the project
 * into one that depends on the tarball alone, and npm adds the package to the tree it finds.
 */
const lock = () => JSON.parse(fs.readFileSync(path.join(ROOT, 'package-lock.json'), 'utf8')) as { packages: Record<string, Record<string, unknown>> };
const npmInstall = (dir: string, command: 'ci' | 'install') =>
  execFile('npm', [command, '--offline', '--ignore-scripts', '--no-audit', '--no-fund'], { cwd: dir, timeout: 170_000 });

function writeProject(dir: string, dependencies: Record<string, string>, extra: Record<string, unknown>): void {
  const checkoutLock = lock();
  const devDependencies = { '@types/node': checkoutLock.packages['node_modules/@types/node']!.version as string };
  const pkg = { name: 'consumer', private: true, type: 'module', dependencies, devDependencies };
  const packages: Record<string, unknown> = { '': { name: pkg.name, dependencies, devDependencies }, ...extra };
  for (const [where, entry] of Object.entries(checkoutLock.packages)) {
    if (!where || entry.dev) continue; // the checkout's own tools are not Parley's dependencies
    const { devOptional: _, ...rest } = entry;
    packages[where] = rest;
  }
  fs.writeFileSync(path.join(dir, 'package.json'), JSON.stringify(pkg, null, 2));
  fs.writeFileSync(path.join(dir, 'package-lock.json'), JSON.stringify({ name: pkg.name, lockfileVersion: 3, requires: true, packages }, null, 2));
}

async function seedDependencies(dir: string): Promise<void> {
  const own = JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { dependencies: Record<string, string> };
  writeProject(dir, own.dependencies, {});
  await npmInstall(dir, 'ci');
}

async function installTarball(dir: string, tgz: string): Promise<void> {
  const manifest = JSON.parse(execFileSync('tar', ['xzf', tgz, '-O', 'package/package.json'], { encoding: 'utf8' }));
  writeProject(
    dir,
    { parley: `file:${tgz}` },
    {
      'node_modules/parley': {
        version: manifest.version,
        resolved: `file:${tgz}`,
        integrity: `sha512-${crypto.createHash('sha512').update(fs.readFileSync(tgz)).digest('base64')}`,
        dependencies: manifest.dependencies,
        bin: manifest.bin,
        engines: manifest.engines,
      },
    },
  );
  await npmInstall(dir, 'install');
  const addon = path.join('node_modules', 'better-sqlite3', 'build', 'Release', 'better_sqlite3.node');
  fs.mkdirSync(path.dirname(path.join(dir, addon)), { recursive: true });
  fs.copyFileSync(path.join(ROOT, addon), path.join(dir, addon));
}

before(
  async () => {
    const started = Date.now();
    const lap = (what: string) => timings.push(`${what}: ${((Date.now() - started) / 1000).toFixed(1)} s`);
    work = scratchDir();
    const checkout = path.join(work, 'parley');
    copyCheckout(checkout);
    project = path.join(work, 'consumer');
    fs.mkdirSync(project);
    const [packed] = await Promise.all([
      execFile('npm', ['pack', '--pack-destination', work], { cwd: checkout, timeout: 170_000 }).finally(() => lap('packed')),
      seedDependencies(project).finally(() => lap('dependencies installed')),
    ]);
    tarball = path.join(work, packed.stdout.trim().split('\n').at(-1)!);
    await installTarball(project, tarball);
    lap('tarball installed');
    llm = await startScriptedLlm();
  },
  { timeout: 175_000 },
);
after(async () => {
  daemon?.kill('SIGKILL');
  await llm?.close();
});

const env = (extra: Record<string, string> = {}) => ({ PATH: process.env.PATH!, HOME: project, ...extra });

/** tsc on the project; its error lines, apart from the one a third party causes (see below). */
async function typecheck(files: string[]): Promise<string[]> {
  const config = {
    compilerOptions: { target: 'ES2022', module: 'nodenext', moduleResolution: 'nodenext', strict: true, skipLibCheck: false, types: ['node'], outDir: 'out' },
    files,
  };
  fs.writeFileSync(path.join(project, 'tsconfig.json'), JSON.stringify(config));
  const r = await execFile(process.execPath, [TSC, '-p', 'tsconfig.json'], { cwd: project, timeout: 120_000 }).catch((err: { stdout: string }) => err);
  const errors = r.stdout.split('\n').filter((l) => /error TS\d+/.test(l));
  // The declarations reach the AI SDK's (the core's types use them), which import 'json-schema'
  // without depending on its types: a strict check (skipLibCheck false) says so; nothing else may.
  const thirdParty = errors.filter((l) => l.startsWith('node_modules/@ai-sdk/'));
  for (const l of thirdParty) assert.match(l, /error TS7016: Could not find a declaration file for module 'json-schema'/);
  return errors.filter((l) => !thirdParty.includes(l));
}

const GOOD = `
import { createParleyClient, type ConversationInfo, type ParleyEvent } from 'parley/client';

const parley = createParleyClient({ url: process.env.PARLEY_URL!, apiKey: process.env.PARLEY_API_KEY });
const created = await parley.createConversation.mutate({ initial_user_msg: 'say hello', selected_branch: null });
const id: string = created.conversation_id;
const seen: ParleyEvent[] = [];
await new Promise<void>((resolve, reject) => {
  const sub = parley.events.subscribe({ conversation_id: id, lastEventId: '0' }, {
    onData: (item) => {
      const event = 'kind' in item ? item : item.data;
      seen.push(event);
      if (event.kind === 'ConversationStateUpdateEvent' && event.key === 'execution_status' && event.value === 'finished') {
        sub.unsubscribe();
        resolve();
      }
    },
    onError: reject,
  });
});
const info: ConversationInfo = await parley.getConversation.query({ conversation_id: id });
const answer = seen.find((e) => e.kind === 'MessageEvent' && e.source === 'agent');
console.log(
  JSON.stringify({
    status: info.execution_status,
    seqs: seen.flatMap((e) => (e.seq === undefined ? [] : [e.seq])),
    answer: answer?.kind === 'MessageEvent' ? answer.llm_message.content : null,
  }),
);
`;

const BAD = `
import { createParleyClient } from 'parley/client';

const parley = createParleyClient({ url: 'http://127.0.0.1:3000' });
await parley.createConversation.mutate({ initial_user_msg: 'hi', repositroy: 'octo/hello' });
`;

const EMBEDDED = `
import fs from 'node:fs';
import path from 'node:path';
import { startParley, type ParleyEvent } from 'parley/server';

const [dataDir, llmUrl] = process.argv.slice(2) as [string, string];
const parley = await startParley({ dataDir, llm: { model: 'openai/scripted', baseUrl: llmUrl, apiKey: 'llm-key' }, sandbox: { mode: 'none' } });
const { conversation_id } = await parley.caller.createConversation({ initial_user_msg: 'write hello.txt' });
const seen: ParleyEvent[] = [];
for await (const item of await parley.caller.events({ conversation_id, after_seq: 0 })) {
  const event = 'kind' in item ? item : item.data;
  seen.push(event);
  if (event.kind === 'ConversationStateUpdateEvent' && event.key === 'execution_status' && event.value !== 'running') break;
}
const info = await parley.caller.getConversation({ conversation_id });
const file = path.join(dataDir, 'workspaces', conversation_id.replaceAll('-', ''), 'hello.txt');
await parley.close();
console.log(
  JSON.stringify({
    status: info.execution_status,
    last_seq: info.last_seq,
    seqs: seen.flatMap((e) => (e.seq === undefined ? [] : [e.seq])),
    kinds: seen.map((e) => e.kind),
    file: fs.readFileSync(file, 'utf8'),
  }),
);
`;

describe('the packed package', () => {
  test('holds the built exports, their declarations, the command and the daemon; no sources', (t) => {
    t.diagnostic(`set-up: ${timings.join(', ')}; load average ${os.loadavg()[0]!.toFixed(1)}`);
    const listed = execFileSync('tar', ['tzf', tarball], { encoding: 'utf8' }).split('\n');
    for (const f of [
      'lib/client.mjs',
      'lib/types/client.d.ts',
      'lib/server.mjs',
      'lib/types/server.d.ts',
      'lib/writer.mjs',
      'lib/cli.mjs',
      'bin/parley.mjs',
      'dist/main.mjs',
      'scripts/start.mjs',
      'scripts/stale.mjs',
    ]) {
      assert.ok(listed.includes(`package/${f}`), `${f} is in the tarball`);
    }
    assert.ok(!listed.some((f) => /^package\/(src|bridge|cli|test)\//.test(f)), 'no sources');
    const installed = JSON.parse(fs.readFileSync(path.join(project, 'node_modules', 'parley', 'package.json'), 'utf8'));
    assert.equal(installed.exports['./client'].types, './lib/types/client.d.ts');
  });

  test('TypeScript: a right call type-checks; a misspelt field fails naming it', async () => {
    fs.writeFileSync(path.join(project, 'good.ts'), GOOD);
    fs.writeFileSync(path.join(project, 'bad.ts'), BAD);
    fs.writeFileSync(path.join(project, 'embedded.ts'), EMBEDDED);
    // one program (one tsc run): the only error is bad.ts's; good.ts and embedded.ts are emitted to out/
    const errors = await typecheck(['good.ts', 'bad.ts', 'embedded.ts']);
    assert.equal(errors.length, 1, errors.join('\n'));
    assert.match(
      errors[0]!,
      new RegExp(
        /^bad\.ts\(\d+,\d+\): error TS(2353|2561): Object literal may only specify known properties, /.source +
          /(and|but) 'repositroy' does not exist in type '\{ repository\?: string/.source,
      ),
    );
    assert.ok(fs.existsSync(path.join(project, 'out', 'good.js')) && fs.existsSync(path.join(project, 'out', 'embedded.js')));
  });

  test('the installed `parley serve` runs the daemon; the compiled call runs against it; `parley ls` lists', async () => {
    const bin = path.join(project, 'node_modules', '.bin', 'parley');
    const dataDir = tempDir();
    const proc = spawn(bin, ['serve'], {
      cwd: project,
      env: env({
        PORT: '0',
        DATA_DIR: dataDir,
        SESSION_API_KEY: KEY,
        SANDBOX: 'none',
        LLM_MODEL: 'openai/scripted',
        LLM_BASE_URL: llm.url,
        LLM_API_KEY: 'llm-key',
      }),
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    daemon = proc;
    let log = '';
    proc.stdout!.setEncoding('utf8').on('data', (c: string) => (log += c));
    proc.stderr!.setEncoding('utf8').on('data', (c: string) => (log += c));
    const port = await waitFor(() => /listening on http:\/\/127\.0\.0\.1:(\d+)/.exec(log)?.[1], 'the installed daemon to listen', 60_000);
    const url = `http://127.0.0.1:${port}`;

    llm.push({ text: 'hello from the scripted LLM' });
    const good = await execFile(process.execPath, ['out/good.js'], { cwd: project, timeout: 60_000, env: env({ PARLEY_URL: url, PARLEY_API_KEY: KEY }) });
    const got = JSON.parse(good.stdout);
    assert.equal(got.status, 'finished');
    assert.deepEqual(
      got.seqs,
      Array.from({ length: got.seqs.length }, (_, i) => i + 1),
    );
    assert.deepEqual(got.answer, [{ type: 'text', text: 'hello from the scripted LLM' }]);

    const ls = await execFile(bin, ['ls', '--json'], { cwd: project, timeout: 60_000, env: env({ PARLEY_URL: url, PARLEY_API_KEY: KEY }) });
    assert.equal(ls.stdout.trim().split('\n').length, 1);
    assert.equal(typeof JSON.parse(ls.stdout).conversation_id, 'string');

    proc.kill('SIGTERM');
    assert.equal(await new Promise((r) => proc.on('exit', r)), 0, log);
    assert.ok(!log.includes(KEY));
  });

  test('parley/server: the embedded core runs a conversation end to end', async () => {
    const local = await startScriptedLlm([
      { text: 'Writing it.', toolCalls: [{ name: 'terminal', arguments: { command: 'printf hi > hello.txt && cat hello.txt' } }] },
      { toolCalls: [{ name: 'finish', arguments: { message: 'hello.txt written' } }] },
    ]);
    try {
      const dataDir = tempDir();
      const r = await execFile(process.execPath, ['out/embedded.js', dataDir, local.url], { cwd: project, timeout: 60_000, env: env() });
      const got = JSON.parse(r.stdout.trim().split('\n').at(-1)!);
      assert.equal(got.status, 'finished');
      assert.deepEqual(
        got.seqs,
        Array.from({ length: got.last_seq }, (_, i) => i + 1),
      );
      assert.ok(got.kinds.includes('ObservationEvent') && got.kinds.includes('ActionEvent'));
      assert.equal(got.file, 'hi');
      assert.equal(local.requests.length, 2);
    } finally {
      await local.close();
    }
  });
});
