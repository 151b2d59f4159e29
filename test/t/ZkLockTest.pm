
# ZkLockTest.pm - shared helpers for the zklock TAP tests
#
# Every test file starts its own ZooKeeper (tools/zk.sh) on a free loopback
# port and its own PostgreSQL node that preloads zklock and points at it.
# ZooKeeper's content is always inspected through ZooKeeper itself
# (test/zkq.py, run with the Python that has kazoo), never only through SQL.
#
# Environment (set by tools/test.sh; sensible defaults otherwise):
#   ZKLOCK_SRC      root of the source tree
#   ZKLOCK_ZK_SH    path of tools/zk.sh
#   ZKLOCK_ZKQ      path of test/zkq.py
#   ZKLOCK_PYTHON   Python interpreter with kazoo (default /usr/bin/python3)

package ZkLockTest;

use strict;
use warnings FATAL => 'all';

use Carp;
use Cwd qw(abs_path);
use Exporter 'import';
use File::Basename qw(dirname);
use File::Path qw(rmtree);
use IO::Socket::INET;
use IPC::Run;
use JSON::PP;
use Time::HiRes qw(time usleep);

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

our @EXPORT = qw(
  zk_start zk_stop zk_kill zk_freeze zk_thaw zk_restart zk_cmd zk_fourlw zk_watch_count
  zkq zk_count zk_txns_pending node_copy zk_wait_count zk_tree zk_children
  zk_node zk_status zk_status_value wait_for_state worker_pid wait_for_worker
  new_session one_shot wait_until elapsed_since
  wait_for_backend_active try_lock_elsewhere
  kazoo_client queue_kazoo zk_partition_ensemble auth_kazoo write_mode_file
  zk_conf zk_streaming_node zk_standby_node
  sql_elsewhere psql_noerr try_lock_shared_elsewhere
  zk_exists zk_get zk_czxid zk_lock_nodes zk_lock_modes
  queue_drain wait_log
  late_request_setup hosts_to_quorum held_within sqlstate_psql zk_nodes_of
  zk_msg_id_of standby_refuses queue_request out_or_error create_hog kazoo_driver
  install_for_tenant zkq_or_die zk_owners kazoo_process
);

our $SRC = $ENV{ZKLOCK_SRC} // abs_path(dirname(__FILE__) . '/../..');
our $ZK_SH = $ENV{ZKLOCK_ZK_SH} // "$SRC/tools/zk.sh";
our $ZKQ = $ENV{ZKLOCK_ZKQ} // "$SRC/test/zkq.py";
our $PYTHON = $ENV{ZKLOCK_PYTHON} // '/usr/bin/python3';
# the classpath tools/zk.sh runs the server with (Debian's jars, or
# ZooKeeper 3.9.6's with ZK_VERSION=3.9), for the tests that compile and run
# against ZooKeeper's own classes
our $ZK_CLASSPATH = $ENV{ZK_CLASSPATH} // do
{
	my $cp = `bash '$ZK_SH' classpath`;
	chomp $cp;
	$cp;
};

# ZooKeeper servers started by this test file, stopped in END
my @zookeepers;

#
# Small utilities
#

# Poll $code (returns true when done) every $interval s for up to $timeout s.
# Returns the last value of $code (true on success, false on timeout).
sub wait_until
{
	my ($code, $timeout, $interval) = @_;
	$timeout //= 30;
	$interval //= 0.1;
	my $deadline = time() + $timeout;
	while (1)
	{
		my $r = $code->();
		return $r if $r;
		return $r if time() >= $deadline;
		usleep(int($interval * 1_000_000));
	}
}

sub elapsed_since
{
	my ($t0) = @_;
	return time() - $t0;
}

# Run a command, return (exit code, stdout, stderr).  Never dies.
sub _run
{
	my ($cmd, $timeout) = @_;
	$timeout //= 120;
	my ($out, $err) = ('', '');
	my $ok = eval {
		IPC::Run::run($cmd, '<', \undef, '>', \$out, '2>', \$err,
			IPC::Run::timeout($timeout));
		1;
	};
	my $rc = $ok ? ($? >> 8) : -1;
	$err .= "\n[harness: $@]" unless $ok;
	return ($rc, $out, $err);
}

#
# ZooKeeper servers (tools/zk.sh)
#

sub _zk_sh
{
	my @args = @_;
	my ($rc, $out, $err) = _run([ 'bash', $ZK_SH, @args ], 180);
	note "zk.sh @args: rc=$rc"
	  . ($out ne '' ? "\nstdout: $out" : '')
	  . ($err ne '' ? "\nstderr: $err" : '');
	return ($rc, $out, $err);
}

# Start a standalone ZooKeeper on a free port, data in a fresh directory.
# Returns { dir, port, hosts, name }.  Dies if it does not come up.
sub zk_start
{
	my (%opts) = @_;
	my $port = $opts{port} // PostgreSQL::Test::Cluster::get_free_port();
	my $name = $opts{name} // 'zk';
	my $script = $0;
	$script =~ s{.*/}{};
	$script =~ s{\.pl$}{};
	my $dir = "$PostgreSQL::Test::Utils::tmp_check/zk_${script}_${name}_$port";
	rmtree($dir);
	mkdir $dir or die "cannot create $dir: $!";
	my $zk = {
		dir => $dir,
		port => $port,
		hosts => "127.0.0.1:$port",
		name => $name,
		running => 0,
	};
	push @zookeepers, $zk;
	my ($rc, $out, $err) = _zk_sh('start', $dir, $port);
	die "could not start ZooKeeper in $dir on port $port (rc $rc):\n$out\n$err"
	  if $rc != 0;
	$zk->{running} = 1;
	note "ZooKeeper $name running on $zk->{hosts} (data in $dir)";
	return $zk;
}

# Start again after zk_stop / zk_kill (same data directory and port).
sub zk_restart
{
	my ($zk) = @_;
	my ($rc, $out, $err) = _zk_sh('start', $zk->{dir}, $zk->{port});
	die "could not restart ZooKeeper $zk->{name} (rc $rc):\n$out\n$err"
	  if $rc != 0;
	$zk->{running} = 1;
	return 1;
}

sub zk_stop
{
	my ($zk) = @_;
	my ($rc) = _zk_sh('stop', $zk->{dir});
	$zk->{running} = 0;
	return $rc == 0;
}

sub zk_kill
{
	my ($zk) = @_;
	my ($rc) = _zk_sh('kill', $zk->{dir});
	$zk->{running} = 0;
	return $rc == 0;
}

sub zk_freeze
{
	my ($zk) = @_;
	my ($rc) = _zk_sh('freeze', $zk->{dir});
	$zk->{frozen} = 1 if $rc == 0;
	return $rc == 0;
}

