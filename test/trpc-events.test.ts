/**
 * The tRPC `events` subscription is as exact as the WebSocket: a resubscription with lastEventId
 * continues after that event with no gap and no duplicate; the live-only events the socket carries
 * (streamed text) come too; a subscriber that stops reading is ended with an error saying how to
 * resume, and resuming from there gets every event; a deleted conversation ends it.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import net from 'node:net';
import { after, before, describe, test } from 'node:test';
import { createParleyClient } from '../src/client.js';
import { startDaemon, waitFor, type DaemonHandle } from './support/daemon.js';
import { startScriptedLlm, type ScriptedLlm } from './support/scripted-llm.js';
import { connect } from './support/ws-client.js';

const KEY = 'trpc-events-key';
const H = { 'X-Session-API-Key': KEY };
let d: DaemonHandle;
let llm: ScriptedLlm;

before(async () => {
  llm = await startScriptedLlm();
  d = await startDaemon({ SESSION_API_KEY: KEY, WS_MAX_BUFFERED_BYTES: '262144', LLM_MODEL: 'openai/scripted', LLM_BASE_URL: llm.url, LLM_API_KEY: 'k' });
});
after(async () => {
  await d.stop();
  fs.rmSync(d.dataDir, { recursive: true, force: true });
  await llm.close();
});

const newConversation = async () => (await d.req('POST', '/api/conversations', {}, H)).body.conversation_id as string;
const send = async (id: string, text: string, run = false) => {
  const r = await d.req('POST', `/api/conversations/${id}/events`, { content: [{ type: 'text', text }], run }, H);
  assert.equal(r.status, 200, r.text);
};

function subscribe(input: Record<string, unknown>) {
  const client = createParleyClient({ url: d.url, apiKey: KEY });
  const events: any[] = [];
  const errors: any[] = [];
  const sub = client.events.subscribe(input as never, {
    onData: (e: any) => events.push(e.data ?? e),
    onError: (err) => errors.push(err),
  });
  return { events, errors, close: () => sub.unsubscribe() };
}
const seqs = (events: any[]) => events.filter((e) => e.seq !== undefined).map((e) => e.seq as number);

describe('tRPC events subscription', () => {
  test('lastEventId resumes after that event: no gap, no duplicate, then live', async () => {
    const id = await newConversation();
    for (let i = 0; i < 6; i++) await send(id, `m${i}`);
    const last = (await d.req('GET', `/api/conversations/${id}`, undefined, H)).body.last_seq as number;
    const s = subscribe({ conversation_id: id, lastEventId: '3' });
    await waitFor(() => seqs(s.events).at(-1) === last, 'the replay after seq 3');
    await send(id, 'live');
    await waitFor(() => s.events.some((e) => e.kind === 'MessageEvent' && e.llm_message.content[0].text === 'live'), 'a live event');
    const got = seqs(s.events);
    assert.deepEqual(
      got,
      Array.from({ length: got.length }, (_, i) => 4 + i),
    );
    s.close();
  });

  test('live-only events (streamed text) come as on the WebSocket', async () => {
    const id = await newConversation();
    const s = subscribe({ conversation_id: id });
    const ws = connect(`ws://127.0.0.1:${d.port}/sockets/events/${id}`, { headers: H });
    await ws.next((f) => f.key === 'full_state');
    await waitFor(async () => (await d.req('GET', `/api/conversations/${id}`, undefined, H)).status === 200, 'conversation');
    llm.push({ text: 'streamed answer in several words' });
    await send(id, 'say something', true);
    await ws.next((f) => f.kind === 'MessageEvent' && f.source === 'agent');
    await waitFor(() => s.events.some((e) => e.kind === 'MessageEvent' && e.source === 'agent'), 'the answer over tRPC');
    const deltas = (xs: any[]) =>
      xs
        .filter((e) => e.kind === 'StreamingDeltaEvent')
        .map((e) => e.content)
        .join('');
    assert.ok(deltas(ws.frames).length > 0, 'the socket got streamed text');
    assert.equal(deltas(s.events), deltas(ws.frames));
    assert.ok(s.events.filter((e) => e.kind === 'StreamingDeltaEvent').every((e) => e.seq === undefined));
    ws.close();
    s.close();
  });

  test('a subscriber that stops reading is ended with a resumable error; resuming gets every event', async () => {
    const id = await newConversation();
    // a raw SSE request that is read up to its first bytes and then not at all
    const input = encodeURIComponent(JSON.stringify({ conversation_id: id, after_seq: 0 }));
    const stalled = net.connect(d.port, '127.0.0.1');
    stalled.write(`GET /trpc/events?input=${input} HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\nX-Session-API-Key: ${KEY}\r\n\r\n`);
    await new Promise((r) => stalled.once('data', r));
    stalled.pause();
    let closed = false;
    stalled.on('close', () => (closed = true));
    const big = 'x'.repeat(60_000);
    for (let i = 0; i < 150; i++) await send(id, `${i}:${big}`);
    stalled.resume();
    const chunks: Buffer[] = [];
    stalled.on('data', (c) => chunks.push(c));
    await waitFor(() => Buffer.concat(chunks).includes('TOO_MANY_REQUESTS') || closed, 'the stalled subscriber ended', 30_000);
    const text = Buffer.concat(chunks).toString('utf8');
    assert.match(text, /TOO_MANY_REQUESTS/);
    const resumeAt = Number(/subscribe again with lastEventId \(or after_seq\) (\d+)/.exec(text)![1]);
    stalled.destroy();
    const last = (await d.req('GET', `/api/conversations/${id}`, undefined, H)).body.last_seq as number;
    const s = subscribe({ conversation_id: id, lastEventId: String(resumeAt) });
    await waitFor(() => seqs(s.events).at(-1) === last, 'the resumed subscriber caught up', 30_000);
    assert.deepEqual(
      seqs(s.events),
      Array.from({ length: last - resumeAt }, (_, i) => resumeAt + 1 + i),
    );
    s.close();
  });

  test('deleting the conversation ends its subscriptions', async () => {
    const id = await newConversation();
    const s = subscribe({ conversation_id: id, after_seq: 0 });
    await send(id, 'hello');
    await waitFor(() => s.events.some((e) => e.kind === 'MessageEvent'), 'an event');
    assert.equal((await d.req('DELETE', `/api/conversations/${id}`, undefined, H)).status, 200);
    await waitFor(() => s.errors.length > 0, 'the subscription ended');
    assert.match(String(s.errors[0]?.message), /deleted/i);
    s.close();
  });
});
