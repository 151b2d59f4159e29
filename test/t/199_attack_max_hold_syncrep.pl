
# 199_attack_max_hold_syncrep.pl - (attack) the worker's SIGINT when a hold
# passes its maximum goes to the holder's process whatever it is doing; it
# spares a hold whose own entry is committing, not a backend that is
# committing.  A backend holds session lock 'l2' (max_hold 2 s) and, in a
# transaction, 'l1' (no maximum); its COMMIT waits for a synchronous standby
# (after the check before COMMIT: 'l1' is committing).  When 'l2' is taken
# back, the SIGINT cancels the COMMIT's synchronous-replication wait: the
# transaction is reported committed without the standby's acknowledgement
# ("canceling wait for synchronous replication"), and 'l1' goes to the next
# holder while the commit it protected exists on the primary only - the
# very wait that 198 part 8 protects for the lock's own maximum.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ZkLockTest;

my $zk = zk_start();
my $n3 = zk_node('msr3', $zk, allows_streaming => 1,
	conf => "synchronous_standby_names = 'nobody'\nsynchronous_commit = off\n");
my $a = new_session($n3, name => 'a');
$a->query_safe("SELECT zk_session_lock('l2', max_hold => '2s')");
$a->query_safe('BEGIN');
$a->query_safe("SELECT zk_lock('l1')");
$a->query_safe('CREATE TABLE t (x int)');
$a->query_safe('SET LOCAL synchronous_commit = on');
$a->send('COMMIT');
ok(wait_until(sub {
	$n3->safe_psql('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep' AND pid = " . $a->pid) eq '1' }, 30),
	'the COMMIT waits for the standby');
ok(wait_log($n3, qr/took back zookeeper lock "l2"/, 30), "the session lock 'l2' is taken back");
sleep 1;
my $r = $a->wait(1);
is($r->{sqlstate}, 'TIMEOUT', "the COMMIT still waits for the standby (not cancelled by the worker's SIGINT)")
  or diag("COMMIT ended: $r->{sqlstate} " . ($r->{err} // ''));
is(try_lock_elsewhere($n3, 'l1'), 'f', "'l1' is not free while its COMMIT is unconfirmed");
$n3->safe_psql('postgres', 'SELECT pg_cancel_backend(' . $a->pid . ')');
$a->wait(30);
done_testing();
