/**
 * The typed core API: one tRPC procedure per operation of the table (operations.ts), generated,
 * plus the `events` subscription. REST (the bridge) runs the same table.
 */
import type * as z from 'zod';
import { ApiSchemas } from './schemas.js';
import { eventStream } from './subscription.js';
import { procedure, router } from './trpc.js';
import type { AnyOperation, Handler, Operation } from './operation.js';
import { operations } from './operations.js';

const queryProcedure = <I extends z.ZodType, O>(input: I, handler: Handler<I, O>) =>
  procedure.input(input).query(({ ctx, input }) => handler(ctx.core, input as z.output<I>));
const mutationProcedure = <I extends z.ZodType, O>(input: I, handler: Handler<I, O>) =>
  procedure.input(input).mutation(({ ctx, input }) => handler(ctx.core, input as z.output<I>));

/** The procedure an operation becomes: its JSON form, as a query or a mutation. */
type ProcedureOf<Op> =
  Op extends Operation<infer T, z.ZodType, unknown, infer JI, infer JO>
    ? T extends 'query'
      ? ReturnType<typeof queryProcedure<JI, JO>>
      : ReturnType<typeof mutationProcedure<JI, JO>>
    : never;
type Procedures = { [K in keyof typeof operations]: ProcedureOf<(typeof operations)[K]> };

function toProcedure(op: AnyOperation) {
  return op.type === 'query' ? queryProcedure(op.json.input, op.json.handler) : mutationProcedure(op.json.input, op.json.handler);
}
const procedures = Object.fromEntries(Object.entries(operations).map(([name, op]) => [name, toProcedure(op as never)])) as Procedures;

export const appRouter = router({
  ...procedures,
  /** The conversation's events (replay from lastEventId / after_seq, then live): see subscription.ts. */
  events: procedure.input(ApiSchemas.SubscribeInput).subscription(({ ctx, input, signal }) => eventStream(ctx.core, input, signal, ctx.maxQueuedBytes)),
});

export type AppRouter = typeof appRouter;
