
# 359_retry_later_review.pl - zk_retry_later attacked (a review of 358).
#
# A hold ZooKeeper refuses for good (the queue's delayed node made another
# identity's) sends the item back at once.  A
# zk_retry_later made in a savepoint that is rolled back is undone with it.
# Planted nodes under delayed named like holds never end a live claim, and
# an index whose claim is gone is dropped.  The end multi's answer lost
# (ZooKeeper stopped or frozen right after the ROLLBACK) and a backend
# terminated after zk_retry_later: the item comes back exactly once.  Some
# of several items marked; a peek's msg_id is not held; kazoo takes the
# item once the hold is over.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use ZkLockTest;

my $zk = zk_start();
my %opts = (session_timeout => '10s', connect_timeout => '3s');
my $A = zk_node('review_a', $zk, %opts);

sub sql { return $A->safe_psql('postgres', shift); }

sub state_of
{
	my ($sql) = @_;
	my ($rc, $out, $err) = $A->psql('postgres', $sql,
		extra_params => [ '-v', 'VERBOSITY=verbose' ], on_error_stop => 1);
	return $err =~ /ERROR:\s+([0-9A-Z]{5}):/ ? $1 : ($rc == 0 ? '00000' : "rc$rc");
}

sub last_line
{
	my @l = grep { $_ ne '' } split /\n/, shift;
	return $l[-1] // '';
}

# every item of queue $q handed out within $secs each, "body|attempts"
sub drain
{
	my ($q, $secs) = @_;
	my @got;
	while (1)
	{
		my $r = sql("SELECT body || '|' || attempts FROM zk_dequeue('$q', '${secs}s')");
		last if $r eq '';
		push @got, $r;
	}
	return join(',', sort @got);
}

# ---- a hold refused for good: the item goes back at once
my $Q = '/zklock/queues/rn';
sql("SELECT zk_enqueue('rn', 'n0')");
zkq_or_die($zk, 'create', "$Q/delayed");
my $kz = auth_kazoo($zk);
is($kz->cmd("setacl $Q/delayed other:pw"), 'ok', "the queue's delayed node is another identity's");
sql("SELECT zk_enqueue('rn', 'n1')");
my ($rc, $out, $err) = $A->psql('postgres', q{
	BEGIN;
	CREATE TEMP TABLE g ON COMMIT DROP AS SELECT * FROM zk_dequeue('rn', '10s', 2);
	SELECT zk_retry_later(msg_id, '1 hour') FROM g WHERE body = 'n1';
	ROLLBACK;});
is($rc, 0, 'n0 and n1 taken, n1 marked for an hour, ROLLBACK');
ok(scalar(zk_wait_count($zk, "$Q/taken", 0, 30)), 'the claims end (the hold refused)');
is(zk_count($zk, "$Q/entries"), 2, 'n0 and n1 are both back at once');
is(drain('rn', 5), 'n0|2,n1|2', 'both handed out again');
my $own = auth_kazoo($zk, 'other:pw');
is($own->cmd("setacl $Q/delayed open"), 'ok', 'the ACL is given back');
$own->quit;

# ---- zk_retry_later in a savepoint rolled back is undone with it
$Q = '/zklock/queues/rs';
sql("SELECT zk_enqueue('rs', 's1')");
is(last_line(sql(q{
	BEGIN;
	CREATE TEMP TABLE g ON COMMIT DROP AS SELECT * FROM zk_dequeue('rs', '10s');
	SAVEPOINT a;
	SELECT zk_retry_later(msg_id, '1 hour') FROM g;
	ROLLBACK TO a;
	SELECT body FROM g;
	COMMIT;})), 's1', 's1 taken, marked in a savepoint rolled back, COMMIT');
ok(scalar(zk_wait_count($zk, "$Q/entries", 0, 30)), 'the mark was rolled back: s1 is consumed');
is(zk_exists($zk, "$Q/delayed") ? zk_count($zk, "$Q/delayed") : 0, 0, 'no hold');
# ... and one that is released holds, though the top transaction rolls back
$Q = '/zklock/queues/rs2';
sql("SELECT zk_enqueue('rs2', 's2')");
is(last_line(sql(q{
	BEGIN;
	CREATE TEMP TABLE g ON COMMIT DROP AS SELECT * FROM zk_dequeue('rs2', '10s');
	SAVEPOINT a;
	SELECT zk_retry_later(msg_id, '4 seconds') FROM g;
	RELEASE a;
	SELECT body FROM g;
	ROLLBACK;})), 's2', 's2 marked in a savepoint released, ROLLBACK');
