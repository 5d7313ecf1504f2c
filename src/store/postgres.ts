/**
 * The cluster store: PostgreSQL, shared by every node (cluster mode, DATABASE_URL).
 *
 * `seq` comes from one counter row per conversation (`event_counters`), bumped in the same
 * statement that inserts the events: the row lock orders concurrent appends from every node, a
 * failed statement takes no number, so seq is gap-free and every committed seq has all smaller
 * ones committed before it (a reader that sees seq n can read 1..n).
 *
 * Group commit: appends queued while a statement is in flight go together in the next one (one
 * round trip, one transaction, any number of conversations). Each node resolves and publishes
 * its appends in commit order, hence in seq order per conversation.
 *
 * PostgreSQL unreachable: every call fails with UnavailableError (503) naming the reason; the
 * pool reconnects by itself on a later call. An append that failed was not acknowledged; one
 * whose connection broke during COMMIT may still have committed (it is then read, never lost).
 *
 * The database server's disk full: a statement that needs room fails with SQLSTATE
 * 53100 `disk_full` ("could not extend file …: No space left on device") and nothing of it is
 * committed; a WAL write that fails makes the server restart (a PANIC: connections end with 57P01
 * or 08006, then connects are refused until it is back). Class 53 and the connection classes are
 * 503 with the reason; nothing is kept failed here, so the first statement after space returns
 * succeeds. The text of 53100 names a file on the server: the 503 says "disk full" instead.
 *
 * Why one file of this size: it is the one module that speaks SQL to the cluster store; its statements,
 * the group commit that batches them and the error classes that turn into 503 share the pool and must
 * change together.
 */
import pg from 'pg';
import { ConflictError, UnavailableError } from '../errors.js';
import { uuidv7 } from '../events/ids.js';
import { EncodedEvent, type EventDraft, type ParleyEvent } from '../events/types.js';
import { isoTime } from '../iso-time.js';
import { metrics } from '../metrics.js';
import {
  conversationFromRow,
  executionStatusOf,
  type ConversationPatch,
  type ConversationRecord,
  type EventQuery,
  type SealedValue,
  type Store,
  CommitListeners,
  type CommitListener,
} from './types.js';

interface PostgresStoreOptions {
  /** Connections in the pool (default 10). */
  poolSize?: number;
  /** How long a call waits for a connection before answering 503 (default 5 s). */
  connectTimeoutMs?: number;
  /** A statement that has not answered after this long fails with 503 (default 30 s). */
  queryTimeoutMs?: number;
}

/** Versioned schema; each step runs once, in its own transaction, under an advisory lock. */
const MIGRATIONS: { version: number; sql: string }[] = [
  {
    version: 1,
    sql: `
      CREATE TABLE conversations (
        id TEXT PRIMARY KEY,
        title TEXT,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        execution_status TEXT NOT NULL,
        data JSONB NOT NULL
      );
      CREATE INDEX conversations_created ON conversations (created_at DESC, id DESC);
      CREATE INDEX conversations_status ON conversations (execution_status);
      CREATE TABLE event_counters (
        conversation_id TEXT PRIMARY KEY,
        last_seq BIGINT NOT NULL
      );
      CREATE TABLE events (
        conversation_id TEXT NOT NULL,
        seq BIGINT NOT NULL,
        id TEXT NOT NULL UNIQUE,
        kind TEXT NOT NULL,
        timestamp TEXT NOT NULL,
        source TEXT NOT NULL,
        body TEXT NOT NULL,
        PRIMARY KEY (conversation_id, seq)
      );
      CREATE TABLE secrets (
        kind TEXT NOT NULL,
        name TEXT NOT NULL,
        sealed TEXT,
        meta JSONB NOT NULL,
        PRIMARY KEY (kind, name)
      );`,
  },
  {
    // cluster mode: the node running a conversation's agent loop (src/cluster/leases.ts)
    version: 2,
    sql: `
      CREATE TABLE leases (
        conversation_id TEXT PRIMARY KEY,
        node_id TEXT NOT NULL,
        expires_at TIMESTAMPTZ NOT NULL
      );
      CREATE INDEX leases_node ON leases (node_id);`,
  },
];

/** Any constant: the key of the advisory lock that serialises migrations across nodes. */
const MIGRATION_LOCK = 0x7061726c; // 'parl'

