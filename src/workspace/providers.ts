/**
 * Git providers: names, default hosts, the username each one expects with a token over HTTPS,
 * and the environment variable that carries its token in the agent's shell.
 *
 * A stored `host` may be a bare host (`github.example.com`, `gitlab.local:8443`), a host with a
 * path prefix (`example.com/gitlab`) or a full base URL with a scheme (`http://127.0.0.1:8080`).
 * Without a scheme it means https. A host carrying credentials, a query or a fragment is refused:
 * credentials must never end up in a remote URL.
 */

export const GIT_PROVIDERS = ['github', 'gitlab', 'bitbucket', 'enterprise_sso'] as const;
export type GitProvider = (typeof GIT_PROVIDERS)[number];

/** One stored provider entry (token and host as stored by add-git-providers). */
export interface ProviderCredential {
  provider: GitProvider;
  token?: string | null;
  host?: string | null;
}

/** Default host per provider. `enterprise_sso` has none: it is only usable with a stored host. */
const DEFAULT_HOSTS: Record<GitProvider, string | null> = {
  github: 'github.com',
  gitlab: 'gitlab.com',
  bitbucket: 'bitbucket.org',
  enterprise_sso: null,
};

/** The HTTPS username that goes with a token (the token itself is the password). */
export const TOKEN_USERNAMES: Record<GitProvider, string> = {
  github: 'x-access-token',
  gitlab: 'oauth2',
  bitbucket: 'x-token-auth',
  enterprise_sso: 'oauth2',
};

/** Environment variable holding the provider's token in the agent's shell. */
export const TOKEN_ENV_VARS: Record<GitProvider, string> = {
  github: 'GITHUB_TOKEN',
  gitlab: 'GITLAB_TOKEN',
  bitbucket: 'BITBUCKET_TOKEN',
  enterprise_sso: 'ENTERPRISE_SSO_TOKEN',
};

export class InvalidHostError extends Error {
  override name = 'InvalidHostError';
}

export function isGitProvider(value: unknown): value is GitProvider {
  return typeof value === 'string' && (GIT_PROVIDERS as readonly string[]).includes(value);
}

/**
 * The base URL (no trailing slash) of a provider: `https://github.com`, `http://127.0.0.1:8080`,
 * `https://example.com/gitlab`. Returns null when the provider has no host (enterprise_sso
 * without a stored host). Throws InvalidHostError for a malformed host.
 */
export function providerBaseUrl(provider: GitProvider, host?: string | null): string | null {
  const raw = (host ?? '').trim() || DEFAULT_HOSTS[provider];
  if (!raw) return null;
  const withScheme = /^[a-z][a-z0-9+.-]*:\/\//i.test(raw) ? raw : `https://${raw}`;
  let url: URL;
  try {
    url = new URL(withScheme);
  } catch {
    throw new InvalidHostError(`Invalid host for ${provider}: not a host name or URL`);
  }
  if (url.protocol !== 'https:' && url.protocol !== 'http:') {
    throw new InvalidHostError(`Invalid host for ${provider}: only http and https are supported`);
  }
  if (url.username || url.password) {
    throw new InvalidHostError(`Invalid host for ${provider}: a host must not carry credentials`);
  }
  if (url.search || url.hash) {
    throw new InvalidHostError(`Invalid host for ${provider}: a host must not carry a query or fragment`);
  }
  if (!url.hostname) throw new InvalidHostError(`Invalid host for ${provider}: empty host name`);
  const path = url.pathname.replace(/\/+$/, '');
  return `${url.protocol}//${url.host}${path}`;
}

/**
 * Username and password for a token. A Bitbucket token of the form `user:app_password` is an
 * app password with its own username; any other token goes with the provider's fixed username.
 */
export function tokenCredentials(provider: GitProvider, token: string): { username: string; password: string } {
  if (provider === 'bitbucket') {
    const colon = token.indexOf(':');
    if (colon > 0) return { username: token.slice(0, colon), password: token.slice(colon + 1) };
  }
  return { username: TOKEN_USERNAMES[provider], password: token };
}
