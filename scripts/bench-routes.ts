/**
 * What finding a REST route costs a request: match the method and path, pick the operation (a
 * path two operations share), build its input from the parameters and body. Per request, for the
 * hot path (`POST /api/conversations/{id}/events`) and a few others, in this process, against a
 * baseline measured in the same run: one anchored regex and an object literal (what a table of
 * one route would cost). With `--compare DIR`, DIR's route table (another checkout) is measured in
 * the same run too, alternating. Prints numbers; not a test.
 *
 *   npx tsx scripts/bench-routes.ts [--iterations 2000000] [--runs 5] [--compare DIR]
 */
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const { values: args } = parseArgs({
  options: { iterations: { type: 'string', default: '2000000' }, runs: { type: 'string', default: '5' }, compare: { type: 'string' } },
});
const N = Number(args.iterations);
const RUNS = Number(args.runs);
const HERE = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const ID = '3f1c2d4e-5a6b-4c7d-8e9f-0a1b2c3d4e5f';

const CASES: [string, string, unknown][] = [
  ['POST', `/api/conversations/${ID}/events`, { content: [{ type: 'text', text: 'hi' }] }],
  ['GET', `/api/conversations/${ID}`, undefined],
  ['GET', `/api/conversations/${ID}/events/search`, undefined],
  ['POST', '/api/conversations', {}],
  ['GET', '/api/tools/', undefined],
];

/** The route's input for a request, or null when no route matched. */
type Resolve = (method: string, url: string, body: unknown) => unknown;
let inputs: unknown;

/** A checkout's route table, whichever of its two forms it has (the table of operations, or the older list of routes). */
async function resolver(root: string): Promise<Resolve> {
  const routes = await import(path.join(root, 'bridge/routes.ts'));
  if (routes.RouteTable) {
    const table = new routes.RouteTable(routes.tableRoutes());
    return (method, url, body) => {
      const { route, params } = table.match(method, url);
      if (!route) return null;
      const r = { params, query: {}, body };
      inputs = route.pick(r).input(r);
      return route;
    };
  }
  const compiled = routes.compileRoutes(routes.ROUTES);
  return (method, url, body) => {
    const { route, params } = routes.matchRoute(compiled, method, url);
    if (!route) return null;
    const r = { params, query: {}, body };
    route.alternative?.when(r);
    inputs = route.input(r);
    return route;
  };
}

/** The floor: one anchored regex and the input as a literal. */
const baseline: Resolve = (_method, url, body) => {
  const m = /^\/api\/conversations\/([^/]+)\/events\/?$/.exec(url);
  if (!m) return null;
  inputs = { conversation_id: m[1], message: body };
  return m;
};

/** CPU ns per request of `resolve` on one case. */
function measure(resolve: Resolve, [method, url, body]: [string, string, unknown]): number {
  let sink = 0;
  // CPU time, not wall time: on a shared machine the process is descheduled between iterations
  const t0 = process.cpuUsage();
  for (let i = 0; i < N; i++) if (resolve(method, url, body)) sink++;
  const cpu = process.cpuUsage(t0);
  const ns = ((cpu.user + cpu.system) * 1000) / N;
  if (sink !== N || inputs === null) throw new Error(`${method} ${url}: no route`);
  return ns;
}

const sides: [string, Resolve][] = [['this checkout', await resolver(HERE)]];
if (args.compare) sides.push([args.compare, await resolver(path.resolve(args.compare))]);
const best = new Map<string, number>();
const keep = (key: string, ns: number) => best.set(key, Math.min(best.get(key) ?? Number.POSITIVE_INFINITY, ns));
for (let run = 0; run < RUNS; run++) {
  keep('baseline', measure(baseline, CASES[0]!));
  for (const [name, resolve] of run % 2 ? [...sides].reverse() : sides) for (const c of CASES) keep(`${name}\t${c[0]} ${c[1]}`, measure(resolve, c));
}
const floor = best.get('baseline')!;
console.log(`baseline (one regex + a literal): ${floor.toFixed(0)} ns per request; best of ${RUNS} runs of ${N}`);
for (const [key, ns] of best) if (key !== 'baseline') console.log(`${key}\t${ns.toFixed(0)} ns\t${(ns / floor).toFixed(2)}× baseline`);
