
# 536_fanout.pl - bounded fan-out (issue 35, item 1): no call makes the
# worker send one read per child of a node all at once, or list a node with
# more children than zklock.max_children, or assemble an answer larger than
# zklock.max_answer_bytes.
#
# ZooKeeper runs with a small heap (96 MB) behind the test's proxy
# (test/zkproxy.py), which counts the requests the worker has in flight
# ("peak_pending"); zklock.max_children is 3000.  Arrivals, lock contenders
# and queue items are created with kazoo (a tenant's arrivals would come
# from many COMMITs; the nodes are the same):
#
# A. 2,500 arrivals of 1 kB under "many": zk_arrivals reads them all with at
#    most ZK_READ_WINDOW (64) reads in flight (on d30b628 all 2,500 went
#    out at once), and with zklock.max_answer_bytes at 2 MB it fails with
#    54000 naming the setting.  Repeated reads leave the worker's memory
#    near where it was.
# B. 4,000 arrivals under "flood": zk_arrivals fails with 54000 naming
#    zklock.max_children, at once and without a single read of a child;
#    zk_await('flood', 5) is granted from the node's child count alone (no
#    listing); a try for more than there are is answered from the count;
#    parties above zklock.max_children are refused (54000).
# C. Lock contenders: 2,500 kazoo-named contenders are read by
#    zk_lock_holders within the window; 4,000 fail with 54000.
# D. A queue of 4,000 items: zk_queue_peek of 5 reads 5 of them,
#    zk_queue_length answers 4000 from the child counts, and zk_queues counts
#    it; neither lists its items.
# E. 3,001 queues: zk_queues fails with 54000 after one listing of the
#    queues, without counting the items of any.
# Throughout: ZooKeeper answers ruok, the worker keeps its session, and
# another session's zk_lock + COMMIT goes through at once.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use ZkLockTest;
use ZkProxy;

my $WINDOW = 64;			# ZK_READ_WINDOW (src/core/recipe.h)
my $SLACK = 16;				# pings, the session's own requests

$ENV{ZK_HEAP} = '96m';
my $zk = zk_start();
my $proxy = proxy_start($zk);
# (the root's kept totals off: their read every second would count as a
# read of the calls measured here)
my $node = zk_node('fanout', $proxy->{hosts},
	conf => "zklock.max_children = 3000\nzklock.max_kept_bytes = 0\nzklock.max_kept_nodes = 0\n");

my $sid = zk_status_value($node, 'session_id');
ok($sid ne '', "the worker has a session ($sid)");

# Create $n children of $path with kazoo (straight to ZooKeeper, not
# through the proxy): names from the Python format $fmt (given i), data of
# $datalen bytes
sub fill
{
	my ($path, $n, $datalen, $fmt) = @_;
	my ($rc, $out, $err) = zkq($zk, 'fill', $path, $n, $fmt, $datalen, 1000);
	chomp $out;
	ok($rc == 0 && $out >= $n, "$n children of $path") or diag "rc $rc: $out $err";
}

sub path_of
{
	my ($kind, $name) = @_;
	return $node->safe_psql('postgres', "SELECT zk_path('$kind', '$name')");
}

