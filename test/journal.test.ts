/**
 * The event journal (src/store/journal.ts): the commit point of the hot path. Events acknowledged
 * by the journal but never indexed survive a SIGKILL of the process; a torn tail is ignored;
 * files rotate and go once indexed; appends wait when the index falls too far behind.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import Database from 'better-sqlite3';
import { UnavailableError } from '../src/errors.js';
import { Journal, journalFile, journalGenerations } from '../src/store/journal.js';
import { SqliteStore } from '../src/store/sqlite.js';
import { ROOT, tempDir, waitFor } from './support/daemon.js';
import { helperArgs } from './support/helper-programs.js';

const C = '11111111-1111-4111-8111-111111111111';
const D = '22222222-2222-4222-8222-222222222222';
const msg = (text: string) => ({
  kind: 'MessageEvent' as const,
  source: 'user' as const,
  llm_message: { role: 'user' as const, content: [{ type: 'text' as const, text }] },
});

/** The children below run built (test/support/helper-programs.ts): plain node, no tsx to load. */
const CRASH = await helperArgs('journal-crash');
const SYNC = await helperArgs('journal-sync');

type Committed = { unindexed: number; events: { conversation: string; seq: number; id: string }[] };

function crashAfterCommitting(dir: string, count: number): Committed {
  const r = spawnSync(process.execPath, [...CRASH, dir, String(count)], { cwd: ROOT, encoding: 'utf8', timeout: 60_000 });
  assert.equal(r.signal, 'SIGKILL', `the child died by SIGKILL (stderr: ${r.stderr})`);
  return JSON.parse(r.stdout.trim()) as Committed;
}

test('events committed to the journal but never indexed survive a SIGKILL: same seq, same id, same content', async () => {
  const dir = tempDir();
  const committed = crashAfterCommitting(dir, 300);
  assert.equal(committed.unindexed, 300, 'nothing was indexed before the kill');
  const raw = new Database(path.join(dir, 'parley.db'), { readonly: true });
  assert.equal(raw.prepare('SELECT COUNT(*) FROM events').pluck().get(), 0, 'the index is empty: only the journal has them');
  raw.close();
  assert.ok(journalGenerations(path.join(dir, 'journal')).length >= 1);

  const store = new SqliteStore(dir, { indexDelayMs: 10 });
  for (const conv of [C, D]) {
    const mine = committed.events.filter((e) => e.conversation === conv);
    const page = await store.query(conv, { limit: 1000 });
    assert.deepEqual(
      page.map((e) => [e.seq, e.id]),
      mine.map((e) => [e.seq, e.id]),
    );
    assert.deepEqual(
      page.map((e) => e.seq),
      Array.from({ length: 150 }, (_, i) => i + 1),
      'gap-free from 1',
    );
  }
  const first = await store.get(C, committed.events[0]!.id);
  assert.deepEqual(
    first?.kind === 'MessageEvent' && first.llm_message.content[0],
    { type: 'text', text: 'm0\ttab\nnewline' },
    'tabs and newlines in content survive the line format',
  );
  // recovery indexed the old generations and removed their files; the next append continues the sequence
  assert.deepEqual(journalGenerations(path.join(dir, 'journal')).length, 1);
  assert.equal((await store.append(C, msg('after'))).seq, 151);
  await store.close();
  assert.deepEqual(journalGenerations(path.join(dir, 'journal')), [], 'a clean close leaves no journal file');
  const reopened = new SqliteStore(dir);
  assert.equal(await reopened.count(C, {}), 151);
  await reopened.close();
});

test('a torn or corrupt frame at the end of the journal is ignored; every whole frame before it is kept', async () => {
  const dir = tempDir();
  const committed = crashAfterCommitting(dir, 40);
  const jdir = path.join(dir, 'journal');
  const gen = journalGenerations(jdir).at(-1)!;
  const file = journalFile(jdir, gen);
  // a frame header that promises more bytes than follow (a write cut short)...
  const torn = Buffer.alloc(12);
  torn.writeUInt32LE(5000, 0);
  fs.appendFileSync(file, torn);
  const store = new SqliteStore(dir);
  assert.equal((await store.count(C, {})) + (await store.count(D, {})), committed.events.length);
  await store.close();

  // ...and a whole frame whose checksum does not match its payload
  const dir2 = tempDir();
  const committed2 = crashAfterCommitting(dir2, 40);
  const file2 = journalFile(path.join(dir2, 'journal'), journalGenerations(path.join(dir2, 'journal')).at(-1)!);
  const payload = Buffer.from(`${JSON.stringify([C, 999, 'x', 'MessageEvent', '2026-01-01T00:00:00.000Z', 'user'])}\t{}`);
  const bad = Buffer.alloc(8 + payload.length);
  bad.writeUInt32LE(payload.length, 0);
  bad.writeUInt32LE(12345, 4);
  payload.copy(bad, 8);
  fs.appendFileSync(file2, bad);
  const store2 = new SqliteStore(dir2);
  assert.equal(await store2.count(C, {}), committed2.events.filter((e) => e.conversation === C).length);
  assert.equal(await store2.lastSeq(C), 20, 'the corrupt frame claimed seq 999: it was not taken');
  await store2.close();
});

