/** The REST API (docs/api.md) against a real daemon on a random port. */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { startDaemon, type DaemonHandle } from './support/daemon.js';

const KEY = 'test-session-key-1';
let d: DaemonHandle;
const H = { 'X-Session-API-Key': KEY };
const post = (p: string, body: unknown) => d.req('POST', p, body, H);
const get = (p: string) => d.req('GET', p, undefined, H);

before(async () => {
  d = await startDaemon({ SESSION_API_KEYS: `old-session-key,${KEY}`, MAX_BODY_BYTES: '65536' });
});
after(async () => {
  assert.equal(await d.stop(), 0);
});

async function newConversation(body: unknown = {}): Promise<string> {
  const r = await post('/api/conversations', body);
  assert.equal(r.status, 200, r.text);
  return r.body.conversation_id;
}

describe('authentication', () => {
  test('every /api route needs a key; 401 comes before validation', async () => {
    for (const [m, p] of [
      ['POST', '/api/conversations'],
      ['GET', '/api/conversations'],
      ['POST', '/api/add-git-providers'],
    ] as const) {
      const r = await d.req(m, p, m === 'POST' ? { bogus: 1 } : undefined);
      assert.equal(r.status, 401);
      assert.deepEqual(r.body, { detail: 'Unauthorized' });
    }
    const wrong = await d.req('POST', '/api/conversations', {}, { 'X-Session-API-Key': 'nope' });
    assert.equal(wrong.status, 401);
  });
  test('any of the rotated keys works; public routes need none', async () => {
    assert.equal((await d.req('POST', '/api/conversations', {}, { 'X-Session-API-Key': 'old-session-key' })).status, 200);
    for (const p of ['/alive', '/health', '/ready', '/server_info', '/openapi.json', '/docs']) {
      assert.equal((await d.req('GET', p)).status, 200, p);
    }
    const info = await d.req('GET', '/server_info');
    assert.equal(info.body.interface_version, '0.1.0');
    assert.equal(info.body.version, '1.30.0', 'the agent-server API version Parley implements');
    assert.equal(typeof info.body.uptime, 'number');
  });
});

describe('POST /api/conversations', () => {
  test('creates with a canonical id and the contract shape', async () => {
    const r = await post('/api/conversations', {});
    assert.equal(r.status, 200);
    assert.match(r.body.conversation_id, /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/);
    assert.equal(r.body.status, 'ok');
    assert.equal(r.body.message, null);
    assert.ok(['STARTING', 'RUNNING'].includes(r.body.conversation_status));
  });
  test('join by id (hex or dashed); unknown id creates with that id; initial_user_msg on join is appended', async () => {
    const hex = 'ABCDEF0123456789ABCDEF0123456789';
    const created = await post('/api/conversations', { conversation_id: hex });
    assert.equal(created.body.conversation_id, 'abcdef01-2345-6789-abcd-ef0123456789');
    const joined = await post('/api/conversations', { conversation_id: 'abcdef01-2345-6789-abcd-ef0123456789', initial_user_msg: 'again' });
    assert.equal(joined.status, 200);
    assert.equal(joined.body.message, 'Joined existing conversation');
    assert.equal(joined.body.conversation_id, created.body.conversation_id);
    const evs = await get(`/api/conversations/${hex}/events/search?kind=MessageEvent`);
    assert.equal(evs.body.items.length, 1);
    assert.equal(evs.body.items[0].llm_message.content[0].text, 'again');
  });
  test('validation: nested objects, unknown fields, enums, uuid, replay+initial', async () => {
    const r = await post('/api/conversations', {
      bogus: 1,
      git_provider: 'svn',
      suggested_task: { repo: 'a/b', issue_number: 'x', title: 't', extra: true },
      create_microagent: { title: 5 },
      mcp_config: { sse_servers: [{ url: 'ftp://x' }], stdio_servers: [{ name: 'bad name', command: 'x', env: { K: 'SECRETVALUE' } }], other: [] },
      conversation_id: 'nope',
    });
    assert.equal(r.status, 422);
    const byLoc = new Map(r.body.detail.map((e: any) => [e.loc.join('.'), e]));
    const expect = (loc: string, type: string) => assert.equal((byLoc.get(loc) as any)?.type, type, `${loc} in ${JSON.stringify(r.body)}`);
    expect('body.bogus', 'extra_forbidden');
    expect('body.git_provider', 'enum');
    expect('body.suggested_task.issue_number', 'int_type');
    expect('body.suggested_task.extra', 'extra_forbidden');
    expect('body.create_microagent.repo', 'missing');
    expect('body.create_microagent.title', 'string_type');
    expect('body.mcp_config.other', 'extra_forbidden');
    expect('body.mcp_config.conversation_id', undefined as never);
    expect('body.conversation_id', 'uuid_parsing');
    assert.ok(byLoc.has('body.mcp_config.sse_servers.0.url'));
    assert.ok(byLoc.has('body.mcp_config.stdio_servers.0.name'));
    assert.doesNotMatch(r.text, /SECRETVALUE/);
    const both = await post('/api/conversations', { replay_json: '[]', initial_user_msg: 'x' });
    assert.equal(both.status, 422);
    assert.match(both.body.detail[0].msg, /replay_json/);
  });
});

