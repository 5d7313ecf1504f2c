/**
 * Memory under attack: what the daemon holds for clients that send large things, read
 * slowly or not at all, and for many loaded conversations, measured from the host (RSS in /proc) and
 * from the store. Split from fuzz.test.ts so that neither file nears the per-file time limit.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { test } from 'node:test';
import Database from 'better-sqlite3';
import WebSocket from 'ws';
import { type DaemonHandle, startDaemon, waitFor } from './support/daemon.js';
import { startScriptedLlm } from './support/scripted-llm.js';
import { waitStatus } from './support/conversation-api.js';
import { connect } from './support/ws-client.js';
import { clientFrame, FrameReader, within } from './support/ws-frames.js';

test('attack 12.4: loaded conversations are bounded (idle ones evicted, least recently used first) and large instructions stay in the store', async () => {
  const llm = await startScriptedLlm([{ text: 'answer' }]);
  const m = await startDaemon({ MAX_LOADED_CONVERSATIONS: '3', LLM_MODEL: 'openai/scripted', LLM_BASE_URL: llm.url, LLM_API_KEY: 'sk-scripted-key' });
  const gauge = async (name: string) => Number(new RegExp(`^${name} (\\d+)`, 'm').exec((await m.req('GET', '/metrics')).text)?.[1]);
  try {
    const instructions = (i: number) => `INSTRUCTIONS-${i} ${'i'.repeat(1024 * 1024)}`;
    const ids: string[] = [];
    for (let i = 0; i < 6; i++) {
      const r = await m.req('POST', '/api/conversations', { conversation_instructions: instructions(i) });
      assert.equal(r.status, 200, r.text);
      ids.push(r.body.conversation_id);
    }
    // (a conversation being prepared stays loaded; each is ready a moment after its creation)
    await waitFor(async () => (await gauge('parley_conversations_loaded')) <= 3, 'at most MAX_LOADED_CONVERSATIONS loaded');
    assert.ok(
      (await gauge('parley_conversations_loaded_bytes')) < 64 * 1024,
      `the 1 MiB instructions are not resident: ${await gauge('parley_conversations_loaded_bytes')} bytes`,
    );
    // an evicted conversation is loaded again on use, with everything it was created with
    for (const id of ids) assert.equal((await m.req('GET', `/api/conversations/${id}`)).status, 200);
    assert.equal(
      (await m.req('POST', `/api/conversations/${ids[0]}/events`, { role: 'user', content: [{ type: 'text', text: 'go' }], run: true })).status,
      200,
    );
    await waitStatus(m.req, ids[0]!, 'finished', 30_000);
    const system = JSON.stringify(llm.requests[0]!.body.messages[0]);
    assert.match(system, /INSTRUCTIONS-0 iii/, 'the instructions reached the LLM from the store');
    assert.ok((await gauge('parley_conversations_loaded')) <= 3);
  } finally {
    await m.stop();
    await llm.close();
    fs.rmSync(m.dataDir, { recursive: true, force: true });
  }
});

test('attack 12.4: events fit MAX_EVENT_BYTES: huge agent args/text cut (marked); larger client data 413; replay_json images obey the image rule', async () => {
  const MAX = 65_536;
  const llm = await startScriptedLlm([]);
  const m = await startDaemon({ MAX_EVENT_BYTES: String(MAX), LLM_MODEL: 'openai/scripted', LLM_BASE_URL: llm.url, LLM_API_KEY: 'sk-scripted-key' });
  try {
    // client data: two items each under the bound but together over it, and a replay_json item over it
    const id0 = (await m.req('POST', '/api/conversations', {})).body.conversation_id as string;
    const half = 'h'.repeat(40_000);
    const two = await m.req('POST', `/api/conversations/${id0}/events`, {
      role: 'user',
      content: [
        { type: 'text', text: half },
        { type: 'text', text: half },
      ],
      run: false,
    });
    assert.equal(two.status, 413, two.text);
    assert.match(two.text, /MAX_EVENT_BYTES/);
    const bigReplay = JSON.stringify([
      { kind: 'MessageEvent', source: 'user', llm_message: { role: 'user', content: [{ type: 'text', text: 'r'.repeat(80_000) }] } },
    ]);
    const rr = await m.req('POST', '/api/conversations', { replay_json: bigReplay });
    assert.equal(rr.status, 413, rr.text);
    assert.match(rr.text, /replay_json.*MAX_EVENT_BYTES/);
    for (const url of ['http://127.0.0.1/x.png', 'file:///etc/passwd']) {
      const ownFormat = JSON.stringify([
        { kind: 'MessageEvent', source: 'user', llm_message: { role: 'user', content: [{ type: 'image', image_urls: [url] }] } },
      ]);
      const openHands = JSON.stringify([{ action: 'message', source: 'user', args: { content: 'look', image_urls: [url] } }]);
      for (const replay_json of [ownFormat, openHands]) {
        const r = await m.req('POST', '/api/conversations', { replay_json });
        assert.equal(r.status, 422, r.text);
        assert.deepEqual(r.body.detail[0].loc, ['body', 'replay_json', 0]);
        assert.match(r.body.detail[0].msg, /image URLs must be https:\/\/, http:\/\/ or data:image/);
      }
    }
    // what the agent produces is cut, not refused: a 200 KB file written by a tool call, a 200 KB answer
    const r = await m.req('POST', '/api/conversations', {});
    const id = r.body.conversation_id as string;
    const ws = path.join(m.dataDir, 'workspaces', id.replace(/-/g, ''));
    const fileText = `FIRST\n${'line of the file\n'.repeat(12_500)}LAST\n`;
    llm.push(
      { toolCalls: [{ name: 'file_editor', arguments: { command: 'create', path: `${ws}/big.txt`, file_text: fileText } }] },
      { text: `BEGIN ${'answer '.repeat(30_000)} END` },
    );
    assert.equal(
      (await m.req('POST', `/api/conversations/${id}/events`, { role: 'user', content: [{ type: 'text', text: 'write it' }], run: true })).status,
      200,
    );
    await waitStatus(m.req, id, 'finished', 40_000);
    const res = await fetch(`${m.url}/api/conversations/${id}/events/search?limit=100`);
    const items = (JSON.parse(await res.text()) as { items: any[] }).items;
    for (const e of items) assert.ok(Buffer.byteLength(JSON.stringify(e)) <= MAX, `${e.kind} of ${Buffer.byteLength(JSON.stringify(e))} bytes`);
    const action = items.find((e) => e.kind === 'ActionEvent');
    assert.match(action.action.file_text, /^FIRST\n[\s\S]*bytes cut here: an event may hold at most 65536 bytes \(MAX_EVENT_BYTES\)[\s\S]*LAST\n$/);
    const answer = items.find((e) => e.kind === 'MessageEvent' && e.source === 'agent');
    assert.match(answer.llm_message.content[0].text, /^BEGIN answer[\s\S]*MAX_EVENT_BYTES[\s\S]*answer {2}END$/);
    assert.equal(fs.readFileSync(path.join(ws, 'big.txt'), 'utf8'), fileText, 'the tool ran with the whole arguments; only the log is cut');
  } finally {
    await m.stop();
    await llm.close();
    fs.rmSync(m.dataDir, { recursive: true, force: true });
  }
});

/** The daemon's resident memory in MiB, read from the host (/proc). */
const rssMiB = (pid: number) => {
  const m = /VmRSS:\s+(\d+)/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
  if (!m) throw new Error(`the daemon (pid ${pid}) has exited`);
  return Number(m[1]) / 1024;
};

