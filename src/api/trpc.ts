import { initTRPC, TRPCError } from '@trpc/server';
import type * as z from 'zod';
import { ERROR_KINDS, errorKind, type ValidationIssue } from '../errors.js';
import type { Core } from '../core.js';
import { toValidationIssues } from './validation.js';

export interface Context {
  core: Core;
  /** Bytes of events a subscription may have waiting before it is ended as too slow (WS_MAX_BUFFERED_BYTES). */
  maxQueuedBytes?: number;
}

const asLoc = (p: PropertyKey[]) => p.map((x) => (typeof x === 'number' ? x : String(x)));

const t = initTRPC.context<Context>().create({
  /** A 422 carries its issues in `data.issues`, as REST's 422 body does (`loc` relative to the input), redacted as there. */
  errorFormatter({ shape, error, input, ctx }) {
    const cause = error.cause;
    const kind = errorKind(cause);
    let issues: ValidationIssue[] | undefined;
    if (kind === 'validation') issues = (cause as unknown as { issues: ValidationIssue[] }).issues;
    else if (kind === 'invalidInput') issues = toValidationIssues((cause as unknown as z.ZodError).issues, input, asLoc);
    if (issues && ctx) issues = ctx.core.redactor.redactDeep(issues);
    return { ...shape, data: { ...shape.data, stack: undefined, issues } };
  },
});

/**
 * Core errors become tRPC codes here, from the core's table (ERROR_KINDS), so each kind has the
 * HTTP status (`data.httpStatus`) it has over REST. An input that fails its schema reaches this
 * as tRPC's BAD_REQUEST with the zod error as its cause: it is a 422 like over REST.
 */
const mapErrors = t.middleware(async ({ ctx, next }) => {
  const res = await next();
  if (!res.ok) {
    const cause = res.error.cause;
    const kind = errorKind(cause);
    if (kind !== undefined) {
      const message = kind === 'forbidden' || kind === 'unavailable' ? ctx.core.redactor.redact(cause!.message) : res.error.message;
      throw new TRPCError({ code: ERROR_KINDS[kind].trpcCode, message, cause });
    }
  }
  return res;
});

export const router = t.router;
export const procedure = t.procedure.use(mapErrors);
