/** The WebSocket stream (docs/api.md) against a real daemon. */
import assert from 'node:assert/strict';
import net from 'node:net';
import { after, before, describe, test } from 'node:test';
import { startDaemon, sleep, waitFor, type DaemonHandle } from './support/daemon.js';
import { connect } from './support/ws-client.js';

const KEY = 'ws-test-key';
let d: DaemonHandle;
const H = { 'X-Session-API-Key': KEY };
const wsUrl = (id: string, q = '') => `ws://127.0.0.1:${d.port}/sockets/events/${id}${q ? `?${q}` : ''}`;
const send = (id: string, text: string) => d.req('POST', `/api/conversations/${id}/events`, { content: [{ text }] }, H);

before(async () => {
  d = await startDaemon({ SESSION_API_KEY: KEY, WS_MAX_BUFFERED_BYTES: '262144' });
});
after(async () => {
  await d.stop();
});

async function newConversation(): Promise<string> {
  return (await d.req('POST', '/api/conversations', {}, H)).body.conversation_id;
}

describe('auth and addressing', () => {
  test('header, query and first-frame auth all work', async () => {
    const id = await newConversation();
    const a = connect(wsUrl(id), { headers: H });
    const b = connect(wsUrl(id, `session_api_key=${KEY}`));
    const c = connect(wsUrl(id));
    await c.opened;
    c.send({ type: 'auth', session_api_key: KEY });
    for (const s of [a, b, c]) {
      const first = await s.next(() => true, 'first frame');
      assert.equal(first.kind, 'ConversationStateUpdateEvent');
      assert.equal(first.key, 'full_state');
      s.close();
    }
  });
  test('a bad key is refused (handshake or 4001); unknown conversation closes 4004', async () => {
    const id = await newConversation();
    const bad = connect(wsUrl(id, 'session_api_key=wrong'));
    await assert.rejects(bad.opened, /401/);
    const badFrame = connect(wsUrl(id));
    await badFrame.opened;
    badFrame.send({ type: 'auth', session_api_key: 'wrong' });
    assert.equal((await badFrame.waitClose()).code, 4001);
    const unknown = connect(wsUrl('00000000-0000-0000-0000-000000000001'), { headers: H });
    assert.equal((await unknown.waitClose()).code, 4004);
    const garbage = connect(wsUrl('not-a-uuid'), { headers: H });
    assert.equal((await garbage.waitClose()).code, 4004);
  });
});

describe('snapshot, replay and live', () => {
  test('full_state first, with last_seq; then live events in order', async () => {
    const id = await newConversation();
    await send(id, 'before');
    const s = connect(wsUrl(id), { headers: H });
    const snap = await s.next(() => true);
    assert.equal(snap.key, 'full_state');
    assert.equal(snap.value.last_seq, 1);
    assert.equal(snap.seq, undefined);
    await send(id, 'live1');
    await send(id, 'live2');
    await waitFor(() => s.frames.length >= 3, 'live frames');
    assert.deepEqual(
      s.frames.slice(1).map((f) => [f.seq, f.llm_message.content[0].text]),
      [
        [2, 'live1'],
        [3, 'live2'],
      ],
    );
    s.close();
  });
  test('after_seq resumes exactly, with no gap and no duplicate while appends race the replay', async () => {
    const id = await newConversation();
    for (let i = 0; i < 600; i++) await send(id, `m${i}`);
    const writer = (async () => {
      for (let i = 600; i < 900; i++) await send(id, `m${i}`);
    })();
    const s = connect(wsUrl(id, 'after_seq=100'), { headers: H });
    await writer;
    await waitFor(() => s.frames.some((f) => f.seq === 900), 'seq 900', 20_000);
    // a marker sent after: once it arrived, every frame before it has (one socket, in order)
    await send(id, 'marker');
    await waitFor(() => s.frames.some((f) => f.seq === 901), 'the marker', 20_000);
    const seqs = s.frames.slice(1).map((f) => f.seq);
    assert.deepEqual(
      seqs,
      Array.from({ length: 801 }, (_, i) => i + 101),
    );
    s.close();
  });
  test('resend_mode=all and resend_mode=since', async () => {
    const id = await newConversation();
    await send(id, 'one');
    await sleep(20);
    const mid = new Date().toISOString();
    await sleep(20);
    await send(id, 'two');
    const all = connect(wsUrl(id, 'resend_mode=all'), { headers: H });
    await waitFor(() => all.frames.length >= 3, 'replay');
    assert.deepEqual(
      all.frames.slice(1).map((f) => f.seq),
      [1, 2],
    );
    const since = connect(wsUrl(id, `resend_mode=since&after_timestamp=${encodeURIComponent(mid)}`), { headers: H });
    await waitFor(() => since.frames.length >= 2, 'since replay');
    await send(id, 'three');
    await waitFor(() => since.frames.some((f) => f.seq === 3), 'the live event after the replay');
    assert.deepEqual(
      since.frames.slice(1).map((f) => f.seq),
      [2, 3],
    );
    all.close();
    since.close();
  });
  test('encoding=msgpack sends one binary frame per event, same object', async () => {
    const id = await newConversation();
    await send(id, 'packed');
    const s = connect(wsUrl(id, 'encoding=msgpack&resend_mode=all'), { headers: H });
    const ev = await s.next((f) => f.kind === 'MessageEvent');
    assert.equal(ev.__binary, true);
    assert.equal(ev.seq, 1);
    assert.equal(ev.llm_message.content[0].text, 'packed');
    const rest = await d.req('GET', `/api/conversations/${id}/events/${ev.id}`, undefined, H);
    const { __binary, ...plain } = ev;
    assert.deepEqual(plain, rest.body);
    s.close();
  });
});

