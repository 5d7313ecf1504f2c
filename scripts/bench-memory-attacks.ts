/**
 * The daemon's memory under oversized-data attacks (docs/security.md, "Memory"), measured from the host.
 *
 *   npx tsx scripts/bench-memory-attacks.ts [--messages 20] [--message-mib 8] [--frames 300000]
 *                                           [--only search,pages,frames,preauth,creates,shapes] [--case NAME]
 *
 * Each attack runs against a fresh daemon (its VmRSS read from /proc/<pid>/status) and prints the
 * RSS before, the peak seen while the attack ran (sampled every 20 ms) and after, in MiB:
 *   search:  `--messages` messages of `--message-mib` MiB (MAX_EVENT_BYTES and MAX_BODY_BYTES raised
 *            so they are accepted), then one `events/search?limit=100` (the response size is printed)
 *            and one WebSocket replay of everything (resend_mode=all) read to the end;
 *            and a replay to a client that reads nothing for 3 s, then 32 MiB/s (`slow replay`: whether
 *            every message arrived, in order);
 *   pages:   80 messages of 64 KiB, then 30 clients ask for a 4 MiB `events/search` page and read
 *            nothing until the daemon's memory settles, then read it all;
 *   frames:  `--frames` tiny invalid frames on one socket whose client never reads;
 *   preauth: from 16 loopback addresses (127.0.0.2…), as many unauthenticated sockets as the daemon
 *            accepts (8 tries each), each sending all but the last byte of an "auth" frame just under
 *            MAX_BODY_BYTES (default 10 MiB), held until the auth timeout closes them (worst case);
 *   creates: `--creates` (8) conversations created with 8 MiB `conversation_instructions`;
 *   shapes:  bodies of MAX_BODY_BYTES (10 MiB) that are dense JSON (src/body-shape.ts), each against a fresh
 *            daemon: `[[],[],…]` as `initial_user_msg` and as a message's `content` (alone and four at
 *            once), `[0,0,…]` as content, `{"a":0,"a":0,…}`, `[[[[…]]]]` nesting, the same array inside
 *            `replay_json`, over /trpc, as a WebSocket text frame and as a msgpack frame; and a 9 MiB
 *            text message (what a legitimate body of that size costs; MAX_EVENT_BYTES raised to 10 MiB). A case whose daemon passes
 *            +2 GiB is stopped there (SIGKILL) and printed as such; the line ends with the statuses
 *            and whether the daemon still answered.
 */
import { spawn } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import WebSocket from 'ws';
import { ROOT } from '../test/support/daemon.js';
import { FrameReader } from '../test/support/ws-frames.js';

const { values: args } = parseArgs({
  options: {
    messages: { type: 'string', default: '20' },
    'message-mib': { type: 'string', default: '8' },
    frames: { type: 'string', default: '300000' },
    creates: { type: 'string', default: '8' },
    only: { type: 'string' },
    /** with --only shapes: the cases whose name contains this */
    case: { type: 'string' },
  },
});
const MiB = 1024 * 1024;
const KEY = 'bench-memory-key';

interface Daemon {
  url: string;
  port: number;
  pid: number;
  stop(): Promise<void>;
}

