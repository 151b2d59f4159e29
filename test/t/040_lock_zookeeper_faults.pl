
# 040_lock_zookeeper_faults.pl - ZooKeeper stopped, frozen, restarted, replaced.
# Requests must fail with 08006 after about zklock.connect_timeout (never
# hang) and work again once ZooKeeper is back, without restarting PostgreSQL.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use File::Path qw(rmtree);
use Time::HiRes qw(time sleep);
use ZkLockTest;

my $zk = zk_start();
my $node = zk_node('faults', $zk,
	session_timeout => '4s',
	connect_timeout => '3s');

my $LOCKS = '/zklock/locks';

# take and release a lock, checking its node in ZooKeeper $z
sub lock_works
{
	my ($z, $name, $what) = @_;
	my $s = new_session($node, name => "lw_$name");
	$s->query_safe('BEGIN');
	my $r = $s->query("SELECT zk_lock('$name')", 30);
	my $ok = is($r->{sqlstate}, '00000', "$what: zk_lock works") or diag $r->{err};
	if ($ok)
	{
		is(zk_count($z, "$LOCKS/$name"), 1, "$what: lock node is in ZooKeeper $z->{name}");
		$s->query_safe('COMMIT');
		ok(scalar(zk_wait_count($z, "$LOCKS/$name", 0, 5)), "$what: node removed at commit");
	}
	$s->quit;
	return $ok;
}

