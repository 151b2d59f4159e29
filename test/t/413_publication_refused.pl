
# 413_publication_refused.pl - a transaction whose zklock work ZooKeeper
# refuses never commits silently with its work stranded.
#
# A gate node that another client gave a child cannot be deleted: ZooKeeper
# refuses a zk_gate_open's delete (NOTEMPTY), and with it the whole
# publishing multi of the transaction, queue items included.
#
#   1. Known before the commit record: a transaction that enqueues an item
#      and opens such a gate fails its COMMIT with 55000 (a lowercase
#      message, a detail and a hint); nothing is published, no transaction
#      node is left, the gate stays closed with the foreign child.
#   2. Known only after it: the publishing multi is held back by the fault
#      proxy (the COMMIT returns with its WARNING after
#      zklock.commit_timeout), the foreign child is created meanwhile, then
#      the multi goes through and is refused.  The publication is kept and
#      tried again: zk_status().publications_blocked says 1, the server log
#      says why and what to do, the transaction node stays, nothing of it is
#      visible (no item, the gate closed).  Once the foreign child is
#      removed the worker publishes it all together within seconds: the
#      item is there, the gate open, no transaction node, the count 0.
#   3. The kept-items count (one exists per queue) goes in the same turn
#      as the transaction node's create: with its reply held by the proxy
#      the node is in ZooKeeper and the COMMIT waits; let through it
#      commits, refused it fails with 53400 and the node is deleted.

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
my $node = zk_node('refused', $p->{hosts},
	session_timeout => '10s',
	connect_timeout => '3s',
	conf => "zklock.commit_timeout = '2s'\n");

my $ROOT = '/zklock';
my $GATES = "$ROOT/gates";
my $TXNS = "$ROOT/txns";
my $Q = "$ROOT/queues";

sub sql { return $node->safe_psql('postgres', $_[0]); }
sub blocked { return zk_status_value($node, 'publications_blocked'); }

sub log_has
{
	my ($re, $from) = @_;
	my $log = slurp_file($node->logfile);
	return substr($log, $from) =~ $re;
}

my $s = new_session($node, name => 's');

#
# 1. refused before the commit record
#
sql("SELECT zk_gate_close('g1')");
ok(zk_exists($zk, "$GATES/g1"), 'g1: closed (its node exists)');
is(scalar(zkq($zk, 'create', "$GATES/g1/foreign", 'other client')), '', 'g1: another client creates a child under it')
  or note zk_tree($zk, $GATES);
ok(zk_exists($zk, "$GATES/g1/foreign"), 'g1: the foreign child is there');

