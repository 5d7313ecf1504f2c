/**
 * Appends 10 events one by one to a store in DATA_DIR with the given SQLITE_SYNCHRONOUS mode,
 * then closes it; `test/journal.test.ts` runs this under strace to see which syncs reach the disk.
 *   node --import tsx test/support/journal-sync.ts DATA_DIR NORMAL|FULL (the tests run it built: helper-programs.ts)
 */
import { SqliteStore } from '../../src/store/sqlite.js';

const [dir, mode] = [process.argv[2]!, process.argv[3] as 'NORMAL' | 'FULL'];
const store = new SqliteStore(dir, { synchronous: mode });
for (let i = 0; i < 10; i++) {
  await store.append('11111111-1111-4111-8111-111111111111', {
    kind: 'MessageEvent',
    source: 'user',
    llm_message: { role: 'user', content: [{ type: 'text', text: `e${i}` }] },
  });
}
await store.close();
