
# 199_lock_max_hold_pinned_stuck.pl - a maximum hold on an
# upgrade's exclusive lock whose shared node is pinned.  a holds 'v' shared
# (no max_hold), takes it exclusive with max_hold => '1s' (an upgrade), and
# lets go of its shared hold: the shared node is now pinned by the exclusive
# lock only (lock_backend.c, pin_idx: "let go together with the exclusive
# one").  The worker takes the exclusive lock back after 1 s (its COMMIT
# will fail), but the pinned shared node stays as long as a's transaction
# lasts: the writer b queued on the other cluster is never granted while a
# sits idle in its doomed transaction.  a holds nothing any more (zk_locks
# shows no hold of its own), yet everyone waits on it: the maximum hold
# promised that the next waiter gets the lock.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ZkLockTest;
use Time::HiRes qw(time usleep);

my $zk = zk_start();
my $n1 = zk_node('pst1', $zk);
my $n2 = zk_node('pst2', $zk);
my $LOCKS = '/zklock/locks';

sub nodes_of { my @n = zk_lock_nodes($zk, "$LOCKS/$_[0]"); return scalar @n; }

my $a = new_session($n1, name => 'a');
my $b = new_session($n2, name => 'b');
$a->query_safe("SELECT zk_session_lock_shared('v')");
$a->query_safe('BEGIN');
ok($a->query_safe("SELECT zk_lock('v', '10s', max_hold => '1s')") > 0, 'the upgrade is granted');
$a->query_safe("SELECT zk_unlock_shared('v')");
is(nodes_of('v'), 2, 'the exclusive node and the pinned shared node');
$b->query_safe('BEGIN');
$b->send("SELECT zk_lock('v', '60s')");
ok(wait_log($n1, qr/took back zookeeper lock "v"/, 30), "a's exclusive lock is taken back (max_hold)");
my $r = $b->wait(10);
is($r->{sqlstate}, '00000', 'the writer on the other cluster is granted once the upgrade was taken back')
  or diag('zookeeper nodes of v: ' . join(' ', zk_lock_nodes($zk, "$LOCKS/v")));
$r = $a->query('COMMIT');
is($r->{sqlstate}, '40001', "a's COMMIT fails (its exclusive lock was taken back)");
$r = $b->wait(30);
is($r->{sqlstate}, '00000', 'b is granted once a ends its transaction');
$b->query('COMMIT');
done_testing();
