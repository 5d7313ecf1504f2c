/**
 * One table of operations (src/api/operations.ts) and what is generated from it: the REST routes
 * (bridge/routes.ts), the tRPC router (src/api/router.ts) and the OpenAPI document
 * (bridge/openapi.ts). What the table guarantees: each description is coherent with its input
 * schema, every operation is reached by REST (a request built from its description runs it) and by
 * tRPC (a procedure of its kind), the document lists every one, and on a real daemon every route
 * and procedure answers; the operations whose REST form is not JSON (the streamed events page, a
 * file's bytes up and down) answer the same over tRPC.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { after, before, describe, test } from 'node:test';
import type * as z from 'zod';
import { buildOpenApi } from '../bridge/openapi.js';
import { pathParams, type RouteRequest } from '../bridge/route.js';
import { RouteTable, tableRoutes } from '../bridge/routes.js';
import type { AnyOperation } from '../src/api/operation.js';
import { type OperationName, operations } from '../src/api/operations.js';
import { appRouter } from '../src/api/router.js';
import { createParleyClient, type ParleyClient } from '../src/client.js';
import { type DaemonHandle, startDaemon } from './support/daemon.js';

const entries = Object.entries(operations) as [OperationName, AnyOperation][];
const procedures = appRouter._def.procedures as Record<string, { _def: { type: string } } | undefined>;
const ID = '3f1c2d4e-5a6b-4c7d-8e9f-0a1b2c3d4e5f';
/** The path of an operation with its parameters filled in (a conversation id where it takes one). */
const samplePath = (path: string) => path.replace(/\{([a-z_]+)\}/g, (_, n: string) => (n === 'conversation_id' ? ID : `sample-${n}`));
/** A request that meets an operation's `when` (or, for one without, a plain one). */
function sampleRequest(op: AnyOperation, params: Record<string, string>): RouteRequest {
  const when = op.rest.when;
  if (when && 'queryHas' in when) return { params, query: { [when.queryHas]: ID }, rawQuery: `${when.queryHas}=${ID}`, body: undefined };
  if (when) return { params, query: {}, body: { [when.bodyHasAnyKey[0]!]: {} } };
  return { params, query: {}, body: {} };
}

