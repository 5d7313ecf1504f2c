/**
 * The daemon on a disk that an agent fills: a real daemon whose DATA_DIR (and with it
 * WORKSPACE_ROOT) is on a small tmpfs this test mounts itself, filled from the test with a file
 * written until ENOSPC, as an agent's `dd` would, and freed again. What must hold: appends go on
 * into the journal's reserve, then answer 503 with the reason; creates and sends that answer an
 * error leave nothing behind; the daemon recovers by itself once space returns (no restart), also
 * after a SIGKILL on the full disk; the event log is gap-free and equal to what was acknowledged.
 *
 * Mounting needs root: without it these tests are skipped with the reason in the output. The
 * PostgreSQL part (a disk_full error from the server) needs no root.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, test, type TestContext } from 'node:test';
import pg from 'pg';
import { startDaemon, waitFor, type DaemonHandle } from './support/daemon.js';
import { createTestDatabase } from './support/postgres.js';

const RESERVE_MB = 4;
/** One message's text: 200 KiB, so a few dozen exhaust the reserve. */
const PAD = 'x'.repeat(200 * 1024);

const root = process.getuid?.() === 0;
const noRoot = root ? false : 'needs root: it mounts a tmpfs of its own (mount -t tmpfs); run the suite as root';

/** A tmpfs of `sizeMb` MiB on a new temp directory; `release` stops the daemons given, then unmounts and removes it (also when the test failed). */
function tmpfs(t: TestContext, sizeMb: number, daemons: () => DaemonHandle[]): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'parley-diskfull-'));
  execFileSync('mount', ['-t', 'tmpfs', '-o', `size=${sizeMb}m,mode=0700`, 'tmpfs', dir]);
  t.after(async () => {
    for (const d of daemons()) await d.stop('SIGKILL');
    try {
      execFileSync('umount', [dir]);
    } catch {
      execFileSync('umount', ['-l', dir]); // something still holds it: detach it now, gone when released
    }
    fs.rmSync(dir, { recursive: true, force: true });
  });
  return dir;
}

/** Writes a file until the filesystem is full, as an agent's `dd if=/dev/zero of=big` would; returns its path. */
function fillDisk(dir: string): string {
  fs.mkdirSync(dir, { recursive: true });
  const file = path.join(dir, 'big.bin');
  const fd = fs.openSync(file, 'w');
  try {
    for (const size of [1024 * 1024, 4096, 1]) {
      const chunk = Buffer.alloc(size, 0x61);
      try {
        for (;;) fs.writeSync(fd, chunk);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'ENOSPC') throw err;
      }
    }
  } finally {
    fs.closeSync(fd);
  }
  return file;
}

const env = (dataDir: string) => ({ DATA_DIR: dataDir, DISK_RESERVE_MB: String(RESERVE_MB), SANDBOX: 'none', LOG_LEVEL: 'info' });
const reservePath = (dataDir: string) => path.join(dataDir, 'journal', 'reserve');
const reserveReady = (dataDir: string) => {
  try {
    return fs.statSync(reservePath(dataDir)).size === RESERVE_MB * 1024 * 1024;
  } catch {
    return false;
  }
};

/** A message that the daemon could not store answers 503 with the store's reason, never another status. */
const DISK_REASON = /event log write failed: ENOSPC|database or disk is full|event index cannot be written/;

async function send(d: DaemonHandle, id: string, text: string) {
  return d.req('POST', `/api/conversations/${id}/events`, { role: 'user', content: [{ type: 'text', text }] });
}

/** Committed events the daemon's index has not taken yet (its metric). */
async function unindexed(d: DaemonHandle): Promise<number> {
  const m = /^parley_store_unindexed_events (\d+)/m.exec((await d.req('GET', '/metrics')).text);
  assert.ok(m, 'the metric is there');
  return Number(m[1]);
}

/** Every event of a conversation, oldest first (all pages). */
async function eventsOf(d: DaemonHandle, id: string): Promise<any[]> {
  const out: any[] = [];
  let page: string | null = null;
  for (;;) {
    const r = await d.req('GET', `/api/conversations/${id}/events/search?limit=100${page ? `&page_id=${page}` : ''}`);
    assert.equal(r.status, 200, r.text);
    out.push(...r.body.items);
    page = r.body.next_page_id;
    if (!page) return out;
  }
}

