/**
 * `parley attach` resuming exactly across a restart of the daemon: killed mid-run, started again on
 * the same port and data, the command reconnects and shows what was written meanwhile; every event
 * once, seqs 1..last; `--after` gives exactly what follows a seq. (A file apart from
 * test/cli.test.ts, to stay within the runner's per-file time on a busy machine.)
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { freePort } from './support/daemon.js';
import { H, KEY, ndjson, oneToN, seqsOf, startCliBench, type CliBench } from './support/parley-cli.js';

let b: CliBench;

before(async () => {
  b = await startCliBench({ PORT: String(await freePort()) });
});
after(async () => {
  await b?.close();
});

test('attach resumes across a restart of the daemon: no gap, no duplicate', { timeout: 150_000 }, async () => {
  const id = (await b.d.req('POST', '/api/conversations', { initial_user_msg: 'task:slow' }, H)).body.conversation_id as string;
  const r = await b.attachCaughtUp(id);
  const last0 = (await b.info(id)).last_seq;
  // killed mid-run: the restarted daemon records that the run was cut short (ConversationErrorEvent,
  // status error) while the command is still reconnecting
  await b.restart('SIGKILL');
  assert.equal(await r.code, 1, r.err());
  assert.match(r.err(), /lost the connection to .*; reconnecting/);
  assert.match(r.err(), new RegExp(`reconnected; resuming after seq ${last0}`));
  const last = (await b.info(id)).last_seq;
  assert.ok(last > last0, 'events were written while the command was disconnected');
  assert.deepEqual(seqsOf(ndjson(r.out())), oneToN(last));

  // --after: exactly what comes after a seq
  const tail = b.parley(['attach', id, '--json', '--after', String(last0)]);
  assert.equal(await tail.code, 1);
  assert.deepEqual(seqsOf(ndjson(tail.out())), oneToN(last).slice(last0));

  for (const text of b.printed) assert.ok(!text.includes(KEY), 'the key is in no output');
});
