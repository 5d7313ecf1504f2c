import type { EncodedEvent, EventDraft, ParleyEvent } from '../events/types.js';

/**
 * A record's `data` as the store keeps it: JSON the store does not interpret (`unknown`, so the
 * compiler refuses it wherever parsed data is expected).
 */
export type StoredData = unknown;

/**
 * A conversation's row. The store reads and writes `data` as JSON it does not interpret; the
 * conversation layer parses it into its schema (src/conversation/record-data.ts, `RecordData`) as
 * it loads a record, and its code sees `ConversationRecord<RecordData>` from then on.
 */
export interface ConversationRecord<Data = StoredData> {
  id: string;
  title: string | null;
  created_at: string;
  updated_at: string;
  execution_status: string;
  /** Everything else the conversation keeps (repository, branch, provider, instructions, setup, mcp config...). */
  data: Data;
}

/**
 * What a patch of a conversation's record may change. Not its execution_status: that follows its
 * log, set by the commit of a status event (`executionStatusOf`), in both stores.
 */
export type ConversationPatch = Partial<Pick<ConversationRecord, 'title' | 'data' | 'updated_at'>>;

/** A conversations row of either store, its `data` column already decoded. */
export function conversationFromRow(r: Record<string, unknown>, data: StoredData): ConversationRecord {
  return {
    id: r.id as string,
    title: (r.title as string | null) ?? null,
    created_at: r.created_at as string,
    updated_at: r.updated_at as string,
    execution_status: r.execution_status as string,
    data,
  };
}

export interface EventQuery {
  afterSeq?: number | null;
  beforeSeq?: number | null;
  kind?: string | null;
  source?: string | null;
  sinceTimestamp?: string | null;
  desc?: boolean;
  limit: number;
  /**
   * Memory bound: stop after the event at which the running total of stored body
   * bytes reaches this, even before `limit`. Callers cut their pages themselves (src/events/page.ts).
   */
  maxBytes?: number;
  /** The caller sends the events' JSON on (replay, pages): keep each stored text with its event (`eventJson`) when it is the event's JSON as it is. */
  keepJson?: boolean;
}

export interface EventStore {
  /** Durably appends; resolves once committed, with seq/id/timestamp assigned. */
  append(conversationId: string, draft: EventDraft): Promise<ParleyEvent>;
  appendMany(conversationId: string, drafts: EventDraft[]): Promise<ParleyEvent[]>;
  query(conversationId: string, q: EventQuery): Promise<ParleyEvent[]>;
  count(conversationId: string, q: Omit<EventQuery, 'limit' | 'desc'>): Promise<number>;
  get(conversationId: string, eventId: string): Promise<ParleyEvent | null>;
  lastSeq(conversationId: string): Promise<number>;
}

export interface ConversationStore {
  /**
   * Stores a new conversation; with `first`, its first events in the same commit (both or neither:
   * a create that fails leaves nothing behind). Resolves with those events once committed. Throws
   * when the id is taken.
   */
  createConversation(rec: ConversationRecord, first?: EventDraft[]): Promise<ParleyEvent[]>;
  getConversation(id: string): Promise<ConversationRecord | null>;
  /** Newest first; with `cursor` (created_at, id), from that record on (it included). */
  listConversations(limit: number, cursor?: { created_at: string; id: string } | null): Promise<ConversationRecord[]>;
  updateConversation(id: string, patch: ConversationPatch): Promise<void>;
  deleteConversation(id: string): Promise<boolean>;
  /** Conversations whose status is one of `statuses` (crash recovery at start). */
  conversationsWithStatus(statuses: string[]): Promise<ConversationRecord[]>;
  /** Conversations whose workspace preparation a stop cut short (not marked error). */
  conversationsWithUnfinishedSetup(): Promise<string[]>;
}

export interface SealedValue {
  name: string;
  kind: string;
  /** Encrypted value (SecretBox format) or null. */
  sealed: string | null;
  meta: Record<string, unknown>;
}

/** Encrypted name/value records: provider tokens, custom secrets, settings. */
export interface SecretStore {
  putSecret(v: SealedValue): Promise<void>;
  getSecret(kind: string, name: string): Promise<SealedValue | null>;
  listSecrets(kind: string): Promise<SealedValue[]>;
  deleteSecret(kind: string, name: string): Promise<boolean>;
  /** Replace every record of `kind` atomically. */
  replaceSecrets(kind: string, values: SealedValue[]): Promise<void>;
}

export interface Store extends EventStore, ConversationStore, SecretStore {
  /** `listener` hears of every commit, in commit order, after the ones added before it. */
  onCommit(listener: CommitListener): void;
  close(): Promise<void>;
}

/** Told of each committed append: the conversation and its events, seq assigned. */
export type CommitListener = (conversationId: string, events: EncodedEvent[]) => void;

/** A store's commit listeners: each is told in the order it was added; one that throws does not keep the others from hearing. */
export class CommitListeners {
  private list: CommitListener[] = [];
  add(listener: CommitListener): void {
    this.list.push(listener);
  }
  emit(conversationId: string, events: EncodedEvent[]): void {
    for (const l of this.list) {
      try {
        l(conversationId, events);
      } catch {
        // a listener's failure is its own; the events are committed
      }
    }
  }
}

/**
 * The execution status a status-change event sets (null: not one). Appending such an event sets
 * the conversation's stored execution_status in the same commit, in both stores.
 */
export function executionStatusOf(ev: { kind?: unknown; key?: unknown; value?: unknown }): string | null {
  return ev.kind === 'ConversationStateUpdateEvent' && ev.key === 'execution_status' && typeof ev.value === 'string' ? ev.value : null;
}
