import { initTRPC, TRPCError } from '@trpc/server';
import { ConflictError, NotFoundError, PayloadTooLargeError, RequestValidationError } from '../errors.js';
import type { Core } from '../core.js';

export interface Context {
  core: Core;
  /** Bytes of events a subscription may have waiting before it is ended as too slow (WS_MAX_BUFFERED_BYTES). */
  maxQueuedBytes?: number;
}

const t = initTRPC.context<Context>().create({
  errorFormatter({ shape, error }) {
    const cause = error.cause;
    const issues = cause instanceof RequestValidationError ? cause.issues : undefined;
    return { ...shape, data: { ...shape.data, stack: undefined, issues } };
  },
});

/** Core errors become tRPC codes here (the REST bridge maps the same causes to HTTP statuses). */
const mapErrors = t.middleware(async ({ next }) => {
  const res = await next();
  if (!res.ok) {
    const cause = res.error.cause;
    if (cause instanceof NotFoundError) throw new TRPCError({ code: 'NOT_FOUND', message: cause.message, cause });
    if (cause instanceof ConflictError) throw new TRPCError({ code: 'CONFLICT', message: cause.message, cause });
    if (cause instanceof RequestValidationError) throw new TRPCError({ code: 'UNPROCESSABLE_CONTENT', message: cause.message, cause });
    if (cause instanceof PayloadTooLargeError) throw new TRPCError({ code: 'PAYLOAD_TOO_LARGE', message: cause.message, cause });
  }
  return res;
});

export const router = t.router;
export const procedure = t.procedure.use(mapErrors);
