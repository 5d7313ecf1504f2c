/** /trpc/*: the core router served to in-house callers through tRPC's fetch adapter over uWS. */
import { fetchRequestHandler } from '@trpc/server/adapters/fetch';
import type { Logger } from 'pino';
import { appRouter } from '../src/api/router.js';
import type { Context } from '../src/api/trpc.js';
import type { HttpRequest, HttpResponse } from './uws.js';
import { readText, STATUS_TEXT, write, type ResState } from './http.js';

export async function handleTrpc(
  res: HttpResponse,
  req: HttpRequest,
  state: ResState,
  ctx: Context,
  maxBody: number,
  log: Logger,
): Promise<void> {
  const method = req.getMethod().toUpperCase();
  const url = `http://localhost${req.getUrl()}${req.getQuery() ? `?${req.getQuery()}` : ''}`;
  const headers = new Headers();
  req.forEach((k, v) => headers.append(k, v));
  const controller = new AbortController();
  res.onAborted(() => {
    state.aborted = true;
    controller.abort();
    state.onAbort?.();
  });
  const body = method === 'GET' || method === 'HEAD' ? undefined : await readText(res, maxBody);
  const request = new Request(url, { method, headers, body, signal: controller.signal });
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