describe('POST /api/conversations/{id}/events', () => {
  test('200 {"success":true} and the event is in the log with seq', async () => {
    const id = await newConversation();
    const r = await post(`/api/conversations/${id}/events`, { content: [{ type: 'text', text: 'hello' }] });
    assert.equal(r.status, 200);
    assert.deepEqual(r.body, { success: true });
    const s = await get(`/api/conversations/${id}/events/search`);
    const msg = s.body.items.find((e: any) => e.kind === 'MessageEvent');
    assert.equal(msg.seq, 1);
    assert.equal(msg.source, 'user');
    assert.match(msg.timestamp, /Z$/);
    assert.match(msg.id, /^[0-9a-f-]{36}$/);
    assert.deepEqual(msg.llm_message, { role: 'user', content: [{ type: 'text', text: 'hello', cache_prompt: false }] });
  });
  test('every role is handled; 32-hex path id accepted', async () => {
    const id = await newConversation();
    for (const role of ['user', 'system', 'assistant', 'tool']) {
      const r = await post(`/api/conversations/${id.replace(/-/g, '')}/events`, { role, content: [{ text: role }] });
      assert.equal(r.status, 200, r.text);
    }
    const s = await get(`/api/conversations/${id}/events/count?kind=MessageEvent`);
    assert.equal(s.body, 4);
  });
  test('404 unknown, 422 bad uuid at path, pydantic-shaped body errors', async () => {
    assert.deepEqual((await post('/api/conversations/00000000-0000-0000-0000-000000000000/events', {})).body, { detail: 'Conversation not found' });
    const bad = await post('/api/conversations/xyz/events', {});
    assert.equal(bad.status, 422);
    assert.deepEqual(bad.body.detail[0].loc, ['path', 'conversation_id']);
    assert.equal(bad.body.detail[0].type, 'uuid_parsing');
    const id = await newConversation();
    const r = await post(`/api/conversations/${id}/events`, {
      role: 'boss',
      run: 'maybe',
      content: [{ text: 1 }, { type: 'image' }, { type: 'text', text: 'a', foo: 1 }, { type: 'video', text: 'x' }],
    });
    assert.equal(r.status, 422);
    const got = r.body.detail.map((e: any) => [e.type, e.loc.join('.')]);
    assert.deepEqual(
      got,
      [
        ['enum', 'body.role'],
        ['string_type', 'body.content.0.text'],
        ['missing', 'body.content.1.image_urls'],
        ['extra_forbidden', 'body.content.2.foo'],
        ['literal_error', 'body.content.3.type'],
        ['bool_type', 'body.run'],
      ].sort((a, b) => 0 * a.length * b.length) as any,
    );
  });
  test('malformed JSON, non-object, empty body, wrong content type, oversize', async () => {
    const id = await newConversation();
    const p = `/api/conversations/${id}/events`;
    const j = await d.req('POST', p, '{"content": [', H);
    assert.equal(j.status, 422);
    assert.equal(j.body.detail[0].type, 'json_invalid');
    assert.equal(j.body.detail[0].loc[0], 'body');
    assert.equal(typeof j.body.detail[0].loc[1], 'number');
    for (const body of ['[1,2]', '"text"', '42', 'null']) {
      const r = await d.req('POST', p, body, H);
      assert.equal(r.status, 422, body);
      assert.equal(r.body.detail[0].type, 'model_attributes_type');
    }
    assert.equal((await d.req('POST', p, '', H)).status, 422);
    const ct = await d.req('POST', p, 'a=b', { ...H, 'content-type': 'application/x-www-form-urlencoded' });
    assert.equal(ct.status, 415);
    const big = await d.req('POST', p, JSON.stringify({ content: [{ text: 'x'.repeat(70000) }] }), H);
    assert.equal(big.status, 413);
    assert.equal(typeof big.body.detail, 'string');
    // the daemon is still fine
    assert.equal((await post(p, {})).status, 200);
  });
  test('hostile input never produces a 5xx', async () => {
    const id = await newConversation();
    const bodies: unknown[] = [
      { content: 'string' },
      { content: [null] },
      { content: [[]] },
      { content: [{ type: 'image', image_urls: [1] }] },
      { role: null },
      { __proto__: { x: 1 } },
      { constructor: { prototype: {} } },
      { content: [{ text: '\u0000\ud800' }] },
      `{"a":${'['.repeat(5000)}${']'.repeat(5000)}}`,
      '\u00ff\u00fe',
      '{"content":[{"text":"a","text":"b"}]}',
    ];
    for (const b of bodies) {
      const r = await d.req('POST', `/api/conversations/${id}/events`, typeof b === 'string' ? b : JSON.stringify(b), H);
      assert.ok(r.status < 500, `${r.status} for ${String(b).slice(0, 40)}: ${r.text}`);
    }
    for (const p of [
      '/api/conversations/%ZZ/events',
      '/api/conversations/../../etc/passwd',
      `/api/conversations/${id}/events/search?limit=-1&sort_order=X`,
      `/api/conversations/${id}/events/search?page_id=abc`,
      '/api/conversations?page_id=@@@',
    ]) {
      const r = await d.req('GET', p, undefined, H);
      assert.ok(r.status < 500, `${r.status} for ${p}`);
    }
    assert.equal((await d.req('GET', '/alive')).status, 200);
  });
});

