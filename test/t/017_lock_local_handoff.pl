# 017_lock_local_handoff.pl - a lock let go by one backend is handed to the
# next waiter of the same cluster as its delete is sent, without the round
# trip of the waiter's watch and listing (issue 40; lock_worker.c, "handing
# a released lock to the next local waiter").  Seen from outside: the waiter
# is granted while ZooKeeper is frozen.  And what must not change:
#   1. the handoff itself, its token larger than the last one, the node
#      deleted once ZooKeeper is back;
#   2. a waiter of another cluster queued in between goes first (FIFO
#      across clusters): nobody is handed the lock past it;
#   3. every reader waiting for the writer is granted, a writer behind
#      them is not;
#   4. a backend that still holds the lock in session scope hands nothing
#      on when its transaction's hold ends;
#   5. a writer whose predecessor is another waiter (not the holder) is not
#      handed the lock when the holder lets go.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ZkLockTest;

my $zk = zk_start();
my $node = zk_node('hand1', $zk, session_timeout => '30s');
my $other = zk_node('hand2', $zk, session_timeout => '30s');

# queue $s behind $n-1 contenders of $lock: send it, wait for its node
sub queue_up
{
	my ($s, $sql, $lock, $n) = @_;
	$s->query_safe('BEGIN');
	$s->send($sql);
	ok(scalar(zk_wait_count($zk, "/zklock/locks/$lock", $n, 10)), $s->name . " queued ($n contenders)");
}

# still waiting after $secs seconds?
sub still_waits
{
	my ($s, $secs, $what) = @_;
	my $r = $s->wait($secs);
	is($r->{sqlstate}, 'TIMEOUT', $what) or diag explain $r;
}

# granted within $secs?
sub granted
{
	my ($s, $secs, $what) = @_;
	my $r = $s->wait($secs);
	is($r->{sqlstate}, '00000', $what) or diag explain $r;
	return $r->{out};
}

# 1. the handoff, with ZooKeeper frozen
{
	my $a = new_session($node, name => 'a');
	my $b = new_session($node, name => 'b');
	$a->query_safe('BEGIN');
	my $ta = $a->query_safe("SELECT zk_lock('h1')");
	queue_up($b, "SELECT zk_lock('h1')", 'h1', 2);
	ok(zk_freeze($zk), 'ZooKeeper frozen');
	$a->query_safe('COMMIT');
	my $tb = granted($b, 10, 'the local waiter is granted while ZooKeeper is frozen');
	ok(zk_thaw($zk), 'ZooKeeper thawed');
	cmp_ok($tb, '>', $ta, 'its fencing token is larger than the holder\'s');
	ok(scalar(zk_wait_count($zk, '/zklock/locks/h1', 1, 10)), 'the holder\'s node was deleted once ZooKeeper was back');
	is(try_lock_elsewhere($other, 'h1'), 'f', 'another cluster cannot take it meanwhile');
	$b->query_safe('COMMIT');
	ok(scalar(zk_wait_count($zk, '/zklock/locks/h1', 0, 10)), 'no node left');
	is(try_lock_elsewhere($other, 'h1'), 't', 'then another cluster takes it');
	$_->quit for ($a, $b);
}

# 2. a waiter of another cluster in between goes first
{
	my $a = new_session($node, name => 'a');
	my $c = new_session($other, name => 'c');
	my $b = new_session($node, name => 'b');
	$a->query_safe('BEGIN');
	$a->query_safe("SELECT zk_lock('h2')");
	queue_up($c, "SELECT zk_lock('h2')", 'h2', 2);
	queue_up($b, "SELECT zk_lock('h2')", 'h2', 3);
	ok(zk_freeze($zk), 'ZooKeeper frozen');
	$a->query_safe('COMMIT');
	still_waits($b, 3, 'the local waiter behind another cluster\'s is not handed the lock');
	ok(zk_thaw($zk), 'ZooKeeper thawed');
	granted($c, 15, 'the other cluster\'s waiter, first in line, is granted');
	still_waits($b, 2, 'the local waiter still waits for it');
	$c->query_safe('COMMIT');
	granted($b, 15, 'then the local waiter is granted');
	$b->query_safe('COMMIT');
	ok(scalar(zk_wait_count($zk, '/zklock/locks/h2', 0, 10)), 'no node left');
	$_->quit for ($a, $b, $c);
}

# 3. readers waiting for the writer are all handed the lock; a writer behind them is not
{
	my $a = new_session($node, name => 'a');
	my $r1 = new_session($node, name => 'r1');
	my $r2 = new_session($node, name => 'r2');
	my $w = new_session($node, name => 'w');
	$a->query_safe('BEGIN');
	$a->query_safe("SELECT zk_lock('h3')");
	queue_up($r1, "SELECT zk_lock_shared('h3')", 'h3', 2);
	queue_up($r2, "SELECT zk_lock_shared('h3')", 'h3', 3);
	queue_up($w, "SELECT zk_lock('h3')", 'h3', 4);
	ok(zk_freeze($zk), 'ZooKeeper frozen');
	$a->query_safe('COMMIT');
	granted($r1, 10, 'reader 1 is granted while ZooKeeper is frozen');
	granted($r2, 10, 'reader 2 is granted while ZooKeeper is frozen');
	still_waits($w, 2, 'the writer behind them still waits');
	ok(zk_thaw($zk), 'ZooKeeper thawed');
	$r1->query_safe('COMMIT');
	still_waits($w, 2, 'the writer waits for the second reader');
	$r2->query_safe('COMMIT');
	granted($w, 15, 'then the writer is granted');
	$w->query_safe('COMMIT');
	ok(scalar(zk_wait_count($zk, '/zklock/locks/h3', 0, 10)), 'no node left');
	$_->quit for ($a, $r1, $r2, $w);
}

# 4. a backend that still holds the lock in session scope hands nothing on
{
	my $a = new_session($node, name => 'a');
	my $b = new_session($node, name => 'b');
	$a->query_safe("SELECT zk_session_lock('h4')");
	$a->query_safe('BEGIN');
	$a->query_safe("SELECT zk_lock('h4')");
	my $n = zk_count($zk, '/zklock/locks/h4');
	queue_up($b, "SELECT zk_lock('h4')", 'h4', $n + 1);
	$a->query_safe('COMMIT');
	still_waits($b, 3, 'the waiter waits while the session-scope hold is kept');
	is($a->query_safe("SELECT zk_unlock('h4')"), 't', 'the session-scope hold let go');
	granted($b, 15, 'then the waiter is granted');
	$b->query_safe('COMMIT');
	ok(scalar(zk_wait_count($zk, '/zklock/locks/h4', 0, 10)), 'no node left');
	$_->quit for ($a, $b);
}

# 5. a writer behind another waiter is not handed the lock
{
	my $a = new_session($node, name => 'a');
	my $b = new_session($node, name => 'b');
	my $d = new_session($node, name => 'd');
	$a->query_safe('BEGIN');
	$a->query_safe("SELECT zk_lock('h5')");
	queue_up($b, "SELECT zk_lock('h5', '30s')", 'h5', 2);
	queue_up($d, "SELECT zk_lock('h5')", 'h5', 3);
	$a->query_safe('COMMIT');
	granted($b, 10, 'the first waiter is granted');
	still_waits($d, 2, 'the second waits for it');
	$b->query_safe('COMMIT');
	granted($d, 10, 'then the second');
	$d->query_safe('COMMIT');
	ok(scalar(zk_wait_count($zk, '/zklock/locks/h5', 0, 10)), 'no node left');
	$_->quit for ($a, $b, $d);
}

$_->stop for ($node, $other);
done_testing();
