/**
 * Client data is bounded by MAX_EVENT_BYTES before it is appended: every page, replay
 * and LLM request carries the event again, so an 8 MiB message costs far more than its body once.
 * A message whose content (or one `replay_json` item) is over the bound is refused with 413 and
 * the limit in the reason; what the daemon produces itself is cut instead (src/events/cap.ts).
 */
import { PayloadTooLargeError } from '../errors.js';
import { fitsEvent, jsonBytes } from '../events/cap.js';

type Item = { type?: string; text?: string; image_urls?: string[] } | null | undefined;

/** Room left for an event's own fields (kind, id, seq, timestamp, source, role) around the client's data. */
const EVENT_ENVELOPE_BYTES = 1024;

function itemBytes(item: Item): number {
  if (!item) return 0;
  if (typeof item.text === 'string') return Buffer.byteLength(item.text);
  let n = 0;
  for (const u of item.image_urls ?? []) n += Buffer.byteLength(u);
  return n;
}

/** Throws PayloadTooLargeError when one of `items`, or all of them together, are over what one event may hold. */
export function assertItemsFit(items: Item[], maxBytes: number, where: string): void {
  for (let i = 0; i < items.length; i++) {
    const n = itemBytes(items[i]);
    if (n > maxBytes) throw new PayloadTooLargeError(`${where}[${i}] has ${n} bytes; one content item may have at most ${maxBytes} (MAX_EVENT_BYTES)`);
  }
  assertFitsEvent(items, maxBytes, where);
}

/** Throws PayloadTooLargeError when `value` (client data that becomes one event) cannot fit in MAX_EVENT_BYTES. */
export function assertFitsEvent(value: unknown, maxBytes: number, where: string): void {
  const room = maxBytes - EVENT_ENVELOPE_BYTES;
  if (fitsEvent(value, room)) return;
  throw new PayloadTooLargeError(
    `${where} has ${jsonBytes(value)} bytes of JSON; one event may hold at most ${maxBytes} (MAX_EVENT_BYTES), ` +
      `${EVENT_ENVELOPE_BYTES} of them for the event's own fields`,
  );
}