/**
 * One statement: drop the fenced rows whose node no longer holds the conversation's lease, count
 * the batch per conversation, bump each counter (in conversation order, so two nodes' batches
 * cannot deadlock), number the events from the old value, insert them, and set the stored
 * execution_status of each conversation to the last status event of the batch (same
 * transaction: the stored status never runs ahead of, or behind, the log). The status update is
 * not referenced, so it runs after the insert, once the batch holds its counter rows.
 */
const APPEND_SQL = `
  WITH input AS (
    SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[])
      WITH ORDINALITY AS t(conversation_id, id, kind, ts, source, body, status, fence, ord)
    WHERE t.fence IS NULL OR EXISTS (SELECT 1 FROM leases l WHERE l.conversation_id = t.conversation_id AND l.node_id = t.fence)
  ),
  counts AS (
    SELECT conversation_id, count(*)::bigint AS n FROM input GROUP BY conversation_id ORDER BY conversation_id
  ),
  bumped AS (
    INSERT INTO event_counters AS c (conversation_id, last_seq)
    SELECT conversation_id, n FROM counts
    ON CONFLICT (conversation_id) DO UPDATE SET last_seq = c.last_seq + excluded.last_seq
    RETURNING conversation_id, last_seq
  ),
  statuses AS (
    UPDATE conversations c SET execution_status = s.status, updated_at = s.ts
    FROM (SELECT DISTINCT ON (conversation_id) conversation_id, status, ts FROM input WHERE status IS NOT NULL ORDER BY conversation_id, ord DESC) s
    WHERE c.id = s.conversation_id
  )
  INSERT INTO events (conversation_id, seq, id, kind, timestamp, source, body)
  SELECT i.conversation_id, b.last_seq - n.n + row_number() OVER (PARTITION BY i.conversation_id ORDER BY i.ord), i.id, i.kind, i.ts, i.source, i.body
  FROM input i JOIN bumped b USING (conversation_id) JOIN counts n USING (conversation_id)
  RETURNING id, seq`;

/**
 * A fenced append was refused: the node that made it no longer holds the conversation's lease
 * (another node took the conversation over while this one was stalled or cut off).
 */
export class LeaseLostError extends ConflictError {
  override name = 'LeaseLostError';
  constructor(
    readonly conversationId: string,
    readonly nodeId: string,
  ) {
    super(`this node (${nodeId}) no longer holds the lease of conversation ${conversationId}: another node took it over`);
  }
}

interface Pending {
  conversationId: string;
  drafts: EventDraft[];
  /** The node whose lease on the conversation the append needs (null: none). */
  fence: string | null;
  resolve: (evs: ParleyEvent[]) => void;
  reject: (err: unknown) => void;
}

const appendLatency = metrics.storeAppend.child();

/** Errors that mean "PostgreSQL cannot be reached or is going away", as opposed to a bad statement. */
function isConnectionError(err: unknown): boolean {
  const e = err as { code?: string; message?: string };
  if (typeof e?.code === 'string' && /^(08|57P|53)/.test(e.code)) return true; // connection exception, operator intervention, insufficient resources
  if (typeof e?.code === 'string' && /^E[A-Z]+$/.test(e.code)) return true; // ECONNREFUSED, ECONNRESET, ETIMEDOUT...
  return /timeout|terminat|Connection|connect|ended/i.test(e?.message ?? '');
}

/** Class 53 (insufficient resources), told without the server's file names. */
const RESOURCE_ERRORS: Record<string, string> = {
  '53100': 'the database server has no disk space left (SQLSTATE 53100 disk_full)',
  '53200': 'the database server is out of memory (SQLSTATE 53200 out_of_memory)',
  '53300': 'the database server has no connection free (SQLSTATE 53300 too_many_connections)',
};

function unavailable(err: unknown): Error {
  if (err instanceof UnavailableError) return err;
  if (!isConnectionError(err)) return err as Error;
  const e = err as { code?: string; message?: string };
  const resource = e.code ? RESOURCE_ERRORS[e.code] : undefined;
  return new UnavailableError(`PostgreSQL unavailable: ${resource ?? (e.message || e.code || String(err))}`);
}

/** JSONB comes back parsed. */
const rowToConv = (r: Record<string, unknown>) => conversationFromRow(r, r.data);

