
# 355_queue_delayed.pl - delayed items: zk_enqueue(..., delay | not_before).
#
# A delayed item is published at COMMIT under <queue>/delayed (counted
# through ZooKeeper), handed out by nobody -- zklock on either cluster,
# kazoo -- before it is due, then moved into the queue once (the moved
# item's enqueued_at, and the time a waiting consumer gets it, are never
# before the due time) and served in priority order with the others.  A
# waiting consumer gets it without asking again.  With two clusters
# waiting and one of them stopped before the items are due, the other
# moves and serves every item exactly once.  ROLLBACK publishes nothing; a
# due time in the past is an ordinary item; bad calls change nothing; a
# queue with delayed items is not dropped.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use ZkLockTest;

my $zk = zk_start();
my %opts = (session_timeout => '10s', connect_timeout => '3s');
my $A = zk_node('delay_a', $zk, %opts);
my $B = zk_node('delay_b', $zk, %opts);
my $Q = '/zklock/queues/dq';

sub state_of
{
	my ($node, $sql) = @_;
	my ($rc, $out, $err) = $node->psql('postgres', $sql,
		extra_params => [ '-v', 'VERBOSITY=verbose' ], on_error_stop => 1);
	return $err =~ /ERROR:\s+([0-9A-Z]{5}):/ ? $1 : ($rc == 0 ? '00000' : "rc$rc");
}

# bad calls
is(state_of($A, "SELECT zk_enqueue('dq', 'x', delay => NULL::interval)"), '22004', 'delay NULL: 22004');
is(state_of($A, "SELECT zk_enqueue('dq', 'x', not_before => NULL::timestamptz)"), '22004',
	'not_before NULL: 22004');
is(state_of($A, "SELECT zk_enqueue('dq', 'x', delay => '400 days')"), '22023', 'a delay over 366 days: 22023');
is(state_of($A, "SELECT zk_enqueue('dq', 'x', not_before => 'infinity')"), '22023', 'not_before infinity: 22023');
is(state_of($A, "SELECT zk_enqueue('dq', 'x', delay => '1s', priority => 1000)"), '22003',
	'a priority out of range: 22003');

# ROLLBACK publishes nothing
$A->safe_psql('postgres', "BEGIN; SELECT zk_enqueue('dq', 'rolled back', delay => '1s'); ROLLBACK;");
ok(!zk_exists($zk, "$Q/delayed") || zk_count($zk, "$Q/delayed") == 0, 'a rolled-back delayed item is nowhere');

# one delayed item: not early, then once
my $due = $A->safe_psql('postgres', q{
	BEGIN;
	SELECT zk_enqueue('dq', 'later', delay => '4 seconds');
	SELECT extract(epoch FROM clock_timestamp() + '4 seconds');
	COMMIT;});
ok(scalar(zk_wait_count($zk, "$Q/delayed", 1, 30)), 'published under delayed at COMMIT');
is(zk_count($zk, "$Q/entries"), 0, 'not in entries');
is($B->safe_psql('postgres', "SELECT count(*) FROM zk_try_dequeue('dq')"), '0', 'B cannot take it before it is due');
is($A->safe_psql('postgres', "SELECT zk_queue_length('dq')"), '0', 'its length does not count it yet');
my $kz = queue_kazoo($zk);
is($kz->cmd("get $Q 1"), 'none', 'kazoo cannot take it before it is due');
my $got = $B->safe_psql('postgres', q{
	SELECT body || '|' || (extract(epoch FROM enqueued_at) >= } . ($due - 0.001) . q{) || '|' ||
	       (extract(epoch FROM clock_timestamp()) >= } . ($due - 0.001) . q{)
	  FROM zk_dequeue('dq', '30s')});
is($got, 'later|true|true', 'a waiting consumer gets it, published and served no earlier than due');
ok(scalar(zk_wait_count($zk, "$Q/entries", 0, 30)), 'consumed');
is(zk_count($zk, "$Q/delayed"), 0, 'and nothing is left under delayed');

# not_before in the past: an ordinary item; priority order once due
$A->safe_psql('postgres', q{
	BEGIN;
	SELECT zk_enqueue('dq', 'late-low', delay => '2 seconds', priority => 500);
	SELECT zk_enqueue('dq', 'late-high', not_before => clock_timestamp() + interval '2 seconds', priority => 5);
	SELECT zk_enqueue('dq', 'now', not_before => now() - interval '1 hour');
	COMMIT;});
ok(scalar(zk_wait_count($zk, "$Q/delayed", 2, 30)), 'two delayed items');
is($A->safe_psql('postgres', "SELECT body FROM zk_dequeue('dq', '5s')"), 'now',
	'an item due in the past is served at once');
sleep 3;
is($A->safe_psql('postgres', "SELECT string_agg(body, ',') FROM zk_dequeue('dq', '20s', 2)"),
	'late-high,late-low', 'once due, in priority order');
ok(scalar(zk_wait_count($zk, "$Q/entries", 0, 30)) && zk_count($zk, "$Q/delayed") == 0, 'all consumed');

# a try on a server that never served the queue sees an item already due
$A->safe_psql('postgres', "SELECT zk_enqueue('dq3', 'due-soon', delay => '1 second')");
ok(scalar(zk_wait_count($zk, '/zklock/queues/dq3/delayed', 1, 30)), 'dq3: one delayed item');
sleep 2;
is($B->safe_psql('postgres', "SELECT string_agg(body, ',') FROM zk_try_dequeue('dq3')"), 'due-soon',
	'B, serving dq3 for the first time, moves the due item and its try returns it');

# a queue with delayed items is not dropped
$A->safe_psql('postgres', "SELECT zk_enqueue('dq', 'held', delay => '1 hour')");
ok(scalar(zk_wait_count($zk, "$Q/delayed", 1, 30)), 'an item delayed by an hour');
is(state_of($A, "SELECT zk_queue_drop('dq')"), '55006', 'a queue with delayed items is not dropped');
zkq_or_die($zk, 'delete', "$Q/delayed");

# two clusters waiting, one stopped before the items are due
my $N = 6;
$A->safe_psql('postgres',
	"SELECT zk_enqueue('dq2', array_agg('d' || i ORDER BY i), delay => '5 seconds') FROM generate_series(1, $N) i");
ok(scalar(zk_wait_count($zk, '/zklock/queues/dq2/delayed', $N, 30)), "$N delayed items");
my $wa = $A->background_psql('postgres', on_error_stop => 0);
$wa->query_until(qr/go/, "\\echo go\nSELECT count(*) FROM zk_dequeue('dq2', '60s', 10);\n");
my @wb = map { $B->background_psql('postgres', on_error_stop => 0) } 1 .. 2;
sleep 1;
$A->stop('immediate');
my @got;
my $until = time + 60;
while (@got < $N && time < $until)
{
	foreach my $s (@wb)
	{
		push @got, grep { $_ ne '' } split /\n/,
		  $s->query_safe("SELECT body FROM zk_dequeue('dq2', '2s', 10)");
	}
}
is(join(',', sort @got), join(',', sort map { "d$_" } 1 .. $N),
	'B moves and serves every item exactly once while A is down');
ok(scalar(zk_wait_count($zk, '/zklock/queues/dq2/entries', 0, 30)), 'none left in the queue');
is(zk_count($zk, '/zklock/queues/dq2/delayed'), 0, 'none left delayed');
$_->quit foreach @wb;
eval { $wa->quit };

$kz->quit;
$B->stop;
done_testing();
