/**
 * One error table (ERROR_KINDS in src/errors.ts), the same answer at both doors: every domain error
 * kind, caused for real on a real daemon, has the same HTTP status over REST and over tRPC (whose
 * error carries it in `data.httpStatus`, with the table's tRPC code), and REST's body is FastAPI's
 * shape (docs/api.md). A kind added to the table without a case here fails the first test.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import Database from 'better-sqlite3';
import { TRPCClientError } from '@trpc/client';
import { createParleyClient, type ParleyClient } from '../src/client.js';
import { ERROR_KINDS, type ErrorKind } from '../src/errors.js';
import { journalFile } from '../src/store/journal.js';
import { startDaemon, tempDir, type DaemonHandle } from './support/daemon.js';

type Rest = Awaited<ReturnType<DaemonHandle['req']>>;
interface Case {
  /** The same failure caused over REST (its answer) and over tRPC (a call that must reject). */
  rest(d: DaemonHandle, id: string): Promise<Rest>;
  trpc(c: ParleyClient, id: string): Promise<unknown>;
  /** What REST's body must be. */
  body(b: any): void;
}

const MISSING = '00000000-0000-4000-8000-00000000abcd';

const CASES: Record<Exclude<ErrorKind, 'unavailable'>, Case> = {
  invalidInput: {
    rest: (d, id) => d.req('POST', `/api/conversations/${id}/events`, { content: 5 }),
    trpc: (c, id) => c.sendMessage.mutate({ conversation_id: id, message: { content: 5 } } as never),
    body: (b) =>
      assert.deepEqual(
        b.detail.map((i: any) => [i.type, i.loc]),
        [['list_type', ['body', 'content']]],
      ),
  },
  validation: {
    rest: (d) => d.req('POST', '/api/conversations', { replay_json: '[]', initial_user_msg: 'hello' }),
    trpc: (c) => c.createConversation.mutate({ replay_json: '[]', initial_user_msg: 'hello' }),
    body: (b) =>
      assert.deepEqual(
        b.detail.map((i: any) => i.loc[0]),
        ['body'],
      ),
  },
  badRequest: {
    rest: (d, id) => d.req('POST', `/api/conversations/${id}/goal`, { objective: '  ' }),
    trpc: (c, id) => c.startGoal.mutate({ conversation_id: id, objective: '' }),
    body: (b) => assert.deepEqual(b, { detail: 'Goal objective must not be empty.' }),
  },
  notFound: {
    rest: (d) => d.req('GET', `/api/conversations/${MISSING}`),
    trpc: (c) => c.getConversation.query({ conversation_id: MISSING }),
    body: (b) => assert.deepEqual(b, { detail: 'Conversation not found' }),
  },
  forbidden: {
    rest: (d, id) => d.req('GET', `/api/file/download?conversation_id=${id}&path=/etc/passwd`),
    trpc: (c, id) => c.downloadFile.query({ conversation_id: id, path: '/etc/passwd' }),
    body: (b) => assert.match(b.detail, /outside the workspace/),
  },
  conflict: {
    rest: (d) => d.req('POST', '/api/secrets', { name: 'ALREADY_THERE', value: 'value-one' }),
    trpc: (c) => c.createSecret.mutate({ name: 'ALREADY_THERE', value: 'value-two' }),
    body: (b) => assert.deepEqual(b, { detail: 'Secret ALREADY_THERE already exists' }),
  },
  notImplemented: {
    rest: (d) => d.req('POST', '/api/llm/subscription/openai/device/start'),
    trpc: (c) => c.openaiDeviceStart.mutate(),
    body: (b) => assert.match(b.detail, /needs the internet/),
  },
  payloadTooLarge: {
    rest: (d, id) => d.req('POST', `/api/conversations/${id}/events`, { content: [{ type: 'text', text: 'x'.repeat(4096) }] }),
    trpc: (c, id) => c.sendMessage.mutate({ conversation_id: id, message: { content: [{ type: 'text', text: 'x'.repeat(4096) }] } }),
    body: (b) => assert.match(b.detail, /MAX_EVENT_BYTES/),
  },
};

