# 220_lock_sequence_wrap.pl - a lock whose parent's sequence counter wraps.
#
# ZooKeeper names a sequential child after its parent's cversion, a signed
# 32-bit number.  A lock that is never empty reaches 2^31 children; ZooKeeper
# 3.8 then names new contenders ...2147483647 again and again (the counter
# stops growing), or ...-2147483648, -2147483647, ... while creates are
# pipelined.  2^31 creates cannot run in a test, so ZooKeeper starts here
# from a snapshot written by test/java/MakeWrapSnapshot.java (ZooKeeper's
# own DataTree and FileTxnSnapLog) in which /zklock/locks/wrap holds a
# persistent non-contender child "keeper" and its counter is 2^31 - 5.
#
# Proves, across the wrap: at most one exclusive holder at any moment (one
# holder at a time in a hand-down queue; critical sections recorded with
# clock_timestamp() never overlap, in a burst of pipelined requests and in
# a loop of four sessions), arrival order kept (a queue formed one by one
# is served in that order, a kazoo Lock among them; a burst is served in
# creation order, i.e. by czxid, which is the token), and nothing is left.
# The node names are read from ZooKeeper and shown.

use strict;
use warnings FATAL => 'all';

use File::Path qw(rmtree);
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use ZkLockTest;

my $LOCK = '/zklock/locks/wrap';
my $START = 2**31 - 5;    # the counter the snapshot leaves on $LOCK

#
# Compile the snapshot writer against Debian's ZooKeeper jars (the classpath
# tools/zk.sh runs the server with)
#
my $CP = $ZkLockTest::ZK_CLASSPATH;
my $JAVA_SRC = "$ZkLockTest::SRC/test/java/MakeWrapSnapshot.java";
my $classes = "$PostgreSQL::Test::Utils::tmp_check/wrap_classes";
rmtree($classes);
mkdir $classes or die "cannot create $classes: $!";

sub run_cmd
{
	my ($cmd) = @_;
	my ($out, $err) = ('', '');
	my $ok = eval {
		IPC::Run::run($cmd, '<', \undef, '>', \$out, '2>', \$err,
			IPC::Run::timeout(180));
		1;
	};
	my $rc = $ok ? ($? >> 8) : -1;
	$err .= "\n[harness: $@]" unless $ok;
	return ($rc, $out, $err);
}

my ($rc, $out, $err) = run_cmd([ 'javac', '-nowarn', '-d', $classes, '-cp', $CP, $JAVA_SRC ]);
is($rc, 0, 'MakeWrapSnapshot.java compiles with javac against the ZooKeeper jars')
  or die "javac failed (this test needs a JDK, e.g. openjdk-17-jdk-headless): $out $err";

#
# ZooKeeper on the prepared data directory: start it once (tools/zk.sh
# writes DIR/zoo.cfg with dataDir=DIR/data), stop it, put the snapshot in
# DIR/data/version-2 in place of what it wrote, start it again.
#
my $zk = zk_start(name => 'wrap');
zk_stop($zk) or die 'could not stop ZooKeeper to replace its data';
rmtree("$zk->{dir}/data/version-2");
($rc, $out, $err) = run_cmd([ 'java', '-cp', "$classes:$CP",
	'MakeWrapSnapshot', "$zk->{dir}/data", $START, $LOCK ]);
is($rc, 0, 'MakeWrapSnapshot wrote a snapshot') or diag "$out\n$err";
chomp $out;
like($out, qr{/data/version-2/snapshot\.[0-9a-f]+$}, "snapshot file: $out");
zk_restart($zk);

# stat of a node through kazoo: "cversion numChildren czxid"
sub zk_stat
{
	my ($path) = @_;
	my $py = <<'PY';
import logging, sys
logging.basicConfig(level=logging.CRITICAL)
from kazoo.client import KazooClient
zk = KazooClient(hosts=sys.argv[1], timeout=10.0)
zk.start(timeout=10)
st = zk.exists(sys.argv[2])
print("none" if st is None else "%d %d %d" % (st.cversion, st.numChildren, st.czxid))
zk.stop()
zk.close()
PY
	my ($rc, $out, $err) = run_cmd([ $ZkLockTest::PYTHON, '-c', $py, $zk->{hosts}, $path ]);
	chomp $out;
	return $rc == 0 ? $out : "error: $err";
}

