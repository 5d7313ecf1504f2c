/**
 * Git authentication without writing a token anywhere.
 *
 * Git asks `GIT_ASKPASS <prompt>` for a username and a password when a server answers 401. The
 * askpass program written here is a small POSIX shell script that holds NO secret: it prints
 * values taken from its own environment, which git inherits from the process that started it.
 * Tokens therefore live only in the environment of the git process (or of the agent's shell),
 * never in a URL, `.git/config`, a workspace file, or a command line.
 *
 * Two modes:
 * - clone mode (used by cloneRepository): `PARLEY_ASKPASS_USERNAME` / `PARLEY_ASKPASS_PASSWORD`
 *   are set on the one git child process and answered only when the prompt names
 *   `PARLEY_ASKPASS_ORIGIN` (scheme://host[:port] of the clone URL): a server that redirects the
 *   clone to another host (or from https to http) is asked for credentials there, and gets none;
 * - shell mode (askpassEnv, for the agent's later `git fetch`/`git push`): the prompt's URL host
 *   is looked up in `PARLEY_GIT_HOSTS` (`scheme://host[:port]=provider` entries, no secrets: a
 *   redirect to another host or from https to http gets nothing) and the token
 *   is read from GITHUB_TOKEN / GITLAB_TOKEN / BITBUCKET_TOKEN / ENTERPRISE_SSO_TOKEN.
 *
 * The script must live outside the workspace (a daemon-owned `helperDir`), mode 0755 (it holds no secret).
 */
import { mkdir, readFile, rename, writeFile, chmod } from 'node:fs/promises';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { GIT_PROVIDERS, TOKEN_ENV_VARS, TOKEN_USERNAMES, providerBaseUrl, type GitProvider, type ProviderCredential } from './providers.js';

const ASKPASS_SCRIPT_NAME = 'parley-git-askpass.sh';

function askpassScript(): string {
  const cases = GIT_PROVIDERS.map((p) => {
    const split = p === 'bitbucket' ? `\n    case "$tok" in ?*:*) user=\${tok%%:*}; tok=\${tok#*:} ;; esac` : '';
    return `  ${p})\n    user='${TOKEN_USERNAMES[p]}'; tok=\${${TOKEN_ENV_VARS[p]}-}${split} ;;`;
  }).join('\n');
  return `#!/bin/sh
# Parley GIT_ASKPASS helper. It holds no secret: it prints values from its environment.
prompt=\${1-}
case "$prompt" in
  [Uu]sername*) want=user ;;
  *) want=pass ;;
esac
url=\${prompt#*\\'}
url=\${url%%\\'*}
scheme=$(printf '%s' "\${url%%://*}" | tr '[:upper:]' '[:lower:]')
rest=\${url#*://}
hostport=\${rest%%/*}
hostport=\${hostport##*@}
hostport=$(printf '%s' "$hostport" | tr '[:upper:]' '[:lower:]')
if [ -n "\${PARLEY_ASKPASS_PASSWORD+x}" ]; then
  # only the origin the clone was started against: a redirect to another host or scheme gets nothing
  [ "$scheme://$hostport" = "\${PARLEY_ASKPASS_ORIGIN-}" ] || exit 1
  if [ "$want" = user ]; then printf '%s\\n' "\${PARLEY_ASKPASS_USERNAME-}"; else printf '%s\\n' "$PARLEY_ASKPASS_PASSWORD"; fi
  exit 0
fi
provider=
for entry in \${PARLEY_GIT_HOSTS-}; do
  if [ "\${entry%=*}" = "$scheme://$hostport" ]; then provider=\${entry##*=}; break; fi
done
case "$provider" in
${cases}
  *) exit 1 ;;
esac
[ -n "$tok" ] || exit 1
if [ "$want" = user ]; then printf '%s\\n' "$user"; else printf '%s\\n' "$tok"; fi
`;
}