async function start(env: Record<string, string>): Promise<Daemon> {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'parley-bench-mem-'));
  const proc = spawn(process.execPath, ['--import', 'tsx', 'bridge/main.ts'], {
    cwd: ROOT,
    env: { PATH: process.env.PATH!, HOME: process.env.HOME ?? os.tmpdir(), PORT: '0', DATA_DIR: dataDir, LOG_LEVEL: 'info', SANDBOX: 'none', ...env },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const port = await new Promise<number>((resolve, reject) => {
    let buf = '';
    proc.stdout!.on('data', (c: Buffer) => {
      buf += c.toString();
      const m = /"port":(\d+).*listening on/.exec(buf);
      if (m) resolve(Number(m[1]));
    });
    proc.once('exit', (code) => reject(new Error(`daemon exited ${code}`)));
  });
  proc.stdout!.resume();
  return {
    url: `http://127.0.0.1:${port}`,
    port,
    pid: proc.pid!,
    async stop() {
      proc.kill('SIGTERM');
      await new Promise((r) => proc.once('exit', r));
      fs.rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

/** V8's used heap (live objects and garbage not yet collected), from GET /metrics. */
async function heapUsed(d: Daemon): Promise<number> {
  const text = await (await fetch(`${d.url}/metrics`, { headers: { 'x-session-api-key': KEY } })).text();
  return Number(/^nodejs_heap_size_used_bytes (\S+)/m.exec(text)?.[1] ?? NaN) / MiB;
}

const rss = (pid: number) => Number(/VmRSS:\s+(\d+)/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'))![1]) / 1024;

/**
 * Runs `attack` while sampling the daemon's RSS; prints before / peak / after. With `capMiB`, a daemon
 * that grows past it is killed (the attack then sees its connections fail) and the line says so.
 */
async function measure(name: string, d: Daemon, attack: () => Promise<unknown>, capMiB = Infinity) {
  await new Promise((r) => setTimeout(r, 1000));
  const before = rss(d.pid);
  const heapBefore = await heapUsed(d);
  let peak = before;
  let killed = false;
  const timer = setInterval(() => {
    if (killed) return;
    peak = Math.max(peak, rss(d.pid));
    if (peak - before > capMiB) {
      killed = true;
      process.kill(d.pid, 'SIGKILL');
    }
  }, 20);
  const note = await attack();
  if (killed) {
    clearInterval(timer);
    console.log(
      `${name.padEnd(11)} RSS before ${before.toFixed(0)} MiB, passed +${capMiB} MiB (${peak.toFixed(0)} MiB): daemon killed by the ` +
        `bench${note ? `; ${note}` : ''}`,
    );
    return;
  }
  await new Promise((r) => setTimeout(r, 3000));
  clearInterval(timer);
  const after = rss(d.pid);
  const heapAfter = await heapUsed(d);
  peak = Math.max(peak, after);
  console.log(
    `${name.padEnd(11)} RSS before ${before.toFixed(0)} MiB, peak ${peak.toFixed(0)} MiB (+${(peak - before).toFixed(0)}), after 3 s ` +
      `${after.toFixed(0)} MiB (+${(after - before).toFixed(0)}); ` +
      `heap used ${heapBefore.toFixed(0)} → ${heapAfter.toFixed(0)} MiB${note ? `; ${note}` : ''}`,
  );
}

const post = (d: Daemon, p: string, body: unknown, headers: Record<string, string> = {}) =>
  fetch(d.url + p, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });

function frame(payload: Buffer): Buffer {
  const mask = crypto.randomBytes(4);
  const len = payload.length;
  const head =
    len < 126
      ? Buffer.from([0x81, 0x80 | len])
      : len < 65536
        ? Buffer.from([0x81, 0xfe, len >> 8, len & 255])
        : Buffer.from([0x81, 0xff, 0, 0, 0, 0, len >>> 24, (len >>> 16) & 255, (len >>> 8) & 255, len & 255]);
  const body = Buffer.from(payload);
  for (let i = 0; i < body.length; i++) body[i]! ^= mask[i & 3]!;
  return Buffer.concat([head, mask, body]);
}

function rawSocket(d: Daemon, p: string, headers = '', localAddress?: string): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const s = net.connect({ port: d.port, host: '127.0.0.1', localAddress });
    s.on('error', () => {});
    s.write(
      `GET ${p} HTTP/1.1\r\nHost: 127.0.0.1:${d.port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: ` +
        `dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n${headers}\r\n`,
    );
    s.once('data', (c: Buffer) => (c.toString('latin1').startsWith('HTTP/1.1 101') ? resolve(s) : reject(new Error(c.toString('latin1').split('\r\n')[0]))));
  });
}

/**
 * A replay (resend_mode=all) to a raw client that reads nothing for 3 s, then 32 MiB/s; returns the
 * message numbers received, in order of arrival (stops when all came or nothing came for 20 s).
 */
async function slowReplay(d: Daemon, id: string, messages: number): Promise<number[]> {
  const s = net.connect(d.port, '127.0.0.1');
  s.on('error', () => {});
  s.pause();
  s.write(
    `GET /sockets/events/${id}?resend_mode=all HTTP/1.1\r\nHost: 127.0.0.1:${d.port}\r\nUpgrade: websocket\r\nConnection: ` +
      `Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n`,
  );
  await new Promise((r) => setTimeout(r, 3000));
  const reader = new FrameReader();
  const got = () => reader.frames.flatMap((f) => (/"text":"(\d+):/.exec(f) ? [Number(/"text":"(\d+):/.exec(f)![1])] : []));
  let lastData = Date.now();
  while (got().length < messages && Date.now() - lastData < 20_000 && !s.destroyed) {
    await new Promise((r) => setTimeout(r, 20));
    let budget = (32 * MiB) / 50;
    let c: Buffer | null;
    while (budget > 0 && (c = s.read()) !== null) {
      lastData = Date.now();
      budget -= c.length;
      reader.push(c);
    }
  }
  s.destroy();
  return got();
}

