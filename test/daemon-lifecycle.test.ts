/** Durability across kill -9, lazy start, SIGTERM drain, configuration errors, the typed tRPC client. */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { describe, test } from 'node:test';
import Database from 'better-sqlite3';
import { createParleyClient } from '../src/client.js';
import { journalFile } from '../src/store/journal.js';
import { daemonArgs, ROOT, startDaemon, tempDir, waitFor } from './support/daemon.js';
import { connect } from './support/ws-client.js';

describe('durability', () => {
  test('a 200 means committed: kill -9 right after, restart, same events with the same seq; tokens survive', async () => {
    const dir = tempDir();
    const d1 = await startDaemon({}, dir);
    const id = (await d1.req('POST', '/api/conversations', {})).body.conversation_id;
    await d1.req('POST', '/api/add-git-providers', { provider_tokens: { github: { token: 'ghp_SURVIVES_RESTART', host: 'git.example.com' } } });
    const results = await Promise.all(
      Array.from({ length: 50 }, (_, i) => d1.req('POST', `/api/conversations/${id}/events`, { content: [{ text: `m${i}` }] })),
    );
    assert.ok(results.every((r) => r.status === 200));
    d1.proc.kill('SIGKILL');
    await d1.exited;
    const d2 = await startDaemon({}, dir);
    const s = await d2.req('GET', `/api/conversations/${id}/events/search?limit=100&kind=MessageEvent`);
    assert.equal(s.status, 200);
    const texts = s.body.items.map((e: any) => e.llm_message.content[0].text).sort();
    assert.deepEqual(texts, Array.from({ length: 50 }, (_, i) => `m${i}`).sort());
    const seqs = s.body.items.map((e: any) => e.seq);
    assert.deepEqual(
      seqs,
      [...seqs].sort((a: number, b: number) => a - b),
    );
    const allSeqs = (await d2.req('GET', `/api/conversations/${id}/events/search?limit=100`)).body.items.map((e: any) => e.seq);
    assert.deepEqual(
      allSeqs,
      Array.from({ length: allSeqs.length }, (_, i) => i + 1),
      'gap-free from 1',
    );
    // the next append continues the sequence
    await d2.req('POST', `/api/conversations/${id}/events`, { content: [{ text: 'after' }] });
    assert.equal((await d2.req('GET', `/api/conversations/${id}/events/count?kind=MessageEvent`)).body, 51);
    // the token is still there: a host-only update keeps it (the redactor knows it after restart)
    const dbText = fs.readFileSync(path.join(dir, 'parley.db')).toString('latin1');
    assert.ok(!dbText.includes('ghp_SURVIVES_RESTART'));
    await d2.stop();
  });
  test('a journal that cannot be written (disk full): 503 with the reason, nothing published, the daemon stays up, earlier events kept', async () => {
    const dir = tempDir();
    const d1 = await startDaemon({}, dir);
    const id = (await d1.req('POST', '/api/conversations', {})).body.conversation_id;
    assert.equal((await d1.req('POST', `/api/conversations/${id}/events`, { content: [{ text: 'before' }] })).status, 200);
    await d1.stop();
    // the next start writes generation gen + 1: make that file /dev/full
    const db = new Database(path.join(dir, 'parley.db'), { readonly: true });
    const { gen } = db.prepare('SELECT gen FROM journal_state').get() as { gen: number };
    db.close();
    fs.symlinkSync('/dev/full', journalFile(path.join(dir, 'journal'), gen + 1));
    // and no reserve to move to (test/disk-full.test.ts has the reserve)
    const d2 = await startDaemon({ DISK_RESERVE_MB: '0' }, dir);
    const ws = connect(`ws://127.0.0.1:${d2.port}/sockets/events/${id}`);
    await ws.next((f) => f.key === 'full_state', 'the snapshot');
    const r = await d2.req('POST', `/api/conversations/${id}/events`, { content: [{ text: 'no room' }] });
    assert.equal(r.status, 503);
    assert.match(r.body.detail, /event log write failed: ENOSPC/);
    assert.equal((await d2.req('GET', '/alive')).status, 200);
    const texts = (await d2.req('GET', `/api/conversations/${id}/events/search?kind=MessageEvent`)).body.items.map((e: any) => e.llm_message.content[0].text);
    assert.deepEqual(texts, ['before']);
    assert.ok(!ws.frames.some((e: any) => e.kind === 'MessageEvent' && e.llm_message?.content?.[0]?.text === 'no room'), 'nothing was published');
    ws.close();
    await d2.stop();
  });
  test('start-up is lazy: many stored conversations do not slow it down', async () => {
    const dir = tempDir();
    const d1 = await startDaemon({ LOG_LEVEL: 'info' }, dir);
    for (let i = 0; i < 200; i++) {
      const id = (await d1.req('POST', '/api/conversations', {})).body.conversation_id;
      await d1.req('POST', `/api/conversations/${id}/events`, { content: [{ text: 'x' }] });
    }
    await d1.stop();
    const d2 = await startDaemon({ LOG_LEVEL: 'debug' }, dir);
    // nothing was loaded at start: no per-conversation log lines before the first request
    assert.ok(!d2.output.some((l) => l.includes('conversation_id')), d2.output.join('\n'));
    const list = await d2.req('GET', '/api/conversations?limit=100');
    assert.equal(list.body.items.length, 100);
    await d2.stop();
  });
});

