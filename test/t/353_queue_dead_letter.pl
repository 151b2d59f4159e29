
# 353_queue_dead_letter.pl - a queue's dead-letter policy across the ways a
# hand-out ends without a consume, two clusters and kazoo.
#
# zk_queue_set_policy('poison', 4, 'poison.dlq') on A.  A poison item is
# handed out four times -- rolled back on A, its backend terminated on B,
# A's worker killed, PostgreSQL A stopped immediately -- and the next
# dequeue (B) gets the item behind it, while the poison item is in
# poison.dlq exactly once (counted through ZooKeeper), its payload intact,
# with its origin, its msg_id there and its four hand-outs.  kazoo sees the
# dead letter's data with zklock's header in front.  A policy removed on A
# is obeyed by B at its next claim (every claim checks the policy's
# version).  Bad calls change nothing: SQLSTATEs checked; data of another
# client in the queue's node is never overwritten; a payload that begins
# with the header is refused.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ZkLockTest;

my $zk = zk_start();
my %opts = (session_timeout => '10s', connect_timeout => '3s');
my $A = zk_node('dl_a', $zk, %opts, conf => "restart_after_crash = on\n");
my $B = zk_node('dl_b', $zk, %opts);
my $Q = '/zklock/queues/poison';
my $D = '/zklock/queues/poison.dlq';

# SQLSTATE of $sql on $node (00000 when it succeeds)
sub state_of
{
	my ($node, $sql) = @_;
	my ($rc, $out, $err) = $node->psql('postgres', $sql,
		extra_params => [ '-v', 'VERBOSITY=verbose' ], on_error_stop => 1);
	return $err =~ /ERROR:\s+([0-9A-Z]{5}):/ ? $1 : ($rc == 0 ? '00000' : "rc$rc");
}

sub released
{
	my ($what) = @_;
	ok(scalar(zk_wait_count($zk, "$Q/taken", 0, 60)), "$what: the claim is gone");
	return;
}

sub hand_out
{
	my ($s) = @_;
	$s->query_safe('BEGIN');
	return $s->query_safe("SELECT attempts || ':' || body FROM zk_dequeue('poison', '30s')");
}

# bad calls first: nothing is written
is(state_of($A, "SELECT zk_queue_set_policy('poison', 3, NULL)"), '22004',
	'max_attempts without dead_letter: 22004');
is(state_of($A, "SELECT zk_queue_set_policy('poison', NULL, 'x')"), '22004',
	'dead_letter without max_attempts: 22004');
is(state_of($A, "SELECT zk_queue_set_policy('poison', 0, 'x')"), '22023',
	'max_attempts 0: 22023');
is(state_of($A, "SELECT zk_queue_set_policy('poison', 1001, 'x')"), '22023',
	'max_attempts 1001: 22023');
is(state_of($A, "SELECT zk_queue_set_policy('poison', 3, 'poison')"), '22023',
	'a queue as its own dead-letter queue: 22023');
is(state_of($A, "SELECT zk_queue_set_policy('poison', 3, '')"), '22023',
	'an empty dead-letter queue name: 22023');
is(state_of($A, "SELECT zk_enqueue('poison', '\\x007a6b6c6f636b2d646561642d6c657474657201'::bytea)"),
	'22023', 'a payload beginning with the dead-letter header is refused');
ok(!zk_exists($zk, $Q), 'no node was made by the bad calls');

# another client's data in a queue's node is never overwritten
zkq_or_die($zk, 'create', '/zklock/queues/foreign', 'not a policy');
is(state_of($A, "SELECT zk_queue_set_policy('foreign', 3, 'foreign.dlq')"), '55006',
	"a queue node holding another client's data: 55006");
is(zk_get($zk, '/zklock/queues/foreign'), 'not a policy', 'its data is untouched');

# the policy, set on A, read by both clusters from the queue's node
$A->safe_psql('postgres', "SELECT zk_queue_set_policy('poison', 4, 'poison.dlq')");
like(zk_get($zk, $Q), qr/"max_attempts": 4, "dead_letter": "poison.dlq"/,
	'the policy is JSON in the queue node');
ok(zk_exists($zk, "$D/entries"), "the dead-letter queue's nodes exist");

$A->safe_psql('postgres', "SELECT zk_enqueue('poison', 'p1'); SELECT zk_enqueue('poison', 'good', 200)");
ok(scalar(zk_wait_count($zk, "$Q/entries", 2, 30)), 'two items are published');
my $p1_id = $A->safe_psql('postgres', "SELECT msg_id FROM zk_queue_peek('poison', 1)");

# 1. rolled back on A
my $a1 = new_session($A, name => 'a1');
is(hand_out($a1), '1:p1', 'first hand-out (A)');
$a1->query_safe('ROLLBACK');
released('rollback');

