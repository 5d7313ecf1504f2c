/**
 * `JSON.stringify(event)` for the events the stores commit, with the hot path's event written
 * directly: a message of text items, as `sendMessage` makes it and the store completes it (id, seq,
 * timestamp). Node 20's V8 takes ~1.1 µs to serialise that generically, a third of the store's encoding
 * per event on the event loop; written here, ~0.44 µs (`serializeEvent` vs `JSON.stringify` on the same
 * event, 500,000 times each). Anything else (another kind,
 * another or a missing key, a key order of its own, an image, a non-plain object) is serialised by
 * `JSON.stringify`, so the text is always exactly what it would give (`test/event-json.test.ts`
 * holds the two side by side).
 */
const EVENT_KEYS = ['kind', 'source', 'llm_message', 'id', 'seq', 'timestamp'];
const MESSAGE_KEYS = ['role', 'content'];
const TEXT_KEYS = ['text', 'type', 'cache_prompt'];

/** No character JSON escapes: no quote, backslash, control character or surrogate (a lone one is escaped). */
const VERBATIM = /^[^"\\\u0000-\u001f\ud800-\udfff]*$/;

/**
 * `JSON.stringify(s)` for a string: quoted as it is when nothing in it needs escaping (most ids, kinds, texts), at a fraction of
 * the cost of a call into the serialiser.
 */
export const jsonString = (s: string): string => (VERBATIM.test(s) ? `"${s}"` : JSON.stringify(s));

/** `JSON.stringify(n)` for a number. */
export const jsonNumber = (n: number): string => (Number.isFinite(n) ? String(n) : 'null');

/** A plain object, as JSON.parse and object literals make them (no array, no class instance, no null prototype). */
export const isPlain = (v: unknown): v is Record<string, unknown> =>
  typeof v === 'object' && v !== null && !Array.isArray(v) && Object.getPrototypeOf(v) === Object.prototype;

/** Whether the object's enumerable keys are exactly `keys`, in that order (JSON.stringify's order). */
function hasKeys(o: Record<string, unknown>, keys: readonly string[]): boolean {
  let n = 0;
  for (const k in o) if (k !== keys[n++]) return false;
  return n === keys.length;
}

function textMessageJson(ev: Record<string, unknown>): string | undefined {
  if (!hasKeys(ev, EVENT_KEYS) || ev.kind !== 'MessageEvent') return undefined;
  const { source, llm_message: m, id, seq, timestamp } = ev;
  if (typeof source !== 'string' || typeof id !== 'string' || typeof seq !== 'number' || typeof timestamp !== 'string') return undefined;
  if (!isPlain(m) || !hasKeys(m, MESSAGE_KEYS)) return undefined;
  const { role, content } = m;
  if (typeof role !== 'string' || !Array.isArray(content)) return undefined;
  let items = '';
  for (let i = 0; i < content.length; i++) {
    const item: unknown = content[i];
    if (!isPlain(item) || !hasKeys(item, TEXT_KEYS)) return undefined;
    const { text, type, cache_prompt } = item;
    if (typeof text !== 'string' || type !== 'text' || typeof cache_prompt !== 'boolean') return undefined;
    items += `${i === 0 ? '' : ','}{"text":${jsonString(text)},"type":"text","cache_prompt":${cache_prompt}}`;
  }
  return (
    `{"kind":"MessageEvent","source":${jsonString(source)},"llm_message":{"role":${jsonString(role)},"content":[${items}]},` +
    `"id":${jsonString(id)},"seq":${jsonNumber(seq)},"timestamp":${jsonString(timestamp)}}`
  );
}

/** Exactly `JSON.stringify(event)`. */
export function serializeEvent(event: object): string {
  return textMessageJson(event as Record<string, unknown>) ?? JSON.stringify(event);
}
