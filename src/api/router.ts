/** The typed core API. REST (the bridge) and /trpc both run these procedures. */
import { z } from 'zod';
import type { Core } from '../core.js';
import {
  AddGitProvidersRequest,
  ConversationIdInput,
  CountEventsInput,
  GetEventInput,
  ListConversationsInput,
  NewConversationRequest,
  SearchEventsInput,
  SendMessageInput,
  SubscribeInput,
  SettingsUpdate,
  CreateSecretInput,
  UpdateSecretInput,
  SecretNameInput,
} from './schemas.js';
import { eventStream } from './subscription.js';
import { procedure, router } from './trpc.js';
import { NotFoundError } from '../errors.js';
import { fullMcpConfig, redactMcpConfig } from '../tools/mcp/config.js';
import * as AS from './agent-server-schemas.js';
import * as agentServer from '../conversation/agent-server.js';
import { countEventsFiltered, eventPredicate, hasExtraFilters } from '../conversation/event-search.js';
import { TOOL_NAMES } from '../conversation/side-channels.js';
import type { EventPage } from '../events/page.js';

/**
 * Every operation once: its input schema and its handler. The tRPC router below and the REST
 * bridge are both built from this table, so the two doors run the same validation and the same
 * code; REST calls `runOperation` directly instead of going through tRPC's middleware chain
 * (measured: the server-side caller cost ~12 µs of the hot path's budget).
 */
const op = <I extends z.ZodType, O>(input: I, handler: (c: Core, i: z.output<I>) => Promise<O>) => ({ input, handler });
const NoInput = z.undefined();

export const operations = {
  createConversation: op(NewConversationRequest, (c, i) => c.service.createConversation(i)),
  sendMessage: op(SendMessageInput, (c, i) => c.service.sendMessage(i.conversation_id, i.message)),
  addGitProviders: op(AddGitProvidersRequest, (c, i) => c.settings.addGitProviders(i)),
  getConversation: op(ConversationIdInput, (c, i) => c.conversations.get(i.conversation_id)),
  listConversations: op(ListConversationsInput, (c, i) => c.conversations.list(i.page_id, i.limit)),
  deleteConversation: op(ConversationIdInput, (c, i) => c.service.deleteConversation(i.conversation_id)),
  searchEvents: op(SearchEventsInput, async (c, i) => (await eventPage(c, i)).collect()),
  /** REST's events/search: the same page, which the bridge streams as it is read (issue 12.4). */
  streamEvents: op(SearchEventsInput, eventPage),
  countEvents: op(CountEventsInput, async (c, i) => {
    await c.conversations.require(i.conversation_id);
    return hasExtraFilters(i) ? countEventsFiltered(c.events, i.conversation_id, i) : c.events.count(i.conversation_id, i);
  }),
  getEvent: op(GetEventInput, async (c, i) => {
    await c.conversations.require(i.conversation_id);
    const ev = await c.events.get(i.conversation_id, i.event_id);
    if (!ev) throw new NotFoundError('Event not found');
    return ev;
  }),
  run: op(ConversationIdInput, (c, i) => c.service.run(i.conversation_id)),
  pause: op(ConversationIdInput, (c, i) => c.service.pause(i.conversation_id)),
  interrupt: op(ConversationIdInput, (c, i) => c.service.interrupt(i.conversation_id)),
  getMcpStatus: op(ConversationIdInput, async (c, i) => {
    const config = redactMcpConfig(await c.conversations.mcpConfig(i.conversation_id));
    return { config: fullMcpConfig(config), servers: await c.agent.mcpStatus(i.conversation_id) };
  }),
  getSettings: op(NoInput, (c) => c.settings.publicSettings()),
  saveSettings: op(SettingsUpdate, (c, i) => c.settings.saveLlmSettings(i)),
  listSecrets: op(NoInput, (c) => c.settings.listSecrets()),
  createSecret: op(CreateSecretInput, (c, i) => c.settings.createSecret(i.name, i.value, i.description)),
  updateSecret: op(UpdateSecretInput, (c, i) => c.settings.updateSecret(i.name, i.value, i.description)),
  deleteSecret: op(SecretNameInput, (c, i) => c.settings.deleteSecret(i.name)),
  // OpenHands agent-server shape (@openhands/typescript-client)
  startConversation: op(AS.StartConversationRequest, (c, i) => agentServer.startConversation(c, i)),
  searchConversations: op(AS.ConversationSearchQuery, (c, i) => agentServer.searchConversations(c.conversations, i)),
  countConversations: op(AS.ConversationCountQuery, (c, i) => agentServer.countConversations(c.conversations, i)),
  getConversations: op(AS.ConversationIdsInput, (c, i) => agentServer.getConversations(c.conversations, i.ids)),
  updateConversation: op(AS.UpdateConversationInput, (c, i) => agentServer.updateConversation(c, i.conversation_id, i)),
  agentFinalResponse: op(ConversationIdInput, (c, i) => agentServer.agentFinalResponse(c, i.conversation_id)),
  setConfirmationPolicy: op(AS.SetConfirmationPolicyInput, (c, i) => agentServer.setConfirmationPolicy(c.conversations, i.conversation_id, i.policy)),
  updateConversationSecrets: op(AS.UpdateSecretsInput, (c, i) => agentServer.setConversationSecrets(c, i.conversation_id, i.secrets)),
  condense: op(ConversationIdInput, async (c, i) => {
    await c.conversations.require(i.conversation_id);
    return { success: await c.agent.runtime.condense(i.conversation_id) };
  }),
  askAgent: op(AS.AskAgentInput, async (c, i) => {
    await c.conversations.require(i.conversation_id);
    return { response: await c.agent.runtime.ask(i.conversation_id, i.question) };
  }),
  // workspace side channels (no conversation in the path: the locator finds it)
  executeBash: op(AS.ExecuteBashRequest, (c, i) => c.sideChannels.executeBash(i)),
  startBash: op(AS.ExecuteBashRequest, (c, i) => c.sideChannels.startBash(i)),
  searchBashEvents: op(AS.BashEventSearchQuery, async (c, i) => c.sideChannels.searchBash(i)),
  getBashEvent: op(AS.BashEventIdInput, async (c, i) => c.sideChannels.getBashEvent(i.event_id)),
  clearBashEvents: op(NoInput, async (c) => c.sideChannels.bash.clear()),
  batchGetBashEvents: op(AS.BashEventIdsInput, async (c, i) => i.map((id) => c.sideChannels.bash.get(id))),
  uploadFile: op(AS.WorkspaceUploadInput, (c, i) => c.sideChannels.upload(i)),
  downloadFile: op(AS.WorkspacePathQuery, (c, i) => c.sideChannels.download(i)),
  gitChanges: op(AS.WorkspacePathQuery, (c, i) => c.sideChannels.gitChanges(i)),
  gitDiff: op(AS.WorkspacePathQuery, (c, i) => c.sideChannels.gitDiff(i)),
  listTools: op(NoInput, async () => TOOL_NAMES),
  respondToConfirmation: op(AS.ConfirmationResponseInput, (c, i) => agentServer.respondToConfirmation(c, i.conversation_id, i.accept, i.reason ?? null)),
};
export type OperationName = keyof typeof operations;