my $st = zk_status($node);
is($st->{state}, 'connected', 'worker connected');
like($st->{servers}, qr/\Q$zk->{hosts}\E/, 'zk_status().servers shows the configured connect string');
like($st->{session_id}, qr/^(0x)?[0-9a-f]+$/i, 'session id is hex');
ok(($st->{worker_pid} // 0) > 0, 'worker pid shown');
is($st->{session_timeout}, '00:00:04', 'zk_status().session_timeout is the negotiated 4 s');
lock_works($zk, 'base', 'baseline');

#
# ZooKeeper stopped
#
ok(zk_stop($zk), 'ZooKeeper stopped');
my $r = one_shot($node, "SELECT zk_lock('down')", 60);
ok($r->{done}, 'zk_lock returns while ZooKeeper is down');
is($r->{sqlstate}, '08006', 'zk_lock fails with 08006 while ZooKeeper is down') or diag $r->{err};
ok($r->{elapsed} < 15,
	sprintf('failed within connect_timeout + margin (%.1fs, connect_timeout 3s)', $r->{elapsed}));

$r = one_shot($node, "SELECT zk_try_lock('down')", 60);
is($r->{sqlstate}, '08006', 'zk_try_lock fails with 08006 while ZooKeeper is down') or diag $r->{err};
ok($r->{elapsed} < 15, sprintf('zk_try_lock did not hang (%.1fs)', $r->{elapsed}));

$st = wait_for_state($node, sub { $_[0]->{state} ne 'connected' }, 15);
isnt($st->{state}, 'connected', "zk_status().state is '$st->{state}' while ZooKeeper is down");
like($st->{state}, qr/^(connecting|suspended)$/, 'state is connecting or suspended');

# zklock.connect_timeout is a user setting that bounds the wait
$r = one_shot($node, "SET zklock.connect_timeout = '5s'; SELECT zk_lock('down')", 60);
is($r->{sqlstate}, '08006', 'with connect_timeout 5s: 08006') or diag $r->{err};
ok($r->{elapsed} >= 4 && $r->{elapsed} < 20,
	sprintf('with connect_timeout 5s the request waited about 5s (%.1fs)', $r->{elapsed}));
$r = one_shot($node, "SET zklock.connect_timeout = '1s'; SELECT zk_lock('down')", 60);
is($r->{sqlstate}, '08006', 'with connect_timeout 1s: 08006') or diag $r->{err};
ok($r->{elapsed} < 10, sprintf('with connect_timeout 1s: did not hang (%.1fs)', $r->{elapsed}));

# a failure inside a transaction block aborts only that transaction
my $s = new_session($node, name => 'down_xact');
$s->query_safe('BEGIN');
$r = $s->query("SELECT zk_lock('down')", 60);
is($r->{sqlstate}, '08006', 'zk_lock in a transaction block fails with 08006');
$s->query('ROLLBACK');
is($s->query_safe('SELECT 42'), '42', 'session usable after the failure');

#
# ZooKeeper back: works again without restarting PostgreSQL
#
my $t0 = time();
zk_restart($zk);
$st = wait_for_state($node, 'connected', 30);
is($st->{state}, 'connected',
	sprintf('worker connected again %.1fs after ZooKeeper restarted', time() - $t0));
lock_works($zk, 'back', 'after restart');
ok(scalar(zk_wait_count($zk, $LOCKS, 0, 10)),
	'requests that failed while ZooKeeper was down left no nodes');
my $worker = $st->{worker_pid};

#
# ZooKeeper frozen (SIGSTOP): requests fail after a bounded time; a lock
# held across the freeze is either kept (same session) or lost (COMMIT
# fails with 40001), never silently both.
#
my $holder = new_session($node, name => 'holder');
$holder->query_safe('BEGIN');
my $htok = $holder->query_safe("SELECT zk_lock('held')");
my $session1 = zk_status_value($node, 'session_id');

my $t_freeze = time();
ok(zk_freeze($zk), 'ZooKeeper frozen');
$r = one_shot($node, "SELECT zk_lock('frozen')", 60);
ok($r->{done}, 'zk_lock returns while ZooKeeper is frozen');
is($r->{sqlstate}, '08006', 'zk_lock fails with 08006 while ZooKeeper is frozen') or diag $r->{err};
ok($r->{elapsed} < 20, sprintf('failed within a bounded time (%.1fs)', $r->{elapsed}));
$st = wait_for_state($node, sub { $_[0]->{state} ne 'connected' }, 15);
isnt($st->{state}, 'connected', "state is '$st->{state}' while ZooKeeper is frozen");

# stay frozen for longer than the session timeout
my $left = 6 - (time() - $t_freeze);
sleep($left) if $left > 0;
$t0 = time();
ok(zk_thaw($zk), 'ZooKeeper thawed');
$st = wait_for_state($node, 'connected', 30);
is($st->{state}, 'connected', sprintf('connected again %.1fs after the thaw', time() - $t0));
lock_works($zk, 'thawed', 'after thaw');

my $session2 = zk_status_value($node, 'session_id');
$r = $holder->query('COMMIT', 30);
ok($r->{done}, 'COMMIT of the lock held across the freeze returns');
if ($session2 eq $session1)
{
	note 'ZooKeeper session survived the freeze';
	is($r->{sqlstate}, '00000', 'session survived: COMMIT succeeds') or diag $r->{err};
}
else
{
	note "ZooKeeper session replaced ($session1 -> $session2): lock lost";
	is($r->{sqlstate}, '40001', 'session replaced: COMMIT fails with 40001') or diag $r->{err};
}
$holder->quit;
ok(scalar(zk_wait_count($zk, $LOCKS, 0, 15)),
	'no nodes left after the freeze (late creates cleaned up)');
is(worker_pid($node), $worker, 'worker survived the faults without restarting');

#
# zklock.hosts empty: not configured
#
$node->safe_psql('postgres', "ALTER SYSTEM SET zklock.hosts = ''; SELECT pg_reload_conf()");
$st = wait_for_state($node, 'not configured', 15);
is($st->{state}, 'not configured', "empty zklock.hosts: state 'not configured'");
$r = one_shot($node, "SELECT zk_lock('nc')", 60);
isnt($r->{sqlstate}, '00000', "zk_lock fails when not configured ($r->{sqlstate})");
ok($r->{elapsed} < 15, sprintf('and does not hang (%.1fs)', $r->{elapsed}));

#
# zklock.hosts changed to another ZooKeeper: reconnects there
#
my $zk2 = zk_start(name => 'zk2');
# (zklock.session_timeout is used for new sessions: change it too)
$node->safe_psql('postgres',
	"ALTER SYSTEM SET zklock.session_timeout = '7s'; "
	  . "ALTER SYSTEM SET zklock.hosts = '$zk2->{hosts}'; SELECT pg_reload_conf()");
$st = wait_for_state($node,
	sub { $_[0]->{state} eq 'connected' && index($_[0]->{servers} // '', $zk2->{hosts}) >= 0 }, 30);
like($st->{servers}, qr/\Q$zk2->{hosts}\E/, 'zk_status().servers shows the new ZooKeeper');
unlike($st->{servers}, qr/\Q$zk->{hosts}\E/, 'and no longer the old one');
is($st->{state}, 'connected', 'connected to the new ZooKeeper');
is($st->{session_timeout}, '00:00:07', 'the new session uses the new zklock.session_timeout (7 s)');

my $mover = new_session($node, name => 'mover');
$mover->query_safe('BEGIN');
$r = $mover->query("SELECT zk_lock('moved')", 30);
is($r->{sqlstate}, '00000', 'zk_lock after the switch') or diag $r->{err};
is(zk_count($zk2, "$LOCKS/moved"), 1, 'lock node is on the new ZooKeeper');
is(zk_count($zk, "$LOCKS/moved"), 0, 'and not on the old one');
$mover->query_safe('COMMIT');
ok(scalar(zk_wait_count($zk2, "$LOCKS/moved", 0, 5)), 'removed from the new ZooKeeper at commit');

# the old server is not needed any more
zk_stop($zk);
lock_works($zk2, 'after_old_stopped', 'old ZooKeeper stopped');
is(zk_status_value($node, 'state'), 'connected', 'still connected after the old server stopped');

#
# ZooKeeper replaced by an empty one at the same address (its data lost, or
# restored from an older snapshot): the server's last zxid is below what the
# client has seen, so it refuses to resume the session, forever.  The worker
# gives the session up after twice its timeout without contact and opens a
# new one.
#
for my $i (1 .. 30)
{
	$mover->query_safe("BEGIN; SELECT zk_lock('zxid_$i'); COMMIT");
}
my $wholder = new_session($node, name => 'wipe_holder');
$wholder->query_safe('BEGIN');
$wholder->query_safe("SELECT zk_lock('held_over_wipe')");
my $wsession = zk_status_value($node, 'session_id');
ok(zk_stop($zk2), 'ZooKeeper zk2 stopped');
rmtree("$zk2->{dir}/data");
ok(!-d "$zk2->{dir}/data", 'its data directory removed');
$t0 = time();
zk_restart($zk2);
$st = wait_for_state($node, 'connected', 60);
is($st->{state}, 'connected',
	sprintf('connected to the emptied ZooKeeper %.1fs after its start (session timeout 7 s)',
		time() - $t0));
isnt($st->{session_id}, $wsession, 'in a new session');
my $zklog = slurp_file("$zk2->{dir}/zk.log");
# ZooKeeper 3.8: "Refusing session request for client ...", 3.9 (Debian 13):
# "Refusing session(0x...) request for client ..."
like($zklog, qr/Refusing session(?:\(0x[0-9a-f]+\))? request .* has seen zxid/,
	'the emptied server had refused to resume the old session');
ok($node->log_contains(qr/giving up zookeeper session \Q$wsession\E/i),
	'the worker logged that it gave the session up');
$r = $wholder->query('COMMIT', 30);
is($r->{sqlstate}, '40001', 'COMMIT of a lock held across the loss fails with 40001')
  or diag $r->{err};
$wholder->quit;
lock_works($zk2, 'after_wipe', 'after ZooKeeper lost its data');
$r = $mover->query("SELECT zk_enqueue('wiped', 'item')", 30);
is($r->{sqlstate}, '00000', 'zk_enqueue after ZooKeeper lost its data') or diag $r->{err};
is(zk_count($zk2, '/zklock/queues/wiped/entries'), 1, 'the item is on the emptied ZooKeeper');
is($mover->query_safe("SELECT body FROM zk_try_dequeue('wiped')"), 'item', 'and dequeued');
ok(scalar(zk_wait_count($zk2, '/zklock/queues/wiped/entries', 0, 10)), 'and consumed');
is(worker_pid($node), $st->{worker_pid}, 'the worker did not restart');

$mover->quit;
$node->stop;
done_testing();