$s->query_safe('BEGIN');
$s->query_safe("SELECT zk_enqueue('gq', 'item1')");
$s->query_safe("SELECT zk_gate_open('g1')");
my $r = $s->query('COMMIT', 30);
is($r->{sqlstate}, '55000', 'g1: COMMIT fails with 55000') or diag explain $r;
like($r->{err}, qr/ERROR:\s+(?:55000:\s+)?cannot open a zookeeper gate whose node has children/, 'g1: lowercase message');
like($r->{err}, qr/DETAIL:\s+The gate node .* has 1 child that zklock did not create/, 'g1: the detail says why');
like($r->{err}, qr/HINT:\s+Remove the other client's children/, 'g1: the hint says what to do');
ok(zk_wait_count($zk, $TXNS, 0, 10), 'g1: no transaction node left');
is(zk_count($zk, "$Q/gq/entries"), 0, 'g1: the item was not published');
ok(zk_exists($zk, "$GATES/g1") && zk_exists($zk, "$GATES/g1/foreign"),
	'g1: the gate is still closed, the foreign child still there');
is(blocked(), '0', 'g1: no publication blocked');

# without the child the same transaction commits
zkq($zk, 'delete', "$GATES/g1/foreign");
$s->query_safe('BEGIN');
$s->query_safe("SELECT zk_enqueue('gq', 'item1')");
$s->query_safe("SELECT zk_gate_open('g1')");
$r = $s->query('COMMIT', 30);
is($r->{sqlstate}, '00000', 'g1: with the child gone the COMMIT succeeds') or diag explain $r;
ok(!zk_exists($zk, "$GATES/g1"), 'g1: open');
is(sql("SELECT string_agg(body, ',') FROM zk_try_dequeue('gq', 10)"), 'item1', 'g1: the item was published');

#
# 2. refused after the commit record: kept, visible to the operator,
# published once the obstacle is gone
#
sql("SELECT zk_gate_close('g2')");
ok(zk_exists($zk, "$GATES/g2"), 'g2: closed');
my $drop = proxy_rule($p, 'drop-requests multi');
my $logpos = -s $node->logfile;
$s->query_safe('BEGIN');
$s->query_safe("SELECT zk_enqueue('gq', 'item2')");
$s->query_safe("SELECT zk_gate_open('g2')");
$r = $s->query('COMMIT', 30);
is($r->{sqlstate}, '00000', 'g2: COMMIT succeeds (the gate had no child before the commit record)')
  or diag explain $r;
like($r->{err}, qr/WARNING:.*not yet visible/, 'g2: with a WARNING: the publishing multi did not get through');
is(zk_count($zk, $TXNS), 1, 'g2: the transaction node is there');
zkq($zk, 'create', "$GATES/g2/foreign", 'other client');
ok(zk_exists($zk, "$GATES/g2/foreign"), 'g2: another client creates a child under the gate meanwhile');
proxy_cmd($p, "clear $drop");
proxy_cmd($p, 'cut-all');

ok(wait_until(sub { (blocked() // '') eq '1' }, 30), 'g2: zk_status().publications_blocked is 1')
  or diag 'publications_blocked: ' . (blocked() // 'undef');
ok(wait_until(sub { log_has(qr/WARNING:.*zookeeper refuses to publish the work of committed transaction \d+: zookeeper cannot delete \Q$GATES\E\/g2: another client created children under it/, $logpos) }, 10),
	'g2: the server log says which transaction and why');
ok(log_has(qr/HINT:\s+Remove what blocks it/, $logpos), 'g2: ... and what to do');
sleep 3;	# a few retries
is(zk_count($zk, $TXNS), 1, 'g2: the transaction node stays while ZooKeeper refuses it');
is(zk_count($zk, "$Q/gq/entries"), 0, 'g2: its item is not visible');
ok(zk_exists($zk, "$GATES/g2"), 'g2: the gate is still closed');
is(sql('SELECT state FROM zk_status()'), 'connected', 'g2: the worker serves meanwhile');
is(sql("SELECT count(*) FROM zk_try_dequeue('other')"), '0', 'g2: other requests are served');

zkq($zk, 'delete', "$GATES/g2/foreign");
my $t0 = time();
ok(zk_wait_count($zk, $TXNS, 0, 30), 'g2: once the child is gone the transaction is published');
note sprintf('published %.1f s after the child was removed', time() - $t0);
ok(!zk_exists($zk, "$GATES/g2"), 'g2: the gate is open');
is(sql("SELECT string_agg(body, ',') FROM zk_try_dequeue('gq', 10)"), 'item2', 'g2: the item is there');
ok(wait_until(sub { (blocked() // '') eq '0' }, 10), 'g2: publications_blocked is 0 again');
ok(log_has(qr/LOG:.*published the work of transaction \d+ that zookeeper had refused/, $logpos),
	'g2: the server log says it was published');
is(zk_count($zk, $TXNS), 0, 'no transaction node left');

#
# 3. the kept count goes beside the transaction node's create (issue 40):
# the proxy holds the replies to the count's exists for 1.5 s (within
# zklock.commit_timeout, 2 s); the node is in
# ZooKeeper meanwhile while the COMMIT still waits.  Let through, the COMMIT
# succeeds; refused (zklock.max_kept_items), it fails with 53400 once the
# count is in, and the rollback deletes the node: nothing is published.
#
sub held_count
{
	my ($tag, $n) = @_;
	my $rule = proxy_rule($p, 'delay-replies exists 1500');
	$s->send("BEGIN; SELECT count(zk_enqueue('$tag', 'i' || g)) FROM generate_series(1, $n) g; COMMIT");
	my $seen = wait_until(sub { zk_count($zk, $TXNS) == 1 }, 1.2, 0.02);
	my $early = defined $s->poll;
	proxy_cmd($p, "clear $rule");
	my $r = $s->wait(30);
	ok($seen, "$tag: the transaction node was created while the count's reply was held")
	  or diag zk_tree($zk, $TXNS);
	ok(!$early, "$tag: the COMMIT waited for the count");
	return $r;
}

ok(wait_until(sub { sql('SELECT state FROM zk_status()') eq 'connected' }, 30), '3: connected');
$r = held_count('kq3', 2);
is($r->{sqlstate}, '00000', 'kq3: let through, the COMMIT succeeds') or diag explain $r;
is(zk_count($zk, "$Q/kq3/entries"), 2, 'kq3: both items published');
is(zk_count($zk, $TXNS), 0, 'kq3: no transaction node left');
$s->query_safe('SET zklock.max_kept_items = 3');
$r = held_count('kq3', 2);
is($r->{sqlstate}, '53400', 'kq3: 2 more of 3 kept: 53400 once the count is in') or diag explain $r;
like($r->{err}, qr/DETAIL:.*keeps 2 items under .*adds 2.*nothing of it is published/s,
	'kq3: the detail gives the count');
ok(zk_wait_count($zk, $TXNS, 0, 10), 'kq3: the rollback deleted the transaction node');
is(zk_count($zk, "$Q/kq3/entries"), 2, 'kq3: nothing of it was published');
$s->query_safe('RESET zklock.max_kept_items');

$s->quit;
$node->stop;
done_testing();
