# The spawner's forker: the process that forks and execs every program the spawner
# (spawner-process.pl) starts, and reaps them. It is small on purpose: after a fork, every page the
# forking process writes is copied and its mapping flushed (on a machine whose page faults are dear,
# that was most of a spawn's cost in the spawner itself), and this loop writes few. No module is
# loaded; the system calls it needs are made by their numbers, given in argv:
#   recvmsg pidfd_open dup3 close setsid setgroups setresgid setresuid exit_group setns prctl
#
# fd 3: a SOCK_SEQPACKET socket to the spawner. A request is one message: NUL-separated fields
#   id nice pdeathsig enter uid gid cwd slots file argc argv… env("K=V")…
# (uid, gid and cwd empty when not asked; `pdeathsig` the signal it gets when this process dies, 0
# none; `enter` a comma list of FD:TYPE, namespaces it enters (setns) once it has its ids, FD one
# of its own fds; `slots` a comma list, one entry per fd of the program:
# the index of the message's fd that becomes it, or `-` for none) with the program's fds attached
# (SCM_RIGHTS). Answers, one message each: `s ID PID ERRNO` (started, or ERRNO why not, PID 0) and,
# later, `x PID STATUS` (the wait status of one that ended). Its socket's end ends it.
use strict;

my $FORKER = $$;

my ($RECVMSG, $PIDFD_OPEN, $DUP3, $CLOSE, $SETSID, $SETGROUPS, $SETRESGID, $SETRESUID, $EXIT, $SETNS, $PRCTL) = map { $_ + 0 } @ARGV;
# (the spawner ignores SIGPIPE; what is started here must not inherit that)
$SIG{PIPE} = 'DEFAULT';
open(my $S, '+<&=', 3) or die "parley forker: no socket: $!\n";
fcntl($S, 2, 1);    # F_SETFD, FD_CLOEXEC

# the buffers recvmsg fills, made once (their addresses go into the msghdr)
my $data = "\0" x 262144;
my $control = "\0" x (16 + 4 * 64);
my $iov = pack('Q Q', unpack('Q', pack('p', $data)), length $data);
my $msg = '';
my %pidfd;    # pid → its pidfd
my %polled;   # pids whose end is looked for every 50 ms (a kernel without pidfd_open)

sub close_fd { syscall($CLOSE, $_[0] + 0) }

sub request {
  $msg = pack('Q L x4 Q Q Q Q l x4', 0, 0, unpack('Q', pack('p', $iov)), 1, unpack('Q', pack('p', $control)), length $control, 0);
  # MSG_CMSG_CLOEXEC: the fds received are closed at any exec but where they are put in place
  my $n = syscall($RECVMSG, 3, $msg, 0x40000000);
  return if $n < 0 && $! == 4;    # EINTR
  if ($n <= 0) {
    # the spawner is gone: so is everything started here (each program leads a process group)
    kill 'KILL', map { -$_ } keys %pidfd, keys %polled;
    syscall($EXIT, 0);
  }
  my @fds;
  my ($controllen) = unpack('Q', substr($msg, 40, 8));
  if ($controllen >= 16) {
    my ($len, $level, $type) = unpack('Q l l', $control);
    @fds = unpack('l' . (($len - 16) / 4), substr($control, 16)) if $level == 1 && $type == 1;
  }
  my $request = substr($data, 0, $n);
  my $id = substr($request, 0, index($request, "\0"));
  my ($pid, $errno) = start($request, \@fds);
  close_fd($_) for @fds;
  syswrite($S, "s $id $pid $errno");
  return unless $pid;
  my $pfd = syscall($PIDFD_OPEN, $pid, 0);
  if ($pfd >= 0) { $pidfd{$pid} = $pfd } else { $polled{$pid} = 1 }
}

sub reaped {
  my ($pid) = @_;
  return 0 unless waitpid($pid, 1) > 0;    # WNOHANG
  syswrite($S, "x $pid $?");
  return 1;
}