# The largest number of requests the worker had in flight while $sql ran
# (and its result), and how many requests of each kind it sent meanwhile
sub measured
{
	my ($sql, %opts) = @_;
	my $s = new_session($node, name => 'measured');
	$s->query_safe($opts{setup}) if $opts{setup};
	proxy_cmd($proxy, 'peak-reset');
	my $before = proxy_stats($proxy)->{requests};
	my $t0 = time();
	my $r = $s->query($sql, 120);
	$r->{secs} = time() - $t0;
	my $st = proxy_stats($proxy);
	$s->quit;
	$r->{peak} = $st->{peak_pending};
	$r->{sent} = {};
	foreach my $op (keys %{ $st->{requests} })
	{
		$r->{sent}{$op} = $st->{requests}{$op} - ($before->{$op} // 0);
	}
	note sprintf("%s: %s in %.2fs, peak %d in flight, getData %d, getChildren %d, exists %d",
		$sql, $r->{sqlstate}, $r->{secs}, $r->{peak}, $r->{sent}{getData} // 0,
		($r->{sent}{getChildren} // 0) + ($r->{sent}{getChildren2} // 0),
		$r->{sent}{exists} // 0);
	return $r;
}

# Another tenant's lock and COMMIT still go through at once, and ZooKeeper
# and the worker's session are fine
sub still_fine
{
	my ($what) = @_;
	my $t0 = time();
	my $r = one_shot($node, "BEGIN; SELECT zk_lock('other_tenant') > 0; COMMIT;");
	my $secs = time() - $t0;
	ok($r->{sqlstate} eq '00000' && $r->{out} =~ /t/, "$what: another session's lock + COMMIT works")
	  or diag explain $r;
	ok($secs < 5, sprintf("$what: ... at once (%.2fs)", $secs));
	like(zk_fourlw($zk, 'ruok'), qr/imok/, "$what: ZooKeeper answers ruok");
	is(zk_status_value($node, 'session_id'), $sid, "$what: the worker kept its session");
}

# kB of the worker's private resident memory
sub worker_anon_kb
{
	my $pid = worker_pid($node);
	open(my $fh, '<', "/proc/$pid/status") or return -1;
	while (my $l = <$fh>)
	{
		return $1 if $l =~ /^RssAnon:\s+(\d+) kB/;
	}
	return -1;
}

#
# A. Arrivals within the bound: read a window at a time
#
fill(path_of('arrivals', 'many'), 2500, 1000, 'p-%05d');
{
	my $anon0 = worker_anon_kb();
	my $r = measured("SELECT count(*) FROM zk_arrivals('many')");
	is($r->{out}, '2500', 'A: zk_arrivals reads all 2,500 arrivals');
	ok($r->{peak} <= $WINDOW + $SLACK, "A: at most $WINDOW reads in flight (peak $r->{peak})");
	ok(($r->{sent}{getData} // 0) >= 2500, "A: one read per arrival ($r->{sent}{getData})");
	foreach my $i (1 .. 4)
	{
		one_shot($node, "SELECT count(*) FROM zk_arrivals('many')");
	}
	my $anon1 = worker_anon_kb();
	note "A: worker RssAnon $anon0 kB before, $anon1 kB after five reads";
	ok($anon1 - $anon0 < 16384, sprintf('A: the worker keeps no more than 16 MB of it (%+d kB)', $anon1 - $anon0));

	$r = measured("SELECT count(*) FROM zk_arrivals('many')",
		setup => "SET zklock.max_answer_bytes = '2MB'");
	is($r->{sqlstate}, '54000', 'A: with zklock.max_answer_bytes at 2 MB: 54000');
	like($r->{err}, qr/zklock\.max_answer_bytes/, 'A: ... naming the setting');
	ok($r->{peak} <= $WINDOW + $SLACK, "A: ... still within the window (peak $r->{peak})");
	still_fine('A');
}

#
# B. Arrivals beyond zklock.max_children
#
fill(path_of('arrivals', 'flood'), 4000, 200, 'p-%05d');
{
	my $r = measured("SELECT count(*) FROM zk_arrivals('flood')");
	is($r->{sqlstate}, '54000', 'B: zk_arrivals of 4,000 arrivals: 54000');
	like($r->{err}, qr/zklock\.max_children/, 'B: ... naming zklock.max_children');
	like($r->{err}, qr/HINT:.*zklock\.max_children/, 'B: ... and a hint that says what to do');
	is($r->{sent}{getData} // 0, 0, 'B: ... without reading a single arrival');
	is(($r->{sent}{getChildren} // 0) + ($r->{sent}{getChildren2} // 0), 0,
		'B: ... nor listing them');
	ok($r->{secs} < 5, sprintf('B: ... at once (%.2fs)', $r->{secs}));

	$r = measured("SELECT zk_await('flood', 5, interval '0')");
	is($r->{out}, 't', 'B: zk_await(flood, 5) is granted');
	is(($r->{sent}{getChildren} // 0) + ($r->{sent}{getChildren2} // 0), 0,
		'B: ... from the child count, without listing 4,000 arrivals');

	$r = measured("SELECT zk_await('many', 2999, interval '0')");
	is($r->{out}, 'f', 'B: a try for more arrivals than there are says no');

	$r = measured("SELECT zk_await('flood', 5000, interval '0')");
	is($r->{sqlstate}, '54000', 'B: parties above zklock.max_children: 54000');

	$r = measured("SELECT zk_arrivals_reset('many')");
	is($r->{out}, '2500', 'B: zk_arrivals_reset deletes the 2,500 arrivals');
	ok($r->{peak} <= $WINDOW + $SLACK, "B: ... at most $WINDOW deletes in flight (peak $r->{peak})");
	is(zk_count($zk, path_of('arrivals', 'many')), 0, 'B: ... none left in ZooKeeper');
	still_fine('B');
}

#
# C. Lock contenders
#
fill(path_of('lock', 'crowd'), 2500, 0, '0123456789abcdef0123456789abcdef__lock__%010d');
fill(path_of('lock', 'mob'), 4000, 0, '0123456789abcdef0123456789abcdef__lock__%010d');
{
	my $r = measured("SELECT count(*) FROM zk_lock_holders('crowd')");
	is($r->{out}, '2500', 'C: zk_lock_holders reads 2,500 contenders');
	ok($r->{peak} <= $WINDOW + $SLACK, "C: at most $WINDOW reads in flight (peak $r->{peak})");

	$r = measured("SELECT count(*) FROM zk_lock_holders('mob')");
	is($r->{sqlstate}, '54000', 'C: zk_lock_holders of 4,000 contenders: 54000');
	like($r->{err}, qr/zklock\.max_children/, 'C: ... naming zklock.max_children');
	is($r->{sent}{getData} // 0, 0, 'C: ... without reading a contender');
	still_fine('C');
}

#
# D. A queue of 4,000 items
#
fill(path_of('queue', 'big') . '/entries', 4000, 10, 'entry-000-%010d');
{
	my $r = measured("SELECT count(*) FROM zk_queue_peek('big', 5)");
	is($r->{out}, '5', 'D: zk_queue_peek of 5 of 4,000 items');
	ok(($r->{sent}{getData} // 0) <= 5, "D: ... reads 5 of them ($r->{sent}{getData})");

	$r = measured("SELECT zk_queue_length('big')");
	is($r->{out}, '4000', 'D: zk_queue_length answers 4000 from the child counts');
	is(($r->{sent}{getChildren} // 0) + ($r->{sent}{getChildren2} // 0), 0,
		'D: ... without listing the items');

	$r = measured("SELECT items FROM zk_queues WHERE queue = 'big'");
	is($r->{out}, '4000', 'D: zk_queues counts it');
	is(($r->{sent}{getChildren} // 0) + ($r->{sent}{getChildren2} // 0), 1,
		'D: ... with one listing (of the queues), not of its items');
	still_fine('D');
}

#
# E. More queues than zklock.max_children: zk_queues refuses to count them
#
{
	my $queues = path_of('queue', 'big');
	$queues =~ s{/[^/]+$}{};
	fill($queues, 3000, 0, 'flooded-%05d');
	my $r = measured("SELECT count(*) FROM zk_queues");
	is($r->{sqlstate}, '54000', 'E: zk_queues of 3,001 queues: 54000');
	like($r->{err}, qr/zklock\.max_children/, 'E: ... naming zklock.max_children');
	is(($r->{sent}{getChildren} // 0) + ($r->{sent}{getChildren2} // 0), 1,
		'E: ... after one listing of the queues (every namespace\'s: 538_shared_listings.pl)');
	is($r->{sent}{exists} // 0, 1, 'E: ... counting the items of none of them');
	still_fine('E');
}

done_testing();
