# The file service of one conversation, run INSIDE its sandbox (the holder's first process, with
# the conversation's uid, namespaces and view, no capability): every file operation the daemon
# does for the conversation (the file editor, uploads, downloads, the diff's current side,
# repository instructions, replayed writes) is a request to this process. A path the agent swaps
# for a symlink between a check and an open can only lead to what the sandbox already sees: the
# kernel is the boundary, not a check in the daemon. (With SANDBOX=none it runs as a plain process
# for the same protocol and bounds, confined by the checks below only.)
#
# Perl with perl-base's modules only (every Debian system has them; the sandbox's processes load
# their seccomp filter with the same perl): it starts in a few milliseconds of CPU and ~6 MiB, where
# a node process took 50-100 ms of CPU and ~40 MiB, once per sandbox.
#
# Protocol, on stdin/stdout: frames of [u32 LE header length][u32 LE data length][header JSON][data]
# (src/sandbox/file-protocol.ts is the daemon's side of it). The first frame out says the service is
# ready. Requests are answered in order, one at a time; each names the most data its answer may
# carry (`dataMax`). Every operation is bounded: opens never block (O_NONBLOCK, then only regular
# files are read or written: a FIFO, a device or a socket is refused), reads stop at the byte limit
# the request gives, listings and walks stop at an entry, a byte and a time limit (a listing travels
# in the data: `d` or `f`, the path, NUL). Downloads and uploads move in chunks through a handle
# (open/chunk/close, create/append/commit), so neither side holds a whole file. What the daemon
# receives is bounded and checked by it again (it does not trust this process).
#
# Strings are bytes throughout: paths as the file system has them, JSON strings as UTF-8.
#
# argv: `--root <dir>`: the workspace as this process sees it (/workspace in a sandbox); `--root-later`:
# none yet, the first request (`root`) gives it (SANDBOX=none's service started ahead of its conversation);
# `--as U:G`: read and write with these effective ids (below).
use strict;
use Fcntl qw(O_RDONLY O_WRONLY O_CREAT O_EXCL O_NONBLOCK O_NOFOLLOW S_ISREG S_ISDIR S_ISLNK S_ISFIFO S_ISSOCK S_ISCHR S_ISBLK);
# the paths, errors and JSON: beside this file
our $ROOT;
BEGIN { my $dir = __FILE__ =~ s{[^/]*$}{}r; require(($dir =~ m{^/} ? $dir : "./$dir") . 'file-service-lib.pl') }

# what it creates is as private as what the conversation's shell creates (bwrap ran with 022)
umask 077;
$SIG{PIPE} = 'IGNORE';