describe('conversation surface', () => {
  test('GET one, 404 unknown, DELETE then 404', async () => {
    const id = await newConversation({ repository: 'octo/repo', selected_branch: 'dev', git_provider: 'github' });
    const g = await get(`/api/conversations/${id}`);
    assert.equal(g.status, 200);
    for (const k of [
      'id',
      'title',
      'created_at',
      'updated_at',
      'execution_status',
      'selected_repository',
      'selected_branch',
      'git_provider',
      'conversation_status',
    ]) {
      assert.ok(k in g.body, k);
    }
    assert.equal(g.body.selected_repository, 'octo/repo');
    assert.equal(g.body.execution_status, 'idle');
    assert.equal((await get('/api/conversations/11111111-1111-1111-1111-111111111111')).status, 404);
    assert.deepEqual((await d.req('DELETE', `/api/conversations/${id}`, undefined, H)).body, { success: true });
    assert.equal((await get(`/api/conversations/${id}`)).status, 404);
    assert.equal((await d.req('DELETE', `/api/conversations/${id}`, undefined, H)).status, 404);
  });
  test('list is paged newest first; limit is 1..100', async () => {
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) ids.push(await newConversation({ initial_user_msg: `n${i}` }));
    const seen: string[] = [];
    let page: string | null = null;
    do {
      const r = await get(`/api/conversations?limit=2${page ? `&page_id=${page}` : ''}`);
      assert.equal(r.status, 200);
      assert.ok(r.body.items.length <= 2);
      seen.push(...r.body.items.map((c: any) => c.id));
      page = r.body.next_page_id;
    } while (page);
    const mine = seen.filter((x) => ids.includes(x));
    assert.deepEqual(mine, [...ids].reverse());
    assert.equal(new Set(seen).size, seen.length);
    assert.equal((await get('/api/conversations?limit=0')).status, 422);
    assert.equal((await get('/api/conversations?limit=101')).status, 422);
  });
  test('event search: paging, kind, source, sort order, after_seq; count; get by id', async () => {
    const id = await newConversation();
    for (let i = 1; i <= 7; i++) await post(`/api/conversations/${id}/events`, { role: i % 2 ? 'user' : 'assistant', content: [{ text: `m${i}` }] });
    const all: any[] = [];
    let page: string | null = null;
    do {
      const r = await get(`/api/conversations/${id}/events/search?limit=3${page ? `&page_id=${page}` : ''}`);
      all.push(...r.body.items);
      page = r.body.next_page_id;
    } while (page);
    assert.deepEqual(
      all.map((e) => e.seq),
      [1, 2, 3, 4, 5, 6, 7],
    );
    const desc = await get(`/api/conversations/${id}/events/search?sort_order=TIMESTAMP_DESC&limit=3`);
    assert.deepEqual(
      desc.body.items.map((e: any) => e.seq),
      [7, 6, 5],
    );
    const desc2 = await get(`/api/conversations/${id}/events/search?sort_order=TIMESTAMP_DESC&limit=3&page_id=${desc.body.next_page_id}`);
    assert.deepEqual(
      desc2.body.items.map((e: any) => e.seq),
      [4, 3, 2],
    );
    const agent = await get(`/api/conversations/${id}/events/search?source=agent`);
    assert.deepEqual(
      agent.body.items.map((e: any) => e.seq),
      [2, 4, 6],
    );
    assert.equal((await get(`/api/conversations/${id}/events/search?kind=MessageEvent`)).body.items.length, 7);
    assert.equal((await get(`/api/conversations/${id}/events/search?kind=ActionEvent`)).body.items.length, 0);
    assert.deepEqual(
      (await get(`/api/conversations/${id}/events/search?after_seq=5`)).body.items.map((e: any) => e.seq),
      [6, 7],
    );
    assert.equal((await get(`/api/conversations/${id}/events/count`)).body, 7);
    assert.equal((await get(`/api/conversations/${id}/events/count?source=user`)).body, 4);
    const one = await get(`/api/conversations/${id}/events/${all[2].id}`);
    assert.deepEqual(one.body, all[2]);
    assert.equal((await get(`/api/conversations/${id}/events/nope`)).status, 404);
    for (const q of ['limit=0', 'limit=101', 'limit=x', 'sort_order=NEWEST', 'source=robot']) {
      const r = await get(`/api/conversations/${id}/events/search?${q}`);
      assert.equal(r.status, 422, q);
      assert.equal(r.body.detail[0].loc[0], 'query');
    }
  });
  test('unknown route 404, wrong method 405', async () => {
    assert.equal((await get('/api/nothing')).status, 404);
    const r = await d.req('PUT', '/api/conversations', {}, H);
    assert.equal(r.status, 405);
  });
});

