
# 356_queue_review.pl - what a review of dead letters and delayed items
# found, kept as tests:
#
# 1. Policy ABA: a cluster whose worker knows a queue's policy at node
#    version 1 must not keep applying it after the queue is dropped (on
#    another cluster) and made again with another policy, also at version
#    1: its listing finds other entries and reads the policy again, so the
#    item is dead-lettered into the queue the new policy names.
# 2. zk_try_dequeue behind a poison item: "the dequeue that met it goes on
#    with the items behind it".
# 3. A delayed array is served in array order once due (the moves go in
#    name order: ZooKeeper lists children in no order).

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ZkLockTest;

my $zk = zk_start();
my %opts = (session_timeout => '10s', connect_timeout => '3s');
my $A = zk_node('rv_a', $zk, %opts);
my $B = zk_node('rv_b', $zk, %opts);

sub err_of
{
	my ($node, $sql) = @_;
	my ($rc, $out, $err) = $node->psql('postgres', $sql,
		extra_params => [ '-v', 'VERBOSITY=verbose' ], on_error_stop => 1);
	return ($rc == 0 ? '00000' : ($err =~ /ERROR:\s+([0-9A-Z]{5}):/ ? $1 : "rc$rc"), $out, $err);
}

# ---- 1. policy ABA across a drop and re-create ----
{
	my $Q = '/zklock/queues/aba';
	$A->safe_psql('postgres', "SELECT zk_queue_set_policy('aba', 5, 'aba.x')");
	my $w = new_session($A, name => 'w');
	$w->query_safe('BEGIN');
	$w->send("SELECT attempts || ':' || body FROM zk_dequeue('aba', '120s')");
	sleep 3;    # A's round reads the policy: version 1, max_attempts 5
	my ($st, $out, $err) = err_of($B, "SELECT zk_queue_drop('aba')");
	is("$st $out", '00000 t', 'B drops the empty queue while a consumer of A waits on it');
	sleep 2;
	$B->safe_psql('postgres', "SELECT zk_queue_set_policy('aba', 1, 'aba.y')");
	like(zk_get($zk, $Q), qr/"max_attempts": 1, "dead_letter": "aba.y"/, 'the new policy is in the node');
	sleep 2;
	$B->safe_psql('postgres', "SELECT zk_enqueue('aba', 'p')");
	my $r = $w->wait(60);
	is($r->{out}, '1:p', 'A hands the item out once (attempts 1)');
	$w->query_safe('ROLLBACK');
	ok(scalar(zk_wait_count($zk, "$Q/taken", 0, 30)), 'the claim is gone');
	$w->query_safe('BEGIN');
	my $again = $w->query_safe("SELECT attempts || ':' || body FROM zk_dequeue('aba', '5s')");
	is($again, '', 'max_attempts 1: the second claim must dead-letter the item, not hand it out');
	$w->query_safe('COMMIT');
	is(zk_exists($zk, '/zklock/queues/aba.y/entries') ? zk_count($zk, '/zklock/queues/aba.y/entries') : -1,
		1, 'the dead letter is in aba.y, the queue the policy names');
	diag 'aba.x entries: ' . (zk_exists($zk, '/zklock/queues/aba.x/entries')
		? zk_count($zk, '/zklock/queues/aba.x/entries') : 'none');
	diag 'aba entries: ' . zk_count($zk, "$Q/entries");
	$w->quit;
}

# ---- 2. zk_try_dequeue behind a poison item ----
{
	my $Q = '/zklock/queues/tp';
	$A->safe_psql('postgres', "SELECT zk_queue_set_policy('tp', 1, 'tp.dlq')");
	$A->safe_psql('postgres', "BEGIN; SELECT zk_enqueue('tp', 'poison', 10); SELECT zk_enqueue('tp', 'good', 200); COMMIT;");
	ok(scalar(zk_wait_count($zk, "$Q/entries", 2, 30)), 'two items');
	my $s = new_session($B, name => 's');
	$s->query_safe('BEGIN');
	is($s->query_safe("SELECT attempts || ':' || body FROM zk_dequeue('tp', '5s')"), '1:poison', 'poison once');
	$s->query_safe('ROLLBACK');
	ok(scalar(zk_wait_count($zk, "$Q/taken", 0, 30)), 'released');
	$s->query_safe('BEGIN');
	is($s->query_safe("SELECT body FROM zk_try_dequeue('tp')"), 'good',
		'zk_try_dequeue moves the poison item and goes on with the item behind it');
	$s->query_safe('COMMIT');
	diag 'tp.dlq entries: ' . zk_count($zk, '/zklock/queues/tp.dlq/entries');
	$s->quit;
}

# ---- 3. a delayed array: served in array order once due ----
{
	my $N = 20;
	$A->safe_psql('postgres',
		"SELECT zk_enqueue('ord', array_agg(format('e%s', lpad(i::text, 2, '0')) ORDER BY i), delay => '3 seconds') FROM generate_series(1, $N) i");
	ok(scalar(zk_wait_count($zk, '/zklock/queues/ord/delayed', $N, 30)), "$N delayed items");
	my $s = new_session($B, name => 'o');
	sleep 4;    # due; then B serves the queue
	$s->query_safe("BEGIN; SELECT count(*) FROM zk_dequeue('ord', '0'); ROLLBACK;");
	ok(scalar(zk_wait_count($zk, '/zklock/queues/ord/entries', $N, 60)), 'all moved once due');
	my $got = $s->query_safe("BEGIN; SELECT string_agg(body, ',') FROM zk_dequeue('ord', '5s', $N); COMMIT;");
	$got =~ s/\s+//g;
	is($got, join(',', map { sprintf('e%02d', $_) } 1 .. $N),
		'items of one priority are served in array order (as zk_enqueue with an array promises)');
	$s->quit;
}

$A->stop;
$B->stop;
done_testing();