/** The log is gap-free from 1 and its user messages are exactly the acknowledged ones, in order. */
async function assertLog(d: DaemonHandle, id: string, acknowledged: string[], what: string): Promise<void> {
  const events = await eventsOf(d, id);
  assert.deepEqual(
    events.map((e) => e.seq),
    events.map((_, i) => i + 1),
    `${what}: seq gap-free from 1`,
  );
  const texts = events.filter((e) => e.kind === 'MessageEvent' && e.source === 'user').map((e) => e.llm_message.content[0].text);
  assert.equal(texts.length, acknowledged.length, `${what}: as many user messages as were acknowledged`);
  assert.ok(
    texts.every((t, i) => t === acknowledged[i]),
    `${what}: the user messages are the acknowledged ones, in order`,
  );
}

/** A create of `id` (with a first message) that must answer 503 for a reason of the store and leave nothing behind. */
async function assertCreateRefused(d: DaemonHandle, workspaceRoot: string, id: string = crypto.randomUUID(), reason = DISK_REASON): Promise<string> {
  const r = await d.req('POST', '/api/conversations', { conversation_id: id, initial_user_msg: 'refused on a full disk' });
  assert.equal(r.status, 503, `a create on a full disk answers 503, got ${r.status}: ${r.text}`);
  assert.match(r.body.detail, reason);
  await assertAbsent(d, id, workspaceRoot);
  return id;
}

async function assertAbsent(d: DaemonHandle, id: string, workspaceRoot: string): Promise<void> {
  assert.equal((await d.req('GET', `/api/conversations/${id}`)).status, 404, 'the refused conversation does not exist');
  const list = await d.req('GET', '/api/conversations?limit=100');
  assert.ok(!list.body.items.some((c: any) => c.conversation_id === id), 'nor is it listed');
  assert.ok(!fs.existsSync(path.join(workspaceRoot, id.replace(/-/g, ''))), 'nor has it a workspace');
}

/** Sends until a message is acknowledged (the daemon recovered); each refusal must be a 503 of the store. Resolves with the ms it took. */
async function awaitRecovery(d: DaemonHandle, id: string, acknowledged: string[], text: string): Promise<number> {
  const started = performance.now();
  await waitFor(
    async () => {
      const r = await send(d, id, text);
      if (r.status === 200) return acknowledged.push(text);
      assert.equal(r.status, 503, r.text);
      assert.match(r.body.detail, DISK_REASON);
      return false;
    },
    'an append to be acknowledged again once space was freed',
    60_000,
  );
  return Math.round(performance.now() - started);
}

/** A daemon on a tmpfs of its own, its reserve written, and a conversation with one acknowledged message; `start` starts it again on the same DATA_DIR. */
async function daemonOnTmpfs(t: TestContext) {
  const daemons: DaemonHandle[] = [];
  const mnt = tmpfs(t, 48, () => daemons);
  const dataDir = path.join(mnt, 'data');
  const start = async () => {
    const d = await startDaemon(env(dataDir), dataDir);
    daemons.push(d);
    return d;
  };
  const d = await start();
  await waitFor(() => reserveReady(dataDir), 'the journal reserve to be written after start', 30_000);
  const id = (await d.req('POST', '/api/conversations', {})).body.conversation_id as string;
  assert.equal((await send(d, id, 'before')).status, 200);
  return { mnt, dataDir, workspaces: path.join(dataDir, 'workspaces'), start, d, id, acknowledged: ['before'] };
}

