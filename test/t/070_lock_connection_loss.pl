
# 070_lock_connection_loss.pl - a create whose reply is lost with the connection.
#
# ZooKeeper is frozen (SIGSTOP) after zk_lock() has sent its create: the
# worker's client times the connection out (2/3 of the session timeout) while
# the session stays alive, and the create's fate is unknown.  After the thaw
# the worker reconnects to the same session and finds its node again by the
# guid in its name: no orphan, no second entry.  A backend that gave up
# during the outage leaves nothing behind either.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use ZkLockTest;

my $zk = zk_start();
my $node = zk_node('connloss', $zk,
	session_timeout => '9s',
	connect_timeout => '60s');

my $sid = zk_status_value($node, 'session_id');
ok($sid ne '', "worker has session $sid");

# warm the parents up so that the create below is the only request in doubt
is($node->safe_psql('postgres', "SELECT zk_try_lock('loss')"), 't', 'lock free at first');

#
# 1. the waiter keeps waiting through the outage and gets exactly one node
#
my $s = new_session($node, name => 'inflight');
$s->query_safe('BEGIN');
zk_freeze($zk);
my $t0 = time();
$s->send("SELECT zk_lock('loss')");
wait_for_backend_active($node, $s->{pid}, '%zk_lock%');

my $st = wait_for_state($node, 'suspended', 30);
is($st->{state}, 'suspended', sprintf('connection given up while frozen (%.1fs)', time() - $t0));
zk_thaw($zk);

my $r = $s->wait(40);
ok($r->{done}, sprintf('zk_lock returned %.1fs after the freeze', time() - $t0));
is($r->{sqlstate}, '00000', 'the lock was granted after reconnecting') or diag $r->{err};
like($r->{out} // '', qr/^\d+$/, "token $r->{out}");

is(zk_status_value($node, 'session_id'), $sid, 'same ZooKeeper session: it was suspended, not expired');
is(zk_count($zk, '/zklock/locks/loss'), 1, 'exactly one contender node: no orphan, no double entry');
my ($child) = zk_children($zk, '/zklock/locks/loss');
my $tree = zk_tree($zk, '/zklock/locks/loss');
like($tree, qr/\Q$child\E/, "node $child listed");
is(try_lock_elsewhere($node, 'loss'), 'f', 'another session cannot take it');

$s->query_safe('COMMIT');
my ($ok, $secs) = zk_wait_count($zk, '/zklock/locks/loss', 0, 5);
ok($ok, sprintf('node deleted after COMMIT (%.1fs)', $secs));
ok(zk_status_value($node, 'reconnects') >= 1, 'a reconnect was counted');

#
# 2. a backend that gives up during the outage leaves no node behind, even
#    if its create is carried out when ZooKeeper wakes up
#
my $g = new_session($node, name => 'giveup');
$g->query_safe("SET zklock.connect_timeout = '2s'");
$g->query_safe('BEGIN');
zk_freeze($zk);
$t0 = time();
$r = $g->query("SELECT zk_lock('gone')", 30);
my $took = time() - $t0;
is($r->{sqlstate}, '08006', 'the request failed with 08006') or diag $r->{err};
ok($took < 15, sprintf('and did not hang (%.1fs)', $took));
$g->query('ROLLBACK', 10);
wait_for_state($node, 'suspended', 30);
zk_thaw($zk);
$st = wait_for_state($node, 'connected', 30);
is($st->{state}, 'connected', 'reconnected after the thaw');
($ok, $secs) = zk_wait_count($zk, '/zklock/locks/gone', 0, 10);
ok($ok, sprintf('no node left for the abandoned request (%.1fs)', $secs));
is(try_lock_elsewhere($node, 'gone'), 't', 'the lock is free');

# everything settled
ok(wait_until(sub { zk_status_value($node, 'entries_used') eq '0' }, 10),
	'no shared-memory entry left');

$g->quit;
$s->quit;
$node->stop;
done_testing();
