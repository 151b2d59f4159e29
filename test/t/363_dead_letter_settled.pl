
# 363_dead_letter_settled.pl - the claim that was to move an item to the
# dead-letter queue, left by a dead run, does not make the item look
# handed out once more than its policy allows.
#
# A claim counts its hand-out in the item (cversion) before its read says
# how often the item was handed out; the claim that finds more than
# max_attempts moves the item instead of handing it out.  A fault run of
# 320_queue_exactly_once.pl (PostgreSQL 17) had three dead letters with
# origin_attempts 4 under max_attempts 3: cluster B claimed the items for
# the fourth time, B was stopped (immediate) and promoted away before the
# claims' reads answered, and B2's settling pass released the claims as
# aborted ones; the items went back with a count of 4, and the next claim
# (the final drain on A) moved them "after 4 hand-outs".  Clients had seen
# three hand-outs of each.
#
# Here: queue 'dls' with max_attempts 1.  The poison item is handed out
# once and rolled back; the next dequeue's claim lands in ZooKeeper, its
# answers are held by the fault proxy (drop-replies multi), and A's worker
# is killed: the crash restart's settling pass finds the claim of a dead
# run.  Now it moves the item to dls.dlq with origin_attempts 1 (what the
# claim would have done); before, it released the claim, and the next
# dequeue moved the item with origin_attempts 2.  A claim whose item may
# still be handed out (count within the policy) is released as before.
# And the same claim in a live worker, its dequeue cancelled before the
# claim's answers came (held 3 s by the proxy): the read that answers then
# moves the item (before: the claim was released, and the next claim moved
# the item with origin_attempts 2).

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ZkLockTest;
use ZkProxy;

my $zk = zk_start();
my $p = proxy_start($zk);
my $A = zk_node('dls_a', $p->{hosts}, session_timeout => '10s', connect_timeout => '3s',
	conf => "restart_after_crash = on\n");
my $Q = '/zklock/queues/dls';
my $D = '/zklock/queues/dls.dlq';

# the next hand-out in session $s (a transaction left open)
sub hand_out
{
	my ($s) = @_;
	$s->query_safe('BEGIN');
	return $s->query_safe("SELECT attempts || ':' || body FROM zk_dequeue('dls', '30s')");
}

# A dequeue on A whose claim lands and whose answers never come back;
# then A's worker is killed (a crash restart) and the proxy lets A's new
# session through.  Returns once the settling pass has ended the claim.
sub claim_then_crash
{
	my ($what) = @_;
	my $rule = proxy_rule($p, 'drop-replies multi');
	my $s = new_session($A, name => "lost_$what");
	$s->send("BEGIN; SELECT attempts || ':' || body FROM zk_dequeue('dls', '30s')");
	ok(scalar(zk_wait_count($zk, "$Q/taken", 1, 30)),
		"$what: the claim landed in ZooKeeper (its answer held by the proxy)");
	my $wpid = worker_pid($A);
	kill 'KILL', $wpid;
	proxy_cmd($p, 'reset');
	$A->poll_query_until('postgres', 'SELECT 1', '1')
	  or die 'A did not come back after its crash restart';
	ok(defined wait_for_worker($A, $wpid, 60), "$what: A has a new worker");
	ZkLockTest::wait_connected($A, 'A did not connect again');
	ok(scalar(zk_wait_count($zk, "$Q/taken", 0, 60)), "$what: the settling pass ended the claim");
	$s->kill_client;
	return;
}

$A->safe_psql('postgres', "SELECT zk_queue_set_policy('dls', 1, 'dls.dlq')");
$A->safe_psql('postgres',
	"SELECT zk_enqueue('dls', 'poison'); SELECT zk_enqueue('dls', 'good', 200)");
ok(scalar(zk_wait_count($zk, "$Q/entries", 2, 30)), 'two items are published');
my $poison_id = $A->safe_psql('postgres', "SELECT msg_id FROM zk_queue_peek('dls', 1)");

# its one hand-out allowed
my $c1 = new_session($A, name => 'c1');
is(hand_out($c1), '1:poison', 'the first hand-out of the poison item');
$c1->query_safe('ROLLBACK');
ok(scalar(zk_wait_count($zk, "$Q/taken", 0, 30)), 'rolled back: the claim is gone');
$c1->quit;

# the claim that was to move it, left by a dead run
claim_then_crash('the second claim');
is(zk_count($zk, "$D/entries"), 1,
	'the settling pass moved the item to the dead-letter queue, as the claim would have');
is(zk_count($zk, "$Q/entries"), 1, 'only the good item is left in the queue');