/** The WHERE clause and its parameters ($1...) of an event query. */
function eventFilter(conversationId: string, q: Omit<EventQuery, 'limit' | 'desc'>): { where: string[]; args: unknown[] } {
  const where = ['conversation_id = $1'];
  const args: unknown[] = [conversationId];
  const add = (clause: string, v: unknown) => (args.push(v), where.push(clause.replace('?', `$${args.length}`)));
  if (q.afterSeq != null) add('seq > ?', q.afterSeq);
  if (q.beforeSeq != null) add('seq < ?', q.beforeSeq);
  if (q.kind) add('kind = ?', q.kind);
  if (q.source) add('source = ?', q.source);
  if (q.sinceTimestamp) add('timestamp >= ?', q.sinceTimestamp);
  return { where, args };
}

function rowToSecret(r: Record<string, unknown>): SealedValue {
  return { kind: r.kind as string, name: r.name as string, sealed: (r.sealed as string | null) ?? null, meta: r.meta as Record<string, unknown> };
}

/** A stored body is the event without its seq (the column holds it). */
function rowToEvent(r: { body: string; seq: string | number }): ParleyEvent {
  const ev = JSON.parse(r.body) as ParleyEvent;
  ev.seq = Number(r.seq);
  return ev;
}

export class PostgresStore implements Store {
  private pending: Pending[] = [];
  private inFlight: Promise<void> | null = null;
  private closed = false;
  private fence: (conversationId: string, drafts: EventDraft[]) => string | null = () => null;
  private onLeaseLost: (err: LeaseLostError) => void = () => {};

  private readonly commits = new CommitListeners();

  private constructor(readonly pool: pg.Pool) {}

  onCommit(listener: CommitListener): void {
    this.commits.add(listener);
  }

  /** Connects, runs the migrations this database lacks, and returns the store. Fails (UnavailableError) when PostgreSQL cannot be reached. */
  static async open(url: string, opts: PostgresStoreOptions = {}): Promise<PostgresStore> {
    const pool = new pg.Pool({
      connectionString: url,
      max: opts.poolSize ?? 10,
      connectionTimeoutMillis: opts.connectTimeoutMs ?? 5000,
      query_timeout: opts.queryTimeoutMs ?? 30_000,
      idleTimeoutMillis: 30_000,
      keepAlive: true,
    });
    // an idle connection that breaks is dropped from the pool; the next call opens a new one
    pool.on('error', () => {});
    try {
      await migrate(pool);
    } catch (err) {
      await pool.end().catch(() => {});
      throw unavailable(err);
    }
    return new PostgresStore(pool);
  }

  /**
   * Cluster mode: `fence` names, per append, the node whose lease the append needs (the agent loop
   * running on this node: a node that lost the lease while it was stalled must not write as the
   * owner). Such an append commits only while that node holds the lease; otherwise it fails with
   * LeaseLostError, reported to `onLost` too.
   */
  fenceWith(fence: (conversationId: string, drafts: EventDraft[]) => string | null, onLost: (err: LeaseLostError) => void): void {
    this.fence = fence;
    this.onLeaseLost = onLost;
  }

  private async q<R extends pg.QueryResultRow = Record<string, unknown>>(text: string, values?: unknown[]): Promise<pg.QueryResult<R>> {
    try {
      return await this.pool.query<R>(text, values);
    } catch (err) {
      throw unavailable(err);
    }
  }

  /** Runs `fn` in one transaction on one connection. */
  private async tx<T>(fn: (c: pg.PoolClient) => Promise<T>): Promise<T> {
    let client: pg.PoolClient;
    try {
      client = await this.pool.connect();
    } catch (err) {
      throw unavailable(err);
    }
    let broken: unknown;
    try {
      await client.query('BEGIN');
      const out = await fn(client);
      await client.query('COMMIT');
      return out;
    } catch (err) {
      broken = isConnectionError(err) ? err : undefined;
      await client.query('ROLLBACK').catch(() => {});
      throw unavailable(err);
    } finally {
      client.release(broken as Error | undefined);
    }
  }

  // ---- events -------------------------------------------------------------------------------

  append(conversationId: string, draft: EventDraft): Promise<ParleyEvent> {
    return this.appendMany(conversationId, [draft]).then((evs) => evs[0]!);
  }

