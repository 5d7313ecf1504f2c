/**
 * Downloads and uploads stream through the conversation's sandbox (bridge/file-transfer.ts,
 * bridge/multipart.ts, src/conversation/file-transfer.ts): a 64 MiB file goes both ways intact
 * with the daemon's memory growing by a fraction of it (VmRSS from /proc, judged from the host),
 * /health answers meanwhile, an upload cut short changes nothing, and a transfer slower than the
 * file service's deadline does not end the sandbox (a process in it lives on). Timings are not
 * asserted: scripts/bench-files.ts measures them.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { allEvents } from './support/conversation-api.js';
import { startDaemon, waitFor, type DaemonHandle } from './support/daemon.js';

const MiB = 1024 * 1024;
let d: DaemonHandle;
let id: string;
let ws: string;

const rssKiB = () => Number(/VmRSS:\s+(\d+)/.exec(fs.readFileSync(`/proc/${d.proc.pid}/status`, 'utf8'))?.[1] ?? 0);
const sha = (b: Buffer | string) => crypto.createHash('sha256').update(b).digest('hex');
const q = (p: string) => `conversation_id=${id}&path=${encodeURIComponent(p)}`;

/**
 * Runs `fn` while sampling the daemon's VmRSS and asking /health every 20 ms; the peak growth and how many
 * /health answered 200 (a request that failed on its connection counts as not answered: the loop goes on).
 */
async function watched<T>(fn: () => Promise<T>): Promise<{ result: T; grewMiB: number; healthy: number; failed: string[] }> {
  const base = rssKiB();
  let peak = base;
  let healthy = 0;
  const failed: string[] = [];
  let done = false;
  const sampler = setInterval(() => (peak = Math.max(peak, rssKiB())), 10);
  const health = (async () => {
    while (!done) {
      const status = await fetch(`${d.url}/health`).then(
        (r) => r.status,
        (e: Error) => {
          failed.push(String((e.cause as Error | undefined)?.message ?? e.message));
          return 0;
        },
      );
      if (status === 200) healthy++;
      await new Promise((r) => setTimeout(r, 20));
    }
  })();
  try {
    return { result: await fn(), grewMiB: (peak - base) / 1024, healthy, failed };
  } finally {
    done = true;
    clearInterval(sampler);
    await health;
  }
}

async function bash(command: string): Promise<string> {
  const r = await d.req('POST', '/api/bash/execute_bash_command', { command, conversation_id: id, timeout: 120 });
  assert.equal(r.status, 200, r.text);
  return String(r.body.stdout);
}

