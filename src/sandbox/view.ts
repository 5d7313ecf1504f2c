/**
 * The arguments of a holder's bwrap: the system read-only, the masks, the mounts of a
 * conversation's directories, the parents made enterable. Pure functions of what the host has and
 * what the launcher was told (the launcher computes the system part once, at its probe).
 */
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { VISIBLE_HOME, VISIBLE_IO, VISIBLE_OUTPUTS, VISIBLE_WORKSPACE, type MappedDir } from './settings.js';

/**
 * file-service.pl in the checkout, or next to the build (scripts/build.mjs copies it into dist/).
 * The channel's tests put a hostile stand-in in its place (PARLEY_TEST_FILE_SERVICE, honoured only
 * with NODE_ENV=test, a node program: `.mjs`): what comes out of a sandbox is attacked from inside a real one.
 */
export const FILE_SERVICE =
  (process.env.NODE_ENV === 'test' && process.env.PARLEY_TEST_FILE_SERVICE) || fileURLToPath(new URL('./file-service.pl', import.meta.url));
/** The file service's paths, errors and JSON, which it loads from beside itself. */
export const FILE_SERVICE_LIB = fileURLToPath(new URL('./file-service-lib.pl', import.meta.url));
/** Where a sandbox sees the service (or a test's stand-in, by its extension) and its library. */
export const serviceInside = (script: string) => (script.endsWith('.mjs') ? '/parley/file-service.mjs' : '/parley/file-service.pl');
const FILE_SERVICE_LIB_INSIDE = '/parley/file-service-lib.pl';

/** The program and arguments that run a file service `script` (as `perl` names perl): perl, or node for a test's stand-in. */
export function serviceProgram(perl: string, script: string): string[] {
  return script.endsWith('.mjs') ? [process.execPath, '--max-old-space-size=64', script] : [perl, script];
}

/** /usr and the /bin, /lib… entries as they are on the host. */
function programArgs(): string[] {
  const a: string[] = [];
  if (fs.existsSync('/usr')) a.push('--ro-bind', '/usr', '/usr');
  for (const dir of ['/bin', '/sbin', '/lib', '/lib32', '/lib64', '/libx32']) {
    let st: fs.Stats;
    try {
      st = fs.lstatSync(dir);
    } catch {
      continue;
    }
    if (st.isSymbolicLink()) a.push('--symlink', fs.readlinkSync(dir), dir);
    else if (st.isDirectory()) a.push('--ro-bind', dir, dir);
  }
  // the file service runs on the daemon's node: shown where it is when no mount above shows it
  const node = fs.realpathSync(process.execPath);
  if (!['/usr/', '/bin/', '/sbin/', '/lib', '/opt/'].some((root) => node.startsWith(root))) a.push('--ro-bind', node, process.execPath);
  return a;
}

/** Where /etc/resolv.conf leads on the host (systemd-resolved's stub in /run, usually); null without one (nothing to cover). */
function resolvConfTarget(): string | null {
  try {
    return fs.realpathSync('/etc/resolv.conf');
  } catch {
    return null;
  }
}

/** Read-only system mounts: /usr, /etc, /opt and the /bin, /lib… entries as they are on the host. */
export function systemArgs(): string[] {
  const a = programArgs();
  // /sys read-only (tools read the machine's shape there; nothing in it is written)
  for (const dir of ['/etc', '/opt', '/sys']) if (fs.existsSync(dir)) a.push('--ro-bind', dir, dir);
  // /etc/resolv.conf is often a symlink into /run (systemd-resolved): mount its target
  try {
    const real = fs.realpathSync('/etc/resolv.conf');
    if (!real.startsWith('/etc/') && !real.startsWith('/usr/')) a.push('--ro-bind', real, real);
  } catch {
    /* no resolver configuration */
  }
  // host keys and password hashes are readable by root: never show them
  for (const f of ['/etc/shadow', '/etc/gshadow', '/etc/shadow-', '/etc/gshadow-']) {
    if (fs.existsSync(f)) a.push('--ro-bind', '/dev/null', f);
  }
  try {
    for (const f of fs.readdirSync('/etc/ssh')) if (/^ssh_host_.*_key$/.test(f)) a.push('--ro-bind', '/dev/null', `/etc/ssh/${f}`);
  } catch {
    /* no sshd */
  }
  return a;
}

/** Daemon secrets that live under a mounted system directory: /etc/parley/parley.env (the systemd unit's EnvironmentFile). */
export const HIDDEN_PATHS = ['/etc/parley'];

/**
 * SANDBOX_RO_BINDS (after the private /tmp, so a directory under /tmp can be shown too), then the
 * hidden paths masked wherever a mount above would show them: an empty tmpfs over a directory,
 * /dev/null over a file. Masks follow every mount, so nothing mounted later re-exposes them.
 */
