# The spawner: the small process that starts the sandboxes' host-side programs for the daemon (a
# holder's supervisor, the user namespace's perl, the seal, egress's tool and filter, a disk's mkfs,
# mount, umount and e2fsck, a shell's joiner). spawner.ts is the daemon's side.
#
# Why a process of its own: Node starts a child with fork(2) of the whole process, and the calling
# thread waits until the child has exec'd. In the daemon (tens of MiB, most of it written to) a fork
# copies the page tables and write-protects the heap, so the wait held its event loop for each
# program, and the heap's pages faulted again as they were written afterwards. Why perl and not
# node: a node process's fork and exec costs it 7-10 ms of CPU on a machine whose page faults are
# dear, perl's well under one (a spare's start runs ~10 programs through here).
#
# Perl with perl-base's modules only, run as it is (scripts/build.mjs copies it beside the bundle).
# argv: the daemon's pid, then this machine's numbers of the system calls sendmsg, then the forker's
# (spawner-forker.pl: the process that forks, small so that its forks are cheap; this one holds the
# channel, the relays and the JSON).
#
# Protocol: Node's IPC channel with the daemon (fd NODE_CHANNEL_FD, serialization 'json': one JSON
# object per line; byte strings travel as hex).
#   in:  {t:'spawn', id, file, args, env, cwd?, uid?, gid?, nice? (default 0), pdeathsig?, enter? ([{fd, type}]: setns
#          once it has its ids), stdio}   each slot one of
#          'ignore'  /dev/null for 0-2, closed past them;
#          'pipe'    relayed: what the child writes comes out as 'data' and 'eof', 'write' and 'end'
#                    go to it;
#          'direct'  a socket pair whose other end goes to the daemon (the file service's channel, which
#                    must not pass through here; a shell's stdio, started ahead of its conversation):
#                    each with a 'direct' message before 'spawned';
#          a number  that fd of the daemon, opened again through /proc/<daemon>/fd/<n> (the
#                    namespace files a process enters: a socket cannot be opened so);
#          {data}    a socket the bytes are written into, then shut, as the program starts;
#        {t:'write', id, slot, data}  {t:'end', id, slot}  {t:'destroy', id, slot}
#        {t:'mkfifo', id, paths}   FIFOs (mode 600) made by this process itself
#   out: {t:'ready', pid, forker} (the forker: the parent of every program started here)
#        {t:'direct', id, slot} (with that slot's socket)  {t:'spawned', id, pid}  {t:'failed', id, code, message}
#        {t:'data', id, slot, data}  {t:'eof', id, slot}  {t:'exit', id, code, signal}  {t:'close', id}
#        {t:'made', id, error?} (the FIFOs asked for, or the first that could not be made)
# A socket travels as Node sends one: {cmd:'NODE_HANDLE', type:'net.Socket', msg} with the fd
# (SCM_RIGHTS) on the same sendmsg; nothing more is sent until the daemon's NODE_HANDLE_ACK, since
# Node delivers a handle's message a tick after the plain messages read with it.
# Every child leads a session (and so a process group) of its own. When the daemon goes (the channel
# ends, or SIGTERM from --pdeathsig when it died), every group still running gets SIGKILL and this
# process exits.
use strict;
use Fcntl qw(F_GETFL F_SETFL F_GETFD F_SETFD F_DUPFD FD_CLOEXEC O_NONBLOCK O_RDONLY O_RDWR);
use POSIX ();
use Socket qw(AF_UNIX SOCK_STREAM);
use Errno ();
use Config ();
BEGIN { my $dir = __FILE__ =~ s{[^/]*$}{}r; require(($dir =~ m{^/} ? $dir : "./$dir") . 'file-service-lib.pl') }

my ($DAEMON, $SENDMSG, @FORKER_CALLS) = @ARGV;
my @SIG_NAME = split ' ', $Config::Config{sig_name};