/** The tRPC call's rejection: its code and HTTP status. */
async function trpcFailure(call: Promise<unknown>): Promise<{ code: string; httpStatus: number; message: string; issues?: unknown[] }> {
  try {
    await call;
  } catch (err) {
    assert.ok(err instanceof TRPCClientError, String(err));
    const data = err.data as { code: string; httpStatus: number; issues?: unknown[] };
    return { code: data.code, httpStatus: data.httpStatus, message: err.message, issues: data.issues };
  }
  assert.fail('the tRPC call succeeded');
}

function assertSameAnswer(kind: ErrorKind, rest: Rest, trpc: Awaited<ReturnType<typeof trpcFailure>>) {
  const { status, trpcCode } = ERROR_KINDS[kind];
  assert.equal(rest.status, status, `${kind} over REST: ${rest.text}`);
  assert.equal(trpc.httpStatus, status, `${kind} over tRPC: ${JSON.stringify(trpc)}`);
  assert.equal(trpc.code, trpcCode, kind);
}

describe('one error table, the same status over REST and tRPC', () => {
  let d: DaemonHandle;
  let client: ParleyClient;
  let id: string;
  before(async () => {
    d = await startDaemon({ SANDBOX: 'none', MAX_EVENT_BYTES: '2048' });
    client = createParleyClient({ url: d.url });
    id = (await d.req('POST', '/api/conversations', {})).body.conversation_id;
    assert.equal((await d.req('POST', '/api/secrets', { name: 'ALREADY_THERE', value: 'value-zero' })).status, 201);
  });
  after(async () => {
    await d?.stop();
    if (d) fs.rmSync(d.dataDir, { recursive: true, force: true });
  });

  test('every kind of the table has a case (503 in the next test)', () => {
    assert.deepEqual(Object.keys(ERROR_KINDS).sort(), [...Object.keys(CASES), 'unavailable'].sort());
  });

  for (const [kind, c] of Object.entries(CASES) as [ErrorKind, Case][]) {
    test(`${kind}: ${ERROR_KINDS[kind].status} at both doors`, async () => {
      const rest = await c.rest(d, id);
      const trpc = await trpcFailure(c.trpc(client, id));
      assertSameAnswer(kind, rest, trpc);
      c.body(rest.body);
      if (ERROR_KINDS[kind].status === 422) {
        assert.ok(Array.isArray(trpc.issues) && trpc.issues.length > 0, `a 422 over tRPC carries its issues: ${JSON.stringify(trpc)}`);
      }
    });
  }
});

describe('unavailable (503) at both doors', () => {
  test('a journal that cannot be written: 503 with the reason over REST and over tRPC', {
    skip: process.env.PARLEY_TEST_STORE === 'postgres' ? "the journal is the SQLite store's" : false,
  }, async () => {
    const dir = tempDir();
    const d1 = await startDaemon({ SANDBOX: 'none' }, dir);
    const id = (await d1.req('POST', '/api/conversations', {})).body.conversation_id as string;
    await d1.stop();
    // the next start writes generation gen + 1: make that file /dev/full, with no reserve to move to
    const db = new Database(path.join(dir, 'parley.db'), { readonly: true });
    const { gen } = db.prepare('SELECT gen FROM journal_state').get() as { gen: number };
    db.close();
    fs.symlinkSync('/dev/full', journalFile(path.join(dir, 'journal'), gen + 1));
    const d2 = await startDaemon({ SANDBOX: 'none', DISK_RESERVE_MB: '0' }, dir);
    try {
      const rest = await d2.req('POST', `/api/conversations/${id}/events`, { content: [{ type: 'text', text: 'no room' }] });
      const trpc = await trpcFailure(
        createParleyClient({ url: d2.url }).sendMessage.mutate({ conversation_id: id, message: { content: [{ type: 'text', text: 'no room' }] } }),
      );
      assertSameAnswer('unavailable', rest, trpc);
      assert.match(rest.body.detail, /event log write failed: ENOSPC/);
      assert.deepEqual(Object.keys(rest.body), ['detail']);
      assert.match(trpc.message, /event log write failed: ENOSPC/);
    } finally {
      await d2.stop();
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
