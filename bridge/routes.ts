/**
 * Every REST route is one line: method, path, how the procedure's input is built from the
 * request, and where each input field came from (for the `loc` of a 422).
 */
import { isAgentServerCreate } from '../src/api/agent-server-schemas.js';
import { AGENT_SERVER_CONVERSATION_ROUTES, AGENT_SERVER_ROUTES, GET_MANY, SIDE_CHANNEL_ROUTES } from './agent-server-routes.js';
import { asLoc, bodyLoc, idOnly, type Route } from './route.js';

/** `conversation_id` (and `event_id`) come from the path, the rest from the query string. */
const pathOrQuery = (p: PropertyKey[]) => (p[0] === 'conversation_id' || p[0] === 'event_id' ? ['path', ...asLoc(p)] : ['query', ...asLoc(p)]);

export const ROUTES: Route[] = [
  {
    method: 'POST',
    path: '/api/conversations',
    procedure: 'createConversation',
    body: true,
    alternative: { procedure: 'startConversation', when: (r) => isAgentServerCreate(r.body) },
    input: (r) => r.body,
    loc: bodyLoc,
    summary: 'New Conversation',
    tag: 'Conversations',
    operationId: 'new_conversation_api_conversations_post',
  },
  {
    method: 'GET',
    path: '/api/conversations',
    procedure: 'listConversations',
    loc: (p) => ['query', ...asLoc(p)],
    summary: 'List Conversations',
    tag: 'Conversations',
    // `?ids=` is the agent-server get-many; otherwise the listing as it was
    ...GET_MANY,
  },
  // before /:conversation_id, which would capture them
  ...AGENT_SERVER_CONVERSATION_ROUTES,
  {
    method: 'GET',
    path: '/api/conversations/:conversation_id',
    procedure: 'getConversation',
    input: idOnly,
    loc: pathOrQuery,
    summary: 'Get Conversation',
    tag: 'Conversations',
  },
  {
    method: 'DELETE',
    path: '/api/conversations/:conversation_id',
    procedure: 'deleteConversation',
    input: idOnly,
    loc: pathOrQuery,
    summary: 'Delete Conversation',
    tag: 'Conversations',
  },
  {
    method: 'POST',
    path: '/api/conversations/:conversation_id/events',
    procedure: 'sendMessage',
    body: true,
    input: (r) => ({ conversation_id: r.params.conversation_id, message: r.body }),
    loc: (p) => (p[0] === 'conversation_id' ? ['path', 'conversation_id'] : ['body', ...asLoc(p.slice(1))]),
    summary: 'Send Message',
    tag: 'Events',
    operationId: 'send_message_api_conversations__conversation_id__events_post',
  },
  {
    method: 'GET',
    path: '/api/conversations/:conversation_id/events/search',
    procedure: 'searchEvents',
    input: (r) => ({ ...r.query, conversation_id: r.params.conversation_id }),
    loc: pathOrQuery,
    summary: 'Search Events',
    tag: 'Events',
  },
  {
    method: 'GET',
    path: '/api/conversations/:conversation_id/events/count',
    procedure: 'countEvents',
    input: (r) => ({ ...r.query, conversation_id: r.params.conversation_id }),
    loc: pathOrQuery,
    summary: 'Count Events',
    tag: 'Events',
  },
  {
    method: 'POST',
    path: '/api/conversations/:conversation_id/events/respond_to_confirmation',
    procedure: 'respondToConfirmation',
    body: true,
    input: (r) => ({ ...(r.body && typeof r.body === 'object' ? r.body : {}), conversation_id: r.params.conversation_id }),
    loc: (p) => (p[0] === 'conversation_id' ? ['path', 'conversation_id'] : ['body', ...asLoc(p)]),
    summary: 'Respond To Confirmation',
    tag: 'Events',
  },
  {
    method: 'GET',
    path: '/api/conversations/:conversation_id/events/:event_id',
    procedure: 'getEvent',
    input: (r) => ({ conversation_id: r.params.conversation_id, event_id: r.params.event_id }),
    loc: pathOrQuery,
    summary: 'Get Event',
    tag: 'Events',
  },
  {
    method: 'POST',
    path: '/api/conversations/:conversation_id/run',
    procedure: 'run',
    input: idOnly,
    loc: pathOrQuery,
    summary: 'Run Conversation',
    tag: 'Conversations',
  },
  {
    method: 'POST',
    path: '/api/conversations/:conversation_id/pause',
    procedure: 'pause',
    input: idOnly,
    loc: pathOrQuery,
    summary: 'Pause Conversation',
    tag: 'Conversations',
  },
  {
    method: 'POST',
    path: '/api/conversations/:conversation_id/interrupt',
    procedure: 'interrupt',
    input: idOnly,
    loc: pathOrQuery,
    summary: 'Interrupt Conversation',
    tag: 'Conversations',
  },
  {
    method: 'GET',
    path: '/api/conversations/:conversation_id/mcp',
    procedure: 'getMcpStatus',
    input: idOnly,
    loc: pathOrQuery,
    summary: 'MCP Server Status',
    tag: 'MCP',
  },
  {
    method: 'GET',
    path: '/api/settings',
    procedure: 'getSettings',
    input: () => undefined,
    loc: bodyLoc,
    summary: 'Get Settings',
    tag: 'Settings',
  },
  {
    method: 'POST',
    path: '/api/settings',
    procedure: 'saveSettings',
    body: true,
    input: (r) => r.body,
    loc: bodyLoc,
    summary: 'Store Settings',
    tag: 'Settings',
  },
  {
    method: 'GET',
    path: '/api/secrets',
    procedure: 'listSecrets',
    input: () => undefined,
    loc: bodyLoc,
    summary: 'List Secrets',
    tag: 'Secrets',
  },
  {
    method: 'POST',
    path: '/api/secrets',
    procedure: 'createSecret',
    body: true,
    status: 201,
    input: (r) => r.body,
    loc: bodyLoc,
    summary: 'Create Secret',
    tag: 'Secrets',
  },
  {
    method: 'PUT',
    path: '/api/secrets/:name',
    procedure: 'updateSecret',
    body: true,
    input: (r) => ({ ...(r.body && typeof r.body === 'object' ? r.body : {}), name: r.params.name }),
    loc: (p) => (p[0] === 'name' ? ['path', 'name'] : ['body', ...asLoc(p)]),
    summary: 'Update Secret',
    tag: 'Secrets',
  },
  {
    method: 'DELETE',
    path: '/api/secrets/:name',
    procedure: 'deleteSecret',
    input: (r) => ({ name: r.params.name }),
    loc: (p) => ['path', ...asLoc(p)],
    summary: 'Delete Secret',
    tag: 'Secrets',
  },
  {
    method: 'POST',
    path: '/api/add-git-providers',
    procedure: 'addGitProviders',
    body: true,
    input: (r) => r.body,
    loc: bodyLoc,
    summary: 'Store Provider Tokens',
    tag: 'Git',
    operationId: 'store_provider_tokens_api_add_git_providers_post',
  },
  ...AGENT_SERVER_ROUTES,
  ...SIDE_CHANNEL_ROUTES,
];

export interface CompiledRoute extends Route {
  regex: RegExp;
  names: string[];
}

export function compileRoutes(routes: Route[]): CompiledRoute[] {
  return routes.map((r) => {
    const names: string[] = [];
    const src = r.path.replace(/:([a-z_]+)/g, (_, n: string) => {
      names.push(n);
      return '([^/]+)';
    });
    return { ...r, regex: new RegExp(`^${src}/?$`), names };
  });
}

/** Finds the route for a path; `methods` lists what the path allows (for 405). */
export function matchRoute(routes: CompiledRoute[], method: string, url: string) {
  // the routes of this method first (the first one that matches wins); the others only for a 405's list
  for (const r of routes) {
    if (r.method !== method) continue;
    const m = r.regex.exec(url);
    if (!m) continue;
    const params: Record<string, string> = {};
    r.names.forEach((n, i) => (params[n] = safeDecode(m[i + 1]!)));
    return { route: r, params, methods: [] as string[] };
  }
  const methods = new Set<string>();
  for (const r of routes) if (r.regex.test(url)) methods.add(r.method);
  return { route: null, params: {}, methods: [...methods] };
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
