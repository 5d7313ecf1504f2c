/** Transport helpers: reading bodies with a limit, writing corked JSON responses. */
import { jsonShapeError } from '../src/body-shape.js';
import type { HttpResponse } from './uws.js';

export const STATUS_TEXT: Record<number, string> = {
  200: '200 OK',
  201: '201 Created',
  204: '204 No Content',
  303: '303 See Other',
  400: '400 Bad Request',
  401: '401 Unauthorized',
  403: '403 Forbidden',
  404: '404 Not Found',
  405: '405 Method Not Allowed',
  409: '409 Conflict',
  413: '413 Payload Too Large',
  421: '421 Misdirected Request',
  415: '415 Unsupported Media Type',
  422: '422 Unprocessable Entity',
  429: '429 Too Many Requests',
  500: '500 Internal Server Error',
  503: '503 Service Unavailable',
};

/** A body refused before it was parsed (413): over the byte limit, or JSON too dense to build (src/body-shape.ts). `message` says which. */
export class BodyTooLarge extends Error {}

/** A response whose client may go away: every write checks `aborted`. */
export interface ResState {
  aborted: boolean;
  /** Where the response is counted once written (GET /metrics), and when the request came. */
  metric?: { end(status: number, t0: number): void } | null;
  t0?: number;
  /** Called once when the client goes away (a streamed response waiting for it to read). */
  onAbort?: () => void;
}

export function watchAbort(res: HttpResponse, metric: ResState['metric'] = null): ResState {
  const state: ResState = { aborted: false, metric, t0: performance.now() };
  res.onAborted(() => {
    state.aborted = true;
    state.onAbort?.();
  });
  return state;
}

/**
 * Reads a JSON body as UTF-8 text, refusing more than `limit` bytes and, before anything parses it,
 * more structure than BODY_SHAPE_LIMITS (src/body-shape.ts): every REST and /trpc body passes here,
 * so none can make the daemon build more than a small multiple of its bytes. The usual single-chunk
 * body is decoded straight from uWS's buffer (no copy); uWS reuses that memory after the callback, so
 * a longer body is copied, into one buffer of its declared length (`Content-Length`) when it has one.
 * `done` is called once: with the text, or with the BodyTooLarge that refused it. (A callback, not a
 * promise: REST's hot path reads its body here, and a promise and its reactions per request are
 * garbage the event loop collects; readJsonBody is the promise.)
 */
export function onJsonBody(res: HttpResponse, limit: number, declared: number, done: (err: BodyTooLarge | null, text: string) => void): void {
  let whole: Buffer | null = null;
  let chunks: Buffer[] | null = null;
  let size = 0;
  let failed = false;
  res.onData((ab, isLast) => {
    if (failed) return;
    const n = ab.byteLength;
    if (size + n > limit) {
      failed = true;
      return done(new BodyTooLarge(`Request body exceeds ${limit} bytes`), '');
    }
    let text: string;
    if (isLast && size === 0) text = Buffer.from(ab).toString('utf8');
    else {
      if (declared > 0 && declared <= limit && size + n <= declared) {
        whole ??= Buffer.allocUnsafe(declared);
        whole.set(new Uint8Array(ab), size);
      } else {
        // no length declared (chunked), or more than it said: keep the parts
        if (whole) (chunks = [whole.subarray(0, size)]), (whole = null), (declared = 0);
        (chunks ??= []).push(Buffer.from(ab.slice(0)));
      }
      size += n;
      if (!isLast) return;
      text = whole ? whole.toString('utf8', 0, size) : Buffer.concat(chunks!, size).toString('utf8');
    }
    const refused = jsonShapeError(text);
    if (refused) done(new BodyTooLarge(refused.detail), '');
    else done(null, text);
  });
}

/** onJsonBody as a promise (/trpc's body). */
export function readJsonBody(res: HttpResponse, limit: number, declared = 0): Promise<string> {
  return new Promise((resolve, reject) => onJsonBody(res, limit, declared, (err, text) => (err ? reject(err) : resolve(text))));
}

export function send(
  res: HttpResponse,
  state: ResState,
  status: number,
  body: string | Buffer,
  contentType = 'application/json',
  extraHeaders?: Record<string, string>,
): void {
  if (state.aborted) return;
  res.cork(() => {
    res.writeStatus(STATUS_TEXT[status] ?? String(status)).writeHeader('content-type', contentType);
    if (extraHeaders) for (const [k, v] of Object.entries(extraHeaders)) res.writeHeader(k, v);
    res.end(body);
  });
  state.aborted = true;
  state.metric?.end(status, state.t0!);
}

export const sendJson = (res: HttpResponse, state: ResState, status: number, value: unknown) => send(res, state, status, JSON.stringify(value));

