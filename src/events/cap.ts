/**
 * Every appended event is bounded by MAX_EVENT_BYTES, its JSON in UTF-8 bytes: every
 * page, replay, resume and LLM request carries an event again, so one 50 MiB terminal output would
 * cost far more than its size once. Client data beyond the bound is refused before it gets here
 * (413: messages, `replay_json` items); what the daemon produces itself (tool observations,
 * terminal output, a file_editor view, an MCP result, the agent's text) is cut here: the largest
 * strings lose their middle, replaced by a marker naming the bytes removed and the limit.
 */

/** Per string cut: the marker's worst size (its numbers included). */
const MARKER_BYTES = 200;

function truncationMarker(removed: number, maxBytes: number): string {
  return `\n[… ${removed} bytes cut here: an event may hold at most ${maxBytes} bytes (MAX_EVENT_BYTES) …]\n`;
}

/** The UTF-8 size of an event's JSON. */
export function jsonBytes(value: unknown): number {
  return Buffer.byteLength(JSON.stringify(value) ?? '');
}

/**
 * A cheap upper bound of `jsonBytes(value)` without serialising: a UTF-16 unit is at most 6 bytes
 * of JSON (`\u0000`), the structure around a value at most 8, an array's brackets and commas at
 * most 8 plus one per item (`[[],[],…]` is not free). Stops counting past `stopAt`.
 * A plain recursive function (no closure per call): it runs on every appended event.
 */
function upperBound(v: unknown, n: number, stopAt: number): number {
  if (n > stopAt) return n;
  if (typeof v === 'string') return n + v.length * 6 + 8;
  if (Array.isArray(v)) {
    n += 8 + v.length;
    for (let i = 0; i < v.length && n <= stopAt; i++) n = upperBound(v[i], n, stopAt);
    return n;
  }
  if (v && typeof v === 'object') {
    n += 8;
    for (const k in v) {
      n = upperBound((v as Record<string, unknown>)[k], n + k.length * 6 + 8, stopAt);
      if (n > stopAt) return n;
    }
    return n;
  }
  return n + 24;
}

/** Whether `value` may be appended as it is (most events: no serialisation at all). */
export function fitsEvent(value: unknown, maxBytes: number): boolean {
  return upperBound(value, 0, maxBytes) <= maxBytes || jsonBytes(value) <= maxBytes;
}

interface Leaf {
  parent: Record<string, unknown> | unknown[];
  key: string | number;
  bytes: number;
}

function leaves(value: unknown, out: Leaf[]): Leaf[] {
  if (Array.isArray(value)) {
    value.forEach((x, i) => (typeof x === 'string' ? out.push({ parent: value, key: i, bytes: jsonBytes(x) }) : leaves(x, out)));
  } else if (value && typeof value === 'object') {
    const o = value as Record<string, unknown>;
    for (const k of Object.keys(o)) {
      const x = o[k];
      if (typeof x === 'string') out.push({ parent: o, key: k, bytes: jsonBytes(x) });
      else leaves(x, out);
    }
  }
  return out;
}

/** `s` without `removeBytes` (about) from its middle, the marker in their place; a surrogate pair is never split. */
function cutMiddle(s: string, removeBytes: number, bytesPerUnit: number, maxBytes: number): string {
  const keepUnits = Math.max(0, s.length - Math.ceil(removeBytes / bytesPerUnit));
  let head = Math.ceil((keepUnits * 2) / 3);
  let tail = s.length - (keepUnits - head);
  if (head > 0 && /[\ud800-\udbff]/.test(s[head - 1]!)) head -= 1;
  if (tail < s.length && /[\udc00-\udfff]/.test(s[tail]!)) tail += 1;
  const removed = Buffer.byteLength(s.slice(head, tail));
  return s.slice(0, head) + truncationMarker(removed, maxBytes) + s.slice(tail);
}

/**
 * The event as it may be appended: itself when it fits, otherwise a copy whose largest strings
 * were cut (middle out, a marker in their place) until its JSON is at most `maxBytes`.
 */
export function capEvent<T>(draft: T, maxBytes: number): T {
  if (fitsEvent(draft, maxBytes)) return draft;
  // the store keeps the event's JSON: a copy through it is what will be stored (and clones anything)
  const copy = JSON.parse(JSON.stringify(draft)) as T;
  for (let round = 0; round < 4; round++) {
    const total = jsonBytes(copy);
    if (total <= maxBytes) return copy;
    const all = leaves(copy, []).sort((a, b) => b.bytes - a.bytes);
    let excess = total - maxBytes;
    for (const leaf of all) {
      if (excess <= 0) break;
      const s = (leaf.parent as Record<string | number, string>)[leaf.key]!;
      // strings too small to hold the marker are left as they are
      if (leaf.bytes <= 2 * MARKER_BYTES) break;
      const remove = Math.min(leaf.bytes - MARKER_BYTES, excess + MARKER_BYTES + (round ? 1024 << round : 0));
      const cut = cutMiddle(s, remove, Math.max(1, leaf.bytes / Math.max(1, s.length)), maxBytes);
      (leaf.parent as Record<string | number, string>)[leaf.key] = cut;
      excess -= leaf.bytes - jsonBytes(cut);
    }
  }
  // what is left over is structure, not text (e.g. `[[],[],…]` as tool arguments): the longest
  // arrays keep their first half and a marker, until it fits
  for (let total = jsonBytes(copy); total > maxBytes; total = jsonBytes(copy)) {
    const longest = longestArray(copy);
    if (!longest || longest.length < 2) break;
    const before = jsonBytes(longest);
    const dropped = longest.splice(Math.floor(longest.length / 2));
    longest.push(`${truncationMarker(before - jsonBytes(longest), maxBytes)}(${dropped.length} items)`);
  }
  return copy;
}

function longestArray(value: unknown, best: unknown[] | null = null): unknown[] | null {
  if (Array.isArray(value)) {
    if (!best || value.length > best.length) best = value;
    for (const x of value) if (x && typeof x === 'object') best = longestArray(x, best);
  } else if (value && typeof value === 'object') {
    for (const k in value) {
      const x = (value as Record<string, unknown>)[k];
      if (x && typeof x === 'object') best = longestArray(x, best);
    }
  }
  return best;
}
