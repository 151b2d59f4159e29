
# 050_worker_restart.pl - the zklock worker is terminated while one backend
# holds a lock and another waits.  The waiter must get an error (not hang),
# the holder's COMMIT must fail with 40001, the postmaster must start a new
# worker that connects, and nothing may be left in ZooKeeper.  A request
# made while ZooKeeper was down, not sent yet when the worker was
# terminated, is taken over and granted by the new worker.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use ZkLockTest;

my $zk = zk_start();
my $node = zk_node('worker', $zk,
	session_timeout => '4s',
	connect_timeout => '3s');

my $LOCKS = '/zklock/locks';
my $JOB = "$LOCKS/job";

my $wpid = worker_pid($node);
ok(defined $wpid, "zklock worker visible in pg_stat_activity (pid " . ($wpid // 'none') . ')');
is(zk_status_value($node, 'worker_pid'), $wpid // '', 'zk_status().worker_pid matches pg_stat_activity');
is($node->safe_psql('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'zklock worker'"),
	'1', 'exactly one zklock worker');
my $session1 = zk_status_value($node, 'session_id');
my $sessions1 = zk_status_value($node, 'sessions');

my $holder = new_session($node, name => 'holder');
my $waiter = new_session($node, name => 'waiter');
my $other = new_session($node, name => 'other');

$holder->query_safe('BEGIN');
my $htok = $holder->query_safe("SELECT zk_lock('job')");
$holder->query_safe("SELECT zk_lock('second')");
queue_request($zk, $waiter, "SELECT zk_lock('job')", $JOB, 2, 'holder holds, waiter waits (2 nodes)');
ok($waiter->running, 'waiter is blocked');

# a session that holds nothing must not be affected
$other->query_safe('BEGIN');
$other->query_safe('SELECT 1');

#
# terminate the worker
#
my $t0 = time();
is($node->safe_psql('postgres', "SELECT pg_terminate_backend($wpid)"), 't',
	'worker terminated with pg_terminate_backend');

my $r = $waiter->wait(15);
ok($r->{done}, sprintf('waiter got an answer %.1fs after the worker was terminated (no hang)', time() - $t0));
isnt($r->{sqlstate}, '00000', 'waiter did not get the lock') or diag $r->{out};
is($r->{sqlstate}, '08006', 'waiter fails with 08006') or diag $r->{err};
ok(!$r->{exited}, 'waiter backend itself survived');
$waiter->query('ROLLBACK');

my $new = wait_for_worker($node, $wpid, 15);
ok(defined $new, 'postmaster started a new worker (pid ' . ($new // 'none') . ')');
isnt($new // $wpid, $wpid, 'new worker has a different pid');

$r = $holder->query('COMMIT', 30);
ok($r->{done}, 'COMMIT of the holder returns');
is($r->{sqlstate}, '40001', 'COMMIT of a transaction whose lock was lost fails with 40001') or diag $r->{err};
ok(!$r->{exited}, 'holder backend survived');
is($holder->query_safe('SELECT 1'), '1', 'holder session usable after the failed COMMIT');

is($other->query_safe('COMMIT; SELECT 2'), '2',
	'a transaction holding no zklock locks commits normally');

my $st = wait_for_state($node, 'connected', 30);
is($st->{state}, 'connected', 'new worker connected');
is($st->{worker_pid}, $new // -1, 'zk_status() shows the new worker');
isnt($st->{session_id}, $session1, 'new worker uses a new ZooKeeper session');

# locks work again, and the lost locks are really free
$holder->query_safe('BEGIN');
$r = $holder->query("SELECT zk_lock('job', '10s')", 30);
is($r->{sqlstate}, '00000', 'zk_lock works with the new worker') or diag $r->{err};
ok($r->{out} =~ /^\d+$/ && $r->{out} > $htok, "new grant's token $r->{out} > lost one's $htok");
my @kids = zk_children($zk, $JOB);
is(scalar(@kids), 1, 'only the new grant under /zklock/locks/job') or diag zk_tree($zk, $LOCKS);
is(try_lock_elsewhere($node, 'job'), 'f', 'the new grant excludes others');
$holder->query_safe('COMMIT');
ok(wait_until(sub { try_lock_elsewhere($node, 'second') eq 't' }, 15),
	'the other lost lock is free too (at the latest when the old session expires)');

#
# terminating the worker between transactions is harmless: a fresh worker
# serves the next request (possibly after waiting for it to connect)
#
$wpid = worker_pid($node);
$node->safe_psql('postgres', "SELECT pg_terminate_backend($wpid)");
$r = one_shot($node, "SELECT zk_lock('after') > 0", 60);
ok($r->{done} && $r->{elapsed} < 20, sprintf('zk_lock right after a worker restart returns (%.1fs)', $r->{elapsed}));
note "zk_lock right after the restart: $r->{sqlstate} $r->{err}";
$new = wait_for_worker($node, $wpid, 15);
ok(defined $new, 'worker restarted again');
$st = wait_for_state($node, 'connected', 30);
is($st->{state}, 'connected', 'and connected');
$r = one_shot($node, "SELECT zk_lock('after2') > 0", 60);
is($r->{out}, 't', 'zk_lock works once the new worker is connected') or diag $r->{err};

# the worker died with SIGKILL?  That is a crash: PostgreSQL restarts
# everything; not tested here.

#
# a lock asked for while ZooKeeper is down (nothing sent yet: the request
# waits on the worker's retry list), then the worker terminated: the new
# worker takes the request over once it connects and grants it.  The
# caller must not wait for good: the old worker's retry list died with it,
# and nothing drove such a request again.
#
my $pend = new_session($node, name => 'pend');
$pend->query_safe("SET zklock.connect_timeout = '90s'");
zk_stop($zk);
ok(wait_until(sub { zk_status_value($node, 'state') ne 'connected' }, 20, 0.1),
	'ZooKeeper stopped: the worker is not connected');
$pend->send("SELECT zk_lock('pending') > 0");
ok(wait_until(sub { $node->safe_psql('postgres',
	"SELECT count(*) FROM zk_entries WHERE name = 'pending'") eq '1' }, 10, 0.05),
	'the request waits for a session');
$wpid = worker_pid($node);
$node->safe_psql('postgres', "SELECT pg_terminate_backend($wpid)");
ok(defined wait_for_worker($node, $wpid, 15), 'a new worker, ZooKeeper still down');
sleep 1;
zk_restart($zk);
$r = $pend->wait(60);
ok($r->{done}, 'the request was answered after ZooKeeper came back');
is($r->{sqlstate}, '00000', 'the new worker took it over and granted it') or diag $r->{err};
is($r->{out}, 't', 'with a token');
ok(wait_until(sub { $node->safe_psql('postgres',
	"SELECT count(*) FROM zk_entries WHERE name = 'pending'") eq '0' }, 10, 0.05),
	'no entry left of it');
$pend->quit;

#
# nothing left behind: the old sessions' nodes are gone (closed or
# expired), and the new worker removed what it released
#
ok(scalar(zk_wait_count($zk, $LOCKS, 0, 20)), 'no nodes left in ZooKeeper after everything ended');
ok(wait_until(sub { zk_status_value($node, 'entries_used') eq '0' }, 10), 'entries_used back to 0');
my $lost = zk_status_value($node, 'lost');
note "lost counter: $lost, sessions: " . zk_status_value($node, 'sessions') . " (was $sessions1)";

$holder->quit;
$waiter->quit;
$other->quit;
$node->stop;
done_testing();
