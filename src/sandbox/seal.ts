/**
 * Seals a new sandbox before anything of the conversation runs in it: no process in it may make a
 * user namespace (user.max_user_namespaces=0 in the conversation's own, which only a process with
 * CAP_SYS_RESOURCE there could raise again: none has one), and /proc/sys and /proc/sysrq-trigger are
 * read-only mounts (a sysctl cannot be written, not even to its current value). With a root daemon's
 * own network namespace, its loopback is brought up too (the namespace is the daemon's making: its
 * loopback is down), and egress that lets packets from the sandbox's loopback address leave sets
 * route_localnet (network.ts).
 *
 * Done from outside, by one perl process (perl-base, which every sandboxed process already loads its
 * seccomp filter with): setns, mount and the loopback's SIOCSIFFLAGS are system calls it makes
 * itself. It replaced a shell script of eight programs (sh, nsenter, sh, ip, nsenter, sh, mount,
 * mount) that took ~10 ms of CPU per sandbox, a spare's start among them.
 * - As root: the limit, the loopback and route_localnet from inside the user namespace (and the
 *   network namespace) the daemon made, which only a process there can set; the mounts in the mount
 *   namespace with the host's rights (bwrap made it as root) by a child forked before the parent
 *   enters the user namespace, which it cannot leave.
 * - Otherwise: all of it as the owner of the user namespace that owns the mount namespace.
 */
import { baseChildEnv } from './child-env.js';
import { callNumbers, NS_FLAGS } from './seccomp.js';
import { runToEnd, type Spawner } from './spawner.js';
import { HOLDER_START_MS } from './types.js';

/**
 * The program: `perl -e SEAL ROOT USER NET MNT LO LOCALNET`. ROOT 1: USER and NET (or '') are the
 * daemon's namespaces, entered after MNT's child is forked; 0: USER, NET (or '') and MNT entered in
 * turn. LO 1: the loopback brought up; LOCALNET 1: route_localnet set. Exit 0 once all of it held.
 */
function program(): string {
  const n = callNumbers();
  const f = NS_FLAGS;
  return [
    'my ($root, $user, $net, $mnt, $lo, $localnet) = @ARGV;',
    // every namespace file opened first: once in the sandbox's user namespace, the daemon's fds are out of reach
    'my %fh; for my $p (grep { length } $user, $net, $mnt) { open($fh{$p}, q(<), $p) or die "parley: $p: $!\\n" }',
    `sub ns { my ($p, $t) = @_; syscall(${n.setns}, fileno($fh{$p}), $t) == 0 or die "parley: setns $p: $!\\n" }`,
    'sub put { my ($p, $v) = @_; open(my $f, q(>), $p) or die "parley: $p: $!\\n";',
    '  (syswrite($f, $v) // -1) == length($v) or die "parley: $p: $!\\n" }',
    // ifreq: the name in 16 bytes, then the flags (a short) in a 24-byte union; IFF_UP 1
    'sub lo_up { socket(my $s, 2, 2, 0) or die "parley: socket: $!\\n"; my $r = pack(q(a16 s x22), q(lo), 0);',
    '  ioctl($s, 0x8913, $r) or die "parley: lo: $!\\n"; my $f = unpack(q(x16 s), $r) | 1;',
    '  ioctl($s, 0x8914, pack(q(a16 s x22), q(lo), $f)) or die "parley: lo up: $!\\n" }',
    'sub inside { put(q(/proc/sys/user/max_user_namespaces), "0\\n"); lo_up() if $lo;',
    '  put(q(/proc/sys/net/ipv4/conf/all/route_localnet), "1\\n") if $localnet }',
    // MS_BIND, then MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC
    'sub ro { for my $c (q(/proc/sys), q(/proc/sysrq-trigger)) { my $p = $c; next unless -e $p;',
    `  syscall(${n.mount}, $p, $p, 0, 4096, 0) == 0 or die "parley: bind $p: $!\\n";`,
    `  syscall(${n.mount}, 0, $p, 0, 4143, 0) == 0 or die "parley: read-only $p: $!\\n" } }`,
    'if ($root) { my $pid = fork() // die "parley: fork: $!\\n";',
    `  if ($pid == 0) { ns($mnt, ${f.mnt}); ro(); exit 0 }`,
    `  my $ok = eval { ns($user, ${f.user}); ns($net, ${f.net}) if length $net; inside(); 1 };`,
    '  waitpid($pid, 0); die $@ unless $ok; exit($? == 0 ? 0 : 1) }',
    `ns($user, ${f.user}); ns($net, ${f.net}) if length $net; ns($mnt, ${f.mnt}); inside(); ro();`,
  ].join(' ');
}

let cached: string | undefined;

export interface SealSpec {
  spawner: Spawner;
  perl: string;
  /** The holder's init (host pid). */
  init: number;
  /** A root daemon's: the paths of its fds on the namespaces it made (null: bwrap made them). */
  ns: { user: string; net: string | null } | null;
  /** The sandbox has a network namespace of its own. */
  ownNetwork: boolean;
  /** route_localnet is to be set (network.ts needsRouteLocalnet). */
  localnet: boolean;
}

export async function seal(s: SealSpec): Promise<void> {
  cached ??= program();
  const at = (kind: string) => `/proc/${s.init}/ns/${kind}`;
  const args = s.ns ? ['1', s.ns.user, s.ns.net ?? '', at('mnt'), s.ns.net ? '1' : '0'] : ['0', at('user'), s.ownNetwork ? at('net') : '', at('mnt'), '0'];
  const r = await runToEnd(s.spawner, s.perl, ['-e', cached, ...args, s.localnet ? '1' : '0'], {
    env: { PATH: baseChildEnv().PATH! },
    timeoutMs: HOLDER_START_MS,
  });
  if (r.code !== 0) {
    throw new Error(`the conversation's sandbox could not be sealed (${r.stderr.trim().split('\n').pop() || r.signal || `exit code ${r.code}`})`);
  }
}