test('journal files rotate, and a generation is removed once the index holds it', async () => {
  const dir = tempDir();
  const jdir = path.join(dir, 'journal');
  const store = new SqliteStore(dir, { rotateBytes: 4096, indexDelayMs: 5 });
  let maxFiles = 0;
  for (let i = 0; i < 200; i++) {
    await store.append(i % 2 ? C : D, msg(`rotating ${i} ${'x'.repeat(200)}`));
    maxFiles = Math.max(maxFiles, journalGenerations(jdir).length);
  }
  assert.ok(maxFiles >= 2, 'the journal rotated');
  await waitFor(() => store.unindexed === 0 && journalGenerations(jdir).length === 1, 'the index caught up and old generations were removed');
  assert.equal(await store.count(C, {}), 100);
  assert.equal((await store.query(D, { limit: 1, desc: true }))[0]?.seq, 100);
  await store.close();
});

test('when the index falls behind, appends wait for it instead of holding unbounded memory', async () => {
  const dir = tempDir();
  const store = new SqliteStore(dir, { maxUnindexed: 50, indexDelayMs: 100 });
  const first = await Promise.all(Array.from({ length: 50 }, (_, i) => store.append(C, msg(`a${i}`))));
  assert.equal(store.unindexed, 50);
  let seenWhenResolved = -1;
  const late = store.append(C, msg('waits for the index')).then((e) => {
    seenWhenResolved = store.unindexed;
    return e;
  });
  const ev = await late;
  assert.equal(ev.seq, 51);
  // had it not waited, 51 events would have been unindexed when it resolved
  assert.ok(seenWhenResolved <= 1, `committed only after the index caught up (unindexed then: ${seenWhenResolved})`);
  // reads never missed anything meanwhile
  assert.deepEqual(
    (await store.query(C, { limit: 100 })).map((e) => e.seq),
    [...first.map((e) => e.seq), 51],
  );
  await store.close();
});

test('a journal write that fails (disk full) rejects the append with a clear error, takes no seq, and keeps what was committed', async () => {
  const dir = tempDir();
  const published: number[] = [];
  const store = new SqliteStore(dir);
  store.onCommit((_id, evs) => published.push(...evs.map((e) => e.event.seq!)));
  await store.appendMany(C, [msg('one'), msg('two')]);
  // from here on the journal writes to /dev/full: every write(2) fails with ENOSPC
  const jdir = path.join(dir, 'journal');
  fs.symlinkSync('/dev/full', journalFile(jdir, 99999));
  (store as unknown as { journal: Journal }).journal = new Journal(jdir, 99999, { fsync: false, rotateBytes: 1 << 30 });
  await assert.rejects(store.append(C, msg('three')), (err: Error) => err instanceof UnavailableError && /event log write failed: .*ENOSPC/.test(err.message));
  await assert.rejects(store.appendMany(D, [msg('x'), msg('y')]), /ENOSPC/);
  assert.deepEqual(published, [1, 2], 'nothing of the failed appends was published');
  assert.equal(await store.lastSeq(C), 2, 'the failed append took no seq');
  assert.equal(await store.lastSeq(D), 0);
  assert.deepEqual(
    (await store.query(C, { limit: 10 })).map((e) => e.seq),
    [1, 2],
  );
  await store.close();
  const reopened = new SqliteStore(dir);
  assert.deepEqual(
    (await reopened.query(C, { limit: 10 })).map((e) => e.seq),
    [1, 2],
  );
  assert.equal((await reopened.append(C, msg('three'))).seq, 3);
  await reopened.close();
});