describe('client frames', () => {
  test('a SendMessageRequest or LLM message frame is a send; invalid frames get ServerErrorEvent and the socket stays open', async () => {
    const id = await newConversation();
    const s = connect(wsUrl(id), { headers: H });
    await s.next((f) => f.key === 'full_state');
    s.send({ role: 'user', content: [{ type: 'text', text: 'from socket' }] });
    const got = await s.next((f) => f.kind === 'MessageEvent');
    assert.equal(got.llm_message.content[0].text, 'from socket');
    s.send({ role: 'user', content: 'plain string content' });
    await s.next((f) => f.kind === 'MessageEvent' && f.llm_message.content[0].text === 'plain string content');
    s.ws.send('{not json');
    const e1 = await s.next((f) => f.kind === 'ServerErrorEvent');
    assert.ok(e1.code && e1.detail);
    s.send({ role: 'wizard', content: [] });
    await waitFor(() => s.frames.filter((f) => f.kind === 'ServerErrorEvent').length >= 2, 'second error');
    s.send([1, 2]);
    await waitFor(() => s.frames.filter((f) => f.kind === 'ServerErrorEvent').length >= 3, 'third error');
    const count = async () => (await d.req('GET', `/api/conversations/${id}/events/count`, undefined, H)).body;
    const before = await count();
    s.send({ nonsense: true });
    await waitFor(() => s.frames.filter((f) => f.kind === 'ServerErrorEvent').length >= 4, 'fourth error: a frame with neither content nor role');
    assert.match(s.frames.filter((f) => f.kind === 'ServerErrorEvent')[3].detail, /content|role/);
    assert.equal(await count(), before, 'no empty message was appended');
    assert.equal(s.closed, null);
    s.send({ content: [{ text: 'still works' }] });
    await s.next((f) => f.kind === 'MessageEvent' && f.llm_message.content[0].text === 'still works');
    assert.equal(s.frames.filter((f) => f.kind === 'MessageEvent' && f.llm_message.content.length === 0).length, 0, 'no empty message anywhere in the stream');
    s.close();
  });
});

/** `parley_ws_dropped_subscribers_total` as /metrics shows it. */
async function droppedCount(): Promise<number> {
  const r = await fetch(`${d.url}/metrics`, { headers: H });
  const m = /^parley_ws_dropped_subscribers_total (\S+)$/m.exec(await r.text());
  assert.ok(m, 'the counter is exposed');
  return Number(m[1]);
}

describe('slow subscribers', () => {
  test('a stalled client is closed with 1013 alone; others keep receiving; it can resume with after_seq', async () => {
    const id = await newConversation();
    const droppedBefore = await droppedCount();
    // a raw client that completes the handshake and then never reads
    const stalled = net.connect(d.port, '127.0.0.1');
    stalled.write(
      `GET /sockets/events/${id} HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n` +
        `Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nX-Session-API-Key: ${KEY}\r\n\r\n`,
    );
    await new Promise((r) => stalled.once('data', r));
    stalled.pause();
    const healthy = connect(wsUrl(id), { headers: H });
    await healthy.next((f) => f.key === 'full_state');
    const big = 'x'.repeat(60_000);
    let closeSeen = false;
    stalled.on('close', () => (closeSeen = true));
    for (let i = 0; i < 150; i++) await send(id, `${i}:${big}`);
    await waitFor(() => healthy.frames.filter((f) => f.kind === 'MessageEvent').length === 150, 'healthy got all', 20_000);
    // the stalled socket was given up on by the server: reading it now ends in a close frame 1013
    stalled.resume();
    const chunks: Buffer[] = [];
    stalled.on('data', (c) => chunks.push(c));
    await waitFor(() => closeSeen, 'stalled socket closed', 15_000);
    const raw = Buffer.concat(chunks);
    assert.ok(raw.includes(Buffer.from([0x88])), 'a close frame was sent');
    const idx = raw.lastIndexOf(Buffer.from([0x88]));
    assert.equal(raw.readUInt16BE(idx + 2), 1013);
    assert.equal((await droppedCount()) - droppedBefore, 1, 'parley_ws_dropped_subscribers_total counts it, and only it');
    // resume from where it could have stopped
    const resumed = connect(wsUrl(id, 'after_seq=140'), { headers: H });
    await waitFor(() => resumed.frames.length >= 11, 'resumed replay');
    assert.deepEqual(
      resumed.frames.slice(1).map((f) => f.seq),
      [141, 142, 143, 144, 145, 146, 147, 148, 149, 150],
    );
    healthy.close();
    resumed.close();
  });
});
