/**
 * The web console: sign-in, conversations, a conversation, settings. Served by the daemon at `/`
 * (bridge/console.ts), talking to it over the same origin: the typed client (`parley/client`, over
 * /trpc) with the session key header, and the events WebSocket.
 */
import { render, type ComponentChildren } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import { checkKey, clearSessionKey, sessionKey, setSessionKey, takeKeyFromUrl, whenUnauthorized } from './api.js';
import { ConversationPage } from './conversation.js';
import { ConversationList } from './list.js';
import { SettingsPage } from './settings.js';
import { ErrorNote, href, Link, usePath } from './ui.js';
import './styles.css';
import './conversation.css';
import './parts.css';

// first of all: the start-up link's key leaves the address bar and the history entry
takeKeyFromUrl();

type Gate = { state: 'checking' } | { state: 'signin'; message: string | null } | { state: 'ready'; keyed: boolean } | { state: 'down'; message: string };

function SignIn({ message, onDone }: { message: string | null; onDone: () => void }) {
  const [key, setKey] = useState('');
  const [error, setError] = useState<string | null>(message);
  const [busy, setBusy] = useState(false);
  const submit = async (e: Event) => {
    e.preventDefault();
    setBusy(true);
    setError(null);
    try {
      if ((await checkKey(key.trim())) === 'refused') {
        setError('Wrong key: the daemon refused it (401). Use the value of SESSION_API_KEY (or one of SESSION_API_KEYS) the daemon was started with.');
        return;
      }
      setSessionKey(key.trim());
      onDone();
    } catch (err) {
      setError((err as Error).message);
    } finally {
      setBusy(false);
    }
  };
  return (
    <div class="signin">
      <form class="card signin-card" onSubmit={submit}>
        <div class="brand big">
          <span class="logo" /> Parley
        </div>
        <p>This daemon requires its session key.</p>
        <label>
          <span>Session key</span>
          <input type="password" name="key" autocomplete="current-password" autofocus value={key} onInput={(e) => setKey(e.currentTarget.value)} />
        </label>
        <ErrorNote error={error} />
        <button class="primary" type="submit" disabled={busy || !key.trim()}>
          Sign in
        </button>
        <p class="muted small">
          The key is kept for this tab only. The daemon's start-up output prints a link that signs you in (<code>http://…/#key=…</code>).
        </p>
      </form>
    </div>
  );
}

function Shell({ keyed, children }: { keyed: boolean; children: ComponentChildren }) {
  const path = usePath();
  const section = path.startsWith('/settings') ? 'settings' : 'conversations';
  return (
    <div class="shell">
      <header class="topbar">
        <Link href="/" class="brand">
          <span class="logo" /> Parley
        </Link>
        <nav>
          <Link href="/" class={section === 'conversations' ? 'active' : ''}>
            Conversations
          </Link>
          <Link href="/settings" class={section === 'settings' ? 'active' : ''}>
            Settings
          </Link>
          <a href="/docs" target="_blank" rel="noopener">
            API
          </a>
        </nav>
        <div class="spacer" />
        {keyed ? (
          <button
            type="button"
            class="ghost small"
            onClick={() => {
              clearSessionKey();
              location.assign(href('/'));
            }}
          >
            Sign out
          </button>
        ) : (
          <span class="muted small" title="The daemon has no SESSION_API_KEY: it answers on loopback only">
            no session key
          </span>
        )}
      </header>
      <main>{children}</main>
    </div>
  );
}

function App() {
  const [gate, setGate] = useState<Gate>({ state: 'checking' });
  const path = usePath();
  const check = async (refusedMessage: string | null) => {
    const key = sessionKey();
    try {
      if ((await checkKey(key)) === 'ok') return setGate({ state: 'ready', keyed: !!key });
      if (key) clearSessionKey();
      setGate({ state: 'signin', message: key ? refusedMessage : null });
    } catch (err) {
      setGate({ state: 'down', message: (err as Error).message });
    }
  };
  useEffect(() => {
    whenUnauthorized(() => {
      clearSessionKey();
      setGate({ state: 'signin', message: 'The daemon refused the session key (it may have been rotated). Sign in again.' });
    });
    const fromLink = 'The session key from the link was refused (401). Sign in with the current key.';
    void check(fromLink);
    // the link opened in a tab already on the console changes only the fragment: no new page load
    const linked = () => takeKeyFromUrl() && void check(fromLink);
    addEventListener('hashchange', linked);
    return () => removeEventListener('hashchange', linked);
  }, []);

  if (gate.state === 'checking') return <div class="center muted">Connecting…</div>;
  if (gate.state === 'down')
    return (
      <div class="center">
        <ErrorNote error={gate.message} />
        <button type="button" onClick={() => void check(null)}>
          Retry
        </button>
      </div>
    );
  if (gate.state === 'signin') return <SignIn key={gate.message ?? ''} message={gate.message} onDone={() => setGate({ state: 'ready', keyed: true })} />;
  const m = /^\/conversations\/([^/]+)$/.exec(path);
  return (
    <Shell keyed={gate.keyed}>
      {m ? <ConversationPage key={m[1]} id={decodeURIComponent(m[1]!)} /> : path === '/settings' ? <SettingsPage /> : <ConversationList />}
    </Shell>
  );
}

render(<App />, document.getElementById('app')!);
