# The file service's paths, errors and JSON (file-service.pl, which runs INSIDE the conversation's
# sandbox, is the service): how a request's path is resolved and kept inside the workspace, the
# bounds of its walks, and the headers' encoding. Perl with perl-base's modules only, beside
# file-service.pl wherever it is (the sandbox binds both, scripts/build.mjs copies both).
#
# Its start is a sandbox's: it loads what it needs and no more (with `warnings`, `constant`, `Cwd`
# and Fcntl's export tags it took 21 ms of CPU to start, without them 12 ms).
use strict;
use Fcntl qw(O_RDONLY O_WRONLY O_CREAT O_EXCL O_NONBLOCK O_NOFOLLOW S_ISREG S_ISDIR S_ISLNK S_ISFIFO S_ISSOCK S_ISCHR S_ISBLK);
use Errno ();

sub MAX_HEADER() { 1 << 20 }
sub MAX_DATA() { 256 << 20 }
# a chunk of a streamed read or write at most (the daemon asks for 1 MiB)
sub MAX_CHUNK() { 4 << 20 }
# files open for streamed transfers at once
sub MAX_HANDLES() { 32 }
# names read from one directory at most (a listing sorts them first)
sub MAX_DIR_NAMES() { 100_000 }

# The workspace: given at the start (`--root`, /workspace when absent), or, for a service started
# ahead of its conversation (`--root-later`: SANDBOX=none's spare), by its first request, once.
# Nothing is served before.
our $ROOT = '/workspace';

# ---- errors ----------------------------------------------------------------------------------

# what the daemon may tell apart: a code, a message for the agent, and a detail (type, size)
sub op_error { my ($code, $message, $detail) = @_; die { code => $code, message => $message, detail => $detail } }

# a failed system call: its errno's name (the message names the request's path, never a resolved one)
sub sys_error {
  my $name = 'EIO';
  for my $k (keys %!) { if ($!{$k}) { $name = $k; last } }
  die { code => $name };
}

# ---- paths -----------------------------------------------------------------------------------

# an absolute path without `.`, `..`, repeated or trailing slashes
sub normal {
  my ($p) = @_;
  my @out;
  for my $part (split m{/+}, $p) {
    next if $part eq '' || $part eq '.';
    if ($part eq '..') { pop @out } else { push @out, $part }
  }
  return '/' . join('/', @out);
}

sub join_path { return normal(join '/', @_) }
sub dir_name  { my $p = normal($_[0]); $p =~ s{/[^/]*$}{}; return $p eq '' ? '/' : $p }
sub base_name { my $p = normal($_[0]); $p =~ s{^.*/}{}; return $p }

# An absolute path with every link in it followed, as realpath(3) does; undef (and $!) when a part
# of it is missing, is not a directory, or the links loop.
sub real_path {
  my @todo = grep { $_ ne '' && $_ ne '.' } split m{/}, $_[0];
  my ($real, $links) = ('', 0);
  while (@todo) {
    my $part = shift @todo;
    if ($part eq '..') { $real =~ s{/[^/]*$}{}; next }
    my $next = "$real/$part";
    my @st = lstat $next or return undef;
    if (S_ISLNK($st[2])) {
      if (++$links > 40) { $! = Errno::ELOOP(); return undef }
      my $target = readlink $next;
      return undef unless defined $target;
      unshift @todo, grep { $_ ne '' && $_ ne '.' } split m{/}, $target;
      $real = '' if $target =~ m{^/};
      next;
    }
    $real = $next;
  }
  return $real eq '' ? '/' : $real;
}

# `child` relative to `root` ('' for root itself), or undef when outside (both normal)
sub inside {
  my ($root, $child) = @_;
  return '' if $child eq $root;
  return substr($child, 1) if $root eq '/';
  return substr($child, length($root) + 1) if index($child, "$root/") == 0;
  return undef;
}

sub root {
  op_error('ENOENT', 'This file service has no workspace yet.') unless defined $ROOT;
  return $ROOT;
}

# the workspace's real path (it is a mount point in a sandbox; a directory of the host without)
sub real_root {
  my $top = root();
  my $real = real_path($top);
  op_error('ENOENT', "The workspace $ROOT does not exist yet.") unless defined $real && -d $real;
  return $real;
}

sub outside {
  my ($p, @parts) = @_;
  my $top = root();
  my $at = join_path($top, @parts);
  op_error('OUTSIDE',
    "The path $p leads outside the workspace ($at is a symbolic link pointing outside $top); it was not opened. "
      . 'Only files inside the workspace can be read or written.');
}