/**
 * Waits until `pid`'s RSS has stopped growing for 1.5 s (what the daemon was doing is done), or until
 * the time `by` (ms since the epoch), whichever comes first.
 */
async function settledRss(pid: number, by: number): Promise<void> {
  let last = rssMiB(pid);
  let since = Date.now();
  await waitFor(
    () => {
      const now = rssMiB(pid);
      if (now > last + 1) (last = now), (since = Date.now());
      return Date.now() - since > 1500 || Date.now() > by;
    },
    'the daemon settling',
    30_000,
  );
}

/**
 * The memory V8 holds for a daemon started with `--inspect=127.0.0.1:0`, after a full collection made
 * through its inspector (what is still reachable, not what a lazy collector has not yet freed): the
 * heap in use plus the buffers outside it, in MiB, and the process's RSS then.
 */
async function liveMiB(d: DaemonHandle): Promise<{ live: number; rss: number }> {
  const url = d.output.map((l) => /Debugger listening on (ws:\/\/\S+)/.exec(l)?.[1]).find(Boolean);
  if (!url) throw new Error('the daemon was not started with --inspect');
  const ws = new WebSocket(url);
  try {
    await new Promise((resolve, reject) => ws.once('open', resolve).once('error', reject));
    let id = 0;
    const call = (method: string, params: object = {}) =>
      new Promise<any>((resolve) => {
        const mine = ++id;
        const onMessage = (m: WebSocket.RawData) => {
          const r = JSON.parse(m.toString());
          if (r.id === mine) ws.off('message', onMessage), resolve(r.result);
        };
        ws.on('message', onMessage);
        ws.send(JSON.stringify({ id: mine, method, params }));
      });
    await call('HeapProfiler.collectGarbage');
    await call('HeapProfiler.collectGarbage');
    const r = await call('Runtime.evaluate', { expression: 'JSON.stringify(process.memoryUsage())', returnByValue: true });
    const u = JSON.parse(r.result.value) as NodeJS.MemoryUsage;
    return { live: (u.heapUsed + u.external) / 1024 / 1024, rss: rssMiB(d.proc.pid!) };
  } finally {
    ws.close();
  }
}

