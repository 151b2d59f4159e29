
# 526_replayed_nodes.pl - a genuine, signed transaction node re-created after
# its publication must not be published again (issue 23, hostile data).
#
# The MAC of a transaction node binds its path and content, so a node cannot
# be moved or edited.  But a client that may write under the root can read a
# transaction node while it exists (between the backend's write and the
# publication), keep its bytes, and create it again once it was published
# and deleted.  The settling pass (at every new ZooKeeper session, and at a
# start) found a node whose MAC verifies and whose transaction committed, and
# published its items a second time and replayed its gate operations.
#
# Now a settling pass publishes a committed node of its own run only if the
# entry that published it gave it up (this run's entries publish their own
# nodes): a node created again during the run is left alone and logged.  A
# node of a crashed run created again before the next start is still
# published again (TODO below): the next run cannot tell it from one the
# crashed run left.

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
my $GATES = "$ROOT/gates";

my $A = PostgreSQL::Test::Cluster->new('replayA');
$A->init;
$A->append_conf('postgresql.conf',
	zk_conf($p->{hosts}, session_timeout => '6s', connect_timeout => '3s',
		conf => "zklock.commit_timeout = '2s'\n"));
$A->start;
$A->safe_psql('postgres', 'CREATE EXTENSION zklock');
ZkLockTest::wait_connected($A, 'A did not connect');

sub sql { return $A->safe_psql('postgres', $_[0]); }

# a client copying nodes (test/node_copy.py)
sub tool { return node_copy($zk, @_); }

sub restart_worker
{
	my $w = worker_pid($A);
	sql("SELECT pg_terminate_backend($w)");
	ok(defined wait_for_worker($A, $w), 'a new worker started');
	ZkLockTest::wait_connected($A, 'A did not connect again');
}

# ---- a transaction enqueues an item and opens a gate; its node is read ----
sql("SELECT zk_gate_close('rg')");
my $drop = proxy_rule($p, 'drop-requests multi');
my $s = new_session($A, name => 's');
my $r = $s->query("BEGIN; SELECT zk_enqueue('rpq', 'once'); SELECT zk_gate_open('rg'); COMMIT", 10);
like($r->{err} // '', qr/not yet visible/, 'the publication of the committed transaction is held back')
  or diag explain $r;
my ($txn) = zk_children($zk, $TXNS);
ok(defined $txn, "its transaction node is $TXNS/$txn");
my $saved = tool('save', "$TXNS/$txn");
ok(length($saved) > 0, 'a client read its bytes');
proxy_cmd($p, "clear $drop");
$s->quit;

# published (by the worker, or by the settling pass of a new session)
restart_worker();
ok(wait_until(sub { !zk_exists($zk, "$TXNS/$txn") }, 30), 'the transaction node was published');
is(sql("SELECT string_agg(body, ',') FROM zk_try_dequeue('rpq', 10)"), 'once',
	'its item was published once, and is consumed');
ok(!zk_exists($zk, "$GATES/rg"), 'the gate was opened');
sql("SELECT zk_gate_close('rg')");
ok(zk_exists($zk, "$GATES/rg"), 'the gate is closed again');

# ---- the node is created again; the next settling pass ----
is(tool('restore', "$TXNS/$txn", $saved), 'created', 'a client created the node again, same bytes');
my $logpos = -s $A->logfile;
restart_worker();
ok(wait_until(sub { substr(slurp_file($A->logfile), $logpos) =~ /this run published its transaction already/ }, 30),
	'the settling pass of the new session judged the node');
is(zk_count($zk, "$Q/rpq/entries"), 0, 'the replayed node published no item again (new session)');
ok(zk_exists($zk, "$GATES/rg"), 'the gate stays closed (new session)');

ok(zk_exists($zk, "$TXNS/$txn"), 'the replayed node is left alone');
like(substr(slurp_file($A->logfile), $logpos),
	qr/left the queue transaction node \Q$TXNS\E\/\Q$txn\E alone: this run published its transaction already/,
	'the log names it');

# ---- a claim written again after a drop let its item's name be used again ----
sql("SELECT zk_enqueue('crq', 'c1')");
my $cs = new_session($A, name => 'cs');
$cs->query_safe('BEGIN');
is($cs->query_safe("SELECT body FROM zk_dequeue('crq', '5s')"), 'c1', 'c1 dequeued');
my ($cnode) = zk_children($zk, "$Q/crq/taken");
my $claim = tool('save', "$Q/crq/taken/$cnode");
$cs->query_safe('COMMIT');
$cs->quit;
ok(wait_until(sub { !zk_exists($zk, "$Q/crq/taken/$cnode") }, 10), 'c1 consumed at COMMIT');
ok(wait_until(sub { ($A->psql('postgres', "SELECT zk_queue_drop('crq')"))[1] eq 't' }, 20),
	'the queue was dropped');
sql("SELECT zk_enqueue('crq', 'c2')");
my ($c2node) = zk_children($zk, "$Q/crq/entries");
is($c2node, $cnode, "the new item c2 has c1's name ($cnode)");
is(tool('restore', "$Q/crq/taken/$cnode", $claim), 'created', "a client wrote c1's claim again on it");
$logpos = -s $A->logfile;
restart_worker();
ok(wait_until(sub { substr(slurp_file($A->logfile), $logpos) =~ /left the queue claim \S+ alone: this run ended its transaction's claims already/ }, 30),
	'the settling pass left the copied claim alone');
ok(zk_exists($zk, "$Q/crq/entries/$cnode"), 'c2 was not consumed');
zkq($zk, 'delete', "$Q/crq/taken/$cnode");
is(sql("SELECT string_agg(body, ',') FROM zk_try_dequeue('crq', 10)"), 'c2',
	'c2 is served once the copied claim is gone');

# ---- and after a crash (the run is settled by the next start) ----
# Not fixed: the next run settles the crashed run's nodes, and cannot tell a
# node the crashed run published from one it left (the fix needs the node's
# creation, its czxid, bound to the WAL; see the README, "The cluster's
# key").
zkq($zk, 'delete', "$TXNS/$txn") if zk_exists($zk, "$TXNS/$txn");
$A->stop('immediate');
is(tool('restore', "$TXNS/$txn", $saved), 'created', 'created again while the server is down');
$A->start;
ZkLockTest::wait_connected($A, 'A did not connect after the crash');
ok(wait_until(sub { !zk_exists($zk, "$TXNS/$txn") }, 30), 'the next start settled the crashed run');
TODO:
{
	local $TODO = 'a node of a crashed run created again before the next start is published again';
	is(zk_count($zk, "$Q/rpq/entries"), 0, 'the replayed node published no item again (after a crash)');
	ok(zk_exists($zk, "$GATES/rg"), 'the gate stays closed (after a crash)');
}

proxy_stop($p);
zk_stop($zk);
done_testing();
