/**
 * The app-server fields of a conversation's info (what OpenHands' web app reads of a conversation),
 * projected from its record; app-server.ts says what they mean.
 */
import type { ParsedRecord } from './record-data.js';

/** What the info projection needs: each conversation's own key (conversation-keys.ts). */
export interface AppServerContext {
  keyOf(conversationId: string): string;
}

/** A conversation's title when it has none, as OpenHands names it: `Conversation` and the first 5 hex digits of its id. */
export const untitled = (id: string) => `Conversation ${id.replace(/-/g, '').slice(0, 5)}`;

/** The URL of a conversation as the app uses it (relative: the app then calls its own origin). */
export const conversationUrl = (id: string) => `/api/conversations/${id}`;

/**
 * The app-server fields of a conversation's info, added to Parley's own (none is removed): what
 * the app's Conversation type reads. `session_api_key` is the conversation's own key, never a
 * daemon key; `conversation_version` is exactly "V1" (the app talks to the plain WebSocket only then).
 */
export function appServerInfo(record: ParsedRecord, ctx: AppServerContext | undefined) {
  return {
    last_updated_at: record.updated_at,
    runtime_status: 'STATUS$READY',
    url: conversationUrl(record.id),
    session_api_key: ctx ? ctx.keyOf(record.id) : null,
    conversation_version: 'V1' as const,
    sub_conversation_ids: [] as string[],
    pr_number: [] as number[],
    trigger: null,
  };
}

/** A conversation's status in OpenHands' sense: its runtime can take a message (app-server.ts says why every conversation can). */
export const RUNTIME_STATUS = 'RUNNING';
