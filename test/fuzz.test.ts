/**
 * No input, however malformed, produces a 5xx or stops the daemon (issue 2.3): seeded random
 * bodies, paths, queries and WebSocket frames against every route that takes input.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { startDaemon, type DaemonHandle } from './support/daemon.js';
import { connect } from './support/ws-client.js';

let d: DaemonHandle;
before(async () => {
  d = await startDaemon({ MAX_BODY_BYTES: '65536', LOG_LEVEL: 'info' });
});
after(async () => {
  await d.stop();
});

/** mulberry32: a small seeded PRNG so a failure can be replayed. */
function rng(seed: number) {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
const SEED = Number(process.env.FUZZ_SEED ?? 20261121);
/** Percent-encodes; a lone surrogate goes out as raw invalid UTF-8 (%ED%A0%80), itself a good case. */
const enc = (s: string) => {
  try {
    return encodeURIComponent(s);
  } catch {
    return '%ED%A0%80';
  }
};

function generator(r: () => number) {
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(r() * xs.length)]!;
  const strings = ['', 'x', 'user', 'text', 'image', 'github', 'http://127.0.0.1:1', '00000000-0000-0000-0000-000000000000', '\u0000', '\ud800', '💥', 'a'.repeat(5000), '__proto__', 'constructor', '../../etc/passwd', '%ZZ', 'null'];
  const keys = ['role', 'content', 'run', 'text', 'type', 'image_urls', 'cache_prompt', 'initial_user_msg', 'repository', 'git_provider', 'selected_branch', 'mcp_config', 'stdio_servers', 'sse_servers', 'shttp_servers', 'url', 'api_key', 'name', 'command', 'args', 'env', 'timeout', 'provider_tokens', 'token', 'host', 'suggested_task', 'create_microagent', 'replay_json', 'conversation_id', 'image_urls', 'llm_model', 'llm_api_key', 'value', 'description', '__proto__', 'constructor', 'x'];
  const value = (depth: number): unknown => {
    const k = r();
    if (depth > 4 || k < 0.3) return pick([null, true, false, 0, -1, 1.5, 1e308, -0, 2 ** 53 + 1, ...strings]);
    if (k < 0.6) return Array.from({ length: Math.floor(r() * 4) }, () => value(depth + 1));
    const o: Record<string, unknown> = {};
    for (let i = Math.floor(r() * 5); i > 0; i--) o[pick(keys)] = value(depth + 1);
    return o;
  };
  const text = (v: unknown): string => {
    const s = JSON.stringify(v) ?? 'null';
    const m = r();
    if (m < 0.1) return s.slice(0, Math.floor(r() * s.length)); // truncated JSON
    if (m < 0.15) return s + pick(['}', ']', ',', '"', 'x']);
    return s;
  };
  return { pick, value, text };
}

test('random bodies, paths and queries never produce a 5xx; the daemon stays up', async () => {
  const r = rng(SEED);
  const g = generator(r);
  const id = (await d.req('POST', '/api/conversations', {})).body.conversation_id as string;
  const bodyRoutes = [
    ['POST', '/api/conversations'],
    ['POST', `/api/conversations/${id}/events`],
    ['POST', '/api/add-git-providers'],
    ['POST', '/api/settings'],
    ['POST', '/api/secrets'],
    ['PUT', '/api/secrets/FUZZ_NAME'],
  ] as const;
  const seen = new Map<number, number>();
  for (let i = 0; i < 600; i++) {
    const [m, p] = g.pick(bodyRoutes);
    // keep the fuzz from starting agents: run flags are forced off where they exist
    const v = g.value(0);
    if (v && typeof v === 'object' && !Array.isArray(v)) for (const k of ['run', 'initial_user_msg', 'suggested_task', 'create_microagent', 'replay_json']) delete (v as Record<string, unknown>)[k];
    const body = g.text(v);
    const res = await d.req(m, p, body);
    seen.set(res.status, (seen.get(res.status) ?? 0) + 1);
    assert.ok(res.status < 500, `seed ${SEED} #${i}: ${m} ${p} ${body.slice(0, 200)} → ${res.status} ${res.text.slice(0, 200)}`);
  }
  const paths = ['/api/conversations/', `/api/conversations/${id}/events/search`, `/api/conversations/${id}/events/count`, `/api/conversations/${id}/events/`, '/api/conversations', `/api/conversations/${id}/mcp`];
  const qkeys = ['limit', 'page_id', 'kind', 'source', 'sort_order', 'after_seq'];
  for (let i = 0; i < 300; i++) {
    const q = Array.from({ length: Math.floor(r() * 4) }, () => `${g.pick(qkeys)}=${enc(String(g.value(5)))}`).join('&');
    const tail = r() < 0.3 ? enc(String(g.value(5))) : '';
    const res = await d.req('GET', `${g.pick(paths)}${tail}${q ? `?${q}` : ''}`);
    seen.set(res.status, (seen.get(res.status) ?? 0) + 1);
    assert.ok(res.status < 500, `seed ${SEED} GET #${i} → ${res.status} ${res.text.slice(0, 200)}`);
  }
  assert.ok((seen.get(422) ?? 0) > 100, `mostly rejected as 422: ${JSON.stringify([...seen])}`);
  assert.equal((await d.req('GET', '/alive')).status, 200);
  assert.equal(d.proc.exitCode, null);
});

test('random WebSocket frames get ServerErrorEvents or are sends; the socket and the daemon stay up', async () => {
  const r = rng(SEED + 1);
  const g = generator(r);
  const id = (await d.req('POST', '/api/conversations', {})).body.conversation_id as string;
  const s = connect(`ws://127.0.0.1:${d.port}/sockets/events/${id}`);
  await s.next((f) => f.key === 'full_state');
  for (let i = 0; i < 300; i++) {
    const v = g.value(0);
    if (v && typeof v === 'object' && !Array.isArray(v)) delete (v as Record<string, unknown>).run;
    if (r() < 0.2) s.ws.send(Buffer.from(g.text(v)), { binary: true });
    else s.ws.send(g.text(v));
  }
  s.send({ role: 'user', content: [{ type: 'text', text: 'still alive' }] });
  await s.next((f) => f.kind === 'MessageEvent' && f.llm_message?.content?.[0]?.text === 'still alive', 'the final send', 20_000);
  assert.equal(s.closed, null, 'the socket stayed open');
  assert.ok(s.frames.some((f) => f.kind === 'ServerErrorEvent'));
  s.close();
  assert.equal((await d.req('GET', '/alive')).status, 200);
});