sub zk_thaw
{
	my ($zk) = @_;
	my ($rc) = _zk_sh('thaw', $zk->{dir});
	$zk->{frozen} = 0 if $rc == 0;
	return $rc == 0;
}

# Four-letter word; returns its output (undef on failure)
sub zk_cmd
{
	my ($zk, $word) = @_;
	my ($rc, $out) = _run([ 'bash', $ZK_SH, 'cmd', $zk->{port}, $word ], 30);
	return $rc == 0 ? $out : undef;
}

# A four-letter word's answer, '' when it is empty (wchc and wchp print
# nothing when there is no watch); dies when ZooKeeper does not answer, so
# that "no watch" is never a failed query
sub zk_fourlw
{
	my ($zk, $word) = @_;
	my $out = zk_cmd($zk, $word);
	return $out if defined $out;
	my $ok = zk_cmd($zk, 'ruok') // '';
	die "ZooKeeper does not answer '$word' (ruok: '$ok')" unless $ok =~ /imok/;
	return '';
}

# The number of watches a ZooKeeper holds, all paths and sessions (mntr's
# zk_watch_count).  ZooKeeper 3.8 lists only data watches in wchc and wchp,
# so children watches (the queue's) are seen only in this count.
sub zk_watch_count
{
	my ($zk) = @_;
	my $m = zk_fourlw($zk, 'mntr');
	my ($n) = $m =~ /^zk_watch_count\s+(\d+)/m;
	die "mntr has no zk_watch_count:\n$m" unless defined $n;
	return $n;
}

# Print the tail of a ZooKeeper's log files (diagnostics on failure)
sub _zk_diag
{
	my ($zk) = @_;
	my @logs = (glob("$zk->{dir}/*.log"), glob("$zk->{dir}/*/*.log"),
		glob("$zk->{dir}/*.out"), glob("$zk->{dir}/*/*.out"));
	foreach my $f (@logs)
	{
		open(my $fh, '<', $f) or next;
		my @lines = <$fh>;
		close $fh;
		@lines = @lines[ -40 .. -1 ] if @lines > 40;
		diag "--- tail of $f ---\n" . join('', @lines);
	}
}

# Last resort when tools/zk.sh could not stop a server: SIGKILL the pid of
# DIR/zk.pid, but only if that process is the JVM started with DIR/zoo.cfg.
sub _kill_leftover
{
	my ($zk) = @_;
	open(my $fh, '<', "$zk->{dir}/zk.pid") or return;
	my $pid = <$fh>;
	close $fh;
	return unless defined $pid && $pid =~ /^(\d+)\s*$/;
	$pid = $1;
	open(my $cf, '<', "/proc/$pid/cmdline") or return;
	local $/;
	my $cmdline = <$cf> // '';
	close $cf;
	return unless grep { $_ eq "$zk->{dir}/zoo.cfg" } split /\0/, $cmdline;
	print STDERR "killing leftover ZooKeeper $pid ($zk->{dir})\n";
	kill 'KILL', $pid;
	kill 'CONT', $pid;
	for (1 .. 100)
	{
		last unless -e "/proc/$pid";
		open(my $st, '<', "/proc/$pid/stat") or last;
		my $stat = <$st> // '';
		close $st;
		last if $stat =~ /^\d+ \(.*\) Z /;
		usleep(100_000);
	}
	return;
}

END
{
	# Every server log of this test file: a worker that found its lock (or
	# a hold-off of interrupts) still held at the top of its loop is a bug
	# whatever the test asserted (it went on only thanks to the safety net),
	# so the file fails
	my $base = File::Basename::basename($0) =~ s/\.pl$//r;
	foreach my $log (glob("$PostgreSQL::Test::Utils::log_path/${base}_*.log"))
	{
		open(my $fh, '<', $log) or next;
		my @bad = grep { /still held its lock at the top of its loop/ } <$fh>;
		close $fh;
		next unless @bad;
		print STDERR "$log: the zklock worker found its lock held at the top of its loop:\n@bad";
		$? ||= 1;
	}

	# keep the exit status of the test script (and look at it: a script
	# that died keeps its ZooKeeper's files for the post-mortem)
	my $exit = $?;
	local $?;
	my $failed = $exit != 0 || !Test::More->builder->is_passing;

	foreach my $zk (@zookeepers)
	{
		eval {
			_zk_diag($zk) if $failed;
			_run([ 'bash', $ZK_SH, 'thaw', $zk->{dir} ], 30) if $zk->{frozen};
			_run([ 'bash', $ZK_SH, 'stop', $zk->{dir} ], 60);
			# belt and braces: a stop that failed must not leave a JVM behind
			_run([ 'bash', $ZK_SH, 'kill', $zk->{dir} ], 30);
			_kill_leftover($zk);
			rmtree($zk->{dir}) unless $failed;
			1;
		} or print STDERR "could not stop ZooKeeper in $zk->{dir}: $@\n";
	}
}

#
# test/zkq.py
#

# zkq($zk_or_hosts, @args) -> in list context (rc, stdout, stderr),
# in scalar context stdout without its final newline (undef if rc != 0)
sub zkq
{
	my ($zk, @args) = @_;
	my $hosts = ref($zk) ? $zk->{hosts} : $zk;
	my ($rc, $out, $err) = _run([ $PYTHON, $ZKQ, $hosts, @args ], 120);
	if (wantarray)
	{
		return ($rc, $out, $err);
	}
	if ($rc != 0)
	{
		note "zkq $hosts @args failed (rc $rc): $out $err";
		return undef;
	}
	chomp $out;
	return $out;
}

# zkq's output (chomped); dies when ZooKeeper cannot be asked, so that a
# query that failed never passes for an empty answer
sub zkq_or_die
{
	my ($zk, @args) = @_;
	return _out_or_die("zkq @args", zkq($zk, @args));
}

# $out of a program that ran as $what (chomped); dies unless its exit
# status $rc was 0
sub _out_or_die
{
	my ($what, $rc, $out, $err) = @_;
	die "$what failed (rc $rc): $out $err" if $rc != 0;
	chomp $out;
	return $out;
}

# Number of descendants of $path (0 if it does not exist).  Dies if
# ZooKeeper cannot be asked: a count that silently failed must not pass.
sub zk_count
{
	my ($zk, $path) = @_;
	my $out = zkq_or_die($zk, 'count', $path);
	die "zkq count $path: unexpected output '$out'" unless $out =~ /^\d+$/;
	return $out + 0;
}

# test/node_copy.py: save a node's bytes (base64), its 4-byte tag, or create
# a node with saved bytes ("created", or "exists"), as a client copying
# zklock's nodes would
sub node_copy
{
	my ($zk, @args) = @_;
	return _out_or_die("node_copy.py @args[0,1]",
		_run([ $PYTHON, "$SRC/test/node_copy.py", $zk->{hosts}, @args ], 60));
}

