/**
 * The store contract, run against both implementations on real parts: SQLite (journal + index
 * written by the writer thread) on real files, and PostgreSQL on this machine's server (each
 * test in a database of its own, dropped after). Then what only one of them has.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { test, type TestContext } from 'node:test';
import Database from 'better-sqlite3';
import pg from 'pg';
import { UnavailableError } from '../src/errors.js';
import { LeaseLostError, PostgresStore } from '../src/store/postgres.js';
import { SqliteStore } from '../src/store/sqlite.js';
import type { CommitListener, Store } from '../src/store/types.js';
import type { ParleyEvent } from '../src/events/types.js';
import { freePort, ROOT, tempDir, waitFor } from './support/daemon.js';
import { helperArgs } from './support/helper-programs.js';
import { createTestDatabase } from './support/postgres.js';
import { tcpProxy } from './support/tcp-proxy.js';

const C = '11111111-1111-4111-8111-111111111111';
const D = '22222222-2222-4222-8222-222222222222';
const msg = (text: string) => ({
  kind: 'MessageEvent' as const,
  source: 'user' as const,
  llm_message: { role: 'user' as const, content: [{ type: 'text' as const, text }] },
});
const status = (value: string) => ({ kind: 'ConversationStateUpdateEvent' as const, source: 'environment' as const, key: 'execution_status', value });
const conv = (id: string, created_at: string, execution_status = 'idle', data: Record<string, unknown> = {}) => ({
  id,
  title: null,
  created_at,
  updated_at: created_at,
  execution_status,
  data,
});

/** Opens stores of one backend on one place (a directory, a database); removed when the test ends. */
type Open = (onCommit?: CommitListener) => Promise<Store>;

const backends: { name: string; setup(t: TestContext): Promise<Open> }[] = [
  {
    name: 'SQLite',
    async setup(t) {
      const dir = tempDir();
      t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
      return async (onCommit) => {
        const s = new SqliteStore(dir);
        if (onCommit) s.onCommit(onCommit);
        return s;
      };
    },
  },
  {
    name: 'PostgreSQL',
    async setup(t) {
      const db = await createTestDatabase();
      const opened: Store[] = [];
      t.after(async () => {
        for (const s of opened) await s.close().catch(() => {});
        await db.drop();
      });
      return async (onCommit) => {
        const s = await PostgresStore.open(db.url);
        if (onCommit) s.onCommit(onCommit);
        opened.push(s);
        return s;
      };
    },
  },
];

