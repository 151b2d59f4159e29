
# 358_queue_retry_later.pl - zk_retry_later(msg_id, delay): a backoff.
#
# An item dequeued and marked with zk_retry_later goes back when its
# transaction rolls back (a COMMIT is refused: 25000, and rolls back), but
# is held until the delay is over: its claim becomes a hold (counted through ZooKeeper: the claim's
# data says so, and an index node hold-<ms>-<item> sits under delayed), so
# nobody -- zklock on either cluster, kazoo -- takes it meanwhile; then any
# cluster serving the queue ends the hold and the item is handed out again,
# its attempts counted on.  The hold survives a restart of the cluster that
# made it (its settling pass leaves it alone) and does not need that
# cluster: with it stopped, the other one ends the hold.  A savepoint
# rolled back holds too; a delay of zero takes the backoff back; with a
# dead-letter policy the held attempts count.  Bad calls change nothing.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use ZkLockTest;

my $zk = zk_start();
my %opts = (session_timeout => '10s', connect_timeout => '3s');
my $A = zk_node('retry_a', $zk, %opts);
my $B = zk_node('retry_b', $zk, %opts);
my $Q = '/zklock/queues/rq';

sub state_of
{
	my ($node, $sql) = @_;
	my ($rc, $out, $err) = $node->psql('postgres', $sql,
		extra_params => [ '-v', 'VERBOSITY=verbose' ], on_error_stop => 1);
	return $err =~ /ERROR:\s+([0-9A-Z]{5}):/ ? $1 : ($rc == 0 ? '00000' : "rc$rc");
}

# the last line of psql's output (a void function's row prints an empty one)
sub last_line
{
	my @l = grep { $_ ne '' } split /\n/, shift;
	return $l[-1] // '';
}

# dequeue one item of $q on $node in a transaction, mark it with
# zk_retry_later($delay), end with $end; returns "body|attempts"
sub take_and_retry
{
	my ($node, $q, $delay, $end, $wait) = @_;
	$wait //= '20s';
	return last_line($node->safe_psql('postgres', qq{
		BEGIN;
		CREATE TEMP TABLE got ON COMMIT DROP AS SELECT * FROM zk_dequeue('$q', '$wait');
		SELECT zk_retry_later(msg_id, '$delay') FROM got;
		SELECT body || '|' || attempts FROM got;
		$end;}));
}

# bad calls
is(state_of($A, "SELECT zk_retry_later(NULL, '1s')"), '22004', 'msg_id NULL: 22004');
is(state_of($A, "SELECT zk_retry_later(1, NULL)"), '22004', 'delay NULL: 22004');
is(state_of($A, "SELECT zk_retry_later(1, '400 days')"), '22023', 'a delay over 366 days: 22023');
is(state_of($A, "SELECT zk_retry_later(12345, '1s')"), '55000', 'an item this transaction does not hold: 55000');
$A->safe_psql('postgres', "SELECT zk_enqueue('rq', 'other')");
is(state_of($B, q{
	BEGIN;
	SELECT count(*) FROM zk_dequeue('rq', '10s');
	SELECT zk_retry_later(12345, '1s');
	COMMIT;}), '55000', 'another msg_id than the one held: 55000');
is($A->safe_psql('postgres', "SELECT body FROM zk_dequeue('rq', '10s')"), 'other',
	'the failed transaction released its item at once, no hold');
ok(scalar(zk_wait_count($zk, "$Q/entries", 0, 30)), 'consumed');
ok(!zk_exists($zk, "$Q/delayed") || zk_count($zk, "$Q/delayed") == 0, 'nothing held');

