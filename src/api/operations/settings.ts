/** The daemon's settings: the LLM, custom secrets, git provider tokens (and the default MCP config). */
import { appSettingsView, withAppSecrets } from '../../conversation/app-server.js';
import type { Core } from '../../core.js';
import { mutation, query } from '../operation.js';
import { ApiSchemas as A } from '../schemas.js';

/**
 * Parley's fields, OpenHands' SettingsResponse (src/settings/agent-settings.ts) and the fields its web app reads
 * (src/conversation/app-server.ts) in one answer: they do not overlap.
 */
const settingsView = async (c: Core) => ({ ...((await appSettingsView(c.settings)) as Record<string, unknown>), ...(await c.server.settings.get()) });

export const settingsOperations = {
  getSettings: query({
    input: () => A.NoInput,
    rest: { method: 'GET', path: '/api/settings', summary: 'Get Settings', tag: 'Settings', doc: { response: 'SettingsView' } },
    handler: (c) => settingsView(c),
  }),
  saveSettings: mutation({
    input: () => A.SettingsUpdate,
    rest: { method: 'POST', path: '/api/settings', body: 'input', summary: 'Store Settings', tag: 'Settings', doc: { response: 'SettingsView' } },
    /** Answers what GET /api/settings answers. */
    handler: async (c, i) => {
      await c.settings.saveLlmSettings(i);
      return settingsView(c);
    },
  }),
  listSecrets: query({
    input: () => A.NoInput,
    rest: { method: 'GET', path: '/api/secrets', summary: 'List Secrets', tag: 'Secrets', doc: { response: 'SecretList' } },
    handler: async (c) => withAppSecrets(await c.settings.listSecrets()),
  }),
  createSecret: mutation({
    input: () => A.CreateSecretInput,
    rest: { method: 'POST', path: '/api/secrets', body: 'input', status: 201, summary: 'Create Secret', tag: 'Secrets', doc: { response: 'SecretInfo' } },
    handler: (c, i) => c.settings.createSecret(i.name, i.value, i.description),
  }),
  updateSecret: mutation({
    input: () => A.UpdateSecretInput,
    rest: { method: 'PUT', path: '/api/secrets/{name}', body: 'fields', summary: 'Update Secret', tag: 'Secrets', doc: { body: 'UpdateSecret' } },
    handler: (c, i) => c.settings.updateSecret(i.name, i.value, i.description),
  }),
  deleteSecret: mutation({
    input: () => A.SecretNameInput,
    rest: { method: 'DELETE', path: '/api/secrets/{name}', summary: 'Delete Secret', tag: 'Secrets' },
    handler: (c, i) => c.settings.deleteSecret(i.name),
  }),
  addGitProviders: mutation({
    input: () => A.AddGitProvidersRequest,
    rest: {
      method: 'POST',
      path: '/api/add-git-providers',
      body: 'input',
      summary: 'Store Provider Tokens',
      tag: 'Git',
      operationId: 'store_provider_tokens_api_add_git_providers_post',
      doc: { response: 'MessageResponse' },
    },
    handler: (c, i) => c.settings.addGitProviders(i),
  }),
};
