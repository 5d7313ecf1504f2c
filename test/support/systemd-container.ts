/**
 * A real systemd (the host's /lib/systemd/systemd) booted as PID 1 of private pid, mount, UTS, IPC
 * and cgroup namespaces, for running a unit file as systemd runs it: its seccomp filters, namespace
 * restrictions, PrivateDevices, Delegate=… all applied by systemd itself. No systemd-nspawn, no
 * container image: the host's file system, seen through the container's own mounts.
 *
 * What the container shares with the host, and how it is kept from changing anything there:
 * - the file system: /etc and /var are overlays whose writes land in a tmpfs of the container's
 *   mount namespace (the `parley` user, /etc/parley, /var/lib/parley exist only there); /run, /tmp,
 *   /var/tmp, /dev and /opt are the container's own tmpfs; the checkout is bind-mounted read-only
 *   on /opt/<name> (a symlinked node_modules replaced by the directory it points to);
 * - the units: the container sees only the few given to it (a tmpfs on /etc/systemd/system, a
 *   directory of stub targets plus journald on /usr/lib/systemd/system, no generators): none of the
 *   host's enabled services (databases, brokers…) can start in it;
 * - /proc/sys: read-only while systemd boots (PID 1 raises fs.file-max, fs.nr_open and
 *   net.unix.max_dgram_qlen, which are the host's), then the read-only overmount is detached before
 *   any unit runs: an overmounted /proc makes the kernel refuse the fresh /proc bwrap mounts
 *   ("mount_too_revealing");
 * - cgroups: a cgroup v2 directory of its own under the host's cgroup2 mount, seen as the root
 *   through the cgroup namespace; close() kills everything in it (cgroup.kill) and removes it;
 * - the network namespace is the host's (the daemon's port is reachable from the test; the
 *   scripted LLM on the host is reachable from the daemon). systemd brings `lo` up, nothing else.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { waitFor } from './daemon.js';

export interface ContainerFile {
  /** Absolute path inside the container (under /etc or /var: overlays). */
  path: string;
  /** Absent: a directory. */
  content?: string;
  mode?: number;
  group?: string;
}

export interface BootOptions {
  /** Host directory bind-mounted read-only on `/opt/<appName>` (its code). */
  checkout: string;
  appName: string;
  /** An account that exists only in the container (appended to its /etc/passwd and /etc/group). */
  user: { name: string; uid: number };
  /** Files installed after the user exists, e.g. /etc/systemd/system/x.service, /etc/x/x.env. */
  files: ContainerFile[];
  bootTimeoutMs?: number;
}

export interface SystemdContainer {
  /** Host pid of the container's systemd (PID 1 inside). */
  readonly pid: number;
  /** Host path of the container's cgroup v2 root. */
  readonly cgroup: string;
  /** A command run as root in the container's namespaces (systemctl, journalctl…). */
  exec(args: string[], timeoutMs?: number): Promise<{ code: number | null; out: string }>;
  /** `journalctl -o cat` of one unit, or of everything. */
  journal(unit?: string): Promise<string>;
  /** Host pids of the processes in a unit's cgroup (e.g. `system.slice/parley.service`), subgroups included. */
  pidsIn(relCgroup: string): number[];
  /** The host pid of a pid as the container sees it (NSpid), among the container's processes. */
  hostPidOf(nsPid: number): number | null;
  /** Kills everything in the container, removes its cgroup and temporary files. */
  close(): Promise<void>;
}

const SYSTEMD = '/lib/systemd/systemd';

/** The host's cgroup2 mount point and this process's cgroup in it, or null. */
function hostCgroup2(): string | null {
  const mount = fs
    .readFileSync('/proc/self/mounts', 'utf8')
    .split('\n')
    .map((l) => l.split(' '))
    .find((f) => f[2] === 'cgroup2')?.[1];
  const own = /^0::(.*)$/m.exec(fs.readFileSync('/proc/self/cgroup', 'utf8'))?.[1];
  return mount && own !== undefined ? path.join(mount, own) : null;
}

/** Why a systemd container cannot be booted here, or null when it can. */
export function systemdContainerUnsupported(): string | null {
  if (process.getuid?.() !== 0) return 'needs root (mounts, namespaces, a cgroup for the container)';
  if (!fs.existsSync(SYSTEMD)) return `no systemd (${SYSTEMD})`;
  for (const tool of ['unshare', 'nsenter', 'mount']) {
    if (!['/usr/bin', '/bin', '/usr/sbin', '/sbin'].some((d) => fs.existsSync(path.join(d, tool)))) return `no ${tool} (util-linux)`;
  }
  const cg = hostCgroup2();
  if (!cg) return 'no cgroup2 hierarchy mounted';
  const probe = path.join(cg, `parley-systemd-probe-${process.pid}`);
  try {
    fs.mkdirSync(probe);
    fs.rmdirSync(probe);
  } catch (e) {
    return `the cgroup2 hierarchy is not writable here (${(e as Error).message})`;
  }
  return null;
}

