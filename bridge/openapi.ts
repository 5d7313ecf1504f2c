/**
 * GET /openapi.json: OpenAPI 3.1.0 generated from the operations table (src/api/operations.ts: each
 * operation's REST method, path, summary, tag and what its `doc` adds) and the zod schemas (the
 * components, the query parameters).
 */
import * as z from 'zod';
import type { AnyOperation, RestRoute } from '../src/api/operation.js';
import { operations } from '../src/api/operations.js';
import { alternativesByRoute, pathParams } from './route.js';

type Json = Record<string, unknown>;
const ref = (id: string) => ({ $ref: `#/components/schemas/${id}` });

function componentSchemas(): Json {
  const out = z.toJSONSchema(z.globalRegistry, {
    io: 'input',
    uri: (id) => `#/components/schemas/${id}`,
    unrepresentable: 'any',
  }) as { schemas: Record<string, Json> };
  const schemas: Json = {};
  for (const [id, s] of Object.entries(out.schemas)) {
    const { $schema: _s, $id: _i, ...rest } = s;
    schemas[id] = rest;
  }
  return schemas;
}

function operationId(rest: RestRoute): string {
  if (rest.operationId) return rest.operationId;
  const p = rest.path.replace(/\{([a-z_]+)\}/g, '_$1_').replace(/[^a-zA-Z0-9]+/g, '_');
  return `${rest.summary.toLowerCase().replace(/\s+/g, '_')}${p}_${rest.method.toLowerCase()}`;
}

/** The registered component a schema is (its `.meta({ id })`), if any. */
const componentOf = (schema: z.ZodType | undefined) => (schema ? z.globalRegistry.get(schema)?.id : undefined);

/** The request body's component: what `doc` names, else the input's (or its body field's) when it is registered. */
function bodyComponent(op: AnyOperation): string | undefined {
  const { rest } = op;
  if (rest.doc?.body) return rest.doc.body;
  if (rest.body === 'input') return componentOf(op.input);
  if (typeof rest.body === 'object' && !rest.body.multipart) return componentOf((op.input as z.ZodObject).shape?.[rest.body.field]);
  return undefined;
}

/** The path's parameters, then the query's: the input's fields that are neither path parameters nor the body (or what `doc.query` says). */
function parameters(op: AnyOperation): Json[] {
  const { rest } = op;
  const names = pathParams(rest.path);
  const out: Json[] = names.map((name) => ({
    name,
    in: 'path',
    required: true,
    schema: name === 'conversation_id' ? { type: 'string', format: 'uuid', title: 'Conversation Id' } : { type: 'string', title: name },
  }));
  if (!rest.query) return out;
  const qs = z.toJSONSchema(rest.doc?.query?.() ?? op.input, { io: 'input', unrepresentable: 'any' }) as {
    properties?: Record<string, Json>;
    required?: string[];
  };
  const notQuery = new Set([...names, ...(typeof rest.body === 'object' ? [rest.body.field] : [])]);
  for (const [name, schema] of Object.entries(qs.properties ?? {})) {
    if (!notQuery.has(name)) out.push({ name, in: 'query', required: qs.required?.includes(name) ?? false, schema });
  }
  return out;
}

/** The other operations on the same method and path, in a sentence: what makes a request theirs. */
function alternativesText(alternatives: [string, AnyOperation][]): string {
  return alternatives
    .map(([name, { rest }]) => {
      const when = rest.when!;
      const which = 'queryHas' in when ? `the \`${when.queryHas}\` query parameter` : `a body with ${orList(when.bodyHasAnyKey.map((k) => `\`${k}\``))}`;
      return `With ${which}, this path runs ${rest.summary} (\`${name}\`) instead.`;
    })
    .join(' ');
}
const orList = (xs: string[]) => (xs.length < 2 ? xs.join('') : `${xs.slice(0, -1).join(', ')} or ${xs.at(-1)}`);

function operationDoc(name: string, op: AnyOperation, alternatives: [string, AnyOperation][]): Json {
  const { rest } = op;
  const response = rest.doc?.response ?? 'Success';
  const doc: Json = {
    tags: [rest.tag],
    summary: rest.summary,
    operationId: operationId(rest),
    responses: {
      [String(rest.status ?? 200)]: {
        description: 'Successful Response',
        content: { 'application/json': { schema: typeof response === 'string' ? ref(response) : response } },
      },
      '422': { description: 'Validation Error', content: { 'application/json': { schema: ref('HTTPValidationError') } } },
    },
  };
  if (alternatives.length) doc.description = alternativesText(alternatives);
  const params = parameters(op);
  if (params.length) doc.parameters = params;
  const body = bodyComponent(op);
  if (body) doc.requestBody = { required: true, content: { 'application/json': { schema: ref(body) } } };
  if (typeof rest.body === 'object' && rest.body.multipart) {
    const part = rest.body.multipart;
    doc.requestBody = {
      required: true,
      content: { 'multipart/form-data': { schema: { type: 'object', properties: { [part]: { type: 'string', format: 'binary' } }, required: [part] } } },
    };
  }
  // as the interface's document has it: the send is listed without a 404 and without the key
  if (rest.path.includes('{conversation_id}') && name !== 'sendMessage') {
    (doc.responses as Json)['404'] = { description: 'Not Found', content: { 'application/json': { schema: ref('ErrorDetail') } } };
  }
  if (name === 'sendMessage') doc.security = [];
  return doc;
}

export function buildOpenApi(version: string, authEnabled: boolean): Json {
  const paths: Record<string, Json> = {};
  const entries = Object.entries(operations) as [string, AnyOperation][];
  // every operation's input is read here, which builds every schema module (src/api/lazy-schemas.ts):
  // the components they register, those named only in `doc` too, are in the registry before it is read
  const byRoute = alternativesByRoute(entries);
  for (const [name, op] of entries) {
    const { rest } = op;
    if (rest.when) continue;
    const alternatives = byRoute.get(`${rest.method} ${rest.path}`) ?? [];
    paths[rest.path] = { ...(paths[rest.path] as Json | undefined), [rest.method.toLowerCase()]: operationDoc(name, op, alternatives) };
  }
  const health = (summary: string, schema: Json) => ({
    get: {
      tags: ['Server Details'],
      summary,
      operationId: `${summary.toLowerCase().replace(/\s+/g, '_')}_get`,
      security: [],
      responses: { '200': { description: 'Successful Response', content: { 'application/json': { schema } } } },
    },
  });
  const statusObj = { type: 'object', properties: { status: { type: 'string' } } };
  paths['/alive'] = health('Alive', statusObj);
  paths['/health'] = health('Health', statusObj);
  paths['/ready'] = health('Ready', statusObj);
  paths['/server_info'] = health('Server Info', ref('ServerInfo'));
  return {
    openapi: '3.1.0',
    info: {
      title: 'Parley',
      version,
      description:
        'Conversation service for AI coding agents. Events stream over WebSocket at /sockets/events/{conversation_id}; in-house callers use tRPC at /trpc.',
    },
    paths,
    components: {
      schemas: componentSchemas(),
      ...(authEnabled ? { securitySchemes: { APIKeyHeader: { type: 'apiKey', in: 'header', name: 'X-Session-API-Key' } } } : {}),
    },
    ...(authEnabled ? { security: [{ APIKeyHeader: [] }] } : {}),
  };
}