describe('the operations table', () => {
  test("each REST description fits its input: path parameters and the body field are the input's fields; a whole-body input has nothing beside it", () => {
    assert.ok(entries.length >= 41, `${entries.length} operations`);
    for (const [name, { rest, input }] of entries) {
      const shape = (input as z.ZodObject).shape as Record<string, unknown> | undefined;
      for (const p of pathParams(rest.path)) assert.ok(shape?.[p], `${name}: {${p}} is a field of its input`);
      if (typeof rest.body === 'object') assert.ok(shape?.[rest.body.field], `${name}: the body field ${rest.body.field} is a field of its input`);
      if (rest.body === 'input') assert.ok(!pathParams(rest.path).length && !rest.query, `${name}: a whole-body input has no parameter beside it`);
      assert.match(rest.path, /^\/api(\/([a-z0-9_-]+|\{[a-z_]+\}))+$/, `${name}: a path template`);
      assert.ok(rest.summary && rest.tag, `${name}: summary and tag`);
    }
  });

  test('a method and path belong to one operation, or to one without `when` and others with it, which read the body the same way', () => {
    const byRoute = new Map<string, typeof entries>();
    for (const e of entries) byRoute.set(`${e[1].rest.method} ${e[1].rest.path}`, [...(byRoute.get(`${e[1].rest.method} ${e[1].rest.path}`) ?? []), e]);
    for (const [route, ops] of byRoute) {
      assert.equal(ops.filter(([, o]) => !o.rest.when).length, 1, `${route}: one operation without \`when\``);
      const bodies = new Set(
        ops.map(([, o]) => (typeof o.rest.body === 'object' ? (o.rest.body.multipart ? 'multipart' : 'json') : o.rest.body ? 'json' : 'none')),
      );
      assert.equal(bodies.size, 1, `${route}: every operation reads the body as the route does`);
    }
    assert.ok(
      [...byRoute.values()].some((ops) => ops.length > 1),
      'the table has alternatives (POST and GET /api/conversations)',
    );
  });

  test('REST reaches every operation: a request built from its description runs it, with or without a trailing slash', () => {
    const table = new RouteTable(tableRoutes());
    for (const [name, op] of entries) {
      for (const url of [samplePath(op.rest.path), `${samplePath(op.rest.path)}/`]) {
        const { route, params } = table.match(op.rest.method, url);
        assert.ok(route, `${op.rest.method} ${url} has a route`);
        assert.equal(route.pick(sampleRequest(op, params)).operation, name, `${op.rest.method} ${url} runs ${name}`);
      }
    }
    // a literal segment wins over a parameter whatever the order of the table; a method the path lacks is a 405's list
    assert.equal(table.match('GET', '/api/conversations/search').route?.operation, 'searchConversations');
    assert.equal(table.match('GET', '/api/conversations/count').route?.operation, 'countConversations');
    assert.equal(table.match('GET', `/api/conversations/${ID}/events/search`).route?.operation, 'searchEvents');
    assert.equal(table.match('GET', `/api/conversations/${ID}/events/abc`).route?.operation, 'getEvent');
    assert.equal(table.match('PATCH', '/api/conversations/search').route?.operation, 'updateConversation', 'the parameter, when the literal has no PATCH');
    assert.deepEqual(table.match('PUT', `/api/conversations/${ID}`).methods.sort(), ['DELETE', 'GET', 'PATCH']);
    assert.deepEqual(table.match('GET', '/api/conversations//x').route, null);
    assert.deepEqual(table.match('GET', '/api/tools//').route, null);
    assert.deepEqual(table.match('GET', `/api/conversations/a%2Fb`).params, { conversation_id: 'a/b' });
  });

  test('tRPC serves every operation as the query or mutation it is, and nothing else but the events subscription', () => {
    for (const [name, op] of entries) assert.equal(procedures[name]?._def.type, op.type, name);
    assert.deepEqual(
      Object.keys(procedures)
        .filter((n) => n !== 'events')
        .sort(),
      entries.map(([n]) => n).sort(),
    );
  });

  test('the OpenAPI document lists every operation at its method and path (the ones that share a path in its description), and nothing else', () => {
    const doc = buildOpenApi('0.1.0', true) as {
      paths: Record<string, Record<string, { summary: string; tags: string[]; operationId: string; description?: string }>>;
    };
    const ids = new Set<string>();
    for (const [name, { rest }] of entries) {
      const o = doc.paths[rest.path]?.[rest.method.toLowerCase()];
      assert.ok(o, `${rest.method} ${rest.path} is in the document`);
      if (rest.when) {
        assert.match(o.description ?? '', new RegExp(`\\(\`${name}\`\\)`), `${name} is named on ${rest.method} ${rest.path}`);
        continue;
      }
      assert.equal(o.summary, rest.summary, name);
      assert.deepEqual(o.tags, [rest.tag], name);
      if (rest.operationId) assert.equal(o.operationId, rest.operationId, name);
      assert.ok(!ids.has(o.operationId), `${o.operationId} is one operation's`);
      ids.add(o.operationId);
    }
    const documented = Object.entries(doc.paths).flatMap(([p, item]) => Object.keys(item).map((m) => `${m.toUpperCase()} ${p}`));
    const health = ['GET /alive', 'GET /health', 'GET /ready', 'GET /server_info'];
    assert.deepEqual(documented.sort(), [...new Set(entries.map(([, o]) => `${o.rest.method} ${o.rest.path}`)), ...health].sort());
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

  test('every REST route answers (never a 404 or 405 of an unknown route)', async () => {
    const routes = [...new Set(entries.map(([, o]) => `${o.rest.method} ${o.rest.path}`))];
    const missed: string[] = [];
    for (const route of routes) {
      const [method, path] = route.split(' ') as [string, string];
      const bodyless = method === 'GET' || method === 'DELETE';
      const r = await fetch(`${d.url}${samplePath(path)}`, {
        method,
        ...(bodyless ? {} : { body: '{}', headers: { 'content-type': 'application/json' } }),
      });
      const text = await r.text();
      if (r.status === 405 || (r.status === 404 && text === '{"detail":"Not Found"}')) missed.push(`${route}: ${r.status} ${text}`);
    }
    assert.deepEqual(missed, []);
  });

  test('/trpc knows every operation by name', async () => {
    const unknown = await fetch(`${d.url}/trpc/noSuchOperation`);
    assert.match(await unknown.text(), /No procedure found/, 'what /trpc answers for a name it does not serve');
    const missing: string[] = [];
    for (const [name, op] of entries) {
      // a GET runs a query (without input: most refuse it) and is refused by a mutation (405); neither is "no procedure"
      const r = await fetch(`${d.url}/trpc/${name}`);
      const text = await r.text();
      if (/No procedure found/.test(text)) missing.push(name);
      else if (op.type === 'mutation') assert.equal(r.status, 405, `${name}: ${text}`);
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
