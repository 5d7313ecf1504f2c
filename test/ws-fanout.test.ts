/**
 * The socket's hand-off from its replay to its conversation's uWS topic (bridge/socket.ts,
 * bridge/topics.ts), attacked: hundreds of sockets open (live, after_seq, resend_mode=all, JSON and
 * msgpack) while events are appended as fast as the daemon takes them; each must see every seq from
 * where it asked exactly once, in order — on one node, and on a node of a cluster whose events come
 * from two others over NATS. And subscribers that stop reading: each is closed with 1013
 * after a run of seqs without a hole (nothing dropped silently), while the others on the same topic
 * get everything; each resumes with after_seq.
 */
import assert from 'node:assert/strict';
import net from 'node:net';
import { after, before, test } from 'node:test';
import { unpack } from 'msgpackr';
import { startCluster } from './support/cluster.js';
import { startDaemon, waitFor, type DaemonHandle } from './support/daemon.js';
import { connect, type Frames } from './support/ws-client.js';
import { FrameReader } from './support/ws-frames.js';

let d: DaemonHandle;

before(async () => {
  d = await startDaemon({ SANDBOX: 'none', WS_MAX_SUBSCRIBERS: '1000', WS_MAX_BUFFERED_BYTES: '262144' });
});
after(async () => {
  await d.stop();
});

const newConversation = async () => (await d.req('POST', '/api/conversations', {})).body.conversation_id as string;
const sendTo = async (node: DaemonHandle, id: string, text: string) => {
  const r = await node.req('POST', `/api/conversations/${id}/events`, { content: [{ type: 'text', text }] });
  assert.equal(r.status, 200, r.text);
};
const send = (id: string, text: string) => sendTo(d, id, text);
const lastSeqOn = async (node: DaemonHandle, id: string) => (await node.req('GET', `/api/conversations/${id}`)).body.last_seq as number;
const lastSeq = (id: string) => lastSeqOn(d, id);

/**
 * `count` sockets open on `readerNode` (live, after_seq, resend_mode=all; JSON and msgpack) while
 * four writers append through `writerNodes`; then each must hold every seq from where it asked to
 * the end, once, in order. Returns how many events were appended meanwhile and the last seq.
 */
async function handOff(writerNodes: DaemonHandle[], readerNode: DaemonHandle, id: string, count: number): Promise<{ sent: number; end: number }> {
  let writing = true;
  let sent = 0;
  // four writers at once: commits of several events per turn, published while sockets replay and hand over
  const writers = Array.from({ length: 4 }, async (_, w) => {
    while (writing) await sendTo(writerNodes[w % writerNodes.length]!, id, `w${w} ${sent++}`);
  });
  const sockets: { s: Frames; from: number | 'live'; binary: boolean }[] = [];
  try {
    for (let i = 0; i < count; i++) {
      const binary = i % 3 === 0;
      const kind = i % 4;
      const from = kind === 0 ? 'live' : kind === 1 ? 0 : Math.max(0, (await lastSeqOn(readerNode, id)) - (i % 37));
      const q = [binary ? 'encoding=msgpack' : '', from === 'live' ? '' : kind === 1 ? 'resend_mode=all' : `after_seq=${from}`].filter(Boolean).join('&');
      sockets.push({ s: connect(`ws://127.0.0.1:${readerNode.port}/sockets/events/${id}${q ? `?${q}` : ''}`), from, binary });
      // a few at a time: openings spread over the appends
      if (i % 10 === 9) await Promise.all(sockets.slice(-10).map((x) => x.s.opened));
    }
    await Promise.all(sockets.map((x) => x.s.opened));
    await waitFor(() => sockets.every((x) => x.s.frames.length > 0), 'every snapshot', 60_000);
  } finally {
    writing = false;
    await Promise.all(writers);
  }
  // a marker after everything: once a socket has it, it has every frame before it (one socket, in order)
  await sendTo(writerNodes[0]!, id, 'marker');
  const end = await lastSeqOn(writerNodes[0]!, id);
  await waitFor(() => sockets.every((x) => x.s.frames.some((f) => f.seq === end)), `seq ${end} on every socket`, 120_000);
  for (const [i, { s, from, binary }] of sockets.entries()) {
    assert.equal(s.frames[0].key, 'full_state', `socket ${i}: the snapshot first`);
    assert.equal(s.closed, null, `socket ${i} is open`);
    const seqs = s.frames.slice(1).map((f) => f.seq);
    const first = from === 'live' ? s.frames[0].value.last_seq + 1 : from + 1;
    assert.deepEqual(
      seqs,
      Array.from({ length: end - first + 1 }, (_, k) => first + k),
      `socket ${i} (${binary ? 'msgpack' : 'json'}, from ${from}): every seq from ${first} to ${end} once, in order`,
    );
    if (binary) assert.ok(s.frames.slice(1).every((f) => f.__binary));
    s.close();
  }
  return { sent, end };
}

