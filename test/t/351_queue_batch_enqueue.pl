
# 351_queue_batch_enqueue.pl - zk_enqueue of an array (issue 38, "Batches"),
# checked through ZooKeeper itself (test/zkq.py, kazoo).
#
# - 1,000 items in one call: nothing in ZooKeeper before COMMIT; when COMMIT
#   returns, exactly 1,000 entry nodes, all created by one multi (one
#   czxid), named entry-100-..., no transaction node left; their payloads in
#   array order (sampled in ZooKeeper, all of them through zk_dequeue, which
#   hands them out in that order).  bytea[] with a priority: entry-007-...,
#   the bytes whole.
# - ROLLBACK after a 1,000-element call, and ROLLBACK TO SAVEPOINT after
#   one: no node at all (no entry, no transaction node).
# - One bad element fails the call with its SQLSTATE, and none of the
#   call's elements is published, while the items of the same transaction's
#   earlier calls (kept by a savepoint around the failed call) are, in
#   order: a NULL element (22004), an element over zklock.max_item_size
#   (54000), one item past 1,024 for the queue in the transaction (54000,
#   after 1,000 items of earlier calls), a two-dimensional array (2202E).
# - An empty array adds nothing: a transaction with only that leaves no node.
# - PUBLIC may not execute the array forms; the group produce holds them.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ZkLockTest;

my $zk = zk_start();
my $node = zk_node('batch', $zk, session_timeout => '10s', connect_timeout => '5s');

my $Q = '/zklock/queues';
my $TXNS = '/zklock/txns';

# entry nodes of queue $q in ZooKeeper (0 when it has none)
sub entries { return zk_count($zk, "$Q/$_[0]/entries"); }

my $S = new_session($node, name => 'S');

#
# 1,000 items in one call, published by one multi at COMMIT
#
$S->query_safe('BEGIN');
$S->query_safe(
	"SELECT zk_enqueue('batch', array_agg('item-' || lpad(i::text, 4, '0') ORDER BY i))"
	  . " FROM generate_series(1, 1000) i");
is(entries('batch'), 0, 'nothing of an open transaction is in ZooKeeper');
is(zk_count($zk, $TXNS), 0, 'no transaction node before COMMIT');
$S->query_safe('COMMIT');
# no wait: COMMIT returns once ZooKeeper holds the items
is(entries('batch'), 1000, 'COMMIT of a 1,000-element array: 1,000 entry nodes in ZooKeeper');
is(zk_count($zk, $TXNS), 0, 'no transaction node left');
my @e = zk_nodes_of($zk, "$Q/batch/entries");
my %czxids = map { $_->{czxid} => 1 } @e;
is(scalar(keys %czxids), 1, 'all of them created by one multi (one czxid)');
is(scalar(grep { $_->{name} =~ /^entry-100-\d{10}$/ && $_->{owner} eq '0x0' } @e), 1000,
	'persistent, named entry-100-<10 digits>');
# in ZooKeeper, the sequence follows the array (a sample: 1,000 gets are slow)
for my $k (0, 1, 499, 998, 999)
{
	is(zk_get($zk, "$Q/batch/entries/$e[$k]->{name}"), sprintf('item-%04d', $k + 1),
		"entry " . ($k + 1) . " of the sequence holds element " . ($k + 1));
}
is( $S->query_safe(
		"BEGIN; SELECT count(*) || ' ' || bool_and(body = 'item-' || lpad(n::text, 4, '0'))"
		  . " FROM zk_dequeue('batch', '5s', 1000) WITH ORDINALITY AS d(msg_id, priority, enqueued_at, payload, body, attempts, origin, origin_msg_id, origin_attempts, n);"
		  . " COMMIT"),
	'1000 true', 'zk_dequeue hands the 1,000 items out in array order');
ok(scalar(zk_wait_count($zk, "$Q/batch/entries", 0, 30)), 'consumed: no entry left');
is(zk_count($zk, "$Q/batch/taken"), 0, 'no claim left');

# bytea[] with a priority
$S->query_safe("BEGIN; SELECT zk_enqueue('batch', ARRAY['\\x00ff'::bytea, '\\x0102'::bytea], 7); COMMIT");
@e = zk_nodes_of($zk, "$Q/batch/entries");
is(join(',', map { $_->{name} =~ /^entry-(\d{3})-/ ? $1 : '?' } @e), '007,007',
	'bytea[] with priority 7: two entry-007 nodes');
is($S->query_safe("SELECT string_agg(encode(payload, 'hex'), ',') FROM zk_queue_peek('batch')"),
	'00ff,0102', 'the bytes whole, in array order');
is($S->query_safe("SELECT zk_queue_purge('batch')"), '2', 'purged');

#
# ROLLBACK, ROLLBACK TO SAVEPOINT: no node
#
$S->query_safe('BEGIN');
$S->query_safe("SELECT zk_enqueue('batch-rb', array_agg('rb-' || i)) FROM generate_series(1, 1000) i");
$S->query_safe('ROLLBACK');
is(entries('batch-rb'), 0, 'ROLLBACK of a 1,000-element array: no entry node');
is(zk_count($zk, $TXNS), 0, 'and no transaction node');
$S->query_safe('BEGIN');
$S->query_safe('SAVEPOINT s');
$S->query_safe("SELECT zk_enqueue('batch-rb', array_agg('rb-' || i)) FROM generate_series(1, 1000) i");
$S->query_safe('ROLLBACK TO SAVEPOINT s');
$S->query_safe('COMMIT');
is(entries('batch-rb'), 0, 'ROLLBACK TO SAVEPOINT, then COMMIT: no entry node');
is(zk_count($zk, $TXNS), 0, 'and no transaction node');
$S->query_safe("BEGIN; SELECT zk_enqueue('batch-rb', ARRAY[]::text[]); COMMIT");
is(entries('batch-rb'), 0, 'an empty array adds nothing');
is(zk_count($zk, $TXNS), 0, 'and its transaction leaves no node');