/** A fresh daemon with one conversation (created with `headers`), stopped after `fn`. */
async function withConversation(env: Record<string, string>, fn: (d: Daemon, id: string) => Promise<void>, headers: Record<string, string> = {}) {
  const d = await start(env);
  try {
    const id = ((await (await post(d, '/api/conversations', {}, headers)).json()) as { conversation_id: string }).conversation_id;
    await fn(d, id);
  } finally {
    await d.stop();
  }
}

const attacks: Record<string, () => Promise<void>> = {
  async search() {
    const size = Number(args['message-mib']) * MiB;
    await withConversation({ MAX_BODY_BYTES: String(size + MiB), MAX_EVENT_BYTES: String(size + 64 * 1024) }, async (d, id) => {
      for (let i = 0; i < Number(args.messages); i++) {
        const r = await post(d, `/api/conversations/${id}/events`, {
          role: 'user',
          content: [{ type: 'text', text: `${i}:${'m'.repeat(size - 16)}` }],
          run: false,
        });
        if (r.status !== 200) throw new Error(`message ${i}: ${r.status} ${await r.text()}`);
      }
      await measure('search', d, async () => {
        const res = await fetch(`${d.url}/api/conversations/${id}/events/search?limit=100`);
        const body = await res.arrayBuffer();
        const items = (JSON.parse(Buffer.from(body).toString()) as { items: unknown[] }).items.length;
        return `one page: ${(body.byteLength / MiB).toFixed(1)} MiB, ${items} items`;
      });
      await measure('replay', d, async () => {
        const ws = new WebSocket(`ws://127.0.0.1:${d.port}/sockets/events/${id}?resend_mode=all`);
        let n = 0;
        await new Promise<void>((resolve, reject) => {
          ws.on('message', (m: Buffer) => {
            if (m.includes('"MessageEvent"') && ++n === Number(args.messages)) resolve();
          });
          ws.on('close', (code) => reject(new Error(`closed ${code} after ${n}`)));
        });
        ws.removeAllListeners('close');
        ws.close();
        return `all ${n} messages replayed`;
      });
      await measure('slow replay', d, async () => {
        const got = await slowReplay(d, id, Number(args.messages));
        const inOrder = got.every((x, i) => x === i);
        return `${got.length}/${args.messages} messages replayed${inOrder ? ', in order' : `: ${got.join(',')}`}`;
      });
    });
  },
  async pages() {
    await withConversation({}, async (d, id) => {
      for (let i = 0; i < 80; i++)
        await post(d, `/api/conversations/${id}/events`, { role: 'user', content: [{ type: 'text', text: `${i}:${'p'.repeat(64 * 1024)}` }], run: false });
      await measure('pages', d, async () => {
        const clients = await Promise.all(
          Array.from(
            { length: 30 },
            () =>
              new Promise<{ sock: net.Socket; bytes: () => number; ended: Promise<void> }>((resolve) => {
                let n = 0;
                const sock = net.connect(d.port, '127.0.0.1', () => resolve({ sock, bytes: () => n, ended }));
                const ended = new Promise<void>((r) => sock.once('close', () => r()));
                sock.on('error', () => {});
                sock.pause();
                sock.on('data', (c: Buffer) => (n += c.length));
                sock.write(`GET /api/conversations/${id}/events/search?limit=100 HTTP/1.1\r\nHost: 127.0.0.1:${d.port}\r\nConnection: close\r\n\r\n`);
              }),
          ),
        );
        let last = rss(d.pid);
        let since = Date.now();
        while (Date.now() - since < 1500) {
          await new Promise((r) => setTimeout(r, 50));
          const now = rss(d.pid);
          if (now > last + 1) (last = now), (since = Date.now());
        }
        for (const c of clients) c.sock.resume();
        await Promise.all(clients.map((c) => c.ended));
        return `30 clients, ${(clients.reduce((a, c) => a + c.bytes(), 0) / 30 / MiB).toFixed(1)} MiB each once read`;
      });
    });
  },
  async frames() {
    await withConversation({}, async (d, id) => {
      await measure('frames', d, async () => {
        const s = await rawSocket(d, `/sockets/events/${id}`);
        s.pause();
        const one = frame(Buffer.from('{"nonsense":true}'));
        const batch = Buffer.concat(Array.from({ length: 1000 }, () => one));
        let sent = 0;
        let closed = false;
        s.once('close', () => (closed = true));
        for (; sent < Number(args.frames) && !closed; sent += 1000) {
          if (!s.write(batch))
            await new Promise((r) => {
              s.once('drain', r);
              s.once('close', r);
            });
        }
        s.destroy();
        return `${sent} frames written${closed ? ' before the daemon closed the socket' : ''}`;
      });
    });
  },
  async preauth() {
    await withConversation(
      { SESSION_API_KEY: KEY },
      async (d, id) => {
        await measure('preauth', d, async () => {
          const body = 10 * MiB - 64;
          const auth = frame(Buffer.alloc(body, 0x20));
          const held: net.Socket[] = [];
          let refused = 0;
          for (let a = 2; a < 18; a++) {
            for (let k = 0; k < 8; k++) {
              const s = await rawSocket(d, `/sockets/events/${id}`, '', `127.0.0.${a}`).catch(() => null);
              if (s) held.push(s);
              else refused++;
            }
          }
          const closed = Promise.all(held.map((s) => new Promise<void>((r) => s.once('close', () => r()))));
          await Promise.all(held.map((s) => new Promise<void>((r) => s.write(auth.subarray(0, auth.length - 1), () => r()))));
          await closed;
          return (
            `${held.length} sockets held (${refused} refused at the upgrade), each sent ${(body / MiB).toFixed(1)} MiB of an auth frame but ` +
            `its last byte; all closed by the auth timeout`
          );
        });
      },
      { 'x-session-api-key': KEY },
    );
  },
  async creates() {
    const d = await start({ MAX_BODY_BYTES: String(9 * MiB) });
    try {
      await measure('creates', d, async () => {
        const codes: number[] = [];
        for (let i = 0; i < Number(args.creates); i++)
          codes.push((await post(d, '/api/conversations', { conversation_instructions: `${i}${'i'.repeat(8 * MiB - 8)}` })).status);
        return `${args.creates} creates with 8 MiB instructions: ${[...new Set(codes)].join(',')}`;
      });
    } finally {
      await d.stop();
    }
  },
};