/** Stub targets: what a service's default dependencies name, pulling in nothing but journald. */
function stubUnits(): Record<string, string> {
  const units: Record<string, string> = {
    'sysinit.target':
      '[Unit]\nDescription=System Initialization (container stub)\nDefaultDependencies=no\nWants=systemd-journald.socket ' +
      'systemd-journald-dev-log.socket systemd-journald.service\nAfter=systemd-journald.socket systemd-journald-dev-log.socket\n',
    'basic.target': '[Unit]\nDescription=Basic System (container stub)\nRequires=sysinit.target\nAfter=sysinit.target\n',
    'container-boot.target': '[Unit]\nDescription=Container boot (test)\nRequires=basic.target\nAfter=basic.target\n',
  };
  for (const t of ['shutdown', 'network', 'network-online', 'multi-user'])
    units[`${t}.target`] = `[Unit]\nDescription=${t}.target (container stub)\nDefaultDependencies=no\n`;
  // the real journal (Storage=volatile below: /run/log/journal, the container's tmpfs)
  for (const u of ['systemd-journald.service', 'systemd-journald.socket', 'systemd-journald-dev-log.socket']) {
    units[u] = fs.readFileSync(path.join('/lib/systemd/system', u), 'utf8');
  }
  return units;
}

/**
 * Runs as the first process of the new namespaces (sh -c INNER sh <work dir> <checkout> <app name>
 * <user> <uid>); ends by exec'ing systemd. Every mount is in the container's mount namespace only.
 */
const INNER = String.raw`set -eu
W=$1; CHECKOUT=$2; APP=$3; USERNAME=$4; USERID=$5
mount --make-rprivate /
mount -t proc -o nosuid,nodev,noexec proc /proc
mount -t tmpfs -o mode=0700 tmpfs "$W/ns"
mkdir "$W/ns/etc.up" "$W/ns/etc.work" "$W/ns/var.up" "$W/ns/var.work"
mount -t overlay overlay -o "lowerdir=/etc,upperdir=$W/ns/etc.up,workdir=$W/ns/etc.work" /etc
mount -t overlay overlay -o "lowerdir=/var,upperdir=$W/ns/var.up,workdir=$W/ns/var.work" /var
mount -t tmpfs -o mode=0755 tmpfs /etc/systemd/system
mkdir -p /etc/systemd/journald.conf.d
printf '[Journal]\nStorage=volatile\n' > /etc/systemd/journald.conf.d/container.conf
echo "$USERNAME:x:$USERID:$USERID:$USERNAME:/var/lib/$USERNAME:/usr/sbin/nologin" >> /etc/passwd
echo "$USERNAME:x:$USERID:" >> /etc/group
while IFS=' ' read -r src mode group dst; do
  if [ "$src" = - ]; then install -d -m "$mode" -g "$group" "$dst"; else install -D -m "$mode" -g "$group" "$W/files/$src" "$dst"; fi
done < "$W/files.list"
mount --bind "$W/units" /usr/lib/systemd/system
mount -o remount,bind,ro /usr/lib/systemd/system
for g in system-generators system-environment-generators; do
  if [ -d /usr/lib/systemd/$g ]; then mount -t tmpfs -o ro,mode=0755 tmpfs /usr/lib/systemd/$g; fi
done
mount -t tmpfs -o mode=0755 tmpfs /opt
mkdir "/opt/$APP"
if [ -L "$CHECKOUT/node_modules" ]; then
  # a git worktree's node_modules is a symlink, perhaps to where the unit hides (/tmp, /home, /root):
  # in the container it is replaced by a bind mount of the directory it points to
  mkdir "$W/ns/app.up" "$W/ns/app.work"
  mount -t overlay overlay -o "lowerdir=$CHECKOUT,upperdir=$W/ns/app.up,workdir=$W/ns/app.work" "/opt/$APP"
  MODULES=$(readlink -f "$CHECKOUT/node_modules")
  rm "/opt/$APP/node_modules"
  mkdir "/opt/$APP/node_modules"
  mount --bind "$MODULES" "/opt/$APP/node_modules"
  mount -o remount,bind,ro "/opt/$APP/node_modules"
else
  mount --rbind "$CHECKOUT" "/opt/$APP"
fi
mount -o remount,bind,ro "/opt/$APP"
mount --bind /sys /sys
mount -o remount,bind,ro,nosuid,nodev,noexec /sys
mount -t cgroup2 -o nosuid,nodev,noexec cgroup2 /sys/fs/cgroup
mount -t tmpfs -o mode=0755,nosuid tmpfs /dev
mknod -m 666 /dev/null c 1 3; mknod -m 666 /dev/zero c 1 5; mknod -m 666 /dev/full c 1 7
mknod -m 666 /dev/random c 1 8; mknod -m 666 /dev/urandom c 1 9; mknod -m 666 /dev/tty c 5 0
mkdir /dev/pts /dev/shm /dev/net
# the tun device, as a machine with it has (the unit binds it for the sandboxes' egress network)
mknod -m 666 /dev/net/tun c 10 200
mount -t devpts -o newinstance,ptmxmode=0666,mode=0620,gid=5,nosuid,noexec devpts /dev/pts
ln -s pts/ptmx /dev/ptmx
mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /dev/shm
ln -s /proc/self/fd /dev/fd; ln -s /proc/self/fd/0 /dev/stdin; ln -s /proc/self/fd/1 /dev/stdout; ln -s /proc/self/fd/2 /dev/stderr
touch /dev/console
mount --bind "$W/console" /dev/console
mount -t tmpfs -o mode=0755,nosuid,nodev tmpfs /run
mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /tmp
mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /var/tmp
mount --bind /proc/sys /proc/sys
mount -o remount,bind,ro /proc/sys
exec env -i container=parley-test PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin ${SYSTEMD} --unit=container-boot.target
`;