# ROLLBACK with a backoff: held, not early, then once with its attempts
$A->safe_psql('postgres', "SELECT zk_enqueue('rq', 'r1')");
my $t0 = time;
is(take_and_retry($A, 'rq', '4 seconds', 'ROLLBACK'), 'r1|1', 'A takes r1 and asks for 4 s');
ok(scalar(zk_wait_count($zk, "$Q/delayed", 1, 30)), 'the hold is indexed under delayed');
my ($hold) = zk_children($zk, "$Q/delayed");
like($hold, qr/^hold-\d{13}-entry-\d{3}-\d{10}$/, "the index is named hold-<ms>-<item> ($hold)");
my ($item) = $hold =~ /^hold-\d{13}-(.*)$/;
like(zk_get($zk, "$Q/taken/$item") // '', qr/"zklock_hold":1/, 'the claim is a hold now');
is(zk_count($zk, "$Q/entries"), 1, 'the item stays in entries');
is($B->safe_psql('postgres', "SELECT count(*) FROM zk_try_dequeue('rq')"), '0', 'B cannot take it');
is($A->safe_psql('postgres', "SELECT count(*) FROM zk_try_dequeue('rq')"), '0', 'A cannot take it either');
my $kz = queue_kazoo($zk);
is($kz->cmd("get $Q 1"), 'none', 'kazoo cannot take it');
my $got = $B->safe_psql('postgres', "SELECT body || '|' || attempts FROM zk_dequeue('rq', '30s')");
my $waited = time - $t0;
is($got, 'r1|2', 'a waiting consumer of B gets it again, its second attempt');
cmp_ok($waited, '>=', 3.9, sprintf('not before the backoff is over (%.1f s)', $waited));
ok(scalar(zk_wait_count($zk, "$Q/entries", 0, 30)), 'consumed');
is(zk_count($zk, "$Q/delayed"), 0, 'the index is gone');
is(zk_count($zk, "$Q/taken"), 0, 'so is the hold');

# COMMIT with a mark is refused: the transaction rolls back and the item is
# held (a COMMIT would consume it); a savepoint rolled back holds too
$A->safe_psql('postgres', "SELECT zk_enqueue('rq', array['c1', 'c2'])");
is(state_of($A, q{
	BEGIN;
	CREATE TEMP TABLE got ON COMMIT DROP AS SELECT * FROM zk_dequeue('rq', '10s');
	SELECT zk_retry_later(msg_id, '2 seconds') FROM got;
	COMMIT;}), '25000', 'c1 marked, COMMIT: refused with 25000, rolled back');
is(last_line($A->safe_psql('postgres', q{
	BEGIN;
	SAVEPOINT s;
	CREATE TEMP TABLE g2 AS SELECT * FROM zk_dequeue('rq', '10s');
	SELECT zk_retry_later(msg_id, '2 seconds') FROM g2;
	ROLLBACK TO s;
	COMMIT;
	SELECT 'ok';})), 'ok', 'c2 marked in a savepoint rolled back');
ok(scalar(zk_wait_count($zk, "$Q/delayed", 2, 30)), 'two holds');
is(zk_count($zk, "$Q/entries"), 2, 'both items are still there');
is($B->safe_psql('postgres', "SELECT count(*) FROM zk_try_dequeue('rq', 2)"), '0', 'neither can be taken now');
my @back;
for (1 .. 5)
{
	push @back, grep { $_ ne '' } split /\n/,
	  $B->safe_psql('postgres', "SELECT body || '|' || attempts FROM zk_dequeue('rq', '10s', 2)");
	last if @back >= 2;
}
is(join(',', sort @back), 'c1|2,c2|2', 'both come back once the backoff is over, second attempts');
ok(scalar(zk_wait_count($zk, "$Q/entries", 0, 30)), 'consumed');

# a delay of zero takes the backoff back
$A->safe_psql('postgres', "SELECT zk_enqueue('rq', 'z1')");
is(last_line($A->safe_psql('postgres', q{
	BEGIN;
	CREATE TEMP TABLE g3 ON COMMIT DROP AS SELECT * FROM zk_dequeue('rq', '10s');
	SELECT zk_retry_later(msg_id, '1 hour') FROM g3;
	SELECT zk_retry_later(msg_id, '0') FROM g3;
	SELECT body FROM g3;
	ROLLBACK;})), 'z1', 'z1 marked for an hour, then for zero');
is($B->safe_psql('postgres', "SELECT body || '|' || attempts FROM zk_dequeue('rq', '10s')"), 'z1|2',
	'it is back at once');
ok(scalar(zk_wait_count($zk, "$Q/entries", 0, 30)), 'consumed');

# the cluster that made the hold restarts: its settling pass leaves the hold
$A->safe_psql('postgres', "SELECT zk_enqueue('rq', 'k1')");
is(take_and_retry($A, 'rq', '8 seconds', 'ROLLBACK'), 'k1|1', 'k1 held for 8 s');
ok(scalar(zk_wait_count($zk, "$Q/delayed", 1, 30)), 'held');
$t0 = time;
$A->restart;
ZkLockTest::wait_connected($A, 'A did not reconnect');
sleep 1;
is($A->safe_psql('postgres', "SELECT count(*) FROM zk_try_dequeue('rq')"), '0',
	'after A restarted, the item is still held') if time - $t0 < 6;
is(zk_count($zk, "$Q/delayed"), 1, 'the index is still there') if time - $t0 < 6;
is($A->safe_psql('postgres', "SELECT body || '|' || attempts FROM zk_dequeue('rq', '30s')"), 'k1|2',
	'then it comes back');
ok(scalar(zk_wait_count($zk, "$Q/entries", 0, 30)), 'consumed');

# the cluster that made the hold is stopped: the other one ends it
$A->safe_psql('postgres', "SELECT zk_enqueue('rq', 'x1')");
is(take_and_retry($A, 'rq', '4 seconds', 'ROLLBACK'), 'x1|1', 'x1 held for 4 s');
ok(scalar(zk_wait_count($zk, "$Q/delayed", 1, 30)), 'held');
$A->stop('immediate');
is($B->safe_psql('postgres', "SELECT body || '|' || attempts FROM zk_dequeue('rq', '40s')"), 'x1|2',
	'with A down, B ends the hold and gets the item');
ok(scalar(zk_wait_count($zk, "$Q/entries", 0, 30)), 'consumed');
is(zk_count($zk, "$Q/delayed") + zk_count($zk, "$Q/taken"), 0, 'nothing left');
$A->start;
ZkLockTest::wait_connected($A, 'A did not reconnect');

# with a dead-letter policy, held attempts count
$A->safe_psql('postgres', "SELECT zk_queue_set_policy('rq', 2, 'rq.dlq')");
$A->safe_psql('postgres', "SELECT zk_enqueue('rq', 'p1')");
is(take_and_retry($A, 'rq', '1 second', 'ROLLBACK'), 'p1|1', 'p1: first attempt, held 1 s');
is(take_and_retry($B, 'rq', '1 second', 'ROLLBACK', '30s'), 'p1|2', 'p1: second attempt, held 1 s');
is($A->safe_psql('postgres', "SELECT count(*) FROM zk_dequeue('rq', '5s')"), '0',
	'the next claim, its third, is not handed out');
ok(scalar(zk_wait_count($zk, '/zklock/queues/rq.dlq/entries', 1, 30)), 'it moves to the dead letters');
is($A->safe_psql('postgres', q{
	SELECT body || '|' || origin || '|' || origin_attempts FROM zk_dequeue('rq.dlq', '10s')}),
	'p1|rq|2', 'with its origin and its two attempts');
is(zk_count($zk, "$Q/entries") + zk_count($zk, "$Q/taken") + zk_count($zk, "$Q/delayed"), 0,
	'nothing of it is left in rq');

$kz->quit;
$A->stop;
$B->stop;
done_testing();
