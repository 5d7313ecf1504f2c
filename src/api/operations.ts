/**
 * Every operation once: whether it reads or changes (a tRPC query or mutation), its input schema
 * and its handler. The tRPC router (router.ts) is generated from this table, and every REST route
 * (bridge/routes.ts) names one of its operations, so the two doors run the same validation and the
 * same code and every REST operation is a tRPC procedure (test/api-operations.test.ts lists them).
 * REST calls `runOperation` directly instead of going through tRPC's middleware chain (measured:
 * the server-side caller cost ~12 µs of the hot path's budget).
 *
 * Three operations carry what JSON cannot as it is: their `json` form is what tRPC serves (the
 * events page collected, a file's bytes as base64); every other operation's `json` form is itself.
 */
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
  SettingsUpdate,
  CreateSecretInput,
  UpdateSecretInput,
  SecretNameInput,
} from './schemas.js';
import { NotFoundError } from '../errors.js';
import { fullMcpConfig, redactMcpConfig } from '../tools/mcp/config.js';
import * as AS from './agent-server-schemas.js';
import * as agentServer from '../conversation/agent-server.js';
import { countEventsFiltered, eventPredicate, hasExtraFilters } from '../conversation/event-search.js';
import { TOOL_NAMES } from '../conversation/side-channels.js';
import { quickSendMessageInput } from './quick-input.js';
import type { EventPage } from '../events/page.js';

export type OperationType = 'query' | 'mutation';
type Handler<I extends z.ZodType, O> = (c: Core, i: z.output<I>) => Promise<O>;

export interface Operation<T extends OperationType, I extends z.ZodType, O, JI extends z.ZodType = I, JO = O> {
  type: T;
  input: I;
  handler: Handler<I, O>;
  /** The operation as a JSON door (tRPC) serves it. */
  json: { input: JI; handler: Handler<JI, JO> };
  /** A check of the usual input without the schema (the hot path): its output, or undefined to let the schema decide. */
  quick?: (raw: unknown) => z.output<I> | undefined;
}

const operation =
  <T extends OperationType>(type: T) =>
  <I extends z.ZodType, O>(input: I, handler: Handler<I, O>): Operation<T, I, O> => ({ type, input, handler, json: { input, handler } });
const query = operation('query');
const mutation = operation('mutation');

/** Over JSON, the output in a JSON form. */
function jsonOutput<T extends OperationType, I extends z.ZodType, O, J>(op: Operation<T, I, O>, toJson: (o: O) => J | Promise<J>): Operation<T, I, O, I, J> {
  return { ...op, json: { input: op.input, handler: async (c, i) => toJson(await op.handler(c, i)) } };
}

/** Over JSON, another input schema that gives the same input. */
function jsonInput<T extends OperationType, I extends z.ZodType, O, JI extends z.ZodType<z.output<I>>>(
  op: Operation<T, I, O>,
  input: JI,
): Operation<T, I, O, JI, O> {
  return { ...op, json: { input, handler: op.handler as unknown as Handler<JI, O> } };
}

const NoInput = z.void();

