import { pack } from 'msgpackr';
import type { ParleyEvent } from './schema.js';

export type { EventDraft, EventKind, EventOf, EventSource, ParleyEvent } from './schema.js';

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