function run(cmd: string, args: string[], timeoutMs: number): Promise<{ code: number | null; out: string }> {
  return new Promise((resolve) => {
    const p = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    p.stdout.on('data', (c: Buffer) => (out += c.toString('utf8')));
    p.stderr.on('data', (c: Buffer) => (out += c.toString('utf8')));
    const timer = setTimeout(() => {
      out += `\n(killed after ${timeoutMs} ms)`;
      p.kill('SIGKILL');
    }, timeoutMs);
    p.on('error', (e) => {
      clearTimeout(timer);
      resolve({ code: -1, out: String(e) });
    });
    p.on('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, out });
    });
  });
}

function readPids(file: string): number[] {
  try {
    return fs.readFileSync(file, 'utf8').split(/\s+/).filter(Boolean).map(Number);
  } catch {
    return [];
  }
}

/** Every pid in a cgroup directory and its subdirectories. */
function pidsUnder(dir: string): number[] {
  const out = readPids(path.join(dir, 'cgroup.procs'));
  let entries: fs.Dirent[] = [];
  try {
    entries = fs.readdirSync(dir, { withFileTypes: true });
  } catch {
    /* gone */
  }
  for (const e of entries) if (e.isDirectory()) out.push(...pidsUnder(path.join(dir, e.name)));
  return out;
}

/** Removes a cgroup tree bottom-up; true once it is gone. */
function removeCgroup(dir: string): boolean {
  let entries: fs.Dirent[];
  try {
    entries = fs.readdirSync(dir, { withFileTypes: true });
  } catch {
    return true;
  }
  for (const e of entries) if (e.isDirectory()) removeCgroup(path.join(dir, e.name));
  try {
    fs.rmdirSync(dir);
    return true;
  } catch {
    return !fs.existsSync(dir);
  }
}

function killCgroup(dir: string) {
  try {
    fs.writeFileSync(path.join(dir, 'cgroup.kill'), '1');
  } catch {
    /* gone, or a kernel without cgroup.kill (< 5.14): the pid namespace ends with its PID 1 below */
  }
}

const live = new Set<string>();
let exitHook = false;