for (my $i = 0; $i < @ARGV; $i++) {
  if ($ARGV[$i] eq '--root') { $ROOT = normal($ARGV[$i + 1] // '/workspace') }
  elsif ($ARGV[$i] eq '--root-later') { $ROOT = undef }
  elsif ($ARGV[$i] eq '--as') {
    # a root daemon's sandbox: the conversation's uid and gid as the effective ids, while the real
    # and saved ids stay this process's own, which keeps the agent off it (holder-launch.ts)
    my ($u, $g) = ($ARGV[$i + 1] // '') =~ /^(\d+):(\d+)$/ or die "--as takes UID:GID\n";
    $) = $g;
    $> = $u;
    die "the effective ids could not be set\n" if $> != $u || (split / /, $))[0] != $g;
  }
}

# ---- transfers -------------------------------------------------------------------------------

my %handles;
my $next_handle = 1;

sub add_handle {
  my ($t) = @_;
  if (keys %handles < MAX_HANDLES) { $handles{$next_handle} = $t; return $next_handle++ }
  close $t->{fh};
  unlink $t->{tmp} if defined $t->{tmp};
  op_error('EMFILE', 'More than ' . MAX_HANDLES . ' transfers at once in this conversation; try again when one has finished.');
}

sub handle_of {
  my ($n, $writing) = @_;
  my $e = defined $n && !ref $n ? $handles{$n} : undef;
  op_error('EBADF', "The transfer is not open (the conversation's sandbox may have restarted).") if !$e || (defined $e->{tmp} ? 1 : 0) != ($writing ? 1 : 0);
  return $e;
}

# The real path a write goes to, its parents made first when asked (then resolved again: one may have been a link).
sub write_target {
  my ($h) = @_;
  my $real = resolve($h->{path});
  if (truthy($h->{mkdirs})) {
    make_dirs(dir_name($real));
    $real = resolve($h->{path});
  }
  op_error('EISDIR', "The path $h->{path} is the workspace itself.") if $real eq real_root();
  return $real;
}

# ---- operations ------------------------------------------------------------------------------

my %ops;
%ops = (
  # the workspace of a service started ahead of its conversation (`--root-later`), once
  root => sub {
    my ($h) = @_;
    op_error('EINVAL', 'The workspace of this file service is set already.') if defined $ROOT;
    my $dir = $h->{path};
    op_error('EINVAL', 'The workspace must be an absolute path.') if !defined $dir || ref $dir || $dir !~ m{^/} || index($dir, "\0") >= 0;
    $ROOT = normal($dir);
    return {};
  },

  stat => sub {
    my ($h) = @_;
    my $real = resolve($h->{path});
    my @st = stat $real;
    return { info => info(@st) } if @st;
    return { info => undef } if $!{ENOENT} || $!{ENOTDIR};
    sys_error();
  },

  realpath => sub { return { path => resolve($_[0]{path}) } },

  # A regular file's bytes, at most `max`: a larger file is TOO_LARGE, unless `head` (its first `max`
  # bytes, and its size). With `list`, a directory is listed (as `list` does) instead.
  read => sub {
    my ($h) = @_;
    my $real = resolve($h->{path});
    my $max = clamp(number($h->{max}, 0), 0, MAX_DATA);
    my $fh = open_file($real, O_RDONLY | O_NONBLOCK | O_NOFOLLOW);
    check_opened($fh, $h->{path});
    my @st = stat $fh or sys_error();
    # one request for "show me this": a directory is listed instead (the file editor's view)
    if (S_ISDIR($st[2]) && ref $h->{list} eq 'HASH') {
      close $fh;
      my $out = $ops{list}->({ %{ $h->{list} }, path => $h->{path}, dataMax => $h->{dataMax} });
      my $data = delete $out->{data};
      return { listing => $out, data => $data };
    }
    not_regular($h->{path}, type_of($st[2])) unless S_ISREG($st[2]);
    if (truthy($h->{head})) {
      my $want = $max < $st[7] ? $max : $st[7];
      my $buf = '';
      while (length $buf < $want) { (sysread($fh, $buf, $want - length $buf, length $buf) // sys_error()) or last }
      return { data => $buf, info => info(@st) };
    }
    op_error('TOO_LARGE', "The file $h->{path} has $st[7] bytes; at most $max can be read.", { size => num($st[7]) }) if $st[7] > $max;
    # a file that grows while it is read stops at the limit too
    my $buf = '';
    while (length $buf <= $max) {
      # as much as it said it holds, and a little more (it may have grown), up to the limit and one byte
      my $want = $st[7] + 65536 - length $buf;
      $want = $max + 1 - length $buf if $want > $max + 1 - length $buf;
      (sysread($fh, $buf, $want, length $buf) // sys_error()) or last;
    }
    op_error('TOO_LARGE', "The file $h->{path} grew past $max bytes while it was read.") if length $buf > $max;
    return { data => $buf, info => info(@st) };
  },

  write => sub {
    my ($h, $data) = @_;
    my $real = write_target($h);
    my $mode = $h->{mode} // '';
    my $flags = O_WRONLY | O_NONBLOCK | O_NOFOLLOW | ($mode eq 'existing' ? 0 : O_CREAT) | ($mode eq 'exclusive' ? O_EXCL : 0);
    my $created = $mode eq 'exclusive' || ($mode eq 'create' && !lstat $real);
    my $fh = open_file($real, $flags, defined $h->{fileMode} && !ref $h->{fileMode} ? int($h->{fileMode}) & 0777 : 0644);
    if (!eval { check_opened($fh, $h->{path}); 1 }) {
      my $err = $@;
      unlink $real if $created;
      die $err;
    }
    my @st = stat $fh or sys_error();
    not_regular($h->{path}, type_of($st[2])) unless S_ISREG($st[2]);
    truncate($fh, 0) or sys_error();
    write_all($fh, $data, 0);
    close $fh;
    return { bytes => num(length $data) };
  },

  # removes a file (or a link: never what it points to); a directory is refused
  remove => sub {
    my ($h) = @_;
    op_error('EINVAL', 'The path ' . ($h->{path} // 'undefined') . ' is not absolute.') if !defined $h->{path} || ref $h->{path} || $h->{path} !~ m{^/};
    my $target = join_path(resolve(dir_name($h->{path})), base_name($h->{path}));
    my @st = lstat $target;
    return { removed => JSON_FALSE() } unless @st;
    op_error('EISDIR', "The path $h->{path} is a directory; it was not removed.") if S_ISDIR($st[2]);
    unlink $target or sys_error();
    return { removed => JSON_TRUE() };
  },

  mkdirs => sub {
    my ($h) = @_;
    make_dirs(resolve($h->{path}));
    resolve($h->{path});
    return {};
  },

  # Entries under a directory, breadth of `depth` levels, names sorted, at most `max` entries, the
  # answer's `dataMax` bytes and `ms` milliseconds; in the data: `d` or `f`, the path, NUL. Hidden
  # names are counted (at the first level) and left out unless `hidden`.
  list => sub {
    my ($h) = @_;
    my $real = resolve($h->{path});
    my $depth = clamp(number($h->{depth}, 1), 1, 8);
    my $max = clamp(number($h->{max}, 1000), 1, 100_000);
    my $deadline = now_ms() + clamp(number($h->{ms}, 2000), 10, 30_000);
    my $budget = clamp(number($h->{dataMax}, 0), 0, MAX_DATA);
    my $hidden = truthy($h->{hidden});
    my ($count, $hidden_count, $truncated, $data) = (0, 0, 0, '');
    my @st = stat $real or sys_error();
    op_error('ENOTDIR', "The path $h->{path} is not a directory.") unless S_ISDIR($st[2]);
    my $walk;
    $walk = sub {
      my ($dir, $shown, $level) = @_;
      my ($names, $cut) = names_in($dir, 1, $deadline);
      return unless $names;
      $truncated = 1 if $cut;
      for my $name (sort @$names) {
        if (!$hidden && substr($name, 0, 1) eq '.') {
          $hidden_count++ if $level == 1;
          next;
        }
        if ($truncated || $count >= $max || ($count % 64 == 63 && now_ms() > $deadline)) { $truncated = 1; return }
        my $full = "$dir/$name";
        # (the tests on `_` read the lstat's result again, without a system call)
        my $link = lstat($full) && -l _;
        my $is_dir = $link ? -d $full : -d _;
        # (a name from readdir has no slash and is neither . nor ..)
        my $shown_path = $shown eq '/' ? "/$name" : "$shown/$name";
        my $entry = ($is_dir ? 'd' : 'f') . "$shown_path\0";
        if (length $entry > $budget) { $truncated = 1; return }
        $budget -= length $entry;
        $data .= $entry;
        $count++;
        $walk->($full, $shown_path, $level + 1) if $is_dir && $level < $depth && !$link;
      }
    };
    $walk->($real eq '/' ? '' : $real, normal($h->{path}), 1);
    undef $walk;
    return { hidden => num($hidden_count), truncated => bool($truncated), count => num($count), data => $data };
  },

  # Disk use of the given directories in bytes (allocated blocks; a file with several links is
  # counted once; the walk stays on each directory's file system), stopping after `ms`.
  usage => sub {
    my ($h) = @_;
    my $deadline = now_ms() + clamp(number($h->{ms}, 10_000), 10, 60_000);
    my (%seen, $bytes, $files, $steps);
    ($bytes, $files, $steps) = (0, 0, 0);
    my $complete = 1;
    for my $top (ref $h->{paths} eq 'ARRAY' ? @{ $h->{paths} } : ()) {
      next if ref $top;
      my @t = lstat $top or next;
      my $dev = $t[0];
      my @stack = ($top);
      while (@stack) {
        # (the clock read every 64 paths: a system call each time)
        if (++$steps % 64 == 0 && now_ms() > $deadline) { $complete = 0; last }
        my $p = pop @stack;
        my @st = lstat $p or next;
        next if $st[0] != $dev;
        if ($st[3] > 1 && !S_ISDIR($st[2])) {
          next if $seen{"$st[0]:$st[1]"}++;
        }
        $bytes += $st[12] * 512;
        $files++;
        if (S_ISDIR($st[2])) {
          my ($names) = names_in($p, 0, 0);
          push @stack, map { $p eq '/' ? "/$_" : "$p/$_" } @$names if $names;
        }
      }
    }
    return { bytes => num($bytes), files => num($files), complete => bool($complete) };
  },

  # removes everything under a directory, never following a link (the directory itself stays)
  clear => sub {
    my ($h) = @_;
    my $real = resolve($h->{path});
    my ($names) = names_in($real, 0, 0);
    sys_error() unless $names;
    remove_tree(join_path($real, $_)) for @$names;
    return {};
  },

  # a regular file of at most `max` bytes opened for `chunk` reads (a download)
  open => sub {
    my ($h) = @_;
    my $fh = open_file(resolve($h->{path}), O_RDONLY | O_NONBLOCK | O_NOFOLLOW);
    check_opened($fh, $h->{path});
    my @st = stat $fh;
    my $ok = eval {
      sys_error() unless @st;
      not_regular($h->{path}, type_of($st[2])) unless S_ISREG($st[2]);
      my $max = number($h->{max}, 0);
      $max = 0 if $max < 0;
      op_error('TOO_LARGE', "The file $h->{path} has $st[7] bytes; at most $max can be read.", { size => num($st[7]) }) if $st[7] > $max;
      1;
    };
    if (!$ok) { my $err = $@; close $fh; die $err }
    return { handle => num(add_handle({ fh => $fh, pos => 0, left => $st[7], tmp => undef, target => '' })), info => info(@st) };
  },

  # the next bytes of an opened file, at most the answer's `dataMax` (none at its end, or past the size it was opened with)
  chunk => sub {
    my ($h) = @_;
    my $e = handle_of($h->{handle}, 0);
    my $want = clamp(number($h->{dataMax}, 0), 0, MAX_CHUNK);
    $want = $e->{left} if $e->{left} < $want;
    my $buf = '';
    if ($want > 0) {
      sysseek($e->{fh}, $e->{pos}, 0) // sys_error();
      sysread($e->{fh}, $buf, $want) // sys_error();
    }
    $e->{pos} += length $buf;
    $e->{left} -= length $buf;
    return { data => $buf };
  },

  # A new file next to `path` (a hidden name in the same directory), written by `append` and put in
  # place by `commit`: an upload that fails or is cut off leaves the path as it was.
  create => sub {
    my ($h) = @_;
    my $real = write_target($h);
    my @st = lstat $real;
    op_error('EISDIR', "The path $h->{path} is a directory.") if @st && S_ISDIR($st[2]);
    not_regular($h->{path}, type_of($st[2])) if @st && !S_ISREG($st[2]);
    my $suffix = join '', map { ('0' .. '9', 'a' .. 'z')[int rand 36] } 1 .. 8;
    my $tmp = join_path(dir_name($real), '.' . substr(base_name($real), 0, 100) . ".upload-$suffix");
    my $fh = open_file($tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_NONBLOCK, 0644);
    if (!eval { check_opened($fh, $h->{path}); 1 }) {
      my $err = $@;
      unlink $tmp;
      die $err;
    }
    return { handle => num(add_handle({ fh => $fh, pos => 0, left => 0, tmp => $tmp, target => $h->{path} })) };
  },

  append => sub {
    my ($h, $data) = @_;
    my $e = handle_of($h->{handle}, 1);
    write_all($e->{fh}, $data, $e->{pos});
    $e->{pos} += length $data;
    return { bytes => num($e->{pos}) };
  },

  # puts a created file in place of its path (a regular file there is replaced, keeping its mode)
  commit => sub {
    my ($h) = @_;
    my $e = handle_of($h->{handle}, 1);
    delete $handles{ $h->{handle} };
    my $tmp = $e->{tmp};
    my $ok = eval {
      my $real = resolve($e->{target});
      # the directory may have been swapped meanwhile: the file is only ever moved within it
      op_error('OUTSIDE', "The directory of $e->{target} changed while it was uploaded; it was not written.") if dir_name($real) ne dir_name($tmp);
      my @st = lstat $real;
      op_error('EISDIR', "The path $e->{target} is a directory.") if @st && S_ISDIR($st[2]);
      not_regular($e->{target}, type_of($st[2])) if @st && !S_ISREG($st[2]);
      chmod($st[2] & 07777, $e->{fh}) or sys_error() if @st;
      rename($tmp, $real) or sys_error();
      1;
    };
    my $err = $@;
    unlink $tmp unless $ok;
    close $e->{fh};
    die $err unless $ok;
    return { bytes => num($e->{pos}) };
  },

  # ends a transfer: an opened file is closed, a created one removed
  close => sub {
    my ($h) = @_;
    my $e = defined $h->{handle} && !ref $h->{handle} ? delete $handles{ $h->{handle} } : undef;
    return {} unless $e;
    close $e->{fh};
    unlink $e->{tmp} if defined $e->{tmp};
    return {};
  },
);

# ---- the channel -----------------------------------------------------------------------------

binmode STDIN;
binmode STDOUT;

sub send_frame {
  my ($header, $data) = @_;
  $data //= '';
  my $head = encode($header);
  my $frame = pack('V V', length $head, length $data) . $head . $data;
  my $off = 0;
  while ($off < length $frame) {
    # the daemon's end closed (it exited): so does the sandbox
    my $n = syswrite(STDOUT, $frame, length($frame) - $off, $off);
    exit 0 unless defined $n;
    $off += $n;
  }
}

sub handle {
  my ($h, $data) = @_;
  my $hash = ref $h eq 'HASH' ? $h : {};
  # the request's id, echoed as the number it is
  my $id = defined $hash->{id} && !ref $hash->{id} && $hash->{id} =~ /^-?\d+$/ ? num($hash->{id}) : undef;
  my $op = $hash->{op};
  my $out = eval {
    op_error('EINVAL', 'unknown operation ' . ($op // 'undefined')) if !defined $op || ref $op || !exists $ops{$op};
    $ops{$op}->($hash, $data);
  };
  if ($out) {
    my $outData = delete $out->{data};
    send_frame({ (defined $id ? (id => $id) : ()), ok => JSON_TRUE(), %$out }, $outData);
    return;
  }
  my $err = $@;
  my $code = ref $err eq 'HASH' && defined $err->{code} && $err->{code} =~ /^[A-Z][A-Z0-9_]{0,63}$/ ? $err->{code} : 'EIO';
  my $path = defined $hash->{path} && !ref $hash->{path} ? $hash->{path} : '';
  my $message = substr(ref $err eq 'HASH' && defined $err->{message} ? $err->{message} : "$code ($path)", 0, 8000);
  my $detail = ref $err eq 'HASH' && $err->{detail} ? { detail => $err->{detail} } : {};
  send_frame({ (defined $id ? (id => $id) : ()), ok => JSON_FALSE(), code => $code, message => $message, %$detail });
}

send_frame({ id => num(0), ok => JSON_TRUE(), ready => JSON_TRUE() });
my $in = '';
for (;;) {
  my $n = sysread(STDIN, $in, 1 << 20, length $in);
  exit 0 if !$n;
  while (length $in >= 8) {
    my ($hl, $dl) = unpack 'V V', $in;
    exit 2 if $hl > MAX_HEADER || $dl > MAX_DATA;
    last if length $in < 8 + $hl + $dl;
    my $header = eval { decode(substr($in, 8, $hl)) };
    exit 2 if $@;
    my $data = substr($in, 8 + $hl, $dl);
    substr($in, 0, 8 + $hl + $dl, '');
    handle($header, $data);
  }
}
