/**
 * What one REST route is (a line of the tables in routes.ts and agent-server-routes.ts), and the
 * helpers both tables use to build an operation's input and name where its fields came from. Both
 * tables import this file; agent-server-routes.ts imports nothing from routes.ts.
 */
import type { OperationName } from '../src/api/operations.js';

export type Loc = (string | number)[];

export interface RouteRequest {
  params: Record<string, string>;
  query: Record<string, string>;
  body: unknown;
  /** The whole query string (for a parameter given more than once, e.g. `ids=a&ids=b`). */
  rawQuery?: string;
}

export interface Route {
  method: 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';
  path: string;
  /** The operation (src/api/operations.ts) the route calls. */
  procedure: OperationName;
  /** When one path serves two operations: the other one, and which requests call it. */
  alternative?: { procedure: OperationName; when: (r: RouteRequest) => boolean };
  /** Does the route read a JSON body (required)? `multipart`: a multipart/form-data body whose `file` part is the input's body. */
  body?: boolean | 'multipart';
  input: (r: RouteRequest) => unknown;
  /** Wire location of an input path. */
  loc: (path: PropertyKey[]) => Loc;
  status?: number;
  /** OpenAPI text. */
  summary: string;
  tag: string;
  operationId?: string;
}

export const asLoc = (p: PropertyKey[]): Loc => p.map((x) => (typeof x === 'number' ? x : String(x)));
/** Body fields sit at the input's top level. */
export const bodyLoc = (p: PropertyKey[]): Loc => ['body', ...asLoc(p)];
export const queryLoc = (p: PropertyKey[]): Loc => ['query', ...asLoc(p)];
export const idOnly = (r: RouteRequest) => ({ conversation_id: r.params.conversation_id });
