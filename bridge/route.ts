/**
 * One operation as REST runs it, built once at start from its REST description (src/api/operation.ts):
 * how its input is put together from a request's path parameters, query string and body, where
 * each input field came from (the `loc` of a 422), and which requests it serves when it shares its
 * method and path with another operation. Nothing here reads a uWS request: server.ts does, into
 * a RouteRequest.
 */
import type { OperationName } from '../src/api/operations.js';
import type { RestRoute } from '../src/api/operation.js';

type Loc = (string | number)[];

export interface RouteRequest {
  params: Record<string, string>;
  query: Record<string, string>;
  body: unknown;
  /** The whole query string (for a parameter given more than once, e.g. `ids=a&ids=b`). */
  rawQuery?: string;
}

/** What one request runs: the operation, its input from the request, and the wire location of an input path. */
export interface RouteTarget {
  operation: OperationName;
  input: (r: RouteRequest) => unknown;
  loc: (path: PropertyKey[]) => Loc;
  status: number;
}

/** The parameter names of a path template, in order: `/a/{x}/b/{y}` → x, y. */
export const pathParams = (path: string): string[] => [...path.matchAll(/\{([a-z_]+)\}/g)].map((m) => m[1]!);

const asLoc = (p: PropertyKey[]): Loc => p.map((x) => (typeof x === 'number' ? x : String(x)));
const objectBody = (body: unknown) => (body && typeof body === 'object' && !Array.isArray(body) ? body : {});

/** Every value of a list parameter, comma lists split: `ids=a,b&ids=c` → a, b, c. */
const listParam = (rawQuery: string | undefined, name: string) =>
  new URLSearchParams(rawQuery ?? '')
    .getAll(name)
    .flatMap((v) => v.split(','))
    .filter(Boolean);

export function routeTarget(operation: OperationName, rest: RestRoute): RouteTarget {
  return { operation, input: inputOf(rest), loc: locOf(rest), status: rest.status ?? 200 };
}

/** The input from a request. The usual shapes get a function of their own: this runs on every request, the hot path's too. */
function inputOf(rest: RestRoute): RouteTarget['input'] {
  const names = pathParams(rest.path);
  const { body, query } = rest;
  const lists = typeof query === 'object' ? query.lists : [];
  if (body === 'input') return (r) => r.body;
  if (!names.length && !body && !query) return () => undefined;
  if (!names.length && !body && !lists.length) return (r) => r.query;
  const field = typeof body === 'object' ? body.field : undefined;
  return (r) => {
    const input: Record<string, unknown> = query ? { ...r.query } : {};
    for (const name of lists) if (name in r.query) input[name] = listParam(r.rawQuery, name);
    if (body === 'fields') Object.assign(input, objectBody(r.body));
    for (const name of names) input[name] = r.params[name];
    if (field !== undefined) input[field] = r.body;
    return input;
  };
}

/** Where an input path came from: a path parameter, the body (or its multipart part), else the query string. */
function locOf(rest: RestRoute): RouteTarget['loc'] {
  const names = new Set(pathParams(rest.path));
  const { body } = rest;
  const field = typeof body === 'object' ? body : undefined;
  return (p) => {
    const first = p[0];
    if (typeof first === 'string' && names.has(first)) return ['path', ...asLoc(p)];
    if (field && first === field.field) return ['body', ...(field.multipart ? [field.multipart] : []), ...asLoc(p.slice(1))];
    if (body === 'input' || body === 'fields' || !rest.query) return ['body', ...asLoc(p)];
    return ['query', ...asLoc(p)];
  };
}

/** Does a request meet the condition of an operation that shares its method and path? */
export function whenOf(rest: RestRoute): ((r: RouteRequest) => boolean) | undefined {
  const when = rest.when;
  if (!when) return undefined;
  if ('queryHas' in when) return (r) => when.queryHas in r.query;
  return (r) => {
    const b = r.body;
    return !!b && typeof b === 'object' && !Array.isArray(b) && when.bodyHasAnyKey.some((k) => k in b);
  };
}

/**
 * The operations with `when`, by the method and path they share with an operation without one
 * (key: `GET /api/conversations`): one pass over the table, where a scan per route was ~8,000
 * calls at every start, enough for V8 to optimize the scan before the first request.
 */
export function alternativesByRoute<E extends [string, { rest: RestRoute }]>(entries: readonly E[]): Map<string, E[]> {
  const byRoute = new Map<string, E[]>();
  for (const e of entries) {
    if (!e[1].rest.when) continue;
    const key = `${e[1].rest.method} ${e[1].rest.path}`;
    const list = byRoute.get(key);
    if (list) list.push(e);
    else byRoute.set(key, [e]);
  }
  return byRoute;
}
