/**
 * The embedded store's records, as its own connection reads and writes them: conversations' rows
 * and sealed secrets. A write that finds no room (or no lock, or an I/O error) answers 503 with
 * the reason, and a full disk is reported to the DiskWatch. The conversation's events are the
 * event log's (sqlite.ts): creating a conversation with its first events, and deleting one, go
 * through the store, which uses `writeRow` and `writeError` here.
 */
import type Database from 'better-sqlite3';
import { UnavailableError } from '../errors.js';
import { isoTime } from '../iso-time.js';
import { type DiskWatch, errorText, isDiskFull } from './disk-watch.js';
import { cannotWrite, type prepareStatements } from './sqlite-schema.js';
import { type ConversationPatch, type ConversationRecord, conversationFromRow, type SealedValue } from './types.js';

type Statements = ReturnType<typeof prepareStatements>;

const rowToConv = (r: Record<string, unknown>): ConversationRecord => conversationFromRow(r, JSON.parse(String(r.data)));
const rowToSecret = (r: Record<string, unknown>): SealedValue => ({
  kind: r.kind as string,
  name: r.name as string,
  sealed: (r.sealed as string | null) ?? null,
  meta: JSON.parse(r.meta as string),
});

export class SqliteRecords {
  /** UPDATE statements by the columns they set (a handful of shapes), prepared once: preparing was most of an update's cost. */
  private readonly updates = new Map<string, Database.Statement>();

  constructor(
    private readonly db: Database.Database,
    private readonly stmts: Statements,
    private readonly disk: DiskWatch,
  ) {}

  /** A write on this thread's connection: one that finds no room (or no lock, or an I/O error) answers 503 with the reason. */
  writeRow<T>(what: string, run: () => T): T {
    try {
      return run();
    } catch (err) {
      throw this.writeError(what, err);
    }
  }

  writeError(what: string, err: unknown): Error {
    if (!cannotWrite(err)) return err as Error;
    if (isDiskFull(err)) this.disk.report(what, err);
    return new UnavailableError(`${what} failed: ${errorText(err)}`);
  }

  // ---- conversations ------------------------------------------------------------------------

  getConversation(id: string): ConversationRecord | null {
    const r = this.stmts.getConv.get(id) as Record<string, unknown> | undefined;
    return r ? rowToConv(r) : null;
  }

  listConversations(limit: number, cursor?: { created_at: string; id: string } | null): ConversationRecord[] {
    const rows = cursor
      ? this.db
          .prepare('SELECT * FROM conversations WHERE (created_at < ?) OR (created_at = ? AND id <= ?) ORDER BY created_at DESC, id DESC LIMIT ?')
          .all(cursor.created_at, cursor.created_at, cursor.id, limit)
      : this.db.prepare('SELECT * FROM conversations ORDER BY created_at DESC, id DESC LIMIT ?').all(limit);
    return (rows as Record<string, unknown>[]).map(rowToConv);
  }

  updateConversation(id: string, patch: ConversationPatch): void {
    const sets: string[] = [];
    const args: unknown[] = [];
    for (const [k, v] of Object.entries(patch)) {
      if (!['title', 'updated_at', 'data'].includes(k)) continue;
      sets.push(`${k} = ?`);
      args.push(k === 'data' ? JSON.stringify(v) : v);
    }
    if (!('updated_at' in patch)) sets.push('updated_at = ?'), args.push(isoTime());
    const sql = `UPDATE conversations SET ${sets.join(', ')} WHERE id = ?`;
    this.writeRow('storing the conversation', () => {
      let stmt = this.updates.get(sql);
      if (!stmt) this.updates.set(sql, (stmt = this.db.prepare(sql)));
      return stmt.run(...args, id);
    });
  }

  conversationsWithUnfinishedSetup(): string[] {
    return this.db
      .prepare(
        "SELECT id FROM conversations WHERE execution_status <> 'error' " +
          "AND json_extract(data, '$.setup.phase') IS NOT NULL AND json_extract(data, '$.setup.phase') NOT IN ('ready', 'error')",
      )
      .pluck()
      .all() as string[];
  }

  conversationsWithStatus(statuses: string[]): ConversationRecord[] {
    if (statuses.length === 0) return [];
    const rows = this.db.prepare(`SELECT * FROM conversations WHERE execution_status IN (${statuses.map(() => '?').join(',')})`).all(...statuses);
    return (rows as Record<string, unknown>[]).map(rowToConv);
  }

  /** Conversations per execution status. */
  countByStatus(): [string, number][] {
    return (this.stmts.countByStatus.all() as { s: string; n: number }[]).map((r) => [r.s, r.n]);
  }

  // ---- secrets ------------------------------------------------------------------------------

  putSecret(v: SealedValue): void {
    this.writeRow('storing a secret', () => this.stmts.putSecret.run(v.kind, v.name, v.sealed, JSON.stringify(v.meta)));
  }
  getSecret(kind: string, name: string): SealedValue | null {
    const r = this.stmts.getSecret.get(kind, name) as Record<string, unknown> | undefined;
    return r ? rowToSecret(r) : null;
  }
  listSecrets(kind: string): SealedValue[] {
    return (this.stmts.listSecrets.all(kind) as Record<string, unknown>[]).map(rowToSecret);
  }
  deleteSecret(kind: string, name: string): boolean {
    return this.writeRow('deleting a secret', () => this.stmts.deleteSecret.run(kind, name).changes > 0);
  }
  replaceSecrets(kind: string, values: SealedValue[]): void {
    this.writeRow('storing secrets', () =>
      this.db.transaction(() => {
        this.stmts.deleteSecretsOfKind.run(kind);
        for (const v of values) this.stmts.putSecret.run(kind, v.name, v.sealed, JSON.stringify(v.meta));
      })(),
    );
  }
}
