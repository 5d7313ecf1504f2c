/**
 * The terminal in the bwrap sandbox, through the daemon: C-c ends a loop of short commands every time
 * (the shell is found and signalled through its host pids from outside the sandbox's namespaces).
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { allEvents } from './support/conversation-api.js';
import { waitFor } from './support/daemon.js';
import { useScriptedDaemon } from './support/scripted-daemon.js';

describe('the terminal in the bwrap sandbox', { timeout: 600_000 }, () => {
  const s = useScriptedDaemon({
    SANDBOX: 'bwrap',
    SANDBOX_NETWORK: 'none',
    TERMINAL_NO_OUTPUT_TIMEOUT_MS: '500',
    MAX_ITERATIONS: '500',
  });

  test('C-c ends a loop of short commands every time (25 tries in one turn); the shell keeps its state', async () => {
    const id = (await s.d.req('POST', '/api/conversations', {})).body.conversation_id as string;
    const terminal = (args: object) => ({ toolCalls: [{ name: 'terminal', arguments: args }] });
    const tries = 25;
    s.llm.push(terminal({ command: 'export KEPT=yes' }));
    for (let i = 0; i < tries; i++) {
      // C-c, then up to two waits for its end (on a busy machine it may come after the call's wait),
      // then a command that the shell refuses while the loop still runs
      s.llm.push(
        terminal({ command: 'while true; do /bin/true; done' }),
        terminal({ command: 'C-c', is_input: true }),
        terminal({ command: '' }),
        terminal({ command: '' }),
        terminal({ command: `echo "after-${i} $KEPT"` }),
      );
    }
    s.llm.push({ text: 'done' });
    assert.equal((await s.d.req('POST', `/api/conversations/${id}/events`, { content: [{ text: 'go' }], run: true })).status, 200);
    // the turn ends with the agent's answer (or an error, shown by the assertions below)
    const ended = (e: { kind: string; source: string }) => (e.kind === 'MessageEvent' && e.source === 'agent') || e.kind === 'ConversationErrorEvent';
    await waitFor(async () => (await allEvents(s.d.req, id)).some(ended), 'the turn ended', 300_000);
    const texts = (await allEvents(s.d.req, id))
      .filter((e) => e.kind === 'ObservationEvent')
      .map((e) => ({ text: e.observation.content.map((c: { text?: string }) => c.text ?? '').join(''), exit: e.observation.exit_code }));
    assert.equal(texts.length, 1 + tries * 5);
    for (let i = 0; i < tries; i++) {
      const [loop, stop, wait1, wait2, echo] = texts.slice(1 + i * 5, 6 + i * 5);
      assert.equal(loop!.exit, -1, `try ${i}: the loop runs: ${loop!.text}`);
      assert.ok(
        [stop, wait1, wait2].some((o) => o!.exit === 130),
        `try ${i}: C-c ended the loop: ${JSON.stringify([stop, wait1, wait2])}`,
      );
      assert.match(echo!.text, new RegExp(`^after-${i} yes\\n`), `try ${i}`);
    }
    await s.d.req('DELETE', `/api/conversations/${id}`);
  });
});