#
# One bad element: none of the call's elements, the earlier calls' items kept
#
# Each case: earlier calls put @before into queue $q, then a savepoint, the
# bad call (expected SQLSTATE), ROLLBACK TO SAVEPOINT, one more good item,
# COMMIT; ZooKeeper then holds exactly the earlier items and the last one.
sub bad_call
{
	my ($q, $before_sql, $n_before, $bad_sql, $state, $msg_re, $what) = @_;
	$S->query_safe('BEGIN');
	$S->query_safe($before_sql);
	$S->query_safe('SAVEPOINT s');
	my $r = $S->query($bad_sql);
	is($r->{sqlstate}, $state, "$what: the call fails with $state");
	like($r->{err}, $msg_re, "$what: the message says why");
	$S->query_safe('ROLLBACK TO SAVEPOINT s');
	$S->query_safe("SELECT zk_enqueue('$q', ARRAY['last'])");
	$S->query_safe('COMMIT');
	is(entries($q), $n_before + 1,
		"$what: ZooKeeper holds the $n_before earlier items and the last, none of the failed call's");
	my $bodies = $S->query_safe(
		"SELECT count(*) FILTER (WHERE body LIKE 'bad%') || ' ' || (array_agg(body))[$n_before + 1]"
		  . " FROM zk_queue_peek('$q', 2000)");
	is($bodies, '0 last', "$what: no element of the failed call, the last item last");
	is(zk_count($zk, $TXNS), 0, "$what: no transaction node left");
	$S->query_safe("SELECT zk_queue_purge('$q')");
}

bad_call('batch-null',
	"SELECT zk_enqueue('batch-null', ARRAY['one', 'two']); SELECT zk_enqueue('batch-null', 'three')", 3,
	"SELECT zk_enqueue('batch-null', ARRAY['bad-1', 'bad-2', NULL, 'bad-4'])",
	'22004', qr/zklock payload must not be null/, 'a NULL element');
bad_call('batch-big',
	"SELECT zk_enqueue('batch-big', ARRAY['one', 'two'])", 2,
	"SELECT zk_enqueue('batch-big', ARRAY['bad-1', 'bad-' || repeat('x', 20000), 'bad-3'])",
	'54000', qr/larger than zklock\.max_item_size/, 'an element over zklock.max_item_size');
bad_call('batch-many',
	"SELECT zk_enqueue('batch-many', array_agg('before-' || i ORDER BY i)) FROM generate_series(1, 1000) i", 1000,
	"SELECT zk_enqueue('batch-many', array_agg('bad-' || i)) FROM generate_series(1, 25) i",
	'54000', qr/too many zklock queue items for one queue in this transaction/,
	'the 1,025th item of the queue in the transaction');
bad_call('batch-dims',
	"SELECT zk_enqueue('batch-dims', ARRAY['one'])", 1,
	"SELECT zk_enqueue('batch-dims', ARRAY[['bad-1', 'bad-2'], ['bad-3', 'bad-4']])",
	'2202E', qr/zklock payload array must have one dimension/, 'a two-dimensional array');

# a failed call without a savepoint: the transaction publishes nothing
$S->query_safe('BEGIN');
$S->query_safe("SELECT zk_enqueue('batch-abort', ARRAY['one', 'two'])");
my $r = $S->query("SELECT zk_enqueue('batch-abort', ARRAY['bad', NULL])");
is($r->{sqlstate}, '22004', 'a NULL element without a savepoint');
$S->query('COMMIT');
is(entries('batch-abort'), 0, 'the failed transaction publishes nothing');
is(zk_count($zk, $TXNS), 0, 'and leaves no transaction node');

#
# Privileges: not PUBLIC's; in the group produce
#
is( $S->query_safe(
		"SELECT string_agg(has_function_privilege('public', f, 'EXECUTE')::text, ',')"
		  . " FROM unnest(ARRAY['zk_enqueue(text,bytea[],integer)', 'zk_enqueue(text,text[],integer)']) f"),
	'false,false', 'PUBLIC may not execute the array forms');
is( $S->query_safe(
		"SELECT string_agg(object, ' ' ORDER BY object) FROM zk_privilege_groups()"
		  . " WHERE group_name = 'produce' AND object LIKE '%.zk_enqueue(%[],integer)'"),
	'public.zk_enqueue(text,bytea[],integer) public.zk_enqueue(text,text[],integer)',
	'the group produce holds them');
$S->query_safe('CREATE ROLE batch_producer');
$S->query_safe("SELECT zk_grant('produce', 'batch_producer')");
$S->query_safe('SET ROLE batch_producer');
$S->query_safe("BEGIN; SELECT zk_enqueue('batch-role', ARRAY['r1', 'r2']); COMMIT");
$S->query_safe('RESET ROLE');
is(entries('batch-role'), 2, 'a role granted produce enqueues an array');
$S->query_safe("SELECT zk_queue_purge('batch-role')");

$S->quit;
$node->stop;
zk_stop($zk);
done_testing();