export function parseQuery(q: string): Record<string, string> {
  const out: Record<string, string> = {};
  if (!q) return out;
  for (const [k, v] of new URLSearchParams(q)) if (!(k in out)) out[k] = v;
  return out;
}

/** Position of a JSON syntax error, as pydantic reports it in `loc`. */
export function jsonErrorPosition(err: unknown, text: string): number {
  const m = /position (\d+)/.exec(String((err as Error)?.message ?? ''));
  return m ? Number(m[1]) : text.length;
}

/** A page whose items are read on demand (src/events/page.ts's EventPage). */
interface LazyPage<T> {
  next(): Promise<T[] | null>;
  nextPageId: string | null;
}

/**
 * Writes a page `{"items":[…],"next_page_id":…}` as it is read (memory stays bounded by bytes): each part goes to uWS
 * once the client took the previous one (onWritable), so a client that reads slowly holds one
 * store read of the daemon's memory and one part in uWS's buffer, not a page. A page that is one
 * read goes out as any other response (with its Content-Length).
 */
export async function streamPage<T>(res: HttpResponse, state: ResState, page: LazyPage<T>, json: (item: T) => string): Promise<void> {
  // the events of one read are serialised and dropped before the next read: a client that does not
  // read holds one part (a string) here and at most one in uWS
  const nextPart = async () => {
    const items = await page.next();
    return items ? items.map(json).join(',') : null;
  };
  const first = await nextPart();
  const second = first !== null ? await nextPart() : null;
  const end = () => `],"next_page_id":${JSON.stringify(page.nextPageId)}}`;
  if (second === null) return send(res, state, 200, `{"items":[${first ?? ''}${end()}`);
  if (state.aborted) return;
  res.cork(() => res.writeStatus(STATUS_TEXT[200]!).writeHeader('content-type', 'application/json'));
  try {
    if (!(await write(res, state, `{"items":[${first}`)) || !(await write(res, state, `,${second}`))) return;
    for (let part = await nextPart(); part !== null; part = await nextPart()) {
      if (!(await write(res, state, `,${part}`))) return;
    }
    if (state.aborted) return;
    res.cork(() => res.end(end()));
    state.aborted = true;
    state.metric?.end(200, state.t0!);
  } catch {
    // the status is sent: a failed read can only cut the response short
    if (!state.aborted) {
      state.aborted = true;
      res.close();
    }
  }
}

/** Bytes made as they are sent (src/conversation/trajectory.ts's ByteStream). */
interface LazyBytes {
  name: string;
  contentType: string;
  chunks(): AsyncIterable<Uint8Array>;
}

/**
 * Sends bytes of unknown length as they are made (chunked): the next chunk is made while one goes
 * out, and asked for again only once the client took it (`write`), so a slow client holds two chunks
 * of the daemon's memory, as a file download does (bridge/file-transfer.ts, which knows its length
 * and uses tryEnd). A failure before the first chunk is thrown (the caller answers it); after, the
 * response is cut short.
 */
export async function streamBytes(res: HttpResponse, state: ResState, out: LazyBytes): Promise<void> {
  const it = out.chunks()[Symbol.asyncIterator]();
  let r = await it.next();
  if (state.aborted) return void (await it.return?.());
  res.cork(() =>
    res
      .writeStatus(STATUS_TEXT[200]!)
      .writeHeader('content-type', out.contentType)
      .writeHeader('content-disposition', `attachment; filename="${out.name.replace(/[^\w.-]/g, '_')}"`),
  );
  try {
    while (!r.done) {
      const following = it.next();
      // (a chunk made for a client that went away is dropped quietly)
      following.catch(() => {});
      if (!(await write(res, state, r.value))) {
        await following.catch(() => {});
        return void (await it.return?.());
      }
      r = await following;
    }
    if (state.aborted) return;
    res.cork(() => res.end());
    state.aborted = true;
    state.metric?.end(200, state.t0!);
  } catch {
    // the status is sent: a failure can only cut the response short
    if (!state.aborted) {
      state.aborted = true;
      res.close();
    }
  }
}

/** Writes a chunk; when uWS had to keep it, waits until the socket is writable again. False: the client went away. */
export function write(res: HttpResponse, state: ResState, chunk: string | Uint8Array): Promise<boolean> {
  if (state.aborted) return Promise.resolve(false);
  let ok = false;
  res.cork(() => (ok = res.write(chunk)));
  if (ok) return Promise.resolve(true);
  return new Promise((resolve) => {
    state.onAbort = () => resolve(false);
    res.onWritable(() => {
      // the next part is written outside uWS's callback, as for the WebSocket's drain (bridge/ws.ts)
      setImmediate(() => resolve(!state.aborted));
      return true;
    });
  });
}
