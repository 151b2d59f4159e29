
# 120_lock_lost.pl - locks lost with the ZooKeeper session, and COMMIT across a
# suspended connection.
#
# Part 1: the zklock worker is stopped (SIGSTOP) for twice the session
# timeout, so ZooKeeper really expires its session while a transaction lock
# and a session lock are held.  Every entry must be marked lost; the
# transaction cannot COMMIT (40001); the session-lock holder gets 40001 once
# on its next zklock call; the locks are free elsewhere; nothing leaks.
#
# Part 2: ZooKeeper itself is frozen (SIGSTOP) until the worker suspends the
# connection, with a session timeout long enough for the session to
# survive.  A COMMIT started meanwhile waits up to zklock.commit_timeout: it
# succeeds when the connection comes back in time, and fails with 40001
# within a bounded time when it does not.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use ZkLockTest;

my $zk = zk_start();
my $LOCKS = '/zklock/locks';

# a stopped worker must never be left behind (the node could not stop)
my @stopped;
END
{
	kill 'CONT', $_ foreach @stopped;
}

#
# Part 1: session expiry while holding
#
my $node = zk_node('lost', $zk,
	session_timeout => '3s',
	connect_timeout => '3s');

my $h1 = new_session($node, name => 'xact_holder');
my $h2 = new_session($node, name => 'session_holder');
my $h3 = new_session($node, name => 'xact_holder2');
my $bystander = new_session($node, name => 'bystander');

$h1->query_safe('BEGIN');
my $tok_lx = $h1->query_safe("SELECT zk_lock('lx')");
$h3->query_safe('BEGIN');
$h3->query_safe("SELECT zk_lock('lz')");
my $tok_ls = $h2->query_safe("SELECT zk_session_lock('ls')");
$bystander->query_safe('BEGIN');
$bystander->query_safe('SELECT 1');
is(zk_count($zk, "$LOCKS/lx") + zk_count($zk, "$LOCKS/lz") + zk_count($zk, "$LOCKS/ls"), 3,
	'three locks held, one node each');

