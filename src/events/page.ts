/**
 * Pages bounded by bytes as well as by count (issue 12.4): twenty 8 MiB messages made one
 * `events/search?limit=100` a 168 MB response. A page stops once its events reach MAX_PAGE_BYTES
 * (always at least one event) and says where the next one starts.
 */

/** A search page stops once its events' JSON reaches this many bytes. */
export const MAX_PAGE_BYTES = 4 * 1024 * 1024;

/**
 * What to ask the store for (EventQuery.maxBytes) so a page cut at MAX_PAGE_BYTES by the JSON
 * size always finds its next event among the rows read: the store measures stored bodies, which
 * differ from the JSON only by a few fields.
 */
export const STORE_READ_BYTES = 2 * MAX_PAGE_BYTES;

/** The first `limit` items, fewer when they reach `maxBytes`; `next` is the first item left out. */
export function pageByBytes<T>(items: T[], limit: number, maxBytes = MAX_PAGE_BYTES, size: (item: T) => number = (i) => JSON.stringify(i).length) {
  let bytes = 0;
  let n = 0;
  while (n < items.length && n < limit && (n === 0 || bytes < maxBytes)) bytes += size(items[n++]!);
  return { page: items.slice(0, n), next: items[n] ?? null };
}
