/**
 * `RemoteConversation.fork()` of OpenHands' own TypeScript client against a real daemon and the
 * scripted LLM: the fork has the source's events (all, or the branch up to an event), its settings,
 * the title, tags and metrics the request names, its skills when asked, and its own copy of the
 * workspace; the two are independent afterwards. The copy is attacked the way a hostile agent would:
 * links in the source pointing at a host canary, and a source that swaps a directory for such a link
 * while it is being forked (a hundred forks), judged from the host.
 */
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { startDaemon, waitFor, type DaemonHandle } from './support/daemon.js';
import { startScriptedLlm, type ScriptedLlm } from './support/scripted-llm.js';

// the client's ESM build calls require('ws') to open its socket (a client bug, worked around as test/openhands-client.test.ts does)
(globalThis as { require?: NodeJS.Require }).require = createRequire(import.meta.url);
const OH = await import('@openhands/typescript-client');
const { Agent, Conversation, Workspace } = OH;

const SESSION_KEY = 'fork-features-key-0123456';
const LLM_KEY = 'sk-FORK-CANARY-55555';
const SECRET = 'fork-secret-CANARY-66666';
const H = { 'x-session-api-key': SESSION_KEY };

let d: DaemonHandle;
let llm: ScriptedLlm;
let sandboxed = false;
/** A file on the host, outside every workspace, that no fork may copy. */
let canaryDir: string;
const CANARY = `host-canary-${crypto.randomUUID()}`;

before(async () => {
  llm = await startScriptedLlm([], { requireApiKey: LLM_KEY });
  d = await startDaemon({ SESSION_API_KEY: SESSION_KEY });
  sandboxed = (await d.req('GET', '/server_info')).body.sandbox?.mode === 'bwrap';
  canaryDir = fs.mkdtempSync(path.join(os.tmpdir(), 'fork-canary-'));
  fs.chmodSync(canaryDir, 0o755);
  fs.writeFileSync(path.join(canaryDir, 'canary.txt'), CANARY, { mode: 0o644 });
});
after(async () => {
  await d?.stop();
  await llm?.close();
  if (canaryDir) {
    assert.deepEqual(fs.readdirSync(canaryDir), ['canary.txt'], 'nothing was written next to the canary');
    assert.equal(fs.readFileSync(path.join(canaryDir, 'canary.txt'), 'utf8'), CANARY);
    fs.rmSync(canaryDir, { recursive: true, force: true });
  }
  if (d) assert.ok(!d.output.some((l) => l.includes(LLM_KEY) || l.includes(SECRET)), 'no key or secret in the log');
});

const agent = () => new Agent({ llm: { model: 'openai/forked', api_key: LLM_KEY, base_url: llm.url } as never });
const workspace = (dir: string) => new Workspace({ host: d.url, workingDir: dir, apiKey: SESSION_KEY });
type Conv = InstanceType<typeof Conversation>;
const hostWorkspace = (id: string) => path.join(d.dataDir, 'workspaces', id.replace(/-/g, ''));
const settled = (conv: Conv, s: string) => waitFor(async () => (await conv.state.refresh()).execution_status === s, s, 60_000);
const rejectsWith = (s: number, detail?: RegExp) => (e: any) => e.status === s && (!detail || detail.test(JSON.stringify(e.response)));
async function allEvents(conv: Conv): Promise<any[]> {
  const out: any[] = [];
  for (let page: string | undefined; ; ) {
    const r: any = await conv.state.events.search({ limit: 100, page_id: page } as never);
    out.push(...r.items);
    if (!r.next_page_id) return out;
    page = r.next_page_id;
  }
}
/** A command in the conversation's sandbox (the bash side channel). */
async function sh(id: string, command: string) {
  const r = await d.req('POST', '/api/bash/execute_bash_command', { command, conversation_id: id, timeout: 60 }, H);
  assert.equal(r.status, 200, r.text);
  return r.body as { exit_code: number; stdout: string; stderr: string };
}
/** Every regular file under a workspace on the host (links are not followed), with its content. */
function regularFiles(dir: string): { file: string; text: string }[] {
  const out: { file: string; text: string }[] = [];
  for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) out.push(...regularFiles(p));
    else if (e.isFile()) out.push({ file: p, text: fs.readFileSync(p, 'latin1') });
  }
  return out;
}
const messageTexts = (events: any[]) => events.filter((e) => e.kind === 'MessageEvent').map((e) => e.llm_message.content.map((c: any) => c.text).join(''));