export function extraArgs(extra: string[], hidden: string[]): string[] {
  const a: string[] = [];
  const shown = ['/usr', '/etc', '/opt', '/bin', '/sbin', '/lib', '/lib32', '/lib64', '/libx32'];
  for (const dir of extra) {
    if (!dir || !fs.existsSync(dir)) continue;
    a.push('--ro-bind', path.resolve(dir), path.resolve(dir));
    shown.push(path.resolve(dir));
  }
  const under = (p: string, root: string) => p === root || p.startsWith(root.endsWith('/') ? root : `${root}/`);
  const masked: string[] = [];
  for (const h of [...hidden].sort((x, y) => x.length - y.length)) {
    let p: string;
    try {
      p = fs.realpathSync(h);
    } catch {
      continue;
    }
    if (!shown.some((root) => under(p, root) || under(path.resolve(h), root))) continue;
    for (const name of new Set([p, path.resolve(h)])) {
      if (!shown.some((root) => under(name, root)) || masked.some((m) => under(name, m))) continue;
      masked.push(name);
      if (fs.statSync(p).isDirectory()) a.push('--tmpfs', name);
      else a.push('--ro-bind', '/dev/null', name);
    }
  }
  return a;
}

/** bwrap's mount operations and how many arguments each takes (the destination is the last). */
const MOUNT_OPS: Record<string, number> = { '--ro-bind': 2, '--bind': 2, '--symlink': 2, '--tmpfs': 1, '--proc': 1, '--dev': 1 };

/**
 * The mount operations with the directories on the way to each destination made first, 0755:
 * bwrap makes missing ones 0700 and the daemon's (root's) when it runs as root, which the
 * sandbox's uid could not enter (/parley, /home, the parents of a SANDBOX_RO_BINDS directory).
 */
function withParentDirs(ops: string[]): string[] {
  const made = new Set<string>(['/']);
  const out: string[] = [];
  for (let i = 0; i < ops.length; ) {
    const op = ops[i]!;
    const n = MOUNT_OPS[op];
    if (n === undefined) throw new Error(`withParentDirs: unexpected bwrap option ${op}`);
    const dest = ops[i + n]!;
    const parents: string[] = [];
    for (let p = path.posix.dirname(dest); !made.has(p); p = path.posix.dirname(p)) parents.unshift(p);
    for (const p of parents) {
      out.push('--perms', '0755', '--dir', p);
      made.add(p);
    }
    out.push(...ops.slice(i, i + n + 1));
    made.add(dest);
    i += n + 1;
  }
  return out;
}

/** The host directories a holder binds: the workspace, /tmp (also /var/tmp), HOME, the FIFOs (read-write) and saved outputs (read-only). */
export interface ViewDirs {
  workspace: string;
  tmp: string;
  home: string;
  io: string;
  outputs: string;
}

/** A holder's directories when everything is on the data disk: the workspace, and the rest in its state directory. */
export function plainDirs(workspace: string, state: string): ViewDirs {
  return { workspace, tmp: path.join(state, 'tmp'), home: path.join(state, 'home'), io: path.join(state, 'io'), outputs: path.join(state, 'outputs') };
}

/**
 * The conversation's view, mounted once by its holder: `system` (systemArgs) and `extra` (extraArgs)
 * as the probe computed them, the conversation's directories, the mapped helpers, the file service,
 * and with egress the sandbox's resolv.conf.
 */
export function viewArgs(
  o: { system: string[]; extra: string[]; mapped: MappedDir[]; resolvConf: string | null; fileService?: string },
  dirs: ViewDirs,
): string[] {
  const a = [
    ...o.system,
    '--proc',
    '/proc',
    '--dev',
    '/dev',
    '--bind',
    dirs.tmp,
    '/tmp',
    '--bind',
    dirs.tmp,
    '/var/tmp',
    ...o.extra,
    '--bind',
    dirs.home,
    VISIBLE_HOME,
    '--bind',
    dirs.io,
    VISIBLE_IO,
    '--ro-bind',
    dirs.outputs,
    VISIBLE_OUTPUTS,
    '--bind',
    dirs.workspace,
    VISIBLE_WORKSPACE,
  ];
  for (const m of o.mapped) if (fs.existsSync(m.host)) a.push('--ro-bind', m.host, m.inside);
  const service = o.fileService ?? FILE_SERVICE;
  a.push('--ro-bind', service, serviceInside(service), '--ro-bind', FILE_SERVICE_LIB, FILE_SERVICE_LIB_INSIDE);
  // egress: the tool's DNS forwarder (on the host's resolv.conf's target, when it is a link into /run)
  const resolv = resolvConfTarget();
  if (o.resolvConf && resolv) a.push('--ro-bind', o.resolvConf, resolv);
  return withParentDirs(a);
}