/** MAX_BODY_BYTES bytes of `open` + `item` repeated (comma-separated) + `close`. */
function dense(open: string, item: string, close: string, bytes = 10 * MiB): string {
  const n = Math.floor((bytes - open.length - close.length) / (item.length + 1));
  return `${open}${`${item},`.repeat(n - 1)}${item}${close}`;
}
const deep = (open: string, close: string, bytes = 10 * MiB) => {
  const n = Math.floor((bytes - open.length - close.length) / 2);
  return `${open}${'['.repeat(n)}${']'.repeat(n)}${close}`;
};

/** Posts raw text; the status and the first 160 characters of the answer (or why there was none). */
async function postRaw(d: Daemon, p: string, text: string): Promise<string> {
  try {
    const r = await fetch(d.url + p, { method: 'POST', headers: { 'content-type': 'application/json' }, body: text });
    return `${r.status} ${(await r.text()).slice(0, 160)}`;
  } catch (err) {
    return `no answer (${(err as Error).cause ?? err})`;
  }
}

/** Sends one frame on an open socket; the first ServerErrorEvent's detail, or what happened instead. */
async function sendFrame(d: Daemon, id: string, payload: string | Buffer): Promise<string> {
  const ws = new WebSocket(`ws://127.0.0.1:${d.port}/sockets/events/${id}`);
  try {
    await new Promise((resolve, reject) => (ws.once('open', resolve), ws.once('error', reject)));
    return await new Promise<string>((resolve) => {
      ws.on('message', (m: Buffer, binary: boolean) => {
        const s = binary ? '' : m.toString();
        if (s.includes('ServerErrorEvent')) resolve(`ServerErrorEvent ${s.slice(0, 200)}`);
      });
      ws.once('close', (code) => resolve(`socket closed ${code}`));
      ws.send(payload, { binary: typeof payload !== 'string' });
    });
  } catch (err) {
    return `no answer (${err})`;
  } finally {
    ws.terminate();
  }
}

