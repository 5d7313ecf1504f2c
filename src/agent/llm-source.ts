/**
 * The LLM a conversation's run talks to: its own (agent.llm of an agent-server create), field by
 * field over the run-time settings (POST /api/settings) over the environment's. One client per
 * model, key and server, made on first use (the AI SDK loads on its first use, for the models it serves).
 */
import type { Config } from '../config.js';
import type { LlmClient } from '../llm/types.js';
import type { Settings } from '../secrets/settings.js';
import { conversationLlm, type LoadedConversation } from './conversation-data.js';
import { instrumentLlm } from './instrument.js';

export class LlmSource {
  private readonly clients = new Map<string, LlmClient>();

  constructor(
    private readonly settings: Pick<Settings, 'getLlmSettings' | 'unseal'>,
    private readonly config: Config['llm'],
  ) {}

  /** The conversation's LLM, or null when none is configured. */
  async of(conv: LoadedConversation): Promise<LlmClient | null> {
    const s = await this.settings.getLlmSettings();
    const own = conversationLlm(conv, this.settings);
    const model = own?.model ?? s.llm_model ?? this.config.model;
    if (!model) return null;
    const apiKey = own?.apiKey ?? s.llm_api_key ?? this.config.apiKey;
    const baseUrl = own?.baseUrl ?? s.llm_base_url ?? this.config.baseUrl;
    const key = JSON.stringify([model, apiKey, baseUrl]);
    let c = this.clients.get(key);
    if (!c) {
      const { createLlmClient } = await import('../llm/provider.js');
      this.clients.set(key, (c = instrumentLlm(createLlmClient({ model, apiKey, baseUrl, contextWindow: this.config.contextWindow }))));
    }
    return c;
  }
}
