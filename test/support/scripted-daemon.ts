/**
 * A daemon against the scripted LLM for one describe block: both started before its tests and stopped
 * after them. `env` is added to the LLM's settings (LLM_MODEL, LLM_BASE_URL).
 */
import { after, before } from 'node:test';
import { startDaemon, type DaemonHandle } from './daemon.js';
import { startScriptedLlm, type ScriptedLlm } from './scripted-llm.js';

export function useScriptedDaemon(env: Record<string, string>): { d: DaemonHandle; llm: ScriptedLlm } {
  const parts = {} as { d: DaemonHandle; llm: ScriptedLlm };
  before(async () => {
    parts.llm = await startScriptedLlm();
    parts.d = await startDaemon({ LLM_MODEL: 'openai/scripted', LLM_BASE_URL: parts.llm.url, ...env });
  });
  after(async () => {
    await parts.d?.stop();
    await parts.llm?.close();
  });
  return parts;
}
