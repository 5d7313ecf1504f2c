/**
 * How a holder's first process becomes the conversation's file service: one perl process (perl-base,
 * which the service itself runs on) between bwrap and the service, where a shell and util-linux's
 * setpriv, nsenter and setpriv ran before (four programs fewer in every sandbox's start). In order:
 * - writes a byte on the set-up fd (bwrap has set the sandbox up) and makes the channel its stdin and
 *   stdout, closing both;
 * - root daemon (`ids`): clears its groups and becomes the agent's uid and gid (real, effective and
 *   saved: every capability of the host's namespace is gone), enters the conversation's user
 *   namespace (its owner, it holds every capability there) and its network namespace (unless the
 *   sandbox has the host's network);
 * - then sets no_new_privs, drops every capability from the bounding set but CAP_SETUID and
 *   CAP_SETGID, keeps its capabilities across the change of ids (PR_SET_KEEPCAPS), becomes uid and
 *   gid 1 of that namespace (the service's host ids) with no groups, and keeps those two capabilities
 *   only, inheritable and ambient, so that they survive the exec and nothing else comes back;
 * - closes the namespaces' fds and runs the service: a perl script in this same perl (`do`: no second
 *   start of perl), any other program by exec.
 * A daemon that is not root: only the first and the last step (bwrap's own user namespace gave the
 * service CAP_SETUID and CAP_SETGID). What the service ends with is judged from the host by
 * test/sandbox-attack-service.test.ts (its ids, capabilities, no_new_privs, seccomp).
 */
import { callNumbers, NS_FLAGS } from './seccomp.js';

/** CAP_SETGID and CAP_SETUID. */
const KEPT = [6, 7] as const;

/** The fds bwrap hands the holder's first process. */
export interface StartFds {
  /** The channel to the daemon: the service's stdin and stdout. */
  channel: number;
  /** The conversation's user namespace. */
  userns: number;
  /** Its network namespace. */
  netns: number;
  /** Where the set-up byte goes. */
  setUp: number;
}

/** The program: `perl -e SERVICE_START UID GID NET argv…` (UID and GID empty: a daemon that is not root; NET 1: enter the network namespace). */
export function serviceStart(fd: StartFds, arch: string = process.arch): string {
  const n = callNumbers(arch);
  const mask = KEPT.reduce((m, c) => m | (1 << c), 0);
  return [
    'my ($uid, $gid, $net) = splice(@ARGV, 0, 3);',
    // (a variable: syscall() takes a string argument as a buffer it may write, which a literal is not)
    `my $dot = "."; syscall(${n.write}, ${fd.setUp}, $dot, 1) == 1 or die "parley: set-up signal: $!\\n";`,
    `for my $to (0, 1) { syscall(${n.dup3}, ${fd.channel}, $to, 0) == $to or die "parley: channel: $!\\n" }`,
    `syscall(${n.close}, $_) for ${fd.channel}, ${fd.setUp};`,
    'if (length $uid) {',
    `  syscall(${n.setgroups}, 0, 0) == 0 or die "parley: groups: $!\\n";`,
    `  syscall(${n.setresgid}, $gid + 0, $gid + 0, $gid + 0) == 0 or die "parley: gid: $!\\n";`,
    `  syscall(${n.setresuid}, $uid + 0, $uid + 0, $uid + 0) == 0 or die "parley: uid: $!\\n";`,
    `  syscall(${n.setns}, ${fd.userns}, ${NS_FLAGS.user}) == 0 or die "parley: user namespace: $!\\n";`,
    `  $net and (syscall(${n.setns}, ${fd.netns}, ${NS_FLAGS.net}) == 0 or die "parley: network namespace: $!\\n");`,
    // PR_SET_NO_NEW_PRIVS; PR_CAPBSET_DROP for every capability the kernel has but the two (EINVAL past the last)
    `  syscall(${n.prctl}, 38, 1, 0, 0, 0) == 0 or die "parley: no_new_privs: $!\\n";`,
    `  for my $c (0 .. 63) { next if ${KEPT.map((c) => `$c == ${c}`).join(' || ')}; next if syscall(${n.prctl}, 24, $c, 0, 0, 0) == 0;`,
    '    last if $! + 0 == 22; die "parley: capability $c: $!\\n" }',
    // PR_SET_KEEPCAPS: the permitted set survives the change to uid 1 (the effective one does not: capset below)
    `  syscall(${n.prctl}, 8, 1, 0, 0, 0) == 0 or die "parley: keepcaps: $!\\n";`,
    `  syscall(${n.setgroups}, 0, 0) == 0 or die "parley: groups: $!\\n";`,
    `  syscall(${n.setresgid}, 1, 1, 1) == 0 or die "parley: gid: $!\\n";`,
    `  syscall(${n.setresuid}, 1, 1, 1) == 0 or die "parley: uid: $!\\n";`,
    // capset version 3: effective, permitted and inheritable of capabilities 0-31, then of 32-63
    `  my $h = pack(q(L l), 0x20080522, 0); my $d = pack(q(L6), ${mask}, ${mask}, ${mask}, 0, 0, 0);`,
    `  syscall(${n.capset}, $h, $d) == 0 or die "parley: capabilities: $!\\n";`,
    // PR_CAP_AMBIENT: clear all, then raise the two
    `  syscall(${n.prctl}, 47, 4, 0, 0, 0) == 0 or die "parley: ambient capabilities: $!\\n";`,
    `  for my $c (${KEPT.join(', ')}) { syscall(${n.prctl}, 47, 2, $c, 0, 0) == 0 or die "parley: ambient capability $c: $!\\n" }`,
    '}',
    `syscall(${n.close}, $_) for ${fd.userns}, ${fd.netns};`,
    // a perl service runs in this perl (a second perl's start is ~10 ms of CPU): `do` compiles and runs
    // it with the arguments after its path; it never returns but by dying (it ends with exit)
    'if ($ARGV[0] eq $^X && $ARGV[1] =~ m{\\.pl\\z}) { shift @ARGV; my $f = shift @ARGV; do $f; die "parley: $f: ", $@ || $! || "returned", "\\n" }',
    'exec { $ARGV[0] } @ARGV; die "parley: $ARGV[0]: $!\\n";',
  ].join(' ');
}
