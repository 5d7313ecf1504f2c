/**
 * A process that commits a status event and dies by SIGKILL as if it had crashed between the
 * journal write and the status update: the stored status is put back to what it was before it
 * dies (the index waits a minute, so the journal alone has the event).
 *   node --import tsx test/support/status-crash.ts DATA_DIR CONVERSATION_ID (the tests run it built: helper-programs.ts)
 */
import path from 'node:path';
import Database from 'better-sqlite3';
import { SqliteStore } from '../../src/store/sqlite.js';

const [dir, id] = [process.argv[2]!, process.argv[3]!];
const store = new SqliteStore(dir, { indexDelayMs: 60_000 });
await store.createConversation({ id, title: null, created_at: 'a', updated_at: 'a', execution_status: 'idle', data: {} });
await store.append(id, { kind: 'ConversationStateUpdateEvent', source: 'environment', key: 'execution_status', value: 'running' });
const raw = new Database(path.join(dir, 'parley.db'));
raw.pragma('busy_timeout = 5000');
raw.prepare("UPDATE conversations SET execution_status = 'idle' WHERE id = ?").run(id);
raw.close();
process.stdout.write('committed\n', () => process.kill(process.pid, 'SIGKILL'));