describe('fork through the client', { timeout: 420_000 }, () => {
  test('the fork has the history, the settings, the title, tags and metrics asked for, its own workspace; the two are independent after', async (t) => {
    const source = new Conversation(agent(), workspace('/workspace/source'));
    t.after(() => source.close());
    await source.start();
    await source.updateSecrets({ FORK_TOKEN: SECRET });
    await source.setTitle('The source');
    await source.setConfirmationPolicy({ kind: 'NeverConfirm' } as never);
    llm.push(
      { toolCalls: [{ name: 'terminal', arguments: { command: 'echo from-source > src.txt && mkdir -p sub && echo nested > sub/n.txt' } }] },
      { toolCalls: [{ name: 'finish', arguments: { message: 'source work done' } }] },
    );
    await source.sendMessage('do the source work');
    await source.run();
    await settled(source, 'finished');
    const before: any = await source.state.refresh();
    const sourceEvents = await allEvents(source);

    const fork = await source.fork({ title: 'The fork', tags: { team: 'blue' }, reset_metrics: false } as never);
    t.after(() => fork.close());
    assert.notEqual(fork.id, source.id);
    const info: any = await fork.state.refresh();
    assert.equal(info.title, 'The fork');
    assert.deepEqual(info.tags, { team: 'blue' });
    assert.equal(info.execution_status, 'idle');
    assert.equal(info.forked_from_conversation_id, source.id);
    assert.equal(info.forked_from_event_id, null);
    assert.deepEqual(info.agent.llm, before.agent.llm, 'the same LLM (its key kept, masked)');
    assert.deepEqual(info.stats, before.stats, 'the metrics, as asked (reset_metrics: false)');
    assert.deepEqual(info.agent.agent_context.skills, []);

    // the history: the same events, new ids, references following
    const forkEvents = await allEvents(fork);
    const strip = (e: any) => {
      const { id: _i, seq: _s, action_id: _a, ...rest } = e;
      return rest;
    };
    assert.deepEqual(forkEvents.slice(0, sourceEvents.length).map(strip), sourceEvents.map(strip));
    assert.ok(
      forkEvents.every((e) => !sourceEvents.some((s) => s.id === e.id)),
      'every event has an id of its own',
    );
    const ids = new Set(forkEvents.map((e) => e.id));
    for (const o of forkEvents.filter((e) => e.kind === 'ObservationEvent')) assert.ok(ids.has(o.action_id), 'an observation names its action in the fork');
    assert.equal(forkEvents[forkEvents.length - 1].value, 'idle', 'the fork is idle');

    // its own copy of the workspace
    const [srcWs, forkWs] = [hostWorkspace(source.id), hostWorkspace(fork.id)];
    assert.equal(fs.readFileSync(path.join(forkWs, 'src.txt'), 'utf8'), 'from-source\n');
    assert.equal(fs.readFileSync(path.join(forkWs, 'sub', 'n.txt'), 'utf8'), 'nested\n');

    // independent: the fork runs with the source's history and its secret; what it does stays in it
    const n = llm.requests.length;
    llm.push(
      { toolCalls: [{ name: 'terminal', arguments: { command: 'echo "$FORK_TOKEN" | wc -c > fork-only.txt && echo changed > src.txt' } }] },
      { toolCalls: [{ name: 'finish', arguments: { message: 'fork work done' } }] },
    );
    await fork.sendMessage('now the fork work');
    await fork.run();
    await settled(fork, 'finished');
    assert.match(JSON.stringify(llm.requests[n]!.body.messages), /do the source work[\s\S]*source work done[\s\S]*now the fork work/);
    assert.equal(fs.readFileSync(path.join(forkWs, 'fork-only.txt'), 'utf8').trim(), String(SECRET.length + 1), "the source's secret is the fork's");
    assert.equal(fs.existsSync(path.join(srcWs, 'fork-only.txt')), false);
    assert.equal(fs.readFileSync(path.join(srcWs, 'src.txt'), 'utf8'), 'from-source\n');
    assert.equal((await allEvents(source)).length, sourceEvents.length, 'the source did not change');
    llm.push({ toolCalls: [{ name: 'terminal', arguments: { command: 'echo later > source-only.txt' } }] }, { text: 'ok' });
    await source.sendMessage('more source work');
    await source.run();
    await settled(source, 'finished');
    assert.equal(fs.existsSync(path.join(forkWs, 'source-only.txt')), false);
    assert.ok(!messageTexts(await allEvents(fork)).includes('more source work'));
    assert.equal((await source.state.refresh()).title, 'The source');
  });

  test('from_event_id: the branch up to that event; metrics reset by default; include_skills lists the skills; 404 and 409', async (t) => {
    const source = new Conversation(agent(), workspace('/workspace/branch'));
    t.after(() => source.close());
    await source.start();
    llm.push({ text: 'first answer' }, { text: 'second answer' });
    await source.sendMessage('first question');
    await source.run();
    await settled(source, 'finished');
    await source.sendMessage('second question');
    await source.run();
    await settled(source, 'finished');
    await sh(
      source.id,
      'mkdir -p .agents/skills/fork-skill && printf -- "---\\nname: fork-skill\\ndescription: A skill.\\n---\\nUse it.\\n" > ' +
        '.agents/skills/fork-skill/SKILL.md',
    );
    const events = await allEvents(source);
    const firstAnswer = events.find((e) => e.kind === 'MessageEvent' && e.source === 'agent');

    const branch = await source.fork({ from_event_id: firstAnswer.id } as never, { includeSkills: true });
    t.after(() => branch.close());
    const info: any = await branch.state.refresh();
    assert.equal(info.forked_from_event_id, firstAnswer.id);
    assert.equal(info.stats.usage_to_metrics.agent.accumulated_token_usage.prompt_tokens, 0, 'metrics start fresh');
    const copied = await allEvents(branch);
    assert.deepEqual(messageTexts(copied), ['first question', 'first answer']);
    const forked = await d.req('POST', `/api/conversations/${source.id}/fork?include_skills=true`, {}, H);
    assert.equal(forked.status, 201);
    assert.ok(
      forked.body.agent.agent_context.skills.some((s: any) => s.name === 'fork-skill'),
      'the skills, when asked',
    );
    assert.deepEqual((await d.req('POST', `/api/conversations/${source.id}/fork`, {}, H)).body.agent.agent_context.skills, []);

    await assert.rejects(source.fork({ from_event_id: 'no-such-event' } as never), rejectsWith(404, /no-such-event/));
    await assert.rejects(source.fork({ id: branch.id } as never), rejectsWith(409, /already exists/));
    const missing = '00000000-0000-4000-8000-00000000f00d';
    assert.equal((await d.req('POST', `/api/conversations/${missing}/fork`, {}, H)).status, 404);
  });
});