/** Samples `pid`'s RSS every 20 ms until stopped; `peak()` is the highest seen. */
function rssSampler(pid: number) {
  let peak = rssMiB(pid);
  const timer = setInterval(() => (peak = Math.max(peak, rssMiB(pid))), 20);
  return { peak: () => peak, stop: () => clearInterval(timer) };
}

/**
 * A WebSocket client that reads only when told to, at most `bytes` at a time (the rest stays in the
 * kernel and then in the daemon): the first 200 bytes of each server frame are kept.
 */
function slowReader(port: number, p: string) {
  const sock = net.connect(port, '127.0.0.1');
  sock.on('error', () => {});
  sock.pause();
  sock.write(
    `GET ${p} HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: ` +
      `dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n`,
  );
  const reader = new FrameReader();
  return {
    frames: reader.frames,
    sock,
    /** Reads what the kernel holds, up to `bytes`; returns how much was read. */
    read(bytes: number): number {
      let n = 0;
      let c: Buffer | null;
      while (n < bytes && (c = sock.read()) !== null) {
        n += c.length;
        reader.push(c);
      }
      return n;
    },
  };
}

test('attack 12.4: a WebSocket replay of large events to a client that reads slowly waits for it: nothing dropped, daemon memory bounded', async () => {
  const MiB = 1024 * 1024;
  const N = 16;
  const w = await startDaemon({ MAX_EVENT_BYTES: String(3 * MiB), MAX_BODY_BYTES: String(4 * MiB), WS_MAX_BUFFERED_BYTES: String(MiB), SANDBOX: 'none' });
  try {
    const id = (await w.req('POST', '/api/conversations', {})).body.conversation_id as string;
    for (let i = 0; i < N; i++) {
      const r = await w.req('POST', `/api/conversations/${id}/events`, {
        role: 'user',
        content: [{ type: 'text', text: `${i}:${'m'.repeat(2 * MiB)}` }],
        run: false,
      });
      assert.equal(r.status, 200, r.text);
    }
    const before = rssMiB(w.proc.pid!);
    const rss = rssSampler(w.proc.pid!);
    const c = slowReader(w.port, `/sockets/events/${id}?resend_mode=all`);
    // the client reads nothing for a while: the replay must wait, not queue 32 MiB of frames
    const idle = Date.now();
    await waitFor(() => Date.now() - idle > 3000, 'three seconds without reading', 5000);
    const whilePaused = rss.peak() - before;
    // then reads 256 KiB every 20 ms (~12 MiB/s)
    const messages = () => c.frames.filter((f) => f.includes('"MessageEvent"'));
    let total = 0;
    const tick = setInterval(() => (total += c.read(256 * 1024)), 20);
    try {
      await waitFor(() => messages().length >= N || c.sock.destroyed, 'the whole replay', 60_000).catch((err) => {
        throw new Error(`${err.message}: ${total} bytes read, frames: ${c.frames.map((f) => f.slice(0, 60)).join(' | ')}`);
      });
    } finally {
      clearInterval(tick);
      rss.stop();
    }
    const got = messages().map((f) => Number(/"text":"(\d+):/.exec(f)?.[1]));
    assert.deepEqual(
      got,
      Array.from({ length: N }, (_, i) => i),
      'every event once, in order, none dropped',
    );
    assert.ok(whilePaused < 64, `the daemon grew ${whilePaused.toFixed(0)} MiB while the client did not read (the replay is ${2 * N} MiB)`);
    assert.ok(rss.peak() - before < 160, `peak +${(rss.peak() - before).toFixed(0)} MiB`);
    console.log(
      `replay of ${N} × 2 MiB to a slow reader: RSS +${whilePaused.toFixed(0)} MiB while it did not read, peak +${(rss.peak() - before).toFixed(0)} MiB`,
    );
    c.sock.destroy();
  } finally {
    await w.stop();
    fs.rmSync(w.dataDir, { recursive: true, force: true });
  }
});

test('attack 12.4: sockets awaiting auth frames have a byte budget over MAX_BODY_BYTES, from many addresses too: their uWS buffers stay bounded', async () => {
  const KEY = 'attack-test-key-preauth';
  const MiB = 1024 * 1024;
  const w = await startDaemon({ SESSION_API_KEY: KEY, MAX_BODY_BYTES: String(8 * MiB), SANDBOX: 'none' });
  try {
    const id = (await w.req('POST', '/api/conversations', {}, { 'x-session-api-key': KEY })).body.conversation_id as string;
    const p = `/sockets/events/${id}`;
    const upgrade = (localAddress: string) =>
      new Promise<{ sock: net.Socket; closed: Promise<void> } | number>((resolve) => {
        const sock = net.connect({ port: w.port, host: '127.0.0.1', localAddress });
        sock.on('error', () => resolve(0));
        const closed = new Promise<void>((r) => sock.once('close', () => r()));
        sock.write(
          `GET ${p} HTTP/1.1\r\nHost: 127.0.0.1:${w.port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: ` +
            `dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n`,
        );
        sock.once('data', (c: Buffer) => {
          const status = Number(c.toString('latin1').split(' ')[1]);
          if (status === 101) resolve({ sock, closed });
          else sock.destroy(), resolve(status);
        });
      });
    const before = rssMiB(w.proc.pid!);
    const rss = rssSampler(w.proc.pid!);
    // 8 MiB frames: 64 MiB / 8 MiB = 8 sockets at once in total, 4 per address; 8 addresses try 3 each
    const held: { sock: net.Socket; closed: Promise<void> }[] = [];
    const refused: number[] = [];
    for (let a = 2; a < 10; a++) {
      for (let k = 0; k < 3; k++) {
        const r = await upgrade(`127.0.0.${a}`);
        if (typeof r === 'number') refused.push(r);
        else held.push(r);
      }
    }
    assert.equal(held.length, 8, `${held.length} unauthenticated sockets held at once`);
    assert.deepEqual([...new Set(refused)], [429]);
    // each sends all of an 8 MiB "auth" frame but its last byte: uWS buffers it until the auth timeout ends the socket
    const frame = clientFrame(Buffer.alloc(8 * MiB - 64, 0x20));
    await Promise.all(held.map((h) => new Promise<void>((r) => h.sock.write(frame.subarray(0, frame.length - 1), () => r()))));
    // a socket that names its key at the upgrade is not held back meanwhile
    const ok = connect(`ws://127.0.0.1:${w.port}${p}`, { headers: { 'x-session-api-key': KEY } });
    await ok.next((f) => f.key === 'full_state');
    ok.close();
    await within(Promise.all(held.map((h) => h.closed)), 30_000, 'the auth timeout closing the held sockets');
    rss.stop();
    const grew = rss.peak() - before;
    console.log(`8 unauthenticated sockets with 8 MiB frames: RSS peak +${grew.toFixed(0)} MiB`);
    assert.ok(grew < 8 * 8 * 2 + 48, `RSS grew ${grew.toFixed(0)} MiB`);
    // once they are gone, another may wait for its auth frame again
    const again = await upgrade('127.0.0.2');
    assert.notEqual(typeof again, 'number');
    if (typeof again !== 'number') again.sock.destroy();
  } finally {
    await w.stop();
    fs.rmSync(w.dataDir, { recursive: true, force: true });
  }
});

/** The body of a `Transfer-Encoding: chunked` response. */
function dechunk(b: Buffer): Buffer {
  const out: Buffer[] = [];
  let i = 0;
  for (;;) {
    const eol = b.indexOf('\r\n', i);
    const size = parseInt(b.subarray(i, eol).toString('latin1'), 16);
    if (eol < 0 || Number.isNaN(size) || eol + 2 + size + 2 > b.length) throw new Error(`the chunked body was cut short after ${i} bytes`);
    if (!size) return Buffer.concat(out);
    out.push(b.subarray(eol + 2, eol + 2 + size));
    i = eol + 2 + size + 2;
  }
}

test('attack 12.4: an events/search page streams as it is read: clients not reading hold little daemon memory; each still gets the whole page', async () => {
  const KiB = 1024;
  const N = 80;
  const CLIENTS = 30;
  const s = await startDaemon({ SANDBOX: 'none' });
  try {
    const id = (await s.req('POST', '/api/conversations', {})).body.conversation_id as string;
    for (let i = 0; i < N; i++) {
      const r = await s.req('POST', `/api/conversations/${id}/events`, {
        role: 'user',
        content: [{ type: 'text', text: `${i}:${'p'.repeat(64 * KiB)}` }],
        run: false,
      });
      assert.equal(r.status, 200, r.text);
    }
    // a filtered search (a filter the store does not index) is bounded by bytes as well
    const filtered = await s.req('GET', `/api/conversations/${id}/events/search?limit=100&body=ppp`);
    assert.equal(filtered.status, 200);
    assert.ok(filtered.body.items.length < N && filtered.body.next_page_id, `${filtered.body.items.length} items, ${filtered.text.length} bytes`);
    assert.ok(filtered.text.length < 4.5 * 1024 * KiB, `a filtered page of ${filtered.text.length} bytes`);
    const before = rssMiB(s.proc.pid!);
    const rss = rssSampler(s.proc.pid!);
    // CLIENTS sockets ask for a 4 MiB page and read nothing
    const asked = Date.now();
    const clients = await Promise.all(
      Array.from(
        { length: CLIENTS },
        () =>
          new Promise<{ sock: net.Socket; chunks: Buffer[]; ended: Promise<void> }>((resolve) => {
            const sock = net.connect(s.port, '127.0.0.1', () => resolve({ sock, chunks, ended }));
            const chunks: Buffer[] = [];
            const ended = new Promise<void>((r) => sock.once('end', () => r()));
            sock.on('error', () => {});
            sock.pause();
            sock.on('data', (c: Buffer) => chunks.push(c));
            sock.write(`GET /api/conversations/${id}/events/search?limit=100 HTTP/1.1\r\nHost: 127.0.0.1:${s.port}\r\nConnection: close\r\n\r\n`);
          }),
      ),
    );
    // until the daemon's memory stops growing (what it does for them is done); at most 5 s from the
    // requests, since the daemon cuts a response its client took nothing of for 8-12 s (uWS's HTTP
    // timeout), and a busy machine can take longer than that to settle
    await settledRss(s.proc.pid!, asked + 5000);
    const held = rss.peak() - before;
    // then they read: each gets the whole page
    for (const c of clients) c.sock.resume();
    await within(Promise.all(clients.map((c) => c.ended)), 60_000, 'every response');
    rss.stop();
    for (const c of clients) {
      const raw = Buffer.concat(c.chunks);
      const split = raw.indexOf('\r\n\r\n');
      const head = raw.subarray(0, split).toString('latin1');
      let body: Buffer = raw.subarray(split + 4);
      assert.match(head, /transfer-encoding: chunked/i, 'a large page is written in parts as it is read');
      body = dechunk(body);
      const page = JSON.parse(body.toString()) as { items: any[]; next_page_id: string | null };
      assert.ok(page.items.length >= 60 && page.items.length < N, `${page.items.length} items`);
      assert.deepEqual(
        page.items.map((e) => Number(e.llm_message.content[0].text.split(':')[0])),
        page.items.map((_, i) => i),
      );
      assert.equal(page.next_page_id, String(page.items.at(-1).seq + 1));
    }
    console.log(
      `${CLIENTS} clients not reading a 4 MiB events/search page: RSS +${held.toFixed(0)} MiB while they did not read, peak ` +
        `+${(rss.peak() - before).toFixed(0)} MiB`,
    );
    assert.ok(held < 96, `the daemon held +${held.toFixed(0)} MiB for ${CLIENTS} clients that did not read`);
  } finally {
    await s.stop();
    fs.rmSync(s.dataDir, { recursive: true, force: true });
  }
});

test('a streamed page whose client takes nothing of it for 8-12 s is cut, visibly: it ends without its last chunk', async () => {
  const s = await startDaemon({ SANDBOX: 'none' });
  try {
    const id = (await s.req('POST', '/api/conversations', {})).body.conversation_id as string;
    for (let i = 0; i < 80; i++) {
      const text = `${i}:${'p'.repeat(64 * 1024)}`;
      const r = await s.req('POST', `/api/conversations/${id}/events`, { role: 'user', content: [{ type: 'text', text }], run: false });
      assert.equal(r.status, 200, r.text);
    }
    const sock = net.connect(s.port, '127.0.0.1');
    const chunks: Buffer[] = [];
    const closed = new Promise<void>((r) => sock.once('close', () => r()));
    sock.on('error', () => {});
    sock.pause();
    sock.on('data', (c: Buffer) => chunks.push(c));
    sock.write(`GET /api/conversations/${id}/events/search?limit=100 HTTP/1.1\r\nHost: 127.0.0.1:${s.port}\r\n\r\n`);
    const asked = Date.now();
    await waitFor(() => Date.now() - asked > 14_000, 'fourteen seconds without reading', 20_000);
    sock.resume();
    await within(closed, 30_000, 'the daemon closing the socket');
    const raw = Buffer.concat(chunks);
    assert.match(raw.subarray(0, 200).toString('latin1'), /^HTTP\/1.1 200 OK[\s\S]*transfer-encoding: chunked/i);
    assert.throws(() => dechunk(raw.subarray(raw.indexOf('\r\n\r\n') + 4)), /cut short/);
    // the daemon serves on, and a client that reads gets the page whole
    const page = await fetch(`${s.url}/api/conversations/${id}/events/search?limit=100`);
    assert.ok((JSON.parse(await page.text()) as { items: unknown[] }).items.length >= 60);
  } finally {
    await s.stop();
    fs.rmSync(s.dataDir, { recursive: true, force: true });
  }
});

test('attack 12.4: LRU idle conversation evicted first (per store), large fields not resident, 8 MiB-instruction creates freed by a full GC', async () => {
  const MiB = 1024 * 1024;
  const m = await startDaemon({ MAX_LOADED_CONVERSATIONS: '3', MAX_BODY_BYTES: String(10 * MiB), SANDBOX: 'none' }, undefined, {
    nodeArgs: ['--inspect=127.0.0.1:0'],
  });
  const gauge = async (name: string) => Number(new RegExp(`^${name} (\\d+)`, 'm').exec((await m.req('GET', '/metrics')).text)?.[1]);
  const title = async (id: string) => (await m.req('GET', `/api/conversations/${id}`)).body.title as string | null;
  try {
    const create = async (body: object = {}) => {
      const r = await m.req('POST', '/api/conversations', body);
      assert.equal(r.status, 200, r.text);
      return r.body.conversation_id as string;
    };
    const [a, b, c] = [await create(), await create(), await create()];
    // each idle and prepared (a conversation being prepared is never evicted), read in the order a, b, c
    for (const id of [a, b, c]) {
      await waitFor(async () => (await m.req('GET', `/api/conversations/${id}`)).body.setup?.phase === 'ready', `${id} ready`);
    }
    // a conversation without a title is shown with OpenHands' default one
    const untitled = (id: string) => `Conversation ${id.replace(/-/g, '').slice(0, 5)}`;
    assert.equal(await title(a), untitled(a)); // a is now the most recently used: b the least
    const d = await create();
    await waitFor(async () => (await gauge('parley_conversations_loaded')) <= 3, 'one evicted');
    // the store changes behind the daemon's back: only an evicted conversation is read from it again
    const db = new Database(path.join(m.dataDir, 'parley.db'));
    try {
      db.pragma('busy_timeout = 5000');
      db.prepare("UPDATE conversations SET title = 'changed in the store'").run();
    } finally {
      db.close();
    }
    assert.deepEqual([await title(a), await title(c), await title(d)], [untitled(a), untitled(c), untitled(d)], 'a, c and d stayed loaded');
    assert.equal(await title(b), 'changed in the store', 'b, the least recently used, was evicted and read again');
    // large fields stay in the store: 1 MiB of image URLs and 8 MiB instructions are not resident
    const png = `data:image/png;base64,${'A'.repeat(MiB)}`;
    const before = await liveMiB(m);
    const big: string[] = [];
    for (let i = 0; i < 16; i++) big.push(await create({ conversation_instructions: `${i}${'i'.repeat(8 * MiB - 8)}`, image_urls: [png] }));
    const loadedBytes = await gauge('parley_conversations_loaded_bytes');
    assert.ok(loadedBytes < 64 * 1024, `${loadedBytes} bytes of records resident`);
    // and nothing else of the 144 MiB the creates carried is still reachable (V8's heap and the buffers
    // outside it, after a full collection); how much of the freed memory goes back to the system, and when,
    // is V8's and malloc's choice: the RSS is printed, not bounded
    const after = await liveMiB(m);
    console.log(
      `16 creates with 8 MiB instructions and 1 MiB image URLs: ${loadedBytes} bytes of records resident; live heap and buffers ` +
        `${before.live.toFixed(1)} → ${after.live.toFixed(1)} MiB, RSS ${before.rss.toFixed(0)} → ${after.rss.toFixed(0)} MiB`,
    );
    assert.ok(after.live - before.live < 16, `live heap and buffers ${before.live.toFixed(1)} → ${after.live.toFixed(1)} MiB after 16 creates of 9 MiB`);
    // and each is still whole when read from the store
    assert.equal((await m.req('GET', `/api/conversations/${big[0]}`)).status, 200);
  } finally {
    await m.stop();
    fs.rmSync(m.dataDir, { recursive: true, force: true });
  }
});
