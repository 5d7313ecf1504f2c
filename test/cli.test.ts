/**
 * The `parley` command, run as a subprocess (bin/parley.mjs, as `npx parley` runs it) against a
 * real daemon and the scripted LLM: exit codes for each way a run or a request ends, NDJSON that
 * holds every event once and in order, send, ls, rm, Ctrl-C detaching or interrupting, plain
 * output off a terminal and colours on one, a reader of the output or the command itself too slow
 * for the stream (bounded memory, every event once), `serve`, and the session key in no output.
 * (Resuming across a restart of the daemon: test/cli-resume.test.ts.)
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import { after, before, describe, test } from 'node:test';
import { freePort, tempDir, waitFor } from './support/daemon.js';
import { BIN, H, KEY, ndjson, oneToN, seqsOf, startCliBench, type Cli, type CliBench } from './support/parley-cli.js';

const T = { timeout: 150_000 };
let b: CliBench;

before(async () => {
  // a small subscriber queue: a command that stops reading is cut off after 256 KiB of events
  b = await startCliBench({ WS_MAX_BUFFERED_BYTES: '262144' });
});
after(async () => {
  await b?.close();
});

const parley: CliBench['parley'] = (...args) => b.parley(...args);
const info = (id: string) => b.info(id);
const idFrom = (stderr: string) => /conversation ([0-9a-f-]{36})/.exec(stderr)?.[1];

describe('parley run', () => {
  test('streams a run to its end: exit 0, the command and its output, the edit as a diff, plain text off a TTY', T, async () => {
    // FORCE_COLOR must not matter: colours and the spinner go only to a terminal
    const r = parley(['run', 'task:finish'], { FORCE_COLOR: '1' });
    assert.equal(await r.code, 0, r.err());
    const out = r.out();
    assert.match(out, /> task:finish/);
    assert.match(out, /\$ printf 'one\\ntwo\\n'\n {2}one\n {2}two/);
    assert.match(out, /✎ create \S+\/hello\.py\n {2}\+ print\("hello"\)\n {2}\+ print\("again"\)\n[^ ]/);
    // an edit shows only the lines it changes
    assert.match(out, /✎ str_replace \S+\/hello\.py\n {2}- print\("again"\)\n {2}\+ print\("edited"\)\n[^ ]/);
    assert.match(out, /✓ Wrote hello\.py/);
    assert.match(out, /· finished/);
    assert.doesNotMatch(out, /\x1b/, 'no escape sequences (colour, spinner) in piped output');
    const id = idFrom(r.err());
    assert.ok(id, r.err());
    assert.equal((await info(id)).execution_status, 'finished');
  });

  test('--json: every event once, seqs 1..last gap-free, the same as the log', T, async () => {
    const r = parley(['run', 'task:finish', '--json']);
    assert.equal(await r.code, 0, r.err());
    const events = ndjson(r.out());
    const id = idFrom(r.err())!;
    const last = (await info(id)).last_seq as number;
    assert.deepEqual(seqsOf(events), oneToN(last));
    const logged = (await b.d.req('GET', `/api/conversations/${id}/events/search?limit=100`, undefined, H)).body.items as { id: string }[];
    assert.deepEqual(
      events.filter((e) => e.seq !== undefined).map((e) => (e as { id?: string }).id),
      logged.map((e) => e.id),
    );
    const statuses = events.filter((e) => e.key === 'execution_status').map((e) => e.value);
    assert.deepEqual(statuses, ['running', 'finished']);
  });

  test('a run that ends in error exits 1; a stuck agent exits 3', T, async () => {
    const failed = parley(['run', 'task:error']);
    const stuck = parley(['run', 'task:stuck', '--json']);
    assert.equal(await failed.code, 1, failed.out() + failed.err());
    assert.match(failed.out(), /✗ \w+: /);
    assert.equal(await stuck.code, 3, stuck.err());
    assert.equal(ndjson(stuck.out()).at(-1)?.value, 'stuck');
  });

  test('wrong arguments exit 2 with one line; a value the daemon refuses, 9', T, async () => {
    for (const args of [['run'], ['attach'], ['ls', '--limit', '0'], ['bogus'], ['ls', '--nope'], ['ls', '--url', 'http://user:secret-in-url@127.0.0.1:1']]) {
      const r = parley(args);
      assert.equal(await r.code, 2, `${args.join(' ')}: ${r.err()}`);
      assert.equal(r.err().trim().split('\n').length, 1, r.err());
      assert.match(r.err(), /^parley: /);
      assert.ok(!r.err().includes('secret-in-url'));
    }
    // what the daemon checks, it refuses: one line naming the field, exit 9, and no conversation made
    const before = (await b.d.req('GET', '/api/conversations?limit=100', undefined, H)).body.items.length;
    const refused = parley(['run', 'x', '--provider', 'svn']);
    assert.equal(await refused.code, 9, refused.err());
    assert.match(refused.err(), /^parley: the daemon refused the request: git_provider: /);
    assert.equal((await b.d.req('GET', '/api/conversations?limit=100', undefined, H)).body.items.length, before);
    const help = parley(['--help']);
    assert.equal(await help.code, 0);
    assert.match(help.out(), /Exit codes:/);
  });
});

describe('errors: one line each, distinct exit codes', () => {
  test('daemon not reachable: 6', T, async () => {
    const r = parley(['ls', '--url', `http://127.0.0.1:${await freePort()}`]);
    assert.equal(await r.code, 6);
    assert.match(r.err(), /^parley: cannot reach the daemon at http:\/\/127\.0\.0\.1:\d+ \(connection refused\)/);
    assert.equal(r.err().trim().split('\n').length, 1);
  });

  test('no key or a wrong key: 7, and the key given is never printed', T, async () => {
    const none = parley(['ls'], { PARLEY_API_KEY: undefined });
    const wrong = parley(['ls', '--key', 'a-wrong-key-printed-nowhere'], { PARLEY_API_KEY: undefined });
    const wrongEnv = parley(['attach', '00000000-0000-0000-0000-000000000000'], { PARLEY_API_KEY: 'another-wrong-key-value' });
    assert.equal(await none.code, 7);
    assert.match(none.err(), /requires a session key \(401 Unauthorized\); set PARLEY_API_KEY or --key/);
    assert.equal(await wrong.code, 7);
    assert.match(wrong.err(), /refused the session key \(401 Unauthorized\)/);
    assert.equal(await wrongEnv.code, 7);
    for (const r of [wrong, wrongEnv]) assert.ok(!/a-wrong-key-printed-nowhere|another-wrong-key-value/.test(r.out() + r.err()));
  });

  test('unknown conversation: 8 for attach, send and rm; a malformed id too', T, async () => {
    const unknown = '0c2a4c9e-6f0b-4e8e-9d55-0a0a0a0a0a0a';
    for (const args of [
      ['attach', unknown],
      ['send', unknown, 'hello'],
      ['rm', unknown],
      ['attach', 'not-an-id'],
    ]) {
      const r = parley(args);
      assert.equal(await r.code, 8, `${args.join(' ')}: ${r.err()}`);
      assert.match(r.err(), args[1] === 'not-an-id' ? /not-an-id is not a conversation id/ : new RegExp(`no conversation ${unknown}`));
      assert.equal(r.err().trim().split('\n').length, 1);
    }
  });
});

describe('send, ls, rm', () => {
  test('send --run runs the agent; ls lists the conversation; rm deletes it', T, async () => {
    const id = (await b.d.req('POST', '/api/conversations', {}, H)).body.conversation_id as string;
    const quiet = parley(['send', id, 'just noting']);
    assert.equal(await quiet.code, 0, quiet.err());
    const sent = parley(['send', id, 'task:reply', '--run']);
    assert.equal(await sent.code, 0, sent.err());
    await waitFor(async () => (await info(id)).execution_status === 'finished', 'the run send --run started', 60_000);
    const items = (await b.d.req('GET', `/api/conversations/${id}/events/search?limit=100`, undefined, H)).body.items as any[];
    const texts = items.filter((e) => e.kind === 'MessageEvent').map((e) => `${e.source}:${e.llm_message.content[0].text}`);
    assert.deepEqual(texts, ['user:just noting', 'user:task:reply', 'agent:pong']);

    const ls = parley(['ls', '--json', '--all']);
    assert.equal(await ls.code, 0, ls.err());
    const listed = ndjson(ls.out()) as unknown as { conversation_id: string; execution_status: string }[];
    assert.equal(listed.find((c) => c.conversation_id === id)?.execution_status, 'finished');
    const table = parley(['ls', '--limit', '100']);
    assert.equal(await table.code, 0);
    assert.match(table.out(), /^ID\s+STATUS\s+UPDATED\s+REPOSITORY\s+TITLE\n/);
    assert.match(table.out(), new RegExp(`${id}  finished`));

    // attach to a conversation at rest shows its events and leaves with its status's code
    const shown = parley(['attach', id, '--json']);
    assert.equal(await shown.code, 0, shown.err());
    assert.deepEqual(seqsOf(ndjson(shown.out())), oneToN((await info(id)).last_seq));

    const rm = parley(['rm', id]);
    assert.equal(await rm.code, 0, rm.err());
    assert.equal((await b.d.req('GET', `/api/conversations/${id}`, undefined, H)).status, 404);
    const after = parley(['ls', '--json', '--all']);
    assert.equal(await after.code, 0);
    assert.ok(!after.out().includes(id));
  });
});

describe('Ctrl-C', () => {
  /** Starts `parley run task:slow --json …` and resolves once the run waits for the LLM. */
  async function slowRun(extra: string[]): Promise<{ r: Cli; id: string }> {
    const asked = b.llm.requests.length;
    const r = parley(['run', 'task:slow', '--json', ...extra]);
    await waitFor(() => idFrom(r.err()), 'the conversation id', 60_000);
    const id = idFrom(r.err())!;
    await waitFor(() => r.out().includes('"value":"running"'), 'the run to start', 60_000);
    await waitFor(() => b.llm.requests.slice(asked).some((q) => JSON.stringify(q.body).includes('task:slow')), 'the LLM call', 60_000);
    return { r, id };
  }

  test('detaches: exit 130, says how to resume, the agent goes on', T, async () => {
    const { r, id } = await slowRun([]);
    r.proc.kill('SIGINT');
    assert.equal(await r.code, 130, r.err());
    const at = Number(/--after (\d+)/.exec(r.err())?.[1]);
    assert.match(r.err(), new RegExp(`detached from ${id} at seq \\d+; the conversation goes on: parley attach ${id} --after \\d+`));
    assert.equal(at, seqsOf(ndjson(r.out())).at(-1));
    assert.equal((await info(id)).execution_status, 'running');
    await b.d.req('POST', `/api/conversations/${id}/interrupt`, undefined, H);
  });

  test('--interrupt: interrupts the agent, shows it, exits 4 (paused)', T, async () => {
    const { r, id } = await slowRun(['--interrupt']);
    r.proc.kill('SIGINT');
    assert.equal(await r.code, 4, r.err());
    const events = ndjson(r.out());
    assert.ok(
      events.some((e) => e.kind === 'InterruptEvent'),
      'the interruption is shown',
    );
    assert.equal(events.at(-1)?.value, 'paused');
    assert.deepEqual(seqsOf(events), oneToN((await info(id)).last_seq));
    assert.equal((await info(id)).execution_status, 'paused');
  });
});

