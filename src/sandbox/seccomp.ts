/**
 * The seccomp filter every process of a sandbox runs under, and the small loader that puts it on a
 * process that is already inside (a joined process does not inherit the holder's filter: nsenter
 * starts from the daemon, not from the sandbox).
 *
 * What it refuses, and why (EPERM unless said otherwise):
 * - reaching another process: ptrace, process_vm_readv/writev, pidfd_getfd, kcmp, process_madvise.
 *   The second uid of the file service is what keeps the agent off it (the kernel's ptrace access
 *   rule); the filter holds even where that cannot be had (a daemon that is not root) and keeps
 *   the agent from every debugger-style call on its own processes too. It cannot stop
 *   /proc/<pid>/mem, which is an open() of a path: only the uid rule and non-dumpable do.
 * - new namespaces and mounts: unshare, setns, clone with any CLONE_NEW* flag, mount, umount2,
 *   pivot_root, chroot and the new mount API (open_tree … mount_setattr, open_tree_attr). The
 *   conversation's user namespace already allows no nested one (max_user_namespaces=0); this is the
 *   second layer. clone3 gets ENOSYS: its flags are in a struct a filter cannot read, and libc then
 *   falls back to clone (with EPERM, threads fail to start).
 * - kernel attack surface an agent has no use for: bpf, perf_event_open, userfaultfd, keyctl,
 *   add_key, request_key, io_uring (libuv falls back to threads), open_by_handle_at, kexec.
 * - any other architecture's calls (i386 `int 0x80` on x86_64 has other numbers): the process is
 *   killed; x32 calls on x86_64: EPERM.
 * Lost inside a sandbox: strace, gdb, perf, nested containers.
 *
 * Why hand-assembled classic BPF rather than libseccomp: bwrap and the kernel take the raw program,
 * the policy is a fixed deny list plus one argument test, and no C toolchain or binding is needed on
 * the machines (Debian's python3-seccomp loads in ~9 ms a process; the loader below runs in perl,
 * which every Debian system has, ~1 ms). test/sandbox-unit.test.ts checks the program against what
 * the kernel does with it.
 */

/** Per-architecture numbers: the audit arch, clone, and the refused calls (403 and up are the same everywhere). */
const ARCHES = {
  x64: {
    audit: 0xc000003e,
    x32: true,
    clone: 56,
    deny: [101, 310, 311, 312, 298, 321, 323, 250, 248, 249, 272, 308, 165, 166, 155, 161, 304, 246, 320],
    // the loader's (seccompLoader), the seal's (seal.ts), user-namespace.ts's and the service's start (service-start.ts)
    prctl: 157,
    setsid: 112,
    capset: 126,
    setns: 308,
    mount: 165,
    unshare: 272,
    write: 1,
    close: 3,
    dup3: 292,
    setgroups: 116,
    setresuid: 117,
    setresgid: 119,
    // the spawner's and its forker's (spawner-process.pl, spawner-forker.pl)
    sendmsg: 46,
    recvmsg: 47,
    pidfd_open: 434,
    exit_group: 231,
  },
  arm64: {
    audit: 0xc00000b7,
    x32: false,
    clone: 220,
    deny: [117, 270, 271, 272, 241, 280, 282, 219, 217, 218, 97, 268, 40, 39, 41, 51, 265, 104, 294],
    prctl: 167,
    setsid: 157,
    capset: 91,
    setns: 268,
    mount: 40,
    unshare: 97,
    write: 64,
    close: 57,
    dup3: 24,
    setgroups: 159,
    setresuid: 147,
    setresgid: 149,
    sendmsg: 211,
    recvmsg: 212,
    pidfd_open: 434,
    exit_group: 94,
  },
} as const;

/** pidfd_getfd, the new mount API, mount_setattr, open_tree_attr, io_uring, process_madvise: one number on every arch. */
const DENY_COMMON = [438, 428, 429, 430, 431, 432, 433, 442, 467, 425, 426, 427, 440];
const CLONE3 = 435;
/** setns: what a holder's own start needs (a root daemon's: its first process enters the conversation's user namespace). */
const HOLDER_CALLS = { x64: [308], arm64: [268] } as const;
/** The namespace flags the seal (setns) and user-namespace.ts (unshare) pass: CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWNET. */
export const NS_FLAGS = { mnt: 0x20000, user: 0x10000000, net: 0x40000000 } as const;
/** CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET. */
const CLONE_NEW_ANY = 0x7e020000;

