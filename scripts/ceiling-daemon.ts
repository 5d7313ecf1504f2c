/**
 * The daemon's own ceiling for the load test: the real daemon (bridge, routing, auth, zod
 * validation, the conversation lookup, the response) with `sendMessage` answering before it
 * appends, publishes or wakes anything. Not a server anyone should run; it measures how much of
 * the bare route's throughput is left for the work the endpoint must do. The load test's
 * verification fails against it by design (nothing is committed or published).
 *
 *   npx tsx scripts/loadtest.ts --subscribers 0 --daemon-entry scripts/ceiling-daemon.ts
 */
import { ConversationService } from '../src/conversation/service.js';

ConversationService.prototype.sendMessage = async function (this: ConversationService, id: string) {
  // the lookup a real send does first (a benchmark may look inside; the daemon's modules do not)
  // biome-ignore lint/complexity/useLiteralKeys: the field is private; the benchmark reads it on purpose
  await this['conversations'].require(id);
  return { success: true as const };
};
await import('../bridge/main.js');
