/**
 * The REST routes, generated from the operations table (src/api/operations.ts): one route per
 * method and path. When two operations share a method and path (`POST /api/conversations` is the
 * interface's create, or agent-server's start when the body has its keys; `GET /api/conversations`
 * is the listing, or the get-many with `?ids=`), the route runs the one whose `when` the request
 * meets, else the one without `when`.
 *
 * Paths are matched on a tree of their segments, so the order of the table does not matter: a
 * literal segment is tried before a parameter (`/api/conversations/search` before
 * `/api/conversations/{conversation_id}`), and a request costs a walk of its own segments whatever
 * the number of routes (scripts/bench-routes.ts measures it).
 */
import { type OperationName, operations } from '../src/api/operations.js';
import type { AnyOperation, HttpMethod } from '../src/api/operation.js';
import { alternativesByRoute, pathParams, type RouteRequest, type RouteTarget, routeTarget, whenOf } from './route.js';

export interface Route extends RouteTarget {
  method: HttpMethod;
  /** The path template, as the OpenAPI document and the metrics name it: `/api/conversations/{conversation_id}`. */
  path: string;
  /** The names of its parameters, in order. */
  names: string[];
  /** Does the route read a JSON body (required)? `multipart`: a multipart/form-data body whose part is the input's body field. */
  body?: true | 'multipart';
  /** The operation a request runs: this route's own, or an alternative whose condition the request meets. */
  pick: (r: RouteRequest) => RouteTarget;
  /** A conversation's own key reaches it, and it acts on that conversation (RestRoute.byConversationKey). */
  byConversationKey?: true;
  /** A browser's workspace session cookie reaches it (RestRoute.workspaceSession). */
  workspaceSession?: true;
  /** Its last parameter takes the rest of the path (RestRoute.tail). */
  tail?: true;
}

/** Every route of the table (an operation with `when` is an alternative of the route of its method and path). */
export function tableRoutes(): Route[] {
  const entries = Object.entries(operations) as [OperationName, AnyOperation][];
  const byRoute = alternativesByRoute(entries);
  const routes: Route[] = [];
  for (const [name, { rest }] of entries) {
    if (rest.when) continue;
    const key = `${rest.method} ${rest.path}`;
    const alternatives = (byRoute.get(key) ?? []).map(([n, o]) => ({ target: routeTarget(n, o.rest), when: whenOf(o.rest)! }));
    byRoute.delete(key);
    const route: Route = {
      ...routeTarget(name, rest),
      method: rest.method,
      path: rest.path,
      names: pathParams(rest.path),
      body: typeof rest.body === 'object' && rest.body.multipart ? 'multipart' : rest.body ? true : undefined,
      byConversationKey: rest.byConversationKey,
      workspaceSession: rest.workspaceSession,
      tail: rest.tail,
      pick: (r) => {
        for (const a of alternatives) if (a.when(r)) return a.target;
        return route;
      },
    };
    if (!alternatives.length) route.pick = () => route;
    routes.push(route);
  }
  // what is left has no operation without `when` to fall back to
  const orphan = [...byRoute.values()][0]?.[0];
  if (orphan) throw new Error(`${orphan[0]}: \`when\` on ${orphan[1].rest.method} ${orphan[1].rest.path}, which no operation without \`when\` serves`);
  return routes;
}

interface Segment {
  /** The literal segments that can follow, tried before the parameter. */
  fixed: { name: string; next: Segment }[];
  /** The subtree of a parameter at this place (any name: each route names its own). */
  param: Segment | null;
  /** Routes whose last parameter starts here and takes the rest of the path, slashes included (RestRoute.tail). */
  tail: Segment | null;
  /** The routes that end here, by method. */
  routes: Map<string, Route>;
}
const segment = (): Segment => ({ fixed: [], param: null, tail: null, routes: new Map() });

interface RouteMatch {
  route: Route | null;
  params: Record<string, string>;
  /** When no route of the method matches: the methods that do (for a 405's Allow). */
  methods: string[];
}

/**
 * The routes as a tree of path segments. A request's path is walked in place (no split, no
 * substring but the parameters' values), a literal segment tried before a parameter and the
 * parameter only if the literal's subtree has no route of the method.
 */
export class RouteTable {
  private readonly root = segment();