ok(scalar(zk_wait_count($zk, "$Q/delayed", 1, 30)), 's2 is held');
is(sql("SELECT count(*) FROM zk_try_dequeue('rs2')"), '0', 'not handed out meanwhile');
is(drain('rs2', 15), 's2|2', 'then back once');
# a savepoint rolled back inside the transaction: the outer mark stays
$Q = '/zklock/queues/rs3';
sql("SELECT zk_enqueue('rs3', 's3')");
is(last_line(sql(q{
	BEGIN;
	CREATE TEMP TABLE g ON COMMIT DROP AS SELECT * FROM zk_dequeue('rs3', '10s');
	SELECT zk_retry_later(msg_id, '4 seconds') FROM g;
	SAVEPOINT a;
	SELECT zk_retry_later(msg_id, '0') FROM g;
	SAVEPOINT b;
	SELECT zk_retry_later(msg_id, '1 hour') FROM g;
	RELEASE b;
	ROLLBACK TO a;
	SELECT body FROM g;
	ROLLBACK;})), 's3', 's3 marked, unmarked and marked again in savepoints rolled back, ROLLBACK');
ok(scalar(zk_wait_count($zk, "$Q/delayed", 1, 30)), 's3 is held (the first mark is back)');
is(sql("SELECT count(*) FROM zk_try_dequeue('rs3')"), '0', 'not handed out meanwhile');
is(drain('rs3', 15), 's3|2', 'then back within seconds, not an hour');

# ---- some of several items marked; a peek's msg_id is not held
$Q = '/zklock/queues/rm';
sql("SELECT zk_enqueue('rm', array['m1', 'm2'])");
is(state_of(q{
	BEGIN;
	SELECT zk_retry_later(msg_id, '1s') FROM zk_queue_peek('rm');
	COMMIT;}), '55000', "a peek's msg_id: 55000");
is(last_line(sql(q{
	BEGIN;
	CREATE TEMP TABLE g ON COMMIT DROP AS SELECT * FROM zk_dequeue('rm', '10s', 2);
	SELECT zk_retry_later(msg_id, '3 seconds') FROM g WHERE body = 'm2';
	SELECT zk_retry_later(msg_id, '3 seconds') FROM g WHERE body = 'm2';
	SELECT string_agg(body, ',' ORDER BY body) FROM g;
	ROLLBACK;})), 'm1,m2', 'm1 and m2 taken, m2 marked twice, ROLLBACK');
ok(scalar(zk_wait_count($zk, "$Q/delayed", 1, 30)), 'm2 held, one index');
is(sql("SELECT body || '|' || attempts FROM zk_try_dequeue('rm')"), 'm1|2', 'm1 is back at once');
is(drain('rm', 15), 'm2|2', 'm2 after its delay, once');
is(sql("SELECT handed_out || '/' || consumed || '/' || released FROM zk_queue_stats() WHERE queue = 'rm'"),
	'4/2/2', 'zk_queue_stats: the hold counts as released, not consumed');
is(sql("SELECT handed_out || '/' || consumed || '/' || released FROM zk_queue_stats() WHERE queue = 'rn'"),
	'4/2/2', 'zk_queue_stats: so does a hold refused');

# ---- the delay counts from the call, not from the end of the transaction
sql("SELECT zk_enqueue('rm', 'm3')");
is(last_line(sql(q{
	BEGIN;
	CREATE TEMP TABLE g ON COMMIT DROP AS SELECT * FROM zk_dequeue('rm', '10s');
	SELECT zk_retry_later(msg_id, '2 seconds') FROM g;
	SELECT pg_sleep(2.5);
	SELECT body FROM g;
	ROLLBACK;})), 'm3', 'm3 marked for 2 s, the transaction goes on 2.5 s');
my $t0 = time;
is(sql("SELECT body || '|' || attempts FROM zk_dequeue('rm', '10s')"), 'm3|2', 'back');
cmp_ok(time - $t0, '<', 1.5, sprintf('at once (%.1f s; as documented: the delay counts from the call)', time - $t0));
ok(scalar(zk_wait_count($zk, "$Q/entries", 0, 30)), 'consumed');