describe('on a terminal', () => {
  test('on a terminal (script(1) gives it one): colours', T, async () => {
    const id = (await b.d.req('POST', '/api/conversations', { initial_user_msg: 'task:reply' }, H)).body.conversation_id as string;
    await waitFor(async () => (await info(id)).execution_status === 'finished', 'the run', 60_000);
    const env = { PATH: process.env.PATH!, HOME: os.tmpdir(), TERM: 'xterm-256color', PARLEY_URL: b.d.url, PARLEY_API_KEY: KEY };
    const r = spawnSync('script', ['-qec', `${process.execPath} ${BIN} attach ${id}`, '/dev/null'], { env, encoding: 'utf8', timeout: 60_000 });
    b.printed.push(r.stdout, r.stderr);
    assert.equal(r.status, 0, r.stdout + r.stderr);
    assert.match(r.stdout, /\x1b\[1mtask:reply\x1b\[22m/);
    assert.match(r.stdout, /pong/);
  });
});

describe('a slow reader: every event once, seqs 1..last', () => {
  /** A running conversation (waiting for the LLM) followed by `parley attach --json`, caught up. */
  async function attached(): Promise<{ r: Cli; id: string }> {
    const id = (await b.d.req('POST', '/api/conversations', { initial_user_msg: 'task:slow' }, H)).body.conversation_id as string;
    return { r: await b.attachCaughtUp(id), id };
  }
  /** 9 MB of messages: far more than the daemon queues for a subscriber (256 KiB here) and than socket buffers hold (~4 MB). */
  async function flood(id: string): Promise<void> {
    const big = 'x'.repeat(60_000);
    for (let i = 0; i < 150; i++) {
      const sent = await b.d.req('POST', `/api/conversations/${id}/events`, { content: [{ type: 'text', text: `${i}:${big}` }] }, H);
      assert.equal(sent.status, 200);
    }
  }
  const rssOf = (pid: number) => Number(/VmRSS:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'))![1]) * 1024;

  test('a reader that stops reading the output: the command holds at most ~1 MiB, then resumes exactly', T, async () => {
    const { r, id } = await attached();
    r.proc.stdout!.pause();
    const before = rssOf(r.proc.pid!);
    await flood(id);
    const grown = rssOf(r.proc.pid!) - before;
    r.proc.stdout!.resume();
    assert.ok(grown < 12 * 1024 * 1024, `the command grew by ${(grown / 1048576).toFixed(1)} MiB while 9 MB were waiting for it`);
    await waitFor(() => seqsOf(ndjson(r.out())).length >= 150, 'the rest of the events', 60_000);
    await b.d.req('POST', `/api/conversations/${id}/interrupt`, undefined, H);
    assert.equal(await r.code, 4, r.err());
    assert.deepEqual(seqsOf(ndjson(r.out())), oneToN((await info(id)).last_seq));
  });

  test('a command stopped (SIGSTOP) while 9 MB of events arrive: the daemon cuts it off, it catches up with every event once', T, async () => {
    const { r, id } = await attached();
    r.proc.kill('SIGSTOP');
    try {
      await flood(id);
    } finally {
      r.proc.kill('SIGCONT');
    }
    // the daemon ended the stream of a subscriber that far behind (TOO_MANY_REQUESTS, or a closed stream);
    // the command resubscribes after the last seq it showed (or after its output drained, whichever comes first)
    await waitFor(() => seqsOf(ndjson(r.out())).length >= 150, 'the rest of the events', 90_000);
    await b.d.req('POST', `/api/conversations/${id}/interrupt`, undefined, H);
    assert.equal(await r.code, 4, r.err());
    assert.deepEqual(seqsOf(ndjson(r.out())), oneToN((await info(id)).last_seq));
  });
});

describe('serve', () => {
  test('starts the daemon as npm start does and stops on SIGTERM', T, async () => {
    const r = parley(['serve'], { PORT: '0', DATA_DIR: tempDir(), SANDBOX: 'none', SESSION_API_KEY: KEY });
    await waitFor(() => /listening on http:\/\/127\.0\.0\.1:(\d+)/.exec(r.out()), 'the daemon to listen', 120_000);
    const port = /listening on http:\/\/127\.0\.0\.1:(\d+)/.exec(r.out())![1];
    assert.equal((await fetch(`http://127.0.0.1:${port}/health`)).status, 200);
    r.proc.kill('SIGTERM');
    assert.equal(await r.code, 0, r.err());
  });
});

test('the session key is in no output of any command', () => {
  assert.ok(b.printed.length > 20);
  for (const text of b.printed) assert.ok(!text.includes(KEY), `the key was printed: ${text.slice(0, 300)}`);
});
