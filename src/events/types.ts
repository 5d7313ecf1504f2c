import { pack } from 'msgpackr';

export type EventSource = 'user' | 'agent' | 'environment';

/** An event as stored and sent (CONTRACT §4). Kind-specific fields sit beside the common ones. */
export interface ParleyEvent {
  kind: string;
  id: string;
  seq?: number;
  timestamp: string;
  source: EventSource;
  [field: string]: unknown;
}

/** What a producer hands to the log: the store assigns id (if absent), seq and timestamp. */
export type EventDraft = { kind: string; source: EventSource; id?: string; timestamp?: string; [field: string]: unknown };

/**
 * An event plus its wire encodings, computed at most once however many subscribers receive it.
 */
export class EncodedEvent {
  private packed?: Buffer;
  /** `jsonText`, when given, must be `JSON.stringify(event)` (the store passes the text it journaled). */
  constructor(
    readonly event: ParleyEvent,
    private jsonText?: string,
  ) {}
  get json(): string {
    return (this.jsonText ??= JSON.stringify(this.event));
  }
  get msgpack(): Buffer {
    return (this.packed ??= pack(this.event));
  }
  get seq(): number | undefined {
    return this.event.seq;
  }
}

export const nowIso = () => new Date().toISOString();
