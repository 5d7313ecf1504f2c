/**
 * The environment handed to child processes: the sandbox's processes and the workspace module's (git, setup.sh).
 *
 * The daemon's own environment holds secrets (SECRET_KEY, LLM_API_KEY, SESSION_API_KEY…), so a
 * child never inherits it wholesale: only the variables a shell or git needs to work (PATH, HOME,
 * locale, temp dir, proxies, CA bundles) are copied, and the caller adds what it means to pass.
 * A sandbox's processes get less of the host still (sandboxChildEnv): its own PATH, and a CA bundle
 * variable only where it names a file the sandbox shows.
 */
import path from 'node:path';

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

/**
 * PATH in a sandbox: the system's directories. The daemon's own PATH names host directories the
 * sandbox does not show or has no business knowing (a checkout's node_modules/.bin, the daemon
 * user's pyenv and cargo).
 */
export const SANDBOX_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

/** What a sandbox is given of the daemon's environment: locale, terminal, proxies (the caller's choice), CA bundles. */
const SANDBOX_PASSTHROUGH = [
  'LANG',
  'LANGUAGE',
  'LC_ALL',
  'LC_CTYPE',
  'TZ',
  'TERM',
  'HTTP_PROXY',
  'HTTPS_PROXY',
  'NO_PROXY',
  'http_proxy',
  'https_proxy',
  'no_proxy',
];
const CA_VARS = ['SSL_CERT_FILE', 'SSL_CERT_DIR', 'GIT_SSL_CAINFO', 'GIT_SSL_CAPATH', 'NODE_EXTRA_CA_CERTS'];
/** The system directories a sandbox shows as they are on the host (view.ts); SANDBOX_RO_BINDS adds more. */
const SHOWN = ['/usr', '/etc', '/opt'];

/**
 * The environment of a sandboxed process: SANDBOX_PATH, the variables above, a CA bundle variable
 * when the file it names is shown in the sandbox (under /usr, /etc, /opt or a SANDBOX_RO_BINDS
 * directory; elsewhere it would only name a host path), plus `extra` (HOME and the like, the
 * conversation's secrets).
 */
export function sandboxChildEnv(extra: Record<string, string | undefined>, roBinds: string[] = []): Record<string, string> {
  const env: Record<string, string> = { PATH: SANDBOX_PATH, SHELL: '/bin/bash' };
  for (const name of SANDBOX_PASSTHROUGH) {
    const v = process.env[name];
    if (v !== undefined) env[name] = v;
  }
  const shown = [...SHOWN, ...roBinds.map((d) => path.resolve(d))];
  for (const name of CA_VARS) {
    const v = process.env[name];
    if (v && path.isAbsolute(v) && shown.some((d) => v === d || v.startsWith(`${d}/`))) env[name] = v;
  }
  for (const [k, v] of Object.entries(extra)) {
    if (v === undefined) delete env[k];
    else env[k] = v;
  }
  return env;
}

/** What turns environment `from` into `to`: each variable to set, and null for each to unset. */
export function envChanges(from: Record<string, string>, to: Record<string, string>): Record<string, string | null> {
  const out: Record<string, string | null> = {};
  for (const [k, v] of Object.entries(to)) if (from[k] !== v) out[k] = v;
  for (const k of Object.keys(from)) if (!(k in to)) out[k] = null;
  return out;
}
