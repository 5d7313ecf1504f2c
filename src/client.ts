/**
 * Typed client for in-house services: the same procedures as the REST API, over /trpc.
 *
 *   const parley = createParleyClient({ url: 'http://127.0.0.1:3000', apiKey });
 *   const { conversation_id } = await parley.createConversation.mutate({});
 *   parley.events.subscribe({ conversation_id, after_seq: 0 }, { onData: (e) => ... });
 */
import { createTRPCClient, httpBatchLink, httpSubscriptionLink, splitLink } from '@trpc/client';
import { EventSource } from 'eventsource';
import type { AppRouter } from './api/router.js';

export interface ParleyClientOptions {
  /** Base URL of the daemon, e.g. http://127.0.0.1:3000 */
  url: string;
  apiKey?: string;
}

export function createParleyClient(opts: ParleyClientOptions) {
  const base = `${opts.url.replace(/\/$/, '')}/trpc`;
  const headers: Record<string, string> = opts.apiKey ? { 'X-Session-API-Key': opts.apiKey } : {};
  return createTRPCClient<AppRouter>({
    links: [
      splitLink({
        condition: (op) => op.type === 'subscription',
        true: httpSubscriptionLink({
          url: base,
          EventSource,
          eventSourceOptions: () => ({
            fetch: (input: string | URL | Request, init?: RequestInit) =>
              fetch(input, { ...init, headers: { ...(init?.headers as Record<string, string>), ...headers } }),
          }),
        }),
        false: httpBatchLink({ url: base, headers: () => headers }),
      }),
    ],
  });
}

export type ParleyClient = ReturnType<typeof createParleyClient>;
export type { AppRouter };
