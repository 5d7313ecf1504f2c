/**
 * The REST lines of OpenHands' agent-server shape (what `@openhands/typescript-client` calls), in
 * the same table form as `routes.ts`. The conversation-level ones are listed before
 * `/api/conversations/:conversation_id` so that `search` and `count` are never read as an id.
 */
import { asLoc, bodyLoc, idOnly, queryLoc, type Loc, type Route, type RouteRequest } from './route.js';

const idOrBody = (p: PropertyKey[]): Loc => (p[0] === 'conversation_id' ? ['path', 'conversation_id'] : ['body', ...asLoc(p)]);
const idOrQuery = (p: PropertyKey[]): Loc => (p[0] === 'conversation_id' ? ['path', 'conversation_id'] : ['query', ...asLoc(p)]);
const objectBody = (r: RouteRequest) => (r.body && typeof r.body === 'object' && !Array.isArray(r.body) ? r.body : {});
const withId = (r: RouteRequest) => ({ ...objectBody(r), conversation_id: r.params.conversation_id });

/** `GET /api/conversations?ids=a,b` (or `ids=a&ids=b`) is the client's get-many; without `ids` the listing. */
export const GET_MANY: Pick<Route, 'alternative' | 'input'> = {
  alternative: { procedure: 'getConversations', when: (r) => 'ids' in r.query },
  input: (r) => ('ids' in r.query ? idsInput(r) : r.query),
};
/** The input of a get-many: every `ids` value, comma lists split. */
const idsInput = (r: RouteRequest) => {
  const extra = Object.keys(r.query).filter((k) => k !== 'ids');
  const ids = new URLSearchParams(r.rawQuery ?? '')
    .getAll('ids')
    .flatMap((v) => v.split(','))
    .filter(Boolean);
  return extra.length ? { ids, ...Object.fromEntries(extra.map((k) => [k, r.query[k]])) } : { ids };
};

export const AGENT_SERVER_CONVERSATION_ROUTES: Route[] = [
  {
    method: 'GET',
    path: '/api/conversations/search',
    procedure: 'searchConversations',
    input: (r) => r.query,
    loc: queryLoc,
    summary: 'Search Conversations',
    tag: 'Conversations',
  },
  {
    method: 'GET',
    path: '/api/conversations/count',
    procedure: 'countConversations',
    input: (r) => r.query,
    loc: queryLoc,
    summary: 'Count Conversations',
    tag: 'Conversations',
  },
  {
    method: 'PATCH',
    path: '/api/conversations/:conversation_id',
    procedure: 'updateConversation',
    body: true,
    input: withId,
    loc: idOrBody,
    summary: 'Update Conversation',
    tag: 'Conversations',
  },
];

export const AGENT_SERVER_ROUTES: Route[] = [
  {
    method: 'GET',
    path: '/api/conversations/:conversation_id/agent_final_response',
    procedure: 'agentFinalResponse',
    input: idOnly,
    loc: idOrQuery,
    summary: 'Agent Final Response',
    tag: 'Conversations',
  },
  {
    method: 'POST',
    path: '/api/conversations/:conversation_id/confirmation_policy',
    procedure: 'setConfirmationPolicy',
    body: true,
    input: withId,
    loc: idOrBody,
    summary: 'Set Confirmation Policy',
    tag: 'Conversations',
  },
  {
    method: 'POST',
    path: '/api/conversations/:conversation_id/secrets',
    procedure: 'updateConversationSecrets',
    body: true,
    input: withId,
    loc: idOrBody,
    summary: 'Update Conversation Secrets',
    tag: 'Conversations',
  },
  {
    method: 'POST',
    path: '/api/conversations/:conversation_id/condense',
    procedure: 'condense',
    input: idOnly,
    loc: idOrQuery,
    summary: 'Condense Conversation',
    tag: 'Conversations',
  },
  {
    method: 'POST',
    path: '/api/conversations/:conversation_id/ask_agent',
    procedure: 'askAgent',
    body: true,
    input: withId,
    loc: idOrBody,
    summary: 'Ask Agent',
    tag: 'Conversations',
  },
];

/** Workspace side channels: no conversation in the path (the core's locator finds it from the path or cwd). */
export const SIDE_CHANNEL_ROUTES: Route[] = [
  {
    method: 'POST',
    path: '/api/bash/execute_bash_command',
    procedure: 'executeBash',
    body: true,
    input: (r) => r.body,
    loc: bodyLoc,
    summary: 'Execute Bash Command',
    tag: 'Bash',
  },
  {
    method: 'POST',
    path: '/api/bash/start_bash_command',
    procedure: 'startBash',
    body: true,
    input: (r) => r.body,
    loc: bodyLoc,
    summary: 'Start Bash Command',
    tag: 'Bash',
  },
  {
    method: 'GET',
    path: '/api/bash/bash_events/search',
    procedure: 'searchBashEvents',
    input: (r) => r.query,
    loc: queryLoc,
    summary: 'Search Bash Events',
    tag: 'Bash',
  },
  {
    method: 'GET',
    path: '/api/bash/bash_events/:event_id',
    procedure: 'getBashEvent',
    input: (r) => ({ event_id: r.params.event_id }),
    loc: (p) => ['path', ...asLoc(p)],
    summary: 'Get Bash Event',
    tag: 'Bash',
  },
  {
    method: 'GET',
    path: '/api/bash/bash_events',
    procedure: 'batchGetBashEvents',
    body: true,
    input: (r) => r.body,
    loc: bodyLoc,
    summary: 'Batch Get Bash Events',
    tag: 'Bash',
  },
  {
    method: 'DELETE',
    path: '/api/bash/bash_events',
    procedure: 'clearBashEvents',
    input: () => undefined,
    loc: queryLoc,
    summary: 'Clear Bash Events',
    tag: 'Bash',
  },
  {
    method: 'POST',
    path: '/api/file/upload',
    procedure: 'uploadFile',
    body: 'multipart',
    input: (r) => ({ ...r.query, content: r.body }),
    loc: (p) => (p[0] === 'content' ? ['body', 'file'] : queryLoc(p)),
    summary: 'Upload File',
    tag: 'Files',
  },
  {
    method: 'GET',
    path: '/api/file/download',
    procedure: 'downloadFile',
    input: (r) => r.query,
    loc: queryLoc,
    summary: 'Download File',
    tag: 'Files',
  },
  {
    method: 'GET',
    path: '/api/git/changes',
    procedure: 'gitChanges',
    input: (r) => r.query,
    loc: queryLoc,
    summary: 'Git Changes',
    tag: 'Git',
  },
  {
    method: 'GET',
    path: '/api/git/diff',
    procedure: 'gitDiff',
    input: (r) => r.query,
    loc: queryLoc,
    summary: 'Git Diff',
    tag: 'Git',
  },
  {
    method: 'GET',
    path: '/api/tools',
    procedure: 'listTools',
    input: () => undefined,
    loc: queryLoc,
    summary: 'List Tools',
    tag: 'Tools',
  },
];