async function alive(d: Daemon): Promise<string> {
  try {
    const r = await fetch(`${d.url}/alive`, { signal: AbortSignal.timeout(10_000) });
    return r.status === 200 ? 'daemon up' : `daemon answers ${r.status}`;
  } catch {
    return 'daemon DOWN';
  }
}

/** Each case: a fresh daemon with one conversation, the attack measured, then /alive asked. */
const SHAPE_CASES: Record<string, (d: Daemon, id: string) => Promise<string>> = {
  'text 9 MiB (legitimate)': (d, id) =>
    postRaw(d, `/api/conversations/${id}/events`, JSON.stringify({ role: 'user', content: [{ type: 'text', text: 't'.repeat(9 * MiB) }], run: false })),
  '[[],…] initial_user_msg': (d) => postRaw(d, '/api/conversations', dense('{"initial_user_msg":[', '[]', ']}')),
  '[[],…] initial_user_msg ×4': async (d) =>
    (await Promise.all(Array.from({ length: 4 }, () => postRaw(d, '/api/conversations', dense('{"initial_user_msg":[', '[]', ']}')))))
      .map((s) => s.slice(0, 3))
      .join(','),
  '[[],…] content': (d, id) => postRaw(d, `/api/conversations/${id}/events`, dense('{"role":"user","content":[', '[]', ']}')),
  '[[],…] content ×4': async (d, id) =>
    (await Promise.all(Array.from({ length: 4 }, () => postRaw(d, `/api/conversations/${id}/events`, dense('{"role":"user","content":[', '[]', ']}')))))
      .map((s) => s.slice(0, 3))
      .join(','),
  '[0,0,…] content': (d, id) => postRaw(d, `/api/conversations/${id}/events`, dense('{"role":"user","content":[', '0', ']}')),
  '{"a":0,…} body': (d, id) => postRaw(d, `/api/conversations/${id}/events`, dense('{"role":"user",', '"a":0', '}')),
  '[[[…]]] nesting': (d) => postRaw(d, '/api/conversations', deep('{"initial_user_msg":', '}')),
  '[[],…] replay_json': (d) => postRaw(d, '/api/conversations', JSON.stringify({ replay_json: dense('[', '[]', ']', 10 * MiB - 64) })),
  '[[],…] /trpc': (d) => postRaw(d, '/trpc/createConversation', dense('{"initial_user_msg":[', '[]', ']}')),
  '[[],…] ws frame': (d, id) => sendFrame(d, id, dense('{"role":"user","content":[', '[]', ']}')),
  '[[],…] msgpack frame': (d, id) => {
    // {"role":"user","content": <array32 of n empty arrays>}
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
    return sendFrame(d, id, Buffer.concat([head, Buffer.alloc(n, 0x90)]));
  },
};

const attacksWithShapes = {
  ...attacks,
  async shapes() {
    for (const [name, run] of Object.entries(SHAPE_CASES)) {
      if (args.case && !name.includes(args.case)) continue;
      // MAX_EVENT_BYTES raised so that the 9 MiB message is accepted, as a client allowed such messages would send it
      await withConversation({ MAX_EVENT_BYTES: String(10 * MiB) }, async (d, id) => {
        let note = '';
        await measure(
          name,
          d,
          async () => {
            note = await run(d, id);
            return note.length > 200 ? `${note.slice(0, 200)}…` : note;
          },
          2048,
        );
        console.log(`${''.padEnd(11)} → ${await alive(d)}`);
      }).catch((err) => console.log(`${name}: ${err}`));
    }
  },
};

console.log(`bench-memory-attacks (${os.cpus().length} cores, Node ${process.version}, ${new Date().toISOString().slice(0, 16)} UTC)`);
for (const [name, run] of Object.entries(attacksWithShapes)) if (!args.only || args.only.split(',').includes(name)) await run();
