/** The typed core API. REST (the bridge) and /trpc both run these procedures. */
import { tracked } from '@trpc/server';
import { z } from 'zod';
import { EventFeed } from '../events/feed.js';
import type { EncodedEvent } from '../events/types.js';
import type { ConversationService } from '../conversation/service.js';
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
import { procedure, router } from './trpc.js';
import * as AS from './agent-server-schemas.js';
import * as agentServer from '../conversation/agent-server.js';
import { countEventsFiltered, hasExtraFilters, searchEventsFiltered } from '../conversation/event-search.js';
import { ConflictError } from '../errors.js';
import { sideChannelsOf, TOOL_NAMES } from '../conversation/side-channels.js';

/**
 * Every operation once: its input schema and its handler. The tRPC router below and the REST
 * bridge are both built from this table, so the two doors run the same validation and the same
 * code; REST calls `runOperation` directly instead of going through tRPC's middleware chain
 * (measured: the server-side caller cost ~12 µs of the hot path's budget).
 */
const op = <I extends z.ZodType, O>(input: I, handler: (s: ConversationService, i: z.output<I>) => Promise<O>) => ({ input, handler });
const NoInput = z.undefined();

export const operations = {
  createConversation: op(NewConversationRequest, (s, i) => s.createConversation(i)),
  sendMessage: op(SendMessageInput, (s, i) => s.sendMessage(i.conversation_id, i.message)),
  addGitProviders: op(AddGitProvidersRequest, (s, i) => s.addGitProviders(i)),
  getConversation: op(ConversationIdInput, (s, i) => s.getConversation(i.conversation_id)),
  listConversations: op(ListConversationsInput, (s, i) => s.listConversations(i.page_id, i.limit)),
  deleteConversation: op(ConversationIdInput, (s, i) => s.deleteConversation(i.conversation_id)),
  searchEvents: op(SearchEventsInput, (s, i) => (hasExtraFilters(i) ? searchEventsFiltered(s, i.conversation_id, i) : s.searchEvents(i.conversation_id, i))),
  countEvents: op(CountEventsInput, (s, i) => (hasExtraFilters(i) ? countEventsFiltered(s, i.conversation_id, i) : s.countEvents(i.conversation_id, i))),
  getEvent: op(GetEventInput, (s, i) => s.getEvent(i.conversation_id, i.event_id)),
  run: op(ConversationIdInput, (s, i) => s.run(i.conversation_id)),
  pause: op(ConversationIdInput, (s, i) => s.pause(i.conversation_id)),
  interrupt: op(ConversationIdInput, (s, i) => s.interrupt(i.conversation_id)),
  getMcpStatus: op(ConversationIdInput, (s, i) => s.conversationMcp(i.conversation_id)),
  getSettings: op(NoInput, (s) => s.publicSettings()),
  saveSettings: op(SettingsUpdate, (s, i) => s.saveLlmSettings(i)),
  listSecrets: op(NoInput, (s) => s.listSecrets()),
  createSecret: op(CreateSecretInput, (s, i) => s.createSecret(i.name, i.value, i.description)),
  updateSecret: op(UpdateSecretInput, (s, i) => s.updateSecret(i.name, i.value, i.description)),
  deleteSecret: op(SecretNameInput, (s, i) => s.deleteSecret(i.name)),
  // OpenHands agent-server shape (@openhands/typescript-client)
  startConversation: op(AS.StartConversationRequest, (s, i) => agentServer.startConversation(s, i)),
  searchConversations: op(AS.ConversationSearchQuery, (s, i) => agentServer.searchConversations(s, i)),
  countConversations: op(AS.ConversationCountQuery, (s, i) => agentServer.countConversations(s, i)),
  getConversations: op(AS.ConversationIdsInput, (s, i) => agentServer.getConversations(s, i.ids)),
  updateConversation: op(AS.UpdateConversationInput, (s, i) => agentServer.updateConversation(s, i.conversation_id, i)),
  agentFinalResponse: op(ConversationIdInput, (s, i) => agentServer.agentFinalResponse(s, i.conversation_id)),
  setConfirmationPolicy: op(AS.SetConfirmationPolicyInput, (s, i) => agentServer.setConfirmationPolicy(s, i.conversation_id, i.policy)),
  updateConversationSecrets: op(AS.UpdateSecretsInput, (s, i) => agentServer.setConversationSecrets(s, i.conversation_id, i.secrets)),
  condense: op(ConversationIdInput, async (s, i) => {
    await s.require(i.conversation_id);
    if (!s.runtime?.condense) throw new ConflictError('No agent runtime is configured');
    return { success: await s.runtime.condense(i.conversation_id) };
  }),
  askAgent: op(AS.AskAgentInput, async (s, i) => {
    await s.require(i.conversation_id);
    if (!s.runtime?.ask) throw new ConflictError('No agent runtime is configured');
    return { response: await s.runtime.ask(i.conversation_id, i.question) };
  }),
  // workspace side channels (no conversation in the path: the locator finds it)
  executeBash: op(AS.ExecuteBashRequest, (s, i) => sideChannelsOf(s).executeBash(i)),
  startBash: op(AS.ExecuteBashRequest, (s, i) => sideChannelsOf(s).startBash(i)),
  searchBashEvents: op(AS.BashEventSearchQuery, async (s, i) => sideChannelsOf(s).searchBash(i)),
  getBashEvent: op(AS.BashEventIdInput, async (s, i) => sideChannelsOf(s).getBashEvent(i.event_id)),
  clearBashEvents: op(NoInput, async (s) => sideChannelsOf(s).bash.clear()),
  uploadFile: op(AS.WorkspaceUploadInput, (s, i) => sideChannelsOf(s).upload(i)),
  downloadFile: op(AS.WorkspacePathQuery, (s, i) => sideChannelsOf(s).download(i)),
  gitChanges: op(AS.WorkspacePathQuery, (s, i) => sideChannelsOf(s).gitChanges(i)),
  gitDiff: op(AS.WorkspacePathQuery, (s, i) => sideChannelsOf(s).gitDiff(i)),
  listTools: op(NoInput, async () => TOOL_NAMES),
  respondToConfirmation: op(AS.ConfirmationResponseInput, (s, i) => agentServer.respondToConfirmation(s, i.conversation_id, i.accept, i.reason ?? null)),
};
export type OperationName = keyof typeof operations;

