/** Metrics of the agent's outside calls: LLM requests (latency, outcome, tokens) and tool calls. */
import { ProviderError } from '../llm/provider-error.js';
import type { LlmClient } from '../llm/types.js';
import { metrics, providerAndModel } from '../metrics.js';
import type { Observation } from '../events/schema.js';

/** The client, its `complete` counted by provider/model/outcome (ok, aborted, or the ProviderError code). */
export function instrumentLlm<C extends LlmClient>(client: C): C {
  const [provider, model] = providerAndModel(client.model);
  const tokens = {
    input: metrics.llmTokens.child(provider, model, 'input'),
    output: metrics.llmTokens.child(provider, model, 'output'),
    cache_read: metrics.llmTokens.child(provider, model, 'cache_read'),
    cache_write: metrics.llmTokens.child(provider, model, 'cache_write'),
  };
  const complete = client.complete.bind(client);
  return Object.assign(Object.create(client) as C, {
    async complete(req: Parameters<LlmClient['complete']>[0]) {
      const t0 = performance.now();
      let outcome = 'ok';
      try {
        const res = await complete(req);
        tokens.input.inc(res.usage.inputTokens ?? 0);
        tokens.output.inc(res.usage.outputTokens ?? 0);
        tokens.cache_read.inc(res.usage.cacheReadTokens ?? 0);
        tokens.cache_write.inc(res.usage.cacheWriteTokens ?? 0);
        return res;
      } catch (err) {
        outcome = req.signal?.aborted ? 'aborted' : err instanceof ProviderError ? err.code : 'error';
        throw err;
      } finally {
        metrics.llmCalls.child(provider, model, outcome).observe((performance.now() - t0) / 1000);
      }
    },
  });
}

/** Runs one tool call, counted by tool and outcome (ok, error: `is_error` or thrown, aborted). */
export async function timedTool(tool: string, signal: AbortSignal, run: () => Promise<Observation>): Promise<Observation> {
  const t0 = performance.now();
  let outcome = 'error';
  try {
    const obs = await run();
    outcome = obs.is_error ? 'error' : 'ok';
    return obs;
  } finally {
    if (signal.aborted) outcome = 'aborted';
    metrics.toolCalls.child(tool, outcome).observe((performance.now() - t0) / 1000);
  }
}
