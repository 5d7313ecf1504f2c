import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { mcpSecretValues, mergeMcpConfig, redactMcpConfig, type McpConfig, type McpStdioServerConfig } from '../src/tools/mcp/config.js';
import { McpManager, type McpEvent, type McpTool } from '../src/tools/mcp/manager.js';
import { assignServerNames, assignToolNames, serverNameFromUrl } from '../src/tools/mcp/naming.js';
import type { ToolContext } from '../src/tools/types.js';
import type { Observation as ToolObservation } from '../src/events/schema.js';
import { startSseServer, startShttpServer, type RunningHttpServer } from './support/mcp-servers/http-servers.js';
import { PNG_1X1 } from './support/mcp-servers/tools.js';
import { isAlive } from './support/processes.js';
import { helperArgs } from './support/helper-programs.js';
import { freePort, waitFor } from './support/daemon.js';

/** The stdio MCP test server (test/support/mcp-servers/stdio-server.ts), run built: plain node, no tsx to load at each start. */
const STDIO_SERVER = await helperArgs('stdio-server');
const BUILTINS = ['terminal', 'file_editor', 'task_tracker', 'think', 'finish'];

function stdioServer(name: string, env?: Record<string, string>): McpStdioServerConfig {
  return { name, command: process.execPath, args: [...STDIO_SERVER, name], ...(env ? { env } : {}) };
}

function nodeScript(name: string, script: string, env?: Record<string, string>): McpStdioServerConfig {
  return { name, command: process.execPath, args: ['-e', script], ...(env ? { env } : {}) };
}

function ctx(redact: (t: string) => string = (t) => t, signal = new AbortController().signal): ToolContext {
  return { conversationId: 'conv-1', workspaceDir: '/nonexistent', signal, env: {}, redact };
}

function textOf(obs: ToolObservation): string {
  return obs.content.map((c) => (c.type === 'text' ? c.text : `[image ${c.image_urls.join(',')}]`)).join('\n');
}

function tool(tools: McpTool[], name: string): McpTool {
  const t = tools.find((x) => x.name === name);
  assert.ok(t, `tool ${name} missing; have ${tools.map((x) => x.name).join(', ')}`);
  return t;
}

let workspace: string;
before(async () => {
  workspace = await mkdtemp(join(tmpdir(), 'parley-mcp-'));
});
after(async () => {
  await McpManager.closeAll();
  await rm(workspace, { recursive: true, force: true });
});

function manager(config: McpConfig, extra: Partial<ConstructorParameters<typeof McpManager>[0]> = {}) {
  const events: McpEvent[] = [];
  const m = new McpManager({
    config,
    workspaceDir: workspace,
    reservedNames: BUILTINS,
    conversationId: 'conv-1',
    onEvent: (e) => events.push(e),
    connectTimeoutMs: 15_000,
    ...extra,
  });
  return { m, events };
}

// ------------------------------------------------------------------------------------------------