describe('attacks on the workspace copy, judged from the host', { timeout: 420_000 }, () => {
  test('links in the source to a host canary are copied as links: the fork holds no byte of the canary and its processes cannot read it', async (t) => {
    const source = new Conversation(agent(), workspace('/workspace/links'));
    t.after(() => source.close());
    await source.start();
    const canary = path.join(canaryDir, 'canary.txt');
    const made = await sh(source.id, `ln -s ${canary} leak && ln -s ${canaryDir} leakdir && ln -s / root && echo ok`);
    assert.equal(made.stdout, 'ok\n', made.stderr);
    const fork = await source.fork();
    t.after(() => fork.close());
    const ws = hostWorkspace(fork.id);
    for (const name of ['leak', 'leakdir', 'root']) assert.ok(fs.lstatSync(path.join(ws, name)).isSymbolicLink(), `${name} is a link in the fork`);
    assert.equal(fs.readlinkSync(path.join(ws, 'leak')), canary);
    assert.ok(!regularFiles(ws).some((f) => f.text.includes(CANARY)), 'no file of the fork holds the canary');
    if (sandboxed) {
      const read = await sh(fork.id, 'cat leak leakdir/canary.txt 2>&1; echo "exit=$?"');
      assert.ok(!read.stdout.includes(CANARY), `the fork's processes cannot read it: ${read.stdout}`);
    }
  });

  test('a race: the source swaps a directory for a link to the canary while it is forked (100 forks); no fork holds the canary', async (t) => {
    if (!sandboxed) return t.skip('the sandbox is off on this machine (bwrap unavailable): the copy runs as the daemon, and so does every agent');
    const source = new Conversation(agent(), workspace('/workspace/race'));
    t.after(() => source.close());
    await source.start();
    const swap = `for i in $(seq 1 200000); do rm -rf d; ln -s ${canaryDir} d; rm -f d; mkdir d; echo inside > d/canary.txt; done`;
    const started = await d.req('POST', '/api/bash/start_bash_command', { command: swap, conversation_id: source.id, timeout: 600 }, H);
    assert.equal(started.status, 200, started.text);
    let copiedInside = 0;
    for (let i = 0; i < 100; i++) {
      const r = await d.req('POST', `/api/conversations/${source.id}/fork`, {}, H);
      assert.equal(r.status, 201, r.text);
      const ws = hostWorkspace(r.body.id);
      const files = regularFiles(ws);
      assert.ok(!files.some((f) => f.text.includes(CANARY)), `fork ${i} holds no canary`);
      if (files.some((f) => f.file.endsWith(path.join('d', 'canary.txt')))) copiedInside++;
      assert.equal((await d.req('DELETE', `/api/conversations/${r.body.id}`, undefined, H)).status, 200);
    }
    assert.ok(copiedInside > 0, 'the directory was copied at least once while it was one');
    await d.req('POST', `/api/conversations/${source.id}/interrupt`, {}, H);
  });
});