const LD_W_ABS = 0x20;
const JEQ_K = 0x15;
const JGE_K = 0x35;
const JSET_K = 0x45;
const RET_K = 0x06;
const RET_ALLOW = 0x7fff0000;
const RET_ERRNO = 0x00050000;
const RET_KILL_PROCESS = 0x80000000;
const EPERM = 1;
const ENOSYS = 38;
/** offsetof(struct seccomp_data, …) */
const NR = 0;
const ARCH = 4;
const ARG0 = 16;

type Arch = keyof typeof ARCHES;

function archOf(name: string = process.arch): Arch {
  if (name === 'x64' || name === 'arm64') return name;
  throw new Error(`the sandbox's seccomp filter has no syscall table for ${name} (x64 and arm64 only)`);
}

/** Whether this machine's architecture has a filter (x86_64, aarch64). */
export function seccompSupported(name: string = process.arch): boolean {
  return name === 'x64' || name === 'arm64';
}

/**
 * The filter as bwrap's --seccomp and the kernel take it: `struct sock_filter[]`, 8 bytes each
 * (u16 code, u8 jt, u8 jf, u32 k, little-endian). `holder`: the variant for a holder's own start,
 * which must enter the conversation's user namespace after bwrap applied it (setns allowed); the file service then loads the full one before it runs.
 */
export function seccompProgram(opts: { holder?: boolean; arch?: string } = {}): Buffer {
  const arch = archOf(opts.arch);
  const t = ARCHES[arch];
  const allowed: readonly number[] = opts.holder ? HOLDER_CALLS[arch] : [];
  const deny = [...t.deny, ...DENY_COMMON].filter((n) => !allowed.includes(n));
  type Target = number | 'allow' | 'eperm' | 'enosys' | 'kill';
  const prog: [number, Target, Target, number][] = [];
  const op = (code: number, k: number, jt: Target = 0, jf: Target = 0) => prog.push([code, jt, jf, k >>> 0]);
  op(LD_W_ABS, ARCH);
  op(JEQ_K, t.audit, 0, 'kill');
  op(LD_W_ABS, NR);
  if (t.x32) op(JGE_K, 0x40000000, 'eperm');
  for (const nr of deny) op(JEQ_K, nr, 'eperm');
  op(JEQ_K, CLONE3, 'enosys');
  op(JEQ_K, t.clone, 0, 'allow');
  op(LD_W_ABS, ARG0); // the low 32 bits of clone's flags (arg 0 on x86_64 and aarch64)
  op(JSET_K, CLONE_NEW_ANY, 'eperm', 'allow');
  const at = { allow: prog.length, eperm: prog.length + 1, enosys: prog.length + 2, kill: prog.length + 3 };
  op(RET_K, RET_ALLOW);
  op(RET_K, RET_ERRNO | EPERM);
  op(RET_K, RET_ERRNO | ENOSYS);
  op(RET_K, RET_KILL_PROCESS);
  const out = Buffer.alloc(prog.length * 8);
  prog.forEach(([code, jt, jf, k], i) => {
    const rel = (x: Target) => (typeof x === 'number' ? x : at[x] - i - 1);
    out.writeUInt16LE(code, 8 * i);
    out.writeUInt8(rel(jt), 8 * i + 2); // throws past 255: the program is far shorter
    out.writeUInt8(rel(jf), 8 * i + 3);
    out.writeUInt32LE(k, 8 * i + 4);
  });
  return out;
}

/** This machine's numbers of the calls the loader, the seal (seal.ts), user-namespace.ts and the service's start (service-start.ts) make. */
export function callNumbers(name: string = process.arch): (typeof ARCHES)[Arch] {
  return ARCHES[archOf(name)];
}

