/**
 * Downloads over uWS, streamed (src/conversation/file-transfer.ts is the core's side; uploads:
 * bridge/multipart.ts):
 *
 * - a download goes out a chunk at a time with `tryEnd` (uWS takes what the socket takes and keeps
 *   nothing), the chunk after it read from the service meanwhile and the one after that only once
 *   the client took the first (onWritable), so a response holds two chunks of the daemon's memory
 *   however slowly its client reads, and the
 *   main thread does a chunk's work at a time (a 64 MiB file was joined chunk by chunk before: 22–36 s
 *   of the main thread, /health stalled for seconds);
 * - every write checks the abort flag first; a client that goes away ends the transfer (the file is
 *   closed in its sandbox).
 */
import type { FileStream } from '../src/conversation/file-transfer.js';
import { contentTypeOf } from './content-types.js';
import { STATUS_TEXT, type ResState } from './http.js';
import type { HttpResponse } from './uws.js';

/**
 * A workspace's file shown where it is (a page the agent made, what it embeds): the agent wrote it,
 * so it must not act as the daemon's own origin. `sandbox` without `allow-same-origin` gives the
 * page an opaque origin of its own: its scripts run, but it reads no cookie or storage of the
 * daemon's, and its requests to the daemon carry `Origin: null` (refused for any change) and no
 * session cookie. The type is the name's, never sniffed, and the page is never cached.
 */
const INLINE_HEADERS = {
  'content-security-policy': 'sandbox allow-scripts allow-forms allow-popups allow-modals allow-downloads',
  'x-content-type-options': 'nosniff',
  'cache-control': 'no-store',
  'referrer-policy': 'no-referrer',
};

/** Writes the file as its client takes it; the file is closed whatever happens. */
export async function sendFile(res: HttpResponse, state: ResState, file: FileStream): Promise<void> {
  try {
    if (state.aborted) return;
    const total = file.size;
    res.cork(() => {
      res.writeStatus(STATUS_TEXT[200]!);
      if (!file.inline) {
        res
          .writeHeader('content-type', 'application/octet-stream')
          .writeHeader('content-disposition', `attachment; filename="${file.name.replace(/[^\w.-]/g, '_')}"`);
        return;
      }
      res.writeHeader('content-type', contentTypeOf(file.name) ?? 'application/octet-stream');
      for (const h in INLINE_HEADERS) res.writeHeader(h, INLINE_HEADERS[h as keyof typeof INLINE_HEADERS]);
    });
    let sent = 0;
    if (total === 0) res.cork(() => res.end());
    // the next chunk is asked for while this one goes out: at most two chunks of the file in the daemon
    let next: Promise<Buffer> | null = total > 0 ? file.read() : null;
    while (next) {
      const chunk = await next;
      if (state.aborted) return;
      // the file shrank after it was opened: the response cannot be what its length said
      if (chunk.length === 0) return cut(res, state);
      sent += chunk.length;
      next = sent < total ? file.read() : null;
      // (a read left behind when the client goes away fails quietly: the file is closed after it)
      next?.catch(() => {});
      if (!(await offer(res, state, chunk, total))) return;
    }
    state.aborted = true;
    state.metric?.end(200, state.t0!);
  } catch {
    // the status is sent: a failed read can only cut the response short
    cut(res, state);
  } finally {
    await file.close();
  }
}

function cut(res: HttpResponse, state: ResState): void {
  if (state.aborted) return;
  state.aborted = true;
  res.close();
}

/**
 * Offers a chunk of a response of `total` bytes; when the socket could not take all of it, the rest
 * is offered again each time it is writable. False: the client went away.
 */
function offer(res: HttpResponse, state: ResState, chunk: Buffer, total: number): Promise<boolean> {
  if (state.aborted) return Promise.resolve(false);
  const base = res.getWriteOffset();
  let ok = false;
  let done = false;
  res.cork(() => ([ok, done] = res.tryEnd(chunk, total)));
  if (ok || done) return Promise.resolve(true);
  return new Promise((resolve) => {
    state.onAbort = () => resolve(false);
    res.onWritable((offset) => {
      if (state.aborted) return true;
      [ok, done] = res.tryEnd(chunk.subarray(offset - base), total);
      // the next chunk is read outside uWS's callback
      if (ok || done) setImmediate(() => resolve(!state.aborted));
      return ok;
    });
  });
}
