import { pack } from 'msgpackr';
import type { ParleyEvent } from './schema.js';

export type { EventDraft, ParleyEvent } from './schema.js';

/** Events read with `EventQuery.keepJson`: the stored JSON text they were parsed from (exactly their JSON). */
const storedJson = new WeakMap<object, string>();

/** `text` is `JSON.stringify(event)`: a transport sends it without serialising again (replays, pages of large events). */
export function keepStoredJson(event: ParleyEvent, text: string): void {
  storedJson.set(event, text);
}

/** The event's JSON text: the stored one when it was kept, else serialised now (and kept while the event lives). */
export function eventJson(event: ParleyEvent): string {
  let json = storedJson.get(event);
  if (json === undefined) storedJson.set(event, (json = JSON.stringify(event)));
  return json;
}

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
    return (this.jsonText ??= eventJson(this.event));
  }
  get msgpack(): Buffer {
    return (this.packed ??= pack(this.event));
  }
  get seq(): number | undefined {
    return this.event.seq;
  }
}
