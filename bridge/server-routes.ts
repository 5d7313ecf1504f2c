/**
 * The REST routes of OpenHands agent-server's server-wide operations (src/api/operations-server.ts),
 * made from each operation's REST description, in the table form of routes.ts: the path's parameters
 * are the input's fields of those names; the rest comes from the JSON body (the whole input, its
 * fields, or one field) or the query string; a failed field's `loc` names where it came from.
 */
import type { OperationName } from '../src/api/operations.js';
import { serverOperations, type ServerRest } from '../src/api/operations-server.js';
import { asLoc, type Loc, type Route, type RouteRequest } from './route.js';

const objectBody = (r: RouteRequest) => (r.body && typeof r.body === 'object' && !Array.isArray(r.body) ? (r.body as Record<string, unknown>) : {});

/** The query string's parameters; a list parameter from every repetition (`exclude=a&exclude=b`). */
function queryOf(r: RouteRequest, lists: readonly string[]): Record<string, unknown> {
  if (!lists.length) return r.query;
  const q: Record<string, unknown> = { ...r.query };
  const all = new URLSearchParams(r.rawQuery ?? '');
  for (const name of lists) if (all.has(name)) q[name] = all.getAll(name);
  return q;
}

export function toRoute(procedure: OperationName, rest: ServerRest): Route {
  const names = [...rest.path.matchAll(/\{([a-z_]+)\}/g)].map((m) => m[1]!);
  const params = (r: RouteRequest) => Object.fromEntries(names.map((n) => [n, r.params[n]]));
  const field = typeof rest.body === 'object' ? rest.body.field : null;
  const lists = typeof rest.query === 'object' ? rest.query.lists : [];
  let input: (r: RouteRequest) => unknown;
  if (rest.body === 'input') input = (r) => r.body;
  else if (rest.body === 'fields') input = (r) => ({ ...objectBody(r), ...params(r) });
  else if (field) input = (r) => ({ ...params(r), [field]: r.body });
  else if (rest.query) input = (r) => ({ ...queryOf(r, lists), ...params(r) });
  else input = names.length ? params : () => undefined;
  const from = rest.body ? 'body' : 'query';
  const loc = (p: PropertyKey[]): Loc => {
    if (names.includes(String(p[0]))) return ['path', ...asLoc(p)];
    if (field && p[0] === field) return ['body', ...asLoc(p.slice(1))];
    return [from, ...asLoc(p)];
  };
  return {
    method: rest.method,
    path: rest.path.replace(/\{([a-z_]+)\}/g, ':$1'),
    procedure,
    body: rest.body ? true : undefined,
    input,
    loc,
    status: rest.status,
    summary: rest.summary,
    tag: rest.tag,
  };
}

export const SERVER_ROUTES: Route[] = Object.entries(serverOperations).map(([name, op]) => toRoute(name as OperationName, op.rest));