# The path with every existing component resolved; refused when it is outside the workspace
# before or after resolution (the agent is told so: "outside the workspace", in its own terms).
sub resolve {
  my ($p) = @_;
  op_error('EINVAL', 'The path ' . ($p // 'undefined') . ' is not absolute.') if ref $p || !defined $p || $p !~ m{^/};
  my $abs = normal($p);
  my $top = root();
  my $rel = inside($top, $abs);
  op_error('OUTSIDE', "The path $p is outside the workspace: only files under $top can be read or written.") unless defined $rel;
  my $base = real_root();
  my @parts = $rel eq '' ? () : split m{/}, $rel;
  my $real = $base;
  my $i = 0;
  for (; $i < @parts; $i++) {
    # ($real is a real path, a part a plain name: joined as they are)
    my $next = $real eq '/' ? "/$parts[$i]" : "$real/$parts[$i]";
    my @st = lstat $next;
    if (!@st) {
      last if $!{ENOENT} || $!{ENOTDIR};
      sys_error();
    }
    if (!S_ISLNK($st[2])) {
      $real = $next;
      next;
    }
    my $resolved = real_path($next);
    if (!defined $resolved) {
      # a link whose target is missing is refused as a link, not taken as a name to create
      outside($p, @parts[0 .. $i]) if $!{ENOENT} || $!{ENOTDIR};
      sys_error();
    }
    outside($p, @parts[0 .. $i]) unless defined inside($base, $resolved) && lstat $resolved;
    $real = $resolved;
  }
  return $i > $#parts ? $real : join('/', $real eq '/' ? '' : $real, @parts[$i .. $#parts]);
}

# The file an open handle names must still be inside the workspace (a directory swapped for a link
# between resolve and open).
sub check_opened {
  my ($fh, $p) = @_;
  my $real = readlink('/proc/self/fd/' . fileno($fh));
  return unless defined $real;
  return if defined inside(real_root(), $real);
  close $fh;
  op_error('OUTSIDE', "The path $p led outside the workspace while it was opened; it was not read or written.");
}

sub type_of {
  my ($mode) = @_;
  return S_ISREG($mode) ? 'file' : S_ISDIR($mode) ? 'dir' : S_ISLNK($mode) ? 'symlink' : S_ISFIFO($mode) ? 'fifo'
    : S_ISSOCK($mode) ? 'socket' : S_ISCHR($mode) ? 'char' : S_ISBLK($mode) ? 'block' : 'other';
}

sub info {
  my @st = @_;
  return { type => type_of($st[2]), size => num($st[7]), mode => num($st[2] & 07777), mtimeMs => num($st[9] * 1000) };
}

sub not_regular {
  my ($p, $type) = @_;
  my $kind = $type eq 'dir' ? 'directory' : $type eq 'fifo' ? 'named pipe (FIFO)' : $type eq 'char' || $type eq 'block' ? 'device' : $type;
  op_error('NOT_REGULAR', "The path $p is not a regular file (it is a $kind); only regular files can be read or written.", { type => $type });
}

sub open_file {
  my ($real, $flags, $mode) = @_;
  sysopen(my $fh, $real, $flags, $mode // 0644) or sys_error();
  binmode $fh;
  return $fh;
}

sub write_all {
  my ($fh, $data, $at) = @_;
  sysseek($fh, $at, 0) // sys_error();
  my $off = 0;
  while ($off < length $data) {
    my $n = syswrite($fh, $data, length($data) - $off, $off) // sys_error();
    $off += $n;
  }
}

# milliseconds on a clock that does not jump (the walks' deadlines): clock_gettime(CLOCK_MONOTONIC)
# where the system call's number is known, whole seconds otherwise
# (the machine from this perl's ELF header: e_machine 62 is x86-64, 183 AArch64)
my $CLOCK_GETTIME = do {
  my $elf = '';
  if (open my $exe, '<:raw', '/proc/self/exe') { read $exe, $elf, 20; close $exe }
  length $elf == 20 ? { 62 => 228, 183 => 113 }->{ unpack 'v', substr($elf, 18, 2) } : undef;
};
sub now_ms {
  if (defined $CLOCK_GETTIME) {
    my $ts = "\0" x 16;
    if (syscall($CLOCK_GETTIME, 1, $ts) == 0) {
      my ($s, $ns) = unpack 'q q', $ts;
      return $s * 1000 + int($ns / 1e6);
    }
    $CLOCK_GETTIME = undef;
  }
  return time * 1000;
}

sub clamp { my ($x, $lo, $hi) = @_; return $x < $lo ? $lo : $x > $hi ? $hi : $x }
# a request's number, or `dflt` when it is none (or zero)
sub number { my ($x, $dflt) = @_; return defined $x && !ref $x && $x =~ /^-?\d+(\.\d+)?$/ && $x != 0 ? $x + 0 : $dflt }

# names in a directory, without `.` and `..`; undef when it cannot be read
sub names_in {
  my ($dir, $bound, $deadline) = @_;
  opendir(my $d, $dir) or return undef;
  my @names;
  my $cut = 0;
  while (defined(my $n = readdir $d)) {
    next if $n eq '.' || $n eq '..';
    # a huge directory is read up to a bound (names are sorted before they are shown)
    # (the clock read every 256 names: a system call each time)
    if ($bound && (@names >= MAX_DIR_NAMES || (@names % 256 == 255 && now_ms() > $deadline))) { $cut = 1; last }
    push @names, $n;
  }
  closedir $d;
  return (\@names, $cut);
}

# removes a path, never following a link; a directory with everything under it
sub remove_tree {
  my ($p) = @_;
  my @st = lstat $p;
  if (!@st) { return if $!{ENOENT}; sys_error() }
  if (S_ISDIR($st[2])) {
    my ($names) = names_in($p, 0, 0);
    sys_error() unless $names;
    remove_tree("$p/$_") for @$names;
    rmdir $p or $!{ENOENT} or sys_error();
  } else {
    unlink $p or $!{ENOENT} or sys_error();
  }
}

sub make_dirs {
  my ($dir) = @_;
  my $at = '';
  for my $part (grep { $_ ne '' } split m{/}, $dir) {
    $at .= "/$part";
    next if mkdir $at;
    sys_error() unless $!{EEXIST};
    # a component that exists must be a directory (or a link to one)
    next if -d $at;
    $! = Errno::EEXIST();
    sys_error();
  }
}

# ---- JSON ------------------------------------------------------------------------------------
# The headers are small objects the daemon writes (requests) or reads with a strict schema
# (answers): strings, numbers, booleans, null, arrays and objects. A number to be written as one is
# wrapped (`num`), as are booleans; any other scalar is written as a string.

sub num { my ($x) = @_; return bless \$x, 'Num' }
sub bool { return $_[0] ? JSON_TRUE() : JSON_FALSE() }
my ($T, $F) = (1, 0);
sub JSON_TRUE  { return bless \$T, 'Bool' }
sub JSON_FALSE { return bless \$F, 'Bool' }
sub truthy { my ($x) = @_; return ref $x eq 'Bool' ? ${$x} : defined $x && !ref $x && $x ne '' && $x ne '0' ? 1 : 0 }

my %ESCAPE = ("\"" => '\\"', "\\" => '\\\\', "\n" => '\\n', "\r" => '\\r', "\t" => '\\t', "\b" => '\\b', "\f" => '\\f');

sub encode {
  my ($v) = @_;
  return 'null' unless defined $v;
  my $r = ref $v;
  if ($r eq 'HASH') { return '{' . join(',', map { encode($_) . ':' . encode($v->{$_}) } sort keys %$v) . '}' }
  if ($r eq 'ARRAY') { return '[' . join(',', map { encode($_) } @$v) . ']' }
  if ($r eq 'Num') { my $n = $$v; return $n == int($n) && abs($n) < 2**53 ? sprintf('%.0f', $n) : sprintf('%.17g', $n) }
  if ($r eq 'Bool') { return $$v ? 'true' : 'false' }
  my $s = "$v";
  utf8::encode($s) if utf8::is_utf8($s);
  $s =~ s{(["\\\x00-\x1f])}{$ESCAPE{$1} // sprintf('\\u%04x', ord $1)}ge;
  return "\"$s\"";
}

# One JSON value from `$_` at pos(); dies on anything else. (Every pattern consumes what it
# matches: perl refuses a second empty match at the position of the one before.)
sub decode_value {
  /\G\s+/gc;
  if (/\G\{/gc) {
    my %o;
    /\G\s+/gc;
    return \%o if /\G\}/gc;
    for (;;) {
      /\G\s*"/gc or die "a key\n";
      my $k = string_rest();
      /\G\s*:/gc or die "a colon\n";
      $o{$k} = decode_value();
      /\G\s+/gc;
      next if /\G,/gc;
      return \%o if /\G\}/gc;
      die "an object\n";
    }
  }
  if (/\G\[/gc) {
    my @a;
    /\G\s+/gc;
    return \@a if /\G\]/gc;
    for (;;) {
      push @a, decode_value();
      /\G\s+/gc;
      next if /\G,/gc;
      return \@a if /\G\]/gc;
      die "an array\n";
    }
  }
  return string_rest() if /\G"/gc;
  return $1 + 0 if /\G(-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][-+]?\d+)?)/gc;
  return JSON_TRUE() if /\Gtrue/gc;
  return JSON_FALSE() if /\Gfalse/gc;
  return undef if /\Gnull/gc;
  die "a value\n";
}

# a string's text after its opening quote, as UTF-8 bytes
sub string_rest {
  my $s = '';
  for (;;) {
    if (/\G([^"\\]+)/gc) { $s .= $1; next }
    return $s if /\G"/gc;
    if (/\G\\u([0-9a-fA-F]{4})/gc) {
      my $c = hex $1;
      if ($c >= 0xd800 && $c < 0xdc00 && /\G\\u(d[c-f][0-9a-f]{2})/gci) { $c = 0x10000 + (($c - 0xd800) << 10) + (hex($1) - 0xdc00) }
      my $ch = chr $c;
      utf8::encode($ch);
      $s .= $ch;
      next;
    }
    if (/\G\\(["\\\/bfnrt])/gc) { $s .= { '"' => '"', '\\' => '\\', '/' => '/', b => "\b", f => "\f", n => "\n", r => "\r", t => "\t" }->{$1}; next }
    die "a string\n";
  }
}

sub decode {
  local $_ = $_[0];
  my $v = decode_value();
  /\G\s+/gc;
  /\G\z/ or die "trailing bytes\n";
  return $v;
}

1;
