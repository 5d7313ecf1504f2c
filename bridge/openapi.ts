/** GET /openapi.json: OpenAPI 3.1.0 generated from the zod schemas and the route table. */
import { z } from 'zod';
import * as AS from '../src/api/agent-server-schemas.js';
import * as S from '../src/api/schemas.js';
import type { Route } from './route.js';

type Json = Record<string, unknown>;
const ref = (id: string) => ({ $ref: `#/components/schemas/${id}` });

/** What each procedure reads and returns, for the document. */
const SHAPES: Record<string, { body?: string; query?: z.ZodObject; response: string | Json }> = {
  createConversation: { body: 'InitSessionRequest', response: 'ConversationResponse' },
  sendMessage: { body: 'SendMessageRequest', response: 'Success' },
  addGitProviders: { body: 'POSTProviderModel', response: 'MessageResponse' },
  listConversations: { query: S.ListConversationsInput, response: 'ConversationPage' },
  getConversation: { response: 'ConversationInfo' },
  deleteConversation: { response: 'Success' },
  searchEvents: { query: S.SearchEventsQuery, response: 'EventPage' },
  countEvents: { query: S.CountEventsQuery, response: { type: 'integer' } },
  getEvent: { response: 'Event' },
  run: { response: 'Success' },
  pause: { response: 'Success' },
  interrupt: { response: 'Success' },
  getMcpStatus: { response: 'McpStatusView' },
  getSettings: { response: 'SettingsView' },
  saveSettings: { body: 'SettingsUpdate', response: 'SettingsView' },
  listSecrets: { response: 'SecretList' },
  createSecret: { body: 'CreateSecret', response: 'SecretInfo' },
  updateSecret: { body: 'UpdateSecret', response: 'Success' },
  deleteSecret: { response: 'Success' },
  // OpenHands agent-server shape (POST /api/conversations with agent/workspace/initial_message is startConversation)
  startConversation: { body: 'StartConversationRequest', response: 'ConversationInfo' },
  searchConversations: { query: AS.ConversationSearchQuery, response: 'ConversationPage' },
  countConversations: { query: AS.ConversationCountQuery, response: { type: 'integer' } },
  getConversations: { response: { type: 'array', items: { anyOf: [ref('ConversationInfo'), { type: 'null' }] } } },
  updateConversation: { body: 'UpdateConversationRequest', response: 'Success' },
  agentFinalResponse: { response: { type: 'object', properties: { response: { type: 'string' } } } },
  askAgent: { response: { type: 'object', properties: { response: { type: 'string' } } } },
  executeBash: { body: 'ExecuteBashRequest', response: { type: 'object', description: 'BashOutput' } },
  startBash: { body: 'ExecuteBashRequest', response: { type: 'object', description: 'BashCommand' } },
  searchBashEvents: { query: AS.BashEventSearchQuery, response: { type: 'object', description: '{items, next_page_id}' } },
  downloadFile: { query: AS.WorkspacePathQuery.omit({ ref: true }), response: { type: 'string', format: 'binary' } },
  gitChanges: {
    query: AS.WorkspacePathQuery.omit({ ref: true }),
    response: {
      type: 'array',
      items: { type: 'object', properties: { path: { type: 'string' }, status: { enum: ['ADDED', 'UPDATED', 'DELETED', 'MOVED'] } } },
    },
  },
  gitDiff: {
    query: AS.WorkspacePathQuery,
    response: { type: 'object', properties: { original: { type: ['string', 'null'] }, modified: { type: ['string', 'null'] } } },
  },
  listTools: { response: { type: 'array', items: { type: 'string' } } },
  uploadFile: { query: AS.WorkspacePathQuery.omit({ ref: true }), response: 'Success' },
};

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

function operationId(r: Route): string {
  if (r.operationId) return r.operationId;
  const p = r.path.replace(/:([a-z_]+)/g, '_$1_').replace(/[^a-zA-Z0-9]+/g, '_');
  return `${r.summary.toLowerCase().replace(/\s+/g, '_')}${p}_${r.method.toLowerCase()}`;
}

export function buildOpenApi(routes: Route[], version: string, authEnabled: boolean): Json {
  const paths: Record<string, Json> = {};
  for (const r of routes) {
    const shape = SHAPES[r.procedure] ?? { response: 'Success' };
    const oaPath = r.path.replace(/:([a-z_]+)/g, '{$1}');
    const parameters: Json[] = [];
    for (const m of r.path.matchAll(/:([a-z_]+)/g)) {
      parameters.push({
        name: m[1],
        in: 'path',
        required: true,
        schema: m[1] === 'conversation_id' ? { type: 'string', format: 'uuid', title: 'Conversation Id' } : { type: 'string', title: m[1] },
      });
    }
    if (shape.query) {
      const qs = z.toJSONSchema(shape.query, { io: 'input', unrepresentable: 'any' }) as { properties?: Record<string, Json>; required?: string[] };
      for (const [name, schema] of Object.entries(qs.properties ?? {})) {
        parameters.push({ name, in: 'query', required: qs.required?.includes(name) ?? false, schema });
      }
    }
    const response = typeof shape.response === 'string' ? ref(shape.response) : shape.response;
    const op: Json = {
      tags: [r.tag],
      summary: r.summary,
      operationId: operationId(r),
      responses: {
        [String(r.status ?? 200)]: { description: 'Successful Response', content: { 'application/json': { schema: response } } },
        '422': { description: 'Validation Error', content: { 'application/json': { schema: ref('HTTPValidationError') } } },
      },
    };
    if (parameters.length) op.parameters = parameters;
    if (shape.body) op.requestBody = { required: true, content: { 'application/json': { schema: ref(shape.body) } } };
    if (r.body === 'multipart') {
      op.requestBody = {
        required: true,
        content: { 'multipart/form-data': { schema: { type: 'object', properties: { file: { type: 'string', format: 'binary' } }, required: ['file'] } } },
      };
    }
    if (r.path.includes(':conversation_id') && r.procedure !== 'sendMessage') {
      (op.responses as Json)['404'] = { description: 'Not Found', content: { 'application/json': { schema: ref('ErrorDetail') } } };
    }
    if (r.procedure === 'sendMessage') op.security = [];
    paths[oaPath] = { ...(paths[oaPath] as Json | undefined), [r.method.toLowerCase()]: op };
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
