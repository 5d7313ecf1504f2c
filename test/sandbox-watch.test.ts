/**
 * A client coming back to a conversation whose sandbox was closed while idle (its event socket, or
 * its tRPC subscription, opened) starts that sandbox at once, in the background: the next message's
 * first step reads the repository's instructions through it and would otherwise wait for its start.
 * With a disk image per conversation (the root daemon's default) no spare can be given to it, so
 * this is the whole start of a holder. Only when one more fits under SANDBOX_MAX_LIVE: no other
 * conversation's sandbox is closed, nor the cap passed, for a client that may only be looking.
 * Judged from the host's /proc: a holder whose /workspace holds the conversation's files.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { createParleyClient } from '../src/client.js';
import { waitFor } from './support/daemon.js';
import { fileServices, workspaceOf } from './support/holders.js';
import { terminalTurn, useScriptedDaemon } from './support/scripted-daemon.js';
import { connect } from './support/ws-client.js';

describe('a client that comes back starts its idle-closed sandbox', { timeout: 300_000 }, () => {
  const s = useScriptedDaemon({
    SANDBOX: 'bwrap',
    SANDBOX_NETWORK: 'none',
    SANDBOX_DISK: 'image',
    SANDBOX_IDLE_CLOSE_MS: '2000',
    SANDBOX_MAX_LIVE: '1',
  });

  /** The file service of the holder whose /workspace holds `marker` (the conversation's own). */
  const holderWith = (marker: string) => fileServices(s.d.proc.pid!).find((p) => workspaceOf(p)?.includes(marker));
  const closedIdle = (marker: string) => waitFor(() => !holderWith(marker), `the holder with ${marker} closed while idle`, 60_000);
  const socket = (id: string) => connect(`ws://127.0.0.1:${s.d.port}/sockets/events/${id}`);

  test('its socket opening, or its subscription, starts the holder with its files before any message; the next turn runs in it', async () => {
    const id = (await s.d.req('POST', '/api/conversations', {})).body.conversation_id;
    assert.match(await terminalTurn(s, id, 'echo a > watch-a.txt && echo made'), /^made$/m);
    await closedIdle('watch-a.txt');

    const ws = socket(id);
    try {
      await ws.opened;
      const holder = await waitFor(() => holderWith('watch-a.txt'), "the conversation's holder, started when its socket opened", 60_000);
      assert.equal((await s.d.req('GET', `/api/conversations/${id}`)).body.execution_status, 'finished', 'no message was sent: nothing ran');
      // the next turn runs in the holder the socket started
      assert.match(await terminalTurn(s, id, 'cat watch-a.txt'), /^a$/m);
      assert.equal(holderWith('watch-a.txt'), holder, 'the turn used the holder started for the socket');
    } finally {
      ws.close();
    }

    // the tRPC door does the same
    await closedIdle('watch-a.txt');
    const sub = createParleyClient({ url: s.d.url }).events.subscribe({ conversation_id: id }, { onData: () => {} });
    try {
      await waitFor(() => holderWith('watch-a.txt'), "the conversation's holder, started when its subscription opened", 60_000);
    } finally {
      sub.unsubscribe();
    }
  });

  test('with SANDBOX_MAX_LIVE taken by another conversation, a socket starts nothing and closes nothing', async () => {
    const a = (await s.d.req('POST', '/api/conversations', {})).body.conversation_id;
    assert.match(await terminalTurn(s, a, 'echo a > room-a.txt && echo made'), /^made$/m);
    await closedIdle('room-a.txt');
    // B runs a long command: its sandbox is the one the cap allows, and busy
    const b = (await s.d.req('POST', '/api/conversations', {})).body.conversation_id;
    s.llm.push({ toolCalls: [{ name: 'terminal', arguments: { command: 'touch room-b.txt && sleep 600' } }] }, { text: 'stopped' });
    assert.equal((await s.d.req('POST', `/api/conversations/${b}/events`, { content: [{ text: 'go' }], run: true })).status, 200);
    const bHolder = await waitFor(() => holderWith('room-b.txt'), "B's holder, its command running", 60_000);

    const ws = socket(a);
    try {
      await ws.opened;
      await ws.next((f) => f.key === 'full_state', "the socket's state frame", 30_000);
      // (what is looked for cannot be awaited: a start it did not make is watched for a while)
      const until = Date.now() + 5000;
      while (Date.now() < until) {
        assert.equal(holderWith('room-a.txt'), undefined, "A's holder was not started past the cap");
        assert.equal(holderWith('room-b.txt'), bHolder, "B's holder is left as it was");
        await new Promise((r) => setTimeout(r, 100));
      }
    } finally {
      ws.close();
      // (deleting it stops its command at once; a pause would wait for the step)
      await s.d.req('DELETE', `/api/conversations/${b}`);
    }
    await waitFor(() => !holderWith('room-b.txt'), "B's holder gone with it", 60_000);
  });
});