describe('process lifecycle', () => {
  test('SIGTERM closes sockets with 1001, flushes and exits 0', async () => {
    const d = await startDaemon();
    const id = (await d.req('POST', '/api/conversations', {})).body.conversation_id;
    const s = connect(`ws://127.0.0.1:${d.port}/sockets/events/${id}`);
    await s.next((f) => f.key === 'full_state');
    const pending = Array.from({ length: 20 }, (_, i) => d.req('POST', `/api/conversations/${id}/events`, { content: [{ text: `t${i}` }] }));
    d.proc.kill('SIGTERM');
    const settled = await Promise.allSettled(pending);
    const code = await d.exited;
    assert.equal(code, 0);
    assert.equal((await s.waitClose()).code, 1001);
    const ok = settled.filter((r) => r.status === 'fulfilled' && r.value.status === 200).length;
    const d2 = await startDaemon({}, d.dataDir);
    assert.equal((await d2.req('GET', `/api/conversations/${id}/events/count?kind=MessageEvent`)).body, ok, 'every 200 was committed');
    await d2.stop();
  });
  test('bad configuration and a busy port: one clear line, exit 1', async () => {
    const daemon = await daemonArgs();
    const run = (env: Record<string, string>) =>
      spawnSync(process.execPath, daemon, { cwd: ROOT, env: { PATH: process.env.PATH!, DATA_DIR: tempDir(), ...env }, encoding: 'utf8', timeout: 20_000 });
    const bad = run({ PORT: 'eighty' });
    assert.equal(bad.status, 1);
    assert.match(bad.stderr, /PORT/);
    assert.equal(bad.stderr.trim().split('\n').length, 1);
    const badModel = run({ LLM_MODEL: 'gpt-5' });
    assert.equal(badModel.status, 1);
    assert.match(badModel.stderr, /LLM_MODEL/);
    const d = await startDaemon();
    const busy = run({ PORT: String(d.port) });
    assert.equal(busy.status, 1);
    assert.match(busy.stderr, /port in use|cannot listen/);
    await d.stop();
  });
  test('a DATA_DIR in use by a running daemon: the second one says so in one line and exits 1; the first is untouched', async () => {
    const dir = tempDir();
    const d = await startDaemon({}, dir);
    const id = (await d.req('POST', '/api/conversations', {})).body.conversation_id;
    const second = spawnSync(process.execPath, await daemonArgs(), {
      cwd: ROOT,
      env: { PATH: process.env.PATH!, DATA_DIR: dir, PORT: '0' },
      encoding: 'utf8',
      timeout: 20_000,
    });
    assert.equal(second.status, 1);
    assert.match(second.stderr, new RegExp(`in use by another Parley process \\(pid ${d.proc.pid}\\)`));
    assert.equal(second.stderr.trim().split('\n').length, 1);
    assert.equal((await d.req('POST', `/api/conversations/${id}/events`, { content: [{ text: 'still mine' }] })).status, 200);
    assert.ok(fs.readdirSync(path.join(dir, 'journal')).length >= 1, 'the running daemon keeps its journal');
    await d.stop();
  });
});

describe('in-house callers (tRPC)', () => {
  test('the typed client creates, sends and receives the event through the subscription; same keys', async () => {
    const d = await startDaemon({ SESSION_API_KEY: 'trpc-key' });
    try {
      const denied = createParleyClient({ url: d.url, apiKey: 'wrong' });
      await assert.rejects(denied.listConversations.query({}), /Unauthorized/);
      const client = createParleyClient({ url: d.url, apiKey: 'trpc-key' });
      const { conversation_id } = await client.createConversation.mutate({});
      const received: any[] = [];
      const sub = client.events.subscribe({ conversation_id, after_seq: 0 }, { onData: (e: any) => received.push(e.data ?? e) });
      await client.sendMessage.mutate({ conversation_id, message: { content: [{ type: 'text', text: 'over trpc' }] } as never });
      await waitFor(() => received.find((e) => e.kind === 'MessageEvent'), 'event via subscription');
      assert.equal(received.find((e) => e.kind === 'MessageEvent').llm_message.content[0].text, 'over trpc');
      // REST sees the same event: one core, two doors
      const rest = await d.req('GET', `/api/conversations/${conversation_id}/events/search?kind=MessageEvent`, undefined, { 'X-Session-API-Key': 'trpc-key' });
      assert.equal(rest.body.items[0].id, received.find((e) => e.kind === 'MessageEvent').id);
      const info = await client.getConversation.query({ conversation_id });
      assert.equal(info.id, conversation_id);
      await assert.rejects(client.getConversation.query({ conversation_id: '00000000-0000-0000-0000-000000000009' }), /not found/i);
      sub.unsubscribe();
    } finally {
      await d.stop();
    }
  });
});
