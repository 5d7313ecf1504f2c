/**
 * The daemon's API as the page calls it: `parley/client` (src/client.ts), the typed tRPC client,
 * over /trpc on the same origin, its calls and answers typed from the operations themselves. The
 * session key goes as the `X-Session-API-Key` header, read at each call. The key is kept in
 * sessionStorage: for this tab only, gone when it closes. The start-up link carries it in the URL's
 * fragment (`/#key=…`: never sent to a server, so never in an access log or a Referer);
 * `takeKeyFromUrl` moves it to the tab's storage and replaces the history entry at once, so it
 * stays neither in the address bar nor in history.
 */
import { TRPCClientError } from '@trpc/client';
import { createParleyClient, type ParleyEvent, type ParleyOutputs } from '../../src/client.js';

export type { ParleyEvent };
export type ConversationInfo = ParleyOutputs['getConversation'];
export type ConversationPage = ParleyOutputs['listConversations'];
export type ExecutionStatus = ConversationInfo['execution_status'];
export type GitChange = ParleyOutputs['gitChanges'][number];
export type McpStatus = ParleyOutputs['getMcpStatus'];
export type LlmSettings = ParleyOutputs['getSettings'];

const KEY_ITEM = 'parley.session-key';

/** True when the URL carried a key (now in the tab's storage, gone from the URL). */
export function takeKeyFromUrl(): boolean {
  const m = /^#(?:.*&)?key=([^&]*)/.exec(location.hash);
  if (!m) return false;
  history.replaceState(history.state, '', location.pathname + location.search);
  try {
    sessionStorage.setItem(KEY_ITEM, decodeURIComponent(m[1]!));
    return true;
  } catch {
    return false; // a malformed escape: the key is not taken
  }
}

export const sessionKey = (): string | null => sessionStorage.getItem(KEY_ITEM);
export const setSessionKey = (key: string) => sessionStorage.setItem(KEY_ITEM, key);
export const clearSessionKey = () => sessionStorage.removeItem(KEY_ITEM);

/**
 * The typed client. One request per call (no batching): each call is its own entry in the
 * browser's network panel, and a slow one (a page of older events) holds up no other.
 */
export const parley = createParleyClient({ url: location.origin, apiKey: sessionKey, batch: false });

export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

/** Called when the daemon refuses the key (401, or the socket closed with 4001): the app goes back to the sign-in page. */
let onUnauthorized: () => void = () => {};
export const whenUnauthorized = (fn: () => void) => {
  onUnauthorized = fn;
};
export const keyRefused = () => onUnauthorized();

interface ErrorData {
  httpStatus?: number;
  issues?: { loc?: (string | number)[]; msg?: string }[];
}

/** A failed call as the page shows it: the HTTP status, and the human text (`loc: msg` per field of a 422). */
function toApiError(err: unknown): ApiError {
  if (!(err instanceof TRPCClientError)) return new ApiError(0, (err as Error)?.message ?? String(err));
  const data = err.data as ErrorData | undefined;
  // a refusal before tRPC (the browser checks) is `{detail}`, not tRPC's shape: its status and text are in the response
  const meta = err.meta as { response?: Response; responseJSON?: { detail?: unknown } } | undefined;
  const status = data?.httpStatus ?? meta?.response?.status ?? 0;
  if (status === 0) return new ApiError(0, 'The daemon cannot be reached');
  if (data?.issues?.length) return new ApiError(status, data.issues.map((i) => `${(i.loc ?? []).join('.') || 'request'}: ${i.msg ?? 'invalid'}`).join('; '));
  const detail = meta?.responseJSON?.detail;
  return new ApiError(status, typeof detail === 'string' ? detail : err.message || `HTTP ${status}`);
}

/** Awaits a call of the client; a failure becomes an ApiError, and a refused key sends the app back to the sign-in page. */
export async function call<T>(request: Promise<T>): Promise<T> {
  try {
    return await request;
  } catch (err) {
    const e = toApiError(err);
    if (e.status === 401) {
      onUnauthorized();
      throw new ApiError(401, 'The daemon refused the session key');
    }
    throw e;
  }
}

/** What a key (or no key) gets: 'ok', 'refused' (401), or the error when the daemon cannot tell. */
export async function checkKey(key: string | null): Promise<'ok' | 'refused'> {
  try {
    await createParleyClient({ url: location.origin, apiKey: key, batch: false }).listConversations.query({ limit: 1 });
    return 'ok';
  } catch (err) {
    const e = toApiError(err);
    if (e.status === 401) return 'refused';
    throw e.status ? new ApiError(e.status, `The daemon answered ${e.status}`) : e;
  }
}

/** A workspace file's bytes (base64 over tRPC), saved by the browser under its name (a link cannot carry the key header). */
export async function downloadFile(conversationId: string, path: string): Promise<void> {
  const file = await call(parley.downloadFile.query({ conversation_id: conversationId, path }));
  const bytes = Uint8Array.from(atob(file.content_base64), (c) => c.charCodeAt(0));
  const url = URL.createObjectURL(new Blob([bytes]));
  const a = document.createElement('a');
  a.href = url;
  a.download = file.name || path.split('/').pop() || 'download';
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}
