/**
 * What comes out of a sandbox is hostile input: the file service's channel attacked from inside real
 * sandboxes (bwrap), judged from the host.
 *
 * The daemon runs with a hostile stand-in in place of every conversation's file service
 * (test/support/hostile-file-service.ts): it passes honest requests to the real service and answers
 * a request for `/workspace/.attack/<kind>-<seed>` with what a compromised service could send —
 * a header of `null` or `{}` (as the answer, or when no request waits), replayed and reordered
 * answers, dense and oversized headers, oversized data, random bytes, truncated frames, fields of
 * the wrong type or range. The daemon must stay up with bounded memory (VmRSS from /proc), close
 * only the attacked conversation's sandbox with a SandboxProtocolError event each time, keep serving
 * the other conversations meanwhile, and serve the attacked one again afterwards.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { allEvents } from './support/conversation-api.js';
import { ROOT, startDaemon, tempDir, waitFor, type DaemonHandle } from './support/daemon.js';
import { ATTACKS, writeStandIn } from './support/hostile-file-service.js';

const ATTACKED = 4;
const ROUNDS = 40;

let d: DaemonHandle;
const rssKiB = () => Number(/VmRSS:\s+(\d+)/.exec(fs.readFileSync(`/proc/${d.proc.pid}/status`, 'utf8'))?.[1] ?? 0);

async function conversation(): Promise<string> {
  const r = await d.req('POST', '/api/conversations', {});
  assert.equal(r.status, 200, r.text);
  return r.body.conversation_id as string;
}

async function upload(id: string, p: string, content: Buffer): Promise<{ status: number; text: string }> {
  const form = new FormData();
  form.append('file', new Blob([new Uint8Array(content)]), 'f.bin');
  const r = await fetch(`${d.url}/api/file/upload?conversation_id=${id}&path=${encodeURIComponent(p)}`, { method: 'POST', body: form });
  return { status: r.status, text: await r.text() };
}

async function download(id: string, p: string): Promise<{ status: number; bytes: Buffer }> {
  const r = await fetch(`${d.url}/api/file/download?conversation_id=${id}&path=${encodeURIComponent(p)}`);
  return { status: r.status, bytes: Buffer.from(await r.arrayBuffer()) };
}

const protocolErrors = async (id: string) =>
  (await allEvents(d.req, id)).filter((e) => e.kind === 'ConversationErrorEvent' && e.code === 'SandboxProtocolError');

/** An honest round trip through the conversation's (real) file service. */
async function works(id: string, tag: string): Promise<void> {
  const content = Buffer.from(`${tag} ${'x'.repeat(1000)}\n`);
  const up = await upload(id, `/workspace/ok-${tag}.txt`, content);
  assert.equal(up.status, 200, `${tag}: ${up.text}`);
  const down = await download(id, `/workspace/ok-${tag}.txt`);
  assert.equal(down.status, 200, tag);
  assert.ok(down.bytes.equals(content), `${tag}: the bytes that went up came down`);
}

describe('the file channel attacked from inside real sandboxes', { timeout: 420_000 }, () => {
  before(async () => {
    const dir = tempDir('parley-stand-in-');
    const standIn = writeStandIn(dir);
    d = await startDaemon({
      SANDBOX: 'bwrap',
      SANDBOX_NETWORK: 'none',
      NODE_ENV: 'test',
      PARLEY_TEST_FILE_SERVICE: standIn,
      SANDBOX_RO_BINDS: [ROOT, fs.realpathSync(path.join(ROOT, 'node_modules')), dir].join(':'),
    });
  });
  after(() => d?.stop());

  for (const kind of ['null-late', 'empty-late'] as const) {
    test(`${kind === 'null-late' ? 'a 12-byte `null` frame' : 'a `{}` frame'} unrequested: that sandbox closes with an event, the daemon goes on`, async () => {
      const id = await conversation();
      const other = await conversation();
      await works(id, 'before');
      const r = await download(id, `/workspace/.attack/${kind}-1`);
      assert.ok(r.status < 500, `the request it followed was answered (${r.status})`);
      const ev = await waitFor(async () => (await protocolErrors(id))[0], 'the SandboxProtocolError event');
      assert.match(ev.detail, /no request waited/);
      assert.match(ev.detail, /sandbox was closed/);
      assert.equal((await d.req('GET', '/health')).status, 200);
      assert.equal(d.proc.exitCode, null, 'the daemon is up');
      await works(other, `other-${kind}`);
      await works(id, `after-${kind}`);
      assert.deepEqual(await protocolErrors(other), []);
    });
  }

  test(`${ATTACKED} conversations × ${ROUNDS} attacks of every kind, beside an honest one: the daemon stays up with bounded memory`, async (t) => {
    const honest = await conversation();
    const attacked = await Promise.all(Array.from({ length: ATTACKED }, conversation));
    await works(honest, 'warm');
    for (const id of attacked) await works(id, 'warm');
    const base = rssKiB();
    let peak = base;
    const sampler = setInterval(() => (peak = Math.max(peak, rssKiB())), 10);
    const kinds = Object.keys(ATTACKS);
    const expected = new Map<string, number>();
    const statuses = new Map<number, number>();
    const log = new Map<string, string[]>();
    let done = false;
    let honestRounds = 0;
    // the honest conversation works all along
    const honestLoop = (async () => {
      while (!done) await works(honest, `honest-${honestRounds++}`);
    })();
    try {
      await Promise.all(
        attacked.map(async (id, c) => {
          for (let i = 0; i < ROUNDS; i++) {
            const kind = kinds[(i * 7 + c * 3) % kinds.length]!;
            const p = `/workspace/.attack/${kind}-${c * 1000 + i}`;
            // downloads open the file, uploads create one: two kinds of request attacked
            const status = i % 2 === 0 ? (await download(id, p)).status : (await upload(id, p, Buffer.from('payload'))).status;
            statuses.set(status, (statuses.get(status) ?? 0) + 1);
            log.set(id, [...(log.get(id) ?? []), `${i}:${kind}:${status}`]);
            assert.ok(status < 500 || status === 503, `${kind}: ${status}`);
            if (ATTACKS[kind]!.fault) {
              expected.set(id, (expected.get(id) ?? 0) + 1);
              // each violation is one event; the next round starts the sandbox again
              await waitFor(async () => (await protocolErrors(id)).length >= expected.get(id)!, `the event of ${kind} in round ${i}`, 30_000);
            }
          }
        }),
      );
    } finally {
      done = true;
      clearInterval(sampler);
      await honestLoop;
    }
    t.diagnostic(`statuses ${JSON.stringify([...statuses])}; honest round trips meanwhile: ${honestRounds}; VmRSS ${base >> 10} → peak ${peak >> 10} MiB`);
    assert.equal(d.proc.exitCode, null, 'the daemon is up');
    assert.ok(honestRounds > 0, 'the honest conversation was served during the attack');
    for (const id of attacked) {
      const events = await protocolErrors(id);
      assert.equal(
        events.length,
        expected.get(id),
        `one event per violation, none for a legal answer; rounds ${log.get(id)?.join(' ')}; events: ${events.map((e) => e.detail).join(' | ')}`,
      );
      for (const e of events) assert.match(e.detail, /^the file service /);
      await works(id, 'after');
    }
    assert.deepEqual(await protocolErrors(honest), [], 'the honest conversation was never told of a violation');
    // an 8 MiB header of `[[],…]` once cost +198 MiB parsed; refused at its length, nothing is buffered
    assert.ok(peak - base < 160 * 1024, `VmRSS grew ${(peak - base) >> 10} MiB (from ${base >> 10} MiB)`);
  });
});
