/**
 * Which node runs a conversation's agent loop: a lease row in PostgreSQL (`leases`), taken
 * atomically (free, expired, or already this node's), renewed by its holder every third of
 * LEASE_TTL_MS, released when the loop has stopped. A node that dies stops renewing: after
 * LEASE_TTL_MS any node may take the lease, and the takeover applies the crash-recovery rule of
 * one node (src/conversation/conversations.ts `recoverInterrupted`): the conversation gets a
 * ConversationErrorEvent and the status `error`, and can be run again from any node.
 */
import type pg from 'pg';

export class Leases {
  constructor(
    private readonly pool: pg.Pool,
    readonly nodeId: string,
    readonly ttlMs: number,
  ) {}

  /** Takes the lease for this node unless another node holds a live one. True when this node holds it now. */
  async acquire(conversationId: string): Promise<boolean> {
    const res = await this.pool.query(
      `INSERT INTO leases (conversation_id, node_id, expires_at) VALUES ($1, $2, now() + $3 * interval '1 millisecond')
       ON CONFLICT (conversation_id) DO UPDATE SET node_id = excluded.node_id, expires_at = excluded.expires_at
       WHERE leases.node_id = excluded.node_id OR leases.expires_at <= now()
       RETURNING node_id`,
      [conversationId, this.nodeId, this.ttlMs],
    );
    return res.rowCount === 1;
  }

  /** The node holding a live lease on the conversation, or null. */
  async owner(conversationId: string): Promise<string | null> {
    const res = await this.pool.query<{ node_id: string }>('SELECT node_id FROM leases WHERE conversation_id = $1 AND expires_at > now()', [conversationId]);
    return res.rows[0]?.node_id ?? null;
  }

  /** Extends this node's leases on `ids`; returns those it no longer holds (taken over after it failed to renew in time). */
  async renew(ids: string[]): Promise<string[]> {
    if (ids.length === 0) return [];
    const res = await this.pool.query<{ conversation_id: string }>(
      `UPDATE leases SET expires_at = now() + $3 * interval '1 millisecond'
       WHERE node_id = $1 AND conversation_id = ANY($2::text[]) RETURNING conversation_id`,
      [this.nodeId, ids, this.ttlMs],
    );
    const kept = new Set(res.rows.map((r) => r.conversation_id));
    return ids.filter((id) => !kept.has(id));
  }

  async release(conversationId: string): Promise<void> {
    await this.pool.query('DELETE FROM leases WHERE conversation_id = $1 AND node_id = $2', [conversationId, this.nodeId]);
  }

  /** At start: this node runs nothing yet, so leases left under its name (a restart within the TTL) are void. */
  async releaseAll(): Promise<void> {
    await this.pool.query('DELETE FROM leases WHERE node_id = $1', [this.nodeId]);
  }

  /** Conversations shown `running` whose loop no node holds a live lease on: their node died. */
  async orphans(): Promise<string[]> {
    const res = await this.pool.query<{ id: string }>(
      `SELECT c.id FROM conversations c
       WHERE c.execution_status = 'running'
         AND NOT EXISTS (SELECT 1 FROM leases l WHERE l.conversation_id = c.id AND l.expires_at > now())`,
    );
    return res.rows.map((r) => r.id);
  }
}
