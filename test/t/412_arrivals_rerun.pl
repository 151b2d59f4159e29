
# 412_arrivals_rerun.pl - rerunning an arrival step costs ZooKeeper requests
# in proportion to its participants, not to their square.
#
# A transaction arrives 1,500 participants at one arrivals name.  The
# publishing multi of its rerun finds every create already done; ZooKeeper
# stops a multi at its first failing op, so skipping one op per failed
# multi costs about n^2/2 ops and 3 parent creates per op and resend
# (about 3.4 million requests for 1,500).  The rerun must end (its
# transaction node gone) within a generous bound and cost, counted by
# ZooKeeper itself (mntr's zk_packets_received), less than 10 requests per
# participant; the same for a rerun that arrives 750 old and 750 new
# participants (the new ones arrive, the old ones keep their nodes).

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use ZkLockTest;

my $N = 1500;
my $zk = zk_start();
my $node = zk_node('rerun', $zk,
	session_timeout => '10s',
	connect_timeout => '3s',
	# (1500 arrivals in one transaction need about 260 kB: more than the
	# default zklock.max_transaction_size, 256 kB)
	conf => "zklock.commit_timeout = '5s'\nzklock.max_transaction_size = '976kB'\n");

my $ARR = '/zklock/arrivals';
my $TXNS = '/zklock/txns';

sub sql { return $node->safe_psql('postgres', $_[0], timeout => 300); }

# requests ZooKeeper has received from all its clients so far
sub packets
{
	my $m = zk_fourlw($zk, 'mntr');
	my ($n) = $m =~ /^zk_packets_received\s+(\d+)/m;
	die "mntr has no zk_packets_received:\n$m" unless defined $n;
	return $n;
}

# arrive participants p<from>..p<to> at $name in one transaction; returns
# the seconds until its transaction node is gone and the requests
# ZooKeeper received meanwhile
sub arrive_run
{
	my ($name, $from, $to, $what) = @_;
	my $p0 = packets();
	my $t0 = time();
	my ($rc, $out, $err) = $node->psql('postgres',
		"BEGIN; SELECT count(zk_arrive('$name', 'p' || i)) FROM generate_series($from, $to) i; COMMIT;",
		timeout => 300);
	is($rc, 0, "$what: the transaction commits") or diag $err;
	my $gone = zk_wait_count($zk, $TXNS, 0, 120);
	my $secs = time() - $t0;
	my $req = packets() - $p0;
	ok($gone, sprintf('%s: published, no transaction node left (%.1f s)', $what, $secs));
	note sprintf('%s: %.1f s, %d ZooKeeper requests for %d participants', $what, $secs, $req,
		$to - $from + 1);
	return ($secs, $req);
}

# first run: every create is new
my ($s1, $r1) = arrive_run('rerun', 1, $N, 'first run');
is(zk_count($zk, "$ARR/rerun"), $N, "first run: $N arrivals in ZooKeeper");
my %czxid_before = map { $_ => zk_czxid($zk, "$ARR/rerun/$_") } qw(p1 p750 p1500);

# rerun: every create is done already
my ($s2, $r2) = arrive_run('rerun', 1, $N, 'rerun');
ok($s2 < 60, sprintf('rerun: done within 60 s (%.1f s)', $s2));
ok($r2 < 10 * $N, "rerun: $r2 ZooKeeper requests, fewer than 10 per participant");
is(zk_count($zk, "$ARR/rerun"), $N, "rerun: still $N arrivals");
is_deeply({ map { $_ => zk_czxid($zk, "$ARR/rerun/$_") } qw(p1 p750 p1500) }, \%czxid_before,
	'rerun: the first nodes are kept (same czxid)');

# half old, half new: the new ones arrive
my ($s3, $r3) = arrive_run('rerun', $N / 2 + 1, $N + $N / 2, 'half rerun');
ok($s3 < 60, sprintf('half rerun: done within 60 s (%.1f s)', $s3));
ok($r3 < 10 * $N, "half rerun: $r3 ZooKeeper requests, fewer than 10 per participant");
is(zk_count($zk, "$ARR/rerun"), $N + $N / 2, 'half rerun: the new participants arrived');
is(sql("SELECT zk_await('rerun', " . ($N + $N / 2) . ", '5s')"), 't', 'zk_await sees them all');

# the worker still answers
is(sql('SELECT state FROM zk_status()'), 'connected', 'the worker is connected');
is(zk_count($zk, $TXNS), 0, 'no transaction node left');

$node->stop;
done_testing();
