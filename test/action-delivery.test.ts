/**
 * What the agent publishes before a tool starts reaches the subscribers before the tool's start, even
 * when that start holds the event loop (a sandbox's first process is a synchronous fork of the daemon):
 * the runtime awaits `afterDelivery()` first. Checked against uWS's own pub/sub, as the daemon publishes:
 * a subscriber in another process writes a file when the message arrives, while this process, right
 * after the wait, blocks its event loop until that file exists. Without the wait the message would
 * still be in uWS's buffer (written at the end of the loop's turn) and the file would never come.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import uws from 'uWebSockets.js';
import { ROOT, tempDir } from './support/daemon.js';
import { afterDelivery } from '../src/agent/runtime.js';

/** Blocks this thread until `file` exists (at most `ms`); whether it came. */
function blockUntil(file: string, ms: number): boolean {
  const until = Date.now() + ms;
  const cell = new Int32Array(new SharedArrayBuffer(4));
  while (Date.now() < until) {
    if (fs.existsSync(file)) return true;
    Atomics.wait(cell, 0, 0, 5);
  }
  return false;
}

test('a message published before afterDelivery() is on the wire before the code after it runs', { timeout: 60_000 }, async () => {
  const dir = tempDir();
  const got = path.join(dir, 'got');
  const app = uws.App();
  let opened!: () => void;
  const open = new Promise<void>((r) => (opened = r));
  app.ws('/*', {
    open: (ws) => {
      ws.subscribe('t');
      opened();
    },
  });
  let listening: uws.us_listen_socket | null = null;
  const port = await new Promise<number>((resolve, reject) =>
    app.listen('127.0.0.1', 0, (s) => {
      listening = s || null;
      if (s) resolve(uws.us_socket_local_port(s));
      else reject(new Error('no port'));
    }),
  );
  const client = spawn(
    process.execPath,
    [
      '-e',
      `const WebSocket = require('ws'); const fs = require('fs');
       const ws = new WebSocket('ws://127.0.0.1:${port}/');
       ws.on('message', (m) => {
         fs.writeFileSync(${JSON.stringify(`${got}.part`)}, String(m));
         fs.renameSync(${JSON.stringify(`${got}.part`)}, ${JSON.stringify(got)});
         ws.close();
       });`,
    ],
    { cwd: ROOT, stdio: 'inherit' },
  );
  try {
    await open;
    app.publish('t', 'action');
    await afterDelivery();
    // the tool's synchronous start: the event loop is held until the subscriber has the message
    assert.ok(blockUntil(got, 10_000), 'the message was not delivered before the code after the wait ran');
    assert.equal(fs.readFileSync(got, 'utf8'), 'action');
  } finally {
    client.kill();
    if (listening) uws.us_listen_socket_close(listening);
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
