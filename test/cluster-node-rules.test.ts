/**
 * The cluster's lease rules (src/cluster/leases.ts) and the node in front of the service
 * (src/cluster/node.ts, wired by src/cluster/index.ts) without a daemon: two nodes built in this
 * process on a PostgreSQL database of their own (dropped after) and a nats-server of their own. Acquire, renew, expiry handing the lease over, another
 * node's lease refusing; a run routed to the holder, taken here when nobody holds it, refused when
 * the holder does not answer; a dead node's conversation taken over; a lost lease stopping the loop.
 */
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import { after, before, describe, test } from 'node:test';
import { Leases } from '../src/cluster/leases.js';
import { ConflictError, UnavailableError } from '../src/errors.js';
import { isoTime } from '../src/iso-time.js';
import { workspacePath } from '../src/sandbox/workspace-dir.js';
import { PostgresStore } from '../src/store/postgres.js';
import { startNats, type NatsServer } from './support/cluster.js';
import { coreParts, gate, statusTrail, type CoreParts } from './support/core-parts.js';
import { waitFor } from './support/daemon.js';
import { createTestDatabase, type TestDatabase } from './support/postgres.js';
import { startScriptedLlm, type ScriptedLlm } from './support/scripted-llm.js';

let db: TestDatabase;
let nats: NatsServer;
const ends: (() => unknown)[] = [];
/** The schema (migrated on open) and a pool to look at the leases directly. */
let store: PostgresStore;
let llm: ScriptedLlm;

before(async () => {
  db = await createTestDatabase();
  store = await PostgresStore.open(db.url);
  llm = await startScriptedLlm();
  nats = await startNats((fn) => ends.push(fn));
});
after(async () => {
  await store?.close();
  await db?.drop();
  await llm?.close();
  for (const fn of ends) await fn();
});

const record = (status: string) => ({
  id: crypto.randomUUID() as string,
  title: null,
  created_at: isoTime(),
  updated_at: isoTime(),
  execution_status: status,
  data: {},
});
/** Waits until the lease on `id` has no live holder (expired or released). */
const noHolder = (leases: Leases, id: string) => waitFor(async () => (await leases.owner(id)) === null, 'the lease to go', 20_000);

describe('Leases', { timeout: 30_000 }, () => {
  test('acquire takes a free lease; a live one of another node refuses; the holder takes it again; release by another node does nothing', async () => {
    const a = new Leases(store.pool, 'lease-a', 60_000);
    const b = new Leases(store.pool, 'lease-b', 60_000);
    const id = crypto.randomUUID();
    assert.equal(await a.owner(id), null);
    assert.equal(await a.acquire(id), true);
    assert.equal(await b.acquire(id), false);
    assert.equal(await a.acquire(id), true, 'the holder keeps it');
    assert.equal(await b.owner(id), 'lease-a');
    await b.release(id);
    assert.equal(await a.owner(id), 'lease-a', 'only the holder releases');
    await a.release(id);
    assert.equal(await a.owner(id), null);
    assert.equal(await b.acquire(id), true, 'free again: anyone takes it');
    await b.release(id);
  });

  test("expiry hands the lease over: after the TTL another node takes it, and the old holder's renewal reports it lost", async () => {
    const a = new Leases(store.pool, 'lease-a', 300);
    const b = new Leases(store.pool, 'lease-b', 60_000);
    const [id, kept] = [crypto.randomUUID(), crypto.randomUUID()];
    assert.equal(await a.acquire(id), true);
    assert.deepEqual(await a.renew([id]), [], 'renewed in time');
    await noHolder(b, id);
    assert.equal(await b.acquire(id), true);
    assert.equal(await b.owner(id), 'lease-b');
    assert.equal(await a.acquire(kept), true);
    assert.deepEqual(await a.renew([id, kept]), [id], 'the one taken over is lost, the other renewed');
    assert.equal(await a.acquire(id), false);
    await b.release(id);
    await a.release(kept);
  });

  test("releaseAll voids this node's leases only; orphans are conversations shown running without a live lease", async () => {
    const a = new Leases(store.pool, 'lease-a', 60_000);
    const b = new Leases(store.pool, 'lease-b', 60_000);
    const running = record('running');
    const held = record('running');
    const idle = record('idle');
    for (const r of [running, held, idle]) await store.createConversation(r);
    await a.acquire(running.id);
    await b.acquire(held.id);
    await a.acquire(idle.id);
    const orphans = async () => (await a.orphans()).filter((id) => [running.id, held.id, idle.id].includes(id));
    assert.deepEqual(await orphans(), []);
    await a.releaseAll();
    assert.equal(await a.owner(running.id), null);
    assert.equal(await a.owner(held.id), 'lease-b');
    assert.deepEqual(await orphans(), [running.id], 'running and unheld; the held one and the idle one are not');
    await b.releaseAll();
    assert.deepEqual((await orphans()).sort(), [running.id, held.id].sort());
    for (const r of [running, held, idle]) await store.deleteConversation(r.id);
  });
});

