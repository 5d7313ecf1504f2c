/**
 * Workspaces follow their conversation (KEEP_WORKSPACES), a context-window error condenses and
 * retries once, and the custom secrets API — all through a real daemon and a scripted LLM.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { allEvents, waitStatus } from './support/conversation-api.js';
import { startDaemon, waitFor, type DaemonHandle } from './support/daemon.js';
import { startScriptedLlm, type ScriptedLlm } from './support/scripted-llm.js';

let llm: ScriptedLlm;
const daemons: DaemonHandle[] = [];
before(async () => {
  llm = await startScriptedLlm();
});
after(async () => {
  for (const d of daemons) await d.stop();
  await llm.close();
});
async function daemon(env: Record<string, string> = {}) {
  const d = await startDaemon({ LLM_MODEL: 'openai/scripted', LLM_BASE_URL: llm.url, LLM_API_KEY: 'k-extras', ...env });
  daemons.push(d);
  return d;
}
const preparationDone = (d: DaemonHandle, id: string) =>
  waitFor(async () => (await d.req('GET', `/api/conversations/${id}`)).body.setup?.phase === 'ready', 'the preparation done');
const wsDir = (d: DaemonHandle, id: string) => path.join(d.dataDir, 'workspaces', id.replace(/-/g, ''));

describe('workspaces', () => {
  test('created on first use, removed with the conversation; kept with KEEP_WORKSPACES=1', async () => {
    const d = await daemon();
    const id = (await d.req('POST', '/api/conversations', {})).body.conversation_id;
    // the preparation is over: nothing makes a directory unless something runs
    await preparationDone(d, id);
    const dir = wsDir(d, id);
    assert.ok(!fs.existsSync(dir), 'no directory for a conversation that ran nothing');
    llm.push({ toolCalls: [{ name: 'terminal', arguments: { command: 'echo x > work.txt' } }] }, { text: 'made' });
    await d.req('POST', `/api/conversations/${id}/events`, { content: [{ text: 'make it' }], run: true });
    await waitStatus(d.req, id, 'finished');
    assert.equal(fs.readFileSync(path.join(dir, 'work.txt'), 'utf8'), 'x\n', 'the first command made the workspace');
    assert.equal((await d.req('DELETE', `/api/conversations/${id}`)).status, 200);
    assert.ok(!fs.existsSync(dir), 'workspace removed');

    const k = await daemon({ KEEP_WORKSPACES: '1' });
    const id2 = (await k.req('POST', '/api/conversations', {})).body.conversation_id;
    await preparationDone(k, id2);
    fs.mkdirSync(wsDir(k, id2), { recursive: true });
    fs.writeFileSync(path.join(wsDir(k, id2), 'keep.txt'), 'y');
    assert.equal((await k.req('DELETE', `/api/conversations/${id2}`)).status, 200);
    assert.equal(fs.readFileSync(path.join(wsDir(k, id2), 'keep.txt'), 'utf8'), 'y');
  });
});

describe('context window', () => {
  const contextError = {
    error: {
      status: 400,
      body: {
        error: {
          message: "This model's maximum context length is 4096 tokens. However, your messages resulted in 9000 tokens.",
          type: 'invalid_request_error',
          code: 'context_length_exceeded',
        },
      },
    },
  };
  test('a context-window error condenses the history and retries once', async () => {
    const d = await daemon();
    const id = (await d.req('POST', '/api/conversations', {})).body.conversation_id;
    for (let i = 0; i < 5; i++) await d.req('POST', `/api/conversations/${id}/events`, { content: [{ text: `earlier note ${i}` }] });
    llm.clear();
    llm.push(contextError, { text: 'SUMMARY: five notes' }, { text: 'answered after condensing' });
    await d.req('POST', `/api/conversations/${id}/run`);
    await waitStatus(d.req, id, 'finished');
    const evs = await allEvents(d.req, id);
    const cond = evs.find((e) => e.kind === 'Condensation');
    assert.ok(cond, 'condensed');
    assert.equal(cond.summary, 'SUMMARY: five notes');
    assert.equal(evs.filter((e) => e.kind === 'MessageEvent' && e.source === 'user').length, 5, 'nothing deleted from the log');
    const last = JSON.stringify(llm.requests[llm.requests.length - 1]!.body.messages);
    assert.ok(last.includes('SUMMARY: five notes') && !last.includes('earlier note 0'));
  });
  test('a second context error after condensing ends the run with a typed error; it can run again', async () => {
    const d = await daemon();
    const id = (await d.req('POST', '/api/conversations', {})).body.conversation_id;
    for (let i = 0; i < 5; i++) await d.req('POST', `/api/conversations/${id}/events`, { content: [{ text: `note ${i}` }] });
    llm.clear();
    llm.push(contextError, { text: 'SUMMARY' }, contextError);
    await d.req('POST', `/api/conversations/${id}/run`);
    await waitStatus(d.req, id, 'error');
    const err = (await allEvents(d.req, id)).find((e) => e.kind === 'ConversationErrorEvent');
    assert.equal(err.code, 'ContextWindowExceeded');
    assert.match(err.detail, /context length/);
    llm.push({ text: 'fine now' });
    assert.equal((await d.req('POST', `/api/conversations/${id}/run`)).status, 200);
    await waitStatus(d.req, id, 'finished');
  });
});

describe('custom secrets', () => {
  test('create 201, duplicate 409, list without values, update, delete, 404s, name validation; exported to the shell and masked', async () => {
    const d = await daemon();
    const V1 = 'first-SECRET-value-123';
    const V2 = 'second-SECRET-value-456';
    assert.equal((await d.req('POST', '/api/secrets', { name: 'API_TOKEN', value: V1, description: 'for the API' })).status, 201);
    assert.equal((await d.req('POST', '/api/secrets', { name: 'API_TOKEN', value: 'x1234567' })).status, 409);
    for (const bad of [
      { name: '1BAD', value: 'v' },
      { name: 'has space', value: 'v' },
      { name: 'OK_NAME', value: '' },
      { name: 'OK', value: 'v', extra: 1 },
    ]) {
      const r = await d.req('POST', '/api/secrets', bad);
      assert.equal(r.status, 422, JSON.stringify(bad));
    }
    const list = await d.req('GET', '/api/secrets');
    assert.deepEqual(list.body.secrets, [{ name: 'API_TOKEN', description: 'for the API' }]);
    assert.ok(!list.text.includes(V1), 'no value in the list');
    assert.equal((await d.req('PUT', '/api/secrets/API_TOKEN', { value: V2 })).status, 200);
    assert.deepEqual((await d.req('GET', '/api/secrets')).body.secrets[0], { name: 'API_TOKEN', description: 'for the API' }, 'description kept');
    assert.equal((await d.req('PUT', '/api/secrets/NOPE', { value: 'abcdefgh' })).status, 404);
    assert.equal((await d.req('DELETE', '/api/secrets/NOPE')).status, 404);

    llm.clear();
    llm.push({ toolCalls: [{ name: 'terminal', arguments: { command: 'echo "[$API_TOKEN]"; echo ${#API_TOKEN}' } }] }, { text: 'ok' });
    const id = (await d.req('POST', '/api/conversations', { initial_user_msg: 'print it' })).body.conversation_id;
    await waitStatus(d.req, id, 'finished');
    const obs = (await allEvents(d.req, id)).find((e) => e.kind === 'ObservationEvent');
    assert.match(obs.observation.content[0].text, /\[<secret_hidden>\]/);
    assert.match(obs.observation.content[0].text, new RegExp(`\\b${V2.length}\\b`), 'the shell had the updated value');
    assert.equal((await d.req('DELETE', '/api/secrets/API_TOKEN')).status, 200);
    assert.deepEqual((await d.req('GET', '/api/secrets')).body.secrets, []);
    const all = [d.output.join('\n'), JSON.stringify(llm.requests.map((r) => r.body)), JSON.stringify(await allEvents(d.req, id))].join('\n');
    assert.ok(!all.includes(V1) && !all.includes(V2));
  });
});
