/** Core errors → HTTP status and body, in one place. */
import crypto from 'node:crypto';
import type { Logger } from 'pino';
import { z } from 'zod';
import { toValidationIssues } from '../src/api/validation.js';
import { ConflictError, ForbiddenError, NotFoundError, PayloadTooLargeError, RequestValidationError, UnavailableError } from '../src/errors.js';
import type { Redactor } from '../src/secrets/redact.js';

interface HttpError {
  status: number;
  body: unknown;
}

export function toHttpError(
  err: unknown,
  input: unknown,
  locOf: (p: PropertyKey[]) => (string | number)[],
  log: Logger,
  redactor: Redactor,
): HttpError {
  // REST runs the operation table directly (runOperation): what arrives here is the core's own error
  const cause = err;
  if (cause instanceof z.ZodError) {
    const issues = cause.issues as unknown as Parameters<typeof toValidationIssues>[0];
    return { status: 422, body: { detail: redactor.redactDeep(toValidationIssues(issues, input, locOf)) } };
  }
  if (cause instanceof RequestValidationError) return { status: 422, body: { detail: redactor.redactDeep(cause.issues) } };
  if (cause instanceof NotFoundError) return { status: 404, body: { detail: cause.message } };
  if (cause instanceof ConflictError) return { status: 409, body: { detail: cause.message } };
  if (cause instanceof PayloadTooLargeError) return { status: 413, body: { detail: cause.message } };
  if (cause instanceof ForbiddenError) return { status: 403, body: { detail: redactor.redact(cause.message) } };
  if (cause instanceof UnavailableError) {
    log.error({ err: redactor.redact(cause.message) }, 'service unavailable');
    return { status: 503, body: { detail: redactor.redact(cause.message) } };
  }
  const errorId = crypto.randomUUID().replace(/-/g, '');
  const c = cause as Error;
  log.error({ error_id: errorId, err: { name: c?.name, message: redactor.redact(String(c?.message ?? c)), stack: redactor.redact(String(c?.stack ?? '')) } }, 'unhandled error');
  return { status: 500, body: { detail: 'Internal Server Error', error_id: errorId } };
}
