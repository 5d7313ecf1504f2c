/**
 * The embedded store: SQLite (WAL) in DATA_DIR. The only module that touches the database handle.
 * Appends made in one event-loop turn are grouped into one transaction; `seq` is assigned per
 * conversation, gap-free, and an append resolves only after its transaction has committed.
 */
import path from 'node:path';
import Database from 'better-sqlite3';
import { pack, unpack } from 'msgpackr';
import { uuidv7 } from '../events/ids.js';
import { nowIso, type EventDraft, type ParleyEvent } from '../events/types.js';
import type { ConversationRecord, EventQuery, SealedValue, Store } from './types.js';

interface Pending {
  conversationId: string;
  drafts: EventDraft[];
  resolve: (evs: ParleyEvent[]) => void;
  reject: (err: unknown) => void;
}

export type CommitListener = (conversationId: string, events: ParleyEvent[]) => void;

export class SqliteStore implements Store {
  private db: Database.Database;
  private lastSeqCache = new Map<string, number>();
  private pending: Pending[] = [];
  private flushScheduled = false;
  private stmts;

  constructor(
    dataDir: string,
    private readonly onCommit: CommitListener = () => {},
    opts: { synchronous?: 'NORMAL' | 'FULL' } = {},
  ) {
    this.db = new Database(path.join(dataDir, 'parley.db'));
    this.db.pragma('journal_mode = WAL');
    this.db.pragma('wal_autocheckpoint = 10000');
    this.db.pragma(`synchronous = ${opts.synchronous ?? 'NORMAL'}`);
    this.db.pragma('busy_timeout = 5000');
    this.db.exec(`
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
      CREATE TABLE IF NOT EXISTS secrets (
        kind TEXT NOT NULL,
        name TEXT NOT NULL,
        sealed TEXT,
        meta TEXT NOT NULL,
        PRIMARY KEY (kind, name)
      ) WITHOUT ROWID;
    `);
    this.stmts = {
      insertEvent: this.db.prepare(
        'INSERT INTO events (conversation_id, seq, id, kind, timestamp, source, body) VALUES (?, ?, ?, ?, ?, ?, ?)',
      ),
      touch: this.db.prepare('UPDATE conversations SET updated_at = ? WHERE id = ?'),
      maxSeq: this.db.prepare('SELECT MAX(seq) AS m FROM events WHERE conversation_id = ?').pluck(),
      getEvent: this.db.prepare('SELECT body FROM events WHERE id = ? AND conversation_id = ?').pluck(),
      getConv: this.db.prepare('SELECT * FROM conversations WHERE id = ?'),
      insertConv: this.db.prepare(
        'INSERT INTO conversations (id, title, created_at, updated_at, execution_status, data) VALUES (@id, @title, @created_at, @updated_at, @execution_status, @data)',
      ),
      deleteConv: this.db.prepare('DELETE FROM conversations WHERE id = ?'),
      deleteEvents: this.db.prepare('DELETE FROM events WHERE conversation_id = ?'),
      putSecret: this.db.prepare(
        'INSERT INTO secrets (kind, name, sealed, meta) VALUES (?, ?, ?, ?) ON CONFLICT (kind, name) DO UPDATE SET sealed = excluded.sealed, meta = excluded.meta',
      ),
      getSecret: this.db.prepare('SELECT * FROM secrets WHERE kind = ? AND name = ?'),
      listSecrets: this.db.prepare('SELECT * FROM secrets WHERE kind = ? ORDER BY name'),
      deleteSecret: this.db.prepare('DELETE FROM secrets WHERE kind = ? AND name = ?'),
      deleteSecretsOfKind: this.db.prepare('DELETE FROM secrets WHERE kind = ?'),
    };
  }

  // ---- events -------------------------------------------------------------------------------

  append(conversationId: string, draft: EventDraft): Promise<ParleyEvent> {
    return this.appendMany(conversationId, [draft]).then((evs) => evs[0]!);
  }

