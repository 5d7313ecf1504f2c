/** Typed core errors, and the one table (ERROR_KINDS, below) of what each door answers for each. */
import * as z from 'zod';

export class NotFoundError extends Error {
  override name = 'NotFoundError';
}
export class ConflictError extends Error {
  override name = 'ConflictError';
}
/** A request the core cannot act on as it stands, though it is well-formed (OpenHands' 400s: an empty goal, no goal to resume). */
export class BadRequestError extends Error {
  override name = 'BadRequestError';
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
/** A feature Parley does not offer (it needs the internet or a third party Parley does not reach); the message says which and why. */
export class NotImplementedError extends Error {
  override name = 'NotImplementedError';
}
export class ConfigError extends Error {
  override name = 'ConfigError';
}

/**
 * The one table of domain error kinds: the class the core throws for each, and the status every
 * door answers with — REST's HTTP status, and the tRPC code whose `data.httpStatus` is that same
 * number. Data only (the core speaks no HTTP): the REST bridge (bridge/errors.ts) writes the body,
 * the tRPC router (src/api/trpc.ts) throws the code, and the cluster (src/cluster/node.ts) carries
 * the kind from a conversation's owner back to the node that was asked. Nothing else lists kinds.
 * An error's kind is the first entry whose class it is an instance of (a store's `LeaseLostError`
 * is a ConflictError); an error of no kind is a 500 with an `error_id`.
 */
export const ERROR_KINDS = {
  /** The input does not match its schema (zod): 422 with pydantic-style issues. */
  invalidInput: {
    type: z.ZodError,
    status: 422,
    trpcCode: 'UNPROCESSABLE_CONTENT',
    rebuild: (_m: string, issues?: unknown) => new z.ZodError((issues ?? []) as z.core.$ZodIssue[]),
  },
  /** Well-formed but refused by the core (e.g. replay_json with initial_user_msg): 422 with its issues. */
  validation: {
    type: RequestValidationError,
    status: 422,
    trpcCode: 'UNPROCESSABLE_CONTENT',
    rebuild: (_m: string, issues?: unknown) => new RequestValidationError((issues ?? []) as ValidationIssue[]),
  },
  badRequest: { type: BadRequestError, status: 400, trpcCode: 'BAD_REQUEST', rebuild: (m: string) => new BadRequestError(m) },
  notFound: { type: NotFoundError, status: 404, trpcCode: 'NOT_FOUND', rebuild: (m: string) => new NotFoundError(m) },
  forbidden: { type: ForbiddenError, status: 403, trpcCode: 'FORBIDDEN', rebuild: (m: string) => new ForbiddenError(m) },
  conflict: { type: ConflictError, status: 409, trpcCode: 'CONFLICT', rebuild: (m: string) => new ConflictError(m) },
  payloadTooLarge: { type: PayloadTooLargeError, status: 413, trpcCode: 'PAYLOAD_TOO_LARGE', rebuild: (m: string) => new PayloadTooLargeError(m) },
  notImplemented: { type: NotImplementedError, status: 501, trpcCode: 'NOT_IMPLEMENTED', rebuild: (m: string) => new NotImplementedError(m) },
  unavailable: { type: UnavailableError, status: 503, trpcCode: 'SERVICE_UNAVAILABLE', rebuild: (m: string) => new UnavailableError(m) },
} as const;
export type ErrorKind = keyof typeof ERROR_KINDS;
const KINDS = Object.keys(ERROR_KINDS) as ErrorKind[];

/** The kind of `err` (undefined: none, an internal error). */
export function errorKind(err: unknown): ErrorKind | undefined {
  for (const k of KINDS) if (err instanceof ERROR_KINDS[k].type) return k;
  return undefined;
}

/** An error as it travels between nodes (JSON): its kind, message and issues. */
export interface WireError {
  kind?: ErrorKind;
  name: string;
  message: string;
  issues?: unknown;
}

export function errorToWire(err: unknown): WireError {
  const e = err as Error & { issues?: unknown };
  return { kind: errorKind(err), name: e?.name ?? 'Error', message: String(e?.message ?? e), issues: e?.issues };
}

/** The error a node sent, as the same kind here; one of no kind stays an internal error. */
export function errorFromWire(w: WireError): Error {
  const entry = w.kind !== undefined ? ERROR_KINDS[w.kind] : undefined;
  return entry ? entry.rebuild(w.message, w.issues) : new Error(w.message);
}