# Clients see cversion as 2 * (creates) - (children), in 32 bits; with
# creates = 2^31 - 5 and one child that is -11.  The first contender's
# suffix below shows the counter itself.
is(zk_stat($LOCK), '-11 1 3',
	"ZooKeeper serves $LOCK from the snapshot: cversion -11 (2^31 - 5 creates, 1 child), czxid 3");
is(join(',', zk_children($zk, $LOCK)), 'keeper', 'its only child is the non-contender "keeper"');

my $node = zk_node('wrap', $zk, session_timeout => '20s', connect_timeout => '5s');
$node->safe_psql('postgres', q{
	CREATE TABLE held (id serial, phase text, who text, node text, token bigint,
	                   t_in timestamptz, t_out timestamptz);
	CREATE TABLE ctl (stop boolean);
	INSERT INTO ctl VALUES (false);
});

# suffix of a contender name (may be negative), undef for other children
sub suffix
{
	my ($name) = @_;
	return $name =~ /__r?lock__(-?\d+)$/ ? $1 + 0 : undef;
}

my $kz = kazoo_client($zk);

#
# 1. A queue formed one by one across the wrap, a kazoo Lock in it: served
#    in arrival order, one holder at a time.
#
my %s;
$s{$_} = new_session($node, name => $_) for qw(h w1 w2 w3 w4 w5);
my @queue = qw(w1 K w2 w3 w4 w5);
my %node_of;
my @before = zk_children($zk, $LOCK);