export async function bootSystemdContainer(opts: BootOptions): Promise<SystemdContainer> {
  const base = hostCgroup2();
  if (!base) throw new Error('no cgroup2 hierarchy');
  const cgroup = path.join(base, `parley-systemd-${process.pid}-${crypto.randomBytes(4).toString('hex')}`);
  const work = fs.mkdtempSync(path.join(os.tmpdir(), 'parley-systemd-'));
  fs.mkdirSync(path.join(work, 'ns'));
  fs.mkdirSync(path.join(work, 'units'));
  fs.mkdirSync(path.join(work, 'files'));
  fs.writeFileSync(path.join(work, 'console'), '');
  for (const [name, text] of Object.entries(stubUnits())) fs.writeFileSync(path.join(work, 'units', name), text);
  const list = opts.files.map((f, i) => {
    if (f.content !== undefined) fs.writeFileSync(path.join(work, 'files', String(i)), f.content);
    return `${f.content === undefined ? '-' : i} ${(f.mode ?? (f.content === undefined ? 0o755 : 0o644)).toString(8)} ${f.group ?? 'root'} ${f.path}`;
  });
  fs.writeFileSync(path.join(work, 'files.list'), `${list.join('\n')}\n`);
  fs.mkdirSync(cgroup);
  live.add(cgroup);
  if (!exitHook) {
    exitHook = true;
    // a test process that dies mid-test still kills what it booted (the cgroup is removed by close() only)
    process.once('exit', () => {
      for (const c of live) killCgroup(c);
    });
  }

  let output = '';
  const proc: ChildProcess = spawn(
    'sh',
    [
      '-c',
      'echo $$ > "$0/cgroup.procs" && exec unshare --pid --fork --kill-child --mount --uts --ipc --cgroup --propagation private sh -c "$1" sh "$2" ' +
        '"$3" "$4" "$5" "$6"',
      cgroup,
      INNER,
      work,
      opts.checkout,
      opts.appName,
      opts.user.name,
      String(opts.user.uid),
    ],
    { stdio: ['ignore', 'pipe', 'pipe'], env: { PATH: '/usr/sbin:/usr/bin:/sbin:/bin' } },
  );
  proc.stdout!.on('data', (c: Buffer) => (output += c.toString('utf8')));
  proc.stderr!.on('data', (c: Buffer) => (output += c.toString('utf8')));
  const exited = new Promise<void>((resolve) => proc.on('exit', () => resolve()));
  let ended = false;
  void exited.then(() => (ended = true));

  const close = async () => {
    killCgroup(cgroup);
    proc.kill('SIGKILL');
    await exited;
    await waitFor(() => pidsUnder(cgroup).length === 0 && removeCgroup(cgroup), 'the container cgroup removed', 10_000);
    live.delete(cgroup);
    fs.rmSync(work, { recursive: true, force: true });
  };

  const diagnostics = () =>
    `${output}\nconsole:\n${(() => {
      try {
        return fs.readFileSync(path.join(work, 'console'), 'utf8');
      } catch {
        return '';
      }
    })()}`;

  try {
    const timeout = opts.bootTimeoutMs ?? 30_000;
    // PID 1 of the namespace: unshare's child, once it has exec'd systemd
    const pid = await waitFor(
      () => {
        if (ended) throw new Error(`the container setup failed:\n${diagnostics()}`);
        for (const k of readPids(`/proc/${proc.pid}/task/${proc.pid}/children`)) {
          try {
            if (fs.readlinkSync(`/proc/${k}/exe`) === fs.realpathSync(SYSTEMD)) return k;
          } catch {
            /* not yet */
          }
        }
        return 0;
      },
      'systemd to start',
      timeout,
    );
    const exec = (args: string[], timeoutMs = 30_000) => run('nsenter', ['-t', String(pid), '-m', '-p', '-u', '-i', '-C', '--', ...args], timeoutMs);
    await waitFor(
      async () => {
        if (ended) throw new Error(`systemd exited:\n${diagnostics()}`);
        const r = await exec(['systemctl', 'is-system-running'], 5_000);
        return /^(running|degraded)$/m.test(r.out);
      },
      'systemd to finish booting',
      timeout,
    ).catch(async (e) => {
      throw new Error(`${(e as Error).message}\n${diagnostics()}\n${(await exec(['journalctl', '--no-pager', '-o', 'short'], 5_000)).out}`);
    });
    // booted: /proc/sys back as it is on a real host (see the top of this file)
    const um = await exec(['umount', '--lazy', '/proc/sys']);
    if (um.code !== 0) throw new Error(`umount /proc/sys: ${um.out}`);

    return {
      pid,
      cgroup,
      exec,
      async journal(unit?: string) {
        return (await exec(['journalctl', '--no-pager', '-o', 'cat', ...(unit ? ['-u', unit] : [])])).out;
      },
      pidsIn(rel: string) {
        return pidsUnder(path.join(cgroup, rel));
      },
      hostPidOf(nsPid: number) {
        for (const p of pidsUnder(cgroup)) {
          try {
            const ns = /^NSpid:\s+(.*)$/m
              .exec(fs.readFileSync(`/proc/${p}/status`, 'utf8'))?.[1]
              ?.trim()
              .split(/\s+/);
            // NSpid: host pid, then the pid in each nested namespace; the container's is the second
            if (ns && Number(ns[1]) === nsPid) return p;
          } catch {
            /* gone */
          }
        }
        return null;
      },
      close,
    };
  } catch (e) {
    await close();
    throw e;
  }
}
