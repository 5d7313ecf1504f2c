/**
 * The daemon's REST API as the page calls it: same origin, JSON, the session key as the
 * `X-Session-API-Key` header. The key is kept in sessionStorage: for this tab only, gone when it
 * closes. The start-up link carries it in the URL's fragment (`/#key=…`: never sent to a server,
 * so never in an access log or a Referer); `takeKeyFromUrl` moves it to the tab's storage and
 * replaces the history entry at once, so it stays neither in the address bar nor in history.
 */
import type { ConversationInfo } from '../../src/conversation/conversations.js';
import type { ParleyEvent } from '../../src/events/schema.js';

export type { ConversationInfo, ParleyEvent };
export type ExecutionStatus = ConversationInfo['execution_status'];

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

/** The human text of an error body: `{detail: "…"}`, or the 422 list (`loc: msg` per field). */
function describe(status: number, body: unknown, text: string): string {
  const detail = (body as { detail?: unknown } | null)?.detail;
  if (typeof detail === 'string') return detail;
  if (Array.isArray(detail)) {
    return detail
      .map(
        (d: { loc?: unknown[]; msg?: string }) => `${(d.loc ?? []).filter((l) => l !== 'body' && l !== 'query').join('.') || 'request'}: ${d.msg ?? 'invalid'}`,
      )
      .join('; ');
  }
  return text.slice(0, 300) || `HTTP ${status}`;
}

function headers(json: boolean, key = sessionKey()): Record<string, string> {
  const h: Record<string, string> = {};
  if (key) h['x-session-api-key'] = key;
  if (json) h['content-type'] = 'application/json';
  return h;
}

export async function api<T>(method: string, path: string, body?: unknown): Promise<T> {
  let res: Response;
  try {
    res = await fetch(path, { method, headers: headers(body !== undefined), body: body === undefined ? undefined : JSON.stringify(body) });
  } catch {
    throw new ApiError(0, 'The daemon cannot be reached');
  }
  const text = await res.text();
  let parsed: unknown = null;
  try {
    parsed = text ? JSON.parse(text) : null;
  } catch {
    /* not JSON */
  }
  if (res.status === 401) {
    onUnauthorized();
    throw new ApiError(401, 'The daemon refused the session key');
  }
  if (!res.ok) throw new ApiError(res.status, describe(res.status, parsed, text));
  return parsed as T;
}

/** What a key (or no key) gets: 'ok', 'refused' (401), or the error when the daemon cannot tell. */
export async function checkKey(key: string | null): Promise<'ok' | 'refused'> {
  let res: Response;
  try {
    res = await fetch('/api/conversations?limit=1', { headers: headers(false, key) });
  } catch {
    throw new ApiError(0, 'The daemon cannot be reached');
  }
  if (res.status === 401) return 'refused';
  if (!res.ok) throw new ApiError(res.status, `The daemon answered ${res.status}`);
  return 'ok';
}

/** A workspace file's bytes, saved by the browser under its name (a link cannot carry the key header). */
export async function downloadFile(conversationId: string, path: string): Promise<void> {
  const res = await fetch(`/api/file/download?${new URLSearchParams({ path, conversation_id: conversationId })}`, { headers: headers(false) });
  if (res.status === 401) onUnauthorized();
  if (!res.ok) {
    const text = await res.text();
    let parsed: unknown = null;
    try {
      parsed = JSON.parse(text);
    } catch {
      /* not JSON */
    }
    throw new ApiError(res.status, describe(res.status, parsed, text));
  }
  const url = URL.createObjectURL(await res.blob());
  const a = document.createElement('a');
  a.href = url;
  a.download = path.split('/').pop() || 'download';
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}

export interface ConversationPage {
  items: ConversationInfo[];
  next_page_id: string | null;
}
export interface GitChange {
  path: string;
  status: 'ADDED' | 'UPDATED' | 'DELETED' | 'MOVED';
}
export interface McpStatus {
  servers: { name: string; transport: string; state: string; reason?: string; tools: string[] }[];
}
export interface LlmSettings {
  llm_model: string | null;
  llm_base_url: string | null;
  llm_api_key_set: boolean;
}

export const conversationPath = (id: string) => `/api/conversations/${encodeURIComponent(id)}`;