test('indexing fails: committed events stay readable; appends go to the bound then fail with the reason; indexing resumes by itself once it can', async (t) => {
  // the store's writer thread does not keep a process alive (unref'd): this test's awaits on it must
  const keepAlive = setInterval(() => {}, 1000);
  t.after(() => clearInterval(keepAlive));
  const dir = tempDir();
  const store = new SqliteStore(dir, { indexDelayMs: 20, maxUnindexed: 5 });
  await store.append(C, msg('indexed'));
  await waitFor(() => store.unindexed === 0, 'the first event indexed');
  const admin = new Database(path.join(dir, 'parley.db'));
  admin.exec("CREATE TRIGGER refuse BEFORE INSERT ON events BEGIN SELECT RAISE(ABORT, 'the index refuses'); END");
  const committed = await store.appendMany(C, [msg('a'), msg('b')]);
  assert.deepEqual(
    committed.map((e) => e.seq),
    [2, 3],
  );
  // the journal takes appends until the tail's bound; then they answer with the index's reason instead of waiting
  const refused = await waitFor(
    () =>
      store.append(C, msg('more')).then(
        () => null,
        (err: Error) => err,
      ),
    'appends to fail once the tail is full and the index cannot write',
  );
  assert.ok(refused instanceof UnavailableError && /event index cannot be written \(the index refuses\)/.test(refused.message), String(refused));
  // everything committed is still read, in order, from memory above what the index holds
  const seqs = (await store.query(C, { limit: 1000 })).map((e) => e.seq);
  assert.deepEqual(
    seqs,
    Array.from({ length: seqs.length }, (_, i) => i + 1),
    'gap-free: the refused appends took no seq',
  );
  assert.equal(store.unindexed, 5);
  assert.equal(await store.count(C, {}), seqs.length);
  assert.equal((await store.get(C, committed[1]!.id))?.seq, 3);
  await store.createConversation({ id: D, title: null, created_at: 'a', updated_at: 'a', execution_status: 'idle', data: {} });
  await assert.rejects(store.deleteConversation(D), UnavailableError);
  assert.ok(await store.getConversation(D), 'a delete that cannot remove the events keeps the conversation');
  // the index can write again: the writer's next retry (backoff at most 1 s) indexes everything, appends go on
  admin.exec('DROP TRIGGER refuse');
  await waitFor(() => store.unindexed === 0, 'the index to catch up by itself', 20_000);
  assert.equal((await store.append(C, msg('after'))).seq, seqs.length + 1);
  assert.equal(await store.deleteConversation(D), true);
  await store.close();
  admin.close();
  const reopened = new SqliteStore(dir);
  assert.deepEqual(
    (await reopened.query(C, { limit: 1000 })).map((e) => e.seq),
    [...seqs, seqs.length + 1],
  );
  await reopened.close();
});

test('a store closed while its index cannot write keeps the journal, and the next start indexes it', async (t) => {
  const keepAlive = setInterval(() => {}, 1000);
  t.after(() => clearInterval(keepAlive));
  const dir = tempDir();
  const store = new SqliteStore(dir, { indexDelayMs: 20 });
  await store.append(C, msg('indexed'));
  await waitFor(() => store.unindexed === 0, 'the first event indexed');
  const admin = new Database(path.join(dir, 'parley.db'));
  admin.exec("CREATE TRIGGER refuse BEFORE INSERT ON events BEGIN SELECT RAISE(ABORT, 'the index refuses'); END");
  await store.appendMany(C, [msg('a'), msg('b')]);
  await store.close(); // does not wait for the index: its retries stop
  assert.ok(journalGenerations(path.join(dir, 'journal')).length >= 1, 'the journal is kept: the index does not hold it');
  admin.exec('DROP TRIGGER refuse');
  admin.close();
  const reopened = new SqliteStore(dir);
  assert.deepEqual(
    (await reopened.query(C, { limit: 1000 })).map((e) => e.seq),
    [1, 2, 3],
    're-indexed from the journal at start-up',
  );
  assert.equal((await reopened.append(C, msg('next'))).seq, 4);
  await reopened.close();
});

test('SQLITE_SYNCHRONOUS=FULL: appends, rotation and reopen work with every frame synced', async () => {
  const dir = tempDir();
  const jdir = path.join(dir, 'journal');
  const store = new SqliteStore(dir, { synchronous: 'FULL', rotateBytes: 2048, indexDelayMs: 5 });
  let rotated = false;
  for (let i = 0; i < 40; i++) {
    await store.append(C, msg(`durable ${i} ${'y'.repeat(100)}`));
    rotated ||= journalGenerations(jdir).length > 1;
  }
  assert.ok(rotated, 'new generations were created');
  assert.equal(await store.count(C, {}), 40);
  await store.close();
  const reopened = new SqliteStore(dir, { synchronous: 'FULL' });
  assert.deepEqual(
    (await reopened.query(C, { limit: 100 })).map((e) => e.seq),
    Array.from({ length: 40 }, (_, i) => i + 1),
  );
  await reopened.close();
});

