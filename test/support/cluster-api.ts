/** What the cluster test files share: REST and WebSocket shorthands, a cluster with a scripted LLM, gap checks. */
import assert from 'node:assert/strict';
import { startCluster, type Cluster, type OnEnd } from './cluster.js';
import { waitFor, type DaemonHandle } from './daemon.js';
import { startScriptedLlm } from './scripted-llm.js';
import { connect, type Frames } from './ws-client.js';

export const send = (d: DaemonHandle, id: string, text: string, run = false) => d.req('POST', `/api/conversations/${id}/events`, { content: [{ text }], run });
export const subscribe = (d: DaemonHandle, id: string, q = '') => connect(`ws://127.0.0.1:${d.port}/sockets/events/${id}${q ? `?${q}` : ''}`);
export const create = async (d: DaemonHandle) => (await d.req('POST', '/api/conversations', {})).body.conversation_id as string;
export const stored = (f: Frames) => f.frames.filter((x) => x.seq !== undefined);
export const texts = (f: Frames) =>
  stored(f)
    .filter((x) => x.kind === 'MessageEvent')
    .map((x) => x.llm_message.content[0].text as string);

/** The texts of every message stored, read through the REST API. */
export async function storedTexts(d: DaemonHandle, id: string): Promise<string[]> {
  const out: string[] = [];
  for (let page: string | null = null; ; ) {
    const r = await d.req('GET', `/api/conversations/${id}/events/search?limit=100&kind=MessageEvent${page ? `&page_id=${page}` : ''}`);
    out.push(...r.body.items.map((e: any) => e.llm_message.content[0].text));
    page = r.body.next_page_id;
    if (!page) return out;
  }
}

/** Three nodes with a scripted LLM. */
export async function agentCluster(onEnd: OnEnd, leaseTtlMs: number, nodes = 3) {
  const llm = await startScriptedLlm([]);
  onEnd(() => llm.close());
  const c = await startCluster(onEnd, nodes, { LLM_MODEL: 'openai/scripted', LLM_BASE_URL: llm.url, LLM_API_KEY: 'k', LEASE_TTL_MS: String(leaseTtlMs) });
  return { llm, c };
}

/** A conversation created on node 1, its workspace ready and its lease released. */
export async function readyConversation(c: Cluster) {
  const id = await create(c.nodes[0]!);
  await waitFor(async () => (await c.nodes[0]!.req('GET', `/api/conversations/${id}`)).body.setup?.phase === 'ready', 'the workspace');
  // the creating node held the lease while it prepared the workspace, and lets it go after
  await waitFor(async () => (await c.nodes[0]!.req('GET', `/api/conversations/${id}`)).body.node_id === null, 'no owner once the workspace is ready', 10_000);
  return id;
}

/** Every stored event once, in seq order, gap-free from `from`. */
export function assertGapFree(f: Frames, from = 1) {
  const seqs = stored(f).map((x) => x.seq as number);
  assert.deepEqual(
    seqs,
    Array.from({ length: seqs.length }, (_, i) => i + from),
  );
}
