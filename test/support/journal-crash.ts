/**
 * A process that commits events through the store and then dies by SIGKILL before the writer
 * thread indexes them (the index waits a minute): what is left is the journal alone.
 *   node --import tsx test/support/journal-crash.ts DATA_DIR COUNT (the tests run it built: helper-programs.ts)
 * Prints one JSON line with the committed events ({conversation, seq, id}) before it dies.
 */
import { SqliteStore } from '../../src/store/sqlite.js';

const [dir, count] = [process.argv[2]!, Number(process.argv[3] ?? 100)];
const store = new SqliteStore(dir, { indexDelayMs: 60_000 });
const convs = ['11111111-1111-4111-8111-111111111111', '22222222-2222-4222-8222-222222222222'];
const events = await Promise.all(
  Array.from({ length: count }, (_, i) =>
    store.append(convs[i % 2]!, {
      kind: 'MessageEvent',
      source: 'user',
      llm_message: { role: 'user', content: [{ type: 'text', text: `m${i}\ttab\nnewline` }] },
    }),
  ),
);
process.stdout.write(
  `${JSON.stringify({ unindexed: store.unindexed, events: events.map((e, i) => ({ conversation: convs[i % 2], seq: e.seq, id: e.id })) })}\n`,
  () => process.kill(process.pid, 'SIGKILL'),
);
