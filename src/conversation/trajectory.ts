/**
 * A conversation's trajectory (OpenHands' `GET /api/file/download-trajectory/{id}`): a ZIP of its
 * persisted events, one JSON file each (`events/event-00001-<id>.json`, in seq order, each exactly as
 * the API answers the event), and its metadata (`meta.json`: the conversation's info as the API
 * answers it, so keys are masked; the events were redacted as they were stored).
 *
 * The ZIP is made as it is sent (fflate's streaming `Zip`): one page of events is read from the store
 * and compressed when the client has taken what came before, so a conversation of any length costs a
 * page of memory, and a client that stops reading stops the reads.
 */
import type { EventLog } from '../events/log.js';
import { eventJson } from '../events/types.js';
import type { Conversations } from './conversations.js';

/** Bytes the bridge sends as they are made (with back-pressure), under a content type and a file name. */
export class ByteStream {
  constructor(
    readonly name: string,
    readonly contentType: string,
    /** Called once; each chunk is sent before the next is asked for. */
    readonly chunks: () => AsyncIterable<Uint8Array>,
  ) {}

  /** All of it at once (the JSON door, which has no stream). */
  async collect(): Promise<Buffer> {
    const parts: Uint8Array[] = [];
    for await (const c of this.chunks()) parts.push(c);
    return Buffer.concat(parts);
  }
}

/** Events read (and compressed) per step. */
const PAGE = 200;

/** The conversation's trajectory as a streamed ZIP; 404 when it does not exist. */
export async function trajectory(c: { conversations: Pick<Conversations, 'get'>; events: Pick<EventLog, 'query'> }, id: string): Promise<ByteStream> {
  const meta = await c.conversations.get(id);
  return new ByteStream(`trajectory-${id}.zip`, 'application/zip', () => zipped(c.events, id, meta));
}

async function* zipped(events: Pick<EventLog, 'query'>, id: string, meta: unknown): AsyncGenerator<Uint8Array> {
  // loaded on the first download: the daemon starts without it
  const { Zip, ZipDeflate } = await import('fflate');
  const out: Uint8Array[] = [];
  let failed: Error | null = null;
  const zip = new Zip((err, chunk) => {
    if (err) failed = err;
    else out.push(chunk);
  });
  const encoder = new TextEncoder();
  const add = (name: string, text: string) => {
    const file = new ZipDeflate(name, { level: 6 });
    zip.add(file);
    file.push(encoder.encode(text), true);
  };
  // what the compressor made so far, handed on (the generator waits there until the client took it)
  const drain = function* () {
    if (failed) throw failed;
    yield* out.splice(0);
  };
  add('meta.json', JSON.stringify(meta, null, 2));
  yield* drain();
  for (let after = 0; ; ) {
    const page = await events.query(id, { afterSeq: after, limit: PAGE, keepJson: true });
    for (const e of page) add(`events/event-${String(e.seq).padStart(5, '0')}-${e.id}.json`, eventJson(e));
    yield* drain();
    if (page.length < PAGE) break;
    after = page[page.length - 1]!.seq!;
  }
  zip.end();
  yield* drain();
}
