
# 336_queue_late_create.pl - a transaction node's create that went
# unanswered and lands after the publication must not publish the items
# again (issue 26's fault run).
#
# A 600 s fault run delivered an item twice: the worker's create of a
# transaction node went to a follower that was then cut off from the
# quorum; the worker reconnected elsewhere, made the node again, and the
# transaction committed and was published (the publishing multi deletes the
# node).  The follower's create was applied after that, so the node was
# there again, genuine and signed, and the settling pass of the next start
# published it a second time.
#
# Now a publication whose node had a create go unanswered keeps the node
# (a small signed "kept" node with one child) until the session that could
# still send that create is gone for certain; a late create fails on it.
#
# Here the late create is played by a ZooKeeper client with the node's own
# bytes (read while the publication was held back); the unanswered create
# by the proxy, which lets the create land and cuts the connection before
# its reply.  Without the fix the copy is created and the next start
# publishes its item again (the entry count below becomes 2).

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use ZkLockTest;
use ZkProxy;

my $zk = zk_start();
my $p = proxy_start($zk);
my $ROOT = '/zklock';
my $Q = "$ROOT/queues";
my $TXNS = "$ROOT/txns";

my $A = zk_node('lateA', $p->{hosts}, session_timeout => '6s', connect_timeout => '3s',
	conf => "zklock.commit_timeout = '2s'\n");

sub sql { return $A->safe_psql('postgres', $_[0]); }
sub entries { my @l = zk_children($zk, "$Q/$_[0]/entries"); return scalar @l; }

# a client copying nodes (test/node_copy.py)
sub tool { return node_copy($zk, @_); }

# The round: the transaction node's create lands and its reply is lost; the
# publication is held back while its bytes are read; then it goes.
sub unanswered_round
{
	my ($queue, $body) = @_;
	sql("SELECT zk_enqueue('$queue', 'warm')");    # parents known
	is(sql("SELECT body FROM zk_try_dequeue('$queue')"), 'warm', "$queue: warmed up");
	my $n0 = zk_count($zk, $TXNS);
	my $cut = proxy_rule($p, 'cut-after-request create');
	my $drop = proxy_rule($p, 'drop-requests multi');
	my $s = new_session($A, name => "s_$queue");
	my $r = $s->query("BEGIN; SELECT zk_enqueue('$queue', '$body'); COMMIT", 30);
	like($r->{err} // '', qr/not yet visible/,
		"$queue: committed; its publication is held back") or diag explain $r;
	my $st = proxy_stats($p);
	ok(($st->{fired_ids}{$cut} // 0) >= 1, "$queue: the create landed and its reply was lost");
	my @txn = grep { $_ ne '' } zk_children($zk, $TXNS);
	is(scalar @txn, $n0 + 1, "$queue: one transaction node");
	my $txn = $txn[-1];
	my $saved = tool('save', "$TXNS/$txn");
	ok(length($saved) > 0, "$queue: its bytes were read");
	proxy_cmd($p, "clear $drop");
	proxy_cmd($p, 'cut-all');    # the held multi fails; the worker sends it again
	$s->quit;
	ok(wait_until(sub { entries($queue) == 1 }, 30), "$queue: the item was published");
	return ($txn, $saved);
}

# ---- kept: a late create fails; the item is there once ----
my ($txn, $saved) = unanswered_round('lq1', 'one');
ok(zk_exists($zk, "$TXNS/$txn"), 'the published node is kept');
is(tool('magic', "$TXNS/$txn"), 'ZKQK', '... as a kept node');
ok(zk_exists($zk, "$TXNS/$txn/kept"), '... with its child');
is(tool('restore', "$TXNS/$txn", $saved), 'exists', 'a late create with the same bytes fails');
is(entries('lq1'), 1, 'one item');

# ---- a new session of the same run: kept until the old one is surely gone ----
my $w = worker_pid($A);
sql("SELECT pg_terminate_backend($w)");
ok(defined wait_for_worker($A, $w), 'a new worker started');
ZkLockTest::wait_connected($A, 'A did not connect again');
sleep 3;
ok(zk_exists($zk, "$TXNS/$txn"), 'the next settling pass keeps it (the old session may live)');
is(entries('lq1'), 1, 'the item was not published again');
# 2 x 6 s + 10 s after the new session began
ok(wait_until(sub { !zk_exists($zk, "$TXNS/$txn") }, 90),
	'the kept node is deleted once the old session is surely gone');
is(entries('lq1'), 1, 'still one item');
is(sql("SELECT string_agg(body, ',') FROM zk_try_dequeue('lq1', 10)"), 'one',
	'it is delivered once');

# ---- after a crash, the next run's settling pass ----
($txn, $saved) = unanswered_round('lq2', 'two');
ok(zk_exists($zk, "$TXNS/$txn/kept"), 'kept again');
$A->stop('immediate');
is(tool('restore', "$TXNS/$txn", $saved), 'exists', 'a late create while the server is down fails');
$A->start;
ZkLockTest::wait_connected($A, 'A did not connect after the crash');
ok(wait_until(sub { !zk_exists($zk, "$TXNS/$txn") }, 90),
	'the next run took the crashed one over and deleted the kept node');
is(entries('lq2'), 1, 'the item was not published again');
is(sql("SELECT string_agg(body, ',') FROM zk_try_dequeue('lq2', 10)"), 'two',
	'it is delivered once');
is(tool('restore', "$TXNS/$txn", $saved), 'created',
	'(a copy written now, after every session of the crashed run ended, is what 526 is about)');
zkq($zk, 'delete', "$TXNS/$txn");

# ---- a publication whose creates were answered keeps nothing ----
sql("SELECT zk_enqueue('lq3', 'three')");
ok(wait_until(sub { entries('lq3') == 1 }, 10), 'published');
is(zk_count($zk, $TXNS), 0, 'no transaction node is kept');

proxy_stop($p);
zk_stop($zk);
done_testing();
