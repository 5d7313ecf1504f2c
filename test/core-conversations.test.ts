/**
 * `Conversations` built in the test, without a daemon: a real SQLite store in a temp DATA_DIR, the
 * real event log and settings; nothing faked. Its rules: a status change is one commit with its
 * event, data is merge-patched and kept across a reopen, and a restart pays its debts (every tool
 * call left unanswered gets an error answer, then the conversation is in error).
 */
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { after, describe, test } from 'node:test';
import pino from 'pino';
import { Conversations } from '../src/conversation/conversations.js';
import { EventBus } from '../src/events/bus.js';
import { EventLog } from '../src/events/log.js';
import { SecretBox } from '../src/secrets/crypto.js';
import { Redactor } from '../src/secrets/redact.js';
import { Settings } from '../src/secrets/settings.js';
import { SqliteStore } from '../src/store/sqlite.js';
import { tempDir } from './support/daemon.js';
import { idleLiveParts } from './support/core-parts.js';

const log = pino({ level: 'silent' });
const dirs: string[] = [];
after(() => {
  for (const d of dirs) fs.rmSync(d, { recursive: true, force: true });
});

/** A data directory of its own, removed after the file's tests. */
function newDir(): string {
  const dir = tempDir();
  dirs.push(dir);
  return dir;
}

/** The parts as the composition root wires them, on `dir`. */
function open(dir: string, limits: { count?: number } = {}) {
  const redactor = new Redactor();
  const bus = new EventBus();
  const store = new SqliteStore(dir);
  const events = new EventLog(store, bus, redactor, 256 * 1024);
  const settings = new Settings(store, SecretBox.open(dir, 'k'.repeat(32)), redactor, log);
  const made: Parameters<typeof idleLiveParts>[2] = {};
  const conversations = new Conversations(store, events, settings, redactor, idleLiveParts(events, dir, made), undefined, undefined, limits);
  store.onCommit((id, evs) => events.committed(id, evs));
  store.onCommit((id, evs) => conversations.committed(id, evs));
  return { store, events, conversations, builtins: made.builtins! };
}

const now = () => new Date().toISOString();
const record = (id: string) => ({ id, title: null, created_at: now(), updated_at: now(), execution_status: 'idle', data: { selected_repository: 'acme/app' } });
const action = (callId: string) => ({
  kind: 'ActionEvent' as const,
  source: 'agent' as const,
  tool_name: 'terminal',
  tool_call_id: callId,
  llm_response_id: 'r1',
  thought: [],
  action: null,
  tool_call: { id: callId, name: 'terminal', arguments: '{}', origin: 'completion' as const },
});

