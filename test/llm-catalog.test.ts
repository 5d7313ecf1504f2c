/**
 * The LLM catalog's data against the provider table it describes: the names it lists are exactly the
 * providers Parley runs (models.ts), every model it names has an entry in models.ts's context-window
 * table, and the translation of OpenHands' model names.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { KNOWN_MODELS, LLM_PROVIDER_NAMES, llmModels, toParleyModel, UnknownModelError, verifiedLlmModels } from '../src/llm/catalog.js';
import { knownContextWindow, PROVIDERS } from '../src/llm/models.js';

test('the catalog names exactly the providers of the table, and a context window for each of its models', () => {
  assert.deepEqual([...LLM_PROVIDER_NAMES].sort(), Object.keys(PROVIDERS).sort());
  for (const [provider, { verified, other }] of Object.entries(KNOWN_MODELS)) {
    for (const m of [...verified, ...other]) assert.ok(knownContextWindow(m), `${provider}/${m} has a context window in the table`);
  }
  assert.ok(llmModels().models.every((m) => LLM_PROVIDER_NAMES.some((p) => m.startsWith(`${p}/`))));
  assert.deepEqual(Object.keys(verifiedLlmModels().models).sort(), [...LLM_PROVIDER_NAMES].sort());
});

test("OpenHands' model names become provider/model; one Parley cannot run is refused with the reason", () => {
  assert.equal(toParleyModel('gpt-5', null), 'openai/gpt-5');
  assert.equal(toParleyModel('claude-sonnet-4-5', null), 'anthropic/claude-sonnet-4-5');
  assert.equal(toParleyModel('Anthropic/claude-opus-4-1', null), 'anthropic/claude-opus-4-1');
  assert.equal(toParleyModel('litellm_proxy/my-model', null), 'openai/my-model');
  assert.equal(toParleyModel('mistral/devstral', 'http://127.0.0.1:9/v1'), 'openai/mistral/devstral');
  assert.throws(
    () => toParleyModel('bedrock/claude', null),
    (e) => e instanceof UnknownModelError && /OpenAI-compatible/.test(e.message),
  );
});
