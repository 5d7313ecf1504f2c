/**
 * A conversation record's data (src/conversation/record-data.ts), without a daemon: a real SQLite
 * store in a temp DATA_DIR, the real event log, settings, Conversations and service. The run loop
 * and the workspace preparation are not under test: a runtime that only counts its starts and a
 * preparer that prepares nothing stand in for them.
 *
 * Its rules: every key the daemon's writers put in a record is of its schema's shape (a reload
 * drops and reports nothing); a record with a malformed key still loads, that key left out and
 * reported once, and kept in the store when the record is written back (as is a key this version
 * does not know); state updates are written and read typed.
 */
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import { Writable } from 'node:stream';
import { after, describe, test } from 'node:test';
import pino from 'pino';
import { recordUsage } from '../src/agent/conversation-data.js';
import { setConversationSecrets, startConversation, updateConversation } from '../src/conversation/agent-server.js';
import { switchProfile } from '../src/conversation/agent-server-features.js';
import { Conversations } from '../src/conversation/conversations.js';
import { parseRecordData } from '../src/conversation/record-data.js';
import { ConversationService } from '../src/conversation/service.js';
import type { ConversationPreparer, ConversationRuntime } from '../src/conversation/runtime.js';
import { EventBus } from '../src/events/bus.js';
import { EventLog } from '../src/events/log.js';
import { stateUpdate, stateUpdateValue, type ParleyEvent } from '../src/events/schema.js';
import { SecretBox } from '../src/secrets/crypto.js';
import { Redactor } from '../src/secrets/redact.js';
import { Settings } from '../src/secrets/settings.js';
import { SqliteStore } from '../src/store/sqlite.js';
import { idleLiveParts } from './support/core-parts.js';
import { tempDir } from './support/daemon.js';

const dirs: string[] = [];
after(() => {
  for (const d of dirs) fs.rmSync(d, { recursive: true, force: true });
});

/** The parts as the composition root wires them, on a new DATA_DIR; `warnings` collects what Conversations reports. */
function open(dir = tempDir()) {
  dirs.push(dir);
  const warnings: { conversation_id?: string; key?: string; msg: string }[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      for (const line of chunk.toString('utf8').split('\n')) if (line) warnings.push(JSON.parse(line));
      done();
    },
  });
  const log = pino({ level: 'warn' }, sink);
  const redactor = new Redactor();
  const store = new SqliteStore(dir);
  const events = new EventLog(store, new EventBus(), redactor, 256 * 1024);
  const settings = new Settings(store, SecretBox.open(dir, 'k'.repeat(32)), redactor, pino({ level: 'silent' }));
  const conversations = new Conversations(store, events, settings, redactor, idleLiveParts(events, dir), undefined, undefined, {}, log);
  store.onCommit((id, evs) => events.committed(id, evs));
  store.onCommit((id, evs) => conversations.committed(id, evs));
  const starts: string[] = [];
  const runtime: ConversationRuntime = {
    start: (conv) => (starts.push(conv.id), true),
    messageArrived: () => false,
    pause: () => {},
    confirm: async () => {},
    condenseNow: async () => false,
    ask: async () => '',
    judge: async () => ({ score: 0, complete: false, missing: '' }),
  };
  const preparer: ConversationPreparer = { prepare: async () => {} };
  const service = new ConversationService(conversations, events, settings, runtime, preparer, redactor, pino({ level: 'silent' }));
  return { dir, store, events, settings, conversations, service, redactor, warnings, starts };
}

const now = () => new Date().toISOString();