$s{h}->query_safe('BEGIN');
my $htok = $s{h}->query_safe("SELECT zk_lock('wrap')");
my %seen = map { $_ => 1 } @before;
my ($hnode) = grep { !$seen{$_} } zk_children($zk, $LOCK);
$node_of{h} = $hnode // '?';
$seen{ $node_of{h} } = 1;
my $count = 2;
foreach my $who (@queue)
{
	if ($who eq 'K')
	{
		$kz->send("lock $LOCK 60");
	}
	else
	{
		$s{$who}->query_safe('BEGIN');
		$s{$who}->send("SELECT zk_lock('wrap', '60s')");
	}
	$count++;
	ok(scalar(zk_wait_count($zk, $LOCK, $count, 15)), "$who queued ($count children)");
	my ($new) = grep { !$seen{$_} } zk_children($zk, $LOCK);
	$node_of{$who} = $new // '?';
	$seen{ $node_of{$who} } = 1;
}
my @suffixes = map { suffix($node_of{$_}) // 'none' } ('h', @queue);
note 'node names in arrival order: '
  . join(', ', map { "$_=$node_of{$_}" } ('h', @queue));
is($suffixes[0], $START, "the holder's node is ...$START: the counter is where the snapshot left it");
is(join(',', @suffixes),
	join(',', $START, $START + 1, $START + 2, $START + 3, 2147483647, 2147483647, 2147483647),
	'suffixes in arrival order: ...43, 44, 45, 46, then 2147483647 three times (the counter stopped)');

# hand the lock down the queue: the first waiter gets it, every later one
# still waits
my $kz_holds = 0;

# end every wait of phase 1 and let go of everything (after a failure)
sub wind_down
{
	foreach my $o (@_)
	{
		if ($o eq 'K')
		{
			my $l = $kz_holds ? 'locked' : $kz->read_line(20);
			$kz->cmd("release $LOCK", 20) if defined $l && $l eq 'locked';
			$kz_holds = 0;
			next;
		}
		if ($s{$o}->running)
		{
			$node->safe_psql('postgres', "SELECT pg_cancel_backend($s{$o}{pid})");
			$s{$o}->wait(20);
		}
		$s{$o}->query('ROLLBACK');
	}
}

$s{h}->query_safe('COMMIT');
my @left = @queue;
my $order_ok = 1;
while (my $who = shift @left)
{
	my $granted;
	if ($who eq 'K')
	{
		my $l = $kz->read_line(20);
		$granted = defined $l && $l eq 'locked';
		$kz_holds = $granted;
	}
	else
	{
		my $r = $s{$who}->wait(20);
		$granted = $r->{done} && $r->{sqlstate} eq '00000';
		diag "$who: $r->{sqlstate} $r->{err}" unless $granted;
	}
	ok($granted, "$who ($node_of{$who}) is granted next");
	# give a wrong grant time to show
	usleep(500_000);
	my @early = grep { $_ ne 'K' && !$s{$_}->running } @left;
	if (grep { $_ eq 'K' } @left)
	{
		my $l = $kz->read_line(0.2);
		if (defined $l)
		{
			push @early, "K($l)";
			$kz_holds = ($l eq 'locked');
		}
	}
	is(join(',', @early), '', "while $who holds, nobody behind it is granted (" . join(',', @left) . ' still wait)');
	is($node->safe_psql('postgres',
			"SELECT count(*) FROM zk_locks WHERE name = 'wrap' AND state = 'held'"),
		$who eq 'K' ? 0 : 1,
		"zk_locks shows " . ($who eq 'K' ? 'no SQL holder while kazoo holds' : "one holder ($who)"));
	if (!$granted || @early)
	{
		# the queue is broken: wind everything down
		$order_ok = 0;
		wind_down($who, @left);
		last;
	}
	if ($who eq 'K')
	{
		is($kz->cmd("release $LOCK", 20), 'released', 'kazoo releases');
		$kz_holds = 0;
	}
	else
	{
		$s{$who}->query_safe('COMMIT');
	}
}
ok($order_ok, 'phase 1: served in arrival order h, ' . join(', ', @queue) . ', one at a time');
ok(scalar(zk_wait_count($zk, $LOCK, 1, 10)), 'phase 1: only the keeper is left');

#
# 2. A burst: eight requests released together behind a holder, so the
#    worker pipelines their creates and ZooKeeper hands out negative
#    suffixes.  Nobody may be granted while the holder holds; then one at a
#    time, in creation (czxid) order.
#
my $ctl = new_session($node, name => 'ctl');
my @burst = map { new_session($node, name => "b$_") } 1 .. 8;

# PL/pgSQL (tok bigint, t0 timestamptz, n text declared): take 'wrap' (60 s),
# hold it $secs s, and record the hold in table held as phase $phase
sub held_section
{
	my ($phase, $secs) = @_;
	return qq{
	tok := zk_lock('wrap', '60s');
	t0 := clock_timestamp();
	SELECT node INTO n FROM zk_locks
	 WHERE pid = pg_backend_pid() AND name = 'wrap' AND state = 'held';
	PERFORM pg_sleep($secs);
	INSERT INTO held (phase, who, node, token, t_in, t_out)
	VALUES ('$phase', current_setting('application_name'), n, tok, t0, clock_timestamp());};
}

my $DO_BURST = q{
DO $$
DECLARE tok bigint; t0 timestamptz; n text;
BEGIN
	PERFORM pg_advisory_xact_lock_shared(777);} . held_section('burst', 0.05) . q{
END $$};

my $negatives = 0;    # negative suffixes seen, in ZooKeeper or in zk_locks
my @phases;
for my $attempt (1 .. 3)
{
	my $phase = "burst$attempt";
	push @phases, $phase;
	(my $do = $DO_BURST) =~ s/'burst'/'$phase'/;
	$s{h}->query_safe('BEGIN');
	$s{h}->query_safe("SELECT zk_lock('wrap')");
	$ctl->query_safe('SELECT pg_advisory_lock(777)');
	my $i = 0;
	foreach my $b (@burst)
	{
		$i++;
		$b->query_safe("SET application_name = 'b$i'");
		$b->send($do);
	}
	ok( wait_until(
			sub {
				$node->safe_psql('postgres',
					"SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'advisory'") eq '8';
			},
			20),
		"$phase: eight sessions lined up on an advisory lock");
	$ctl->query_safe('SELECT pg_advisory_unlock(777)');
	ok(scalar(zk_wait_count($zk, $LOCK, 10, 5)), "$phase: eight contenders queue behind the holder");
	my @names = grep { defined suffix($_) } zk_children($zk, $LOCK);
	my $neg = grep { suffix($_) < 0 } @names;
	note "$phase: contender names in ZooKeeper: " . join(' ', sort { suffix($a) <=> suffix($b) } @names);
	sleep 1;
	my @done = grep { !$_->running } @burst;
	is(scalar(@done), 0, "$phase: nobody is granted while the holder holds")
	  or diag 'granted or failed at once: '
	  . join(', ', map { "$_->{name}: $_->{last}{sqlstate} $_->{last}{err}" } @done);
	is($node->safe_psql('postgres',
			"SELECT count(*) FROM zk_locks WHERE name = 'wrap' AND state = 'held'"),
		'1', "$phase: zk_locks shows one holder");
	$s{h}->query_safe('COMMIT');
	foreach my $b (@burst)
	{
		my $r = $b->wait(60);
		is($r->{sqlstate}, '00000', "$phase: $b->{name} got the lock in the end")
		  or diag "$r->{sqlstate} $r->{err}";
	}
	ok(scalar(zk_wait_count($zk, $LOCK, 1, 10)), "$phase: only the keeper is left");

	my $bad = $node->safe_psql('postgres', qq{
		SELECT count(*) FROM held a JOIN held b
		  ON a.id < b.id AND a.phase = b.phase AND a.t_in < b.t_out AND b.t_in < a.t_out
		 WHERE a.phase = '$phase'});
	is($bad, '0', "$phase: no two critical sections overlap");
	my $by_time = $node->safe_psql('postgres',
		"SELECT string_agg(who, ',' ORDER BY t_in) FROM held WHERE phase = '$phase'");
	my $by_czxid = $node->safe_psql('postgres',
		"SELECT string_agg(who, ',' ORDER BY token) FROM held WHERE phase = '$phase'");
	is($by_time, $by_czxid, "$phase: granted in creation order (token = czxid)");
	note "$phase: grants in time order: " . $node->safe_psql('postgres',
		"SELECT string_agg(who || '=' || coalesce(regexp_replace(node, '.*__lock__', ''), '?'), ' ' ORDER BY t_in) FROM held WHERE phase = '$phase'");
	$neg += $node->safe_psql('postgres',
		"SELECT count(*) FROM held WHERE phase = '$phase' AND node LIKE '%\\_\\_lock\\_\\_-%'");
	$negatives += $neg;
	last if $neg > 0;
	note "$phase: no negative suffix this time, again";
}

#
# 3. Four sessions looping lock / critical section / commit on the wrapped
#    parent (every suffix now 2147483647 or negative).
#
my $ITER = 15;
my $DO_LOOP = qq{
DO \$\$
DECLARE tok bigint; t0 timestamptz; n text;
BEGIN
	FOR i IN 1 .. $ITER LOOP} . held_section('loop', 0.01) . qq{
		COMMIT;
	END LOOP;
END \$\$};
my @loopers = @burst[ 0 .. 3 ];
my $i = 0;
foreach my $l (@loopers)
{
	$i++;
	$l->query_safe("SET application_name = 'l$i'");
	$l->send($DO_LOOP);
}
foreach my $l (@loopers)
{
	my $r = $l->wait(100);
	is($r->{sqlstate}, '00000', "loop: $l->{name} ran $ITER lock cycles") or diag "$r->{sqlstate} $r->{err}";
}
is($node->safe_psql('postgres', "SELECT count(*) FROM held WHERE phase = 'loop'"),
	4 * $ITER, 'loop: every cycle recorded');
my $bad = $node->safe_psql('postgres', q{
	SELECT count(*) FROM held a JOIN held b
	  ON a.id < b.id AND a.phase = b.phase AND a.t_in < b.t_out AND b.t_in < a.t_out
	 WHERE a.phase = 'loop'});
is($bad, '0', 'loop: no two critical sections overlap');
is($node->safe_psql('postgres', q{
	SELECT count(*) FROM (SELECT token, lag(token) OVER (ORDER BY t_in) AS prev
	                        FROM held WHERE phase = 'loop') t WHERE token <= prev}),
	'0', 'loop: tokens grow with every grant');
note 'loop: suffixes seen: ' . $node->safe_psql('postgres', q{
	SELECT string_agg(s || ' x' || n, ', ' ORDER BY s) FROM (
	  SELECT regexp_replace(node, '.*__lock__', '') AS s, count(*) AS n
	    FROM held WHERE phase = 'loop' GROUP BY 1) t});
ok($node->safe_psql('postgres',
		"SELECT count(*) FROM held WHERE phase = 'loop' AND node LIKE '%\\_\\_lock\\_\\_2147483647'") > 1,
	'loop: the suffix 2147483647 repeated');
$negatives += $node->safe_psql('postgres',
	"SELECT count(*) FROM held WHERE phase = 'loop' AND node LIKE '%\\_\\_lock\\_\\_-%'");
ok($negatives > 0,
	"pipelined creates got negative suffixes ($negatives seen): the case -2147483648 was exercised");

#
# Nothing left behind
#
ok(scalar(zk_wait_count($zk, $LOCK, 1, 10)), 'only the keeper is left under the lock');
ok(wait_until(sub { zk_status_value($node, 'entries_used') eq '0' }, 10), 'entries_used back to 0');

$kz->quit;
$_->quit for (values %s, $ctl, @burst);
$node->stop;
done_testing();
