/**
 * MCP through the real daemon: the stored default config and the conversation's own config, the
 * tools of real stdio / streamable-HTTP / SSE servers called by a scripted LLM, failures that stay
 * visible but never fatal, the status endpoint, no orphan processes, and no leaked secrets.
 */
import assert from 'node:assert/strict';
import { createServer, type Server, type Socket } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { freePort, recordingReq, startDaemon, tempDir, waitFor, type DaemonHandle } from './support/daemon.js';
import { startSseServer, startShttpServer, type RunningHttpServer } from './support/mcp-servers/http-servers.js';
import { startScriptedLlm, type ScriptedLlm } from './support/scripted-llm.js';
import { hostPid, isAlive } from './support/processes.js';
import { helperArgs } from './support/helper-programs.js';
import { allEvents, waitStatus, type Req } from './support/conversation-api.js';

/** The stdio MCP test server (test/support/mcp-servers/stdio-server.ts), run built: plain node, no tsx to load at each start. */
const STDIO_SERVER = await helperArgs('stdio-server');

// canaries: none of these may appear in a response, an event, a log line or an LLM request
const SHTTP_KEY = 'shttp-CANARY-key-4242aa';
const SSE_KEY = 'sse-CANARY-key-5353bb';
const ENV_SECRET = 'env-CANARY-value-6464cc';
const DEFAULT_KEY = 'default-CANARY-key-7575dd';
const BAD_ENV = 'badenv-CANARY-value-8686ee';
const DEAD_KEY = 'dead-CANARY-key-9797ff';
const CONV_ONLY_KEY = 'convonly-CANARY-key-1010gg';
const CANARIES = [SHTTP_KEY, SSE_KEY, ENV_SECRET, DEFAULT_KEY, BAD_ENV, DEAD_KEY, CONV_ONLY_KEY];

function stdio(name: string, env?: Record<string, string>) {
  return { name, command: process.execPath, args: [...STDIO_SERVER, name], ...(env ? { env } : {}) };
}

