/**
 * Nothing stalls the daemon: conversations that leave FIFOs, with and without a reader,
 * and endless files behind the file editor's undo_edit and view get error observations at once, and a
 * new conversation still runs and downloads still answer. Judged from the daemon's answers and the host.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { allEvents } from './support/conversation-api.js';
import { waitFor } from './support/daemon.js';
import { useScriptedDaemon } from './support/scripted-daemon.js';

describe('nothing stalls the daemon: FIFOs and endless files behind the file editor', { timeout: 600_000 }, () => {
  const s = useScriptedDaemon({ SANDBOX: 'bwrap', SANDBOX_NETWORK: 'none' });

  async function turn(id: string, calls: { name: string; arguments: object }[]): Promise<any[]> {
    const before = (await allEvents(s.d.req, id)).length;
    s.llm.push(...calls.map((c) => ({ toolCalls: [c] })), { text: 'done' });
    assert.equal((await s.d.req('POST', `/api/conversations/${id}/events`, { content: [{ text: 'go' }], run: true })).status, 200);
    await waitFor(
      async () => (await allEvents(s.d.req, id)).slice(before).some((e) => e.kind === 'MessageEvent' && e.source === 'agent'),
      'the turn ended',
      120_000,
    );
    return (await allEvents(s.d.req, id))
      .slice(before)
      .filter((e) => e.kind === 'ObservationEvent')
      .map((e) => e.observation);
  }

  test('FIFO (read or not) or endless file behind undo_edit and view: error observations; a new conversation still runs and downloads answer', async () => {
    const ids: string[] = [];
    for (let i = 0; i < 4; i++) ids.push((await s.d.req('POST', '/api/conversations', {})).body.conversation_id);
    // one after the other: the scripted LLM answers whichever conversation asks first
    const stuck: any[][] = [];
    for (const [i, id] of ids.entries()) {
      stuck.push(
        await turn(id, [
          { name: 'file_editor', arguments: { command: 'create', path: '/workspace/f.txt', file_text: 'x\n' } },
          // a FIFO where the file was; half of them with a reader that would take a write
          // (endless.txt: past the editor's 10 MiB at once, and growing)
          {
            name: 'terminal',
            arguments: {
              command:
                `rm f.txt && mkfifo f.txt && ${i % 2 ? '(cat f.txt > /dev/null &)' : 'true'} && ` +
                `head -c 11M /dev/zero > endless.txt && (while :; do echo a >> endless.txt; sleep 0.05; done &) && mkfifo g.txt && echo ok`,
            },
          },
          { name: 'file_editor', arguments: { command: 'undo_edit', path: '/workspace/f.txt' } },
          { name: 'file_editor', arguments: { command: 'view', path: '/workspace/g.txt' } },
          { name: 'file_editor', arguments: { command: 'view', path: '/workspace/endless.txt' } },
          { name: 'file_editor', arguments: { command: 'str_replace', path: '/workspace/g.txt', old_str: 'a', new_str: 'b' } },
        ]),
      );
    }
    for (const obs of stuck) {
      const texts = obs.map((o) => o.content.map((c: any) => c.text ?? '').join(''));
      assert.equal(obs.length, 6, JSON.stringify(texts));
      assert.equal(obs[2].is_error, false, `undo_edit of a create removes what is there (the FIFO): ${texts[2]}`);
      assert.equal(obs[3].is_error, true);
      assert.match(texts[3]!, /not a regular file/);
      assert.equal(obs[4].is_error, true, 'an endless file is refused past the limit');
      assert.match(texts[4]!, /too large/);
      assert.match(texts[5]!, /not a regular file/);
    }
    // the daemon still serves everything: a new conversation runs, a download answers
    const fresh = (await s.d.req('POST', '/api/conversations', {})).body.conversation_id;
    const obs = await turn(fresh, [
      { name: 'file_editor', arguments: { command: 'create', path: '/workspace/hello.txt', file_text: 'hello\n' } },
      { name: 'terminal', arguments: { command: 'cat hello.txt' } },
    ]);
    assert.match(obs[1].content[0].text, /hello/);
    const dl = await s.d.req('GET', `/api/file/download?conversation_id=${fresh}&path=/workspace/hello.txt`);
    assert.equal(dl.status, 200);
    assert.equal(dl.text, 'hello\n');
    for (const id of ids) await s.d.req('DELETE', `/api/conversations/${id}`);
  });
});
