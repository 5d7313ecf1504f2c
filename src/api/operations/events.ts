/** A conversation's events: send a message (the hot path), search, count, one event, and the answer to a confirmation. */
import * as agentServer from '../../conversation/agent-server.js';
import { countEventsFiltered, eventPredicate, hasExtraFilters } from '../../conversation/event-search.js';
import { NotFoundError } from '../../errors.js';
import { AgentServerSchemas as AS } from '../agent-server-schemas.js';
import { jsonOutput, mutation, query } from '../operation.js';
import { quickSendMessageInput } from '../quick-input.js';
import { ApiSchemas as A } from '../schemas.js';

const EVENTS = '/api/conversations/{conversation_id}/events';

export const eventOperations = {
  sendMessage: mutation({
    input: () => A.SendMessageInput,
    rest: {
      method: 'POST',
      path: EVENTS,
      body: { field: 'message' },
      summary: 'Send Message',
      tag: 'Events',
      operationId: 'send_message_api_conversations__conversation_id__events_post',
    },
    handler: (c, i) => c.service.sendMessage(i.conversation_id, i.message),
    quick: quickSendMessageInput,
  }),
  /** REST streams the page as it is read; tRPC, which serialises its answers whole, gets it collected. */
  searchEvents: jsonOutput(
    query({
      input: () => A.SearchEventsInput,
      rest: { method: 'GET', path: `${EVENTS}/search`, query: true, summary: 'Search Events', tag: 'Events', doc: { response: 'EventPage' } },
      handler: async (c, i) => {
        await c.conversations.require(i.conversation_id);
        return c.events.page(i.conversation_id, i, hasExtraFilters(i) ? eventPredicate(i) : undefined);
      },
    }),
    (page) => page.collect(),
  ),
  countEvents: query({
    input: () => A.CountEventsInput,
    rest: { method: 'GET', path: `${EVENTS}/count`, query: true, summary: 'Count Events', tag: 'Events', doc: { response: { type: 'integer' } } },
    handler: async (c, i) => {
      await c.conversations.require(i.conversation_id);
      return hasExtraFilters(i) ? countEventsFiltered(c.events, i.conversation_id, i) : c.events.count(i.conversation_id, i);
    },
  }),
  getEvent: query({
    input: () => A.GetEventInput,
    rest: { method: 'GET', path: `${EVENTS}/{event_id}`, summary: 'Get Event', tag: 'Events', doc: { response: 'Event' } },
    handler: async (c, i) => {
      await c.conversations.require(i.conversation_id);
      const ev = await c.events.get(i.conversation_id, i.event_id);
      if (!ev) throw new NotFoundError('Event not found');
      return ev;
    },
  }),
  respondToConfirmation: mutation({
    input: () => AS.ConfirmationResponseInput,
    rest: { method: 'POST', path: `${EVENTS}/respond_to_confirmation`, body: 'fields', summary: 'Respond To Confirmation', tag: 'Events' },
    handler: (c, i) => agentServer.respondToConfirmation(c, i.conversation_id, i.accept, i.reason ?? null),
  }),
};