describe('Conversations (no daemon)', { timeout: 180_000 }, () => {
  test('current() answers without a store read only what is loaded here, the same object require() gives', async () => {
    const dir = newDir();
    let parts = open(dir);
    const id = crypto.randomUUID();
    await parts.conversations.create(record(id));
    assert.ok(parts.conversations.current(id), 'a created conversation is loaded');
    await parts.store.close();
    parts = open(dir);
    assert.equal(parts.conversations.current(id), undefined, 'after a reopen it is not loaded yet');
    assert.equal(parts.conversations.current(crypto.randomUUID()), undefined, 'an unknown id');
    const loaded = await parts.conversations.require(id);
    assert.equal(parts.conversations.current(id), loaded);
    await parts.conversations.remove(id);
    assert.equal(parts.conversations.current(id), undefined, 'a removed conversation');
    await parts.store.close();
  });

  test('a status change is committed with its event; the stored status and a reopened store agree', async () => {
    const dir = newDir();
    let parts = open(dir);
    const id = crypto.randomUUID();
    await parts.conversations.create(record(id));
    await parts.conversations.setStatus(id, 'running');
    await parts.conversations.setStatus(id, 'running'); // no second event for the same status
    await parts.conversations.setStatus(id, 'finished');
    const evs = await parts.events.after(id, 0);
    assert.deepEqual(
      evs.filter((e) => e.kind === 'ConversationStateUpdateEvent').map((e) => (e as { value: unknown }).value),
      ['running', 'finished'],
    );
    assert.equal(parts.conversations.status(id), 'finished');
    await parts.store.close();
    parts = open(dir);
    assert.equal((await parts.store.getConversation(id))?.execution_status, 'finished');
    await parts.store.close();
  });

  test('over the resident limit, a conversation still being prepared stays loaded; once prepared it goes, a run request left in the store or not', async () => {
    const parts = open(newDir(), { count: 1 });
    const make = async (data: Record<string, unknown>) => {
      const id = crypto.randomUUID();
      await parts.conversations.create({ ...record(id), data: { ...record(id).data, ...data } });
      return id;
    };
    const preparing = await make({ setup: { phase: 'cloning' }, run_requested: true });
    const ended = await make({ setup: { phase: 'ready' }, run_requested: true });
    const failed = await make({ setup: { phase: 'error', detail: 'not found' }, run_requested: true });
    await make({});
    assert.ok(parts.conversations.loaded(preparing), 'a preparation under way keeps its record');
    assert.equal(parts.conversations.loaded(ended), undefined, 'a stale run request after ready holds nothing');
    assert.equal(parts.conversations.loaded(failed), undefined, 'nor after a failed preparation');
    await parts.store.close();
  });

  test('past the resident limit, a conversation whose shell runs stays loaded (the one object its close reaches); once the shell ends it can go', async () => {
    const dir = newDir();
    const parts = open(dir, { count: 1 });
    const make = async () => {
      const id = crypto.randomUUID();
      await parts.conversations.create(record(id));
      return id;
    };
    const withShell = await make();
    const ctx = {
      conversationId: withShell,
      workspaceDir: path.join(dir, 'ws'),
      signal: new AbortController().signal,
      env: {},
      redact: (t: string) => t,
    };
    const obs = await parts.builtins.terminal.execute(parts.builtins.terminal.parameters.parse({ command: 'echo up' }), ctx);
    assert.match(JSON.stringify(obs.content), /up/);
    const object = parts.conversations.loaded(withShell);
    await make();
    await make();
    assert.equal(parts.conversations.loaded(withShell), object, 'its shell holds it');
    await parts.builtins.shells.close(withShell);
    await make();
    assert.equal(parts.conversations.loaded(withShell), undefined, 'nothing holds it any more');
    await parts.store.close();
  });

  test('data is merge-patched and kept across a reopen', async () => {
    const dir = newDir();
    let parts = open(dir);
    const id = crypto.randomUUID();
    await parts.conversations.create(record(id));
    await parts.conversations.updateData(id, { branch: 'feature' });
    await parts.conversations.updateData(id, { branch: 'main', setup: { phase: 'ready' } });
    await parts.store.close();
    parts = open(dir);
    assert.deepEqual((await parts.store.getConversation(id))?.data, { selected_repository: 'acme/app', branch: 'main', setup: { phase: 'ready' } });
    await parts.store.close();
  });

  test('on restart, unanswered tool calls get errors in call order, before DaemonRestarted; answered ones and other conversations are untouched', async () => {
    const dir = newDir();
    let parts = open(dir);
    const running = crypto.randomUUID();
    const idle = crypto.randomUUID();
    await parts.conversations.create(record(running));
    await parts.conversations.create(record(idle));
    await parts.conversations.setStatus(running, 'running');
    await parts.events.appendMany(running, [action('call-a'), action('call-b'), action('call-c')]);
    await parts.events.append(running, { kind: 'AgentErrorEvent', source: 'environment', tool_name: 'terminal', tool_call_id: 'call-a', error: 'failed' });
    await parts.store.close(); // the daemon died here

    parts = open(dir);
    await parts.conversations.recoverInterrupted(log);
    const evs = await parts.events.after(running, 0);
    const tail = evs
      .slice(-4)
      .map((e) => `${e.kind} ${(e as { tool_call_id?: string }).tool_call_id ?? (e as { code?: string }).code ?? (e as { value?: string }).value}`);
    assert.deepEqual(tail, [
      'AgentErrorEvent call-b',
      'AgentErrorEvent call-c',
      'ConversationErrorEvent DaemonRestarted',
      'ConversationStateUpdateEvent error',
    ]);
    assert.equal(evs.filter((e) => (e as { tool_call_id?: string }).tool_call_id === 'call-a').length, 2, 'call-a: its action and its one answer');
    assert.equal((await parts.events.after(idle, 0)).length, 0);
    // paid once: the conversation is in error now, a second start adds nothing
    await parts.conversations.recoverInterrupted(log);
    assert.equal((await parts.events.after(running, 0)).length, evs.length);
    await parts.store.close();
  });
});