  appendMany(conversationId: string, drafts: EventDraft[]): Promise<ParleyEvent[]> {
    return new Promise((resolve, reject) => {
      this.pending.push({ conversationId, drafts, resolve, reject });
      if (!this.flushScheduled) {
        this.flushScheduled = true;
        setImmediate(() => this.flush());
      }
    });
  }

  private seqOf(conversationId: string): number {
    let s = this.lastSeqCache.get(conversationId);
    if (s === undefined) {
      s = (this.stmts.maxSeq.get(conversationId) as number | null) ?? 0;
      this.lastSeqCache.set(conversationId, s);
    }
    return s;
  }

  /** Writes every pending append in one transaction, then resolves and publishes in seq order. */
  private flush(): void {
    this.flushScheduled = false;
    const batch = this.pending;
    this.pending = [];
    if (batch.length === 0) return;
    const results: ParleyEvent[][] = [];
    const seqBefore = new Map<string, number>();
    try {
      this.db.transaction(() => {
        const touched = new Map<string, string>();
        for (const p of batch) {
          if (!seqBefore.has(p.conversationId)) seqBefore.set(p.conversationId, this.seqOf(p.conversationId));
          let seq = this.seqOf(p.conversationId);
          const out: ParleyEvent[] = [];
          for (const d of p.drafts) {
            seq += 1;
            const ev = { ...d, id: d.id ?? uuidv7(), seq, timestamp: d.timestamp ?? nowIso() } as ParleyEvent;
            this.stmts.insertEvent.run(p.conversationId, seq, ev.id, ev.kind, ev.timestamp, ev.source, pack(ev));
            out.push(ev);
            touched.set(p.conversationId, ev.timestamp);
          }
          this.lastSeqCache.set(p.conversationId, seq);
          results.push(out);
        }
        for (const [id, ts] of touched) this.stmts.touch.run(ts, id);
      })();
    } catch (err) {
      for (const [id, s] of seqBefore) this.lastSeqCache.set(id, s);
      for (const p of batch) p.reject(err);
      return;
    }
    batch.forEach((p, i) => {
      this.onCommit(p.conversationId, results[i]!);
      p.resolve(results[i]!);
    });
  }

  async query(conversationId: string, q: EventQuery): Promise<ParleyEvent[]> {
    const where = ['conversation_id = ?'];
    const args: unknown[] = [conversationId];
    if (q.afterSeq != null) (where.push('seq > ?'), args.push(q.afterSeq));
    if (q.beforeSeq != null) (where.push('seq < ?'), args.push(q.beforeSeq));
    if (q.kind) (where.push('kind = ?'), args.push(q.kind));
    if (q.source) (where.push('source = ?'), args.push(q.source));
    if (q.sinceTimestamp) (where.push('timestamp >= ?'), args.push(q.sinceTimestamp));
    args.push(q.limit);
    const rows = this.db
      .prepare(`SELECT body FROM events WHERE ${where.join(' AND ')} ORDER BY seq ${q.desc ? 'DESC' : 'ASC'} LIMIT ?`)
      .pluck()
      .all(...args) as Buffer[];
    return rows.map((b) => unpack(b) as ParleyEvent);
  }

  async count(conversationId: string, q: Omit<EventQuery, 'limit' | 'desc'>): Promise<number> {
    const where = ['conversation_id = ?'];
    const args: unknown[] = [conversationId];
    if (q.afterSeq != null) (where.push('seq > ?'), args.push(q.afterSeq));
    if (q.kind) (where.push('kind = ?'), args.push(q.kind));
    if (q.source) (where.push('source = ?'), args.push(q.source));
    return this.db.prepare(`SELECT COUNT(*) FROM events WHERE ${where.join(' AND ')}`).pluck().get(...args) as number;
  }

  async get(conversationId: string, eventId: string): Promise<ParleyEvent | null> {
    const b = this.stmts.getEvent.get(eventId, conversationId) as Buffer | undefined;
    return b ? (unpack(b) as ParleyEvent) : null;
  }

  async lastSeq(conversationId: string): Promise<number> {
    return this.seqOf(conversationId);
  }

  // ---- conversations ------------------------------------------------------------------------