  appendMany(conversationId: string, drafts: EventDraft[]): Promise<ParleyEvent[]> {
    if (this.closed) return Promise.reject(new UnavailableError('the store is closed'));
    if (drafts.length === 0) return Promise.resolve([]);
    return new Promise((resolve, reject) => {
      this.pending.push({ conversationId, drafts, fence: this.fence(conversationId, drafts), resolve, reject });
      if (!this.inFlight) this.inFlight = this.drain();
    });
  }

  /** Commits queued appends, one statement at a time, until none is left. */
  private async drain(): Promise<void> {
    // let every append of this event-loop turn join the first statement
    await new Promise((r) => setImmediate(r));
    while (this.pending.length) {
      const batch = this.pending;
      this.pending = [];
      const started = performance.now();
      let done: { p: Pending; events: ParleyEvent[] }[] = [];
      try {
        done = await this.commit(batch);
      } catch (err) {
        if (batch.length > 1 && !isConnectionError(err)) {
          // one bad append (e.g. a duplicate event id) must not fail the others: the statement
          // committed nothing, so each goes again on its own
          for (const p of batch) {
            try {
              done.push(...(await this.commit([p])));
            } catch (e) {
              p.reject(unavailable(e));
            }
          }
        } else {
          const e = unavailable(err);
          for (const p of batch) p.reject(e);
        }
      }
      appendLatency.observe((performance.now() - started) / 1000);
      this.published(done);
    }
    this.inFlight = null;
  }

  /** Publishes committed appends and resolves them, in commit order. */
  private published(done: { p: Pending; events: ParleyEvent[] }[]): void {
    for (const { p, events } of done) {
      this.commits.emit(
        p.conversationId,
        events.map((e) => new EncodedEvent(e)),
      );
      p.resolve(events);
    }
  }

  /** One statement for the whole batch (on `on`: the pool, or a transaction's connection): the events with their seq, in the batch's order. */
  private async commit(batch: Pending[], on: pg.Pool | pg.PoolClient = this.pool): Promise<{ p: Pending; events: ParleyEvent[] }[]> {
    const cols: (string | null)[][] = [[], [], [], [], [], [], [], []];
    const out: { p: Pending; events: ParleyEvent[] }[] = [];
    const byId = new Map<string, ParleyEvent>();
    const now = isoTime();
    for (const p of batch) {
      const events: ParleyEvent[] = [];
      for (const d of p.drafts) {
        // Object.assign, not a spread (see sqlite.ts); the body is stored without seq
        const ev = Object.assign({}, d) as ParleyEvent;
        ev.id = d.id ?? uuidv7();
        ev.timestamp = d.timestamp ?? now;
        cols[0]!.push(p.conversationId);
        cols[1]!.push(ev.id);
        cols[2]!.push(ev.kind);
        cols[3]!.push(ev.timestamp);
        cols[4]!.push(ev.source);
        cols[5]!.push(JSON.stringify(ev));
        cols[6]!.push(executionStatusOf(ev));
        cols[7]!.push(p.fence);
        byId.set(ev.id, ev);
        events.push(ev);
      }
      out.push({ p, events });
    }
    const res = await on.query<{ id: string; seq: string }>(APPEND_SQL, cols);
    for (const r of res.rows) byId.get(r.id)!.seq = Number(r.seq);
    // a fenced append whose node lost the lease took no number: it fails alone
    const committed: typeof out = [];
    for (const o of out) {
      if (o.events.every((e) => e.seq !== undefined)) committed.push(o);
      else {
        const err = new LeaseLostError(o.p.conversationId, o.p.fence ?? '');
        o.p.reject(err);
        try {
          this.onLeaseLost(err);
        } catch {
          // the listener's failure is its own
        }
      }
    }
    return committed;
  }

  /** Resolves when every append queued before the call has been committed (or failed). */
  private async settled(): Promise<void> {
    while (this.inFlight) await this.inFlight;
  }

  async query(conversationId: string, q: EventQuery): Promise<ParleyEvent[]> {
    const { where, args } = eventFilter(conversationId, q);
    args.push(q.limit);
    const order = `ORDER BY seq ${q.desc ? 'DESC' : 'ASC'}`;
    let sql = `SELECT seq, body FROM events WHERE ${where.join(' AND ')} ${order} LIMIT $${args.length}`;
    if (q.maxBytes !== undefined) {
      // memory bound (EventQuery.maxBytes): keep rows up to the one at which the running size reaches maxBytes
      args.push(q.maxBytes);
      sql =
        `SELECT seq, body FROM (SELECT seq, body, sum(octet_length(body)) OVER (${order}) - octet_length(body) AS before ` +
        `FROM (${sql}) page) sized WHERE before < $${args.length} ${order}`;
    }
    const res = await this.q<{ body: string; seq: string }>(sql, args);
    return res.rows.map(rowToEvent);
  }