describe('POST /api/add-git-providers', () => {
  test('stores, replaces the full set, keeps a token on host-only update, never returns it', async () => {
    const r = await post('/api/add-git-providers', {
      provider_tokens: { github: { token: 'ghp_FIRSTCANARY', host: null }, gitlab: { token: 'glpat-SECONDCANARY' } },
    });
    assert.equal(r.status, 200);
    assert.deepEqual(r.body, { message: 'Git providers stored' });
    const r2 = await post('/api/add-git-providers', { provider_tokens: { github: { token: '', host: 'http://127.0.0.1:9' } } });
    assert.equal(r2.status, 200);
    const bad = await post('/api/add-git-providers', {
      provider_tokens: { svn: { token: 'x' } },
      mcp_config: { stdio_servers: [{ name: 'a', command: 'b', env: { K: 'MCPCANARY' } }], x: 1 },
    });
    assert.equal(bad.status, 422);
    assert.doesNotMatch(bad.text, /MCPCANARY/);
    assert.ok(bad.body.detail.some((e: any) => e.loc.join('.') === 'body.mcp_config.x'));
  });
});

describe('OpenAPI', () => {
  test('3.1.0 document matching the interface', async () => {
    const doc = (await d.req('GET', '/openapi.json')).body;
    assert.equal(doc.openapi, '3.1.0');
    assert.equal(doc.info.version, '0.1.0');
    const op = doc.paths['/api/conversations/{conversation_id}/events'].post;
    assert.equal(op.operationId, 'send_message_api_conversations__conversation_id__events_post');
    assert.deepEqual(op.tags, ['Events']);
    assert.equal(op.summary, 'Send Message');
    assert.equal(op.requestBody.required, true);
    assert.deepEqual(op.requestBody.content['application/json'].schema, { $ref: '#/components/schemas/SendMessageRequest' });
    assert.deepEqual(op.responses['200'].content['application/json'].schema, { $ref: '#/components/schemas/Success' });
    assert.deepEqual(op.responses['422'].content['application/json'].schema, { $ref: '#/components/schemas/HTTPValidationError' });
    assert.deepEqual(op.security, []);
    const p = op.parameters[0];
    assert.equal(p.in, 'path');
    assert.equal(p.schema.format, 'uuid');
    const c = doc.components.schemas;
    for (const name of ['SendMessageRequest', 'TextContent', 'ImageContent', 'Success', 'HTTPValidationError', 'ValidationError']) assert.ok(c[name], name);
    assert.equal(c.TextContent.additionalProperties, false);
    assert.equal(c.ImageContent.additionalProperties, false);
    assert.equal(c.TextContent.properties.type.const, 'text');
    assert.equal(c.TextContent.properties.type.default, 'text');
    assert.equal(c.ImageContent.properties.type.const, 'image');
    assert.deepEqual(c.TextContent.required, ['text']);
    assert.deepEqual(c.ImageContent.required, ['image_urls']);
    assert.equal(c.SendMessageRequest.properties.role.default, 'user');
    assert.deepEqual(c.SendMessageRequest.properties.role.enum, ['user', 'system', 'assistant', 'tool']);
    assert.equal(c.SendMessageRequest.properties.run.default, false);
    assert.deepEqual(c.ValidationError.required.sort(), ['loc', 'msg', 'type']);
    for (const path of [
      '/api/conversations',
      '/api/add-git-providers',
      '/api/conversations/{conversation_id}',
      '/api/conversations/{conversation_id}/events/search',
      '/alive',
      '/server_info',
    ]) {
      assert.ok(doc.paths[path], path);
    }
    // every operation documents its success response, and every $ref resolves to a component
    for (const [p, item] of Object.entries<any>(doc.paths)) {
      for (const [m, o] of Object.entries<any>(item)) {
        const ok = o.responses['200'] ?? o.responses['201'];
        assert.ok(ok?.content?.['application/json']?.schema, `${m} ${p} has a success schema`);
        assert.ok(o.operationId && o.summary && o.tags?.length, `${m} ${p} has operationId, summary, tags`);
      }
    }
    for (const m of JSON.stringify(doc).matchAll(/"#\/components\/schemas\/([^"]+)"/g)) assert.ok(c[m[1]!], `$ref ${m[1]} resolves`);
    const docs = await d.req('GET', '/docs');
    assert.match(docs.text, /<html/);
    assert.match(docs.headers.get('content-type') ?? '', /text\/html/);
  });
});