describe('config', () => {
  test('mergeMcpConfig de-duplicates by url / name and the conversation entry wins', () => {
    const base: McpConfig = {
      sse_servers: [{ url: 'http://a.example:1', api_key: 'old' }, { url: 'http://b.example/sse' }],
      stdio_servers: [
        { name: 'x', command: 'old-cmd', env: { K: 'v' } },
        { name: 'y', command: 'y-cmd' },
      ],
      shttp_servers: [{ url: 'http://c.example/mcp', timeout: 5 }],
    };
    const extra: McpConfig = {
      sse_servers: [{ url: 'http://a.example:1/', api_key: 'new' }],
      stdio_servers: [{ name: 'x', command: 'new-cmd', args: ['--v'] }],
      shttp_servers: [{ url: 'http://c.example/mcp', api_key: 'k', timeout: 9 }, { url: 'http://d.example/mcp' }],
    };
    const baseCopy = structuredClone(base);
    const merged = mergeMcpConfig(base, extra);
    assert.deepEqual(merged, {
      sse_servers: [{ url: 'http://b.example/sse' }, { url: 'http://a.example:1/', api_key: 'new' }],
      stdio_servers: [
        { name: 'y', command: 'y-cmd' },
        { name: 'x', command: 'new-cmd', args: ['--v'] },
      ],
      shttp_servers: [{ url: 'http://c.example/mcp', api_key: 'k', timeout: 9 }, { url: 'http://d.example/mcp' }],
    });
    assert.deepEqual(base, baseCopy, 'inputs are not modified');
    assert.deepEqual(mergeMcpConfig(undefined, null), {});
    assert.deepEqual(
      mergeMcpConfig(base, undefined).stdio_servers?.map((s) => s.command),
      ['old-cmd', 'y-cmd'],
    );
    // duplicates inside one list collapse too (last wins)
    assert.deepEqual(
      mergeMcpConfig(
        {
          stdio_servers: [
            { name: 'z', command: '1' },
            { name: 'z', command: '2' },
          ],
        },
        {},
      ),
      {
        stdio_servers: [{ name: 'z', command: '2' }],
      },
    );
  });

  test('redactMcpConfig hides api keys and env values; mcpSecretValues lists them', () => {
    const cfg: McpConfig = {
      sse_servers: [
        { url: 'http://a/', api_key: 'sse-key-1' },
        { url: 'http://b/', api_key: null },
      ],
      stdio_servers: [{ name: 's', command: 'c', args: ['a'], env: { TOKEN: 'env-secret-1', OTHER: 'env-secret-2' } }],
      shttp_servers: [{ url: 'http://c/', api_key: 'shttp-key-1', timeout: 3 }],
    };
    const red = redactMcpConfig(cfg);
    assert.deepEqual(red, {
      sse_servers: [
        { url: 'http://a/', api_key: '<secret_hidden>' },
        { url: 'http://b/', api_key: null },
      ],
      stdio_servers: [{ name: 's', command: 'c', args: ['a'], env: { TOKEN: '<secret_hidden>', OTHER: '<secret_hidden>' } }],
      shttp_servers: [{ url: 'http://c/', api_key: '<secret_hidden>', timeout: 3 }],
    });
    assert.equal(cfg.sse_servers![0]!.api_key, 'sse-key-1', 'original untouched');
    assert.deepEqual(mcpSecretValues(cfg).sort(), ['env-secret-1', 'env-secret-2', 'shttp-key-1', 'sse-key-1']);
    assert.deepEqual(mcpSecretValues(undefined), []);
  });
});

describe('naming', () => {
  test('server names: stdio name, URL host + port, sanitised and unique', () => {
    assert.equal(serverNameFromUrl('http://localhost:3001/mcp'), 'localhost_3001');
    assert.equal(serverNameFromUrl('https://mcp.example.com/sse'), 'mcp_example_com');
    assert.equal(serverNameFromUrl('http://[::1]:8080/'), '__1_8080');
    assert.deepEqual(
      assignServerNames([
        { kind: 'stdio', source: 'fs' },
        { kind: 'sse', source: 'http://localhost:3001/sse' },
        { kind: 'shttp', source: 'http://localhost:3001/mcp' },
        { kind: 'shttp', source: 'https://fs/mcp' },
      ]),
      ['fs', 'localhost_3001', 'localhost_3001_2', 'fs_2'],
    );
  });

  test('tool names: bare with one server, prefixed with several, never a built-in name', () => {
    const one = assignToolNames([{ server: 'gh', tools: ['search', 'think', 'a.b/c'] }], true, BUILTINS);
    assert.deepEqual([...one.get('gh')!.values()], ['search', 'gh_think', 'a_b_c']);

    const many = assignToolNames(
      [
        { server: 'gh', tools: ['search', 'think'] },
        { server: 'localhost_3001', tools: ['search'] },
      ],
      false,
      BUILTINS,
    );
    assert.deepEqual([...many.get('gh')!.values()], ['gh_search', 'gh_think']);
    assert.deepEqual([...many.get('localhost_3001')!.values()], ['localhost_3001_search']);

    // collisions among MCP tools and with reserved names get a numeric suffix
    const clash = assignToolNames(
      [
        { server: 'a', tools: ['b_c'] },
        { server: 'a_b', tools: ['c'] },
      ],
      false,
      ['a_b_c_x'],
    );
    assert.equal(clash.get('a')!.get('b_c'), 'a_b_c');
    assert.equal(clash.get('a_b')!.get('c'), 'a_b_c_2');
    const reservedPrefixed = assignToolNames([{ server: 's', tools: ['finish'] }], true, [...BUILTINS, 's_finish']);
    assert.equal(reservedPrefixed.get('s')!.get('finish'), 's_finish_2');

    // provider limit: 64 characters
    const long = assignToolNames([{ server: 'srv', tools: ['x'.repeat(100)] }], false, BUILTINS);
    const name = long.get('srv')!.get('x'.repeat(100))!;
    assert.ok(name.length <= 64 && /^srv_x+_[0-9a-f]{8}$/.test(name), name);
  });
});

