/**
 * Bytes in, bytes held: no request can make the daemon hold more than a small multiple of
 * its body. Dense JSON (`[[],[],…]`, `[0,0,…]`, `{"a":0,"a":0,…}`, `[[[[…]]]]`) of MAX_BODY_BYTES is
 * refused before it is parsed, on every door (REST, /trpc, WebSocket text and msgpack frames,
 * `replay_json`; multipart uploads by their number of parts), with the reason; the daemon's RSS is read
 * from /proc/<pid>/status while it happens.
 *
 * The bound is not a constant: it is what a legitimate body of the same size (a 9 MiB text message,
 * accepted and stored) costs the same daemon build on this machine, measured in this file, times two
 * (plus 24 MiB for each further body sent at once). The refused bodies cost far less than that (the
 * body read once); before the guard one `[[],…]` body cost +384 MiB, four at once +906 MiB, and a
 * message's `content` of it (or a WebSocket frame) grew the daemon past 2 GiB.
 *
 * Three daemons (a start takes 15–45 s on a loaded machine): one for the legitimate message, the 422s
 * and the other shapes, one for `[[],…]` over REST, one for the other doors. The first measure on each
 * daemon is on a fresh process; the later ones run on a heap the earlier ones grew, which hides at most
 * what those left behind (tens of MiB, against the hundreds each of these attacks cost before).
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { after, before, test } from 'node:test';
import { pack, unpack } from 'msgpackr';
import WebSocket from 'ws';
import { BODY_SHAPE_LIMITS, jsonShapeError, msgpackShapeError, REPLAY_JSON_LIMITS } from '../src/body-shape.js';
import { startDaemon, waitFor, type DaemonHandle } from './support/daemon.js';

const MiB = 1024 * 1024;
/** The daemons here accept a 9 MiB message (the default MAX_EVENT_BYTES is 2 MiB); no agent runs, so no sandbox to probe at start. */
const ENV = { MAX_EVENT_BYTES: String(10 * MiB), SANDBOX: 'none' };