describe('ClusterNode (two nodes in this process)', { timeout: 180_000 }, () => {
  const TTL = 1500;
  let a: CoreParts & { cluster?: { leases: Leases } };
  let b: CoreParts & { cluster?: { leases: Leases } };
  /** A lease left under node-a's name before it started (a restart within the TTL). */
  const leftOver = crypto.randomUUID();
  const held = <T extends { cluster?: { leases: Leases } }>(p: T) => p.cluster!.leases;

  before(async () => {
    await new Leases(store.pool, 'node-a', 60_000).acquire(leftOver);
    const prefix = `parley_test_${crypto.randomBytes(4).toString('hex')}`;
    const node = (nodeId: string) => coreParts({ llmUrl: llm.url, cluster: { databaseUrl: db.url, natsUrl: nats.url, prefix, nodeId, ttlMs: TTL } });
    a = await node('node-a');
    b = await node('node-b');
  });
  after(async () => {
    await a?.close();
    await b?.close();
  });

  /** An idle conversation in the shared store that no node holds (nor prepares). */
  async function unheld(): Promise<string> {
    const rec = record('idle');
    await store.createConversation(rec);
    return rec.id;
  }
  function heldReply() {
    const g = gate();
    llm.push(async () => {
      await g.promise;
      return { text: 'held answer' };
    });
    return g;
  }

  test('a node starting voids the leases left under its name; a create holds the lease on the creating node', async () => {
    assert.equal(await held(b).owner(leftOver), null);
    const { id } = await a.ops.createConversation({});
    assert.equal(await held(b).owner(id), 'node-a');
    assert.equal(await held(b).acquire(id), false, "another node's live lease refuses");
    assert.equal((await b.conversations.get(id)).node_id, 'node-a');
    // released one renewal after the preparation ended (no run was asked for)
    await noHolder(held(a), id);
  });

  test("while node-a runs the loop, node-b forwards: a run gets node-a's conflict, a message with run reaches its loop, an interrupt stops it", async (t) => {
    const id = await unheld();
    const first = heldReply();
    const second = heldReply();
    t.after(() => (first.open(), second.open()));
    const before = llm.requests.length;
    await a.ops.run(id);
    assert.equal(await held(b).owner(id), 'node-a');
    // the first loop of this file: it loads the LLM client (compiled by tsx on first use), which took over
    // 20 s once in a full run beside two busy-looping processes (load 11)
    await llm.waitForRequests(before + 1, 90_000);
    await assert.rejects(b.ops.run(id), ConflictError);
    await b.ops.sendMessage(id, { role: 'user', content: [{ type: 'text', text: 'sent to node-b' }], run: true });
    first.open();
    await llm.waitForRequests(before + 2, 20_000);
    assert.match(JSON.stringify(llm.requests[before + 1]!.body.messages), /sent to node-b/, "node-a's loop took the message at its next step");
    assert.equal(a.runtime.isRunning(id), true);
    assert.equal(b.runtime.isRunning(id), false, 'node-b never ran it');
    await b.ops.interrupt(id);
    assert.equal(a.runtime.isRunning(id), false);
    assert.equal(a.conversations.status(id), 'paused');
    assert.deepEqual(await statusTrail(b.events, id), ['running', 'paused']);
  });

  test('nobody holds the lease: the node asked takes it and runs the loop; the lease goes once the loop has stopped', async () => {
    const id = await unheld();
    llm.push({ text: 'ran on b' });
    await b.ops.run(id);
    assert.equal(await held(a).owner(id), 'node-b');
    await waitFor(() => b.conversations.status(id) === 'finished' && !b.runtime.isRunning(id), 'the run on node-b to finish', 20_000);
    assert.equal(a.runtime.isRunning(id), false);
    assert.deepEqual(await statusTrail(a.events, id), ['running', 'finished']);
    await noHolder(held(a), id);
  });

  test("deleted via another node: what this node still runs of the conversation (its shell's background job) ends here, its workspace here goes", async () => {
    const id = await unheld();
    // a command line of its own, to find the background job among the host's processes
    const seconds = 600 + crypto.randomInt(1000);
    const jobs = () =>
      fs.readdirSync('/proc').filter((pid) => {
        try {
          return /^\d+$/.test(pid) && fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8') === `sleep\0${seconds}\0`;
        } catch {
          return false;
        }
      });
    llm.push({ toolCalls: [{ name: 'terminal', arguments: { command: `sleep ${seconds} > /dev/null 2>&1 &` } }] }, { text: 'started it' });
    await b.ops.run(id);
    await waitFor(() => b.conversations.status(id) === 'finished' && !b.runtime.isRunning(id), 'the run on node-b to finish', 30_000);
    assert.equal(jobs().length, 1, "node-b's shell runs the background job");
    const workspace = workspacePath(b.config.workspaceRoot, id);
    assert.ok(fs.existsSync(workspace));
    await noHolder(held(a), id); // node-b's loop has stopped: nobody holds the lease, node-a deletes it itself
    await a.ops.deleteConversation(id);
    await waitFor(() => jobs().length === 0, "node-b to end the deleted conversation's background job", 20_000);
    await waitFor(() => !fs.existsSync(workspace), "node-b's workspace of it to go", 20_000);
    assert.equal(b.conversations.loaded(id), undefined);
  });

  test('a holder that does not answer: a run is refused as unavailable; a message with run is kept without a run', async () => {
    const id = await unheld();
    const ghost = new Leases(store.pool, 'node-ghost', 60_000);
    assert.equal(await ghost.acquire(id), true);
    const before = llm.requests.length;
    await assert.rejects(b.ops.run(id), UnavailableError);
    await b.ops.sendMessage(id, { role: 'user', content: [{ type: 'text', text: 'kept anyway' }], run: true });
    const texts = (await a.events.after(id, 0)).filter((e) => e.kind === 'MessageEvent').map((e) => (e as any).llm_message.content[0].text);
    assert.deepEqual(texts, ['kept anyway']);
    assert.equal(a.runtime.isRunning(id) || b.runtime.isRunning(id), false);
    assert.equal(llm.requests.length, before);
    assert.equal(await held(a).owner(id), 'node-ghost');
    await ghost.release(id);
  });

  test('takeover: a conversation left running by a dead node is recovered once its lease expires (NodeLost, error) and its lease released', async () => {
    const rec = record('running');
    // the dead node's lease first: a running conversation with no lease is one any node may take over at once
    const dead = new Leases(store.pool, 'node-dead', 400);
    assert.equal(await dead.acquire(rec.id), true);
    await store.createConversation(rec);
    await waitFor(async () => (await store.getConversation(rec.id))?.execution_status === 'error', 'the takeover', 20_000);
    const evs = await a.events.after(rec.id, 0);
    assert.deepEqual(
      evs.map((e) => `${e.kind} ${(e as any).code ?? (e as any).value}`),
      ['ConversationErrorEvent NodeLost', 'ConversationStateUpdateEvent error'],
    );
    await noHolder(held(a), rec.id);
    assert.equal(a.runtime.isRunning(rec.id) || b.runtime.isRunning(rec.id), false, 'recovered, not run');
  });

  test('a lease lost while the loop runs (taken over after a missed renewal): the loop here stops and what it would still write is refused', async (t) => {
    const id = await unheld();
    const g = heldReply();
    t.after(() => g.open());
    const before = llm.requests.length;
    await a.ops.run(id);
    await llm.waitForRequests(before + 1, 20_000);
    assert.equal(a.runtime.isRunning(id), true);
    // the run's status and system prompt are committed beside its first LLM request, while the lease is still node-a's
    await waitFor(async () => (await a.events.after(id, 0)).some((e) => e.kind === 'SystemPromptEvent'), 'the first step written', 20_000);
    const count = (await a.events.after(id, 0)).length;
    // another node took the lease over (node-a's renewal came too late)
    await store.pool.query(`UPDATE leases SET node_id = 'node-thief', expires_at = now() + interval '1 hour' WHERE conversation_id = $1`, [id]);
    await waitFor(() => !a.runtime.isRunning(id), 'the loop on node-a to stop', 20_000);
    const evs = await b.events.after(id, 0);
    assert.equal(
      evs.length,
      count,
      `nothing more written: ${evs
        .slice(count)
        .map((e) => e.kind)
        .join(', ')}`,
    );
    assert.equal((await store.getConversation(id))?.execution_status, 'running', "the status is the new holder's to change");
    assert.equal(await held(a).owner(id), 'node-thief');
  });
});