  async count(conversationId: string, q: Omit<EventQuery, 'limit' | 'desc'>): Promise<number> {
    const { where, args } = eventFilter(conversationId, q);
    const res = await this.q<{ n: string }>(`SELECT count(*) AS n FROM events WHERE ${where.join(' AND ')}`, args);
    return Number(res.rows[0]!.n);
  }

  async get(conversationId: string, eventId: string): Promise<ParleyEvent | null> {
    const res = await this.q<{ body: string; seq: string }>('SELECT seq, body FROM events WHERE id = $1 AND conversation_id = $2', [eventId, conversationId]);
    return res.rows[0] ? rowToEvent(res.rows[0]) : null;
  }

  async lastSeq(conversationId: string): Promise<number> {
    const res = await this.q<{ last_seq: string }>('SELECT last_seq FROM event_counters WHERE conversation_id = $1', [conversationId]);
    return res.rows[0] ? Number(res.rows[0].last_seq) : 0;
  }

  /** The last seq of each of `ids` (0 for one without events), in one round trip. */
  async lastSeqs(ids: string[]): Promise<Map<string, number>> {
    const out = new Map(ids.map((id) => [id, 0]));
    if (ids.length === 0) return out;
    const res = await this.q<{ conversation_id: string; last_seq: string }>(
      'SELECT conversation_id, last_seq FROM event_counters WHERE conversation_id = ANY($1::text[])',
      [ids],
    );
    for (const r of res.rows) out.set(r.conversation_id, Number(r.last_seq));
    return out;
  }

  // ---- conversations ------------------------------------------------------------------------

  /** The record and its first events in one transaction. */
  async createConversation(rec: ConversationRecord, first: EventDraft[] = []): Promise<ParleyEvent[]> {
    const insert = 'INSERT INTO conversations (id, title, created_at, updated_at, execution_status, data) VALUES ($1, $2, $3, $4, $5, $6)';
    const values = [rec.id, rec.title, rec.created_at, rec.updated_at, rec.execution_status, JSON.stringify(rec.data)];
    if (first.length === 0) {
      await this.q(insert, values);
      return [];
    }
    if (this.closed) throw new UnavailableError('the store is closed');
    let events: ParleyEvent[] = [];
    const p: Pending = { conversationId: rec.id, drafts: first, fence: null, resolve: (evs) => (events = evs), reject: () => {} };
    const done = await this.tx(async (c) => {
      await c.query(insert, values);
      return this.commit([p], c);
    });
    this.published(done);
    return events;
  }

  async getConversation(id: string): Promise<ConversationRecord | null> {
    const res = await this.q('SELECT * FROM conversations WHERE id = $1', [id]);
    return res.rows[0] ? rowToConv(res.rows[0]) : null;
  }

  async listConversations(limit: number, cursor?: { created_at: string; id: string } | null): Promise<ConversationRecord[]> {
    const res = cursor
      ? await this.q('SELECT * FROM conversations WHERE (created_at < $1) OR (created_at = $1 AND id <= $2) ORDER BY created_at DESC, id DESC LIMIT $3', [
          cursor.created_at,
          cursor.id,
          limit,
        ])
      : await this.q('SELECT * FROM conversations ORDER BY created_at DESC, id DESC LIMIT $1', [limit]);
    return res.rows.map(rowToConv);
  }

  async updateConversation(id: string, patch: ConversationPatch): Promise<void> {
    const sets: string[] = [];
    const args: unknown[] = [];
    for (const [k, v] of Object.entries(patch)) {
      if (!['title', 'updated_at', 'data'].includes(k)) continue;
      args.push(k === 'data' ? JSON.stringify(v) : v);
      sets.push(`${k} = $${args.length}`);
    }
    if (!('updated_at' in patch)) args.push(isoTime()), sets.push(`updated_at = $${args.length}`);
    args.push(id);
    await this.q(`UPDATE conversations SET ${sets.join(', ')} WHERE id = $${args.length}`, args);
  }