export const operations = {
  createConversation: mutation(NewConversationRequest, (c, i) => c.service.createConversation(i)),
  sendMessage: { ...mutation(SendMessageInput, (c, i) => c.service.sendMessage(i.conversation_id, i.message)), quick: quickSendMessageInput },
  addGitProviders: mutation(AddGitProvidersRequest, (c, i) => c.settings.addGitProviders(i)),
  getConversation: query(ConversationIdInput, (c, i) => c.conversations.get(i.conversation_id)),
  listConversations: query(ListConversationsInput, (c, i) => c.conversations.list(i.page_id, i.limit)),
  deleteConversation: mutation(ConversationIdInput, (c, i) => c.service.deleteConversation(i.conversation_id)),
  /** REST streams the page as it is read (memory bounded by bytes); tRPC, which serialises its answers whole, gets it collected. */
  searchEvents: jsonOutput(query(SearchEventsInput, eventPage), (page) => page.collect()),
  countEvents: query(CountEventsInput, async (c, i) => {
    await c.conversations.require(i.conversation_id);
    return hasExtraFilters(i) ? countEventsFiltered(c.events, i.conversation_id, i) : c.events.count(i.conversation_id, i);
  }),
  getEvent: query(GetEventInput, async (c, i) => {
    await c.conversations.require(i.conversation_id);
    const ev = await c.events.get(i.conversation_id, i.event_id);
    if (!ev) throw new NotFoundError('Event not found');
    return ev;
  }),
  run: mutation(ConversationIdInput, (c, i) => c.service.run(i.conversation_id)),
  pause: mutation(ConversationIdInput, (c, i) => c.service.pause(i.conversation_id)),
  interrupt: mutation(ConversationIdInput, (c, i) => c.service.interrupt(i.conversation_id)),
  getMcpStatus: query(ConversationIdInput, async (c, i) => {
    const config = redactMcpConfig(await c.conversations.mcpConfig(i.conversation_id));
    return { config: fullMcpConfig(config), servers: await c.agent.mcpStatus(i.conversation_id) };
  }),
  getSettings: query(NoInput, (c) => c.settings.publicSettings()),
  saveSettings: mutation(SettingsUpdate, (c, i) => c.settings.saveLlmSettings(i)),
  listSecrets: query(NoInput, (c) => c.settings.listSecrets()),
  createSecret: mutation(CreateSecretInput, (c, i) => c.settings.createSecret(i.name, i.value, i.description)),
  updateSecret: mutation(UpdateSecretInput, (c, i) => c.settings.updateSecret(i.name, i.value, i.description)),
  deleteSecret: mutation(SecretNameInput, (c, i) => c.settings.deleteSecret(i.name)),
  // OpenHands agent-server shape (@openhands/typescript-client)
  startConversation: mutation(AS.StartConversationRequest, (c, i) => agentServer.startConversation(c, i)),
  searchConversations: query(AS.ConversationSearchQuery, (c, i) => agentServer.searchConversations(c.conversations, i)),
  countConversations: query(AS.ConversationCountQuery, (c, i) => agentServer.countConversations(c.conversations, i)),
  getConversations: query(AS.ConversationIdsInput, (c, i) => agentServer.getConversations(c.conversations, i.ids)),
  updateConversation: mutation(AS.UpdateConversationInput, (c, i) => agentServer.updateConversation(c, i.conversation_id, i)),
  agentFinalResponse: query(ConversationIdInput, (c, i) => agentServer.agentFinalResponse(c, i.conversation_id)),
  setConfirmationPolicy: mutation(AS.SetConfirmationPolicyInput, (c, i) => agentServer.setConfirmationPolicy(c.conversations, i.conversation_id, i.policy)),
  updateConversationSecrets: mutation(AS.UpdateSecretsInput, (c, i) => agentServer.setConversationSecrets(c, i.conversation_id, i.secrets)),
  condense: mutation(ConversationIdInput, async (c, i) => ({ success: await c.service.condense(i.conversation_id) })),
  askAgent: mutation(AS.AskAgentInput, async (c, i) => ({ response: await c.service.ask(i.conversation_id, i.question) })),
  // workspace side channels (no conversation in the path: the locator finds it)
  executeBash: mutation(AS.ExecuteBashRequest, (c, i) => c.sideChannels.executeBash(i)),
  startBash: mutation(AS.ExecuteBashRequest, (c, i) => c.sideChannels.startBash(i)),
  searchBashEvents: query(AS.BashEventSearchQuery, async (c, i) => c.sideChannels.searchBash(i)),
  getBashEvent: query(AS.BashEventIdInput, async (c, i) => c.sideChannels.getBashEvent(i.event_id)),
  clearBashEvents: mutation(NoInput, async (c) => c.sideChannels.bash.clear()),
  batchGetBashEvents: query(AS.BashEventIdsInput, async (c, i) => i.map((id) => c.sideChannels.bash.get(id))),
  /** REST reads the bytes from a multipart body; tRPC takes them as base64. */
  uploadFile: jsonInput(
    mutation(AS.WorkspaceUploadInput, (c, i) => c.sideChannels.upload(i)),
    AS.WorkspaceUploadJsonInput,
  ),
  /** REST answers the bytes raw; tRPC as base64. */
  downloadFile: jsonOutput(
    query(AS.WorkspacePathQuery, (c, i) => c.sideChannels.download(i)),
    (f) => ({ name: f.name, content_base64: Buffer.from(f.bytes.buffer, f.bytes.byteOffset, f.bytes.byteLength).toString('base64') }),
  ),
  gitChanges: query(AS.WorkspacePathQuery, (c, i) => c.sideChannels.gitChanges(i)),
  gitDiff: query(AS.WorkspacePathQuery, (c, i) => c.sideChannels.gitDiff(i)),
  listTools: query(NoInput, async () => TOOL_NAMES),
  respondToConfirmation: mutation(AS.ConfirmationResponseInput, (c, i) => agentServer.respondToConfirmation(c, i.conversation_id, i.accept, i.reason ?? null)),
};
export type OperationName = keyof typeof operations;

async function eventPage(c: Core, i: z.output<typeof SearchEventsInput>): Promise<EventPage> {
  await c.conversations.require(i.conversation_id);
  return c.events.page(i.conversation_id, i, hasExtraFilters(i) ? eventPredicate(i) : undefined);
}

/** Validate with the operation's schema (throws the ZodError) and run its handler: REST's call. */
export function runOperation(core: Core, name: OperationName, raw: unknown): Promise<unknown> {
  const o = operations[name] as unknown as Operation<OperationType, z.ZodType<unknown>, unknown>;
  const quick = o.quick?.(raw);
  if (quick !== undefined) return o.handler(core, quick);
  const parsed = o.input.safeParse(raw);
  if (!parsed.success) return Promise.reject(parsed.error);
  return o.handler(core, parsed.data);
}