const strace = spawnSync('strace', ['-V'], { encoding: 'utf8' }).status === 0;
test('the syncs reach the kernel: FULL fdatasyncs every journal frame and fsyncs the journal directory; NORMAL syncs no frame', {
  skip: strace ? false : 'strace is not installed',
}, () => {
  const syncs = (mode: string) => {
    const dir = tempDir();
    const r = spawnSync('strace', ['-f', '-y', '-e', 'trace=fsync,fdatasync', '-o', path.join(dir, 'strace.txt'), process.execPath, ...SYNC, dir, mode], {
      cwd: ROOT,
      encoding: 'utf8',
      timeout: 60_000,
    });
    assert.equal(r.status, 0, r.stderr);
    const lines = fs.readFileSync(path.join(dir, 'strace.txt'), 'utf8').split('\n');
    return {
      frames: lines.filter((l) => /fdatasync\(\d+<[^>]*\/journal\/\d{12}\.log>\)/.test(l)).length,
      directory: lines.filter((l) => /fsync\(\d+<[^>]*\/journal>\)/.test(l)).length,
    };
  };
  const full = syncs('FULL');
  assert.equal(full.frames, 10, 'one fdatasync per frame (10 appends, one by one)');
  assert.ok(full.directory >= 1, 'the new journal file is made durable in its directory');
  assert.deepEqual(syncs('NORMAL'), { frames: 0, directory: 0 });
});

test('a journal line’s header is the JSON of its six values, also for values that need escaping', async () => {
  const { journalEvents, journalLine } = await import('../src/store/journal.js');
  const cases = [
    { seq: 5, id: '0193a000-0000-7000-8000-000000000001', kind: 'MessageEvent', timestamp: '2026-11-26T10:00:00.000Z', source: 'user' },
    { seq: 0, id: 'we"ird\n\t', kind: 'X', timestamp: 't', source: undefined },
    { seq: 1.5, id: 'ü\u2028', kind: '', timestamp: '2026-11-26T10:00:00+01:00', source: null },
    { seq: undefined, id: 'a\\b', kind: 'a/b', timestamp: '<x>', source: 'agent' },
    { seq: NaN, id: '😀\ud800', kind: '\u0000\u001f', timestamp: '', source: 'x y' },
  ];
  for (const c of cases) {
    for (const conversation of [C, 'a"b']) {
      const ev = c as never;
      const line = journalLine(conversation, ev, '{"k":1}');
      assert.equal(line, `${JSON.stringify([conversation, c.seq, c.id, c.kind, c.timestamp, c.source])}\t{"k":1}`);
      assert.equal(journalEvents(line)[0]!.conversationId, conversation);
    }
  }
});

test('the index takes a batch of frames whole; rows already indexed (a crash before its position was stored) are kept as they are', async (t) => {
  const { journalIndexer, journalLine } = await import('../src/store/journal.js');
  const { openDatabase } = await import('../src/store/sqlite-schema.js');
  const dir = tempDir();
  const db = openDatabase(path.join(dir, 'parley.db'), 'NORMAL');
  t.after(() => {
    db.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });
  const line = (conversation: string, seq: number, text: string) => {
    const ev = { ...msg(text), seq, id: `${conversation.slice(0, 8)}-${seq}`, timestamp: `2026-11-30T00:00:${String(seq).padStart(2, '0')}.000Z` };
    return journalLine(conversation, ev as never, JSON.stringify(ev));
  };
  const frame = (lines: string[], offset: number) => ({ payload: lines.join('\n'), pos: { gen: 1, offset } });
  const index = journalIndexer(db);
  // 37 events in two frames, in one transaction
  index([
    frame(
      Array.from({ length: 20 }, (_, i) => line(C, i + 1, `first ${i + 1}`)),
      100,
    ),
    frame(
      Array.from({ length: 17 }, (_, i) => line(D, i + 1, `first ${i + 1}`)),
      200,
    ),
  ]);
  const rows = () =>
    db.prepare('SELECT conversation_id AS c, seq, body FROM events ORDER BY conversation_id, seq').all() as { c: string; seq: number; body: string }[];
  assert.deepEqual(
    rows().map((r) => `${r.c.slice(0, 1)}${r.seq}`),
    [...Array.from({ length: 20 }, (_, i) => `1${i + 1}`), ...Array.from({ length: 17 }, (_, i) => `2${i + 1}`)],
  );
  // a crash before the index's position was stored: the same frames again, with new text, and one more event
  index([
    frame(
      Array.from({ length: 21 }, (_, i) => line(C, i + 1, `again ${i + 1}`)),
      300,
    ),
  ]);
  const after = rows();
  assert.equal(after.length, 38);
  assert.equal(
    after
      .filter((r) => r.body.includes('"again'))
      .map((r) => `${r.c.slice(0, 1)}${r.seq}`)
      .join(),
    '121',
    'only the new event is taken',
  );
  assert.deepEqual(db.prepare('SELECT gen, offset FROM journal_state').get(), { gen: 1, offset: 300 });
});