test('hundreds of sockets opening while events are appended: each sees every seq from where it asked exactly once, in order', {
  timeout: 170_000,
}, async () => {
  const id = await newConversation();
  for (let i = 0; i < 40; i++) await send(id, `before ${i}`);
  const { sent, end } = await handOff([d], d, id, 300);
  console.log(`300 sockets, ${sent} events appended while they opened, seq ${end} at the end`);
});

test('across nodes (PostgreSQL + NATS): sockets on one node hand over while two other nodes append', { timeout: 170_000 }, async (t) => {
  // a socket's store read can see a commit before NATS brought it to its node's topic: the hand-off waits for it
  const c = await startCluster((f) => t.after(f), 3, { SANDBOX: 'none', WS_MAX_SUBSCRIBERS: '1000' });
  const [n1, n2, n3] = c.nodes as [DaemonHandle, DaemonHandle, DaemonHandle];
  const id = (await n1.req('POST', '/api/conversations', {})).body.conversation_id as string;
  for (let i = 0; i < 20; i++) await sendTo(n1, id, `before ${i}`);
  const { sent, end } = await handOff([n1, n2], n3, id, 120);
  console.log(`120 sockets on a third node, ${sent} events appended through two others meanwhile, seq ${end} at the end`);
});

/** A raw client that completes the handshake and then reads nothing until told to. */
async function stalled(id: string, query = ''): Promise<{ reader: FrameReader; closed: Promise<void>; read(): void }> {
  const sock = net.connect(d.port, '127.0.0.1');
  sock.write(
    `GET /sockets/events/${id}${query} HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n` +
      'Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n',
  );
  const reader = new FrameReader(1 << 20);
  const first = await new Promise<Buffer>((r) => sock.once('data', r));
  reader.push(first);
  sock.pause();
  const closed = new Promise<void>((r) => sock.once('close', () => r()));
  return {
    reader,
    closed,
    read() {
      sock.on('data', (c: Buffer) => reader.push(c));
      sock.resume();
    },
  };
}

test('subscribers that stop reading are closed with 1013 after a run of seqs without a hole; the others on the topic get every event', {
  timeout: 170_000,
}, async () => {
  const id = await newConversation();
  await send(id, 'first');
  const slow = [await stalled(id), await stalled(id, '?encoding=msgpack'), await stalled(id)];
  const healthy = [connect(`ws://127.0.0.1:${d.port}/sockets/events/${id}`), connect(`ws://127.0.0.1:${d.port}/sockets/events/${id}?encoding=msgpack`)];
  await Promise.all(healthy.map((h) => h.next((f) => f.key === 'full_state')));
  const big = 'x'.repeat(60_000);
  // small and large events (uWS batches frames under 16 KiB and writes larger ones at once)
  for (let i = 0; i < 200; i++) await send(id, `${i}:${i % 2 ? big : 'small'}`);
  const end = await lastSeq(id);
  for (const h of healthy) {
    await waitFor(() => h.frames.some((f) => f.seq === end), 'the healthy subscriber has every event', 60_000);
    assert.deepEqual(
      h.frames.slice(1).map((f) => f.seq),
      Array.from({ length: end - 1 }, (_, k) => k + 2),
    );
  }
  for (const [i, s] of slow.entries()) {
    s.read();
    let closed = false;
    void s.closed.then(() => (closed = true));
    await waitFor(() => closed, `slow socket ${i} closed by the daemon`, 60_000);
    const frames = s.reader.frames;
    const close = Buffer.from(frames.at(-1)!, 'latin1');
    assert.ok(
      close.length >= 2 && close.readUInt16BE(0) === 1013,
      `slow socket ${i} was closed with 1013 (its last frame: ${close.subarray(0, 40).toString()})`,
    );
    const parse = (f: string) => (i === 1 ? unpack(Buffer.from(f, 'latin1')) : JSON.parse(f));
    assert.equal(parse(frames[0]!).key, 'full_state');
    const seqs = frames.slice(1, -1).map((f) => parse(f).seq as number);
    {
      assert.ok(seqs.length < end - 1, `slow socket ${i} did not get everything (${seqs.length})`);
      assert.deepEqual(
        seqs,
        Array.from({ length: seqs.length }, (_, k) => k + 2),
        `slow socket ${i}: a run without a hole before the close`,
      );
      // it resumes from the last seq it got, and gets the rest
      const resumed = connect(`ws://127.0.0.1:${d.port}/sockets/events/${id}?after_seq=${seqs.at(-1) ?? 1}`);
      await waitFor(() => resumed.frames.some((f) => f.seq === end), 'the resumed replay', 60_000);
      assert.deepEqual(
        resumed.frames.slice(1).map((f) => f.seq),
        Array.from({ length: end - (seqs.at(-1) ?? 1) }, (_, k) => (seqs.at(-1) ?? 1) + k + 1),
      );
      resumed.close();
    }
  }
  for (const h of healthy) {
    assert.equal(h.closed, null);
    h.close();
  }
});
