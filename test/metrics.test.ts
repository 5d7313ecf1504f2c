/**
 * GET /metrics: Prometheus text behind the session key, and public on METRICS_PORT; scraped after
 * real traffic (REST, WebSocket, an agent run with the scripted LLM and a real shell), every family
 * the operator needs has moved.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { startDaemon, waitFor, type DaemonHandle } from './support/daemon.js';
import { startScriptedLlm, type ScriptedLlm } from './support/scripted-llm.js';
import { connect } from './support/ws-client.js';

const KEY = 'metrics-test-key-0123456789';
const H = { 'x-session-api-key': KEY };
let d: DaemonHandle;
let llm: ScriptedLlm;
let metricsPort: number;

before(async () => {
  llm = await startScriptedLlm();
  d = await startDaemon({ SESSION_API_KEY: KEY, METRICS_PORT: '0', LLM_MODEL: 'openai/scripted', LLM_BASE_URL: llm.url, LLM_API_KEY: 'sk-x' });
  metricsPort = Number(/"metrics_port":(\d+)/.exec(d.output.join('\n'))?.[1]);
  assert.ok(metricsPort > 0, 'the daemon logs its metrics port');
});
after(async () => {
  await d?.stop();
  await llm?.close();
});

/** Parses the text format into `name{labels}` → value. */
function parse(text: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const i = line.lastIndexOf(' ');
    out.set(line.slice(0, i), Number(line.slice(i + 1)));
  }
  return out;
}
/** Sum of every sample of `name` whose labels include all of `labels`. */
function sum(m: Map<string, number>, name: string, labels: Record<string, string> = {}): number {
  let total = 0;
  for (const [k, v] of m) {
    const brace = k.indexOf('{');
    if ((brace < 0 ? k : k.slice(0, brace)) !== name) continue;
    if (Object.entries(labels).every(([l, val]) => k.includes(`${l}="${val}"`))) total += v;
  }
  return total;
}
const scrape = async () => {
  const r = await fetch(`${d.url}/metrics`, { headers: H });
  assert.equal(r.status, 200);
  assert.match(r.headers.get('content-type') ?? '', /^text\/plain; version=0\.0\.4/);
  return parse(await r.text());
};