/** `scheme://host[:port]` of a provider base URL, as git names it in its prompts (see the script). */
export function askpassOrigin(baseUrl: string): string {
  const u = new URL(baseUrl);
  return `${u.protocol}//${u.host}`.toLowerCase();
}

const ensured = new Map<string, Promise<string>>();

/**
 * Writes (atomically, mode 0755) the askpass script into `helperDir` once per process (the agent's
 * shell environment is built at every step; the daemon's data directory is nobody else's to change);
 * returns its path.
 */
export function ensureAskpassScript(helperDir: string): Promise<string> {
  let p = ensured.get(helperDir);
  if (!p) {
    p = writeAskpassScript(helperDir);
    ensured.set(helperDir, p);
    p.catch(() => ensured.delete(helperDir));
  }
  return p;
}

async function writeAskpassScript(helperDir: string): Promise<string> {
  // readable and executable by the sandboxes' uid (it holds no secret: they come in the environment);
  // DATA_DIR (0700) keeps everyone else out
  await mkdir(helperDir, { recursive: true, mode: 0o755 });
  await chmod(helperDir, 0o755);
  const path = join(helperDir, ASKPASS_SCRIPT_NAME);
  const content = askpassScript();
  const current = await readFile(path, 'utf8').catch(() => null);
  if (current === content) {
    await chmod(path, 0o755);
    return path;
  }
  const tmp = `${path}.${randomBytes(6).toString('hex')}.tmp`;
  await writeFile(tmp, content, { mode: 0o755 });
  await chmod(tmp, 0o755); // (the daemon's umask is 077)
  await rename(tmp, path);
  return path;
}

function withToken(providers: ProviderCredential[]): Map<GitProvider, ProviderCredential & { token: string }> {
  const out = new Map<GitProvider, ProviderCredential & { token: string }>();
  for (const p of providers) {
    if (p.token && !out.has(p.provider)) out.set(p.provider, { ...p, token: p.token });
  }
  return out;
}

/**
 * Token variables for the agent's shell: GITHUB_TOKEN, GITLAB_TOKEN, BITBUCKET_TOKEN (and
 * ENTERPRISE_SSO_TOKEN) for each stored provider that has a token.
 */
export function gitCredentialEnv(providers: ProviderCredential[]): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [provider, cred] of withToken(providers)) env[TOKEN_ENV_VARS[provider]] = cred.token;
  return env;
}

/**
 * `host[:port]=provider` entries (space separated) for every provider with a token and a usable
 * host. Order: github, gitlab, bitbucket, enterprise_sso (the first match wins in the script).
 */
export function askpassHostMap(providers: ProviderCredential[]): string {
  const byProvider = withToken(providers);
  const entries: string[] = [];
  for (const provider of GIT_PROVIDERS) {
    const cred = byProvider.get(provider);
    if (!cred) continue;
    let base: string | null;
    try {
      base = providerBaseUrl(provider, cred.host);
    } catch {
      continue;
    }
    if (base) entries.push(`${askpassOrigin(base)}=${provider}`);
  }
  return entries.join(' ');
}

/**
 * Environment for the agent's shell so its own `git fetch` / `git push` authenticate like the
 * clone did: GIT_ASKPASS (script in helperDir), the host map, the token variables,
 * GIT_TERMINAL_PROMPT=0, and `credential.helper` reset through GIT_CONFIG_* so no credential
 * helper configured on the machine (e.g. `store`) ever writes the token to disk.
 */
export async function askpassEnv(providers: ProviderCredential[], helperDir: string): Promise<Record<string, string>> {
  const script = await ensureAskpassScript(helperDir);
  return {
    ...gitCredentialEnv(providers),
    GIT_ASKPASS: script,
    GIT_TERMINAL_PROMPT: '0',
    PARLEY_GIT_HOSTS: askpassHostMap(providers),
    GIT_CONFIG_COUNT: '1',
    GIT_CONFIG_KEY_0: 'credential.helper',
    GIT_CONFIG_VALUE_0: '',
  };
}
