/**
 * What a conversation's steps read, kept up to date with the log instead of re-read at every step
 * (`conv.history`): the prompt's view and the stuck window. Kept for the conversations run most
 * recently; the others' is dropped (built again from the log at their next run).
 */
import type { EventLog } from '../events/log.js';
import { MessageView } from './prompt.js';
import { StuckWindow } from './stuck.js';

export interface History {
  view: MessageView;
  stuck: StuckWindow;
  /** The newest seq taken in. */
  seq: number;
}

/** Histories kept for conversations run recently (the least recently run is dropped beyond this). */
const MAX_HISTORIES = 64;

/** A conversation as its history is kept on it. */
interface HasHistory {
  readonly id: string;
  history: History | null;
}

export class Histories {
  /** The conversations holding a history, least recently used first: a bound on memory, not an index. */
  private readonly recent = new Set<HasHistory>();

  constructor(private readonly events: Pick<EventLog, 'after'>) {}

  /**
   * The conversation's history with every event committed so far: only the events after the ones
   * already taken are read; built from the whole log the first time (after a start) and again after
   * a condensation.
   */
  async of(conv: HasHistory): Promise<History> {
    let h = conv.history;
    if (h) {
      const fresh = await this.events.after(conv.id, h.seq);
      h.view.add(fresh);
      h.stuck.add(fresh);
      h.seq = fresh[fresh.length - 1]?.seq ?? h.seq;
    }
    if (!h || h.view.stale) {
      const all = await this.events.after(conv.id);
      h = { view: MessageView.of(all), stuck: new StuckWindow(), seq: all[all.length - 1]?.seq ?? 0 };
      h.stuck.add(all);
    }
    conv.history = h;
    this.recent.delete(conv); // re-inserted: the set's order is the order conversations were last used
    this.recent.add(conv);
    if (this.recent.size > MAX_HISTORIES) {
      const oldest = this.recent.values().next().value!;
      this.recent.delete(oldest);
      oldest.history = null;
    }
    return h;
  }
}