/** Validate with the operation's schema (throws the ZodError) and run its handler. */
export function runOperation(service: ConversationService, name: OperationName, raw: unknown): Promise<unknown> {
  const o = operations[name] as { input: z.ZodType; handler: (s: ConversationService, i: unknown) => Promise<unknown> };
  const parsed = o.input.safeParse(raw);
  if (!parsed.success) return Promise.reject(parsed.error);
  return o.handler(service, parsed.data);
}

const O = operations;
export const appRouter = router({
  createConversation: procedure.input(O.createConversation.input).mutation(({ ctx, input }) => O.createConversation.handler(ctx.service, input)),
  sendMessage: procedure.input(O.sendMessage.input).mutation(({ ctx, input }) => O.sendMessage.handler(ctx.service, input)),
  addGitProviders: procedure.input(O.addGitProviders.input).mutation(({ ctx, input }) => O.addGitProviders.handler(ctx.service, input)),
  getConversation: procedure.input(O.getConversation.input).query(({ ctx, input }) => O.getConversation.handler(ctx.service, input)),
  listConversations: procedure.input(O.listConversations.input).query(({ ctx, input }) => O.listConversations.handler(ctx.service, input)),
  deleteConversation: procedure.input(O.deleteConversation.input).mutation(({ ctx, input }) => O.deleteConversation.handler(ctx.service, input)),
  searchEvents: procedure.input(O.searchEvents.input).query(({ ctx, input }) => O.searchEvents.handler(ctx.service, input)),
  countEvents: procedure.input(O.countEvents.input).query(({ ctx, input }) => O.countEvents.handler(ctx.service, input)),
  getEvent: procedure.input(O.getEvent.input).query(({ ctx, input }) => O.getEvent.handler(ctx.service, input)),
  run: procedure.input(O.run.input).mutation(({ ctx, input }) => O.run.handler(ctx.service, input)),
  pause: procedure.input(O.pause.input).mutation(({ ctx, input }) => O.pause.handler(ctx.service, input)),
  interrupt: procedure.input(O.interrupt.input).mutation(({ ctx, input }) => O.interrupt.handler(ctx.service, input)),
  getMcpStatus: procedure.input(O.getMcpStatus.input).query(({ ctx, input }) => O.getMcpStatus.handler(ctx.service, input)),
  getSettings: procedure.query(({ ctx }) => O.getSettings.handler(ctx.service, undefined)),
  saveSettings: procedure.input(O.saveSettings.input).mutation(({ ctx, input }) => O.saveSettings.handler(ctx.service, input)),
  listSecrets: procedure.query(({ ctx }) => O.listSecrets.handler(ctx.service, undefined)),
  createSecret: procedure.input(O.createSecret.input).mutation(({ ctx, input }) => O.createSecret.handler(ctx.service, input)),
  updateSecret: procedure.input(O.updateSecret.input).mutation(({ ctx, input }) => O.updateSecret.handler(ctx.service, input)),
  deleteSecret: procedure.input(O.deleteSecret.input).mutation(({ ctx, input }) => O.deleteSecret.handler(ctx.service, input)),
  startConversation: procedure.input(O.startConversation.input).mutation(({ ctx, input }) => O.startConversation.handler(ctx.service, input)),
  searchConversations: procedure.input(O.searchConversations.input).query(({ ctx, input }) => O.searchConversations.handler(ctx.service, input)),
  countConversations: procedure.input(O.countConversations.input).query(({ ctx, input }) => O.countConversations.handler(ctx.service, input)),
  getConversations: procedure.input(O.getConversations.input).query(({ ctx, input }) => O.getConversations.handler(ctx.service, input)),
  updateConversation: procedure.input(O.updateConversation.input).mutation(({ ctx, input }) => O.updateConversation.handler(ctx.service, input)),
  agentFinalResponse: procedure.input(O.agentFinalResponse.input).query(({ ctx, input }) => O.agentFinalResponse.handler(ctx.service, input)),
  setConfirmationPolicy: procedure.input(O.setConfirmationPolicy.input).mutation(({ ctx, input }) => O.setConfirmationPolicy.handler(ctx.service, input)),
  updateConversationSecrets: procedure.input(O.updateConversationSecrets.input).mutation(({ ctx, input }) => O.updateConversationSecrets.handler(ctx.service, input)),
  condense: procedure.input(O.condense.input).mutation(({ ctx, input }) => O.condense.handler(ctx.service, input)),
  askAgent: procedure.input(O.askAgent.input).mutation(({ ctx, input }) => O.askAgent.handler(ctx.service, input)),
  executeBash: procedure.input(O.executeBash.input).mutation(({ ctx, input }) => O.executeBash.handler(ctx.service, input)),
  startBash: procedure.input(O.startBash.input).mutation(({ ctx, input }) => O.startBash.handler(ctx.service, input)),
  searchBashEvents: procedure.input(O.searchBashEvents.input).query(({ ctx, input }) => O.searchBashEvents.handler(ctx.service, input)),
  getBashEvent: procedure.input(O.getBashEvent.input).query(({ ctx, input }) => O.getBashEvent.handler(ctx.service, input)),
  clearBashEvents: procedure.mutation(({ ctx }) => O.clearBashEvents.handler(ctx.service, undefined)),
  gitChanges: procedure.input(O.gitChanges.input).query(({ ctx, input }) => O.gitChanges.handler(ctx.service, input)),
  gitDiff: procedure.input(O.gitDiff.input).query(({ ctx, input }) => O.gitDiff.handler(ctx.service, input)),
  listTools: procedure.query(({ ctx }) => O.listTools.handler(ctx.service, undefined)),
  respondToConfirmation: procedure.input(O.respondToConfirmation.input).mutation(({ ctx, input }) => O.respondToConfirmation.handler(ctx.service, input)),

  /**
   * The conversation's events: every event with seq > after_seq (when given), then live ones.
   * Each item is tracked by its seq, so a reconnecting client resumes exactly where it stopped.
   */
  events: procedure.input(SubscribeInput).subscription(async function* ({ ctx, input, signal }) {
    const id = input.conversation_id;
    await ctx.service.require(id);
    const queue: EncodedEvent[] = [];
    let wake: (() => void) | null = null;
    let overflowed = false;
    const feed = new EventFeed(ctx.service.bus, ctx.service.store, id, {
      send(ev) {
        queue.push(ev);
        wake?.();
        return queue.length < 1000;
      },
      drained: () => new Promise<void>((r) => setTimeout(r, 5)),
      overflow() {
        overflowed = true;
        wake?.();
      },
    }, { afterSeq: input.after_seq ?? null });
    const onAbort = () => wake?.();
    signal?.addEventListener('abort', onAbort);
    try {
      while (!signal?.aborted) {
        const ev = queue.shift();
        if (ev) {
          const e = ev.event;
          if (e.seq !== undefined) yield tracked(String(e.seq), e);
          continue;
        }
        if (overflowed) throw new Error('subscriber fell too far behind; resume with after_seq');
        await new Promise<void>((r) => (wake = r));
        wake = null;
      }
    } finally {
      signal?.removeEventListener('abort', onAbort);
      feed.close();
    }
  }),
});

export type AppRouter = typeof appRouter;
