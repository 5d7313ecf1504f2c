/**
 * The embedded store: SQLite (WAL) in DATA_DIR. The only module that touches the database.
 * Appends made in one event-loop turn are grouped into one transaction, written by the writer
 * thread (`writer.ts`) so commits do not block the event loop; `seq` is assigned here, per
 * conversation, gap-free, and an append resolves (and is published) only after its transaction
 * has committed. Reads run on this thread's connection, over `events` and the staging `inbox`,
 * inside one read transaction so a concurrent move between the two is never seen half-done.
 */
import path from 'node:path';
import { Worker } from 'node:worker_threads';
import Database from 'better-sqlite3';
import { pack, unpack } from 'msgpackr';
import { uuidv7 } from '../events/ids.js';
import { nowIso, type EventDraft, type ParleyEvent } from '../events/types.js';
import type { ConversationRecord, EventQuery, SealedValue, Store } from './types.js';
import type { Row, WriterReply, WriterRequest } from './writer.js';

interface Pending {
  conversationId: string;
  drafts: EventDraft[];
  resolve: (evs: ParleyEvent[]) => void;
  reject: (err: unknown) => void;
}

type WithoutN<T> = T extends unknown ? Omit<T, 'n'> : never;

export type CommitListener = (conversationId: string, events: ParleyEvent[]) => void;

