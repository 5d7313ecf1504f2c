/**
 * Core errors → HTTP status and body. The status of each kind is the core's table (ERROR_KINDS in
 * src/errors.ts, which tRPC reads too); what this file adds is the body: FastAPI's shape, as in docs/api.md.
 */
import crypto from 'node:crypto';
import type { Logger } from 'pino';
import { toValidationIssues } from '../src/api/validation.js';
import { ERROR_KINDS, errorKind, type RequestValidationError } from '../src/errors.js';
import type { Redactor } from '../src/secrets/redact.js';
import type * as z from 'zod';

interface HttpError {
  status: number;
  body: unknown;
}

export function toHttpError(err: unknown, input: unknown, locOf: (p: PropertyKey[]) => (string | number)[], log: Logger, redactor: Redactor): HttpError {
  // REST runs the operation table directly (runOperation): what arrives here is the core's own error
  const kind = errorKind(err);
  if (kind === undefined) return internalError(err, log, redactor);
  const status = ERROR_KINDS[kind].status;
  switch (kind) {
    case 'invalidInput': {
      const issues = (err as z.ZodError).issues as unknown as Parameters<typeof toValidationIssues>[0];
      return { status, body: { detail: redactor.redactDeep(toValidationIssues(issues, input, locOf)) } };
    }
    case 'validation':
      return { status, body: { detail: redactor.redactDeep((err as RequestValidationError).issues) } };
    case 'badRequest':
    case 'notFound':
    case 'conflict':
    case 'payloadTooLarge':
    case 'notImplemented':
      return { status, body: { detail: (err as Error).message } };
    case 'forbidden':
      return { status, body: { detail: redactor.redact((err as Error).message) } };
    case 'unavailable':
      log.error({ err: redactor.redact((err as Error).message) }, 'service unavailable');
      return { status, body: { detail: redactor.redact((err as Error).message) } };
  }
}

/** A 500: the body names an id that the log line carries, never the error itself. */
function internalError(err: unknown, log: Logger, redactor: Redactor): HttpError {
  const errorId = crypto.randomUUID().replace(/-/g, '');
  const c = err as Error;
  log.error(
    { error_id: errorId, err: { name: c?.name, message: redactor.redact(String(c?.message ?? c)), stack: redactor.redact(String(c?.stack ?? '')) } },
    'unhandled error',
  );
  return { status: 500, body: { detail: 'Internal Server Error', error_id: errorId } };
}
