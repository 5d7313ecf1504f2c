/**
 * One operations table (src/api/operations.ts), two doors: every operation a REST route calls is a
 * tRPC procedure of the same kind (listed from the route table, then asked of a real daemon's
 * /trpc), and the operations whose REST form is not JSON (the streamed events page, a file's bytes
 * up and down) answer the same over tRPC.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { after, before, describe, test } from 'node:test';
import { ROUTES } from '../bridge/routes.js';
import { operations, type OperationName } from '../src/api/operations.js';
import { appRouter } from '../src/api/router.js';
import { createParleyClient, type ParleyClient } from '../src/client.js';
import { startDaemon, type DaemonHandle } from './support/daemon.js';

/** Every operation a REST route can call (a route that serves two names both). */
const restOperations = [...new Set(ROUTES.flatMap((r) => [r.procedure, ...(r.alternative ? [r.alternative.procedure] : [])]))];
const procedures = appRouter._def.procedures as Record<string, { _def: { type: string } } | undefined>;

describe('every REST operation is a tRPC procedure', () => {
  test('listed from the route table: each is a procedure of the type its operation says', () => {
    assert.ok(restOperations.length >= 40, `the route table names ${restOperations.length} operations`);
    const missing = restOperations.filter((name) => !procedures[name]);
    assert.deepEqual(missing, [], 'REST operations that /trpc does not serve');
    for (const name of restOperations) assert.equal(procedures[name]!._def.type, operations[name].type, name);
  });

  test("the router serves exactly the table's operations (and the events subscription)", () => {
    const routerNames = Object.keys(procedures).filter((n) => n !== 'events');
    assert.deepEqual(routerNames.sort(), Object.keys(operations).sort());
  });
});

describe('over the wire', () => {
  let d: DaemonHandle;
  let client: ParleyClient;
  before(async () => {
    d = await startDaemon({ SANDBOX: 'none' });
    client = createParleyClient({ url: d.url });
  });
  after(async () => {
    await d?.stop();
    if (d) fs.rmSync(d.dataDir, { recursive: true, force: true });
  });

  test('/trpc knows every REST operation by name', async () => {
    const unknown = await fetch(`${d.url}/trpc/noSuchOperation`);
    assert.match(await unknown.text(), /No procedure found/, 'what /trpc answers for a name it does not serve');
    const missing: string[] = [];
    for (const name of restOperations) {
      // a GET runs a query (without input: most refuse it) and is refused by a mutation (405); neither is "no procedure"
      const r = await fetch(`${d.url}/trpc/${name}`);
      const text = await r.text();
      if (/No procedure found/.test(text)) missing.push(name);
      else if (operations[name as OperationName].type === 'mutation') assert.equal(r.status, 405, `${name}: ${text}`);
    }
    assert.deepEqual(missing, []);
  });

  test('searchEvents: the page REST streams, collected', async () => {
    const id = (await d.req('POST', '/api/conversations', {})).body.conversation_id as string;
    for (let i = 0; i < 3; i++) await d.req('POST', `/api/conversations/${id}/events`, { content: [{ type: 'text', text: `m${i}` }] });
    const rest = await d.req('GET', `/api/conversations/${id}/events/search?kind=MessageEvent&limit=2`);
    assert.equal(rest.status, 200, rest.text);
    const trpc = await client.searchEvents.query({ conversation_id: id, kind: 'MessageEvent', limit: 2 });
    assert.deepEqual(trpc, rest.body);
    assert.equal(trpc.items.length, 2);
    assert.ok(trpc.next_page_id);
  });

  test('uploadFile and downloadFile: the same bytes at both doors (base64 over tRPC)', async () => {
    const id = (await d.req('POST', '/api/conversations', {})).body.conversation_id as string;
    const bytes = Buffer.from(Array.from({ length: 512 }, (_, i) => i % 256));
    const up = await client.uploadFile.mutate({ conversation_id: id, path: 'bin/all-bytes.dat', content_base64: bytes.toString('base64') });
    assert.equal(up.success, true);
    assert.equal(up.file_size, 512);
    const rest = await fetch(`${d.url}/api/file/download?conversation_id=${id}&path=bin/all-bytes.dat`);
    assert.equal(rest.status, 200);
    assert.deepEqual(Buffer.from(await rest.arrayBuffer()), bytes);
    const down = await client.downloadFile.query({ conversation_id: id, path: 'bin/all-bytes.dat' });
    assert.equal(down.name, 'all-bytes.dat');
    assert.deepEqual(Buffer.from(down.content_base64, 'base64'), bytes);
    // REST's upload (multipart) and tRPC's download meet too
    const form = new FormData();
    form.append('file', new Blob([bytes.subarray(0, 100)]), 'x');
    assert.equal((await fetch(`${d.url}/api/file/upload?conversation_id=${id}&path=bin/part.dat`, { method: 'POST', body: form })).status, 200);
    assert.deepEqual(
      Buffer.from((await client.downloadFile.query({ conversation_id: id, path: 'bin/part.dat' })).content_base64, 'base64'),
      bytes.subarray(0, 100),
    );
    // not base64: a 422 like any input that fails its schema
    await assert.rejects(client.uploadFile.mutate({ conversation_id: id, path: 'x', content_base64: '%%%' }), (e: any) => e.data?.httpStatus === 422);
  });
});
