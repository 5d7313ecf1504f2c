/**
 * Live events reach a subscriber in one write per event-loop turn (bridge/ws.ts, the outbox), not one
 * send() per event, and still whole and in order. Seen from the host: the daemon's writes to the
 * subscriber's TCP connection, traced with strace while a burst of messages is committed.
 */
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { startDaemon, tempDir, waitFor } from './support/daemon.js';
import { connect } from './support/ws-client.js';

const strace = spawnSync('strace', ['-V'], { encoding: 'utf8' }).status === 0;

test('a burst of messages: every event reaches the subscriber once and in order, in fewer writes than events (strace from the host)', {
  skip: strace ? false : 'strace is not installed (.ci/run installs it)',
  timeout: 120_000,
}, async () => {
  const d = await startDaemon({ SANDBOX: 'none' });
  const dir = tempDir('parley-ws-batching-');
  try {
    const id = (await d.req('POST', '/api/conversations', {})).body.conversation_id as string;
    const sub = connect(`ws://127.0.0.1:${d.port}/sockets/events/${id}`);
    await sub.opened;
    const snapshot = await sub.next(() => true, 'the snapshot');
    assert.equal(snapshot.key, 'full_state');
    // the subscriber's connection as strace -yy names the daemon's end of it
    const peer = `127.0.0.1:${d.port}->127.0.0.1:${(sub.ws as unknown as { _socket: { localPort: number } })._socket.localPort}]`;
    const out = path.join(dir, 'strace.txt');
    const tracer = spawn('strace', ['-f', '-yy', '-e', 'trace=sendto,sendmsg,write,writev', '-p', String(d.proc.pid), '-o', out], {
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let traceErr = '';
    tracer.stderr!.on('data', (c: Buffer) => (traceErr += c.toString()));
    const traced = new Promise((resolve) => tracer.once('exit', resolve));
    try {
      await waitFor(() => /attached/.test(traceErr), 'strace attached', 20_000);
      // 40 messages at once over as many connections: the daemon commits them a turn at a time
      const N = 40;
      const texts = Array.from({ length: N }, (_, i) => `burst ${i}`);
      const answers = await Promise.all(texts.map((text) => d.req('POST', `/api/conversations/${id}/events`, { content: [{ text }] })));
      assert.deepEqual(
        answers.map((a) => a.status),
        texts.map(() => 200),
      );
      const got = () => sub.frames.filter((f) => f.kind === 'MessageEvent' && String(f.llm_message?.content?.[0]?.text).startsWith('burst '));
      await waitFor(() => got().length >= N, `${N} events at the subscriber`, 30_000);
      const events = got();
      assert.equal(events.length, N, 'each once');
      assert.deepEqual(
        events.map((e) => e.seq),
        [...events.map((e) => e.seq)].sort((a, b) => a - b),
        'in seq order',
      );
      assert.deepEqual(new Set(events.map((e) => e.llm_message.content[0].text)), new Set(texts));
    } finally {
      tracer.kill('SIGINT');
      await traced;
    }
    const writes = fs
      .readFileSync(out, 'utf8')
      .split('\n')
      .filter((l) => /\b(sendto|sendmsg|write|writev)\(\d+<TCP:\[/.test(l) && l.includes(peer));
    console.log(`40 events to one subscriber in ${writes.length} writes`);
    assert.ok(writes.length >= 1, `the subscriber's connection (${peer}) was written to: strace saw it`);
    assert.ok(writes.length < 40, `${writes.length} writes for 40 events: one per event-loop turn, not one per event`);
    sub.close();
  } finally {
    await d.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