const rssMiB = (pid: number) => Number(/VmRSS:\s+(\d+)/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'))![1]) / 1024;

/** Peak RSS growth (MiB) of the daemon while `fn` runs, sampled every 10 ms from /proc (printed with `what`). */
async function growth<T>(d: DaemonHandle, what: string, fn: () => Promise<T>): Promise<{ mib: number; result: T }> {
  const pid = d.proc.pid!;
  const start = rssMiB(pid);
  let peak = start;
  const timer = setInterval(() => {
    try {
      peak = Math.max(peak, rssMiB(pid));
    } catch {
      /* the daemon died: the assertions after say so */
    }
  }, 10);
  try {
    const result = await fn();
    peak = Math.max(peak, rssMiB(pid));
    console.log(`${what}: RSS ${start.toFixed(0)} MiB, peak +${(peak - start).toFixed(0)} MiB`);
    return { mib: peak - start, result };
  } finally {
    clearInterval(timer);
  }
}

/** MAX_BODY_BYTES (10 MiB) of `open`, `item` repeated with commas, `close`. */
function dense(open: string, item: string, close: string, bytes = 10 * MiB - 64): string {
  const n = Math.floor((bytes - open.length - close.length) / (item.length + 1));
  return `${open}${`${item},`.repeat(n - 1)}${item}${close}`;
}
const nested = (open: string, close: string, bytes = 10 * MiB - 64) => {
  const n = Math.floor((bytes - open.length - close.length) / 2);
  return `${open}${'['.repeat(n)}${']'.repeat(n)}${close}`;
};

async function post(d: DaemonHandle, path: string, text: string) {
  const r = await fetch(d.url + path, { method: 'POST', headers: { 'content-type': 'application/json' }, body: text });
  const body = await r.text();
  return {
    status: r.status,
    text: body,
    json: (() => {
      try {
        return JSON.parse(body);
      } catch {
        return undefined;
      }
    })(),
  };
}

const newConversation = async (d: DaemonHandle) => (await d.req('POST', '/api/conversations', {})).body.conversation_id as string;
const message = (text: string) => JSON.stringify({ role: 'user', content: [{ type: 'text', text }], run: false });

/** The daemon answers and still takes a message. */
async function stillServes(d: DaemonHandle, id: string) {
  assert.equal(d.proc.exitCode, null, 'the daemon is still running');
  const r = await post(d, `/api/conversations/${id}/events`, message('next request'));
  assert.equal(r.status, 200, r.text);
}

const REASON =
  /more than 10000 JSON values: the limit is 10000 values \(objects, arrays, strings, numbers, literals; keys not counted\) nested at most 64 deep/;

interface Target {
  d: DaemonHandle;
  id: string;
}
let plain: Target;
let rest: Target;
let doors: Target;
let legit = 0;

before(async () => {
  [plain, rest, doors] = await Promise.all(
    [0, 1, 2].map(async () => {
      const d = await startDaemon(ENV, undefined, { startTimeoutMs: 150_000 });
      return { d, id: await newConversation(d) };
    }),
  );
  // what a legitimate 9 MiB body costs: a text message, accepted, stored and published
  const { d, id } = plain;
  const g = await growth(d, 'a 9 MiB text message (legitimate)', () => post(d, `/api/conversations/${id}/events`, message('t'.repeat(9 * MiB))));
  assert.equal(g.result.status, 200, g.result.text.slice(0, 300));
  const events = await d.req('GET', `/api/conversations/${id}/events/search?kind=MessageEvent`);
  assert.equal(events.body.items[0].llm_message.content[0].text.length, 9 * MiB, 'the 9 MiB message was stored whole');
  legit = g.mib;
});
after(() => Promise.all([plain, rest, doors].map((t) => t?.d.stop())));

/** The bound for `n` refused bodies at once, with a clear margin over what one legitimate body costs. */
const bound = (n: number) => 2 * Math.max(legit, 32) + (n - 1) * 24;
const within = (what: string, mib: number, n = 1) =>
  assert.ok(
    mib < bound(n),
    `${what}: +${mib.toFixed(0)} MiB RSS; a legitimate 9 MiB message costs +${legit.toFixed(0)} MiB, the bound is ${bound(n).toFixed(0)}`,
  );

test('a 10 MiB [[],[],…] as initial_user_msg or message content: 413 with the reason, alone and 4 at once; RSS bounded; the next request served', async () => {
  const cases: [string, Target, (id: string) => string, string][] = [
    ['initial_user_msg', rest, () => '/api/conversations', dense('{"initial_user_msg":[', '[]', ']}')],
    ['content', rest, (id) => `/api/conversations/${id}/events`, dense('{"role":"user","content":[', '[]', ']}')],
  ];
  for (const [what, { d, id }, path, body] of cases) {
    for (const n of [1, 4]) {
      const g = await growth(d, `[[],…] as ${what} ×${n}`, () => Promise.all(Array.from({ length: n }, () => post(d, path(id), body))));
      for (const r of g.result) {
        assert.equal(r.status, 413, `${what}: ${r.text.slice(0, 300)}`);
        assert.match(r.json.detail, REASON);
      }
      within(`${what} ×${n}`, g.mib, n);
      await stillServes(d, id);
    }
  }
});

test('{"a":0,"a":0,…}, [0,0,…], [[[[…]]]] of 10 MiB: 413 with the reason, RSS bounded, the next request served; every JSON route has the limits', async () => {
  const { d, id } = plain;
  const cases: [string, string, RegExp][] = [
    ['{"a":0,…}', dense('{"role":"user",', '"a":0', '}'), REASON],
    ['[0,0,…]', dense('{"role":"user","content":[', '0', ']}'), REASON],
    ['[[[…]]]', nested('{"role":"user","content":', '}'), /nests arrays and objects more than 64 deep: the limit is 10000 values/],
  ];
  for (const [what, body, reason] of cases) {
    const g = await growth(d, what, () => post(d, `/api/conversations/${id}/events`, body));
    assert.equal(g.result.status, 413, `${what}: ${g.result.text.slice(0, 300)}`);
    assert.match(g.result.json.detail, reason);
    within(what, g.mib);
    await stillServes(d, id);
  }
  // the same limits hold on every JSON route (here the settings, the secrets and an agent-server route)
  for (const path of ['/api/settings', '/api/secrets', `/api/conversations/${id}/ask_agent`]) {
    const r = await post(d, path, dense('{"x":[', '[]', ']}', 64 * 1024));
    assert.equal(r.status, 413, `${path}: ${r.text.slice(0, 200)}`);
    assert.match(r.json.detail, REASON);
  }
  // at the limit the body is parsed and validated as before: the object, "user", the array and
  // 9,997 numbers are 10,000 values, a 422 with the usual loc
  const atLimit = `{"role":"user","content":[${'0,'.repeat(9_996)}0]}`;
  assert.equal(jsonShapeError(atLimit), null, 'exactly at the limit');
  const r = await post(d, `/api/conversations/${id}/events`, atLimit);
  assert.equal(r.status, 422, r.text.slice(0, 300));
  assert.deepEqual(r.json.detail[0].loc, ['body', 'content', 0]);
});

test('over /trpc, in a WebSocket text frame, in a msgpack frame, inside replay_json and as multipart parts: refused with the reason, RSS bounded', async () => {
  const { d, id } = doors;
  const g = await growth(d, '[[],…] over /trpc', () => post(d, '/trpc/createConversation', dense('{"initial_user_msg":[', '[]', ']}')));
  assert.equal(g.result.status, 413, g.result.text.slice(0, 300));
  assert.match(g.result.json.error.message, REASON);
  assert.equal(g.result.json.error.data.code, 'PAYLOAD_TOO_LARGE');
  within('/trpc', g.mib);
  // batched: one error per call, as tRPC's client reads them
  const batch = await post(d, '/trpc/createConversation,createConversation?batch=1', `{"0":${dense('{"initial_user_msg":[', '[]', ']}', MiB)},"1":{}}`);
  assert.equal(batch.status, 413);
  assert.equal(batch.json.length, 2);
  assert.match(batch.json[0].error.message, REASON);
  assert.equal((await post(d, '/trpc/createConversation', '{}')).status, 200, 'the next call is served');

  const ws = new WebSocket(`ws://127.0.0.1:${d.port}/sockets/events/${id}`);
  const frames: any[] = [];
  ws.on('message', (m: Buffer, binary: boolean) => frames.push(binary ? unpack(m) : JSON.parse(m.toString())));
  await new Promise((resolve, reject) => (ws.once('open', resolve), ws.once('error', reject)));
  // {"role":"user","content": <array32 of 10 MiB empty arrays>}
  const n = 10 * MiB - 64;
  const head = Buffer.from([
    0x82,
    0xa4,
    ...Buffer.from('role'),
    0xa4,
    ...Buffer.from('user'),
    0xa7,
    ...Buffer.from('content'),
    0xdd,
    n >>> 24,
    (n >>> 16) & 255,
    (n >>> 8) & 255,
    n & 255,
  ]);
  const cases: [string, string | Buffer, RegExp][] = [
    ['[[],…] in a WebSocket text frame', dense('{"role":"user","content":[', '[]', ']}'), /^Frame has more than 10000 JSON values: the limit is 10000 values/],
    ['[[],…] in a msgpack frame', Buffer.concat([head, Buffer.alloc(n, 0x90)]), /^Frame has more than 10000 msgpack values: the limit is 10000 values/],
  ];
  for (const [what, payload, reason] of cases) {
    const seen = frames.length;
    const f = await growth(d, what, async () => {
      ws.send(payload, { binary: typeof payload !== 'string' });
      return waitFor(() => frames.slice(seen).find((x) => x.kind === 'ServerErrorEvent'), 'the refusal', 60_000);
    });
    assert.equal(f.result.code, 'PayloadTooLarge');
    assert.match(f.result.detail, reason);
    within(what, f.mib);
  }
  // the socket stays open and a message sent on it is appended, in either encoding
  ws.send(JSON.stringify({ role: 'user', content: 'after the refusals' }));
  ws.send(pack({ role: 'user', content: 'msgpack after the refusals' }), { binary: true });
  await waitFor(
    async () => (await d.req('GET', `/api/conversations/${id}/events/search?kind=MessageEvent`)).body.items.length === 2,
    'both messages appended',
    30_000,
  );
  ws.close();

  // replay_json is one string in its body; the trajectory in it has its own budget
  const trajectory = dense('[', '[]', ']', 10 * MiB - 64);
  const r = await growth(d, '[[],…] in replay_json', () => post(d, '/api/conversations', JSON.stringify({ replay_json: trajectory })));
  assert.equal(r.result.status, 422, r.result.text.slice(0, 300));
  assert.deepEqual(r.result.json.detail[0].loc, ['body', 'replay_json']);
  assert.match(r.result.json.detail[0].msg, new RegExp(`replay_json has more than ${REPLAY_JSON_LIMITS.values} JSON values`));
  within('replay_json', r.mib);

  // the one body that is not JSON: a multipart upload cut into 200,000 empty parts
  const upload = (body: string) =>
    fetch(`${d.url}/api/file/upload?path=up.txt&conversation_id=${id}`, {
      method: 'POST',
      headers: { 'content-type': 'multipart/form-data; boundary=xB' },
      body,
    });
  const file = '--xB\r\nContent-Disposition: form-data; name="file"; filename="up.txt"\r\n\r\nuploaded\r\n--xB--\r\n';
  const empty = '--xB\r\nContent-Disposition: form-data; name="a"\r\n\r\n\r\n';
  const parts = await growth(d, '200,000 multipart parts', async () => {
    const res = await upload(empty.repeat(Math.floor((10 * MiB - 200) / empty.length)) + file);
    return { status: res.status, body: await res.json() };
  });
  assert.equal(parts.result.status, 413);
  assert.match(parts.result.body.detail, /more than 64 parts/);
  within('multipart parts', parts.mib);
  assert.equal((await upload(file)).status, 200, 'a one-part upload is taken');
  await stillServes(d, id);
});

test('a body within the limits but invalid everywhere: the 422 stays bounded (each echoed input at most once, their total capped)', async () => {
  const { d, id } = plain;
  // 9,997 content items of the wrong type (with the object, "user" and the array: 10,000 values): one issue each
  const items = await growth(d, '9,997 invalid content items', () =>
    post(d, `/api/conversations/${id}/events`, `{"role":"user","content":[${'{},'.repeat(9_996)}{}]}`),
  );
  assert.equal(items.result.status, 422, items.result.text.slice(0, 300));
  assert.equal(items.result.json.detail.length, 9_997);
  assert.ok(items.result.text.length < 4 * MiB, `422 of ${items.result.text.length} bytes`);
  within('9,997 invalid items', items.mib);
  // a 9 MiB string under an object with two missing fields, a wrong type and an unknown key: pydantic
  // would echo it three times; here the 422 holds at most ECHO_BUDGET (1 MiB) of input
  const big = 's'.repeat(9 * MiB);
  const r = await growth(d, 'a 9 MiB string under an invalid suggested_task', () =>
    post(d, '/api/conversations', JSON.stringify({ suggested_task: { title: 5, extra: big } })),
  );
  assert.equal(r.result.status, 422, r.result.text.slice(0, 300));
  assert.deepEqual(r.result.json.detail.map((e: any) => e.type).sort(), ['extra_forbidden', 'missing', 'missing', 'string_type']);
  assert.ok(r.result.text.length < 2 * MiB, `422 of ${r.result.text.length} bytes: the 9 MiB input is not echoed whole`);
  within('9 MiB string under suggested_task', r.mib);
  await stillServes(d, id);
});

test('the counters agree with what JSON.parse and msgpackr build, and refuse exactly past the limits', () => {
  // a deterministic generator of JSON values with strings that hold quotes, backslashes and brackets
  let seed = 7;
  const rand = (n: number) => (seed = (seed * 1103515245 + 12345) & 0x7fffffff) % n;
  const strings = ['', 'a', '"', '\\', '\\"', '[{', 'x\\\\"y', '\u00e9\u4e00', ':', ','];
  const gen = (depth: number): unknown => {
    const k = rand(depth > 6 ? 4 : 7);
    if (k === 0) return rand(1000) - 500;
    if (k === 1) return strings[rand(strings.length)];
    if (k === 2) return [true, false, null, 1.5e-7][rand(4)];
    if (k === 3) return {};
    if (k === 4) return Array.from({ length: rand(6) }, () => gen(depth + 1));
    return Object.fromEntries(Array.from({ length: rand(6) }, (_, i) => [`${strings[rand(strings.length)]}${i}`, gen(depth + 1)]));
  };
  const count = (v: unknown): { values: number; depth: number } => {
    if (v === null || typeof v !== 'object') return { values: 1, depth: 0 };
    const children = (Array.isArray(v) ? v : Object.values(v)).map(count);
    return { values: 1 + children.reduce((a, c) => a + c.values, 0), depth: 1 + Math.max(0, ...children.map((c) => c.depth)) };
  };
  for (let i = 0; i < 500; i++) {
    const v = gen(0);
    const { values, depth } = count(v);
    for (const text of [JSON.stringify(v), JSON.stringify(v, null, 2)]) {
      assert.equal(jsonShapeError(text, { values, depth }), null, text);
      if (values > 1) assert.match(jsonShapeError(text, { values: values - 1, depth })!.detail, /more than/, text);
      if (depth > 0) assert.match(jsonShapeError(text, { values, depth: depth - 1 })!.detail, /deep/, text);
    }
    const bytes = pack(v);
    assert.equal(msgpackShapeError(bytes, { values, depth }), null, JSON.stringify(v));
    if (values > 1) assert.match(msgpackShapeError(bytes, { values: values - 1, depth })!.detail, /more than/);
    if (depth > 0) assert.match(msgpackShapeError(bytes, { values, depth: depth - 1 })!.detail, /deep/);
  }
  // msgpack: extension types, and arrays that declare more items than the frame holds
  assert.match(msgpackShapeError(Buffer.from([0x91, 0xd4, 0x73, 0x00]))!.detail, /extension types/);
  assert.match(msgpackShapeError(Buffer.from([0xdd, 0xff, 0xff, 0xff, 0xff, 0x90]))!.detail, /truncated/);
  assert.equal(BODY_SHAPE_LIMITS.values, 10_000);
});
