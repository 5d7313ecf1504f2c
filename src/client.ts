/**
 * `parley/client`: the typed client for in-house services: the same procedures as the REST API,
 * over /trpc, with their input and output types (every procedure of `AppRouter`).
 *
 *   const parley = createParleyClient({ url: 'http://127.0.0.1:3000', apiKey });
 *   const { conversation_id } = await parley.createConversation.mutate({ initial_user_msg: 'Fix the tests' });
 *   parley.events.subscribe({ conversation_id, after_seq: 0 }, { onData: ({ id, data }) => ... });
 *
 * The `events` subscription (Server-Sent Events) delivers each committed event tracked by its seq
 * (`id`); when the connection drops, the client reconnects and resumes after the last one it got
 * (`lastEventId`), with no gap and no duplicate. To resume in a new process, subscribe with
 * `lastEventId: String(seq)` or `after_seq: seq`. Live-only events (streamed text) have no id.
 */
import { createTRPCClient, httpBatchLink, httpLink, httpSubscriptionLink, splitLink } from '@trpc/client';
import type { inferRouterInputs, inferRouterOutputs } from '@trpc/server';
import { EventSource } from 'eventsource';
import type { AppRouter } from './api/router.js';

export interface ParleyClientOptions {
  /** Base URL of the daemon, e.g. http://127.0.0.1:3000 */
  url: string;
  /**
   * A session key (SESSION_API_KEY), or a function that gives the current one at each call (a key
   * that changes while the client lives, as in the web console); sent as the X-Session-API-Key
   * header, never in a URL.
   */
  apiKey?: string | null | (() => string | null | undefined);
  /** Calls made in the same tick go as one request (tRPC's batching: the default); `false`, one request per call. */
  batch?: boolean;
}

/**
 * Works in Node and in a browser (the web console bundles it): the subscription uses the
 * `eventsource` package, which reads the stream with fetch, so the key goes in a header there too
 * (a browser's own EventSource cannot send one).
 */
export function createParleyClient(opts: ParleyClientOptions) {
  const base = `${opts.url.replace(/\/$/, '')}/trpc`;
  const headers = (): Record<string, string> => {
    const key = typeof opts.apiKey === 'function' ? opts.apiKey() : opts.apiKey;
    return key ? { 'X-Session-API-Key': key } : {};
  };
  return createTRPCClient<AppRouter>({
    links: [
      splitLink({
        condition: (op) => op.type === 'subscription',
        true: httpSubscriptionLink({
          url: base,
          EventSource,
          eventSourceOptions: () => ({
            fetch: (input: string | URL | Request, init?: RequestInit) =>
              fetch(input, { ...init, headers: { ...(init?.headers as Record<string, string>), ...headers() } }),
          }),
        }),
        false: opts.batch === false ? httpLink({ url: base, headers }) : httpBatchLink({ url: base, headers }),
      }),
    ],
  });
}

export type ParleyClient = ReturnType<typeof createParleyClient>;
/** Every procedure's input, by name: `ParleyInputs['createConversation']`. */
export type ParleyInputs = inferRouterInputs<AppRouter>;
/** Every procedure's output, by name: `ParleyOutputs['getConversation']`. */
export type ParleyOutputs = inferRouterOutputs<AppRouter>;
/** What the `events` subscription delivers: a committed event tracked by its seq (`{ id, data }`), or a live-only event. */
export type ParleyStreamItem = ParleyOutputs['events'] extends AsyncIterable<infer T> ? T : never;
/** An event as this client receives it (its JSON: a field of unknown type may be absent). */
export type ParleyEvent = ParleyStreamItem extends infer I ? (I extends { data: infer E } ? E : I) : never;
export type EventKind = ParleyEvent['kind'];
export type EventOf<K extends EventKind> = Extract<ParleyEvent, { kind: K }>;
export type ConversationInfo = ParleyOutputs['getConversation'];
export type { AppRouter };
