/**
 * One redaction for every exit: a full scripted conversation in which the agent prints every
 * variable and the tokens themselves; the canaries appear in no response, event, log line,
 * LLM request or file under DATA_DIR (workspaces included).
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { recordingReq, startDaemon, waitFor } from './support/daemon.js';
import { startScriptedLlm } from './support/scripted-llm.js';
import { connect } from './support/ws-client.js';
import { walkFiles } from './support/files.js';

const GH = 'ghp_CANARYgithub0123456789abcdef';
const SECRET = 'custom-CANARY-secret-value-42';
const MCPKEY = 'mcp-CANARY-api-key-77';
const LLMKEY = 'sk-CANARY-llm-key-0099';
const CANARIES = [GH, SECRET, MCPKEY, LLMKEY];

test('canary tokens appear nowhere', async () => {
  const llm = await startScriptedLlm();
  const d = await startDaemon({ LLM_MODEL: 'openai/scripted', LLM_BASE_URL: llm.url, LLM_API_KEY: LLMKEY, SESSION_API_KEY: 'k-canary-session' });
  const H = { 'X-Session-API-Key': 'k-canary-session' };
  const responses: string[] = [];
  const call = recordingReq(d, responses, H);
  try {
    await call('POST', '/api/add-git-providers', {
      provider_tokens: { github: { token: GH } },
      mcp_config: { shttp_servers: [{ url: 'http://127.0.0.1:9/mcp', api_key: MCPKEY }] },
    });
    assert.equal((await call('POST', '/api/secrets', { name: 'MY_SECRET', value: SECRET, description: 'test' })).status, 201);
    assert.equal((await call('POST', '/api/secrets', { name: 'MY_SECRET', value: 'xxxxxxxx' })).status, 409);
    // bad requests that carry the canaries are rejected without echoing them
    await call('POST', '/api/add-git-providers', { provider_tokens: { github: { token: GH, bogus: GH } } });
    await call('POST', '/api/conversations', { mcp_config: { shttp_servers: [{ url: 'nope', api_key: MCPKEY }] } });
    llm.push(
      {
        text: `I will print ${GH}`,
        toolCalls: [
          {
            name: 'terminal',
            arguments: { command: `env; echo "$GITHUB_TOKEN $MY_SECRET"; echo ${GH}; printf '%s' "$GITHUB_TOKEN" | wc -c > leak.txt; cat leak.txt` },
          },
        ],
      },
      { toolCalls: [{ name: 'file_editor', arguments: { command: 'view', path: '/proc/self/environ' } }] },
      { text: `done ${SECRET}` },
    );
    const created = await call('POST', '/api/conversations', { initial_user_msg: `please use ${GH}` });
    const id = created.body.conversation_id;
    const ws = connect(`ws://127.0.0.1:${d.port}/sockets/events/${id}?resend_mode=all`, { headers: H });
    await waitFor(async () => (await d.req('GET', `/api/conversations/${id}`, undefined, H)).body.execution_status === 'finished', 'finished', 30_000);
    const evs = await call('GET', `/api/conversations/${id}/events/search?limit=100`);
    const obs = evs.body.items.find((e: any) => e.kind === 'ObservationEvent');
    assert.match(obs.observation.content[0].text, /<secret_hidden> <secret_hidden>/, 'the shell had the values, masked');
    await call('GET', `/api/conversations/${id}`);
    await call('GET', `/api/conversations/${id}/mcp`);
    await call('GET', '/api/secrets');
    await call('GET', '/api/settings');
    await call('POST', '/api/settings', { llm_api_key: LLMKEY });
    const settings = await call('GET', '/api/settings');
    assert.equal(settings.body.llm_api_key_set, true);
    await waitFor(() => ws.frames.some((f) => f.kind === 'MessageEvent' && f.source === 'agent'), 'ws got answer');
    ws.close();
    await d.stop();
    const places: [string, string][] = [
      ['responses', responses.join('\n')],
      ['websocket frames', JSON.stringify(ws.frames)],
      ['daemon output', d.output.join('\n')],
      ['LLM requests (bodies)', JSON.stringify(llm.requests.map((r) => r.body))],
    ];
    for (const f of walkFiles(d.dataDir)) places.push([`file ${path.relative(d.dataDir, f)}`, fs.readFileSync(f).toString('latin1')]);
    // the shell holds the real values (it needs them for provider APIs); the daemon itself writes
    // no token into the workspace, the store, the logs or any output
    assert.ok(
      places.some(([n]) => n.includes('leak.txt')),
      'the workspace file exists',
    );
    for (const [where, text] of places) {
      for (const c of CANARIES)
        assert.ok(!text.includes(c), `${c} found in ${where}: ${text.slice(Math.max(0, text.indexOf(c) - 300), text.indexOf(c) + 100)}`);
    }
    assert.ok(
      d.output.some((l) => l.includes(id)),
      'logs were produced for this conversation',
    );
  } finally {
    await d.stop();
    await llm.close();
  }
});
