
# 062_lock_scale.pl - one session with 10,000 locks, and the monitoring views over
# a table larger than one chunk (issue 26, "flat cost at scale").
#
# - One session takes 10,000 transaction locks (distinct names) in one
#   statement, with zklock.max_locks and zklock.max_locks_per_backend raised
#   (the defaults, 1024 and 256, refuse the 257th).  Every acquisition is one
#   request to the worker; taking one of them again, or a shared lock on a
#   name it holds exclusively, sends none (found in the backend's own table
#   of locks, whatever its size) and returns the same token.  zk_locks shows
#   each of the 10,000 exactly once (it reads the table a chunk at a time),
#   and COMMIT lets go of all of them.
# - The same as session locks: releasing 5,000 one by one with zk_unlock
#   finds each (5,000 true, a name never taken gives false), a transaction
#   lock on a name held as a session lock stacks on it (no request), and
#   zk_unlock_all lets go of the rest.
# - zk_queues with 300 queues reports each queue's local claims and waiting
#   consumers (counted in one pass over the table): a claim held on one
#   queue and a consumer waiting on another show on those rows only.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ZkLockTest;

my $N = 10000;
my $zk = zk_start();
my $node = zk_node('scale', $zk,
	conf => "zklock.max_locks = 12000\nzklock.max_locks_per_backend = 12000\n");
my $LOCKS = '/zklock/locks';

sub sql { return $node->safe_psql('postgres', $_[0]); }

sub wait_entries_free
{
	return wait_until(sub { zk_status_value($node, 'entries_used') eq '0' }, 120, 0.2);
}

# the defaults refuse a session its 257th entry: the test needs the raise
is(sql("SELECT boot_val FROM pg_settings WHERE name = 'zklock.max_locks'"), '1024',
	'zklock.max_locks defaults to 1024');

#
# Transaction locks
#
my $s = $node->background_psql('postgres');
my $req0 = zk_status_value($node, 'requests');
my $rel0 = zk_status_value($node, 'releases');
$s->query_safe('BEGIN');
is($s->query_safe("SELECT count(zk_lock('t-' || i)) FROM generate_series(1, $N) i"), $N,
	"one transaction takes $N locks");
is(zk_status_value($node, 'requests') - $req0, $N, "$N requests, one per lock");
is(sql("SELECT count(*), count(DISTINCT name) FROM zk_locks WHERE state = 'held'"), "$N|$N",
	"zk_locks shows each of the $N locks once");
is(zk_status_value($node, 'entries_used'), $N, "$N entries in use");
my @nodes = zk_lock_nodes($zk, "$LOCKS/t-5000");
is(scalar(@nodes), 1, 'a lock node in ZooKeeper (t-5000)');

my $req1 = zk_status_value($node, 'requests');
my $tok = $s->query_safe("SELECT zk_lock_token('t-5000')");
is($s->query_safe("SELECT zk_lock('t-5000')"), $tok, 're-entrant zk_lock returns the same token');
is($s->query_safe("SELECT zk_lock_shared('t-7')"), $s->query_safe("SELECT zk_lock_token('t-7')"),
	'a shared request rides on the exclusive lock held');
is($s->query_safe("SELECT count(zk_lock('t-' || i)) FROM generate_series(1, $N, 10) i"), $N / 10,
	'taking 1,000 of them again');
is(zk_status_value($node, 'requests') - $req1, 0, 'holds stacked on locks held send no request');

$s->query_safe('COMMIT');
ok(wait_entries_free(), 'COMMIT lets go of every entry');
is(zk_status_value($node, 'releases') - $rel0, $N, "$N releases");
@nodes = zk_lock_nodes($zk, "$LOCKS/t-5000");
is(scalar(@nodes), 0, 'no lock node left (t-5000)');

#
# Session locks
#
$req0 = zk_status_value($node, 'requests');
$rel0 = zk_status_value($node, 'releases');
is($s->query_safe("SELECT count(zk_session_lock('s-' || i)) FROM generate_series(1, $N) i"), $N,
	"one session takes $N session locks");
is(zk_status_value($node, 'requests') - $req0, $N, "$N requests");
$s->query_safe('BEGIN');
$req1 = zk_status_value($node, 'requests');
$s->query_safe("SELECT count(zk_lock('s-' || i)) FROM generate_series(1, $N, 100) i");
is(zk_status_value($node, 'requests') - $req1, 0,
	'transaction locks on names held as session locks stack on them');
$s->query_safe('COMMIT');
is(zk_status_value($node, 'entries_used'), $N, "the $N session locks outlive the transaction");
is($s->query_safe("SELECT count(*) FILTER (WHERE zk_unlock('s-' || i)) FROM generate_series(1, $N, 2) i"),
	$N / 2, 'zk_unlock finds each of 5,000 session locks');
$s->query_safe('SET client_min_messages = error');
is($s->query_safe("SELECT zk_unlock('s-never')"), 'f', 'zk_unlock of a name never taken is false');
is($s->query_safe("SELECT zk_unlock('s-1')"), 'f', 'zk_unlock of a name let go of is false');
ok(wait_until(sub { zk_status_value($node, 'entries_used') == $N / 2 }, 120, 0.2),
	'the worker frees the 5,000 let go of');
is(sql("SELECT count(*) FROM zk_locks WHERE scope = 'session'"), $N / 2,
	'zk_locks shows the 5,000 left');
$s->query_safe('SELECT zk_unlock_all()');
ok(wait_entries_free(), 'zk_unlock_all lets go of the rest');
is(zk_status_value($node, 'releases') - $rel0, $N, "$N releases");

#
# zk_queues: per-queue local counts
#
sql("BEGIN; SELECT count(zk_enqueue('q-' || i, 'x')) FROM generate_series(1, 300) i; COMMIT;");
is(sql("SELECT count(*), sum(items) FROM zk_queues WHERE queue LIKE 'q-%'"), '300|300',
	'zk_queues shows 300 queues of one item each');
# an empty queue: its nodes exist, so zk_queues lists it
sql("SELECT zk_enqueue('q-empty', 'z')");
is(sql("SELECT count(*) FROM zk_dequeue('q-empty')"), 1, 'q-empty emptied');
$s->query_safe('BEGIN');
is($s->query_safe("SELECT count(*) FROM zk_dequeue('q-7')"), 1, 'a claim held on q-7');
my $w = $node->background_psql('postgres');
$w->query_until(qr/waiting/, "\\echo waiting\nSELECT count(*) FROM zk_dequeue('q-empty', '60s');\n");
ok(wait_until(sub { sql("SELECT coalesce(sum(local_waiting), 0) FROM zk_queues") eq '1' }, 30, 0.1),
	'a consumer waits (on q-empty)');
is(sql("SELECT queue, local_claims, local_waiting FROM zk_queues
        WHERE local_claims > 0 OR local_waiting > 0 ORDER BY queue"),
	"q-7|1|0\nq-empty|0|1", 'only q-7 has a local claim, only q-empty a waiting consumer');
is(sql("SELECT count(*) FROM zk_queues WHERE local_claims = 0 AND local_waiting = 0 AND queue LIKE 'q-%'"),
	299, 'the 299 other queues have none');
sql("SELECT zk_enqueue('q-empty', 'y')");
$w->quit;
$s->query_safe('COMMIT');
$s->quit;
ok(wait_entries_free(), 'every entry freed at the end');

$node->stop;
done_testing();