describe('a full disk under DATA_DIR (tmpfs)', { skip: noRoot, timeout: 240_000 }, () => {
  test('appends go on into the reserve, then answer 503 with the reason; refused creates leave nothing; once space is freed the daemon recovers by itself', {
    timeout: 180_000,
  }, async (t) => {
    const { mnt, dataDir, workspaces, start, id, acknowledged, ...setUp } = await daemonOnTmpfs(t);
    let d = setUp.d;

    const filler = fillDisk(path.join(workspaces, id.replace(/-/g, '')));
    assert.ok(fs.statfsSync(mnt).bavail === 0, 'the disk is full');
    // a create: its first message goes into the journal's reserve, but its record finds no room in
    // the database, so the message is taken back and nothing of it remains
    const refusedId = await assertCreateRefused(d, workspaces, undefined, /^storing the conversation failed: database or disk is full$/);
    // the reserve takes what the daemon writes from here on, until it is used up
    let firstRefusal: Awaited<ReturnType<typeof send>> | null = null;
    let whileFull = 0;
    for (let i = 0; i < 60 && !firstRefusal; i++) {
      const text = `while full ${i} ${PAD}`;
      const r = await send(d, id, text);
      if (r.status === 200) acknowledged.push(text), whileFull++;
      else firstRefusal = r;
    }
    assert.ok(whileFull >= 5, `appends were acknowledged on the full disk, from the reserve (${whileFull})`);
    assert.ok(firstRefusal, 'the reserve was used up');
    assert.equal(firstRefusal.status, 503, firstRefusal.text);
    assert.match(firstRefusal.body.detail, /^event log write failed: ENOSPC: no space left on device/, 'the reason');
    assert.ok(!firstRefusal.text.includes(mnt), 'no host path in the detail');
    t.diagnostic(`${whileFull} appends of 200 KiB went into the ${RESERVE_MB} MiB reserve on the full disk`);
    assert.ok(
      d.output.some((l) => l.includes('disk pressure: DATA_DIR is short of space')),
      'disk pressure was reported',
    );
    for (let i = 0; i < 3; i++) {
      const r = await send(d, id, `refused ${i}`);
      assert.equal(r.status, 503, r.text);
      assert.match(r.body.detail, DISK_REASON);
    }
    // the same id again, now that the journal has no room either
    await assertCreateRefused(d, workspaces, refusedId);
    await assertLog(d, id, acknowledged, 'on the full disk');

    // the agent's file goes: the daemon works again by itself
    fs.rmSync(filler);
    const ms = await awaitRecovery(d, id, acknowledged, 'after the disk was freed');
    t.diagnostic(`first append acknowledged ${ms} ms after the space was freed`);
    const created = await d.req('POST', '/api/conversations', { conversation_id: refusedId, initial_user_msg: 'created once there is room' });
    assert.equal(created.status, 200, created.text);
    assert.equal(created.body.message, null, 'a new conversation: the refused create left nothing to join');
    const first = (await eventsOf(d, refusedId)).filter((e) => e.kind === 'MessageEvent');
    assert.equal(first[0]?.seq, 1, 'its first message is seq 1');
    assert.equal(first[0]?.llm_message.content[0].text, 'created once there is room');
    await waitFor(() => reserveReady(dataDir), 'the reserve to be made again', 30_000);
    await waitFor(() => d.output.some((l) => l.includes('disk pressure over')), 'the end of the pressure to be reported', 30_000);
    await waitFor(async () => (await unindexed(d)) === 0, 'the index to take every committed event', 30_000);
    for (let i = 0; i < 3; i++) {
      const text = `after ${i}`;
      assert.equal((await send(d, id, text)).status, 200);
      acknowledged.push(text);
    }
    await assertLog(d, id, acknowledged, 'after recovery');

    // and the same after a restart: what was acknowledged, nothing else
    await d.stop();
    d = await start();
    await assertLog(d, id, acknowledged, 'after a restart');
    const ids = (await d.req('GET', '/api/conversations?limit=100')).body.items.map((c: any) => c.conversation_id).sort();
    assert.deepEqual(ids, [id, refusedId].sort(), 'no conversation left behind by a refused create');
    assert.deepEqual(
      (await eventsOf(d, refusedId)).filter((e) => e.kind === 'MessageEvent').map((e) => [e.seq, e.llm_message.content[0].text]),
      [[1, 'created once there is room']],
      'indexed: the refused attempts left no event under its id',
    );
  });

  test('SIGKILL on a full disk: the restart serves every acknowledged event, answers 503 while full, recovers by itself once freed, re-indexes everything', {
    timeout: 180_000,
  }, async (t) => {
    const { dataDir, workspaces, start, id, acknowledged, ...setUp } = await daemonOnTmpfs(t);
    let d = setUp.d;

    const filler = fillDisk(path.join(workspaces, id.replace(/-/g, '')));
    for (let i = 0; i < 5; i++) {
      const text = `while full ${i} ${PAD}`;
      const r = await send(d, id, text);
      assert.equal(r.status, 200, `the reserve takes it: ${r.text}`);
      acknowledged.push(text);
    }
    await d.stop('SIGKILL');

    // the restart on the still full disk: the index cannot be written, the journal is served from memory
    d = await start();
    await assertLog(d, id, acknowledged, 'restarted on the full disk');
    // Usually the index finds no room and the journal's events are served from memory (all of them: the
    // log above); SQLite may still have room in its WAL file's allocated blocks (seen once in a busy full
    // run) and index some or all of them. Either way every acknowledged event is served, in order.
    t.diagnostic(`restarted on the full disk: ${await unindexed(d)} events not indexed, served from memory`);
    const r = await send(d, id, 'refused after the restart');
    if (r.status === 200) acknowledged.push('refused after the restart');
    else {
      assert.equal(r.status, 503, r.text);
      assert.match(r.body.detail, DISK_REASON);
    }
    await assertCreateRefused(d, workspaces);

    fs.rmSync(filler);
    const ms = await awaitRecovery(d, id, acknowledged, 'after the disk was freed');
    t.diagnostic(`restarted on a full disk: first append acknowledged ${ms} ms after the space was freed`);
    await waitFor(async () => (await unindexed(d)) === 0, 'the index to take every committed event, those of before the crash too', 30_000);
    // the journal frames of before the crash reach the index: a clean stop then leaves no journal behind
    await d.stop();
    const generations = fs.readdirSync(path.join(dataDir, 'journal')).filter((f) => f.endsWith('.log'));
    assert.deepEqual(generations, [], 'every journal generation was indexed and removed at the clean stop');
    d = await start();
    await assertLog(d, id, acknowledged, 'after the clean restart');
    assert.equal((await send(d, id, 'last')).status, 200);
    acknowledged.push('last');
    await assertLog(d, id, acknowledged, 'at the end');
  });
});

