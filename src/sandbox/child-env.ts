/**
 * The environment handed to child processes: the sandbox's processes and the workspace module's (git, setup.sh).
 *
 * The daemon's own environment holds secrets (SECRET_KEY, LLM_API_KEY, SESSION_API_KEY…), so a
 * child never inherits it wholesale: only the variables a shell or git needs to work (PATH, HOME,
 * locale, temp dir, proxies, CA bundles) are copied, and the caller adds what it means to pass.
 */

const PASSTHROUGH = [
  'PATH',
  'HOME',
  'USER',
  'LOGNAME',
  'SHELL',
  'LANG',
  'LANGUAGE',
  'LC_ALL',
  'LC_CTYPE',
  'TZ',
  'TMPDIR',
  'TERM',
  'HTTP_PROXY',
  'HTTPS_PROXY',
  'NO_PROXY',
  'http_proxy',
  'https_proxy',
  'no_proxy',
  'SSL_CERT_FILE',
  'SSL_CERT_DIR',
  'GIT_SSL_CAINFO',
  'GIT_SSL_CAPATH',
  'NODE_EXTRA_CA_CERTS',
];

export function baseChildEnv(extra: Record<string, string | undefined> = {}): Record<string, string> {
  const env: Record<string, string> = {};
  for (const name of PASSTHROUGH) {
    const v = process.env[name];
    if (v !== undefined) env[name] = v;
  }
  if (!env.PATH) env.PATH = '/usr/local/bin:/usr/bin:/bin';
  for (const [k, v] of Object.entries(extra)) {
    if (v === undefined) delete env[k];
    else env[k] = v;
  }
  return env;
}