  async deleteConversation(id: string): Promise<boolean> {
    // ordered after every append this node queued so far
    await this.settled();
    return this.tx(async (c) => {
      // the counter row first: a concurrent append (any node) waits on it, then starts again at 1;
      // an append locks the counter before the conversation row (its status), so must this
      await c.query('DELETE FROM event_counters WHERE conversation_id = $1', [id]);
      const res = await c.query('DELETE FROM conversations WHERE id = $1', [id]);
      await c.query('DELETE FROM events WHERE conversation_id = $1', [id]);
      await c.query('DELETE FROM leases WHERE conversation_id = $1', [id]);
      return (res.rowCount ?? 0) > 0;
    });
  }

  async conversationsWithUnfinishedSetup(): Promise<string[]> {
    const res = await this.q<{ id: string }>(
      "SELECT id FROM conversations WHERE execution_status <> 'error' " +
        "AND data->'setup'->>'phase' IS NOT NULL AND data->'setup'->>'phase' NOT IN ('ready', 'error')",
    );
    return res.rows.map((r) => r.id);
  }

  async conversationsWithStatus(statuses: string[]): Promise<ConversationRecord[]> {
    if (statuses.length === 0) return [];
    const res = await this.q('SELECT * FROM conversations WHERE execution_status = ANY($1::text[])', [statuses]);
    return res.rows.map(rowToConv);
  }

  /** Conversations per execution status. */
  async countByStatus(): Promise<[string, number][]> {
    const res = await this.q<{ s: string; n: string }>('SELECT execution_status AS s, count(*) AS n FROM conversations GROUP BY execution_status');
    return res.rows.map((r) => [r.s, Number(r.n)]);
  }

  // ---- secrets ------------------------------------------------------------------------------

  private static readonly PUT_SECRET =
    'INSERT INTO secrets (kind, name, sealed, meta) VALUES ($1, $2, $3, $4) ' +
    'ON CONFLICT (kind, name) DO UPDATE SET sealed = excluded.sealed, meta = excluded.meta';

  async putSecret(v: SealedValue): Promise<void> {
    await this.q(PostgresStore.PUT_SECRET, [v.kind, v.name, v.sealed, JSON.stringify(v.meta)]);
  }
  async getSecret(kind: string, name: string): Promise<SealedValue | null> {
    const res = await this.q('SELECT * FROM secrets WHERE kind = $1 AND name = $2', [kind, name]);
    return res.rows[0] ? rowToSecret(res.rows[0]) : null;
  }
  async listSecrets(kind: string): Promise<SealedValue[]> {
    return (await this.q('SELECT * FROM secrets WHERE kind = $1 ORDER BY name', [kind])).rows.map(rowToSecret);
  }
  async deleteSecret(kind: string, name: string): Promise<boolean> {
    return ((await this.q('DELETE FROM secrets WHERE kind = $1 AND name = $2', [kind, name])).rowCount ?? 0) > 0;
  }
  async replaceSecrets(kind: string, values: SealedValue[]): Promise<void> {
    await this.tx(async (c) => {
      await c.query('DELETE FROM secrets WHERE kind = $1', [kind]);
      for (const v of values) await c.query(PostgresStore.PUT_SECRET, [kind, v.name, v.sealed, JSON.stringify(v.meta)]);
    });
  }

  /** Commits what is queued, then closes the pool. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.settled();
    await this.pool.end();
  }
}

/** Applies the migrations the database lacks; an advisory lock makes nodes starting together take turns. */
async function migrate(pool: pg.Pool): Promise<void> {
  const client = await pool.connect();
  try {
    await client.query('SELECT pg_advisory_lock($1)', [MIGRATION_LOCK]);
    try {
      await client.query('CREATE TABLE IF NOT EXISTS schema_migrations (version INT PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())');
      const done = new Set((await client.query<{ version: number }>('SELECT version FROM schema_migrations')).rows.map((r) => r.version));
      for (const m of MIGRATIONS) {
        if (done.has(m.version)) continue;
        await client.query('BEGIN');
        try {
          await client.query(m.sql);
          await client.query('INSERT INTO schema_migrations (version) VALUES ($1)', [m.version]);
          await client.query('COMMIT');
        } catch (err) {
          await client.query('ROLLBACK').catch(() => {});
          throw err;
        }
      }
    } finally {
      await client.query('SELECT pg_advisory_unlock($1)', [MIGRATION_LOCK]).catch(() => {});
    }
  } finally {
    client.release();
  }
}
