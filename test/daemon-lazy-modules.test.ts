/**
 * What the built daemon (dist/daemon.cjs, as `npm start` runs it) evaluates before its first turn:
 * none of the packages it loads on first use (the AI SDK, the MCP SDK, tRPC, NATS, PostgreSQL's
 * client). Each is a large share of the heap of an idle daemon once evaluated, and each stays out
 * of the bundle (its source would be held in every daemon's heap with the bundle's); a static
 * import of one from a module the start evaluates would load it again, unnoticed by every other test.
 *
 * How it sees: a copy of the bundle whose esbuild module wrappers record each module's name (its
 * source path) when first evaluated, and whose require records each package left out of the bundle
 * when first required (scripts/bench-memory.ts `--modules` measures with the same copy), run as
 * dist/main.mjs runs the bundle. The list is read once the daemon listens and its
 * sandbox probe has decided; again after a first turn (a tool call, then a text answer) against an
 * OpenAI-compatible server, which the project's own Chat Completions client streams: that turn
 * evaluates the client (a copy that recorded nothing would otherwise pass) and still none of the
 * AI SDK; and again after a turn of a model only the AI SDK serves (Anthropic's), which evaluates
 * the SDK and that one provider's package, not the others.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { ensureBuilt, freePort, ROOT, removeDir, tempDir, waitFor } from './support/daemon.js';
import { instrumentedBundle } from './support/module-probe.js';
import { startScriptedAnthropic, startScriptedLlm, type ScriptedLlm } from './support/scripted-llm.js';

/** Packages the daemon evaluates on first use only (as the copy names them: `node_modules/<package>/…`). */
const ON_FIRST_USE = [
  /^node_modules\/ai\//,
  /^node_modules\/@ai-sdk\//,
  /^node_modules\/@modelcontextprotocol\//,
  /^node_modules\/@trpc\//,
  /^node_modules\/@nats-io\//,
  /^node_modules\/pg\//,
];

/** The AI SDK's packages (the first two of ON_FIRST_USE). */
const AI_SDK = ON_FIRST_USE.slice(0, 2);
/** The module of the own Chat Completions client, which streams an OpenAI-compatible server's turns. */
const OWN_CLIENT = 'src/llm/chat-completions.ts';

let llm: ScriptedLlm;
let anthropic: ScriptedLlm;
let dir: string;
before(async () => {
  await ensureBuilt();
  llm = await startScriptedLlm();
  anthropic = await startScriptedAnthropic();
  dir = tempDir('parley-lazy-modules-');
});
after(async () => {
  await llm?.close();
  await anthropic?.close();
  if (dir) removeDir(dir);
});