/**
 * The loader, a perl program (perl-base is part of every Debian system; the syscall numbers are
 * this machine's), run as the last step before a joined process's command, right after nsenter
 * (which entered the sandbox's namespaces, its pid namespace for the children it will have, and did
 * not fork: --no-fork):
 * `perl -e LOADER HEX argv…`
 * - makes itself not dumpable, first, while it still holds every capability of the sandbox's user
 *   namespace: from here to its exec no process of the agent's may open its /proc/<pid>/mem (the
 *   kernel's ptrace access rule), so none can step it and rewrite the filter it is about to load;
 * - closes every fd past stderr (a joined process gets stdin, stdout and stderr only: whatever else
 *   the chain that started it held open across exec is the host's; close_range, 436 on every arch,
 *   or one by one where the kernel is older than 5.9), and forks into the pid namespace. The parent
 *   stays outside it, out of the agent's sight, closes its stdio and waits for the child (never for
 *   its stops: the agent may stop and resume its own processes, and a parent that stopped with its
 *   child, as nsenter does, would stay stopped with nothing to resume it), then ends as the child
 *   did: the same exit status, or killed by the same signal. The child, pid N of the sandbox:
 * - starts a session of its own (setsid: no terminal of the host's to inject into) and asks for
 *   SIGKILL when its parent dies, then checks that it still has that parent (one that died before
 *   the ask would not send it: the child would run its command with nothing waiting for it);
 * - drops every capability entering the user namespace gave: the bounding set (uid 0 would get it
 *   back at exec), the ambient set, then effective, permitted and inheritable;
 * - sets no_new_privs, loads the filter (hex of seccompProgram());
 * - execs argv (PATH searched): 127 when the command is not found, 126 when it cannot be run, as
 *   shells answer.
 * It does what util-linux setsid and setpriv did before it in two processes fewer (~2 ms of CPU
 * each in every joined process).
 */
export function seccompLoader(name: string = process.arch): string {
  const t = ARCHES[archOf(name)];
  return [
    `syscall(${t.prctl}, 4, 0, 0, 0, 0) == 0 or die "parley: dumpable: $!\\n";`,
    'syscall(436, 3, ~0, 0) == 0 or do { opendir(my $d, q(/proc/self/fd)) or die "parley: /proc/self/fd: $!\\n";',
    'for (grep { /^\\d+$/ && $_ > 2 && $_ != fileno($d) } readdir $d) { open(my $h, q(<&=), $_) and close $h } };',
    'my $me = $$; my $k = fork // die "parley: fork: $!\\n";',
    'if ($k) { close STDIN; close STDOUT; close STDERR; waitpid($k, 0) == $k or exit 125;',
    'my $s = $? & 127; kill $s, $$ if $s; exit($s ? 128 + $s : $? >> 8) }',
    `syscall(${t.setsid}) > 0 or die "parley: setsid: $!\\n";`,
    `syscall(${t.prctl}, 1, 9, 0, 0, 0) == 0 or die "parley: pdeathsig: $!\\n";`,
    // (a parent outside the pid namespace reads as 0; one gone before the prctl, as the reaper that took the child)
    'my $pp = getppid(); $pp == 0 || $pp == $me or die "parley: the process that started it is gone\\n";',
    // PR_CAPBSET_DROP for every capability the kernel has (EINVAL past the last), PR_CAP_AMBIENT_CLEAR_ALL, capset of zeros (version 3)
    `for my $c (0 .. 63) { next if syscall(${t.prctl}, 24, $c, 0, 0, 0) == 0; last if $! + 0 == 22; die "parley: capability $c: $!\\n" }`,
    `syscall(${t.prctl}, 47, 4, 0, 0, 0) == 0 or die "parley: ambient capabilities: $!\\n";`,
    `my $h = pack(q(L l), 0x20080522, 0); my $z = pack(q(L6), 0, 0, 0, 0, 0, 0); syscall(${t.capset}, $h, $z) == 0 or die "parley: capabilities: $!\\n";`,
    'my $f = pack q(H*), shift @ARGV;',
    `syscall(${t.prctl}, 38, 1, 0, 0, 0) == 0 or die "parley: no_new_privs: $!\\n";`,
    'my $p = pack q(S x![J] J), length($f) / 8, unpack(q(J), pack(q(p), $f));',
    `syscall(${t.prctl}, 22, 2, $p, 0, 0) == 0 or die "parley: seccomp: $!\\n";`,
    '@ARGV or die "parley: no command\\n";',
    'exec { $ARGV[0] } @ARGV; print STDERR "parley: $ARGV[0]: $!\\n"; exit(($! + 0) == 2 ? 127 : 126);',
  ].join(' ');
}