for (const backend of backends) {
  const contract = (name: string, fn: (open: Open) => Promise<void>) =>
    test(`${backend.name}: ${name}`, { timeout: 60_000 }, async (t) => fn(await backend.setup(t)));

  contract('seq is gap-free per conversation; publish order is seq order; every read path sees each event once', async (open) => {
    const published: ParleyEvent[] = [];
    const store = await open((_id, evs) => published.push(...evs.map((e) => e.event)));
    const all = await Promise.all(Array.from({ length: 300 }, (_, i) => store.append(i % 3 ? C : D, msg(`m${i}`))));
    assert.equal(all.length, 300);
    const text = (e: ParleyEvent) => (e as { llm_message: { content: { text: string }[] } }).llm_message.content[0]!.text;
    const cPublished = published.filter((e) => Number(text(e).slice(1)) % 3 !== 0);
    assert.deepEqual(
      cPublished.map((e) => e.seq),
      Array.from({ length: 200 }, (_, i) => i + 1),
    );
    const page = await store.query(C, { limit: 1000 });
    assert.deepEqual(
      page.map((e) => e.seq),
      Array.from({ length: 200 }, (_, i) => i + 1),
    );
    assert.deepEqual(page.map(text), cPublished.map(text), 'stored in the order appended');
    assert.equal(await store.count(C, {}), 200);
    assert.equal(await store.count(C, { afterSeq: 150 }), 50);
    assert.equal(await store.lastSeq(C), 200);
    assert.equal(await store.lastSeq(D), 100);
    const desc = await store.query(C, { limit: 5, desc: true, beforeSeq: 100 });
    assert.deepEqual(
      desc.map((e) => e.seq),
      [99, 98, 97, 96, 95],
    );
    assert.equal((await store.get(C, all[1]!.id))?.seq, all[1]!.seq);
    assert.deepEqual(await store.get(C, all[1]!.id), all[1], 'read back as appended');
    assert.equal(await store.get(D, all[1]!.id), null, 'an event is only found in its own conversation');
    assert.equal((await store.query(C, { kind: 'PauseEvent', limit: 10 })).length, 0);
    assert.equal((await store.query(C, { source: 'user', limit: 1000 })).length, 200);
    await store.appendMany(C, [msg('x'), msg('y')]);
    assert.deepEqual(
      (await store.query(C, { afterSeq: 199, limit: 10 })).map((e) => e.seq),
      [200, 201, 202],
    );
    await store.close();
  });

  contract('deleting a conversation removes its events, after appends already queued', async (open) => {
    const store = await open();
    await store.createConversation(conv(C, 'a'));
    for (let i = 0; i < 10; i++) await store.append(C, msg(`a${i}`));
    for (let i = 0; i < 5; i++) await store.append(C, msg(`b${i}`));
    void store.append(C, msg('queued just before the delete'));
    assert.equal(await store.deleteConversation(C), true);
    assert.equal(await store.getConversation(C), null);
    assert.equal(await store.count(C, {}), 0);
    assert.equal(await store.lastSeq(C), 0);
    assert.equal(await store.deleteConversation(C), false);
    await store.close();
    const reopened = await open();
    assert.equal(await reopened.count(C, {}), 0);
    assert.equal((await reopened.append(C, msg('again'))).seq, 1, 'numbering starts again');
    await reopened.close();
  });

  contract('events survive close and reopen with their seq; ids are time-ordered UUIDv7', async (open) => {
    const s1 = await open();
    const evs = await s1.appendMany(D, [msg('1'), msg('2'), msg('3')]);
    await s1.close();
    for (const e of evs) assert.match(e.id, /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    assert.deepEqual(
      [...evs.map((e) => e.id)].sort(),
      evs.map((e) => e.id),
    );
    const s2 = await open();
    assert.deepEqual(
      (await s2.query(D, { limit: 10 })).map((e) => e.seq),
      [1, 2, 3],
    );
    assert.equal((await s2.append(D, msg('4'))).seq, 4);
    await s2.close();
  });

  contract('conversations: create, read, page newest first, patch, find by status and unfinished setup', async (open) => {
    const store = await open();
    const ids = Array.from({ length: 5 }, (_, i) => `0000000${i}-0000-4000-8000-000000000000`);
    for (const [i, id] of ids.entries())
      await store.createConversation(
        conv(id, `2026-01-0${i + 1}T00:00:00.000Z`, i % 2 ? 'running' : 'idle', { setup: { phase: i === 4 ? 'cloning' : 'ready' }, n: i }),
      );
    await assert.rejects(store.createConversation(conv(ids[0]!, 'x')), 'the id is unique');
    assert.deepEqual((await store.getConversation(ids[2]!))?.data, { setup: { phase: 'ready' }, n: 2 });
    const first = await store.listConversations(3);
    assert.deepEqual(
      first.map((c) => c.id),
      [ids[4], ids[3], ids[2]],
    );
    const rest = await store.listConversations(3, { created_at: first[2]!.created_at, id: first[2]!.id });
    assert.deepEqual(
      rest.map((c) => c.id),
      [ids[2], ids[1], ids[0]],
    );
    await store.updateConversation(ids[1]!, { title: 'T', data: { a: 1 } });
    const updated = await store.getConversation(ids[1]!);
    assert.equal(updated?.execution_status, 'running', 'a patch leaves the status (its log sets it)');
    assert.equal(updated?.title, 'T');
    assert.deepEqual(updated?.data, { a: 1 });
    assert.notEqual(updated?.updated_at, updated?.created_at, 'updated_at follows a patch');
    await store.append(ids[1]!, status('error'));
    assert.deepEqual(
      (await store.conversationsWithStatus(['running'])).map((c) => c.id),
      [ids[3]],
    );
    assert.deepEqual(await store.conversationsWithStatus([]), []);
    assert.deepEqual(await store.conversationsWithUnfinishedSetup(), [ids[4]]);
    await store.close();
  });

  contract(
    'a conversation created with its first events commits both at once; a create that fails (the id is taken) stores, numbers and publishes none of its events',
    async (open) => {
      const published: number[] = [];
      const store = await open((_id, evs) => published.push(...evs.map((e) => e.event.seq!)));
      const first = await store.createConversation(conv(C, 'a'), [msg('first'), msg('second')]);
      assert.deepEqual(
        first.map((e) => e.seq),
        [1, 2],
      );
      assert.deepEqual(published, [1, 2]);
      assert.ok(await store.getConversation(C));
      await assert.rejects(store.createConversation(conv(C, 'b'), [msg('not stored')]), 'the id is unique');
      assert.equal(await store.lastSeq(C), 2, 'the failed create took no seq');
      assert.deepEqual(published, [1, 2], 'and published nothing');
      assert.equal((await store.append(C, msg('third'))).seq, 3);
      await store.close();
      const reopened = await open();
      const texts = (await reopened.query(C, { limit: 10 })).map((e) => (e as { llm_message: { content: { text: string }[] } }).llm_message.content[0]!.text);
      assert.deepEqual(texts, ['first', 'second', 'third']);
      await reopened.close();
    },
  );

  contract('secrets: put, get, list by kind, delete, replace a kind at once', async (open) => {
    const store = await open();
    await store.putSecret({ kind: 'custom', name: 'B', sealed: 'v1:b', meta: { description: 'b' } });
    await store.putSecret({ kind: 'custom', name: 'A', sealed: null, meta: {} });
    await store.putSecret({ kind: 'provider', name: 'github', sealed: 'v1:g', meta: { host: null } });
    await store.putSecret({ kind: 'custom', name: 'B', sealed: 'v1:b2', meta: { description: 'b2' } });
    assert.deepEqual(await store.getSecret('custom', 'B'), { kind: 'custom', name: 'B', sealed: 'v1:b2', meta: { description: 'b2' } });
    assert.deepEqual(
      (await store.listSecrets('custom')).map((s) => s.name),
      ['A', 'B'],
    );
    assert.equal(await store.deleteSecret('custom', 'A'), true);
    assert.equal(await store.deleteSecret('custom', 'A'), false);
    await store.replaceSecrets('provider', [{ kind: 'provider', name: 'gitlab', sealed: null, meta: {} }]);
    assert.deepEqual(
      (await store.listSecrets('provider')).map((s) => s.name),
      ['gitlab'],
    );
    assert.equal(await store.getSecret('provider', 'github'), null);
    await store.close();
  });
  contract('a status event sets the stored execution_status in the same commit (the last of a batch wins); other events leave it', async (open) => {
    const store = await open();
    await store.createConversation(conv(C, 'a'));
    await store.createConversation(conv(D, 'b'));
    await store.append(C, status('running'));
    assert.equal((await store.getConversation(C))?.execution_status, 'running');
    await Promise.all([store.appendMany(C, [status('paused'), msg('x'), status('error')]), store.append(D, status('finished')), store.append(D, msg('y'))]);
    assert.equal((await store.getConversation(C))?.execution_status, 'error');
    assert.equal((await store.getConversation(D))?.execution_status, 'finished');
    await store.append(C, { kind: 'ConversationStateUpdateEvent', source: 'environment', key: 'llm_retry', value: 'finished' });
    assert.equal((await store.getConversation(C))?.execution_status, 'error', 'another key is not the status');
    await store.close();
    const reopened = await open();
    assert.deepEqual(
      (await reopened.conversationsWithStatus(['error'])).map((c) => c.id),
      [C],
    );
    await reopened.close();
  });
}

// ---- SQLite only --------------------------------------------------------------------------------

test('SQLite: reads see events before and after the writer thread indexes them', { timeout: 60_000 }, async (t) => {
  const dir = tempDir();
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  const store = new SqliteStore(dir, { indexDelayMs: 200 });
  const all = await Promise.all(Array.from({ length: 200 }, (_, i) => store.append(C, msg(`m${i}`))));
  const check = async () => {
    assert.deepEqual(
      (await store.query(C, { limit: 1000 })).map((e) => e.seq),
      Array.from({ length: 200 }, (_, i) => i + 1),
    );
    assert.equal(await store.count(C, {}), 200);
    assert.deepEqual(
      (await store.query(C, { limit: 5, desc: true, beforeSeq: 100 })).map((e) => e.seq),
      [99, 98, 97, 96, 95],
    );
    assert.equal((await store.get(C, all[1]!.id))?.seq, 2);
  };
  assert.ok(store.unindexed > 0, 'read from memory before the index has them');
  await check();
  await waitFor(() => store.unindexed === 0, 'the index', 45_000);
  await check();
  await store.close();
});

test('SQLite: events not indexed yet are read back as they were committed: by range, kind and id, each read a copy of its own', {
  timeout: 60_000,
}, async (t) => {
  const dir = tempDir();
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  // an index that does not run during the test: every read below comes from memory
  const store = new SqliteStore(dir, { indexDelayMs: 600_000 });
  const first = await store.append(C, msg('first'));
  // an event whose text names another one's id: a read by that id still finds the event with it
  await store.append(C, msg(`see ${first.id}`));
  await store.append(C, status('running'));
  await store.append(C, msg('ünïcødé \u2028 "quoted"'));
  assert.equal(store.unindexed, 4);
  assert.deepEqual(
    (await store.query(C, { limit: 10, afterSeq: 1, beforeSeq: 4 })).map((e) => e.seq),
    [2, 3],
  );
  assert.deepEqual(
    (await store.query(C, { limit: 10, kind: 'ConversationStateUpdateEvent' })).map((e) => e.seq),
    [3],
  );
  assert.equal(await store.count(C, { afterSeq: 2 }), 2);
  assert.equal((await store.get(C, first.id))?.seq, 1);
  const [last] = await store.query(C, { limit: 1, desc: true });
  assert.deepEqual(last?.kind === 'MessageEvent' && last.llm_message.content, [{ type: 'text', text: 'ünïcødé \u2028 "quoted"' }]);
  // what a reader does with its copy is not what the next reader gets
  (last as { source: string }).source = 'agent';
  assert.equal((await store.query(C, { limit: 1, desc: true }))[0]?.source, 'user');
  await store.close();
});

test('SQLite: a status is stored by the index, not by the commit; a read of the conversations before the index stores what is behind first', {
  timeout: 60_000,
}, async (t) => {
  const dir = tempDir();
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  // what another connection (another process) reads from the database file
  const stored = (id: string) => {
    const db = new Database(path.join(dir, 'parley.db'), { readonly: true });
    try {
      return (db.prepare('SELECT execution_status AS s FROM conversations WHERE id = ?').get(id) as { s: string }).s;
    } finally {
      db.close();
    }
  };
  // an index that does not run during the test: the commit alone
  const slow = new SqliteStore(dir, { indexDelayMs: 600_000 });
  await slow.createConversation(conv(C, 'a'));
  await slow.createConversation(conv(D, 'b'));
  await slow.append(C, status('running'));
  await slow.append(D, status('running'));
  assert.equal(stored(C), 'idle', 'the commit did not write the conversation row');
  // each read sees the log's status, and what was behind is stored by then
  assert.equal((await slow.getConversation(C))?.execution_status, 'running');
  assert.equal(stored(C), 'running');
  assert.equal(stored(D), 'running');
  await slow.append(C, status('finished'));
  assert.deepEqual(
    (await slow.conversationsWithStatus(['finished'])).map((c) => c.id),
    [C],
  );
  await slow.append(D, status('paused'));
  assert.deepEqual(Object.fromEntries(slow.countByStatus()), { finished: 1, paused: 1 });
  await slow.append(C, status('error'));
  // a patch meanwhile: the status stored after it does not take its updated_at back
  await slow.updateConversation(C, { title: 'patched', updated_at: '2999-01-01T00:00:00.000Z' });
  assert.equal(stored(C), 'finished', 'the patch left the status behind');
  assert.deepEqual(
    (await slow.listConversations(10)).map((c) => [c.id, c.execution_status]),
    [
      [D, 'paused'],
      [C, 'error'],
    ],
  );
  assert.equal((await slow.getConversation(C))?.updated_at, '2999-01-01T00:00:00.000Z');
  const E = '33333333-3333-4333-8333-333333333333';
  await slow.createConversation(conv(E, 'c', 'idle', { setup: { phase: 'cloning' } }));
  await slow.append(E, status('error'));
  assert.deepEqual(await slow.conversationsWithUnfinishedSetup(), [], 'a setup that ended in error is not unfinished');
  await slow.close();

  // the index stores it by itself, with no read of this store's
  const store = new SqliteStore(dir, { indexDelayMs: 50 });
  await store.append(C, status('stuck'));
  await waitFor(() => store.unindexed === 0 && stored(C) === 'stuck', 'the index stored the status', 30_000);
  await store.close();
});

test('SQLite: a crash between the journal write of a status event and the status update is made up for at the next start', { timeout: 60_000 }, async (t) => {
  const dir = tempDir();
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  const r = spawnSync(process.execPath, [...(await helperArgs('status-crash')), dir, C], { cwd: ROOT, encoding: 'utf8', timeout: 60_000 });
  assert.equal(r.signal, 'SIGKILL', `the child died by SIGKILL (stderr: ${r.stderr})`);
  const store = new SqliteStore(dir);
  assert.equal((await store.getConversation(C))?.execution_status, 'running', 'the status follows the log');
  await store.close();
});

// ---- PostgreSQL only ----------------------------------------------------------------------------

test('PostgreSQL: two nodes appending to one conversation get one gap-free seq; appends are grouped into few statements', { timeout: 60_000 }, async (t) => {
  const db = await createTestDatabase();
  t.after(() => db.drop());
  // two stores opened together: the migrations run once (the second waits on the advisory lock)
  const [a, b] = await Promise.all([PostgresStore.open(db.url), PostgresStore.open(db.url)]);
  const statements = { n: 0 };
  const query = a.pool.query.bind(a.pool) as (...args: unknown[]) => unknown;
  (a.pool as { query: unknown }).query = (...args: unknown[]) => (String(args[0]).includes('event_counters AS c') && statements.n++, query(...args));
  const fromA = Array.from({ length: 200 }, (_, i) => a.append(C, msg(`a${i}`)));
  const fromB = Array.from({ length: 200 }, (_, i) => b.append(C, msg(`b${i}`)));
  const seqs = (await Promise.all([...fromA, ...fromB])).map((e) => e.seq!).sort((x, y) => x - y);
  assert.deepEqual(
    seqs,
    Array.from({ length: 400 }, (_, i) => i + 1),
    'every seq once, none missing',
  );
  assert.ok(statements.n < 200 / 4, `200 appends of one node took ${statements.n} statements: they are grouped`);
  const aSeqs = (await Promise.all(fromA)).map((e) => e.seq!);
  assert.deepEqual(
    aSeqs,
    [...aSeqs].sort((x, y) => x - y),
    "a node's appends are numbered in the order it made them",
  );
  assert.deepEqual(
    (await b.query(C, { limit: 1000 })).map((e) => e.seq),
    Array.from({ length: 400 }, (_, i) => i + 1),
  );
  const versions = await a.pool.query('SELECT version FROM schema_migrations');
  assert.equal(versions.rowCount, 2, 'each migration applied once');
  await Promise.all([a.close(), b.close()]);
});

test('PostgreSQL: unreachable at start or mid-run answers UnavailableError with the reason; a bad append fails alone', { timeout: 60_000 }, async (t) => {
  const port = await freePort();
  await assert.rejects(
    PostgresStore.open(`postgres://postgres@127.0.0.1:${port}/x`, { connectTimeoutMs: 2000 }),
    (err: Error) => err instanceof UnavailableError && /PostgreSQL unavailable: .*ECONNREFUSED/.test(err.message),
  );

  const db = await createTestDatabase();
  t.after(() => db.drop());
  const store = await PostgresStore.open(db.url);
  const first = await store.append(C, msg('kept'));
  // the same event id twice in one group: only that append fails, the others commit
  const results = await Promise.allSettled([store.append(C, msg('ok 1')), store.append(C, { ...msg('dup'), id: first.id }), store.append(C, msg('ok 2'))]);
  assert.deepEqual(
    results.map((r) => r.status),
    ['fulfilled', 'rejected', 'fulfilled'],
  );
  assert.deepEqual(
    (await store.query(C, { limit: 10 })).map((e) => e.seq),
    [1, 2, 3],
    'the failed append took no seq',
  );

  // the server ends every connection of this database: the next calls reconnect by themselves
  const admin = new pg.Client({ connectionString: db.url });
  await admin.connect();
  await admin.query('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()', [db.name]);
  await admin.end();
  await waitFor(async () => (await store.append(C, msg('after')).catch(() => null))?.seq === 4, 'an append after the connections were cut');
  await store.close();
});

test('PostgreSQL: a node whose connection to the server is cut answers 503 with the reason and recovers by itself', { timeout: 60_000 }, async (t) => {
  const db = await createTestDatabase();
  t.after(() => db.drop());
  const proxy = await tcpProxy(5432);
  t.after(() => proxy.close());
  const url = new URL(db.url);
  url.port = String(proxy.port);
  const store = await PostgresStore.open(url.toString(), { connectTimeoutMs: 1000 });
  await store.append(C, msg('before'));
  proxy.cut();
  const err = await store.append(C, msg('during')).then(
    () => null,
    (e: Error) => e,
  );
  assert.ok(err instanceof UnavailableError, `503, got ${err}`);
  assert.match(err.message, /^PostgreSQL unavailable: /);
  proxy.restore();
  const after = (await waitFor(() => store.append(C, msg('after')).catch(() => null), 'an append once the server is back'))!;
  assert.equal((await store.query(C, { limit: 10 })).filter((e) => e.seq === after.seq).length, 1);
  assert.ok(
    (await store.query(C, { limit: 10 })).some((e) => e.seq === 1),
    'what was acknowledged before is kept',
  );
  await store.close();
});

test('PostgreSQL: a fenced append commits only while its node holds the lease; refused, it takes no seq, sets no status and fails alone', {
  timeout: 60_000,
}, async (t) => {
  const db = await createTestDatabase();
  t.after(() => db.drop());
  const store = await PostgresStore.open(db.url);
  await store.createConversation(conv(C, 'a', 'running'));
  await store.pool.query("INSERT INTO leases (conversation_id, node_id, expires_at) VALUES ($1, 'node-a', now() + interval '1 minute')", [C]);
  const lost: string[] = [];
  store.fenceWith(
    (id) => (id === C ? 'node-a' : null),
    (e) => lost.push(e.conversationId),
  );
  assert.equal((await store.append(C, msg('as the owner'))).seq, 1);
  // another node takes the conversation over
  await store.pool.query("UPDATE leases SET node_id = 'node-b' WHERE conversation_id = $1", [C]);
  const results = await Promise.allSettled([store.append(C, status('finished')), store.append(D, msg('not fenced'))]);
  assert.equal(results[0].status, 'rejected');
  assert.ok((results[0] as PromiseRejectedResult).reason instanceof LeaseLostError, String((results[0] as PromiseRejectedResult).reason));
  assert.equal(results[1].status, 'fulfilled', 'the other append of the group commits');
  assert.deepEqual(lost, [C]);
  assert.equal((await store.getConversation(C))?.execution_status, 'running', 'the refused status was not stored');
  assert.equal(await store.lastSeq(C), 1, 'no seq taken');
  store.fenceWith(
    () => null,
    () => {},
  );
  assert.equal((await store.append(C, msg('not the owner'))).seq, 2);
  await store.close();
});