describe('conversation record data', { timeout: 60_000 }, () => {
  test('every key the writers put in a record is of its shape: a reload drops and reports nothing', async () => {
    const parts = open();
    const { conversations, service } = parts;
    // the create of the conversations API, every field it keeps
    const { conversation_id: id } = await service.createConversation({
      repository: 'acme/app',
      git_provider: 'gitlab',
      selected_branch: 'dev',
      image_urls: ['https://example.com/a.png'],
      suggested_task: { git_provider: 'gitlab', task_type: 'OPEN_ISSUE', repo: 'acme/app', issue_number: 7, title: 'Fix it' },
      create_microagent: { repo: 'acme/app', git_provider: 'gitlab', title: 'helper' },
      conversation_instructions: 'Be brief.',
      mcp_config: { shttp_servers: [{ url: 'https://mcp.example.com/mcp', api_key: 'k' }] },
    });
    // the agent-server create and operations, and what preparation and the run loop write
    const parts2 = { conversations, service, settings: parts.settings, redactor: parts.redactor, events: parts.events };
    const info = await startConversation(parts2, {
      agent: { llm: { model: 'gpt-4o', api_key: 'sk-test', base_url: 'https://llm.example.com/v1' } },
      workspace: { working_dir: '/home/me/project' },
      max_iterations: 50,
      stuck_detection: false,
      confirmation_policy: { kind: 'ConfirmRisky', confirm_unknown: true, threshold: 'HIGH' },
      secrets: { TOKEN: 'abc', OTHER: { value: 'def', description: 'x' } },
      tags: { team: 'core' },
    });
    const agentId = info.conversation_id;
    await setConversationSecrets(parts2, agentId, { MORE: 'ghi' });
    await service.updateAgentSettings(agentId, { confirmation_policy: { kind: 'AlwaysConfirm' }, security_analyzer: { kind: 'LLMSecurityAnalyzer' } });
    const profiles = { resolve: async () => ({ model: 'openai/p', base_url: 'https://llm.example.com/v1', api_key: 'sk-profile' }) };
    await switchProfile({ conversations, service, settings: parts.settings, profiles }, agentId, 'p');
    // what the goal loop and a fork write
    await conversations.updateData(agentId, {
      goal: { active: false, status: 'complete', iteration: 2, max_iterations: 10, objective: 'o', verdict: { score: 1, complete: true, missing: '' } },
      forked_from_conversation_id: id,
      forked_from_event_id: null,
    });
    await updateConversation(parts2, agentId, { tags: { team: 'edge' } });
    await recordUsage(conversations, await conversations.require(agentId), { inputTokens: 10, outputTokens: 5, cacheReadTokens: 2, cacheWriteTokens: 1 });
    await conversations.updateData(id, { branch: 'dev', setup: { phase: 'cloning', detail: 'acme/app' } });
    // a message while the preparation is under way asks for a run (kept on the record)
    await service.sendMessage(id, { role: 'user', content: [{ type: 'text', text: 'hi', cache_prompt: false }], run: true });
    await conversations.updateData(id, { setup: { phase: 'replaying' } });

    const rawById = new Map<string, unknown>();
    for (const cid of [id, agentId]) rawById.set(cid, (await parts.store.getConversation(cid))?.data);
    await parts.store.close();

    const reopened = open(parts.dir);
    for (const [cid, raw] of rawById) {
      const { data, malformed } = parseRecordData(raw);
      assert.deepEqual(malformed, [], `conversation ${cid}`);
      assert.deepEqual(data, raw, 'parsed as stored: nothing dropped, nothing changed');
      assert.ok(await reopened.conversations.load(cid));
    }
    assert.deepEqual(reopened.warnings, []);
    const conv = await reopened.conversations.require(id);
    assert.equal(conv.record.data.git_provider, 'gitlab');
    assert.equal(conv.record.data.run_requested, true);
    assert.deepEqual(conv.record.data.setup, { phase: 'replaying' });
    const agentConv = await reopened.conversations.require(agentId);
    assert.deepEqual(agentConv.record.data.confirmation_policy, { kind: 'AlwaysConfirm' });
    assert.deepEqual(agentConv.record.data.security_analyzer, { kind: 'LLMSecurityAnalyzer' });
    assert.equal(agentConv.record.data.llm?.profile, 'p');
    assert.equal(agentConv.record.data.goal?.status, 'complete');
    assert.deepEqual(Object.keys(agentConv.record.data.secrets_sealed ?? {}).sort(), ['MORE', 'OTHER', 'TOKEN']);
    assert.deepEqual(agentConv.record.data.usage, { prompt_tokens: 10, completion_tokens: 5, cache_read_tokens: 2, cache_write_tokens: 1 });
    await reopened.store.close();
  });

  test('a run asked for while preparing is taken once, by the one owner of the flag', async () => {
    const { conversations, service, store, starts } = open();
    const { conversation_id: id } = await service.createConversation({});
    const conv = await conversations.require(id);
    assert.equal(conv.record.data.run_requested, false, 'nothing asked at create');
    await service.run(id); // the setup is still pending: the run waits
    assert.deepEqual(starts, []);
    assert.equal(conversations.takeRunRequest(conv), true);
    assert.equal(conversations.takeRunRequest(conv), false);
    await store.close();
  });

  test('a record with malformed keys loads without them, each reported once, and keeps them (and unknown keys) in the store', async () => {
    const { conversations, store, warnings } = open();
    const id = crypto.randomUUID();
    const stored = {
      selected_repository: 42,
      setup: { phase: 'warming-up' },
      max_iterations: 'ten',
      confirmation_policy: { kind: 'AskTheOracle' },
      tags: { team: 'core' },
      from_a_later_version: { x: 1 },
    };
    await store.createConversation({ id, title: null, created_at: now(), updated_at: now(), execution_status: 'idle', data: stored });

    const conv = await conversations.require(id);
    assert.equal(conv.record.data.selected_repository, undefined);
    assert.equal(conv.record.data.setup, undefined);
    assert.equal(conv.record.data.max_iterations, undefined);
    assert.equal(conv.record.data.confirmation_policy, undefined);
    assert.deepEqual(conv.record.data.tags, { team: 'core' });
    const info = await conversations.get(id);
    assert.equal(info.selected_repository, null);
    assert.deepEqual(info.confirmation_policy, { kind: 'NeverConfirm' });
    assert.deepEqual(warnings.map((w) => w.key).sort(), ['confirmation_policy', 'max_iterations', 'selected_repository', 'setup']);
    assert.ok(warnings.every((w) => w.conversation_id === id));

    // read again (another page, a search): not reported twice
    await conversations.records(10);
    conversations.forget(id);
    await conversations.require(id);
    assert.equal(warnings.length, 4);

    // written back: the malformed and the unknown keys stay for the version that wrote them; a patch replaces one
    await conversations.updateData(id, { branch: 'main', max_iterations: 5 });
    assert.deepEqual((await store.getConversation(id))?.data, { ...stored, max_iterations: 5, branch: 'main' });
    assert.equal((await conversations.require(id)).record.data.max_iterations, 5);
    await store.close();
  });

  test('data that is not an object loads as empty; a stored policy in the client form is read in its kind form', async () => {
    const { conversations, store } = open();
    const broken = crypto.randomUUID();
    await store.createConversation({ id: broken, title: null, created_at: now(), updated_at: now(), execution_status: 'idle', data: null });
    assert.deepEqual((await conversations.require(broken)).record.data, {});
    assert.equal((await conversations.get(broken)).conversation_id, broken);
    assert.deepEqual(parseRecordData({ confirmation_policy: { type: 'risk_based' } }).data.confirmation_policy, {
      kind: 'ConfirmRisky',
      confirm_unknown: true,
      threshold: 'HIGH',
    });
    assert.deepEqual(parseRecordData([1, 2]), { data: {}, malformed: [] });
    await store.close();
  });

  test('state updates are written and read typed; another key or a value of another shape reads as none', async () => {
    const { conversations, service, events, store } = open();
    const { conversation_id: id } = await service.createConversation({});
    await conversations.setStatus(id, 'running');
    await events.append(id, stateUpdate('setup', { phase: 'cloning', detail: 'acme/app' }));
    await events.append(id, { kind: 'ConversationStateUpdateEvent', source: 'environment', key: 'execution_status', value: 'dancing' });
    const updates = (await events.after(id, 0)).filter((e) => e.kind === 'ConversationStateUpdateEvent');
    assert.deepEqual(
      updates.map((e) => stateUpdateValue(e, 'execution_status')),
      ['running', undefined, undefined],
    );
    assert.deepEqual(stateUpdateValue(updates[1]!, 'setup'), { phase: 'cloning', detail: 'acme/app' });
    const notOne: ParleyEvent = { kind: 'PauseEvent', id: 'x', timestamp: now(), source: 'user' };
    assert.equal(stateUpdateValue(notOne, 'execution_status'), undefined);
    // the shown status follows committed status events of the key's shape only
    assert.equal((await conversations.get(id)).execution_status, 'running');
    await store.close();
  });
});
