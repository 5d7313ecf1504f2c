/**
 * Settings: the LLM (model, base URL, key: the key is write-only, the daemon only says whether one
 * is stored), git-provider tokens and the default MCP servers (POST /api/add-git-providers: the
 * request is the full set, tokens are never returned), and custom secrets.
 */
import { useEffect, useState } from 'preact/hooks';
import { GIT_PROVIDERS, type GitProvider } from '../../src/workspace/providers.js';
import type { ParleyInputs } from '../../src/client.js';
import { call, type LlmSettings, parley } from './api.js';
import { ErrorNote, useAction } from './ui.js';

function Saved({ when }: { when: number }) {
  return when ? <span class="ok-text small">Saved</span> : null;
}

function LlmSection() {
  const [current, setCurrent] = useState<LlmSettings | null>(null);
  const [model, setModel] = useState('');
  const [baseUrl, setBaseUrl] = useState('');
  const [key, setKey] = useState('');
  const [clearKey, setClearKey] = useState(false);
  const [saved, setSaved] = useState(0);
  const [busy, error, run] = useAction();
  const show = (s: LlmSettings) => {
    setCurrent(s);
    setModel(s.llm_model ?? '');
    setBaseUrl(s.llm_base_url ?? '');
  };
  useEffect(() => void run(async () => show(await call(parley.getSettings.query()))), []);
  const save = (e: Event) => {
    e.preventDefault();
    void run(async () => {
      const body: ParleyInputs['saveSettings'] = { llm_model: model.trim() || null, llm_base_url: baseUrl.trim() || null };
      // the key is sent only when typed (or cleared): an empty field keeps the stored one
      if (key) body.llm_api_key = key;
      else if (clearKey) body.llm_api_key = null;
      show(await call(parley.saveSettings.mutate(body)));
      setKey('');
      setClearKey(false);
      setSaved(Date.now());
    });
  };
  return (
    <form class="card settings-section" onSubmit={save}>
      <h2>Language model</h2>
      <p class="muted small">
        Used by conversations that do not name their own model. The environment (LLM_MODEL, LLM_BASE_URL, LLM_API_KEY) applies where nothing is stored here.
      </p>
      <div class="row2">
        <label>
          <span>Model</span>
          <input
            name="llm_model"
            placeholder="provider/model, e.g. openai/gpt-5"
            disabled={!current}
            value={model}
            onInput={(e) => setModel(e.currentTarget.value)}
          />
        </label>
        <label>
          <span>
            Base URL <span class="muted">(OpenAI-compatible servers)</span>
          </span>
          <input name="llm_base_url" placeholder="https://…/v1" disabled={!current} value={baseUrl} onInput={(e) => setBaseUrl(e.currentTarget.value)} />
        </label>
      </div>
      <label>
        <span>API key</span>
        <input
          name="llm_api_key"
          type="password"
          autocomplete="off"
          placeholder={current?.llm_api_key_set ? 'A key is stored — type to replace it' : 'No key stored'}
          value={key}
          onInput={(e) => setKey(e.currentTarget.value)}
        />
      </label>
      {current?.llm_api_key_set && (
        <label class="check small">
          <input type="checkbox" checked={clearKey} onChange={(e) => setClearKey(e.currentTarget.checked)} /> Remove the stored key
        </label>
      )}
      <ErrorNote error={error} />
      <div class="actions">
        <Saved when={saved} />
        <button class="primary" type="submit" disabled={busy}>
          Save
        </button>
      </div>
    </form>
  );
}

type ProviderRow = { enabled: boolean; token: string; host: string };

