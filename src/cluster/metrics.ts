/** Gauges of the PostgreSQL store: read from the database every few seconds (a scrape reads the last values). */
import { metrics } from '../metrics.js';
import type { PostgresStore } from '../store/postgres.js';

export function pgStoreMetrics(store: PostgresStore, everyMs = 5000): (() => void)[] {
  let counts: [string, number][] = [];
  const refresh = () =>
    store.countByStatus().then(
      (c) => (counts = c),
      () => {},
    );
  void refresh();
  const timer = setInterval(refresh, everyMs);
  timer.unref();
  return [metrics.conversations.read(() => counts.map(([s, n]) => [[s], n])), () => clearInterval(timer)];
}
