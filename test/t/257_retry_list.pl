
# 257_retry_list.pl - requests put on the worker's retry list while the
# session is suspended are all served once it is back, whatever one of
# them does to the others when it is driven.
#
# The worker drives its retry list when the session is usable again.  A
# drive may retry another entry (a released claim hands its item to the
# next waiter of the queue) or free one.  The pass once walked a detached
# chain: an entry that a drive put back on the list cut the chain there,
# and every request behind it was on no list at all -- a lock request made
# while ZooKeeper was down was never sent, and waited until its timeout
# although the lock was free.  Here, with ZooKeeper stopped (the session
# suspended, not expired): a consumer holds the only item, two consumers
# wait for it, the holder rolls back, the first waiter is cancelled, and a
# lock request and a second queue's consumer arrive; ZooKeeper comes back.
# The lock is granted, the second waiter gets the item, the other queue's
# consumer gets its item, and zk_status() answers within 1 s throughout.
# Then a double barrier's zk_barrier_leave(name, '0') while another member
# is still in answers false at once, and the member left is gone from
# ZooKeeper (its partner's leave then succeeds).

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use ZkLockTest;

my $zk = zk_start();
my $node = zk_node('retry', $zk,
	session_timeout => '30s',
	connect_timeout => '60s');

$node->safe_psql('postgres', "SELECT zk_enqueue('rq', 'A'); SELECT zk_enqueue('rq2', 'B')");

my $hold = new_session($node, name => 'hold');
$hold->query_safe('BEGIN');
is($hold->query_safe("SELECT body FROM zk_dequeue('rq', '5s')"), 'A', 'the holder claims A');
my $rq2 = new_session($node, name => 'rq2hold');
$rq2->query_safe('BEGIN');
is($rq2->query_safe("SELECT body FROM zk_dequeue('rq2', '5s')"), 'B', 'another holder claims B');

my $w1 = new_session($node, name => 'w1');
my $w2 = new_session($node, name => 'w2');
$w1->send("BEGIN; SELECT body FROM zk_dequeue('rq', '300s')");
sleep 0.3;
$w2->send("BEGIN; SELECT body FROM zk_dequeue('rq', '300s')");
sleep 0.3;
my $w3 = new_session($node, name => 'w3');
$w3->send("BEGIN; SELECT body FROM zk_dequeue('rq2', '300s')");
sleep 0.3;
ok($w1->running && $w2->running && $w3->running, 'three consumers wait');

# ZooKeeper stops: the session is suspended
zk_stop($zk);
is(wait_for_state($node, 'suspended', 30)->{state}, 'suspended', 'the session is suspended');

$hold->query_safe('ROLLBACK');
$rq2->query_safe('ROLLBACK');
$node->safe_psql('postgres', 'SELECT pg_cancel_backend(' . $w1->pid . ')');
my $r = $w1->wait(10);
is($r->{sqlstate}, '57014', 'the first waiter is cancelled');
my $l = new_session($node, name => 'locker');
$l->send("BEGIN; SELECT zk_lock('rl', '300s') > 0");
sleep 0.5;
ok($l->running, 'a lock request waits for the session');

zk_restart($zk);
is(wait_for_state($node, 'connected', 60)->{state}, 'connected', 'the session is back');
my $t0 = time();
$r = $l->wait(20);
ok($r->{done} && $r->{sqlstate} eq '00000', sprintf('the lock is granted (%.1f s after the reconnect)', time() - $t0))
  or diag explain $r;
$r = $w2->wait(20);
is($r->{out} // '', 'A', 'the second waiter gets A');
$r = $w3->wait(20);
is($r->{out} // '', 'B', "the other queue's consumer gets B");
my $st = new_session($node, name => 'status');
$r = $st->query('SELECT state FROM zk_status()', 10);
ok($r->{done} && $r->{elapsed} < 1, 'zk_status() answers within 1 s');
$_->query('COMMIT', 10) foreach ($w2, $w3, $l);
is(zk_wait_count($zk, '/zklock/queues/rq/entries', 0, 10), 1, 'A consumed');
is(zk_wait_count($zk, '/zklock/queues/rq2/entries', 0, 10), 1, 'B consumed');

# zk_barrier_leave(name, '0') while another member is in
my $m1 = new_session($node, name => 'm1');
my $m2 = new_session($node, name => 'm2');
$m1->send("SELECT zk_barrier_enter('rb', 2, '10s')");
is($m2->query_safe("SELECT zk_barrier_enter('rb', 2, '10s')"), 't', 'the barrier opens');
is($m1->wait(10)->{out}, 't', '... for both');
$r = $m2->query("SELECT zk_barrier_leave('rb', '0')", 30);
ok($r->{done} && $r->{out} eq 'f' && $r->{elapsed} < 2,
	sprintf("leave '0' while another member is in: false at once (%.2f s)", $r->{elapsed} // -1))
  or diag explain $r;
is($m1->query_safe("SELECT zk_barrier_leave('rb', '10s')"), 't',
	"the other member's leave succeeds: the first is gone");
is(zk_wait_count($zk, '/zklock/barriers/rb', 0, 10), 1, 'no member node left');

$_->quit foreach ($hold, $rq2, $w1, $w2, $w3, $l, $st, $m1, $m2);
done_testing();