# Transaction nodes under $path (<root>/txns) not published yet: those
# without the child "kept" (a published node kept against a late create of
# it, src/queue/queue_publish.c "Late creates").  Returns (pending, kept).
sub zk_txns_pending
{
	my ($zk, $path) = @_;
	my $out = zkq_or_die($zk, 'count-kept', $path);
	die "zkq count-kept $path: unexpected output '$out'" unless $out =~ /^(\d+) (\d+)$/;
	return wantarray ? ($1 + 0, $2 + 0) : $1 + 0;
}

sub zk_tree
{
	my ($zk, $path) = @_;
	my ($rc, $out, $err) = zkq($zk, 'tree', $path);
	return $rc == 0 ? $out : "(tree $path failed: rc $rc $err)";
}

# The children of $path in $zk, sorted by name, as hashes { name, owner
# (the ephemeral owner, as zkq.py tree prints it), czxid (a number) }, and
# with data => 1 in %opts their data too (data, '' for none)
sub zk_nodes_of
{
	my ($zk, $path, %opts) = @_;
	my @n;
	foreach my $line (split /\n/, zkq_or_die($zk, 'tree', $path))
	{
		my ($p, $owner, $cz) = split / /, $line;
		next unless defined $cz && $p =~ m{^\Q$path\E/([^/]+)$};
		push @n, { name => $1, owner => $owner, czxid => hex($cz),
			$opts{data} ? (data => zk_get($zk, $p) // '') : () };
	}
	my @sorted = sort { $a->{name} cmp $b->{name} } @n;
	return @sorted;
}

# The children of $path in $zk (dies when ZooKeeper cannot be asked) as
# { name => ephemeral owner, as zkq.py tree prints it }
sub zk_owners
{
	my ($zk, $path) = @_;
	my %m;
	foreach my $line (split /\n/, zkq_or_die($zk, 'tree', $path))
	{
		my ($p, $owner) = split / /, $line;
		$m{$1} = $owner if defined $owner && $p =~ m{^\Q$path\E/([^/]+)$};
	}
	return %m;
}

# the msg_id SQL gives the item of entry node $n (from zk_nodes_of): 2^62 +
# czxid * 1024 + the sequence number (the items of one multi share a czxid
# and have consecutive sequence numbers)
sub zk_msg_id_of
{
	my ($n) = @_;
	my ($seq) = $n->{name} =~ /(\d{10})$/;
	return (1 << 62) + $n->{czxid} * 1024 + $seq;
}

# Children of $path as a list (empty if missing)
sub zk_children
{
	my ($zk, $path) = @_;
	my ($rc, $out, $err) = zkq($zk, 'ls', $path);
	return () if $rc != 0;
	return grep { $_ ne '' } split /\s+/, $out;
}

# Wait until the descendant count of $path is $n, at most $secs seconds.
# Returns (ok, elapsed seconds, last count).  Prints the tree when it fails.
sub zk_wait_count
{
	my ($zk, $path, $n, $secs) = @_;
	$secs //= 10;
	my $t0 = time();
	my ($rc, $out, $err) = zkq($zk, 'wait-count', $path, $n, $secs);
	my $elapsed = time() - $t0;
	my $ok = ($rc == 0);
	my $last;
	eval { $last = zk_count($zk, $path); 1 } or $last = "error: $@";
	# do not trust a wait that said yes if the count says otherwise
	$ok = 0 if $ok && $last ne $n;
	if (!$ok)
	{
		diag "waited ${secs}s for $n descendants of $path on $zk->{hosts}: "
		  . "rc $rc, last count $last\n$out$err\n"
		  . zk_tree($zk, $path);
	}
	return wantarray ? ($ok, $elapsed, $last) : $ok;
}

#
# PostgreSQL nodes
#

# Create, start and return a node preloading zklock and connected to $zk
# (a ZooKeeper from zk_start, or a host string).  Options:
#   session_timeout, connect_timeout   zklock settings (e.g. '4s')
#   conf          extra postgresql.conf text
#   wait          wait for state 'connected' (default 1)
sub zk_node
{
	my ($name, $zk, %opts) = @_;
	my $hosts = ref($zk) ? $zk->{hosts} : $zk;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init(allows_streaming => $opts{allows_streaming} // 0);
	$node->append_conf('postgresql.conf', zk_conf($zk, %opts));
	$node->start;
	$node->safe_psql('postgres', 'CREATE EXTENSION zklock');
	wait_connected($node, "zklock worker did not connect to ZooKeeper at $hosts")
	  if $opts{wait} // 1;
	return $node;
}

# Die with $what unless the node's worker reaches state 'connected' in 60 s
sub wait_connected
{
	my ($node, $what) = @_;
	my $st = wait_for_state($node, 'connected', 60);
	die "$what: " . encode_json($st // {})
	  unless $st && $st->{state} eq 'connected';
}

# postgresql.conf text for a node preloading zklock and connected to $zk
# (a ZooKeeper from zk_start, or a host string); options as for zk_node
sub zk_conf
{
	my ($zk, %opts) = @_;
	my $hosts = ref($zk) ? $zk->{hosts} : $zk;
	my $conf = "shared_preload_libraries = 'zklock'\n"
	  . "zklock.hosts = '$hosts'\n"
	  . "log_min_messages = debug1\n"
	  . "log_line_prefix = '%m [%p] %b '\n"
	  . "max_connections = 60\n";
	# the tests share names with kazoo and across databases and clusters on
	# purpose: the root namespace, unless a test asks for another
	# (namespace => undef keeps the default, each database its own)
	$opts{namespace} = '' unless exists $opts{namespace};
	$conf .= "zklock.namespace = '$opts{namespace}'\n" if defined $opts{namespace};
	$conf .= "zklock.session_timeout = '$opts{session_timeout}'\n"
	  if defined $opts{session_timeout};
	$conf .= "zklock.connect_timeout = '$opts{connect_timeout}'\n"
	  if defined $opts{connect_timeout};
	$conf .= $opts{conf} if defined $opts{conf};
	return $conf;
}

# Like zk_node, but the node allows streaming replication (a primary for
# zk_standby_node)
sub zk_streaming_node
{
	my ($name, $zk, %opts) = @_;
	return zk_node($name, $zk, %opts, allows_streaming => 1);
}

# A streaming hot standby of $primary (from zk_streaming_node), made from a
# fresh base backup; it inherits the primary's configuration (so preloads
# zklock and uses the same ZooKeeper).  Waits until it has replayed
# everything and (unless wait => 0) until its own zklock worker is connected.
sub zk_standby_node
{
	my ($name, $primary, %opts) = @_;
	my $backup = "bk_$name";
	$primary->backup($backup);
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init_from_backup($primary, $backup, has_streaming => 1);
	$node->append_conf('postgresql.conf', $opts{conf}) if defined $opts{conf};
	$node->start;
	$primary->wait_for_catchup($node);
	wait_connected($node, "zklock worker of the standby did not connect")
	  if $opts{wait} // 1;
	return $node;
}

# Each call [ name, sql ] fails on the hot standby $standby with 25006
sub standby_refuses
{
	my ($standby, @calls) = @_;
	foreach my $c (@calls)
	{
		my $r = one_shot($standby, $c->[1], 30);
		is($r->{sqlstate}, '25006', "standby: $c->[0] fails with 25006") or diag $r->{err};
	}
	return;
}

# $node->psql($db, $sql) that never dies: a psql that exits before IPC::Run
# wrote its input (a server that refused it, as while a cluster restarts
# after a crash) makes IPC::Run die with EPIPE; that is an error result
# (rc 1, the message as stderr), not the test's end
sub psql_noerr
{
	my ($node, $db, $sql) = @_;
	my ($rc, $out, $err);
	eval {
		($rc, $out, $err) = $node->psql($db, $sql, on_error_die => 0);
		1;
	} or return (1, '', "psql: $@");
	return ($rc, $out // '', $err // '');
}

# Run $sql in a new connection to database $db (default postgres); returns
# its output, or "error: <stderr>" if it failed
sub sql_elsewhere
{
	my ($node, $sql, $db) = @_;
	my ($rc, $out, $err) = psql_noerr($node, $db // 'postgres', $sql);
	return $rc == 0 ? $out : "error: $err";
}

# zk_try_lock_shared($name) in a new connection; 't', 'f' or the error text
sub try_lock_shared_elsewhere
{
	my ($node, $name) = @_;
	$name =~ s/'/''/g;
	return sql_elsewhere($node, "SELECT zk_try_lock_shared('$name')");
}

# True if $path exists in ZooKeeper (dies if ZooKeeper cannot be asked)
sub zk_exists
{
	my ($zk, $path) = @_;
	my ($rc, $out, $err) = zkq($zk, 'exists', $path);
	die "zkq exists $path failed (rc $rc): $out $err" if $rc > 1;
	return $rc == 0;
}

# Data of $path as text (undef if it does not exist)
sub zk_get
{
	my ($zk, $path) = @_;
	my ($rc, $out, $err) = zkq($zk, 'get', $path);
	return undef if $rc != 0;
	chomp $out;
	return $out;
}

# czxid of $path as a decimal number (undef if it does not exist)
sub zk_czxid
{
	my ($zk, $path) = @_;
	my $tree = zk_tree($zk, $path);
	my ($cz) = $tree =~ m{^\Q$path\E \S+ (0x[0-9a-f]+)$}m;
	return defined $cz ? hex($cz) : undef;
}

# Contender nodes under lock path $path, in queue order (by sequence
# number): list of { name, path, mode ('exclusive'/'shared'), seq, guid }
sub zk_lock_nodes
{
	my ($zk, $path) = @_;
	my @nodes;
	foreach my $c (zk_children($zk, $path))
	{
		next unless $c =~ /^([0-9a-f]*)__(r?)lock__(\d{10})$/;
		push @nodes,
		  {
			name => $c,
			path => "$path/$c",
			guid => $1,
			mode => ($2 eq 'r' ? 'shared' : 'exclusive'),
			seq => $3 + 0,
		  };
	}
	return sort { $a->{seq} <=> $b->{seq} } @nodes;
}

# Modes of the contenders under $path in queue order, e.g. "exclusive,shared"
sub zk_lock_modes
{
	my ($zk, $path) = @_;
	return join(',', map { $_->{mode} } zk_lock_nodes($zk, $path));
}

# zk_status() as a hash reference (undef if it failed)
sub zk_status
{
	my ($node) = @_;
	my ($rc, $out, $err) = psql_noerr($node, 'postgres',
		'SELECT row_to_json(s) FROM zk_status() s');
	if ($rc != 0 || $out eq '')
	{
		note "zk_status() failed: $err";
		return undef;
	}
	return decode_json($out);
}

# One field of zk_status() as a string ('' if zk_status() failed or NULL)
sub zk_status_value
{
	my ($node, $key) = @_;
	my $st = zk_status($node);
	return '' unless $st && defined $st->{$key};
	return "$st->{$key}";
}

# Wait until zk_status().state is $state (or, with a code ref, until it
# returns true for the status hash).  Returns the last status seen.
sub wait_for_state
{
	my ($node, $state, $timeout) = @_;
	my $st;
	my $test =
	  ref($state) eq 'CODE'
	  ? $state
	  : sub { $_[0]->{state} eq $state };
	wait_until(
		sub {
			$st = zk_status($node);
			return $st && $test->($st);
		},
		$timeout // 30,
		0.2);
	return $st // { state => '(zk_status failed)', servers => '', session_id => '' };
}

# Wait up to $secs s (default 40) until $node's server log matches $re;
# returns true if it did
sub wait_log
{
	my ($node, $re, $secs) = @_;
	return wait_until(sub { slurp_file($node->logfile) =~ $re }, $secs // 40);
}

# Everything $node can take from queue $q now, one zk_try_dequeue per
# transaction (at most $max, default 200): the payloads sorted, joined
# with ','
sub queue_drain
{
	my ($node, $q, $max) = @_;
	my @all;
	for (1 .. ($max // 200))
	{
		my $b = $node->safe_psql('postgres', "SELECT body FROM zk_try_dequeue('$q')");
		last if $b eq '';
		push @all, $b;
	}
	return join(',', sort @all);
}

# pid of the zklock worker according to pg_stat_activity (undef if none)
sub worker_pid
{
	my ($node) = @_;
	my $pids = $node->safe_psql('postgres',
		"SELECT pid FROM pg_stat_activity WHERE backend_type = 'zklock worker'"
	);
	my @pids = grep { $_ ne '' } split /\n/, $pids;
	return undef unless @pids;
	die "more than one zklock worker: @pids" if @pids > 1;
	return $pids[0];
}

# Wait for a zklock worker whose pid differs from $old (if given)
sub wait_for_worker
{
	my ($node, $old, $timeout) = @_;
	my $pid;
	wait_until(
		sub {
			$pid = worker_pid($node);
			return defined($pid) && (!defined($old) || $pid != $old);
		},
		$timeout // 30,
		0.2);
	return (defined($pid) && (!defined($old) || $pid != $old)) ? $pid : undef;
}

# Wait until backend $pid is running a statement (state 'active' in
# pg_stat_activity) whose text matches $like (SQL LIKE pattern).
sub wait_for_backend_active
{
	my ($node, $pid, $like, $timeout) = @_;
	$like //= '%';
	$like =~ s/'/''/g;
	return wait_until(
		sub {
			$node->safe_psql('postgres',
				"SELECT count(*) FROM pg_stat_activity WHERE pid = $pid "
				  . "AND state = 'active' AND query LIKE '$like'") eq '1';
		},
		$timeout // 30,
		0.05);
}

# zk_try_lock($name) in a new connection (its own transaction, released at
# once); returns 't', 'f' or the error text
sub try_lock_elsewhere
{
	my ($node, $name) = @_;
	$name =~ s/'/''/g;
	my ($rc, $out, $err) = psql_noerr($node, 'postgres', "SELECT zk_try_lock('$name')");
	return $rc == 0 ? $out : "error: $err";
}

# A kazoo client driven line by line (ZkLockTest::Kazoo)
sub kazoo_client
{
	my ($zk) = @_;
	return ZkLockTest::Kazoo->new($zk);
}

# A kazoo client running test/queue_kazoo.py (kazoo's LockingQueue) against
# $zk; its line protocol is that of ZkLockTest::Kazoo (send, read_line, cmd,
# quit), so those methods drive it.
sub queue_kazoo
{
	my ($zk) = @_;
	return kazoo_driver($zk, 'queue_kazoo.py');
}

# The command @cmd (a Python with a kazoo client of $zk) started, driven
# like ZkLockTest::Kazoo (it has not answered yet)
sub kazoo_process
{
	my ($zk, @cmd) = @_;
	my $self = bless { stdin => '', stdout => '', stderr => '', zk => $zk },
	  'ZkLockTest::Kazoo';
	$self->{h} = IPC::Run::start(\@cmd,
		'<', \$self->{stdin}, '>', \$self->{stdout}, '2>', \$self->{stderr});
	return $self;
}

# A kazoo driver of test/ ($script: kazoo_driver.py's line protocol) run as
# "$script HOSTS @args" on $zk, driven like ZkLockTest::Kazoo; dies unless
# it says "ready" within 30 s
sub kazoo_driver
{
	my ($zk, $script, @args) = @_;
	my $self = kazoo_process($zk, $PYTHON, "$SRC/test/$script", $zk->{hosts}, @args);
	my $l = $self->read_line(30);
	croak "$script did not start: " . ($l // 'no answer') . " $self->{stderr}"
	  unless defined $l && $l eq 'ready';
	return $self;
}

# A three-server ensemble in $dir whose server 3 reaches the others' quorum
# and election ports (and they its) only through test/blackhole.py, so that
# it can be cut off from its quorum while its clients still reach it;
# syncLimit is $opts{sync_limit} ticks (default 40: 20 s), longer than the
# holds of the tests.  Server 3 is made a follower (restarted until another
# server leads).  Returns a hash: cp (the three client ports), bh (a sub
# sending one command to the proxies: hole, heal, stats, quit; returns its
# answer), zksh (a sub running tools/zk.sh: returns rc, out, err), mode3 (a
# sub: server 3's mode), stop (a sub: stop the ensemble and the proxies).
# The ensemble is killed in END if the test dies.
my @partition_dirs;
my @partition_bhs;	# their blackhole.py handles (killed at END)
sub zk_partition_ensemble
{
	my ($dir, %opts) = @_;
	my $sync = $opts{sync_limit} // 40;
	my @cp;
	while (@cp < 3)
	{
		my $p = PostgreSQL::Test::Cluster::get_free_port();
		next if $p > 63000;
		push @cp, $p;
	}
	my %px = map { $_ => PostgreSQL::Test::Cluster::get_free_port() } qw(1q 1e 2q 2e 3q 3e);
	my $ctl = PostgreSQL::Test::Cluster::get_free_port();
	my $zksh = sub {
		my @args = @_;
		my ($out, $err) = ('', '');
		IPC::Run::run([ 'bash', $ZK_SH, @args ], '>', \$out, '2>', \$err);
		return ($? >> 8, $out, $err);
	};
	# the configurations: made by zk.sh, then server 3's links through the
	# proxies
	my ($rc, $out, $err) = $zksh->('start-ensemble', $dir, @cp);
	croak "no ensemble: $out $err" if $rc;
	push @partition_dirs, $dir;
	$zksh->('stop', $dir);
	for my $i (1 .. 3)
	{
		my $f = "$dir/s$i/zoo.cfg";
		my $cfg = slurp_file($f);
		$cfg =~ s/^syncLimit=.*$/syncLimit=$sync/m;
		for my $j (1 .. 3)
		{
			next if $j == $i;
			next unless $i == 3 || $j == 3;
			my ($q, $e) = ($cp[ $j - 1 ] + 1000, $cp[ $j - 1 ] + 2000);
			$cfg =~ s/^server\.$j=127\.0\.0\.1:$q:$e$/server.$j=127.0.0.1:$px{"${j}q"}:$px{"${j}e"}/m
			  or croak "no server.$j line in $f";
		}
		open(my $fh, '>', $f) or croak "cannot write $f: $!";
		print $fh $cfg;
		close($fh);
	}
	my @pairs = map {
		my $j = $_;
		("$px{\"${j}q\"}:" . ($cp[ $j - 1 ] + 1000), "$px{\"${j}e\"}:" . ($cp[ $j - 1 ] + 2000))
	} 1 .. 3;
	(my $tag = $dir) =~ s{.*/}{};
	my $bh_log = "$PostgreSQL::Test::Utils::log_path/${tag}_blackhole.log";
	my $bh_h = IPC::Run::start([ $PYTHON, "$SRC/test/blackhole.py", $ctl, @pairs ],
		'>', $bh_log, '2>&1');
	push @partition_bhs, $bh_h;
	my $bh = sub {
		my ($cmd) = @_;
		for (1 .. 50)
		{
			my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$ctl", Timeout => 5);
			if ($s)
			{
				print $s "$cmd\n";
				my $l = <$s> // '';
				close $s;
				return $l;
			}
			usleep(100_000);
		}
		croak "blackhole.py does not answer on $ctl";
	};
	like($bh->('stats'), qr/"all": false/, 'the proxies run');
	($rc, $out, $err) = $zksh->('start-ensemble', $dir, @cp);
	ok($rc == 0, 'the ensemble runs through the proxies') or diag "$out $err";
	my $mode3 = sub {
		my ($r, $o) = $zksh->('cmd', $cp[2], 'srvr');
		return $o =~ /^Mode: (\w+)/m ? $1 : 'none';
	};
	# server 3 must be a follower (an isolated leader answers syncs itself
	# until it steps down, and the others cannot write meanwhile): restart
	# it until another server leads
	for (1 .. 5)
	{
		last if $mode3->() eq 'follower';
		$zksh->('stop', "$dir/s3");
		$zksh->('start', "$dir/s3");
		wait_until(sub { $mode3->() ne 'none' }, 30);
	}
	is($mode3->(), 'follower', 'server 3 follows');
	return {
		cp => \@cp,
		bh => $bh,
		zksh => $zksh,
		mode3 => $mode3,
		stop => sub {
			$zksh->('stop', $dir);
			$bh->('quit');
			$bh_h->finish;
		},
	};
}

END
{
	foreach my $d (@partition_dirs)
	{
		IPC::Run::run([ 'bash', $ZK_SH, 'kill', $d ], '>', \my $o, '2>', \my $e) if -d $d;
	}
	# a test that died before its stop leaves no blackhole.py behind (it would
	# hold what the test's caller holds open, a lock file of the suite)
	foreach my $h (@partition_bhs)
	{
		eval { $h->kill_kill if $h->pumpable; };
	}
}

# The skeleton of the late-request tests (341, 344, 346, 347, 349): a
# zk_partition_ensemble in tmp_check/ens_$tag (sync_limit as given) and a
# cluster $name that talks to its server 3 alone (session_timeout and
# connect_timeout as given).  Returns ($pe, $node, $quorum, $kzq): $quorum
# the hosts of servers 1 and 2, $kzq a zkq/zk_count target for them.
sub late_request_setup
{
	my ($tag, $name, %opts) = @_;
	my $pe = zk_partition_ensemble("$PostgreSQL::Test::Utils::tmp_check/ens_$tag",
		defined $opts{sync_limit} ? (sync_limit => $opts{sync_limit}) : ());
	my @cp = @{ $pe->{cp} };
	my $quorum = "127.0.0.1:$cp[0],127.0.0.1:$cp[1]";
	my $node = zk_node($name, "127.0.0.1:$cp[2]",
		session_timeout => $opts{session_timeout},
		connect_timeout => $opts{connect_timeout});
	return ($pe, $node, $quorum, { hosts => $quorum });
}

# Set zklock.hosts of $node to $hosts (ALTER SYSTEM, reload) and wait up to
# $timeout s for a connected session other than $old's (a zk_status hash).
# Returns the new session's zk_status, undef on timeout.
sub hosts_to_quorum
{
	my ($node, $hosts, $old, $timeout) = @_;
	$node->safe_psql('postgres',
		"ALTER SYSTEM SET zklock.hosts = '$hosts'; SELECT pg_reload_conf()");
	my $s;
	my $ok = wait_until(sub {
		$s = zk_status($node);
		$s && $s->{state} eq 'connected' && ($s->{session_id} // "") ne ($old->{session_id} // "") }, $timeout);
	return $ok ? $s : undef;
}

# Note how long a link was $what since $t0 and check it stayed under $max s
# (syncLimit x tickTime and the session timeout)
sub held_within
{
	my ($t0, $max, $what) = @_;
	my $held = time() - $t0;
	note sprintf('the link was %s for %.1f s', $what, $held);
	cmp_ok($held, '<', $max, 'within syncLimit x tickTime and the session timeout');
	return $held;
}

# Run $sql in database $db of $node as $user, verbose, stopping at the first
# error (%opts: timeout).  Returns { sqlstate => the SQLSTATE of the error
# ('00000' for none, "rcN" for a failure with no SQLSTATE), out, err }.
sub sqlstate_psql
{
	my ($node, $db, $sql, $user, %opts) = @_;
	my ($rc, $out, $err) = $node->psql($db, $sql,
		extra_params => [ '-U', $user, '-v', 'VERBOSITY=verbose' ],
		on_error_stop => 1,
		defined $opts{timeout} ? (timeout => $opts{timeout}) : ());
	my $st = $err =~ /(?:ERROR|FATAL):\s+([0-9A-Z]{5}):/ ? $1 : ($rc == 0 ? '00000' : "rc$rc");
	return { sqlstate => $st, out => $out, err => $err };
}

# Write $text into $path and give it $mode (an auth file must be 0600)
sub write_mode_file
{
	my ($path, $text, $mode) = @_;
	open(my $fh, '>', $path) or croak "cannot write $path: $!";
	print $fh $text;
	close $fh;
	chmod($mode, $path) or croak "chmod $path: $!";
	return $path;
}

# A test/auth_kazoo.py client of $zk with digest credentials $cred
# ("user:password"; none: anonymous), driven like ZkLockTest::Kazoo
sub auth_kazoo
{
	my ($zk, $cred) = @_;
	return kazoo_driver($zk, 'auth_kazoo.py', defined $cred ? ($cred) : ());
}

# zklock in database $db of $node as doc/security.md says: in a schema zk
# of the superuser's, on the database's search_path; $user granted lock,
# consume and produce
sub install_for_tenant
{
	my ($node, $db, $user) = @_;
	$node->safe_psql($db, qq{
		CREATE SCHEMA zk;
		CREATE EXTENSION zklock SCHEMA zk;
		GRANT USAGE ON SCHEMA zk TO $user;
		SELECT zk.zk_grant('lock', '$user');
		SELECT zk.zk_grant('consume', '$user');
		SELECT zk.zk_grant('produce', '$user');
		ALTER DATABASE $db SET search_path = "\$user", public, zk;
	});
	return;
}

# Run $sql on $node in a fresh session (60 s): its output, or
# "error SQLSTATE: message"
sub out_or_error
{
	my ($node, $sql) = @_;
	my $r = one_shot($node, $sql, 60);
	return $r->{sqlstate} eq '00000' ? $r->{out} : "error $r->{sqlstate}: $r->{err}";
}

# Create hog(tag text, max int DEFAULT 1000) in database postgres of $node:
# it takes session locks $tag0, $tag1, ... until refused (at most $max),
# each in its own subtransaction, so that the ones taken stay.  Returns
# "count|sqlstate|message|detail|hint" ("count|busy" when a lock was busy,
# "count|none" when never refused).
sub create_hog
{
	my ($node) = @_;
	$node->safe_psql('postgres', q{
CREATE FUNCTION hog(tag text, max int DEFAULT 1000) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
	n int := 0;
	st text; msg text; det text; hnt text;
BEGIN
	WHILE n < max LOOP
		BEGIN
			IF NOT zk_try_session_lock(tag || n) THEN
				RETURN n || '|busy';
			END IF;
		EXCEPTION WHEN OTHERS THEN
			GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT,
				det = PG_EXCEPTION_DETAIL, hnt = PG_EXCEPTION_HINT;
			RETURN n || '|' || st || '|' || msg || '|' || det || '|' || hnt;
		END;
		n := n + 1;
	END LOOP;
	RETURN n || '|none';
END
$$;
});
	return;
}

# $s begins a transaction and sends $sql (a request that waits); passes
# (test $msg) when $path then has $n nodes in $zk within $secs s (default
# 10): the request is in line
sub queue_request
{
	my ($zk, $s, $sql, $path, $n, $msg, $secs) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	$s->query_safe('BEGIN');
	$s->send($sql);
	return ok(scalar(zk_wait_count($zk, $path, $n, $secs // 10)), $msg);
}

# New psql session (ZkLockTest::Session)
sub new_session
{
	my ($node, %opts) = @_;
	return ZkLockTest::Session->new($node, %opts);
}

# Run $sql in a fresh session, return its result hash (see Session::wait)
sub one_shot
{
	my ($node, $sql, $timeout) = @_;
	my $s = ZkLockTest::Session->new($node, name => 'one_shot');
	my $r = $s->query($sql, $timeout // 60);
	$s->quit;
	return $r;
}


#
# ZkLockTest::Kazoo: a Python process with a kazoo client, taking commands
# on stdin, one per line, answering one line each:
#   lock PATH [SECONDS]   kazoo Lock recipe on PATH -> "locked" | "timeout"
#   release PATH          -> "released"
#   wlock PATH [SECONDS]  kazoo WriteLock on PATH -> "locked" | "timeout"
#   wrelease PATH         release the WriteLock -> "released"
#   rlock PATH [SECONDS]  kazoo ReadLock on PATH -> "locked" | "timeout"
#   rrelease PATH         release the ReadLock -> "released"
#   node PATH             the lock's contender node (last acquire) ->
#                         "node NAME" | "none"; kind from the last lock verb
#   quit                  -> "bye"
# All recipes write the identifier "kazoo-tap" into their nodes.
# (errors answer "error <exception>")
#
package ZkLockTest::Kazoo;

use strict;
use warnings FATAL => 'all';
use Carp;
use IPC::Run;
use Test::More;
use Time::HiRes qw(time usleep);

my $KAZOO_DRIVER = <<'PY';
import logging, sys
logging.basicConfig(level=logging.CRITICAL)
from kazoo.client import KazooClient
from kazoo.exceptions import LockTimeout
zk = KazooClient(hosts=sys.argv[1], timeout=10.0)
zk.start(timeout=10)
locks = {}
wlocks = {}
rlocks = {}
last = {}
recipes = {"lock": (locks, zk.Lock), "wlock": (wlocks, zk.WriteLock),
           "rlock": (rlocks, zk.ReadLock)}
releases = {"release": locks, "wrelease": wlocks, "rrelease": rlocks}
print("ready", flush=True)
for line in sys.stdin:
    parts = line.split()
    if not parts:
        continue
    try:
        if parts[0] in recipes:
            table, make = recipes[parts[0]]
            lk = table.get(parts[1])
            # a new Lock object per acquisition, as doc/how-it-works.md
            # advises: a kazoo Lock creates the lock's node only once, and
            # ZooKeeper may have removed the empty container since
            if lk is None or not lk.is_acquired:
                lk = table[parts[1]] = make(parts[1], "kazoo-tap")
            last[parts[1]] = lk
            timeout = float(parts[2]) if len(parts) > 2 else None
            try:
                got = lk.acquire(blocking=True, timeout=timeout)
            except LockTimeout:
                got = False
            print("locked" if got else "timeout", flush=True)
        elif parts[0] in releases:
            releases[parts[0]][parts[1]].release()
            print("released", flush=True)
        elif parts[0] == "node":
            lk = last.get(parts[1])
            node = lk.node if lk is not None else None
            print("node %s" % node if node else "none", flush=True)
        elif parts[0] == "quit":
            break
        else:
            print("error unknown command", flush=True)
    except Exception as e:
        print("error %s %s" % (type(e).__name__, e), flush=True)
zk.stop()
zk.close()
print("bye", flush=True)
PY

sub new
{
	my ($class, $zk) = @_;
	my $self = bless ZkLockTest::kazoo_process($zk, $ZkLockTest::PYTHON, '-c', $KAZOO_DRIVER, $zk->{hosts}),
	  $class;
	my $l = $self->read_line(30);
	croak "kazoo client did not start: " . ($l // 'no answer') . " $self->{stderr}"
	  unless defined $l && $l eq 'ready';
	return $self;
}

# send a command without waiting for its answer
sub send
{
	my ($self, $line) = @_;
	note "kazoo: $line";
	$self->{stdin} .= "$line\n";
	eval { $self->{h}->pump_nb; 1; };
	return;
}

# next answer line, or undef after $timeout seconds
sub read_line
{
	my ($self, $timeout) = @_;
	my $deadline = time() + ($timeout // 30);
	while (1)
	{
		if ($self->{stdout} =~ s/^([^\n]*)\n//)
		{
			note "kazoo answers: $1";
			return $1;
		}
		return undef if time() >= $deadline;
		my $alive = eval { $self->{h}->pump_nb if $self->{h}->pumpable; $self->{h}->pumpable };
		if (!$alive)
		{
			next if $self->{stdout} =~ /\n/;
			diag "kazoo client exited: $self->{stderr}";
			return undef;
		}
		usleep(20_000);
	}
}

# send and wait for the answer
sub cmd
{
	my ($self, $line, $timeout) = @_;
	$self->send($line);
	return $self->read_line($timeout);
}

sub quit
{
	my ($self) = @_;
	return if $self->{closed};
	$self->{closed} = 1;
	$self->{stdin} .= "quit\n";
	eval { $self->{h}->finish(IPC::Run::timeout(30)); 1; }
	  or eval { $self->{h}->kill_kill; 1; };
	return;
}

sub DESTROY
{
	my ($self) = @_;
	local ($@, $!, $?);
	return if $self->{closed} || !$self->{h};
	eval { $self->{h}->kill_kill(grace => 0); 1; };
}

#
# ZkLockTest::Session: a psql process fed statement by statement, whose
# statements can be left running (blocked in zk_lock) while the test does
# other things.  Unlike PostgreSQL::Test::BackgroundPsql it does not stop at
# errors, reports each statement's SQLSTATE, and notices when psql exits
# (e.g. its backend was terminated).
#
package ZkLockTest::Session;

use strict;
use warnings FATAL => 'all';
use Carp;
use IPC::Run;
use Test::More;
use Time::HiRes qw(time usleep);

my $session_counter = 0;

sub new
{
	my ($class, $node, %opts) = @_;
	my $self = bless {
		node => $node,
		name => $opts{name} // ('s' . ++$session_counter),
		stdin => '',
		stdout => '',
		stderr => '',
		n => 0,
		pending => undef,
		exited => 0,
	}, $class;
	my @cmd = (
		$node->installed_command('psql'), '-XAtq',
		'-v', 'VERBOSITY=verbose',
		'-d', $node->connstr($opts{dbname} // 'postgres')
		  . (defined $opts{user} ? " user=$opts{user}" : ''),
		'-f', '-');
	$self->{h} = IPC::Run::start(\@cmd, '<', \$self->{stdin},
		'>', \$self->{stdout}, '2>', \$self->{stderr});
	my $r = $self->query('SELECT pg_backend_pid()', 60);
	croak "session $self->{name}: could not connect: "
	  . ($r->{err} // '')
	  unless $r->{done} && $r->{sqlstate} eq '00000';
	$self->{pid} = $r->{out};
	return $self;
}

sub pid { return $_[0]->{pid}; }
sub name { return $_[0]->{name}; }

# Send $sql (one or more statements) without waiting for the result.
sub send
{
	my ($self, $sql) = @_;
	croak "session $self->{name}: statement still running" if $self->{pending};
	croak "session $self->{name}: psql has exited" if $self->{exited};
	$sql =~ s/\s+$//;
	$sql .= ';' unless $sql =~ /;$/;
	my $n = ++$self->{n};
	my $marker = "ZKT_END_${n}_$self->{name}";
	$self->{stdout} = '';
	$self->{stderr} = '';
	$self->{stdin} .= "$sql\n\\echo $marker :SQLSTATE\n\\warn $marker\n";
	$self->{pending} = { marker => $marker, sql => $sql, t0 => time() };
	note "session $self->{name} (pid "
	  . ($self->{pid} // '?')
	  . ") sends: $sql";
	$self->_pump;
	return;
}

sub _pump
{
	my ($self) = @_;
	return if $self->{exited};
	my $alive = eval {
		$self->{h}->pump_nb if $self->{h}->pumpable;
		$self->{h}->pumpable;
	};
	if (!$alive)
	{
		# psql exited (connection lost, backend terminated...): collect it
		eval { $self->{h}->finish; 1; };
		$self->{exit_code} = eval { $self->{h}->result } // -1;
		$self->{exited} = 1;
	}
	return;
}

# Check whether the pending statement finished; returns the result hash if
# so (and forgets the pending statement), undef if it is still running.
sub poll
{
	my ($self) = @_;
	my $p = $self->{pending};
	croak "session $self->{name}: nothing pending" unless $p;
	$self->_pump;
	my $m = $p->{marker};
	my $done = ($self->{stdout} =~ /^\Q$m\E (\S*)\r?\n/m
		  && $self->{stderr} =~ /^\Q$m\E\r?\n/m);
	return undef unless $done || $self->{exited};

	my $out = $self->{stdout};
	my $err = $self->{stderr};
	my $sqlstate;
	if ($out =~ s/^\Q$m\E (\S*)\r?\n.*//ms)
	{
		$sqlstate = $1;
	}
	$err =~ s/^\Q$m\E\r?\n.*//ms;
	$out =~ s/\r?\n$//;
	if (!defined $sqlstate || $sqlstate eq '')
	{
		# psql died before reporting: take the code from its messages
		$sqlstate = ($err =~ /(?:ERROR|FATAL):\s+([0-9A-Z]{5}):/) ? $1 : 'EXIT';
	}
	my $r = {
		done => 1,
		out => $out,
		err => $err,
		sqlstate => $sqlstate,
		exited => $self->{exited},
		elapsed => time() - $p->{t0},
		sql => $p->{sql},
	};
	note "session $self->{name} finished in "
	  . sprintf('%.2f', $r->{elapsed})
	  . "s: sqlstate $sqlstate"
	  . ($out ne '' ? "\nout: $out" : '')
	  . ($err ne '' ? "\nerr: $err" : '');
	$self->{stdout} = '';
	$self->{stderr} = '';
	$self->{pending} = undef;
	$self->{last} = $r;
	return $r;
}

# True while the pending statement is still running
sub running
{
	my ($self) = @_;
	return 0 unless $self->{pending};
	return !defined($self->poll);
}

# Wait up to $timeout s for the pending statement; returns the result hash,
# or { done => 0, elapsed => ... } if it is still running (then it stays
# pending).
sub wait
{
	my ($self, $timeout) = @_;
	$timeout //= 60;
	return $self->{last} if !$self->{pending} && $self->{last};
	croak "session $self->{name}: nothing pending" unless $self->{pending};
	my $deadline = time() + $timeout;
	while (1)
	{
		my $r = $self->poll;
		return $r if $r;
		if (time() >= $deadline)
		{
			my $p = $self->{pending};
			return {
				done => 0,
				out => $self->{stdout},
				err => $self->{stderr},
				sqlstate => 'TIMEOUT',
				elapsed => time() - $p->{t0},
				sql => $p->{sql},
			};
		}
		usleep(20_000);
	}
}

# wait for a statement left running (up to $secs s, default 15); one that
# does not end by then is ended with the client (diag says which), so that
# the test goes on
sub wait_or_kill
{
	my ($self, $secs) = @_;
	my $r = $self->wait($secs // 15);
	if (!$r->{done})
	{
		diag "session " . $self->name . " still running: $r->{sql}";
		$self->kill_client;
	}
	return $r;
}

# send + wait
sub query
{
	my ($self, $sql, $timeout) = @_;
	$self->send($sql);
	return $self->wait($timeout);
}

# query that must succeed; returns its output, dies with diagnostics if not
sub query_safe
{
	my ($self, $sql, $timeout) = @_;
	my $r = $self->query($sql, $timeout);
	croak "session $self->{name}: '$sql' "
	  . ($r->{done} ? "failed ($r->{sqlstate}): $r->{err}" : 'did not finish')
	  unless $r->{done} && $r->{sqlstate} eq '00000' && $r->{err} !~ /ERROR/;
	return $r->{out};
}

# Ask psql to quit; kill it if it does not
sub quit
{
	my ($self) = @_;
	return if $self->{closed};
	$self->{closed} = 1;
	if (!$self->{exited})
	{
		$self->{stdin} .= "\\q\n";
		my $ok = eval {
			$self->{h}->finish(IPC::Run::timeout(30));
			1;
		};
		if (!$ok)
		{
			eval { $self->{h}->kill_kill; 1; };
		}
		$self->{exited} = 1;
	}
	return;
}

# Kill the psql client process (the backend notices the lost client)
sub kill_client
{
	my ($self) = @_;
	eval { $self->{h}->kill_kill(grace => 0); 1; };
	$self->{exited} = 1;
	$self->{closed} = 1;
	return;
}

# a session not quit kills its psql, as a kazoo client not quit its Python
sub DESTROY { return ZkLockTest::Kazoo::DESTROY(@_); }

1;