  private static rowToConv(r: Record<string, unknown>): ConversationRecord {
    return {
      id: r.id as string,
      title: (r.title as string | null) ?? null,
      created_at: r.created_at as string,
      updated_at: r.updated_at as string,
      execution_status: r.execution_status as string,
      data: JSON.parse(r.data as string),
    };
  }

  async createConversation(rec: ConversationRecord): Promise<void> {
    this.stmts.insertConv.run({ ...rec, data: JSON.stringify(rec.data) });
  }

  async getConversation(id: string): Promise<ConversationRecord | null> {
    const r = this.stmts.getConv.get(id) as Record<string, unknown> | undefined;
    return r ? SqliteStore.rowToConv(r) : null;
  }

  async listConversations(limit: number, cursor?: { created_at: string; id: string } | null): Promise<ConversationRecord[]> {
    const rows = cursor
      ? this.db
          .prepare(
            'SELECT * FROM conversations WHERE (created_at < ?) OR (created_at = ? AND id <= ?) ORDER BY created_at DESC, id DESC LIMIT ?',
          )
          .all(cursor.created_at, cursor.created_at, cursor.id, limit)
      : this.db.prepare('SELECT * FROM conversations ORDER BY created_at DESC, id DESC LIMIT ?').all(limit);
    return (rows as Record<string, unknown>[]).map(SqliteStore.rowToConv);
  }

  async updateConversation(id: string, patch: Partial<Omit<ConversationRecord, 'id' | 'created_at'>>): Promise<void> {
    const sets: string[] = [];
    const args: unknown[] = [];
    for (const [k, v] of Object.entries(patch)) {
      if (!['title', 'updated_at', 'execution_status', 'data'].includes(k)) continue;
      sets.push(`${k} = ?`);
      args.push(k === 'data' ? JSON.stringify(v) : v);
    }
    if (!('updated_at' in patch)) (sets.push('updated_at = ?'), args.push(nowIso()));
    this.db.prepare(`UPDATE conversations SET ${sets.join(', ')} WHERE id = ?`).run(...args, id);
  }

  async deleteConversation(id: string): Promise<boolean> {
    const changed = this.db.transaction(() => {
      this.stmts.deleteEvents.run(id);
      return this.stmts.deleteConv.run(id).changes;
    })();
    this.lastSeqCache.delete(id);
    return changed > 0;
  }

  async conversationsWithStatus(statuses: string[]): Promise<ConversationRecord[]> {
    if (statuses.length === 0) return [];
    const rows = this.db
      .prepare(`SELECT * FROM conversations WHERE execution_status IN (${statuses.map(() => '?').join(',')})`)
      .all(...statuses);
    return (rows as Record<string, unknown>[]).map(SqliteStore.rowToConv);
  }

  // ---- secrets ------------------------------------------------------------------------------

  private static rowToSecret(r: Record<string, unknown>): SealedValue {
    return { kind: r.kind as string, name: r.name as string, sealed: (r.sealed as string | null) ?? null, meta: JSON.parse(r.meta as string) };
  }

  async putSecret(v: SealedValue): Promise<void> {
    this.stmts.putSecret.run(v.kind, v.name, v.sealed, JSON.stringify(v.meta));
  }
  async getSecret(kind: string, name: string): Promise<SealedValue | null> {
    const r = this.stmts.getSecret.get(kind, name) as Record<string, unknown> | undefined;
    return r ? SqliteStore.rowToSecret(r) : null;
  }
  async listSecrets(kind: string): Promise<SealedValue[]> {
    return (this.stmts.listSecrets.all(kind) as Record<string, unknown>[]).map(SqliteStore.rowToSecret);
  }
  async deleteSecret(kind: string, name: string): Promise<boolean> {
    return this.stmts.deleteSecret.run(kind, name).changes > 0;
  }
  async replaceSecrets(kind: string, values: SealedValue[]): Promise<void> {
    this.db.transaction(() => {
      this.stmts.deleteSecretsOfKind.run(kind);
      for (const v of values) this.stmts.putSecret.run(kind, v.name, v.sealed, JSON.stringify(v.meta));
    })();
  }

  close(): void {
    if (this.pending.length) this.flush();
    this.db.close();
  }
}