// ------------------------------------------------------------------------------------------------

describe('McpManager with real servers', () => {
  const SHTTP_KEY = 'shttp-key-0123456789';
  const SSE_KEY = 'sse-key-0123456789';
  let shttp: RunningHttpServer;
  let sse: RunningHttpServer;

  before(async () => {
    shttp = await startShttpServer({ apiKey: SHTTP_KEY });
    sse = await startSseServer({ apiKey: SSE_KEY });
  });
  after(async () => {
    await McpManager.closeAll();
    await shttp?.close();
    await sse?.close();
  });

  test('one stdio server: lazy start, bare tool names, cwd = workspace, env passed, built-in clash renamed', async () => {
    const { m, events } = manager({ stdio_servers: [stdioServer('local', { MY_VAR: 'hello-env' })] });
    assert.deepEqual(m.status(), [{ name: 'local', transport: 'stdio', state: 'configured', tools: [] }]);
    assert.equal(events.length, 0, 'nothing starts before tools() is awaited');

    const tools = await m.tools();
    const names = tools.map((t) => t.name);
    assert.ok(names.includes('echo') && names.includes('fail') && names.includes('slow'), names.join(','));
    assert.ok(!names.includes('think'), 'never shadows a built-in');
    assert.ok(names.includes('local_think'));
    assert.deepEqual(events, [{ type: 'server_ready', server: 'local', tools: names }]);
    const st = m.status()[0]!;
    assert.equal(st.state, 'ready');
    assert.deepEqual(st.tools, names);

    const echo = tool(tools, 'echo');
    assert.deepEqual(echo.jsonSchema, {
      type: 'object',
      properties: { text: { type: 'string', description: 'Text to echo' } },
      required: ['text'],
    });
    assert.ok(echo.parameters.safeParse({ anything: 1 }).success, 'arguments pass through');
    assert.equal(echo.description, 'Echo the given text.');

    const obs = await echo.execute({ text: 'hi there' }, ctx());
    assert.deepEqual(obs, { kind: 'MCPObservation', content: [{ type: 'text', text: 'echo: hi there' }], is_error: false, server: 'local', tool: 'echo' });
    assert.equal(textOf(await tool(tools, 'cwd').execute({}, ctx())), workspace);
    assert.equal(textOf(await tool(tools, 'env').execute({ name: 'MY_VAR' }, ctx())), 'MY_VAR=<secret_hidden>');
    // only the minimal environment is inherited, not the daemon's own variables
    process.env.PARLEY_TEST_DAEMON_ONLY = 'x';
    assert.equal(textOf(await tool(tools, 'env').execute({ name: 'PARLEY_TEST_DAEMON_ONLY' }, ctx())), 'PARLEY_TEST_DAEMON_ONLY=<unset>');
    await m.close();
  });

  test('stdio, streamable HTTP and SSE: text, error result, slow, invalid arguments, images, bearer key', async () => {
    const { m, events } = manager({
      stdio_servers: [stdioServer('local')],
      shttp_servers: [{ url: shttp.url, api_key: SHTTP_KEY }],
      sse_servers: [{ url: sse.url, api_key: SSE_KEY }],
    });
    const shttpName = `127_0_0_1_${shttp.port}`;
    const sseName = `127_0_0_1_${sse.port}`;
    assert.deepEqual(m.serverNames, ['local', sseName, shttpName]);
    const tools = await m.tools();
    assert.equal(events.filter((e) => e.type === 'server_ready').length, 3, JSON.stringify(events));
    assert.deepEqual(
      m.status().map((s) => [s.name, s.transport, s.state]),
      [
        ['local', 'stdio', 'ready'],
        [sseName, 'sse', 'ready'],
        [shttpName, 'shttp', 'ready'],
      ],
    );
    assert.ok(tools.some((t) => t.name === 'local_think'));

    for (const server of ['local', sseName, shttpName]) {
      const echo = await tool(tools, `${server}_echo`).execute({ text: `via ${server}` }, ctx());
      assert.equal(echo.is_error, false);
      assert.equal(textOf(echo), `echo: via ${server}`);
      assert.equal(echo.server, server);

      const fail = await tool(tools, `${server}_fail`).execute({}, ctx());
      assert.equal(fail.is_error, true);
      assert.equal(textOf(fail), 'intentional failure from fail');

      const slow = await tool(tools, `${server}_slow`).execute({ ms: 150 }, ctx());
      assert.equal(textOf(slow), 'slept 150 ms');

      const bad = await tool(tools, `${server}_echo`).execute({ text: 42 }, ctx());
      assert.equal(bad.is_error, true, 'invalid arguments are an error observation');
      assert.match(textOf(bad), /invalid|expected/i);

      const img = await tool(tools, `${server}_image`).execute({}, ctx());
      assert.deepEqual(img.content[0], { type: 'image', image_urls: [`data:image/png;base64,${PNG_1X1}`] });
      assert.match(textOf(img), /resource link.*report.*file:\/\/\/tmp\/report\.txt/);
      assert.match(textOf(img), /mem:\/\/note[\s\S]*embedded note body/);
    }
    // the api key is sent as a bearer token (and never shown back)
    assert.ok(shttp.authHeaders.includes(`Bearer ${SHTTP_KEY}`));
    assert.ok(sse.authHeaders.includes(`Bearer ${SSE_KEY}`));
    assert.equal(textOf(await tool(tools, `${shttpName}_auth_header`).execute({}, ctx())), 'authorization: Bearer <secret_hidden>');
    await m.close();
  });

  test('servers that cannot start are reported; the others keep working', async () => {
    const deadPort = await freePort();
    const hangScript = "require('fs').writeFileSync('hang.pid', String(process.pid)); setInterval(() => {}, 1000)";
    const { m, events } = manager(
      {
        stdio_servers: [
          stdioServer('good'),
          { name: 'badcmd', command: '/nonexistent/mcp-server-binary' },
          nodeScript('dies', "console.error('fatal: missing config file'); process.exit(2)"),
          nodeScript('hangs', hangScript),
        ],
        shttp_servers: [{ url: `http://127.0.0.1:${deadPort}/mcp` }, { url: shttp.url, api_key: 'wrong-key-abcdef' }],
        sse_servers: [{ url: `http://127.0.0.1:${deadPort}/sse` }],
      },
      // long enough for a healthy server to start on a loaded machine; the hanging one waits it out
      { connectTimeoutMs: 10_000 },
    );
    const t0 = Date.now();
    const tools = await m.tools();
    assert.ok(Date.now() - t0 < 30_000, 'the servers start in parallel, each bounded by the timeout');

    const failed = new Map(events.filter((e) => e.type === 'server_failed').map((e) => [e.server, (e as { error: string }).error]));
    assert.deepEqual(
      [...failed.keys()].sort(),
      [`127_0_0_1_${deadPort}`, `127_0_0_1_${deadPort}_2`, `127_0_0_1_${shttp.port}`, 'badcmd', 'dies', 'hangs'].sort(),
    );
    assert.match(failed.get('badcmd')!, /badcmd.*\/nonexistent\/mcp-server-binary.*ENOENT/);
    assert.match(failed.get('dies')!, /exited with code 2.*fatal: missing config file/);
    assert.match(failed.get('hangs')!, /did not start within 10 s/);
    assert.match(failed.get(`127_0_0_1_${deadPort}`)!, /ECONNREFUSED/);
    assert.match(failed.get(`127_0_0_1_${deadPort}_2`)!, /ECONNREFUSED|SSE error/);
    assert.match(failed.get(`127_0_0_1_${shttp.port}`)!, /401/);

    const status = new Map(m.status().map((s) => [s.name, s]));
    assert.equal(status.get('good')!.state, 'ready');
    assert.equal(status.get('badcmd')!.state, 'failed');
    assert.equal(status.get('badcmd')!.reason, failed.get('badcmd'));
    assert.ok(
      tools.every((t) => t.server === 'good'),
      'no tools from failed servers',
    );
    assert.equal(textOf(await tool(tools, 'good_echo').execute({ text: 'still here' }, ctx())), 'echo: still here');

    // the server that never answered was stopped
    const hangPid = Number(await readFile(join(workspace, 'hang.pid'), 'utf8'));
    await waitFor(() => !isAlive(hangPid), 'the hanging server to be killed', 15_000);

    // a failed server is not retried on every step
    const again = await m.tools();
    assert.equal(again.length, tools.length);
    assert.equal(events.filter((e) => e.type === 'server_failed').length, 6);
    await m.close();
  });

  test('a call that exceeds its timeout is an error observation; shttp `timeout` is honoured', async () => {
    const { m } = manager(
      {
        stdio_servers: [stdioServer('local')],
        shttp_servers: [{ url: shttp.url, api_key: SHTTP_KEY, timeout: 2 }],
      },
      { callTimeoutMs: 600 },
    );
    const tools = await m.tools();
    let t0 = Date.now();
    const slow = await tool(tools, 'local_slow').execute({ ms: 10_000 }, ctx());
    // (bounds far from the sleep asked for: a busy machine may be slow to answer, never 10 s slow)
    assert.ok(Date.now() - t0 < 8000);
    assert.equal(slow.is_error, true);
    assert.match(textOf(slow), /MCP tool 'slow' on server 'local' timed out after 0\.6 s/);
    assert.equal(textOf(await tool(tools, 'local_echo').execute({ text: 'after' }, ctx())), 'echo: after');

    const shttpName = `127_0_0_1_${shttp.port}`;
    t0 = Date.now();
    const slow2 = await tool(tools, `${shttpName}_slow`).execute({ ms: 10_000 }, ctx());
    const took = Date.now() - t0;
    assert.equal(slow2.is_error, true);
    assert.match(textOf(slow2), /timed out after 2 s/);
    assert.ok(took >= 1900 && took < 8000, `shttp timeout of 2 s used (took ${took} ms)`);
    assert.equal(textOf(await tool(tools, `${shttpName}_slow`).execute({ ms: 300 }, ctx())), 'slept 300 ms', 'within its timeout');
    await m.close();
  });

  test('a stdio server that crashes mid-call gives an error observation and is restarted on the next call', async () => {
    const { m, events } = manager({ stdio_servers: [stdioServer('local')] });
    const tools = await m.tools();
    const pid1 = Number(textOf(await tool(tools, 'pid').execute({}, ctx())));
    const crash = await tool(tools, 'crash').execute({}, ctx());
    assert.equal(crash.is_error, true);
    assert.match(textOf(crash), /MCP server 'local' closed the connection during the call to 'crash' \(process exited with code 3\)/);
    await waitFor(() => !isAlive(pid1), 'the crashed server to be gone', 15_000);
    const failed = events.find((e) => e.type === 'server_failed');
    assert.ok(failed && failed.server === 'local' && /exited with code 3/.test(failed.error), JSON.stringify(events));
    assert.equal(m.status()[0]!.state, 'failed');
    assert.deepEqual(
      m.status()[0]!.tools,
      tools.map((t) => t.name),
      'its tools stay offered',
    );
    assert.equal((await m.tools()).length, tools.length);

    const echo = await tool(tools, 'echo').execute({ text: 'back' }, ctx());
    assert.equal(textOf(echo), 'echo: back');
    assert.equal(m.status()[0]!.state, 'ready');
    const pid2 = Number(textOf(await tool(tools, 'pid').execute({}, ctx())));
    assert.notEqual(pid2, pid1);
    assert.equal(events.filter((e) => e.type === 'server_ready').length, 2);
    await m.close();
    assert.equal(isAlive(pid2), false);
  });

  test('notifications/tools/list_changed refreshes the tool list (stdio and streamable HTTP)', async () => {
    const { m, events } = manager({
      stdio_servers: [stdioServer('local')],
      shttp_servers: [{ url: shttp.url, api_key: SHTTP_KEY }],
    });
    const shttpName = `127_0_0_1_${shttp.port}`;
    const tools = await m.tools();
    assert.ok(!tools.some((t) => t.name.endsWith('dyn_one')));

    await tool(tools, 'local_add_tool').execute({ name: 'dyn_one' }, ctx());
    await waitFor(() => events.some((e) => e.type === 'tools_changed' && e.server === 'local'), 'tools_changed (stdio)', 15_000);
    const changed = events.find((e) => e.type === 'tools_changed' && e.server === 'local')!;
    assert.ok((changed as { tools: string[] }).tools.includes('local_dyn_one'));
    let now = await m.tools();
    assert.equal(textOf(await tool(now, 'local_dyn_one').execute({}, ctx())), 'dynamic dyn_one');
    assert.ok(m.status()[0]!.tools.includes('local_dyn_one'));

    await tool(now, `${shttpName}_add_tool`).execute({ name: 'dyn_two' }, ctx());
    await waitFor(() => events.some((e) => e.type === 'tools_changed' && e.server === shttpName), 'tools_changed (shttp)', 15_000);
    now = await m.tools();
    assert.equal(textOf(await tool(now, `${shttpName}_dyn_two`).execute({}, ctx())), 'dynamic dyn_two');
    await m.close();
  });

  test('close() and McpManager.closeAll() stop stdio servers and their children; tools() restarts them', async () => {
    const { m } = manager({ stdio_servers: [stdioServer('local')] });
    let tools = await m.tools();
    const pid1 = Number(textOf(await tool(tools, 'pid').execute({}, ctx())));
    const child1 = Number(textOf(await tool(tools, 'spawn_child').execute({}, ctx())));
    assert.ok(isAlive(pid1) && isAlive(child1));

    await m.close();
    assert.equal(isAlive(pid1), false, 'server stopped by close()');
    await waitFor(() => !isAlive(child1), 'the server’s child (same process group) to be killed', 15_000);
    assert.deepEqual(m.status(), [{ name: 'local', transport: 'stdio', state: 'configured', tools: [] }]);

    // used again after going idle: reconnects
    tools = await m.tools();
    const pid2 = Number(textOf(await tool(tools, 'pid').execute({}, ctx())));
    assert.notEqual(pid2, pid1);
    assert.ok(isAlive(pid2));

    // closeConversation for another conversation is a no-op; for ours it closes
    await tool(tools, 'echo').closeConversation!('other-conversation');
    assert.ok(isAlive(pid2));

    const { m: m2 } = manager({ stdio_servers: [stdioServer('second')] });
    const tools2 = await m2.tools();
    const pid3 = Number(textOf(await tool(tools2, 'pid').execute({}, ctx())));
    await McpManager.closeAll();
    assert.equal(isAlive(pid2), false, 'closeAll stops the first manager');
    assert.equal(isAlive(pid3), false, 'closeAll stops the second manager');

    // a call on a tool of a closed manager restarts its server (no throw)
    const pid4 = Number(textOf(await tool(tools, 'pid').execute({}, ctx())));
    assert.ok(isAlive(pid4));
    await tool(tools, 'echo').closeConversation!('conv-1');
    assert.equal(isAlive(pid4), false);
  });

  test('an aborted run stops the call: execute rejects with the abort reason', async () => {
    const { m } = manager({ stdio_servers: [stdioServer('local')] });
    const tools = await m.tools();
    const ac = new AbortController();
    const t0 = Date.now();
    const p = tool(tools, 'slow').execute({ ms: 10_000 }, ctx(undefined, ac.signal));
    setTimeout(() => ac.abort(new Error('interrupted by user')), 200);
    await assert.rejects(p, /interrupted by user/);
    assert.ok(Date.now() - t0 < 2000);
    assert.equal(textOf(await tool(tools, 'echo').execute({ text: 'ok' }, ctx())), 'echo: ok');
    await m.close();
  });

  test('a server that lost the session (restart) is reconnected: shttp transparently, SSE on the next call', async () => {
    const { m, events } = manager({
      shttp_servers: [{ url: shttp.url, api_key: SHTTP_KEY }],
      sse_servers: [{ url: sse.url, api_key: SSE_KEY }],
    });
    const shttpName = `127_0_0_1_${shttp.port}`;
    const sseName = `127_0_0_1_${sse.port}`;
    const tools = await m.tools();
    assert.equal(textOf(await tool(tools, `${shttpName}_echo`).execute({ text: 'one' }, ctx())), 'echo: one');
    await shttp.dropSessions();
    const again = await tool(tools, `${shttpName}_echo`).execute({ text: 'two' }, ctx());
    assert.equal(again.is_error, false, textOf(again));
    assert.equal(textOf(again), 'echo: two');

    assert.equal(textOf(await tool(tools, `${sseName}_echo`).execute({ text: 'one' }, ctx())), 'echo: one');
    await sse.dropSessions();
    await waitFor(() => events.some((e) => e.type === 'server_failed' && e.server === sseName), 'the SSE drop to be noticed', 15_000);
    const sseAgain = await tool(tools, `${sseName}_echo`).execute({ text: 'two' }, ctx());
    assert.equal(textOf(sseAgain), 'echo: two');
    assert.deepEqual(
      m.status().map((s) => s.state),
      ['ready', 'ready'],
    );
    await m.close();
  });

  test('the given redact functions are applied to all text', async () => {
    const { m, events } = manager(
      { stdio_servers: [stdioServer('local'), nodeScript('broken', "console.error('token=glob-secret-42'); process.exit(1)")] },
      { redact: (t) => t.replaceAll('glob-secret-42', '<secret_hidden>') },
    );
    const tools = await m.tools();
    const obs = await tool(tools, 'local_echo').execute(
      { text: 'a glob-secret-42 and a ctx-secret-43' },
      ctx((t) => t.replaceAll('ctx-secret-43', '[ctx]')),
    );
    assert.equal(textOf(obs), 'echo: a <secret_hidden> and a [ctx]');
    const failed = events.find((e) => e.type === 'server_failed');
    assert.ok(failed?.error.includes('token=<secret_hidden>') && !failed.error.includes('glob-secret-42'), JSON.stringify(failed));
    await m.close();
  });

  test('canary: api keys and env values never appear in events, observations, errors or status', async () => {
    const KEY = 'CANARY-api-key-7f3a9c1e';
    const ENV = 'CANARY-env-value-5d2b8e4f';
    const guarded = await startShttpServer({ apiKey: KEY });
    const strict = await startShttpServer({ apiKey: 'something-else-entirely' });
    const strictSse = await startSseServer({ apiKey: 'something-else-entirely' });
    try {
      const { m, events } = manager(
        {
          stdio_servers: [
            stdioServer('local', { SECRET_TOKEN: ENV }),
            nodeScript('leaky', 'console.error("starting with " + process.env.SECRET_TOKEN); process.exit(1)', { SECRET_TOKEN: ENV }),
          ],
          shttp_servers: [
            { url: guarded.url, api_key: KEY },
            { url: strict.url, api_key: KEY }, // 401 whose body echoes the key
          ],
          sse_servers: [{ url: strictSse.url, api_key: KEY }],
        },
        { redact: (t) => t, connectTimeoutMs: 5000 },
      );
      const seen: unknown[] = [];
      const tools = await m.tools();
      seen.push(tools.map((t) => ({ name: t.name, description: t.description, schema: t.jsonSchema })));
      seen.push(m.status());
      const failedNames = events
        .filter((e) => e.type === 'server_failed')
        .map((e) => e.server)
        .sort();
      assert.deepEqual(failedNames, [`127_0_0_1_${strict.port}`, `127_0_0_1_${strictSse.port}`, 'leaky'].sort());
      assert.ok(strict.authHeaders.includes(`Bearer ${KEY}`), 'the key really reached the server');
      const guardedName = `127_0_0_1_${guarded.port}`;
      for (const [name, args] of [
        ['local_env', { name: 'SECRET_TOKEN' }],
        ['local_echo', { text: `echo ${ENV} and ${KEY}` }],
        [`${guardedName}_auth_header`, {}],
        [`${guardedName}_echo`, { text: KEY }],
        ['local_crash', {}],
      ] as const) {
        seen.push(await tool(tools, name).execute(args, ctx()));
      }
      seen.push(await tool(tools, 'local_slow').execute({ ms: 5 }, ctx()));
      seen.push(m.status(), events);
      const all = JSON.stringify(seen);
      assert.ok(!all.includes(KEY), 'api_key leaked');
      assert.ok(!all.includes(ENV), 'env value leaked');
      assert.ok(all.includes('SECRET_TOKEN=<secret_hidden>'));
      assert.ok(all.includes('starting with <secret_hidden>'));
      assert.ok(all.includes('authorization: Bearer <secret_hidden>'));
      assert.match(JSON.stringify(events), /401/);
      await m.close();
    } finally {
      await guarded.close();
      await strict.close();
      await strictSse.close();
    }
  });
});
