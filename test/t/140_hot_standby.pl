
# 140_hot_standby.pl - zklock on a streaming hot standby.
#
# The standby preloads zklock too (its configuration comes from the
# primary's base backup) and has its own worker on the same ZooKeeper.
# Read-only transactions on the standby take locks that exclude the
# primary's sessions, and the other way round.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ZkLockTest;

my $zk = zk_start();
my $primary = zk_streaming_node('hs_primary', $zk,
	session_timeout => '10s',
	connect_timeout => '3s');
my $standby = zk_standby_node('hs_standby', $primary);

my $LOCKS = '/zklock/locks';

is($standby->safe_psql('postgres', 'SELECT pg_is_in_recovery()'), 't', 'the standby is in recovery');
is($standby->safe_psql('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'zklock worker'"),
	'1', "the standby's zklock worker appears in its pg_stat_activity");
my $swpid = worker_pid($standby);
my $pwpid = worker_pid($primary);
isnt($swpid, $pwpid, 'it is another process than the primary\'s worker');
is(zk_status_value($standby, 'state'), 'connected', "the standby's worker is connected");
isnt(zk_status_value($standby, 'session_id'), zk_status_value($primary, 'session_id'),
	'with its own ZooKeeper session');
is($standby->safe_psql('postgres', "SELECT extversion FROM pg_extension WHERE extname = 'zklock'"),
	$primary->safe_psql('postgres', "SELECT default_version FROM pg_available_extensions WHERE name = 'zklock'"),
	'the extension was replicated to the standby');

my $ss = new_session($standby, name => 'standby');
my $ps = new_session($primary, name => 'primary');

#
# A read-only transaction on the standby locks
#
$ss->query_safe('BEGIN READ ONLY');
my $r = $ss->query("SELECT zk_lock('hs')", 30);
is($r->{sqlstate}, '00000', 'zk_lock works in a read-only transaction on the standby') or diag $r->{err};
like($r->{out}, qr/^\d+$/, "token $r->{out}");
my $stok = $r->{out};
is(zk_count($zk, "$LOCKS/hs"), 1, 'its node is in ZooKeeper');
is(try_lock_elsewhere($primary, 'hs'), 'f', "the primary's zk_try_lock('hs') is false meanwhile");
is(try_lock_elsewhere($standby, 'hs'), 'f', 'another standby session cannot take it either');
is($ss->query_safe("SELECT zk_lock_token('hs')"), $stok, 'zk_lock_token on the standby');
is($ss->query_safe("SELECT count(*) FROM zk_locks WHERE name = 'hs' AND state = 'held'"), '1',
	'zk_locks on the standby shows it');
is($ps->query_safe("SELECT port FROM zk_lock_holders('hs')"), $standby->port,
	"the primary's zk_lock_holders sees the standby's holder (its port)");

# a primary session waits for the standby's lock
queue_request($zk, $ps, "SELECT zk_lock('hs')", "$LOCKS/hs", 2, 'a primary session queues behind the standby');
sleep 1;
ok($ps->running, 'and waits');
$ss->query_safe('COMMIT');
$r = $ps->wait(15);
is($r->{sqlstate}, '00000', 'the primary session is granted when the standby transaction ends')
  or diag $r->{err};
ok($r->{out} > $stok, 'with a larger token');

# the other way round: the standby waits for the primary
is(try_lock_elsewhere($standby, 'hs'), 'f', "the standby's zk_try_lock is false while the primary holds");
queue_request($zk, $ss, "SELECT zk_lock('hs')", "$LOCKS/hs", 2, 'the standby queues behind the primary');
sleep 1;
ok($ss->running, 'and waits');
$ps->query_safe('COMMIT');
$r = $ss->wait(15);
is($r->{sqlstate}, '00000', 'the standby is granted when the primary commits') or diag $r->{err};
$ss->query_safe('COMMIT');
ok(scalar(zk_wait_count($zk, "$LOCKS/hs", 0, 5)), 'no nodes left');
is(try_lock_elsewhere($primary, 'hs'), 't', 'free for the primary again');

#
# Session and shared locks on the standby
#
my $sl = $ss->query_safe("SELECT zk_session_lock('hs_sess')");
like($sl, qr/^\d+$/, 'zk_session_lock on the standby');
is(try_lock_elsewhere($primary, 'hs_sess'), 'f', 'it excludes the primary');
is($ss->query_safe("SELECT zk_unlock('hs_sess')"), 't', 'zk_unlock on the standby');
ok(scalar(zk_wait_count($zk, "$LOCKS/hs_sess", 0, 5)), 'released');

$ss->query_safe('BEGIN READ ONLY');
$ss->query_safe("SELECT zk_lock_shared('hs_sh')");
is(try_lock_shared_elsewhere($primary, 'hs_sh'), 't', 'a shared lock on the standby is shared with the primary');
is(try_lock_elsewhere($primary, 'hs_sh'), 'f', 'and excludes its writers');
$ss->query_safe('COMMIT');

# the standby's locks go with its backend
$ss->query_safe('BEGIN');
$ss->query_safe("SELECT zk_lock('hs_term')");
$standby->safe_psql('postgres', "SELECT pg_terminate_backend($ss->{pid})");
ok(scalar(zk_wait_count($zk, "$LOCKS/hs_term", 0, 5)), 'terminating the standby backend releases its lock');

# replication still works alongside
$primary->safe_psql('postgres', 'CREATE TABLE t AS SELECT 1 AS x');
$primary->wait_for_catchup($standby);
is($standby->safe_psql('postgres', 'SELECT x FROM t'), '1', 'replication works alongside zklock');

$ps->quit;
$ss->quit;
ok(scalar(zk_wait_count($zk, $LOCKS, 0, 10)), 'nothing left in ZooKeeper at the end');

$standby->stop;
$primary->stop;
done_testing();