  constructor(readonly routes: Route[]) {
    for (const r of routes) {
      let node = this.root;
      const parts = r.path.split('/').slice(1);
      for (const [i, part] of parts.entries()) {
        if (part.startsWith('{') && r.tail && i === parts.length - 1) node = node.tail ??= segment();
        else if (part.startsWith('{')) node = node.param ??= segment();
        else {
          let next = node.fixed.find((f) => f.name === part)?.next;
          if (!next) node.fixed.push({ name: part, next: (next = segment()) });
          node = next;
        }
      }
      if (node.routes.has(r.method)) throw new Error(`two routes for ${r.method} ${r.path}`);
      node.routes.set(r.method, r);
    }
  }

  /** The route for a method and path (one trailing slash allowed); `methods` lists what the path allows when the method has none. */
  match(method: string, url: string): RouteMatch {
    const end = url.length > 1 && url.charCodeAt(url.length - 1) === SLASH ? url.length - 1 : url.length;
    const route = find(this.root, url, 1, end, method, 0);
    if (route) {
      const params: Record<string, string> = {};
      for (let i = 0; i < route.names.length; i++) params[route.names[i]!] = safeDecode(url.slice(BOUNDS[2 * i], BOUNDS[2 * i + 1]));
      return { route, params, methods: [] };
    }
    const methods = new Set<string>();
    collectMethods(this.root, url, 1, end, methods);
    return { route: null, params: {}, methods: [...methods] };
  }
}

const SLASH = 47;
/** Where each parameter of the path being matched starts and ends (the walk is synchronous: one scratch array for every match). */
const BOUNDS = new Int32Array(64);

/** Where the segment starting at `start` ends (exclusive): the next slash, or the end of the path. */
function segmentEnd(url: string, start: number, end: number): number {
  const slash = url.indexOf('/', start);
  return slash < 0 || slash > end ? end : slash;
}

/**
 * Is the segment at `start` the literal `name` (the path ends or a slash follows)? A loop of
 * charCodeAt: `startsWith` with an offset costs ~50 ns a call on Node 20, and finding the segment's
 * end first (indexOf) ~10 ns a level.
 */
function isSegment(url: string, start: number, end: number, name: string): boolean {
  const stop = start + name.length;
  if (stop > end || (stop < end && url.charCodeAt(stop) !== SLASH)) return false;
  for (let i = 0; i < name.length; i++) if (url.charCodeAt(start + i) !== name.charCodeAt(i)) return false;
  return true;
}

/** Depth first, a literal segment before a parameter; a parameter is never empty. BOUNDS gets the `p`th parameter's start and end. */
function find(node: Segment, url: string, start: number, end: number, method: string, p: number): Route | null {
  if (start > end) return node.routes.get(method) ?? null;
  const fixed = node.fixed;
  for (let i = 0; i < fixed.length; i++) {
    const f = fixed[i]!;
    if (!isSegment(url, start, end, f.name)) continue;
    const r = find(f.next, url, start + f.name.length + 1, end, method, p);
    if (r) return r;
  }
  if (p >= BOUNDS.length) return null;
  const stop = segmentEnd(url, start, end);
  if (node.param && stop > start) {
    BOUNDS[p] = start;
    BOUNDS[p + 1] = stop;
    const r = find(node.param, url, stop + 1, end, method, p + 2);
    if (r) return r;
  }
  // last: a parameter that takes the rest of the path
  const rest = node.tail?.routes.get(method);
  if (!rest || stop === start) return null;
  BOUNDS[p] = start;
  BOUNDS[p + 1] = end;
  return rest;
}

function collectMethods(node: Segment, url: string, start: number, end: number, methods: Set<string>): void {
  if (start > end) {
    for (const m of node.routes.keys()) methods.add(m);
    return;
  }
  for (const f of node.fixed) if (isSegment(url, start, end, f.name)) collectMethods(f.next, url, start + f.name.length + 1, end, methods);
  const stop = segmentEnd(url, start, end);
  if (node.param && stop > start) collectMethods(node.param, url, stop + 1, end, methods);
  if (node.tail && stop > start) for (const m of node.tail.routes.keys()) methods.add(m);
}

/** decodeURIComponent that leaves a malformed escape (`%zz`) as it is instead of throwing. */
export function safeDecode(s: string): string {
  if (!s.includes('%')) return s;
  try {
    return decodeURIComponent(s);
  } catch {
    return s;
  }
}
