import pino, { type Logger } from 'pino';
import type { Redactor } from './secrets/redact.js';

/** JSON logs on stdout (journald-friendly); every line passes through the redactor. */
export function createLogger(level: string, redactor: Redactor, destination?: pino.DestinationStream): Logger {
  return pino(
    {
      level,
      base: { service: 'parley' },
      timestamp: pino.stdTimeFunctions.isoTime,
      hooks: {
        streamWrite: (s: string) => redactor.redact(s),
      },
    },
    destination ?? pino.destination({ fd: 1, sync: false }),
  );
}