# (the request is read in the child: what this process writes between forks, each page of it
# copied again after the next fork, is kept small)
sub start {
  my ($request, $fds) = @_;
  pipe(my $r, my $w) or return (0, $! + 0);
  my $pid = fork;
  return (0, $! + 0) unless defined $pid;
  if ($pid == 0) {
    my (undef, $nice, $pdeathsig, $enter, $uid, $gid, $cwd, $slots, $file, $argc, @rest) = split /\0/, $request, -1;
    my @args = splice(@rest, 0, $argc);
    my $map = [map { $_ eq '-' ? -1 : $fds->[$_] } split /,/, $slots];
    my $count = @$map;
    # (moved past the slots: its number may be one of theirs; closed by the exec)
    my $efd = fcntl($w, 1030, $count + 3);    # F_DUPFD_CLOEXEC
    open(my $e, '>&=', $efd) or syscall($EXIT, 127);
    my $fail = sub { syswrite($e, pack('L', ($! + 0) || 5)); syscall($EXIT, 127) };
    syscall($SETSID) >= 0 or $fail->();
    setpriority(0, 0, $nice + 0) or $fail->();
    if ($nice) { if (open my $g, '>', '/proc/self/autogroup') { print $g $nice; close $g } }
    # every fd first past the slots, then in place (a fd's number may be another slot's)
    my @high;
    for my $slot (0 .. $count - 1) {
      my $fd = $map->[$slot];
      if ($fd < 0 && $slot < 3) { open(my $null, '+<', '/dev/null') or $fail->(); $fd = fileno $null; $high[$slot] = fcntl($null, 1030, $count + 3) // $fail->(); next }
      next if $fd < 0;
      open(my $h, '<&=', $fd) or $fail->();
      $high[$slot] = fcntl($h, 1030, $count + 3) // $fail->();
    }
    for my $slot (0 .. $count - 1) {
      if (defined $high[$slot]) { syscall($DUP3, $high[$slot] + 0, $slot + 0, 0) == $slot or $fail->() }
      else { close_fd($slot) }
    }
    # every other fd is closed by the exec, whether opened here or inherited: close_range with
    # CLOSE_RANGE_CLOEXEC (436 on every arch), or closed now where the kernel is older than 5.11
    if (syscall(436, $count, ~0, 4) != 0) {
      opendir(my $d, '/proc/self/fd') or $fail->();
      close_fd($_) for grep { /^\d+$/ && $_ >= $count && $_ != $efd && $_ != fileno($d) } readdir $d;
    }
    if (length $uid || length $gid) { syscall($SETGROUPS, 0, 0) == 0 or $fail->() }
    if (length $gid) { syscall($SETRESGID, $gid + 0, $gid + 0, $gid + 0) == 0 or $fail->() }
    if (length $uid) { syscall($SETRESUID, $uid + 0, $uid + 0, $uid + 0) == 0 or $fail->() }
    # (as util-linux nsenter --preserve-credentials did: the ids stay, a user namespace first)
    for (split /,/, $enter) { my ($fd, $type) = split /:/; syscall($SETNS, $fd + 0, $type + 0) == 0 or $fail->() }
    # PR_SET_PDEATHSIG, after the change of ids (which clears it); a parent gone before it is no parent
    if ($pdeathsig) { syscall($PRCTL, 1, $pdeathsig + 0, 0, 0, 0) == 0 or $fail->(); getppid() == $FORKER or syscall($EXIT, 127) }
    if (length $cwd) { chdir $cwd or $fail->() }
    %ENV = map { split /=/, $_, 2 } @rest;
    { no warnings; exec { $file } $file, @args }
    $fail->();
  }
  close $w;
  my $errno = '';
  for (;;) { my $n = sysread($r, $errno, 4); last if defined $n; last unless $! == 4 }
  close $r;
  return ($pid, 0) unless length $errno == 4;
  waitpid($pid, 0);
  return (0, unpack('L', $errno));
}

for (;;) {
  my $rin = '';
  vec($rin, 3, 1) = 1;
  vec($rin, $_, 1) = 1 for values %pidfd;
  my $n = select(my $rout = $rin, undef, undef, %polled ? 0.05 : undef);
  if ($n < 0) { next if $! == 4; syscall($EXIT, 1) }
  for my $pid (keys %pidfd) { close_fd(delete $pidfd{$pid}) if vec($rout, $pidfd{$pid}, 1) && reaped($pid) }
  for my $pid (keys %polled) { delete $polled{$pid} if reaped($pid) }
  request() if vec($rout, 3, 1);
}
