/**
 * /trpc/*: the core router served to in-house callers through tRPC's fetch adapter over uWS.
 * The router and the adapter are loaded with the first call: building the router's procedures is
 * not on the way to the daemon's first answer.
 */
import type { Logger } from 'pino';
import type { Context } from '../src/api/trpc.js';
import type { Core } from '../src/core.js';
import type { Door } from './admission.js';
import { BodyTooLarge, readJsonBody, sendJson, STATUS_TEXT, write, type ResState } from './http.js';
import type { InFlight } from './rest.js';
import type { HttpRequest, HttpResponse, TemplatedApp } from './uws.js';

/**
 * The answer to a call refused before the router ran (no key, a body over the limits), shaped as
 * tRPC's own errors (one per call of a batch) so that typed clients read its message.
 */
function trpcRefusal(path: string, query: string, httpStatus: 401 | 413, message: string): unknown {
  const [code, name] = httpStatus === 401 ? [-32001, 'UNAUTHORIZED'] : [-32013, 'PAYLOAD_TOO_LARGE'];
  const error = { error: { message, code, data: { code: name, httpStatus } } };
  const calls = path.slice('/trpc/'.length).split(',').length;
  return /(^|&)batch=1/.test(query) ? Array.from({ length: calls }, () => error) : error;
}

let loaded: Promise<[typeof import('@trpc/server/adapters/fetch'), typeof import('../src/api/router.js')]> | undefined;
/** The router and tRPC's fetch adapter (bridge/main.ts loads them before listening when run from source). */
export const loadTrpc = () => (loaded ??= Promise.all([import('@trpc/server/adapters/fetch'), import('../src/api/router.js')]));

/** /trpc/* behind the door: a refusal of the key or the size is written as tRPC's own error. */
export function mountTrpc(app: TemplatedApp, core: Core, log: Logger, door: Door, inFlight: InFlight, maxQueuedBytes: number): void {
  app.any('/trpc/*', (res, req) => {
    const state = { aborted: false };
    const method = req.getMethod().toUpperCase();
    const admission = door.admit(req, {
      auth: 'required',
      cookie: true,
      stateChanging: method !== 'GET' && method !== 'HEAD',
      body: method === 'POST' ? 'json' : null,
    });
    if (!admission.ok) {
      res.onAborted(() => {});
      const { status, detail } = admission;
      return sendJson(res, state, status, status === 401 || status === 413 ? trpcRefusal(req.getUrl(), req.getQuery() ?? '', status, detail) : { detail });
    }
    inFlight.begin();
    handleTrpc(res, req, state, { core, maxQueuedBytes }, door.maxBodyBytes, log)
      .catch((err) => {
        log.error({ err: core.redactor.redact(String(err)) }, 'trpc transport error');
        if (!state.aborted) {
          try {
            sendJson(res, state, 500, { detail: 'Internal Server Error' });
          } catch {
            /* response already started */
          }
        }
      })
      .finally(() => inFlight.done());
  });
}

async function handleTrpc(res: HttpResponse, req: HttpRequest, state: ResState, ctx: Context, maxBody: number, log: Logger): Promise<void> {
  const method = req.getMethod().toUpperCase();
  const path = req.getUrl();
  const query = req.getQuery() ?? '';
  const declared = Number(req.getHeader('content-length') || 0);
  const url = `http://localhost${path}${query ? `?${query}` : ''}`;
  const headers = new Headers();
  req.forEach((k, v) => headers.append(k, v));
  const controller = new AbortController();
  res.onAborted(() => {
    state.aborted = true;
    controller.abort();
    state.onAbort?.();
  });
  let body: string | undefined;
  try {
    body = method === 'GET' || method === 'HEAD' ? undefined : await readJsonBody(res, maxBody, declared);
  } catch (err) {
    if (err instanceof BodyTooLarge) return sendJson(res, state, 413, trpcRefusal(path, query, 413, err.message));
    throw err;
  }
  const request = new Request(url, { method, headers, body, signal: controller.signal });
  const [{ fetchRequestHandler }, { appRouter }] = await loadTrpc();
  const response = await fetchRequestHandler({
    endpoint: '/trpc',
    req: request,
    router: appRouter,
    createContext: () => ctx,
    onError: ({ error, path }) => {
      if (error.code === 'INTERNAL_SERVER_ERROR') log.error({ path, err: ctx.core.redactor.redact(String(error.cause ?? error)) }, 'trpc error');
    },
  });
  if (state.aborted) return;
  res.cork(() => {
    res.writeStatus(STATUS_TEXT[response.status] ?? String(response.status));
    response.headers.forEach((v, k) => res.writeHeader(k, v));
  });
  if (!response.body) {
    res.cork(() => res.end());
    return;
  }
  const reader = response.body.getReader();
  controller.signal.addEventListener('abort', () => void reader.cancel().catch(() => {}));
  for (;;) {
    const { done, value } = await reader.read().catch(() => ({ done: true as const, value: undefined }));
    if (state.aborted) return;
    if (done) {
      res.cork(() => res.end());
      state.aborted = true;
      return;
    }
    if (!(await write(res, state, value))) return;
  }
}