async function eventPage(c: Core, i: z.output<typeof SearchEventsInput>): Promise<EventPage> {
  await c.conversations.require(i.conversation_id);
  return c.events.page(i.conversation_id, i, hasExtraFilters(i) ? eventPredicate(i) : undefined);
}

/** Validate with the operation's schema (throws the ZodError) and run its handler. */
export function runOperation(core: Core, name: OperationName, raw: unknown): Promise<unknown> {
  const o = operations[name] as { input: z.ZodType; handler: (c: Core, i: unknown) => Promise<unknown> };
  const parsed = o.input.safeParse(raw);
  if (!parsed.success) return Promise.reject(parsed.error);
  return o.handler(core, parsed.data);
}

const O = operations;
export const appRouter = router({
  createConversation: procedure.input(O.createConversation.input).mutation(({ ctx, input }) => O.createConversation.handler(ctx.core, input)),
  sendMessage: procedure.input(O.sendMessage.input).mutation(({ ctx, input }) => O.sendMessage.handler(ctx.core, input)),
  addGitProviders: procedure.input(O.addGitProviders.input).mutation(({ ctx, input }) => O.addGitProviders.handler(ctx.core, input)),
  getConversation: procedure.input(O.getConversation.input).query(({ ctx, input }) => O.getConversation.handler(ctx.core, input)),
  listConversations: procedure.input(O.listConversations.input).query(({ ctx, input }) => O.listConversations.handler(ctx.core, input)),
  deleteConversation: procedure.input(O.deleteConversation.input).mutation(({ ctx, input }) => O.deleteConversation.handler(ctx.core, input)),
  searchEvents: procedure.input(O.searchEvents.input).query(({ ctx, input }) => O.searchEvents.handler(ctx.core, input)),
  countEvents: procedure.input(O.countEvents.input).query(({ ctx, input }) => O.countEvents.handler(ctx.core, input)),
  getEvent: procedure.input(O.getEvent.input).query(({ ctx, input }) => O.getEvent.handler(ctx.core, input)),
  run: procedure.input(O.run.input).mutation(({ ctx, input }) => O.run.handler(ctx.core, input)),
  pause: procedure.input(O.pause.input).mutation(({ ctx, input }) => O.pause.handler(ctx.core, input)),
  interrupt: procedure.input(O.interrupt.input).mutation(({ ctx, input }) => O.interrupt.handler(ctx.core, input)),
  getMcpStatus: procedure.input(O.getMcpStatus.input).query(({ ctx, input }) => O.getMcpStatus.handler(ctx.core, input)),
  getSettings: procedure.query(({ ctx }) => O.getSettings.handler(ctx.core, undefined)),
  saveSettings: procedure.input(O.saveSettings.input).mutation(({ ctx, input }) => O.saveSettings.handler(ctx.core, input)),
  listSecrets: procedure.query(({ ctx }) => O.listSecrets.handler(ctx.core, undefined)),
  createSecret: procedure.input(O.createSecret.input).mutation(({ ctx, input }) => O.createSecret.handler(ctx.core, input)),
  updateSecret: procedure.input(O.updateSecret.input).mutation(({ ctx, input }) => O.updateSecret.handler(ctx.core, input)),
  deleteSecret: procedure.input(O.deleteSecret.input).mutation(({ ctx, input }) => O.deleteSecret.handler(ctx.core, input)),
  startConversation: procedure.input(O.startConversation.input).mutation(({ ctx, input }) => O.startConversation.handler(ctx.core, input)),
  searchConversations: procedure.input(O.searchConversations.input).query(({ ctx, input }) => O.searchConversations.handler(ctx.core, input)),
  countConversations: procedure.input(O.countConversations.input).query(({ ctx, input }) => O.countConversations.handler(ctx.core, input)),
  getConversations: procedure.input(O.getConversations.input).query(({ ctx, input }) => O.getConversations.handler(ctx.core, input)),
  updateConversation: procedure.input(O.updateConversation.input).mutation(({ ctx, input }) => O.updateConversation.handler(ctx.core, input)),
  agentFinalResponse: procedure.input(O.agentFinalResponse.input).query(({ ctx, input }) => O.agentFinalResponse.handler(ctx.core, input)),
  setConfirmationPolicy: procedure.input(O.setConfirmationPolicy.input).mutation(({ ctx, input }) => O.setConfirmationPolicy.handler(ctx.core, input)),
  updateConversationSecrets: procedure.input(O.updateConversationSecrets.input).mutation(({ ctx, input }) => O.updateConversationSecrets.handler(ctx.core, input)),
  condense: procedure.input(O.condense.input).mutation(({ ctx, input }) => O.condense.handler(ctx.core, input)),
  askAgent: procedure.input(O.askAgent.input).mutation(({ ctx, input }) => O.askAgent.handler(ctx.core, input)),
  executeBash: procedure.input(O.executeBash.input).mutation(({ ctx, input }) => O.executeBash.handler(ctx.core, input)),
  startBash: procedure.input(O.startBash.input).mutation(({ ctx, input }) => O.startBash.handler(ctx.core, input)),
  searchBashEvents: procedure.input(O.searchBashEvents.input).query(({ ctx, input }) => O.searchBashEvents.handler(ctx.core, input)),
  getBashEvent: procedure.input(O.getBashEvent.input).query(({ ctx, input }) => O.getBashEvent.handler(ctx.core, input)),
  clearBashEvents: procedure.mutation(({ ctx }) => O.clearBashEvents.handler(ctx.core, undefined)),
  batchGetBashEvents: procedure.input(O.batchGetBashEvents.input).query(({ ctx, input }) => O.batchGetBashEvents.handler(ctx.core, input)),
  gitChanges: procedure.input(O.gitChanges.input).query(({ ctx, input }) => O.gitChanges.handler(ctx.core, input)),
  gitDiff: procedure.input(O.gitDiff.input).query(({ ctx, input }) => O.gitDiff.handler(ctx.core, input)),
  listTools: procedure.query(({ ctx }) => O.listTools.handler(ctx.core, undefined)),
  respondToConfirmation: procedure.input(O.respondToConfirmation.input).mutation(({ ctx, input }) => O.respondToConfirmation.handler(ctx.core, input)),

  /** The conversation's events (replay from lastEventId / after_seq, then live): see subscription.ts. */
  events: procedure.input(SubscribeInput).subscription(({ ctx, input, signal }) => eventStream(ctx.core, input, signal, ctx.maxQueuedBytes)),
});

export type AppRouter = typeof appRouter;
