
# 242_upgrade_riders.pl - after an upgrade, shared holds that rode on the
# exclusive lock go back onto the pinned shared node when the exclusive
# holds end (found by the model-based tester, seed 538799908; history in
# test/model/found/lock-upgrade-rider-after-unlock.json).
#
# A session holds 'u' shared (session scope), takes it exclusive in a
# transaction (an upgrade: its shared node is pinned), lets go of its
# session holds with zk_unlock_all(), takes 'u' shared again for the
# session (it rides on the exclusive lock) and commits.  Until now the
# exclusive node stayed, held by that shared hold, beside the pinned shared
# node: two contender nodes for one shared hold, and an exclusive lock that
# kept every other session out.  Now one shared node is left, another
# session shares the lock at once, and nothing is left once it is let go.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ZkLockTest;

my $zk = zk_start();
my $A = zk_node('ridersA', $zk);
my $L = '/zklock/locks/u';

my $s = new_session($A, name => 'upgrader');
is($s->query_safe("SELECT zk_try_session_lock_shared('u')"), 't', 'session shared hold');
$s->query_safe('BEGIN');
is($s->query_safe("SELECT zk_lock('u', '2s') > 0"), 't', 'the upgrade is granted');
$s->query_safe('SELECT zk_unlock_all()');
is($s->query_safe("SELECT zk_try_session_lock_shared('u')"), 't',
	'a new session shared hold (rides on the exclusive lock)');
$s->query_safe('COMMIT');

my @nodes = zk_children($zk, $L);
is(scalar(@nodes), 1, 'one contender node is left for the one shared hold')
  or diag explain \@nodes;
like($nodes[0] // '', qr/__rlock__/, '... and it is a shared node');
is($A->safe_psql('postgres', "SELECT zk_try_lock_shared('u')"), 't',
	'another session shares the lock at once');
is($A->safe_psql('postgres', "SELECT zk_try_lock('u')"), 'f',
	'but cannot take it exclusive');
is($s->query_safe("SELECT zk_lock_token('u') > 0"), 't', 'the holder still has a token');
$s->query_safe('SELECT zk_unlock_all()');
is(zk_wait_count($zk, $L, 0, 10), 1, 'nothing is left once the hold is let go');
$s->quit;

$A->stop('fast');
done_testing();
