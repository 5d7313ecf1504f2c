/**
 * The embedded store's database file: its settings (WAL), its tables, the statements the store
 * runs on its own connection, and what its errors mean. The writer thread (writer.ts) opens the
 * same file with a connection of its own.
 */
import Database from 'better-sqlite3';

/** Opens (and creates, the first time) the database with the store's settings and tables. */
export function openDatabase(file: string, synchronous: 'NORMAL' | 'FULL'): Database.Database {
  const db = new Database(file);
  db.pragma('journal_mode = WAL');
  db.pragma('wal_autocheckpoint = 10000');
  db.pragma(`synchronous = ${synchronous}`);
  db.pragma('busy_timeout = 5000');
  db.exec(`
    CREATE TABLE IF NOT EXISTS conversations (
      id TEXT PRIMARY KEY,
      title TEXT,
      created_at TEXT NOT NULL,
      updated_at TEXT NOT NULL,
      execution_status TEXT NOT NULL,
      data TEXT NOT NULL
    );
    CREATE INDEX IF NOT EXISTS conversations_created ON conversations (created_at DESC, id DESC);
    CREATE INDEX IF NOT EXISTS conversations_status ON conversations (execution_status);
    CREATE TABLE IF NOT EXISTS events (
      conversation_id TEXT NOT NULL,
      seq INTEGER NOT NULL,
      id TEXT NOT NULL,
      kind TEXT NOT NULL,
      timestamp TEXT NOT NULL,
      source TEXT NOT NULL,
      body BLOB NOT NULL,
      PRIMARY KEY (conversation_id, seq)
    ) WITHOUT ROWID;
    DROP INDEX IF EXISTS events_id;
    CREATE UNIQUE INDEX IF NOT EXISTS events_by_id ON events (id);
    CREATE TABLE IF NOT EXISTS journal_state (
      k INTEGER PRIMARY KEY CHECK (k = 0),
      gen INTEGER NOT NULL,
      offset INTEGER NOT NULL
    );
    CREATE TABLE IF NOT EXISTS secrets (
      kind TEXT NOT NULL,
      name TEXT NOT NULL,
      sealed TEXT,
      meta TEXT NOT NULL,
      PRIMARY KEY (kind, name)
    ) WITHOUT ROWID;
  `);
  return db;
}

type StatementName =
  | 'maxSeq'
  | 'getEvent'
  | 'getConv'
  | 'insertConv'
  | 'deleteConv'
  | 'setStatus'
  | 'countByStatus'
  | 'putSecret'
  | 'getSecret'
  | 'listSecrets'
  | 'deleteSecret'
  | 'deleteSecretsOfKind';

/** The statements the store runs often, prepared once (typed by name: the package's declarations must name the type). */
export function prepareStatements(db: Database.Database): Record<StatementName, Database.Statement> {
  return {
    maxSeq: db.prepare('SELECT MAX(seq) FROM events WHERE conversation_id = ?').pluck(),
    getEvent: db.prepare('SELECT body FROM events WHERE id = ? AND conversation_id = ?').pluck(),
    getConv: db.prepare('SELECT * FROM conversations WHERE id = ?'),
    insertConv: db.prepare(
      'INSERT INTO conversations (id, title, created_at, updated_at, execution_status, data) ' +
        'VALUES (@id, @title, @created_at, @updated_at, @execution_status, @data)',
    ),
    deleteConv: db.prepare('DELETE FROM conversations WHERE id = ?'),
    // (stored after a patch of the record perhaps: updated_at does not go back)
    setStatus: db.prepare('UPDATE conversations SET execution_status = ?, updated_at = MAX(updated_at, ?) WHERE id = ?'),
    countByStatus: db.prepare('SELECT execution_status AS s, COUNT(*) AS n FROM conversations GROUP BY execution_status'),
    putSecret: db.prepare(
      'INSERT INTO secrets (kind, name, sealed, meta) VALUES (?, ?, ?, ?) ' +
        'ON CONFLICT (kind, name) DO UPDATE SET sealed = excluded.sealed, meta = excluded.meta',
    ),
    getSecret: db.prepare('SELECT * FROM secrets WHERE kind = ? AND name = ?'),
    listSecrets: db.prepare('SELECT * FROM secrets WHERE kind = ? ORDER BY name'),
    deleteSecret: db.prepare('DELETE FROM secrets WHERE kind = ? AND name = ?'),
    deleteSecretsOfKind: db.prepare('DELETE FROM secrets WHERE kind = ?'),
  };
}

/** SQLite result codes that mean "cannot write now" (disk, I/O, a lock), as opposed to a statement that is wrong. */
const UNAVAILABLE = /^SQLITE_(FULL|IOERR|BUSY|LOCKED|CANTOPEN|READONLY)/;
export const cannotWrite = (err: unknown) => UNAVAILABLE.test(String((err as { code?: unknown })?.code ?? ''));
