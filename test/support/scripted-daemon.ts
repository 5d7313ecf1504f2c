/**
 * A daemon against the scripted LLM for one describe block: both started before its tests and stopped
 * after them. `env` is added to the LLM's settings (LLM_MODEL, LLM_BASE_URL).
 */
import assert from 'node:assert/strict';
import { after, before } from 'node:test';
import { allEvents } from './conversation-api.js';
import { startDaemon, waitFor, type DaemonHandle } from './daemon.js';
import { startScriptedLlm, type ScriptedLlm } from './scripted-llm.js';

export function useScriptedDaemon(env: Record<string, string>, opts: Parameters<typeof startDaemon>[2] = {}): { d: DaemonHandle; llm: ScriptedLlm } {
  const parts = {} as { d: DaemonHandle; llm: ScriptedLlm };
  before(async () => {
    parts.llm = await startScriptedLlm();
    parts.d = await startDaemon({ LLM_MODEL: 'openai/scripted', LLM_BASE_URL: parts.llm.url, ...env }, undefined, opts);
  });
  after(async () => {
    await parts.d?.stop();
    await parts.llm?.close();
  });
  return parts;
}

/** One turn whose one tool call runs `command` in the conversation's terminal: the observation's text, once the turn has ended. */
export async function terminalTurn(s: { d: DaemonHandle; llm: ScriptedLlm }, id: string, command: string): Promise<string> {
  const before = (await allEvents(s.d.req, id)).length;
  s.llm.push({ toolCalls: [{ name: 'terminal', arguments: { command } }] }, { text: 'done' });
  assert.equal((await s.d.req('POST', `/api/conversations/${id}/events`, { content: [{ text: 'go' }], run: true })).status, 200);
  const obs = await waitFor(
    async () => (await allEvents(s.d.req, id)).slice(before).find((e) => e.kind === 'ObservationEvent'),
    'the command answered',
    120_000,
  );
  await waitFor(async () => (await s.d.req('GET', `/api/conversations/${id}`)).body.execution_status !== 'running', 'the turn ended', 60_000);
  return obs.observation.content.map((c: { text?: string }) => c.text ?? '').join('');
}
