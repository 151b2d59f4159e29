# 343_queue_hosts_change.pl - zklock.hosts changes while dequeues are in
# flight, and the queue goes on.
#
# A new zklock.hosts makes the worker close its session and open another.
# The old handle answers what it still had in flight (listings, claim
# attempts, reads) with ZCLOSING while it closes, after the recipes forgot
# their per-session state.  Those late answers once counted down the
# queue's counters of requests in flight below zero: the queue's round never
# ended again, and every later dequeue of that queue on this server failed
# with "zookeeper did not answer" (the fault run found it: 1,043 items left
# that the drain could not take).  Here a consumer dequeues 300 items at a
# time from a long queue while the hosts setting flips under it; then,
# with the setting left alone, every dequeue must be answered and every item
# taken exactly once.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use ZkLockTest;

my $N = 8000;
my $zk = zk_start();
my $node = zk_node('hostsq', $zk, session_timeout => '10s', connect_timeout => '3s');
my $port = $zk->{port};
my @hosts = ("127.0.0.1:$port", "localhost:$port");

$node->safe_psql('postgres', 'CREATE TABLE got (body text)');
# (at most 1024 items per queue and transaction)
for (my $k = 0; $k < $N; $k += 500)
{
	$node->safe_psql('postgres',
		"SELECT zk_enqueue('hq', 'item-' || g) FROM generate_series($k + 1, $k + 500) g");
}
is(zk_count($zk, '/zklock/queues/hq/entries'), $N, "$N items in ZooKeeper");

# flip zklock.hosts while a dequeue of 300 is in flight (its claims and reads
# go out a window at a time), 12 times
my $c = new_session($node, name => 'consumer');
my $flips = 0;
my $errors = 0;
for my $i (1 .. 12)
{
	$c->send("BEGIN; INSERT INTO got SELECT body FROM zk_dequeue('hq', '5s', 300); COMMIT");
	usleep(5_000 + int(rand(40_000)));
	$node->safe_psql('postgres',
		"ALTER SYSTEM SET zklock.hosts = '$hosts[$i % 2]'; SELECT pg_reload_conf()");
	$flips++;
	my $r = $c->wait(60);
	if (!$r->{done})
	{
		fail("dequeue $i answered") or diag explain $r;
		last;
	}
	if ($r->{sqlstate} ne '00000' || $r->{err} =~ /ERROR/)
	{
		$errors++;
		note "dequeue $i: $r->{sqlstate} $r->{err}";
		$c->query('ROLLBACK', 10);
	}
	my $st = wait_for_state($node, 'connected', 60);
	die "flip $i: the worker did not connect again" unless $st && $st->{state} eq 'connected';
}
note "$flips flips, $errors dequeues failed while the session changed";

# the setting stays: every dequeue is answered, until the queue is empty.
# An old session whose close the server lost (its connection reset with
# answers unread) lives until it expires, zklock.session_timeout (10 s), and
# the new session settles nothing before (src/core/history.c): a dequeue may
# wait that long, so the drain allows it 20 s.  What must never happen (the
# bug this test is for) is a dequeue that is never answered.
$c->query_safe("SET zklock.connect_timeout = '20s'");
my ($answered, $failed, $rounds) = (0, 0, 0);
my $t0 = time();
while (time() - $t0 < 240)
{
	$rounds++;
	my $r = $c->query("BEGIN; INSERT INTO got SELECT body FROM zk_dequeue('hq', '3s', 300); COMMIT", 60);
	if (!$r->{done} || $r->{sqlstate} ne '00000' || $r->{err} =~ /ERROR/)
	{
		$failed++;
		diag "drain dequeue failed: " . ($r->{done} ? $r->{err} : 'no answer');
		$c->query('ROLLBACK', 10) if $r->{done};
		last if $failed > 3;
		next;
	}
	$answered++;
	last if $node->safe_psql('postgres', 'SELECT count(*) FROM got') == $N;
}
is($failed, 0, "after the flips every dequeue was answered ($answered rounds)");
is($node->safe_psql('postgres', 'SELECT count(*) FROM got'), $N, "all $N items were taken");
is($node->safe_psql('postgres', 'SELECT count(DISTINCT body) FROM got'), $N, 'each exactly once');
ok(scalar(zk_wait_count($zk, '/zklock/queues/hq/entries', 0, 30)), 'no item left in ZooKeeper');
ok(scalar(zk_wait_count($zk, '/zklock/queues/hq/taken', 0, 30)), 'no claim left in ZooKeeper');

$c->quit;
$node->stop;
done_testing();
