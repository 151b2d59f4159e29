
# 199_lock_max_hold_syncrep.pl - a backend in the middle of its COMMIT
# keeps every lock, and is not signalled, until the COMMIT ends.  It holds
# session lock 'l2' (max_hold 2 s) and, in a transaction, 'l1' (no
# maximum); its COMMIT waits for a synchronous standby (after the check
# before COMMIT).  Found by review: the worker took 'l2' back then and its
# SIGINT cancelled the COMMIT's synchronous-replication wait, so the
# transaction was reported committed without the standby, and 'l1' went to
# the next holder.  Now: 'l2' waits past its maximum while the COMMIT does,
# nothing is cancelled, and 'l2' is taken back once the COMMIT is over.
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
sleep 4;
ok(!wait_log($n3, qr/took back zookeeper lock "l2"/, 1), "the session lock 'l2' is not taken back while its backend commits");
is(try_lock_elsewhere($n3, 'l2'), 'f', "'l2' is still held past its maximum");
my $r = $a->wait(1);
is($r->{sqlstate}, 'TIMEOUT', "the COMMIT still waits for the standby (not cancelled by the worker's SIGINT)")
  or diag("COMMIT ended: $r->{sqlstate} " . ($r->{err} // ''));
is(try_lock_elsewhere($n3, 'l1'), 'f', "'l1' is not free while its COMMIT is unconfirmed");
$n3->safe_psql('postgres', 'SELECT pg_cancel_backend(' . $a->pid . ')');
$r = $a->wait(30);
is($r->{sqlstate}, '00000', 'the COMMIT ends once the test cancels its wait');
ok(wait_log($n3, qr/took back zookeeper lock "l2"/, 30), "then the session lock 'l2' is taken back");
$r = $a->query("SELECT zk_lock_token('l2')");
is($r->{sqlstate}, '40001', "and the backend's next zklock call says so");
is(try_lock_elsewhere($n3, 'l1'), 't', "'l1' went at the end of its transaction");
done_testing();