# ---- planted nodes under delayed named like holds
$Q = '/zklock/queues/rp';
sql("SELECT zk_enqueue('rp', 'p1')");
my $s = new_session($A, name => 'holder');
$s->query_safe('BEGIN');
is($s->query_safe("SELECT body FROM zk_try_dequeue('rp')"), 'p1', 'a session holds p1 (a live claim)');
my ($item) = zk_children($zk, "$Q/taken");
zkq_or_die($zk, 'create', "$Q/delayed/hold-0000000000001-$item");
zkq_or_die($zk, 'create', "$Q/delayed/hold-0000000000001-entry-100-0000000099");
zkq_or_die($zk, 'create', "$Q/delayed/hold-garbage");
sql("SELECT zk_enqueue('rp', 'p2')");
is(sql("SELECT body FROM zk_dequeue('rp', '10s')"), 'p2', 'p2 handed out (the delayed items listed)');
ok(scalar(zk_wait_count($zk, "$Q/delayed", 1, 30)), 'the indexes of holds that are none are dropped');
is(join(',', zk_children($zk, "$Q/delayed")), 'hold-garbage', 'a name that is no hold stays');
ok(zk_exists($zk, "$Q/taken/$item"), 'the live claim is untouched');
$s->query_safe('COMMIT');
ok(scalar(zk_wait_count($zk, "$Q/entries", 0, 30)), 'p1 consumed by its holder');
$s->quit;

# ---- the end multi's answer lost: ZooKeeper stopped right after ROLLBACK
$Q = '/zklock/queues/rf';
for my $fault ('stop', 'freeze')
{
	sql("SELECT zk_enqueue('rf', 'f-$fault')");
	$s = new_session($A, name => "f$fault");
	$s->query_safe('BEGIN');
	$s->query_safe("CREATE TEMP TABLE g ON COMMIT DROP AS SELECT * FROM zk_dequeue('rf', '10s')");
	$s->query_safe("SELECT zk_retry_later(msg_id, '3 seconds') FROM g");
	$s->send('ROLLBACK');
	if ($fault eq 'stop') { zk_stop($zk); sleep 2; zk_restart($zk); }
	else { zk_freeze($zk); sleep 8; zk_thaw($zk); }
	$s->wait(30);
	$s->quit;
	ZkLockTest::wait_connected($A, "A did not reconnect after the $fault");
	is(drain('rf', 20), "f-$fault|2", "$fault: the item comes back exactly once");
	ok(scalar(zk_wait_count($zk, "$Q/taken", 0, 30)), "$fault: no claim left");
	ok(scalar(zk_wait_count($zk, "$Q/delayed", 0, 30)), "$fault: no index left");
}

# ---- a backend terminated after zk_retry_later: its end holds
sql("SELECT zk_enqueue('rf', 't1')");
$s = new_session($A, name => 'terminated');
$s->query_safe('BEGIN');
$s->query_safe("CREATE TEMP TABLE g ON COMMIT DROP AS SELECT * FROM zk_dequeue('rf', '10s')");
$s->query_safe("SELECT zk_retry_later(msg_id, '4 seconds') FROM g");
is(sql("SELECT pg_terminate_backend($s->{pid})"), 't', 'the holder is terminated');
ok(scalar(zk_wait_count($zk, "$Q/delayed", 1, 30)), 'its end made the hold');
is(sql("SELECT count(*) FROM zk_try_dequeue('rf')"), '0', 'not handed out meanwhile');
is(drain('rf', 15), 't1|2', 'then back once');

# ---- kazoo takes the item once its hold is over
sql("SELECT zk_enqueue('rf', 'k1')");
is(last_line(sql(q{
	BEGIN;
	CREATE TEMP TABLE g ON COMMIT DROP AS SELECT * FROM zk_dequeue('rf', '10s');
	SELECT zk_retry_later(msg_id, '2 seconds') FROM g;
	SELECT body FROM g;
	ROLLBACK;})), 'k1', 'k1 held 2 s');
my $qk = queue_kazoo($zk);
is($qk->cmd("get $Q 0.5"), 'none', 'kazoo skips it while held');
# the hold is ended by a server that serves the queue (a consumer waits)
is(last_line(sql(q{
	BEGIN;
	SELECT body FROM zk_dequeue('rf', '10s');
	ROLLBACK;})), 'k1', 'a zklock consumer that waits gets it once the hold is over (and puts it back)');
my $got = 'none';
for (1 .. 20)
{
	$got = $qk->cmd("get $Q 0.5");
	last if $got ne 'none';
	sleep 1;
}
is($got, 'item ' . unpack('H*', 'k1'), 'then kazoo takes it');
is($qk->cmd("consume $Q"), 'true', 'and consumes it');
ok(scalar(zk_wait_count($zk, "$Q/entries", 0, 30)), 'consumed');

$qk->quit;
$kz->quit;
$A->stop;
done_testing();