function ProvidersSection() {
  const [rows, setRows] = useState<Record<GitProvider, ProviderRow>>(
    () => Object.fromEntries(GIT_PROVIDERS.map((p) => [p, { enabled: false, token: '', host: '' }])) as Record<GitProvider, ProviderRow>,
  );
  const [mcp, setMcp] = useState('');
  const [saved, setSaved] = useState(0);
  const [busy, error, run, setError] = useAction();
  const edit = (p: GitProvider, patch: Partial<ProviderRow>) => setRows((r) => ({ ...r, [p]: { ...r[p], ...patch } }));
  const save = (e: Event) => {
    e.preventDefault();
    let mcpConfig: unknown;
    if (mcp.trim()) {
      try {
        mcpConfig = JSON.parse(mcp);
      } catch {
        return setError('The default MCP servers must be JSON: {"shttp_servers": [{"url": "…"}], "stdio_servers": [], "sse_servers": []}');
      }
    }
    void run(async () => {
      const provider_tokens: ParleyInputs['addGitProviders']['provider_tokens'] = {};
      for (const p of GIT_PROVIDERS) if (rows[p].enabled) provider_tokens[p] = { token: rows[p].token || null, host: rows[p].host.trim() || null };
      // the JSON as typed: the daemon checks it (a 422 names the field)
      const mcp_config = mcpConfig as ParleyInputs['addGitProviders']['mcp_config'];
      await call(parley.addGitProviders.mutate({ provider_tokens, ...(mcpConfig !== undefined ? { mcp_config } : {}) }));
      setRows((r) => Object.fromEntries(GIT_PROVIDERS.map((p) => [p, { ...r[p], token: '' }])) as Record<GitProvider, ProviderRow>);
      setSaved(Date.now());
    });
  };
  return (
    <form class="card settings-section" onSubmit={save}>
      <h2>Git providers</h2>
      <p class="muted small">
        Tokens used to clone and push. Saving stores exactly the providers ticked here (others are removed); a ticked provider with an empty token keeps its
        stored token. Stored tokens are encrypted and never shown again.
      </p>
      <table class="providers">
        <tbody>
          {GIT_PROVIDERS.map((p) => (
            <tr key={p}>
              <td>
                <label class="check">
                  <input type="checkbox" name={`${p}-enabled`} checked={rows[p].enabled} onChange={(e) => edit(p, { enabled: e.currentTarget.checked })} /> {p}
                </label>
              </td>
              <td>
                <input
                  name={`${p}-token`}
                  type="password"
                  autocomplete="off"
                  placeholder="token (empty: keep the stored one)"
                  disabled={!rows[p].enabled}
                  value={rows[p].token}
                  onInput={(e) => edit(p, { token: e.currentTarget.value })}
                />
              </td>
              <td>
                <input
                  name={`${p}-host`}
                  placeholder="host (default: the public one)"
                  disabled={!rows[p].enabled}
                  value={rows[p].host}
                  onInput={(e) => edit(p, { host: e.currentTarget.value })}
                />
              </td>
            </tr>
          ))}
        </tbody>
      </table>
      <label>
        <span>
          Default MCP servers <span class="muted">(JSON, merged into every new conversation; empty: keep the stored ones)</span>
        </span>
        <textarea
          name="mcp_config"
          rows={4}
          class="mono"
          placeholder='{"shttp_servers": [{"url": "https://mcp.example.com/mcp", "api_key": "…"}]}'
          value={mcp}
          onInput={(e) => setMcp(e.currentTarget.value)}
        />
      </label>
      <p class="muted small">The state of each MCP server (ready, failed and why, its tools) is on a conversation's page, under MCP.</p>
      <ErrorNote error={error} />
      <div class="actions">
        <Saved when={saved} />
        <button class="primary" type="submit" disabled={busy}>
          Save providers
        </button>
      </div>
    </form>
  );
}

interface Secret {
  name: string;
  description: string | null;
}

function SecretsSection() {
  const [secrets, setSecrets] = useState<Secret[]>([]);
  const [name, setName] = useState('');
  const [value, setValue] = useState('');
  const [busy, error, run] = useAction();
  const load = async () => setSecrets((await call(parley.listSecrets.query())).secrets);
  useEffect(() => void run(load), []);
  return (
    <div class="card settings-section">
      <h2>Secrets</h2>
      <p class="muted small">Exported to every agent's shell under their name and masked in everything the daemon writes. Values are never shown again.</p>
      <ul class="secrets">
        {secrets.map((s) => (
          <li key={s.name}>
            <code>{s.name}</code>
            {s.description && <span class="muted small"> {s.description}</span>}
            <div class="spacer" />
            <button
              type="button"
              class="ghost small"
              disabled={busy}
              onClick={() => void run(async () => (await call(parley.deleteSecret.mutate({ name: s.name })), await load()))}
            >
              Remove
            </button>
          </li>
        ))}
      </ul>
      <form
        class="inline-form"
        onSubmit={(e) => {
          e.preventDefault();
          void run(async () => {
            await call(parley.createSecret.mutate({ name: name.trim(), value }));
            setName('');
            setValue('');
            await load();
          });
        }}
      >
        <input name="secret-name" placeholder="NAME" value={name} onInput={(e) => setName(e.currentTarget.value)} />
        <input
          name="secret-value"
          type="password"
          autocomplete="off"
          placeholder="value (8+ characters)"
          value={value}
          onInput={(e) => setValue(e.currentTarget.value)}
        />
        <button type="submit" class="small" disabled={busy || !name.trim() || !value}>
          Add
        </button>
      </form>
      <ErrorNote error={error} />
    </div>
  );
}

export function SettingsPage() {
  return (
    <div class="page narrow">
      <div class="page-head">
        <h1>Settings</h1>
      </div>
      <LlmSection />
      <ProvidersSection />
      <SecretsSection />
    </div>
  );
}