describe('downloads and uploads stream', { timeout: 420_000 }, () => {
  before(async () => {
    d = await startDaemon({ SANDBOX: 'bwrap', SANDBOX_NETWORK: 'none' });
    id = (await d.req('POST', '/api/conversations', {})).body.conversation_id as string;
    ws = path.join(d.dataDir, 'workspaces', id.replace(/-/g, ''));
    assert.match(await bash('head -c 67108864 /dev/urandom > big.bin && echo made'), /made/);
  });
  after(() => d?.stop());

  test('a 64 MiB download arrives whole, the daemon grows by far less than the file, /health answers meanwhile', async (t) => {
    const want = sha(fs.readFileSync(path.join(ws, 'big.bin')));
    const w = await watched(async () => {
      const r = await fetch(`${d.url}/api/file/download?${q('/workspace/big.bin')}`);
      assert.equal(r.status, 200);
      assert.equal(r.headers.get('content-length'), String(64 * MiB));
      const h = crypto.createHash('sha256');
      let n = 0;
      for await (const chunk of r.body as unknown as AsyncIterable<Uint8Array>) {
        h.update(chunk);
        n += chunk.byteLength;
      }
      return { n, hash: h.digest('hex') };
    });
    t.diagnostic(
      `VmRSS grew ${w.grewMiB.toFixed(1)} MiB; /health answered ${w.healthy} times meanwhile${w.failed.length ? `; failed: ${w.failed.join(', ')}` : ''}`,
    );
    assert.equal(w.result.n, 64 * MiB);
    assert.equal(w.result.hash, want);
    assert.ok(w.healthy > 0, '/health answered during the download');
    assert.ok(w.grewMiB < 56, `the daemon grew ${w.grewMiB.toFixed(1)} MiB for a 64 MiB download`);
  });

  test('a 64 MiB upload lands whole, the daemon grows by far less than the file', async (t) => {
    const content = crypto.randomBytes(64 * MiB);
    const w = await watched(async () => {
      const form = new FormData();
      form.append('file', new Blob([content]), 'up.bin');
      const r = await fetch(`${d.url}/api/file/upload?${q('/workspace/up/up.bin')}`, { method: 'POST', body: form });
      return { status: r.status, body: await r.json() };
    });
    t.diagnostic(
      `VmRSS grew ${w.grewMiB.toFixed(1)} MiB; /health answered ${w.healthy} times meanwhile${w.failed.length ? `; failed: ${w.failed.join(', ')}` : ''}`,
    );
    assert.equal(w.result.status, 200, JSON.stringify(w.result.body));
    assert.equal(w.result.body.file_size, 64 * MiB);
    assert.equal(sha(fs.readFileSync(path.join(ws, 'up/up.bin'))), sha(content));
    // (the client's own copy of the body is in this process, not the daemon's)
    assert.ok(w.grewMiB < 56, `the daemon grew ${w.grewMiB.toFixed(1)} MiB for a 64 MiB upload`);
    assert.deepEqual(
      fs.readdirSync(path.join(ws, 'up')).filter((n) => n.includes('.upload-')),
      [],
    );
  });

  test('an upload cut short changes nothing at its path and leaves no partial file', async () => {
    fs.writeFileSync(path.join(ws, 'keep.txt'), 'the original\n');
    execFileSync('chown', ['65533:65533', path.join(ws, 'keep.txt')]);
    const boundary = 'cutB';
    const head = `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="keep.txt"\r\n\r\n`;
    await new Promise<void>((resolve) => {
      const req = http.request(`${d.url}/api/file/upload?${q('/workspace/keep.txt')}`, {
        method: 'POST',
        headers: { 'content-type': `multipart/form-data; boundary=${boundary}`, 'content-length': String(32 * MiB) },
      });
      req.on('error', () => resolve());
      req.on('close', () => resolve());
      req.write(head);
      req.write(Buffer.alloc(8 * MiB, 0x61), () => setTimeout(() => req.destroy(), 200));
    });
    await waitFor(() => !fs.readdirSync(ws).some((n) => n.includes('.upload-')), 'the partial file removed', 30_000);
    assert.equal(fs.readFileSync(path.join(ws, 'keep.txt'), 'utf8'), 'the original\n');
    const r = await fetch(`${d.url}/api/file/download?${q('/workspace/keep.txt')}`);
    assert.equal(await r.text(), 'the original\n', 'the conversation is served as before');
  });

  test("a download slower than the file service's deadline completes, and the sandbox lives on", async (t) => {
    // a process of the conversation, seen from the host: it must outlive the transfer
    const marker = `sleep ${4000 + Math.floor(Math.random() * 1000)}`;
    const started = await d.req('POST', '/api/bash/start_bash_command', { command: marker, conversation_id: id, timeout: 3600 });
    assert.equal(started.status, 200, started.text);
    const alive = () => execFileSync('ps', ['-eo', 'args']).toString().split('\n').includes(marker);
    await waitFor(alive, 'the marker process runs');
    const size = 40 * MiB;
    assert.match(await bash(`head -c ${size} big.bin > slow.bin && echo made`), /made/);
    const t0 = Date.now();
    // about 1.2 MiB/s: 40 MiB take longer than the 30 s in which one request to the service must be answered
    const got = await new Promise<{ n: number; hash: string }>((resolve, reject) => {
      http
        .get(`${d.url}/api/file/download?${q('/workspace/slow.bin')}`, (res) => {
          const h = crypto.createHash('sha256');
          let n = 0;
          res.on('data', (c: Buffer) => {
            h.update(c);
            n += c.length;
            res.pause();
            setTimeout(() => res.resume(), Math.ceil((c.length / (1.2 * MiB)) * 1000));
          });
          res.on('end', () => resolve({ n, hash: h.digest('hex') }));
          res.on('error', reject);
        })
        .on('error', reject);
    });
    t.diagnostic(`${size / MiB} MiB in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
    assert.equal(got.n, size);
    assert.equal(got.hash, sha(fs.readFileSync(path.join(ws, 'slow.bin'))));
    assert.ok(alive(), "the conversation's sandbox was not ended");
    assert.deepEqual(
      (await allEvents(d.req, id)).filter((e) => e.kind === 'ConversationErrorEvent'),
      [],
    );
  });
});
