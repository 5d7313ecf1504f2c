/**
 * The hot path's input, checked without zod when it has the usual shape: a canonical conversation
 * id and a message of text items only. Anything else (an image, an unknown key, a wrong type, an id
 * in another spelling) answers `undefined` and goes through the schema (src/api/schemas.ts), which
 * owns every error and every other shape. What this returns is exactly what `SendMessageInput`
 * would: same values, defaults filled in, keys in the schema's order (the event's JSON is built
 * from it). `test/quick-input.test.ts` holds the two side by side.
 *
 * Why by hand: zod took ~1 µs of the ~40 µs a message costs the daemon on the hot path, this ~0.1.
 */
import { isPlain } from '../events/event-json.js';
import { MESSAGE_ROLES } from '../events/schema.js';
import type { ApiSchemas } from './schemas.js';

type Input = import('zod').output<typeof ApiSchemas.SendMessageInput>;

const CANONICAL_ID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const ROLES: ReadonlySet<unknown> = new Set(MESSAGE_ROLES);

/** Own keys only among `allowed` (JSON.parse never makes inherited or symbol keys). */
function onlyKeys(o: Record<string, unknown>, allowed: readonly string[]): boolean {
  for (const k in o) if (!allowed.includes(k)) return false;
  return true;
}

const INPUT_KEYS = ['conversation_id', 'message'] as const;
const MESSAGE_KEYS = ['role', 'content', 'run'] as const;
const TEXT_KEYS = ['text', 'type', 'cache_prompt'] as const;

export function quickSendMessageInput(raw: unknown): Input | undefined {
  if (!isPlain(raw) || !onlyKeys(raw, INPUT_KEYS)) return undefined;
  const id = raw.conversation_id;
  const m = raw.message;
  if (typeof id !== 'string' || !CANONICAL_ID.test(id) || !isPlain(m) || !onlyKeys(m, MESSAGE_KEYS)) return undefined;
  // a default stands in for a missing key only (undefined), as the schema's do: null is refused there
  const { role = 'user', run = false, content: items = [] } = m;
  if (!ROLES.has(role) || typeof run !== 'boolean') return undefined;
  if (!Array.isArray(items)) return undefined;
  const content: { text: string; type: 'text'; cache_prompt: boolean }[] = [];
  for (const item of items) {
    if (!isPlain(item) || !onlyKeys(item, TEXT_KEYS)) return undefined;
    const { text, type = 'text', cache_prompt = false } = item;
    if (typeof text !== 'string' || type !== 'text' || typeof cache_prompt !== 'boolean') return undefined;
    content.push({ text, type, cache_prompt });
  }
  return { conversation_id: id, message: { role: role as Input['message']['role'], content, run } };
}
