/**
 * What one operation of the API is: whether it reads or changes (a tRPC query or mutation), its
 * input schema, its handler, and its REST description. The table of every operation is
 * operations.ts; the tRPC router (router.ts), the REST routes (bridge/routes.ts) and the OpenAPI
 * document (bridge/openapi.ts) are all generated from it.
 *
 * The REST description is data, not code: a method, a path template and where each field of the
 * input comes from (the path's parameters, the query string, the body). The core speaks no HTTP;
 * the bridge reads requests and turns this description into the operation's input, and a failed
 * field back into the `loc` of a 422 (`["path", …]`, `["query", …]`, `["body", …]`).
 */
import type * as z from 'zod';
import type { Core } from '../core.js';

type OperationType = 'query' | 'mutation';
export type Handler<I extends z.ZodType, O> = (c: Core, i: z.output<I>) => Promise<O>;
type Json = Record<string, unknown>;

export type HttpMethod = 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';

/**
 * An operation as a REST route. Every parameter of `path` is the input's field of that name; the
 * rest of the input is what `body` and `query` say. With neither (and no parameter) the input is
 * `undefined`.
 */
export interface RestRoute {
  method: HttpMethod;
  /** The path template, parameters in braces: `/api/conversations/{conversation_id}/run`. */
  path: string;
  /**
   * The JSON body: the whole input (`'input'`: no parameter or query beside it), the input's fields
   * beside the path's parameters (`'fields'`: a body that is not an object gives none), or one field
   * of the input (`{ field }`). `multipart` names the part of a multipart/form-data body that is the
   * field instead (its bytes).
   */
  body?: 'input' | 'fields' | { field: string; multipart?: string };
  /** The query string's parameters are the input's fields; `lists` are those given as `a,b` or repeated (`ids=a&ids=b`). */
  query?: true | { lists: readonly string[] };
  /**
   * Two operations may share a method and path when the request tells them apart: the one with
   * `when` runs for the requests it describes, the one without for every other request (and is the
   * one the OpenAPI document lists, naming the other).
   */
  when?: { bodyHasAnyKey: readonly string[] } | { queryHas: string };
  /** The success status (default 200). */
  status?: number;
  /**
   * A runtime route of one conversation that names none (OpenHands' app calls it with the
   * conversation's own key): a caller holding that key reaches it, and the input's
   * `conversation_id` is the key's conversation. Any other caller names it or lets the path decide.
   */
  byConversationKey?: true;
  /** The path's last parameter takes the rest of the path, slashes included (a file's path below a directory). */
  tail?: true;
  /**
   * Files a browser embeds in pages (an `<img>`, an `<iframe>`, a link): GET routes that a browser's
   * workspace session cookie reaches as well as the key, since such requests cannot carry a header.
   */
  workspaceSession?: true;
  /** OpenAPI: the operation's summary and tag, and its operationId when the interface fixes one (else derived from summary, path and method). */
  summary: string;
  tag: string;
  operationId?: string;
  /**
   * OpenAPI beyond what the input schema says: the request body's component (default: the input
   * schema's, or the body field's, when it is registered), the query parameters (default: the
   * input's fields not in the path), the response (a component name or a JSON Schema; default `Success`).
   */
  doc?: { body?: string; query?: () => z.ZodObject; response?: string | Json };
}

export interface Operation<T extends OperationType, I extends z.ZodType, O, JI extends z.ZodType = I, JO = O> {
  type: T;
  /** The input schema, built when first read (lazy-schemas.ts). */
  readonly input: I;
  handler: Handler<I, O>;
  rest: RestRoute;
  /** The operation as a JSON door (tRPC) serves it. */
  json: { readonly input: JI; handler: Handler<JI, JO> };
  /** A check of the usual input without the schema (the hot path): its output, or undefined to let the schema decide. */
  quick?: (raw: unknown) => z.output<I> | undefined;
}

/** Any operation of the table, as code that does not care which (the router, runOperation, the bridge). */
export type AnyOperation = Operation<OperationType, z.ZodType, unknown, z.ZodType, unknown>;

interface Spec<I extends z.ZodType, O> {
  /** The input schema, given as a function: schemas are built when an operation is first used, not as the table loads. */
  input: () => I;
  rest: RestRoute;
  handler: Handler<I, O>;
  quick?: (raw: unknown) => z.output<I> | undefined;
}

/** An operation whose input schemas are built from `input` and `jsonInput` on first read. */
function make<T extends OperationType, I extends z.ZodType, O, JI extends z.ZodType, JO>(
  type: T,
  spec: Spec<I, O>,
  json: { input: () => JI; handler: Handler<JI, JO> },
): Operation<T, I, O, JI, JO> {
  let input: I | undefined;
  let jsonInput: JI | undefined;
  const op: Operation<T, I, O, JI, JO> = {
    type,
    get input() {
      return (input ??= spec.input());
    },
    handler: spec.handler,
    rest: spec.rest,
    json: {
      get input() {
        return (jsonInput ??= json.input());
      },
      handler: json.handler,
    },
  };
  if (spec.quick) op.quick = spec.quick;
  return op;
}

/** The spec back from an operation (its input read lazily through the operation). */
const specOf = <T extends OperationType, I extends z.ZodType, O>(op: Operation<T, I, O>): Spec<I, O> => ({
  input: () => op.input,
  rest: op.rest,
  handler: op.handler,
  ...(op.quick ? { quick: op.quick } : {}),
});

const operation =
  <T extends OperationType>(type: T) =>
  <I extends z.ZodType, O>(spec: Spec<I, O>): Operation<T, I, O> =>
    make(type, spec, { input: spec.input, handler: spec.handler });
export const query = operation('query');
export const mutation = operation('mutation');

/** Over JSON, the output in a JSON form (what REST streams or sends as bytes, collected). */
export function jsonOutput<T extends OperationType, I extends z.ZodType, O, J>(
  op: Operation<T, I, O>,
  toJson: (o: O) => J | Promise<J>,
): Operation<T, I, O, I, J> {
  return make(op.type, specOf(op), { input: () => op.input, handler: async (c, i) => toJson(await op.handler(c, i)) });
}

/** Over JSON, another input schema that gives the same input (bytes as base64). */
export function jsonInput<T extends OperationType, I extends z.ZodType, O, JI extends z.ZodType<z.output<I>>>(
  op: Operation<T, I, O>,
  input: () => JI,
): Operation<T, I, O, JI, O> {
  return make(op.type, specOf(op), { input, handler: op.handler as unknown as Handler<JI, O> });
}