test('the start evaluates none of the packages loaded on first use; a turn evaluates the AI SDK only for a model it serves', async () => {
  const runner = instrumentedBundle(path.join(ROOT, 'dist'), dir);
  // each package is left out of the bundle (required by name on first use, which the copy records)
  const bundled = [...fs.readFileSync(path.join(ROOT, 'dist', 'daemon.cjs'), 'utf8').matchAll(/__(?:esm|commonJS)\(\{"([^"]+)"/g)].map((m) => m[1]!);
  assert.ok(bundled.length > 100, `the bundle's modules are seen: ${bundled.length}`);
  for (const pkg of ON_FIRST_USE) {
    const inside = bundled.filter((m) => pkg.test(m));
    assert.deepEqual(inside, [], `${pkg} is left out of the bundle`);
  }
  const port = await freePort();
  const dataDir = path.join(dir, 'data');
  const proc = spawn(process.execPath, [runner], {
    env: {
      PATH: process.env.PATH ?? '/usr/bin:/bin',
      HOME: dir,
      PORT: String(port),
      DATA_DIR: dataDir,
      LOG_LEVEL: 'warn',
      SANDBOX: 'none',
      LLM_MODEL: 'openai/scripted',
      LLM_BASE_URL: llm.url,
      LLM_API_KEY: 'sk-test',
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const lines: string[] = [];
  let partial = '';
  const feed = (c: Buffer) => {
    const l = (partial + c.toString('utf8')).split('\n');
    partial = l.pop()!;
    lines.push(...l);
  };
  proc.stdout.on('data', feed);
  proc.stderr.on('data', feed);
  const exited = new Promise<void>((r) => proc.once('exit', () => r()));
  const base = `http://127.0.0.1:${port}`;
  /** The names of the modules evaluated so far. */
  const evaluated = async (): Promise<string[]> => {
    const at = lines.length;
    proc.kill('SIGUSR2');
    const line = await waitFor(() => lines.slice(at).find((l) => l.startsWith('parley-modules ')), 'the list of evaluated modules', 30_000);
    return (JSON.parse(line!.slice('parley-modules '.length)) as { name: string }[]).map((m) => m.name);
  };
  try {
    await waitFor(
      async () => {
        if (proc.exitCode !== null) throw new Error(`the daemon exited with ${proc.exitCode}:\n${lines.join('\n')}`);
        const r = await fetch(`${base}/server_info`).catch(() => null);
        return r?.status === 200 && ((await r.json()) as { sandbox?: { mode?: string } }).sandbox?.mode !== 'probing';
      },
      'the daemon to listen and its sandbox probe to decide',
      90_000,
    );
    const atStart = await evaluated();
    assert.ok(
      atStart.some((m) => m.startsWith('src/')),
      `the project's modules are seen: ${atStart.slice(0, 5).join(' ')}`,
    );
    for (const pkg of ON_FIRST_USE) {
      const early = atStart.filter((m) => pkg.test(m));
      assert.deepEqual(early, [], `evaluated by the start: ${early.join(' ')}`);
    }

    assert.ok(!atStart.includes(OWN_CLIENT), `${OWN_CLIENT} is not evaluated by the start`);

    const id = (
      (await (await fetch(`${base}/api/conversations`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' })).json()) as {
        conversation_id: string;
      }
    ).conversation_id;
    /** Sends a message and waits for the run it starts to finish. */
    const turn = async (text: string) => {
      const sent = await fetch(`${base}/api/conversations/${id}/events`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ role: 'user', content: [{ type: 'text', text }], run: true }),
      });
      assert.equal(sent.status, 200);
      await waitFor(
        async () => {
          const r = await fetch(`${base}/api/conversations/${id}`);
          return ((await r.json()) as { execution_status?: string }).execution_status === 'finished';
        },
        'the turn to finish',
        90_000,
      );
    };

    // a tool step and a text step through the own client
    llm.push({ toolCalls: [{ name: 'terminal', arguments: { command: 'echo hello' } }] }, { text: 'hello' });
    await turn('say hello');
    assert.equal(llm.requests.length, 2, 'both steps reached the OpenAI-compatible server');
    const byTurn = await evaluated();
    assert.ok(byTurn.includes(OWN_CLIENT), `the first turn evaluated ${OWN_CLIENT} (the copy records what it evaluates)`);
    for (const pkg of AI_SDK) {
      const sdk = byTurn.filter((m) => pkg.test(m));
      assert.deepEqual(sdk, [], `evaluated by a turn of the own client: ${sdk.join(' ')}`);
    }

    // a model only the AI SDK serves: the SDK and that model's provider package load then
    const switched = await fetch(`${base}/api/conversations/${id}/switch_llm`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ llm: { model: 'anthropic/claude-scripted', base_url: anthropic.url, api_key: 'sk-ant-test' } }),
    });
    assert.equal(switched.status, 200, await switched.text());
    anthropic.push({ text: 'hello again' });
    await turn('once more');
    assert.equal(anthropic.requests.length, 1, 'the step reached the Anthropic server');
    const bySdkTurn = await evaluated();
    assert.ok(
      bySdkTurn.some((m) => /^node_modules\/ai\//.test(m)),
      'a turn of an AI SDK model evaluated the AI SDK',
    );
    assert.ok(
      bySdkTurn.some((m) => m.startsWith('node_modules/@ai-sdk/anthropic/')),
      'a turn of an Anthropic model evaluated its provider package',
    );
    const others = bySdkTurn.filter((m) => /^node_modules\/@ai-sdk\/openai(-compatible)?\//.test(m));
    assert.deepEqual(others, [], "a turn of an Anthropic model evaluated no other provider's package");
  } finally {
    proc.kill('SIGTERM');
    await exited;
  }
});
