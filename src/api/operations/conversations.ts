/** The interface's conversations: create or join, list, one, delete, and the agent loop's controls. */
import { fullMcpConfig, redactMcpConfig } from '../../tools/mcp/config.js';
import { mutation, query } from '../operation.js';
import { ApiSchemas as A } from '../schemas.js';

const ONE = '/api/conversations/{conversation_id}';

export const conversationOperations = {
  createConversation: mutation({
    input: () => A.NewConversationRequest,
    rest: {
      method: 'POST',
      path: '/api/conversations',
      body: 'input',
      summary: 'New Conversation',
      tag: 'Conversations',
      operationId: 'new_conversation_api_conversations_post',
      doc: { response: 'ConversationResponse' },
    },
    handler: (c, i) => c.service.createConversation(i),
  }),
  listConversations: query({
    input: () => A.ListConversationsInput,
    rest: {
      method: 'GET',
      path: '/api/conversations',
      query: true,
      summary: 'List Conversations',
      tag: 'Conversations',
      doc: { response: 'ConversationPage' },
    },
    handler: (c, i) => c.conversations.list(i.page_id, i.limit),
  }),
  getConversation: query({
    input: () => A.ConversationIdInput,
    rest: { method: 'GET', path: ONE, summary: 'Get Conversation', tag: 'Conversations', doc: { response: 'ConversationInfo' } },
    handler: (c, i) => c.conversations.get(i.conversation_id),
  }),
  deleteConversation: mutation({
    input: () => A.ConversationIdInput,
    rest: { method: 'DELETE', path: ONE, summary: 'Delete Conversation', tag: 'Conversations' },
    handler: (c, i) => c.service.deleteConversation(i.conversation_id),
  }),
  run: mutation({
    input: () => A.ConversationIdInput,
    rest: { method: 'POST', path: `${ONE}/run`, summary: 'Run Conversation', tag: 'Conversations' },
    handler: (c, i) => c.service.run(i.conversation_id),
  }),
  pause: mutation({
    input: () => A.ConversationIdInput,
    rest: { method: 'POST', path: `${ONE}/pause`, summary: 'Pause Conversation', tag: 'Conversations' },
    handler: (c, i) => c.service.pause(i.conversation_id),
  }),
  interrupt: mutation({
    input: () => A.ConversationIdInput,
    rest: { method: 'POST', path: `${ONE}/interrupt`, summary: 'Interrupt Conversation', tag: 'Conversations' },
    handler: (c, i) => c.service.interrupt(i.conversation_id),
  }),
  getMcpStatus: query({
    input: () => A.ConversationIdInput,
    rest: { method: 'GET', path: `${ONE}/mcp`, summary: 'MCP Server Status', tag: 'MCP', doc: { response: 'McpStatusView' } },
    handler: async (c, i) => {
      const config = redactMcpConfig(await c.conversations.mcpConfig(i.conversation_id));
      return { config: fullMcpConfig(config), servers: await c.agent.mcpStatus(i.conversation_id) };
    },
  }),
};