/** A TCP server that accepts connections and never answers (an MCP server stuck at start). */
async function startHangingServer(): Promise<{ port: number; close(): Promise<void> }> {
  const sockets = new Set<Socket>();
  const server: Server = createServer((s) => {
    sockets.add(s);
    s.on('error', () => {});
    s.on('close', () => sockets.delete(s));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  return {
    port: (server.address() as { port: number }).port,
    close: () =>
      new Promise<void>((r) => {
        for (const s of sockets) s.destroy();
        server.close(() => r());
      }),
  };
}

/** Every response body the tests saw, for the canary check. */
const seen: string[] = [];

const textOf = (obs: any) => (obs.observation.content as any[]).map((c) => c.text ?? '').join('\n');

function resultFor(evs: any[], toolName: string, nth = 0): any {
  const actions = evs.filter((e) => e.kind === 'ActionEvent' && e.tool_name === toolName);
  const a = actions[nth];
  assert.ok(
    a,
    `action ${toolName}#${nth}; have ${evs
      .filter((e) => e.kind === 'ActionEvent')
      .map((e) => e.tool_name)
      .join(', ')}`,
  );
  const r = evs.find((e) => (e.kind === 'ObservationEvent' || e.kind === 'AgentErrorEvent') && e.tool_call_id === a.tool_call_id);
  assert.ok(r, `result for ${toolName}#${nth}`);
  assert.ok(r.seq > a.seq, 'the action comes first');
  return r;
}

let llm: ScriptedLlm;
let shttp: RunningHttpServer;
let sse: RunningHttpServer;
let plain: RunningHttpServer;
const daemons: DaemonHandle[] = [];
const llmKey = 'sk-mcp-daemon-llm-key';

before(async () => {
  llm = await startScriptedLlm();
  shttp = await startShttpServer({ apiKey: SHTTP_KEY });
  sse = await startSseServer({ apiKey: SSE_KEY });
  plain = await startShttpServer({});
});
after(async () => {
  for (const d of daemons) await d.stop();
  await llm.close();
  await shttp.close();
  await sse.close();
  await plain.close();
});

async function daemon(env: Record<string, string> = {}, dir?: string): Promise<DaemonHandle> {
  const d = await startDaemon({ LLM_MODEL: 'openai/scripted', LLM_BASE_URL: llm.url, LLM_API_KEY: llmKey, MAX_ITERATIONS: '12', ...env }, dir);
  daemons.push(d);
  return d;
}

describe('MCP config through the API', () => {
  test('the stored default is merged into new conversations (de-duplicated by url and name), survives a restart, and is shown redacted', async () => {
    const dir = tempDir();
    let d = await daemon({}, dir);
    let req = recordingReq(d, seen);
    const stored = await req('POST', '/api/add-git-providers', {
      provider_tokens: {},
      mcp_config: {
        stdio_servers: [
          { name: 'local', command: '/nonexistent/default-local', env: { DEFAULT_ENV: DEFAULT_KEY } },
          { name: 'tools', command: '/bin/true', args: ['x'] },
        ],
        shttp_servers: [{ url: shttp.url, api_key: DEFAULT_KEY }],
        sse_servers: [{ url: sse.url, api_key: SSE_KEY }],
      },
    });
    assert.equal(stored.status, 200, stored.text);

    // the conversation's own config adds to the default; the same name / url replaces the default's entry
    const a = await req('POST', '/api/conversations', {
      mcp_config: {
        stdio_servers: [stdio('local', { SECRET_ENV: ENV_SECRET })],
        shttp_servers: [{ url: shttp.url, api_key: SHTTP_KEY, timeout: 20 }, { url: plain.url }],
        // the same server spelled differently: URLs are compared normalised
        sse_servers: [{ url: sse.url.replace(/^http:/, 'HTTP:'), api_key: SSE_KEY }],
      },
    });
    assert.equal(a.status, 200, a.text);
    const b = await req('POST', '/api/conversations', {});
    const idA = a.body.conversation_id as string;
    const idB = b.body.conversation_id as string;

    const check = async () => {
      const ca = (await req('GET', `/api/conversations/${idA}`)).body.mcp_config;
      assert.deepEqual(ca.stdio_servers.map((s: any) => [s.name, s.command]).sort(), [
        ['local', process.execPath],
        ['tools', '/bin/true'],
      ]);
      assert.deepEqual(ca.stdio_servers.find((s: any) => s.name === 'local').env, { SECRET_ENV: '<secret_hidden>' });
      assert.deepEqual(
        ca.shttp_servers.map((s: any) => [s.url, s.api_key ?? null]).sort(),
        [
          [plain.url, null],
          [shttp.url, '<secret_hidden>'],
        ].sort(),
      );
      assert.equal(ca.shttp_servers.find((s: any) => s.url === shttp.url).timeout, 20, 'the conversation entry won');
      assert.deepEqual(ca.sse_servers, [{ url: sse.url.replace(/^http:/, 'HTTP:'), api_key: '<secret_hidden>' }], "one entry: the conversation's");
      const cb = (await req('GET', `/api/conversations/${idB}`)).body.mcp_config;
      assert.deepEqual(
        cb.stdio_servers.map((s: any) => [s.name, s.command, s.env]),
        [
          ['local', '/nonexistent/default-local', { DEFAULT_ENV: '<secret_hidden>' }],
          ['tools', '/bin/true', {}],
        ],
      );
      assert.deepEqual(cb.shttp_servers, [{ url: shttp.url, api_key: '<secret_hidden>' }]);
      // the status endpoint shows the same effective config, one server per entry
      const ma = (await req('GET', `/api/conversations/${idA}/mcp`)).body;
      assert.deepEqual(ma.config, ca);
      assert.equal(ma.servers.length, 5, JSON.stringify(ma.servers));
      assert.ok(
        ma.servers.every((s: any) => s.state === 'configured' && s.tools.length === 0),
        'nothing starts before a run',
      );
    };
    await check();
    await d.stop();
    d = await daemon({}, dir);
    req = recordingReq(d, seen);
    await check();

    // the conversation's own key is a secret for every exit after the restart too (terminal output included)
    llm.push({ toolCalls: [{ name: 'terminal', arguments: { command: `echo "key=${CONV_ONLY_KEY}"` } }] }, { text: 'ok' });
    const c = await req('POST', '/api/conversations', {
      mcp_config: { sse_servers: [{ url: `http://127.0.0.1:${await freePort()}/sse`, api_key: CONV_ONLY_KEY }] },
    });
    const idC = c.body.conversation_id as string;
    await d.stop();
    d = await daemon({}, dir);
    req = recordingReq(d, seen);
    await req('POST', `/api/conversations/${idC}/events`, { content: [{ text: 'print it' }], run: true });
    await waitStatus(req, idC, 'finished');
    const obs = (await allEvents(req, idC)).find((e) => e.kind === 'ObservationEvent' && e.tool_name === 'terminal');
    assert.match(textOf(obs), /key=<secret_hidden>/);
    const all = JSON.stringify([await allEvents(req, idA), await allEvents(req, idB), await allEvents(req, idC)]) + seen.join('\n') + d.output.join('\n');
    for (const c of CANARIES) assert.ok(!all.includes(c), `canary ${c} leaked`);
  });
});

describe('MCP tools in a conversation', () => {
  let d: DaemonHandle;
  let req: Req;
  before(async () => {
    d = await daemon();
    req = recordingReq(d, seen);
  });

  test('a scripted LLM calls tools on stdio, streamable-HTTP and SSE servers: naming, schemas, results, errors, bearer keys', async () => {
    const shttpName = `127_0_0_1_${shttp.port}`;
    const sseName = `127_0_0_1_${sse.port}`;
    const before = llm.requests.length;
    llm.push(
      {
        text: 'Calling everything.',
        toolCalls: [
          { name: 'local_echo', arguments: { text: 'from stdio' } },
          { name: `${shttpName}_echo`, arguments: { text: 'from shttp' } },
          { name: `${sseName}_echo`, arguments: { text: 'from sse' } },
        ],
      },
      {
        toolCalls: [
          { name: `${shttpName}_fail`, arguments: {} },
          { name: `${sseName}_fail`, arguments: {} },
          { name: `${shttpName}_auth_header`, arguments: {} },
          { name: `${sseName}_auth_header`, arguments: {} },
          { name: 'local_env', arguments: { name: 'SECRET_ENV' } },
          { name: 'local_cwd', arguments: {} },
        ],
      },
      { text: 'all tools called' },
    );
    const r = await req('POST', '/api/conversations', {
      initial_user_msg: 'use the MCP tools',
      mcp_config: {
        stdio_servers: [stdio('local', { SECRET_ENV: ENV_SECRET })],
        shttp_servers: [{ url: shttp.url, api_key: SHTTP_KEY }],
        sse_servers: [{ url: sse.url, api_key: SSE_KEY }],
      },
    });
    const id = r.body.conversation_id as string;
    await waitStatus(req, id, 'finished');
    const evs = await allEvents(req, id);

    for (const [tool, want] of [
      ['local_echo', 'echo: from stdio'],
      [`${shttpName}_echo`, 'echo: from shttp'],
      [`${sseName}_echo`, 'echo: from sse'],
    ]) {
      const o = resultFor(evs, tool!);
      assert.equal(o.kind, 'ObservationEvent');
      assert.equal(textOf(o), want);
      assert.equal(o.observation.is_error, false);
      assert.equal(o.action_id, evs.find((e) => e.kind === 'ActionEvent' && e.tool_call_id === o.tool_call_id).id);
    }
    for (const tool of [`${shttpName}_fail`, `${sseName}_fail`]) {
      const o = resultFor(evs, tool);
      assert.equal(o.kind, 'ObservationEvent');
      assert.equal(o.observation.is_error, true, 'is_error comes from the server');
      assert.match(textOf(o), /intentional failure from fail/);
    }
    assert.equal(textOf(resultFor(evs, `${shttpName}_auth_header`)), 'authorization: Bearer <secret_hidden>');
    assert.ok(shttp.authHeaders.includes(`Bearer ${SHTTP_KEY}`), 'the api_key reaches the shttp server as a bearer token');
    assert.ok(sse.authHeaders.includes(`Bearer ${SSE_KEY}`), 'the api_key reaches the SSE server as a bearer token');
    assert.equal(textOf(resultFor(evs, 'local_env')), 'SECRET_ENV=<secret_hidden>', 'env reaches the stdio server (and is redacted)');
    // sandboxed, the workspace is /workspace
    assert.match(textOf(resultFor(evs, 'local_cwd')), new RegExp(`${id.replace(/-/g, '')}|^/workspace$`), 'stdio servers run in the workspace');

    // the LLM was offered the MCP tools with their JSON schemas next to the built-ins
    const first = llm.requests[before]!.body;
    const tools = new Map<string, any>(first.tools.map((t: any) => [t.function.name, t.function]));
    for (const n of ['terminal', 'think', 'finish', 'local_echo', 'local_think', `${shttpName}_echo`, `${sseName}_echo`, `${sseName}_slow`])
      assert.ok(tools.has(n), `tool ${n} offered`);
    assert.ok(!tools.has('echo'), 'with several servers every tool is prefixed');
    const echo = tools.get(`${shttpName}_echo`);
    assert.equal(echo.description, 'Echo the given text.');
    assert.deepEqual(echo.parameters.properties, { text: { type: 'string', description: 'Text to echo' } });
    assert.deepEqual(echo.parameters.required, ['text']);
    assert.equal(tools.get(`${sseName}_slow`).parameters.properties.ms.type, 'integer');
    // the LLM saw the results, including the servers' errors
    const last = JSON.stringify(llm.requests[llm.requests.length - 1]!.body.messages);
    assert.ok(last.includes('echo: from sse') && last.includes('intentional failure from fail'));
    const sys = evs.find((e) => e.kind === 'SystemPromptEvent');
    assert.ok(sys.tools.some((t: any) => t.name === 'local_echo' && t.kind === 'MCPToolDefinition' && t.action_type === 'MCPToolAction'));
  });

  test('with one server the tools keep their own names; a clash with a built-in is prefixed', async () => {
    const before = llm.requests.length;
    llm.push(
      {
        toolCalls: [
          { name: 'echo', arguments: { text: 'bare name' } },
          { name: 'local_think', arguments: {} },
          { name: 'think', arguments: { thought: 'built-in' } },
        ],
      },
      { text: 'ok' },
    );
    const r = await req('POST', '/api/conversations', { initial_user_msg: 'one server', mcp_config: { stdio_servers: [stdio('local')] } });
    const id = r.body.conversation_id as string;
    await waitStatus(req, id, 'finished');
    const evs = await allEvents(req, id);
    assert.equal(textOf(resultFor(evs, 'echo')), 'echo: bare name');
    assert.equal(textOf(resultFor(evs, 'local_think')), 'mcp think');
    assert.equal(resultFor(evs, 'think').kind, 'ObservationEvent');
    assert.doesNotMatch(textOf(resultFor(evs, 'think')), /mcp think/, 'the built-in think is not shadowed');
    const names = llm.requests[before]!.body.tools.map((t: any) => t.function.name);
    assert.ok(names.includes('echo') && names.includes('pid') && names.includes('local_think'), names.join(','));
    assert.ok(!names.some((n: string) => n.startsWith('local_') && n !== 'local_think'), names.join(','));
    const mcp = (await req('GET', `/api/conversations/${id}/mcp`)).body.servers;
    assert.deepEqual(
      mcp.map((s: any) => [s.name, s.transport, s.state]),
      [['local', 'stdio', 'ready']],
    );
    assert.ok(mcp[0].tools.includes('echo') && mcp[0].tools.includes('local_think'));
  });

  test('failures are visible, never fatal: bad command, nothing listening, timeout, invalid arguments, crash (restarted on the next call)', async () => {
    const deadPort = await freePort();
    const deadName = `127_0_0_1_${deadPort}`;
    const plainName = `127_0_0_1_${plain.port}`;
    const before = llm.requests.length;
    llm.push(
      {
        toolCalls: [
          { name: 'local_echo', arguments: { text: 'still works' } },
          { name: `${plainName}_slow`, arguments: { ms: 30_000 } },
          { name: 'local_echo', arguments: { text: 42 } },
          { name: 'local_pid', arguments: {} },
        ],
      },
      { toolCalls: [{ name: 'local_crash', arguments: {} }] },
      {
        toolCalls: [
          { name: 'local_pid', arguments: {} },
          { name: 'local_echo', arguments: { text: 'after the crash' } },
        ],
      },
      { text: 'survived' },
    );
    const r = await req('POST', '/api/conversations', {
      initial_user_msg: 'break things',
      mcp_config: {
        stdio_servers: [stdio('local'), { name: 'broken', command: '/nonexistent/parley-mcp-server', args: [], env: { TOKEN: BAD_ENV } }],
        shttp_servers: [
          { url: `http://127.0.0.1:${deadPort}/mcp`, api_key: DEAD_KEY },
          { url: plain.url, timeout: 5 },
        ],
      },
    });
    const id = r.body.conversation_id as string;
    await waitStatus(req, id, 'finished', 40_000);
    const evs = await allEvents(req, id);

    // servers that cannot start: an event naming each, the run goes on
    const failed = evs.filter((e) => e.kind === 'ConversationErrorEvent' && e.code === 'MCPServerFailed');
    const broken = failed.find((e) => e.server === 'broken');
    assert.ok(broken, JSON.stringify(failed));
    assert.match(broken.detail, /broken/);
    assert.match(broken.detail, /parley-mcp-server/);
    const dead = failed.find((e) => e.server === deadName);
    assert.ok(dead, JSON.stringify(failed));
    assert.match(dead.detail, /ECONNREFUSED|fetch failed/);
    assert.ok(broken.seq < evs.find((e) => e.kind === 'ActionEvent').seq, 'reported before the first step');
    assert.equal(textOf(resultFor(evs, 'local_echo', 0)), 'echo: still works');

    const slow = resultFor(evs, `${plainName}_slow`);
    assert.equal(slow.observation.is_error, true);
    // (5 s, not 1: the same timeout bounds the server's connect, which took over 1 s at load 17)
    assert.match(textOf(slow), /timed out after 5 s/);
    const invalid = resultFor(evs, 'local_echo', 1);
    assert.equal(invalid.observation.is_error, true);
    assert.match(textOf(invalid), /invalid|expected/i);

    const crash = resultFor(evs, 'local_crash');
    assert.equal(crash.observation.is_error, true);
    assert.match(textOf(crash), /closed the connection[\s\S]*restarted/);
    assert.ok(
      failed.some((e) => e.server === 'local' && /exited with code 3/.test(e.detail)),
      'the crash is reported',
    );
    // as reported (a pid, or a token naming the process when the server is sandboxed), then on the host
    const [r1, r2] = [textOf(resultFor(evs, 'local_pid', 0)), textOf(resultFor(evs, 'local_pid', 1))];
    assert.ok(r1 !== r2, `restarted: ${r1} → ${r2}`);
    const pid1 = hostPid(r1);
    const pid2 = hostPid(r2);
    assert.ok(pid1 === 0 || !isAlive(pid1), 'the crashed server is gone');
    assert.ok(pid2 > 0 && isAlive(pid2));
    assert.equal(textOf(resultFor(evs, 'local_echo', 2)), 'echo: after the crash');

    // the LLM saw every error
    const msgs = JSON.stringify(llm.requests.slice(before).map((q) => q.body.messages));
    assert.ok(msgs.includes('timed out after 5 s') && msgs.includes('closed the connection'));
    const names = llm.requests[before]!.body.tools.map((t: any) => t.function.name);
    assert.ok(!names.some((n: string) => n.startsWith('broken_') || n.startsWith(deadName)), 'failed servers offer no tools');

    // states and reasons
    const servers = (await req('GET', `/api/conversations/${id}/mcp`)).body.servers as any[];
    const by = new Map(servers.map((s) => [s.name, s]));
    assert.equal(by.get('local').state, 'ready');
    assert.equal(by.get(plainName).state, 'ready');
    assert.equal(by.get('broken').state, 'failed');
    assert.match(by.get('broken').reason, /parley-mcp-server/);
    assert.equal(by.get(deadName).state, 'failed');
    assert.match(by.get(deadName).reason, /ECONNREFUSED|fetch failed/);
    assert.deepEqual(by.get('broken').tools, []);
  });

  test('GET …/mcp shows configured → starting → ready / failed with the reason and the tool names', async () => {
    const hang = await startHangingServer();
    try {
      const r = await req('POST', '/api/conversations', {
        mcp_config: { stdio_servers: [stdio('local')], shttp_servers: [{ url: `http://127.0.0.1:${hang.port}/mcp`, timeout: 2 }] },
      });
      const id = r.body.conversation_id as string;
      const hangName = `127_0_0_1_${hang.port}`;
      const first = (await req('GET', `/api/conversations/${id}/mcp`)).body.servers;
      assert.deepEqual(
        first.map((s: any) => [s.name, s.transport, s.state, s.tools]),
        [
          ['local', 'stdio', 'configured', []],
          [hangName, 'shttp', 'configured', []],
        ],
      );
      llm.push({ text: 'hello' });
      await req('POST', `/api/conversations/${id}/events`, { content: [{ text: 'go' }], run: true });
      const starting = await waitFor(async () => {
        const s = (await req('GET', `/api/conversations/${id}/mcp`)).body.servers;
        return s.find((x: any) => x.name === hangName && x.state === 'starting') ? s : null;
      }, 'a starting server');
      assert.ok(starting);
      await waitStatus(req, id, 'finished');
      const end = (await req('GET', `/api/conversations/${id}/mcp`)).body.servers;
      const local = end.find((x: any) => x.name === 'local');
      assert.equal(local.state, 'ready');
      assert.ok(local.tools.includes('local_echo') && local.tools.includes('local_pid'), local.tools.join(','));
      const hung = end.find((x: any) => x.name === hangName);
      assert.equal(hung.state, 'failed');
      assert.match(hung.reason, /did not start within 2 s/);
      assert.deepEqual(hung.tools, []);
    } finally {
      await hang.close();
    }
  });

  test('deleting a conversation stops its stdio server and what the server started', async () => {
    llm.push(
      {
        toolCalls: [
          { name: 'pid', arguments: {} },
          { name: 'spawn_child', arguments: {} },
        ],
      },
      { text: 'never seen', delayMs: 60_000 },
    );
    const r = await req('POST', '/api/conversations', { initial_user_msg: 'pids', mcp_config: { stdio_servers: [stdio('local')] } });
    const id = r.body.conversation_id as string;
    const evs = (await waitFor(
      async () => {
        const e = await allEvents(req, id);
        return e.filter((x) => x.kind === 'ObservationEvent').length >= 2 ? e : null;
      },
      'observations',
      20_000,
    ))!;
    const pid = hostPid(textOf(resultFor(evs, 'pid')));
    const child = hostPid(textOf(resultFor(evs, 'spawn_child')));
    assert.ok(isAlive(pid) && isAlive(child));
    assert.equal((await req('DELETE', `/api/conversations/${id}`)).status, 200);
    await waitFor(() => !isAlive(pid) && !isAlive(child), 'the server and its child are gone', 5000);
    llm.clear(); // the reply the deleted run never asked for
  });

  test('canary: MCP api keys and env values appear in no event, response, log line or LLM request', async () => {
    const list = (await req('GET', '/api/conversations?limit=100')).body.items as any[];
    const evs = [];
    for (const c of list) evs.push(...(await allEvents(req, c.conversation_id)));
    const everything = [JSON.stringify(evs), seen.join('\n'), d.output.join('\n'), JSON.stringify(llm.requests)].join('\n');
    assert.ok(everything.includes('<secret_hidden>'), 'the redaction did happen');
    for (const c of CANARIES) assert.ok(!everything.includes(c), `canary ${c} leaked`);
  });
});

describe('MCP server lifecycle', () => {
  test('an idle conversation stops its stdio server after MCP_IDLE_CLOSE_MS; the next run starts it again; SIGTERM leaves no process', async () => {
    const d = await daemon({ MCP_IDLE_CLOSE_MS: '3000' });
    const req = recordingReq(d, seen);
    llm.clear();
    llm.push({ toolCalls: [{ name: 'pid', arguments: {} }] }, { text: 'first run done' });
    const r = await req('POST', '/api/conversations', { initial_user_msg: 'pid please', mcp_config: { stdio_servers: [stdio('local')] } });
    const id = r.body.conversation_id as string;
    await waitStatus(req, id, 'finished');
    const pid1 = hostPid(textOf(resultFor(await allEvents(req, id), 'pid')));
    assert.ok(isAlive(pid1), 'still running right after the run');
    await waitFor(() => !isAlive(pid1), 'the idle server stopped', 10_000);
    const st = (await req('GET', `/api/conversations/${id}/mcp`)).body.servers;
    assert.deepEqual(
      st.map((s: any) => [s.name, s.state]),
      [['local', 'configured']],
    );

    // the next run starts it again
    llm.push({ toolCalls: [{ name: 'pid', arguments: {} }] }, { text: 'second run', delayMs: 60_000 });
    await req('POST', `/api/conversations/${id}/events`, { content: [{ text: 'again' }], run: true });
    const evs = (await waitFor(async () => {
      const e = await allEvents(req, id);
      return e.filter((x) => x.kind === 'ObservationEvent').length >= 2 ? e : null;
    }, 'second pid'))!;
    const pid2 = hostPid(textOf(resultFor(evs, 'pid', 1)));
    assert.ok(pid2 !== pid1 && isAlive(pid2));
    // a running conversation is not idle: only the end of a run schedules an idle close, so the one
    // scheduled after the first run (and done) is the only one, and the server stays up
    const lines = (text: string) => d.output.filter((l) => l.includes(id) && l.includes(text)).length;
    assert.equal(lines('close if it stays idle'), 1, 'no idle close scheduled while running');
    assert.equal(lines('closing the MCP servers of an idle conversation'), 1);
    assert.ok(isAlive(pid2), 'not closed while running');

    // SIGTERM while running: the daemon exits 0 and the stdio server is gone
    assert.equal(await d.stop('SIGTERM'), 0);
    await waitFor(() => !isAlive(pid2), 'the server is gone after SIGTERM', 5000);
  });
});
