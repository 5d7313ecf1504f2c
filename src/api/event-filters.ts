/** Event search filters beyond the interface's own (what OpenHands' client sends): a text match and a time window. */
import * as z from 'zod';

const Timestamp = z.iso.datetime({ offset: true, local: true });

export const EventFilterExtras = {
  /** Case-insensitive text match on message events. */
  body: z.string().min(1).max(1000).nullish(),
  timestamp__gte: Timestamp.nullish(),
  timestamp__lt: Timestamp.nullish(),
};