describe('PostgreSQL reports its disk full (SQLSTATE 53100)', { timeout: 120_000 }, () => {
  test('appends and creates answer 503 saying so (no server path), nothing is committed, and the daemon recovers by itself once the server has room', {
    timeout: 120_000,
  }, async (t) => {
    const db = await createTestDatabase();
    const admin = new pg.Client({ connectionString: db.url });
    let d: DaemonHandle | null = null;
    t.after(async () => {
      await admin.end().catch(() => {});
      await d?.stop('SIGKILL');
      await db.drop();
    });
    d = await startDaemon({ DATABASE_URL: db.url, SECRET_KEY: 'parley-test-secret-key', SANDBOX: 'none', LOG_LEVEL: 'info' });
    const id = (await d.req('POST', '/api/conversations', {})).body.conversation_id as string;
    assert.equal((await send(d, id, 'before')).status, 200);
    // the error PostgreSQL raises when it cannot extend a file (md.c), raised here by triggers: the
    // server's own disk cannot be filled safely on a shared machine
    await admin.connect();
    await admin.query(`CREATE FUNCTION disk_full() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
      RAISE EXCEPTION 'could not extend file "base/16384/16385": No space left on device' USING ERRCODE = '53100', HINT = 'Check free disk space.';
    END $$`);
    for (const table of ['events', 'conversations'])
      await admin.query(`CREATE TRIGGER disk_full BEFORE INSERT ON ${table} FOR EACH STATEMENT EXECUTE FUNCTION disk_full()`);
    for (let i = 0; i < 3; i++) {
      const r = await send(d, id, `refused ${i}`);
      assert.equal(r.status, 503, r.text);
      assert.equal(r.body.detail, 'PostgreSQL unavailable: the database server has no disk space left (SQLSTATE 53100 disk_full)');
    }
    const refusedId = crypto.randomUUID();
    const created = await d.req('POST', '/api/conversations', { conversation_id: refusedId, initial_user_msg: 'refused' });
    assert.equal(created.status, 503, created.text);
    assert.match(created.body.detail, /53100 disk_full/);
    assert.equal((await d.req('GET', `/api/conversations/${refusedId}`)).status, 404, 'the refused create left nothing');
    // the server has room again: the next statements succeed, seq goes on without a gap
    for (const table of ['events', 'conversations']) await admin.query(`DROP TRIGGER disk_full ON ${table}`);
    assert.equal((await send(d, id, 'after')).status, 200);
    const again = await d.req('POST', '/api/conversations', { conversation_id: refusedId, initial_user_msg: 'created' });
    assert.equal(again.status, 200, again.text);
    assert.equal(again.body.message, null, 'a new conversation');
    const events = await eventsOf(d, id);
    assert.deepEqual(
      events.map((e) => e.seq),
      events.map((_, i) => i + 1),
    );
    assert.deepEqual(
      events.filter((e) => e.kind === 'MessageEvent').map((e) => e.llm_message.content[0].text),
      ['before', 'after'],
    );
    assert.deepEqual(
      (await eventsOf(d, refusedId)).filter((e) => e.kind === 'MessageEvent').map((e) => [e.seq, e.llm_message.content[0].text]),
      [[1, 'created']],
    );
  });
});