# 2. on B, its backend terminated
my $b1 = new_session($B, name => 'b1');
is(hand_out($b1), '2:p1', 'second hand-out (B)');
my $bpid = $b1->query_safe('SELECT pg_backend_pid()');
$B->safe_psql('postgres', "SELECT pg_terminate_backend($bpid)");
released('terminated backend');

# 3. on A, the worker killed
my $a2 = new_session($A, name => 'a2');
is(hand_out($a2), '3:p1', 'third hand-out (A)');
my $wpid = worker_pid($A);
kill 'KILL', $wpid;
released('worker killed');
ok(defined wait_for_worker($A, $wpid, 60), 'A has a new worker');
ZkLockTest::wait_connected($A, 'A did not connect again');

# 4. on A, PostgreSQL stopped immediately
my $a3 = new_session($A, name => 'a3');
is(hand_out($a3), '4:p1', 'fourth hand-out (A, after its crash restart)');
$A->stop('immediate');
$A->start;
ZkLockTest::wait_connected($A, 'A did not connect after its restart');
released('PostgreSQL crashed and restarted');

# the fifth claim (B) moves it and hands out the item behind it
my $b2 = new_session($B, name => 'b2');
is(hand_out($b2), '1:good', 'the next dequeue (B) gets the item behind the poison item');
ok(scalar(zk_wait_count($zk, "$D/entries", 1, 30)), 'the poison item is in the dead-letter queue');
is(zk_count($zk, "$Q/entries"), 1, 'and not in its origin (only the item B holds)');
$b2->query_safe('COMMIT');
ok(scalar(zk_wait_count($zk, "$Q/entries", 0, 30)), 'the origin is empty once B commits');

is($B->safe_psql('postgres',
	"SELECT body || '|' || attempts || '|' || origin || '|' || (origin_msg_id = $p1_id) || '|' || origin_attempts FROM zk_queue_peek('poison.dlq')"),
	'p1|0|poison|true|4', 'a peek of the dead letter: payload, origin, msg_id there and 4 hand-outs');
is($B->safe_psql('postgres', "SELECT dead_lettered FROM zk_queue_stats() WHERE queue = 'poison'"),
	'1', "B's zk_queue_stats counts the move");

# kazoo sees the dead letter with zklock's header in front of the payload
my $kz = queue_kazoo($zk);
like($kz->cmd("get $D 10"), qr/^item 007a6b6c6f636b2d646561642d6c657474657201.*\Q${\ unpack('H*', 'p1')}\E$/,
	'kazoo gets the dead letter: the header, then the payload');
is($kz->cmd("release $D"), 'true', 'kazoo lets it go');

# a dead letter is an ordinary item of its queue
is($A->safe_psql('postgres',
	"SELECT body || '|' || attempts || '|' || origin FROM zk_dequeue('poison.dlq', '5s')"),
	'p1|1|poison', 'A dequeues the dead letter like any item');
ok(scalar(zk_wait_count($zk, "$D/entries", 0, 30)), 'and consumes it');

# a policy removed on A binds B at its next claim
$A->safe_psql('postgres', "SELECT zk_queue_set_policy('poison', 1, 'poison.dlq')");
$A->safe_psql('postgres', "SELECT zk_enqueue('poison', 'p2')");
ok(scalar(zk_wait_count($zk, "$Q/entries", 1, 30)), 'another item is published');
my $b3 = new_session($B, name => 'b3');
is(hand_out($b3), '1:p2', 'B hands it out once (max_attempts 1)');
$b3->query_safe('ROLLBACK');
released('p2 rolled back');
$A->safe_psql('postgres', "SELECT zk_queue_set_policy('poison', NULL, NULL)");
is(zk_get($zk, $Q), '', 'the policy removed: the node is empty again');
is(hand_out($b3), '2:p2', 'B, which knew the old policy, hands it out again');
$b3->query_safe('COMMIT');
ok(scalar(zk_wait_count($zk, "$Q/entries", 0, 30)), 'consumed');
is(zk_count($zk, "$D/entries"), 0, 'nothing went to the dead-letter queue');

# without the admin group: 42501
$A->safe_psql('postgres', 'CREATE ROLE dl_nobody LOGIN');
my ($rc, $out, $err) = $A->psql('postgres', "SELECT zk_queue_set_policy('poison', 3, 'x')",
	extra_params => [ '-U', 'dl_nobody' ]);
like($err, qr/permission denied/, 'zk_queue_set_policy needs the admin group');

$kz->quit;
$_->quit foreach ($b2, $b3);
$A->stop;
$B->stop;
done_testing();
