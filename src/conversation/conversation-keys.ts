/**
 * A key per conversation: the `session_api_key` a conversation's answers carry (OpenHands' app gives
 * it to its runtime calls and to the socket). It opens that conversation's routes and nothing else;
 * which routes those are is the door's rule (bridge/admission.ts).
 *
 * The key is derived, not stored: `pk1.<conversation id as 32 hex>.<HMAC-SHA256 of the id>`, the MAC
 * keyed by a key derived from the daemon's secret (SECRET_KEY, else DATA_DIR's key file; HKDF with
 * its own purpose, so it is not the key that seals secrets). Hence:
 * - no storage, and nothing to look up: the key names its conversation, and checking it is one HMAC
 *   and a constant-time comparison (no scan, no store read, no await);
 * - every node of a cluster (one SECRET_KEY) accepts the keys of every other;
 * - a key lives as long as its conversation id: deleting the conversation leaves its routes answering
 *   404; a conversation later created again with the same id (`conversation_id` at create, which
 *   only a holder of the daemon's key can send) gets the same key. A leaked key is revoked only by
 *   deleting its conversation (or changing SECRET_KEY, which also makes the sealed secrets unreadable).
 *
 * A key is never logged: no log line carries a request's headers or query, and the keys are
 * computed where an answer needs them.
 */
import crypto from 'node:crypto';

const PREFIX = 'pk1.';
/** `pk1.` + 32 hex + `.` + 43 base64url characters (32 bytes). */
const SHAPE = /^pk1\.([0-9a-f]{32})\.([A-Za-z0-9_-]{43})$/;

export class ConversationKeys {
  constructor(
    /** 32 bytes derived from the daemon's secret for this purpose only. */
    private readonly secret: Buffer,
  ) {}

  private mac(hex: string): Buffer {
    return crypto.createHmac('sha256', this.secret).update(`conversation:${hex}`).digest();
  }

  /** The key of a conversation (its id in either form). */
  keyOf(conversationId: string): string {
    const hex = conversationId.replace(/-/g, '').toLowerCase();
    return `${PREFIX}${hex}.${this.mac(hex).toString('base64url')}`;
  }

  /** The conversation (lowercase dashed id) a presented key opens, or null when it is not a valid conversation key. */
  conversationOf(key: string | null | undefined): string | null {
    if (!key?.startsWith(PREFIX)) return null;
    const m = SHAPE.exec(key);
    if (!m) return null;
    const hex = m[1]!;
    // compared as the canonical text, not as decoded bytes: the last base64url character carries two
    // bits no byte uses, so decoding alone would let several strings pass for one key
    const given = Buffer.from(m[2]!, 'latin1');
    if (!crypto.timingSafeEqual(given, Buffer.from(this.mac(hex).toString('base64url'), 'latin1'))) return null;
    return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
  }
}
