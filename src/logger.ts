import pino, { type Logger } from 'pino';
import { isoTime } from './iso-time.js';
import type { Redactor } from './secrets/redact.js';

/** JSON logs on stdout (journald-friendly); every line passes through the redactor. */
export function createLogger(level: string, redactor: Redactor, destination?: pino.DestinationStream): Logger {
  return pino(
    {
      level,
      base: { service: 'parley' },
      // pino's isoTime is toISOString, which sets up ICU's time zone (iso-time.ts)
      timestamp: () => `,"time":"${isoTime()}"`,
      hooks: {
        streamWrite: (s: string) => redactor.redact(s),
      },
    },
    destination ?? pino.destination({ fd: 1, sync: false }),
  );
}
