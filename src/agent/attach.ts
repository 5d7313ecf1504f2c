import type { Logger } from 'pino';
import type { Config } from '../config.js';
import type { ConversationService } from '../conversation/service.js';

/** Plugs the agent runtime into the conversation service (filled in by the agent issue). */
export async function attachAgent(_service: ConversationService, _config: Config, _log: Logger): Promise<void> {}
