/**
 * OpenHands agent-server's conversation routes (what `@openhands/typescript-client` calls): its
 * create (on the interface's path, told apart by its body), search, count, get-many (the listing's
 * path with `ids`), title and tags, the final response, the confirmation policy, the conversation's
 * secrets, condensing and a side question.
 */
import * as agentServer from '../../conversation/agent-server.js';
import { launchAgentProfile } from '../../conversation/agent-server-features.js';
import { AGENT_SERVER_CREATE_KEYS, AgentServerSchemas as AS } from '../agent-server-schemas.js';
import { mutation, query } from '../operation.js';
import { ApiSchemas as A } from '../schemas.js';

const ONE = '/api/conversations/{conversation_id}';
const RESPONSE = { type: 'object', properties: { response: { type: 'string' } } };

export const agentServerOperations = {
  startConversation: mutation({
    input: () => AS.StartConversationRequest,
    rest: {
      method: 'POST',
      path: '/api/conversations',
      body: 'input',
      when: { bodyHasAnyKey: AGENT_SERVER_CREATE_KEYS },
      summary: 'Start Conversation',
      tag: 'Conversations',
      doc: { response: 'ConversationInfo' },
    },
    handler: (c, i) => agentServer.startConversation({ ...c, launch: (id) => launchAgentProfile({ ...c.server, settings: c.settings }, id) }, i),
  }),
  searchConversations: query({
    input: () => AS.ConversationSearchQuery,
    rest: {
      method: 'GET',
      path: '/api/conversations/search',
      query: true,
      summary: 'Search Conversations',
      tag: 'Conversations',
      doc: { response: 'ConversationPage' },
    },
    handler: (c, i) => agentServer.searchConversations(c.conversations, i),
  }),
  countConversations: query({
    input: () => AS.ConversationCountQuery,
    rest: {
      method: 'GET',
      path: '/api/conversations/count',
      query: true,
      summary: 'Count Conversations',
      tag: 'Conversations',
      doc: { response: { type: 'integer' } },
    },
    handler: (c, i) => agentServer.countConversations(c.conversations, i),
  }),
  /** `GET /api/conversations?ids=a,b` (or `ids=a&ids=b`): the infos in that order; without `ids` the path is the listing. */
  getConversations: query({
    input: () => AS.ConversationIdsInput,
    rest: {
      method: 'GET',
      path: '/api/conversations',
      query: { lists: ['ids'] },
      when: { queryHas: 'ids' },
      summary: 'Get Conversations',
      tag: 'Conversations',
      doc: { response: { type: 'array', items: { anyOf: [{ $ref: '#/components/schemas/ConversationInfo' }, { type: 'null' }] } } },
    },
    handler: (c, i) => agentServer.getConversations(c.conversations, i.ids),
  }),
  updateConversation: mutation({
    input: () => AS.UpdateConversationInput,
    rest: { method: 'PATCH', path: ONE, body: 'fields', summary: 'Update Conversation', tag: 'Conversations', doc: { body: 'UpdateConversationRequest' } },
    handler: (c, i) => agentServer.updateConversation(c, i.conversation_id, i),
  }),
  agentFinalResponse: query({
    input: () => A.ConversationIdInput,
    rest: { method: 'GET', path: `${ONE}/agent_final_response`, summary: 'Agent Final Response', tag: 'Conversations', doc: { response: RESPONSE } },
    handler: (c, i) => agentServer.agentFinalResponse(c, i.conversation_id),
  }),
  setConfirmationPolicy: mutation({
    input: () => AS.SetConfirmationPolicyInput,
    rest: { method: 'POST', path: `${ONE}/confirmation_policy`, body: 'fields', summary: 'Set Confirmation Policy', tag: 'Conversations' },
    // where the loop runs: the run under way reads it at its next step
    handler: (c, i) => c.service.updateAgentSettings(i.conversation_id, { confirmation_policy: i.policy }),
  }),
  updateConversationSecrets: mutation({
    input: () => AS.UpdateSecretsInput,
    rest: { method: 'POST', path: `${ONE}/secrets`, body: 'fields', summary: 'Update Conversation Secrets', tag: 'Conversations' },
    handler: (c, i) => agentServer.setConversationSecrets(c, i.conversation_id, i.secrets),
  }),
  condense: mutation({
    input: () => A.ConversationIdInput,
    rest: { method: 'POST', path: `${ONE}/condense`, summary: 'Condense Conversation', tag: 'Conversations' },
    handler: async (c, i) => ({ success: await c.service.condense(i.conversation_id) }),
  }),
  askAgent: mutation({
    input: () => AS.AskAgentInput,
    rest: { method: 'POST', path: `${ONE}/ask_agent`, body: 'fields', summary: 'Ask Agent', tag: 'Conversations', doc: { response: RESPONSE } },
    handler: async (c, i) => ({ response: await c.service.ask(i.conversation_id, i.question) }),
  }),
};