my $c2 = new_session($A, name => 'c2');
is(hand_out($c2), '1:good', 'the next dequeue gets the good item, handed out once');
$c2->query_safe('COMMIT');
ok(scalar(zk_wait_count($zk, "$Q/entries", 0, 30)), 'consumed');
is($A->safe_psql('postgres',
	"SELECT body || '|' || origin || '|' || (origin_msg_id = $poison_id) || '|' || origin_attempts FROM zk_queue_peek('dls.dlq')"),
	'poison|dls|true|1',
	'the dead letter: its origin and msg_id there, and 1 hand-out (max_attempts), not 2');
is($A->safe_psql('postgres', "SELECT dead_lettered FROM zk_queue_stats() WHERE queue = 'dls'"),
	'1', "A's zk_queue_stats counts the move");
ok($A->log_contains(qr/moved item "entry-100-\d+" of queue "dls" to its dead-letter queue as "\Q$D\E\/entries\/entry-100-\d+" after 1 hand-outs/),
	'the server log names the move');

# a claim whose item may still be handed out goes back as before (its
# hand-out counted: doc/queues.md, "Delivery count")
$A->safe_psql('postgres', "SELECT zk_enqueue('dls', 'fresh')");
ok(scalar(zk_wait_count($zk, "$Q/entries", 1, 30)), 'a fresh item is published');
my $fresh_id = $A->safe_psql('postgres', "SELECT msg_id FROM zk_queue_peek('dls', 1)");
claim_then_crash('a claim within the policy');
is(zk_count($zk, "$Q/entries"), 1, 'the fresh item is back in the queue');
is(zk_count($zk, "$D/entries"), 1, 'and not in the dead-letter queue');
is($A->safe_psql('postgres', "SELECT count(*) FROM zk_try_dequeue('dls')"), '0',
	'its lost claim was its one hand-out: the next claim moves it');
ok(scalar(zk_wait_count($zk, "$D/entries", 2, 30)), 'it is in the dead-letter queue');
is($A->safe_psql('postgres',
	"SELECT origin_attempts FROM zk_queue_peek('dls.dlq', 10) WHERE origin_msg_id = $fresh_id"),
	'1', 'with 1 hand-out');

# the same claim while A lives: its dequeue cancelled before the claim's
# answers came (the proxy holds them 3 s); the read that answers then finds
# the item handed out max_attempts times already, and moves it (before, the
# claim was released and the next claim moved it "after 2 hand-outs")
my $L = '/zklock/queues/dlc';
$A->safe_psql('postgres', "SELECT zk_queue_set_policy('dlc', 1, 'dlc.dlq')");
$A->safe_psql('postgres', "SELECT zk_enqueue('dlc', 'poison2')");
ok(scalar(zk_wait_count($zk, "$L/entries", 1, 30)), 'dlc: an item is published');
my $p2_id = $A->safe_psql('postgres', "SELECT msg_id FROM zk_queue_peek('dlc', 1)");
my $c4 = new_session($A, name => 'c4');    # c2 went with the crash restart
$c4->query_safe('BEGIN');
is($c4->query_safe("SELECT attempts || ':' || body FROM zk_dequeue('dlc', '30s')"),
	'1:poison2', 'dlc: its one hand-out');
$c4->query_safe('ROLLBACK');
ok(scalar(zk_wait_count($zk, "$L/taken", 0, 30)), 'dlc: rolled back');
my $hold = proxy_rule($p, 'delay-replies multi 3000');
my $c3 = new_session($A, name => 'c3');
my $c3pid = $c3->query_safe('SELECT pg_backend_pid()');
$c3->send("BEGIN; SELECT attempts || ':' || body FROM zk_dequeue('dlc', '30s')");
ok(scalar(zk_wait_count($zk, "$L/taken", 1, 30)), 'dlc: the next claim landed, its answer held');
$A->safe_psql('postgres', "SELECT pg_cancel_backend($c3pid)");
my $r = $c3->wait(30);
is($r->{sqlstate}, '57014', 'dlc: the dequeue is cancelled before the answer comes');
ok(scalar(zk_wait_count($zk, "$L/taken", 0, 30)), 'dlc: the claim is ended once the answer comes');
proxy_cmd($p, 'reset');
is(zk_count($zk, "/zklock/queues/dlc.dlq/entries"), 1, 'dlc: the item was moved to the dead-letter queue');
is($A->safe_psql('postgres', "SELECT count(*) FROM zk_try_dequeue('dlc')"), '0',
	'dlc: nothing is left to hand out');
is($A->safe_psql('postgres',
	"SELECT body || '|' || (origin_msg_id = $p2_id) || '|' || origin_attempts FROM zk_queue_peek('dlc.dlq')"),
	'poison2|true|1', 'dlc: the dead letter shows 1 hand-out (max_attempts), not 2');

$c3->quit;
$c4->quit;
$c2->kill_client;
$A->stop;
done_testing();
