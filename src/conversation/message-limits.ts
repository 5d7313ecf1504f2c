/**
 * One content item of a message (a text, an image URL list) may carry at most MAX_EVENT_BYTES
 * (issue 12.4): every page, replay and LLM request carries the event again, so an 8 MiB message
 * costs far more than its body once. Larger items are refused with 413 and the limit in the reason.
 */
import { PayloadTooLargeError } from '../errors.js';

type Item = { type?: string; text?: string; image_urls?: string[] } | null | undefined;

export function itemBytes(item: Item): number {
  if (!item) return 0;
  if (typeof item.text === 'string') return Buffer.byteLength(item.text);
  let n = 0;
  for (const u of item.image_urls ?? []) n += Buffer.byteLength(u);
  return n;
}

/** Throws PayloadTooLargeError when one of `items` is over `maxBytes`. */
export function assertItemsFit(items: Item[], maxBytes: number, where: string): void {
  for (const [i, item] of items.entries()) {
    const n = itemBytes(item);
    if (n > maxBytes) throw new PayloadTooLargeError(`${where}[${i}] has ${n} bytes; one content item may have at most ${maxBytes} (MAX_EVENT_BYTES)`);
  }
}