export class SqliteStore implements Store {
  private db: Database.Database;
  private lastSeqCache = new Map<string, number>();
  private pending: Pending[] = [];
  private flushScheduled = false;
  private stmts;
  private writer: Worker;
  private requestNo = 0;
  private waiting = new Map<number, { resolve: () => void; reject: (err: Error) => void }>();
  private closed = false;
  /** Set when the writer thread died: every later write fails at once instead of waiting. */
  private writerError: Error | null = null;

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
      CREATE TABLE IF NOT EXISTS inbox (
        rowid INTEGER PRIMARY KEY,
        conversation_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        id TEXT NOT NULL,
        kind TEXT NOT NULL,
        timestamp TEXT NOT NULL,
        source TEXT NOT NULL,
        body BLOB NOT NULL
      );
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
      maxSeq: this.db.prepare('SELECT MAX(seq) FROM events WHERE conversation_id = ?').pluck(),
      maxSeqInbox: this.db.prepare('SELECT MAX(seq) FROM inbox WHERE conversation_id = ?').pluck(),
      getEvent: this.db.prepare('SELECT body FROM events WHERE id = ? AND conversation_id = ?').pluck(),
      getEventInbox: this.db.prepare('SELECT body FROM inbox WHERE id = ? AND conversation_id = ?').pluck(),
      getConv: this.db.prepare('SELECT * FROM conversations WHERE id = ?'),
      insertConv: this.db.prepare(
        'INSERT INTO conversations (id, title, created_at, updated_at, execution_status, data) VALUES (@id, @title, @created_at, @updated_at, @execution_status, @data)',
      ),
      deleteConv: this.db.prepare('DELETE FROM conversations WHERE id = ?'),
      putSecret: this.db.prepare(
        'INSERT INTO secrets (kind, name, sealed, meta) VALUES (?, ?, ?, ?) ON CONFLICT (kind, name) DO UPDATE SET sealed = excluded.sealed, meta = excluded.meta',
      ),
      getSecret: this.db.prepare('SELECT * FROM secrets WHERE kind = ? AND name = ?'),
      listSecrets: this.db.prepare('SELECT * FROM secrets WHERE kind = ? ORDER BY name'),
      deleteSecret: this.db.prepare('DELETE FROM secrets WHERE kind = ? AND name = ?'),
      deleteSecretsOfKind: this.db.prepare('DELETE FROM secrets WHERE kind = ?'),
    };
    this.writer = new Worker(new URL('./worker-boot.mjs', import.meta.url), {
      workerData: { entry: new URL('./writer.ts', import.meta.url).href, file: path.join(dataDir, 'parley.db'), synchronous: opts.synchronous ?? 'NORMAL' },
    });
    this.writer.on('message', (r: WriterReply) => {
      const w = this.waiting.get(r.n);
      if (!w) return;
      this.waiting.delete(r.n);
      if (r.error) w.reject(new Error(`event log write failed: ${r.error}`));
      else w.resolve();
    });
    const fail = (err: Error) => {
      this.writerError ??= err;
      for (const w of this.waiting.values()) w.reject(err);
      this.waiting.clear();
    };
    this.writer.on('error', fail);
    this.writer.on('exit', (code) => {
      if (!this.closed) fail(new Error(`event log writer stopped (exit ${code})`));
    });
    this.writer.unref();
  }

  /** Sends a request to the writer; resolves when its transaction has committed. */
  private ask(req: WithoutN<WriterRequest>): Promise<void> {
    if (this.writerError) return Promise.reject(this.writerError);
    const n = ++this.requestNo;
    return new Promise<void>((resolve, reject) => {
      this.waiting.set(n, { resolve, reject });
      this.writer.ref();
      this.writer.postMessage({ ...req, n } as WriterRequest);
    }).finally(() => {
      if (this.waiting.size === 0) this.writer.unref();
    });
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
      s = Math.max((this.stmts.maxSeq.get(conversationId) as number | null) ?? 0, (this.stmts.maxSeqInbox.get(conversationId) as number | null) ?? 0);
      this.lastSeqCache.set(conversationId, s);
    }
    return s;
  }

  /** Hands every pending append to the writer as one transaction; resolves and publishes in seq order after the commit. */
  private flush(): void {
    this.flushScheduled = false;
    const batch = this.pending;
    this.pending = [];
    if (batch.length === 0) return;
    const results: ParleyEvent[][] = [];
    const rows: Row[] = [];
    const touched = new Map<string, string>();
    const seqBefore = new Map<string, number>();
    for (const p of batch) {
      let seq = this.seqOf(p.conversationId);
      if (!seqBefore.has(p.conversationId)) seqBefore.set(p.conversationId, seq);
      const out: ParleyEvent[] = [];
      for (const d of p.drafts) {
        seq += 1;
        const ev = { ...d, id: d.id ?? uuidv7(), seq, timestamp: d.timestamp ?? nowIso() } as ParleyEvent;
        rows.push([p.conversationId, seq, ev.id, ev.kind, ev.timestamp, ev.source, pack(ev)]);
        out.push(ev);
        touched.set(p.conversationId, ev.timestamp);
      }
      this.lastSeqCache.set(p.conversationId, seq);
      results.push(out);
    }
    this.ask({ type: 'append', rows, touched: [...touched] }).then(
      () => {
        batch.forEach((p, i) => {
          this.onCommit(p.conversationId, results[i]!);
          p.resolve(results[i]!);
        });
      },
      (err) => {
        // nothing of this batch was committed: re-read the counters before the next append
        for (const id of seqBefore.keys()) this.lastSeqCache.delete(id);
        for (const p of batch) p.reject(err);
      },
    );
  }

  /** Runs `fn` in one read transaction (a consistent snapshot of events + inbox). */
  private read<T>(fn: () => T): T {
    return this.db.transaction(fn).deferred();
  }

  async query(conversationId: string, q: EventQuery): Promise<ParleyEvent[]> {
    const where = ['conversation_id = ?'];
    const args: unknown[] = [conversationId];
    if (q.afterSeq != null) (where.push('seq > ?'), args.push(q.afterSeq));
    if (q.beforeSeq != null) (where.push('seq < ?'), args.push(q.beforeSeq));
    if (q.kind) (where.push('kind = ?'), args.push(q.kind));
    if (q.source) (where.push('source = ?'), args.push(q.source));
    if (q.sinceTimestamp) (where.push('timestamp >= ?'), args.push(q.sinceTimestamp));
    const order = q.desc ? 'DESC' : 'ASC';
    const sql = (table: string) => `SELECT seq, body FROM ${table} WHERE ${where.join(' AND ')} ORDER BY seq ${order} LIMIT ?`;
    const rows = this.read(() => [
      ...(this.db.prepare(sql('events')).all(...args, q.limit) as { seq: number; body: Buffer }[]),
      ...(this.db.prepare(sql('inbox')).all(...args, q.limit) as { seq: number; body: Buffer }[]),
    ]);
    rows.sort((a, b) => (q.desc ? b.seq - a.seq : a.seq - b.seq));
    return rows.slice(0, q.limit).map((r) => unpack(r.body) as ParleyEvent);
  }

  async count(conversationId: string, q: Omit<EventQuery, 'limit' | 'desc'>): Promise<number> {
    const where = ['conversation_id = ?'];
    const args: unknown[] = [conversationId];
    if (q.afterSeq != null) (where.push('seq > ?'), args.push(q.afterSeq));
    if (q.kind) (where.push('kind = ?'), args.push(q.kind));
    if (q.source) (where.push('source = ?'), args.push(q.source));
    const sql = (table: string) => `SELECT COUNT(*) FROM ${table} WHERE ${where.join(' AND ')}`;
    return this.read(
      () => (this.db.prepare(sql('events')).pluck().get(...args) as number) + (this.db.prepare(sql('inbox')).pluck().get(...args) as number),
    );
  }

  async get(conversationId: string, eventId: string): Promise<ParleyEvent | null> {
    const b = this.read(
      () => (this.stmts.getEvent.get(eventId, conversationId) ?? this.stmts.getEventInbox.get(eventId, conversationId)) as Buffer | undefined,
    );
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
    const changed = this.stmts.deleteConv.run(id).changes;
    // ordered after every append made so far, including those still waiting for their flush
    if (this.pending.length) this.flush();
    await this.ask({ type: 'delete', conversationId: id });
    this.lastSeqCache.delete(id);
    return changed > 0;
  }

  async conversationsWithUnfinishedSetup(): Promise<string[]> {
    return this.db
      .prepare(
        "SELECT id FROM conversations WHERE execution_status <> 'error' AND json_extract(data, '$.setup.phase') IS NOT NULL AND json_extract(data, '$.setup.phase') NOT IN ('ready', 'error')",
      )
      .pluck()
      .all() as string[];
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

  /** Flushes pending appends, lets the writer move and checkpoint, then closes both connections. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.pending.length) this.flush();
    await this.ask({ type: 'close' });
    await this.writer.terminate();
    this.db.close();
  }
}