describe('GET /metrics', { timeout: 90_000 }, () => {
  test('needs the session key on the API port; METRICS_PORT serves it without one, and nothing else', async () => {
    assert.equal((await fetch(`${d.url}/metrics`)).status, 401);
    assert.equal((await fetch(`${d.url}/metrics`, { headers: { 'x-session-api-key': 'wrong' } })).status, 401);
    const pub = await fetch(`http://127.0.0.1:${metricsPort}/metrics`);
    assert.equal(pub.status, 200);
    const text = await pub.text();
    assert.match(text, /^# HELP process_resident_memory_bytes/m, 'default process metrics');
    assert.match(text, /^nodejs_eventloop_lag_seconds /m);
    assert.ok(!text.includes(KEY));
    assert.equal((await fetch(`http://127.0.0.1:${metricsPort}/api/conversations`)).status, 404, 'the metrics port serves no API');
  });

  test('real traffic counted: HTTP by route template, status, events, subscribers, runs, steps, LLM, tools, store, conversations, processes', async () => {
    const before = await scrape();
    const route = { method: 'POST', route: '/api/conversations/{conversation_id}/events', status: '200' };

    const id = (await d.req('POST', '/api/conversations', {}, H)).body.conversation_id as string;
    const ws = connect(`ws://127.0.0.1:${d.port}/sockets/events/${id}`, { headers: H });
    await ws.next((f) => f.key === 'full_state');
    for (let i = 0; i < 5; i++) assert.equal((await d.req('POST', `/api/conversations/${id}/events`, { content: [{ text: `m${i}` }] }, H)).status, 200);
    assert.equal((await d.req('GET', `/api/conversations/${id}/events/search?limit=abc`, undefined, H)).status, 422);
    assert.equal((await d.req('GET', '/no/such/route', undefined, H)).status, 404);
    await waitFor(() => ws.frames.filter((f) => f.kind === 'MessageEvent').length >= 5, 'the subscriber got the messages');

    const mid = await scrape();
    assert.equal(sum(mid, 'parley_http_request_duration_seconds_count', route) - sum(before, 'parley_http_request_duration_seconds_count', route), 5);
    assert.ok(sum(mid, 'parley_http_request_duration_seconds_bucket', { ...route, le: '+Inf' }) >= 5);
    assert.equal(sum(mid, 'parley_http_request_duration_seconds_count', { route: '/api/conversations/{conversation_id}/events/search', status: '422' }), 1);
    assert.ok(sum(mid, 'parley_http_request_duration_seconds_count', { route: '(unmatched)', status: '404' }) >= 1);
    assert.ok(sum(mid, 'parley_events_appended_total') - sum(before, 'parley_events_appended_total') >= 5);
    assert.ok(sum(mid, 'parley_events_published_total') - sum(before, 'parley_events_published_total') >= 5);
    assert.equal(sum(mid, 'parley_ws_subscribers'), 1);
    assert.ok(sum(mid, 'parley_store_append_duration_seconds_count') > sum(before, 'parley_store_append_duration_seconds_count'));
    // the index takes what was committed: nothing left unindexed, and no lag, once it caught up
    await waitFor(async () => {
      const m = await scrape();
      return sum(m, 'parley_store_unindexed_events') === 0 && sum(m, 'parley_store_index_lag_seconds') === 0;
    }, 'the index caught up');
    assert.ok(sum(mid, 'parley_conversations', { execution_status: 'idle' }) >= 1);

    // an agent run: one tool call in a real shell (a process the daemon started), then an answer
    llm.push(
      { text: 'Looking.', toolCalls: [{ name: 'terminal', arguments: { command: 'sleep 30 & echo started' } }] },
      { text: 'Done.', usage: { prompt_tokens: 100, completion_tokens: 7 } },
    );
    assert.equal((await d.req('POST', `/api/conversations/${id}/events`, { content: [{ text: 'go' }], run: true }, H)).status, 200);
    await waitFor(async () => (await d.req('GET', `/api/conversations/${id}`, undefined, H)).body.execution_status === 'finished', 'run finished', 30_000);
    const end = await scrape();
    assert.equal(sum(end, 'parley_agent_runs_total') - sum(before, 'parley_agent_runs_total'), 1);
    assert.equal(sum(end, 'parley_agent_runs_ended_total', { execution_status: 'finished' }), 1);
    assert.equal(sum(end, 'parley_agent_steps_total') - sum(before, 'parley_agent_steps_total'), 2);
    assert.equal(sum(end, 'parley_llm_request_duration_seconds_count', { provider: 'openai', model: 'scripted', outcome: 'ok' }), 2);
    assert.ok(sum(end, 'parley_llm_tokens_total', { provider: 'openai', model: 'scripted', direction: 'output' }) >= 7);
    assert.ok(sum(end, 'parley_llm_tokens_total', { direction: 'input' }) >= 100);
    assert.equal(sum(end, 'parley_tool_call_duration_seconds_count', { tool: 'terminal', outcome: 'ok' }), 1);
    // awaited: the shell forks the background job and answers at once; on a busy machine the child may not have exec'd `sleep` yet
    await waitFor(async () => sum(await scrape(), 'parley_child_processes', { command: 'sleep' }) >= 1, "the shell's background sleep is counted", 10_000);
    assert.ok(sum(end, 'parley_conversations', { execution_status: 'finished' }) >= 1);
    assert.equal(sum(end, 'parley_ws_dropped_subscribers_total'), 0, 'the live subscriber kept up');
    ws.close();
    await waitFor(async () => sum(await scrape(), 'parley_ws_subscribers') === 0, 'the subscriber is gone');
  });
});
