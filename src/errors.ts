/** Typed core errors; the bridge maps each to one HTTP status in one place. */
export class NotFoundError extends Error {
  override name = 'NotFoundError';
}
export class ConflictError extends Error {
  override name = 'ConflictError';
}
/** The request names something it may not reach (e.g. a path outside the conversation's workspace); the message says why. */
export class ForbiddenError extends Error {
  override name = 'ForbiddenError';
}
/** The service cannot take the request now (its event log cannot be written); the client may retry later. */
export class UnavailableError extends Error {
  override name = 'UnavailableError';
}
/** A request that is well-formed but cannot be accepted; `loc` is relative to the input (e.g. ["body","replay_json"]). */
export interface ValidationIssue {
  type: string;
  loc: (string | number)[];
  msg: string;
  input?: unknown;
  ctx?: Record<string, unknown>;
}
export class RequestValidationError extends Error {
  override name = 'RequestValidationError';
  constructor(readonly issues: ValidationIssue[]) {
    super(issues.map((i) => `${i.loc.join('.')}: ${i.msg}`).join('; '));
  }
}
/** A request carries more than a configured size (MAX_EVENT_BYTES); the bridge answers 413. */
export class PayloadTooLargeError extends Error {
  override name = 'PayloadTooLargeError';
}
export class ConfigError extends Error {
  override name = 'ConfigError';
}