open(my $CHAN, '+<&=', $ENV{NODE_CHANNEL_FD} // 3) or die "parley spawner: no channel: $!\n";
# (blocking writes; no program started here inherits it)
fcntl($CHAN, F_SETFL, fcntl($CHAN, F_GETFL, 0) & ~O_NONBLOCK);
fcntl($CHAN, F_SETFD, FD_CLOEXEC);
$SIG{PIPE} = 'IGNORE';

# children by id: { pid, slots => { slot => { fh, read, out => [bytes…], shut } }, reading, exited }
my %children;

# ---- the channel out ---------------------------------------------------------------------------

my @queue;      # [bytes, handle or undef], waiting for an ACK
my $awaiting;   # the handle sent last, until its ACK
my $retries = 0;

sub address { return unpack('Q', pack('p', $_[0])) }

sub write_channel {
  my ($bytes) = @_;
  my $off = 0;
  while ($off < length $bytes) {
    my $n = syswrite($CHAN, $bytes, length($bytes) - $off, $off);
    if (!defined $n) { next if $!{EINTR}; end_all() }
    $off += $n;
  }
}

# the bytes with fds on one sendmsg (msghdr, iovec and a cmsghdr of SOL_SOCKET, SCM_RIGHTS: LP64
# layouts, the same on x86-64 and AArch64): how many were sent, -1 when none could be ($!)
sub send_fds {
  my ($sock, $bytes, @fds) = @_;
  my $iov = pack('Q Q', address($bytes), length $bytes);
  my $cmsg = @fds ? pack('Q l l', 16 + 4 * @fds, 1, 1) . pack('l*', @fds) : '';
  $cmsg .= "\0" x (-length($cmsg) % 8);
  my $msg = pack('Q L x4 Q Q Q Q l x4', 0, 0, address($iov), 1, @fds ? address($cmsg) : 0, length $cmsg, 0);
  my $n;
  do { $n = syscall($SENDMSG + 0, fileno($sock), $msg, 0) } while $n < 0 && $!{EINTR};
  return $n;
}

# a message with a handle on the channel (a stream: the rest of its bytes after the first part)
sub send_handle {
  my ($bytes, $fh) = @_;
  my $n = send_fds($CHAN, $bytes, fileno $fh);
  end_all() if $n < 0;
  write_channel(substr($bytes, $n)) if $n < length $bytes;
}

sub flush_queue {
  while (@queue && !$awaiting) {
    my ($bytes, $fh) = @{ shift @queue };
    if (!$fh) { write_channel($bytes); next }
    send_handle($bytes, $fh);
    $awaiting = [$bytes, $fh];
    $retries = 0;
  }
}

# a message; with a socket, wrapped as Node's handle message
sub out {
  my ($m, $fh) = @_;
  $m = { cmd => 'NODE_HANDLE', type => 'net.Socket', msg => $m } if $fh;
  push @queue, [encode($m) . "\n", $fh];
  flush_queue();
}

# the daemon took the handle (it is closed here), or did not (sent again, three times at most)
sub acknowledged {
  my ($taken) = @_;
  return unless $awaiting;
  if (!$taken && $retries++ < 3) { send_handle(@$awaiting); return }
  close $awaiting->[1];
  $awaiting = undef;
  flush_queue();
}

# ---- starting a program ------------------------------------------------------------------------

sub pair {
  socketpair(my $ours, my $theirs, AF_UNIX, SOCK_STREAM, 0) or die "socketpair: $!\n";
  fcntl($ours, F_SETFL, fcntl($ours, F_GETFL, 0) | O_NONBLOCK);
  return ($ours, $theirs);
}

sub errno_name { local $! = $_[0]; my ($name) = grep { $!{$_} } keys %!; return $name }

# the forker (spawner-forker.pl): this process's only child, the parent of every program
my $FORKER_PID;
my $FORKER = do {
  socketpair(my $ours, my $theirs, AF_UNIX, 5, 0) or die "parley spawner: socketpair: $!\n";    # SOCK_SEQPACKET
  my $pid = fork // die "parley spawner: fork: $!\n";
  if ($pid == 0) {
    POSIX::dup2(fileno $theirs, 3) // POSIX::_exit(127);
    my $dir = __FILE__ =~ s{[^/]*$}{}r;
    exec { $^X } $^X, ($dir =~ m{^/} ? $dir : "./$dir") . 'spawner-forker.pl', @FORKER_CALLS;
    POSIX::_exit(127);
  }
  $FORKER_PID = $pid;
  $ours;
};
# spawns sent to the forker, by id: [message, its relayed and direct slots]
my %starting;
my %by_pid;    # a started child's id, by pid

sub start {
  my ($m) = @_;
  my $id = $m->{id} + 0;
  my @stdio = @{ $m->{stdio} // [] };
  my (@theirs, @map, %ours);
  for my $slot (0 .. $#stdio) {
    my $s = $stdio[$slot];
    my $fh;
    if (ref $s eq 'HASH') {
      (my $o, $fh) = pair();
      $ours{$slot} = { fh => $o, read => 0, out => [pack('H*', $s->{data} // '')], shut => 1 };
    } elsif ($s eq 'pipe' || $s eq 'direct') {
      (my $o, $fh) = pair();
      $ours{$slot} = { fh => $o, read => $s eq 'pipe', out => [], shut => 0, direct => $s eq 'direct' };
    } elsif ($s =~ /^\d+$/) {
      sysopen($fh, "/proc/$DAEMON/fd/$s", O_RDONLY) or die { code => errno_name($! + 0), message => "fd $s of the daemon: $!" };
    }
    push @map, $fh ? scalar(@theirs) : '-';
    push @theirs, $fh if $fh;
  }
  my $env = $m->{env} // {};
  my @args = @{ $m->{args} // [] };
  my $enter = join ',', map { (($_->{fd} // -1) + 0) . ':' . (($_->{type} // 0) + 0) } @{ ref $m->{enter} eq 'ARRAY' ? $m->{enter} : [] };
  my $request = join "\0", $id, ($m->{nice} // 0) + 0, ($m->{pdeathsig} // 0) + 0, $enter, $m->{uid} // '', $m->{gid} // '', $m->{cwd} // '',
    join(',', @map), $m->{file},
    scalar @args, @args, map { "$_=$env->{$_}" } sort keys %$env;
  die "a program's arguments or environment hold a NUL byte\n" if grep { /\0/ } @args, %$env, $m->{file}, $m->{cwd} // '';
  # (one message to the forker, which reads at most 256 KiB)
  die "a program's arguments and environment take more than 200 KiB\n" if length $request > 200 << 10;
  send_fds($FORKER, $request, map { fileno $_ } @theirs) == length $request or die "the forker: $!\n";
  $starting{$id} = [$m, \%ours];
}

# the forker's answer to a spawn: started (or why not)
sub started {
  my ($id, $pid, $errno) = @_;
  my $st = delete $starting{$id} or return;
  my ($m, $ours) = @$st;
  if (!$pid) {
    close $_->{fh} for values %$ours;
    my $name = errno_name($errno) // 'EIO';
    return out({ t => 'failed', id => num($id), code => $name, message => "spawn $m->{file} $name" });
  }
  my $c = { pid => $pid, slots => {}, reading => 0, exited => 0 };
  for my $slot (sort { $a <=> $b } keys %$ours) {
    my $o = $ours->{$slot};
    if ($o->{direct}) { out({ t => 'direct', id => num($id), slot => num($slot) }, $o->{fh}); next }
    $c->{slots}{$slot} = $o;
    $c->{reading}++ if $o->{read};
  }
  $children{$id} = $c;
  $by_pid{$pid} = $id;
  out({ t => 'spawned', id => num($id), pid => num($pid) });
  drain($c, $_) for keys %{ $c->{slots} };
}

# ---- what the children read and write ----------------------------------------------------------

sub drain {
  my ($c, $slot) = @_;
  my $s = $c->{slots}{$slot} or return;
  while (@{ $s->{out} }) {
    my $bytes = $s->{out}[0];
    my $n = length $bytes ? syswrite($s->{fh}, $bytes) : 0;
    if (!defined $n) {
      return if $!{EAGAIN} || $!{EINTR};
      @{ $s->{out} } = ();    # the child's end is gone: what it has not read is dropped
      last;
    }
    if ($n < length $bytes) { $s->{out}[0] = substr($bytes, $n); return }
    shift @{ $s->{out} };
  }
  return unless $s->{shut};
  if ($s->{read}) { shutdown($s->{fh}, 1) }
  else { close $s->{fh}; delete $c->{slots}{$slot} }
}

sub read_slot {
  my ($id, $c, $slot) = @_;
  my $s = $c->{slots}{$slot};
  my $n = sysread($s->{fh}, my $data, 65536);
  return if !defined $n && ($!{EAGAIN} || $!{EINTR});
  if ($n) { out({ t => 'data', id => num($id), slot => num($slot), data => unpack('H*', $data) }); return }
  out({ t => 'eof', id => num($id), slot => num($slot) });
  $s->{read} = 0;
  $c->{reading}--;
  if (!@{ $s->{out} }) { close $s->{fh}; delete $c->{slots}{$slot} }
  closed($id, $c);
}

sub exited {
  my ($pid, $status) = @_;
  my $id = delete $by_pid{$pid} // return;
  my $c = $children{$id} or return;
  $c->{exited} = 1;
  my $sig = $status & 127;
  out({ t => 'exit', id => num($id), code => $sig ? undef : num($status >> 8), signal => $sig ? "SIG$SIG_NAME[$sig]" : undef });
  closed($id, $c);
}

# exited, and every relayed stream at its end
sub closed {
  my ($id, $c) = @_;
  return unless $c->{exited} && $c->{reading} <= 0;
  close $_->{fh} for values %{ $c->{slots} };
  %{ $c->{slots} } = ();
  delete $children{$id};
  out({ t => 'close', id => num($id) });
}

sub stream {
  my ($m) = @_;
  my $c = $children{ $m->{id} + 0 } or return;
  my $slot = ($m->{slot} // -1) + 0;
  my $s = $c->{slots}{$slot} or return;
  if ($m->{t} eq 'write') { push @{ $s->{out} }, pack('H*', $m->{data} // ''); drain($c, $slot) }
  elsif ($m->{t} eq 'end') { $s->{shut} = 1; drain($c, $slot) }
  elsif ($m->{t} eq 'destroy') {
    close $s->{fh};
    delete $c->{slots}{$slot};
    if ($s->{read}) { $c->{reading}--; closed($m->{id} + 0, $c) }
  }
}

# FIFOs for a shell's commands, mode 600, made here rather than by a `mkfifo` program: a fork and
# an exec less before a new shell's first command. The directory is the daemon's to name, and
# mkfifo(2) never follows a symlink at the last component (it fails on anything there). Every path
# is tried; the first failure is told.
sub make_fifos {
  my ($m) = @_;
  my $error;
  for my $p (@{ ref $m->{paths} eq 'ARRAY' ? $m->{paths} : [] }) {
    next if !ref $p && POSIX::mkfifo($p, 0600);
    $error //= ref $p ? 'mkfifo: a path is not a string' : "mkfifo: cannot create fifo '$p': $!";
  }
  out({ t => 'made', id => num($m->{id} + 0), defined $error ? (error => $error) : () });
}

# ---- the loop ----------------------------------------------------------------------------------

# the daemon is gone (its channel ended, or SIGTERM: setpriv's --pdeathsig when it died): so is
# everything started here
sub end_all {
  for my $c (values %children) { kill 'KILL', -$c->{pid} unless $c->{exited} }
  POSIX::_exit(0);
}
$SIG{TERM} = \&end_all;

sub message {
  my ($line) = @_;
  my $m = eval { decode($line) };
  return unless ref $m eq 'HASH';
  my $cmd = $m->{cmd} // '';
  return acknowledged(1) if $cmd eq 'NODE_HANDLE_ACK';
  return acknowledged(0) if $cmd eq 'NODE_HANDLE_NACK';
  my $t = $m->{t} // '';
  return make_fifos($m) if $t eq 'mkfifo';
  if ($t eq 'spawn') {
    my $ok = eval { start($m); 1 };
    return if $ok;
    my $e = $@;
    my ($code, $text) = ref $e eq 'HASH' ? ($e->{code}, $e->{message}) : (undef, "$e" =~ s/\n\z//r);
    return out({ t => 'failed', id => num($m->{id} + 0), code => $code, message => $text });
  }
  stream($m);
}

out({ t => 'ready', pid => num($$), forker => num($FORKER_PID) });
my $in = '';
for (;;) {
  my ($rin, $win) = ('', '');
  vec($rin, fileno $CHAN, 1) = 1;
  for my $c (values %children) {
    for my $s (values %{ $c->{slots} }) {
      vec($rin, fileno $s->{fh}, 1) = 1 if $s->{read};
      vec($win, fileno $s->{fh}, 1) = 1 if @{ $s->{out} };
    }
  }
  vec($rin, fileno $FORKER, 1) = 1;
  my $n = select(my $rout = $rin, my $wout = $win, undef, undef);
  if ($n < 0) { next if $!{EINTR}; die "parley spawner: select: $!\n" }
  if (vec($rout, fileno $FORKER, 1)) {
    my $got = sysread($FORKER, my $answer, 256);
    if (!defined $got) { end_all() unless $!{EINTR} || $!{EAGAIN} }
    elsif ($got == 0) { end_all() }
    elsif ($answer =~ /^s (\d+) (\d+) (\d+)$/) { started($1 + 0, $2 + 0, $3 + 0) }
    elsif ($answer =~ /^x (\d+) (\d+)$/) { exited($1 + 0, $2 + 0) }
  }
  if (vec($rout, fileno $CHAN, 1)) {
    my $got = sysread($CHAN, $in, 65536, length $in);
    if (defined $got) {
      end_all() if $got == 0;
      while ((my $i = index($in, "\n")) >= 0) { message(substr($in, 0, $i)); substr($in, 0, $i + 1) = '' }
    } elsif (!$!{EINTR} && !$!{EAGAIN}) { end_all() }
  }
  for my $id (keys %children) {
    my $c = $children{$id} or next;
    for my $slot (keys %{ $c->{slots} }) {
      my $s = $c->{slots}{$slot} or next;
      drain($c, $slot) if @{ $s->{out} } && vec($wout, fileno $s->{fh}, 1);
      read_slot($id, $c, $slot) if $c->{slots}{$slot} && $s->{read} && vec($rout, fileno $s->{fh}, 1);
    }
  }
}
