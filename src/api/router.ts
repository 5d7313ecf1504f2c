/** The typed core API. REST (the bridge) and /trpc both run these procedures. */
import { tracked } from '@trpc/server';
import { z } from 'zod';
import { EventFeed } from '../events/feed.js';
import type { EncodedEvent } from '../events/types.js';
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
import { createCallerFactory, procedure, router } from './trpc.js';

export const appRouter = router({
  createConversation: procedure.input(NewConversationRequest).mutation(({ ctx, input }) => ctx.service.createConversation(input)),
  sendMessage: procedure.input(SendMessageInput).mutation(({ ctx, input }) => ctx.service.sendMessage(input.conversation_id, input.message)),
  addGitProviders: procedure.input(AddGitProvidersRequest).mutation(({ ctx, input }) => ctx.service.addGitProviders(input)),
  getConversation: procedure.input(ConversationIdInput).query(({ ctx, input }) => ctx.service.getConversation(input.conversation_id)),
  listConversations: procedure.input(ListConversationsInput).query(({ ctx, input }) => ctx.service.listConversations(input.page_id, input.limit)),
  deleteConversation: procedure.input(ConversationIdInput).mutation(({ ctx, input }) => ctx.service.deleteConversation(input.conversation_id)),
  searchEvents: procedure.input(SearchEventsInput).query(({ ctx, input }) => ctx.service.searchEvents(input.conversation_id, input)),
  countEvents: procedure.input(CountEventsInput).query(({ ctx, input }) => ctx.service.countEvents(input.conversation_id, input)),
  getEvent: procedure.input(GetEventInput).query(({ ctx, input }) => ctx.service.getEvent(input.conversation_id, input.event_id)),
  run: procedure.input(ConversationIdInput).mutation(({ ctx, input }) => ctx.service.run(input.conversation_id)),
  pause: procedure.input(ConversationIdInput).mutation(({ ctx, input }) => ctx.service.pause(input.conversation_id)),
  interrupt: procedure.input(ConversationIdInput).mutation(({ ctx, input }) => ctx.service.interrupt(input.conversation_id)),
  getMcpStatus: procedure.input(ConversationIdInput).query(({ ctx, input }) => ctx.service.conversationMcp(input.conversation_id)),
  getSettings: procedure.query(({ ctx }) => ctx.service.publicSettings()),
  saveSettings: procedure.input(SettingsUpdate).mutation(({ ctx, input }) => ctx.service.saveLlmSettings(input)),
  listSecrets: procedure.query(({ ctx }) => ctx.service.listSecrets()),
  createSecret: procedure.input(CreateSecretInput).mutation(({ ctx, input }) => ctx.service.createSecret(input.name, input.value, input.description)),
  updateSecret: procedure.input(UpdateSecretInput).mutation(({ ctx, input }) => ctx.service.updateSecret(input.name, input.value, input.description)),
  deleteSecret: procedure.input(SecretNameInput).mutation(({ ctx, input }) => ctx.service.deleteSecret(input.name)),

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
export const createCaller = createCallerFactory(appRouter);