my $sid0 = zk_status_value($node, 'session_id');
my $lost0 = zk_status_value($node, 'lost');
$lost0 = 0 if $lost0 eq '';
my $wpid = worker_pid($node);
ok(defined $wpid, 'worker pid from pg_stat_activity: ' . ($wpid // 'none'));

push @stopped, $wpid;
ok(kill('STOP', $wpid), 'worker stopped (SIGSTOP)');
sleep 6;    # twice the 3 s session timeout: ZooKeeper expires the session
kill 'CONT', $wpid;
@stopped = ();
my $t0 = time();

my $st = wait_for_state($node,
	sub { $_[0]->{state} eq 'connected' && $_[0]->{session_id} ne $sid0 }, 30);
ok($st->{state} eq 'connected' && $st->{session_id} ne $sid0,
	sprintf('worker has a new session after the expiry (%s -> %s, %.1fs)',
		$sid0, $st->{session_id}, time() - $t0));
ok(wait_until(sub { (zk_status_value($node, 'lost') || 0) >= $lost0 + 3 }, 10),
	'zk_status().lost counts the three lost locks (was ' . $lost0 . ', now '
	  . zk_status_value($node, 'lost') . ')');
is($node->safe_psql('postgres',
		"SELECT string_agg(name || ':' || state, ',' ORDER BY name) FROM zk_locks WHERE pid IN ($h1->{pid}, $h2->{pid}, $h3->{pid})"),
	'ls:lost,lx:lost,lz:lost', 'zk_locks shows the three entries as lost');

# the expired session's nodes are gone, so the locks are free elsewhere
ok(scalar(zk_wait_count($zk, $LOCKS, 0, 15)), "the expired session's nodes are gone from ZooKeeper");
is(try_lock_elsewhere($node, 'lx'), 't', 'lost transaction lock can be taken elsewhere');
is(try_lock_elsewhere($node, 'ls'), 't', 'lost session lock can be taken elsewhere');

# the transaction that held a lost lock cannot commit
my $r = $h1->query('COMMIT', 30);
ok($r->{done}, 'COMMIT of the transaction with a lost lock returns');
is($r->{sqlstate}, '40001', 'and fails with 40001') or diag $r->{err};
like($r->{err}, qr/lx/, 'the error names the lost lock');
ok(!$r->{exited}, 'the backend survives');
is($h1->query_safe('SELECT 1'), '1', 'the session is usable afterwards');
is($h1->query_safe("SELECT zk_lock_token('lx') IS NULL"), 't', 'and holds nothing');

# a zklock call in a transaction whose lock is lost raises 40001
$r = $h3->query("SELECT zk_try_lock('other')", 30);
is($r->{sqlstate}, '40001', 'next zklock call in the transaction with a lost lock fails with 40001')
  or diag $r->{err};
like($r->{err}, qr/lz/, 'naming the lost lock');
$h3->query_safe('ROLLBACK');
is($h3->query_safe("SELECT zk_try_lock('other')"), 't', 'zklock calls work again after ROLLBACK');

# the session lock's holder hears of it once
$r = $h2->query("SELECT zk_lock_token('unrelated')", 30);
is($r->{sqlstate}, '40001', 'session-lock holder: next zklock call fails with 40001') or diag $r->{err};
like($r->{err}, qr/ls/, 'naming the lost session lock');
$r = $h2->query("SELECT zk_lock_token('unrelated') IS NULL", 30);
is($r->{sqlstate}, '00000', 'the call after that works (reported once)') or diag $r->{err};
is($r->{out}, 't', 'and returns normally');
is($h2->query_safe("SELECT zk_lock_token('ls') IS NULL"), 't', 'the lost session lock is forgotten');
$r = $h2->query("SELECT zk_unlock('ls')");
is($r->{out}, 'f', 'zk_unlock of the forgotten lock is false');
my $tok_ls2 = $h2->query_safe("SELECT zk_session_lock('ls', '10s')");
ok($tok_ls2 > $tok_ls, "the name can be locked again ($tok_ls2 > $tok_ls)");
is($h2->query_safe("SELECT zk_unlock('ls')"), 't', 'and unlocked');

is($bystander->query_safe('COMMIT; SELECT 2'), '2',
	'a transaction that held no zklock lock commits normally');

$h1->query_safe('BEGIN');
my $tok_lx2 = $h1->query_safe("SELECT zk_lock('lx', '10s')");
ok($tok_lx2 > $tok_lx, "lx taken again with a larger token ($tok_lx2 > $tok_lx)");
$h1->query_safe('COMMIT');

ok(scalar(zk_wait_count($zk, $LOCKS, 0, 10)), 'no nodes leaked in ZooKeeper');
ok(wait_until(sub { zk_status_value($node, 'entries_used') eq '0' }, 10),
	'no shared-memory entries left');

#
# A worker restart loses the locks too (its session is closed)
#
$tok_ls = $h2->query_safe("SELECT zk_session_lock('lw')");
$h1->query_safe('BEGIN');
$h1->query_safe("SELECT zk_lock_shared('lw2')");
$lost0 = zk_status_value($node, 'lost') || 0;
$wpid = worker_pid($node);
$node->safe_psql('postgres', "SELECT pg_terminate_backend($wpid)");
ok(defined wait_for_worker($node, $wpid, 30), 'worker restarted');
ok(wait_until(sub { (zk_status_value($node, 'lost') || 0) >= $lost0 + 2 }, 10),
	'zk_status().lost counts the session lock and the shared transaction lock');
$st = wait_for_state($node, 'connected', 30);
$r = $h2->query("SELECT zk_try_lock('unrelated')", 30);
is($r->{sqlstate}, '40001', 'session-lock holder: 40001 on the next call after a worker restart')
  or diag $r->{err};
like($r->{err}, qr/lw/, 'naming the lost lock');
$r = $h2->query("SELECT zk_try_lock('unrelated')", 30);
is($r->{out}, 't', 'the call after that works');
$r = $h1->query('COMMIT', 30);
is($r->{sqlstate}, '40001', 'COMMIT with a shared lock lost by the worker restart fails with 40001')
  or diag $r->{err};
ok(wait_until(sub { try_lock_elsewhere($node, 'lw') eq 't' }, 15), 'the lost session lock is free elsewhere');
ok(scalar(zk_wait_count($zk, $LOCKS, 0, 15)), 'no nodes leaked after the worker restart');

$_->quit foreach ($h1, $h2, $h3, $bystander);
$node->stop;

#
# Part 2: COMMIT while the connection is suspended
#
my $snode = zk_node('suspend', $zk,
	session_timeout => '15s',
	connect_timeout => '30s');
my $h = new_session($snode, name => 'committer');
my $sid = zk_status_value($snode, 'session_id');
my $slost = zk_status_value($snode, 'lost') || 0;
is($snode->safe_psql('postgres', 'SHOW zklock.commit_timeout'), '5s', 'zklock.commit_timeout defaults to 5s');

# round 1: the connection comes back within commit_timeout
$h->query_safe('BEGIN');
my $tok = $h->query_safe("SELECT zk_lock('sus')");
zk_freeze($zk);
$t0 = time();
$st = wait_for_state($snode, 'suspended', 40);
is($st->{state}, 'suspended', sprintf('worker suspended the connection (%.1fs after the freeze)', time() - $t0));
$h->send('COMMIT');
sleep 1;
ok($h->running, 'COMMIT waits while the connection is suspended');
zk_thaw($zk);
$r = $h->wait(30);
ok($r->{done}, sprintf('COMMIT returned (%.1fs)', $r->{elapsed}));
is($r->{sqlstate}, '00000', 'COMMIT succeeds when the same session comes back within commit_timeout')
  or diag $r->{err};
$st = wait_for_state($snode, 'connected', 30);
is($st->{session_id}, $sid, 'same ZooKeeper session: it survived');
ok(scalar(zk_wait_count($zk, "$LOCKS/sus", 0, 10)), 'lock node deleted after the COMMIT');
is(try_lock_elsewhere($snode, 'sus'), 't', 'lock free');
is(zk_status_value($snode, 'lost') || 0, $slost, 'nothing counted as lost');

# round 2: the connection does not come back within commit_timeout
$h->query_safe("SET zklock.commit_timeout = '1s'");
is($h->query_safe('SHOW zklock.commit_timeout'), '1s', 'zklock.commit_timeout is user-settable');
$h->query_safe('BEGIN');
$tok = $h->query_safe("SELECT zk_lock('sus2')");
zk_freeze($zk);
$t0 = time();
$st = wait_for_state($snode, 'suspended', 40);
is($st->{state}, 'suspended', sprintf('suspended again (%.1fs)', time() - $t0));
$h->send('COMMIT');
$r = $h->wait(20);
zk_thaw($zk);
ok($r->{done}, sprintf('COMMIT returned while still suspended (%.1fs)', $r->{elapsed}));
is($r->{sqlstate}, '40001', 'COMMIT fails with 40001 when the connection stays away past commit_timeout')
  or diag $r->{err};
note 'the error ' . ($r->{err} =~ /sus2/ ? 'names' : 'does not name') . ' the lock sus2';
ok($r->{elapsed} >= 0.8, sprintf('after waiting about commit_timeout (%.1fs >= 1s)', $r->{elapsed}));
ok($r->{elapsed} < 10, sprintf('within a bounded time (%.1fs)', $r->{elapsed}));
ok(!$r->{exited}, 'the backend survives');

$st = wait_for_state($snode, 'connected', 30);
is($st->{state}, 'connected', 'reconnected after the thaw');
note "session after round 2: $st->{session_id} (before: $sid)";
ok(scalar(zk_wait_count($zk, "$LOCKS/sus2", 0, 20)), 'the node of the failed transaction is removed');
ok(wait_until(sub { try_lock_elsewhere($snode, 'sus2') eq 't' }, 10), 'and the lock is free');
is($h->query_safe('SELECT 1'), '1', 'the session is usable');
$h->query_safe('BEGIN');
$r = $h->query("SELECT zk_lock('sus2', '10s')", 30);
is($r->{sqlstate}, '00000', 'and can lock again') or diag $r->{err};
$h->query_safe('COMMIT');

ok(scalar(zk_wait_count($zk, $LOCKS, 0, 10)), 'nothing left in ZooKeeper');
ok(wait_until(sub { zk_status_value($snode, 'entries_used') eq '0' }, 10),
	'no shared-memory entries left');
$h->quit;
$snode->stop;
done_testing();
