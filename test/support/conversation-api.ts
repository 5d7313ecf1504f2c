/** Reading a conversation through the REST API, for tests. */
import assert from 'node:assert/strict';
import { waitFor, type DaemonHandle } from './daemon.js';

export type Req = DaemonHandle['req'];

/** Every event of a conversation, following next_page_id. */
export async function allEvents(req: Req, id: string): Promise<any[]> {
  const out: any[] = [];
  for (let after = 0; ; ) {
    const r = await req('GET', `/api/conversations/${id}/events/search?limit=100&after_seq=${after}`);
    assert.equal(r.status, 200, r.text);
    out.push(...r.body.items);
    if (!r.body.next_page_id) return out;
    after = out[out.length - 1].seq;
  }
}

export const statusOf = async (req: Req, id: string) => (await req('GET', `/api/conversations/${id}`)).body.execution_status as string;

export const waitStatus = (req: Req, id: string, want: string, ms = 30_000) => waitFor(async () => (await statusOf(req, id)) === want, `status ${want}`, ms);
