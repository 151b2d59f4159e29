
# 198_lock_max_hold.pl - a maximum hold: a zk lock held longer than its
# max_hold (the call's argument) or zklock.max_hold (the superuser's bound)
# is taken back by the worker (issue 39).
#
# 1. Per call, idle in transaction: the next waiter, on another cluster, is
#    granted with a larger token; the holder's COMMIT fails with 40001 and
#    says why.
# 2. Per call, a statement running: it is cancelled; its node is gone.
# 3. The setting: a lock taken without max_hold on a cluster with
#    zklock.max_hold is taken back; a longer max_hold cannot pass it.
# 4. Session scope: taken back, the holder's next zklock call says so (40001)
#    once, then the name can be taken again.
# 5. Bad max_hold: 22023, nothing is taken.
# 6. A multi-lock's members each end at the call's max_hold.
# 7. Without a maximum nothing is taken back: the other cluster's try fails
#    while the lock is held.
# 8. A holder that commits as its maximum comes: a COMMIT that succeeds was
#    never overlapped by the next holder (committing holds are left to end).
# Before: a lock was held until its holder let go or its session ended.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ZkLockTest;
use Time::HiRes qw(time usleep);

my $zk = zk_start();
my $n1 = zk_node('mh1', $zk);
my $n2 = zk_node('mh2', $zk, conf => "zklock.max_hold = '2s'\n");
my $LOCKS = '/zklock/locks';

sub nodes_of { my @n = zk_lock_nodes($zk, "$LOCKS/$_[0]"); return scalar @n; }

sub lost { return zk_status_value($_[0], 'lost'); }

# 1. per call, idle in transaction; the waiter on the other cluster
{
	my $a = new_session($n1, name => 'a1');
	my $b = new_session($n2, name => 'b1');
	my $lost0 = lost($n1);
	$a->query_safe('BEGIN');
	my $ta = $a->query_safe("SELECT zk_lock('h1', max_hold => '1s')");
	$b->query_safe('BEGIN');
	$b->send("SELECT zk_lock('h1', '60s')");
	my $r = $b->wait(30);
	is($r->{sqlstate}, '00000', 'per call: the waiter on the other cluster is granted');
	cmp_ok($r->{out}, '>', $ta, 'with a larger token');
	$b->query_safe('COMMIT');
	$r = $a->query('COMMIT');
	is($r->{sqlstate}, '40001', "per call: the holder's COMMIT fails with 40001");
	like($r->{err}, qr/was lost before commit/, 'it says the lock was lost');
	like($r->{err}, qr/longer than its maximum of 1000 ms/, 'and why');
	cmp_ok(lost($n1), '>', $lost0, 'zk_status counts it as lost');
	ok(wait_log($n1, qr/took back zookeeper lock "h1" from process \d+/, 30),
		'the server log names the lock and the holder');
}

# 2. a statement running is cancelled; the node goes
{
	my $a = new_session($n1, name => 'a2');
	$a->query_safe('BEGIN');
	$a->query_safe("SELECT zk_lock('h2', max_hold => '1s')");
	is(nodes_of('h2'), 1, 'running: the lock has its node');
	$a->send('SELECT pg_sleep(60)');
	my $r = $a->wait(30);
	is($r->{sqlstate}, '57014', 'running: the statement is cancelled');
	ok(wait_until(sub { nodes_of('h2') == 0 }, 30), 'running: the node is gone through ZooKeeper');
	$a->query_safe('ROLLBACK');
	is($a->query_safe("SELECT zk_try_lock('h2')"), 't', 'and the name can be taken again');
}

# 3. the setting, and a longer max_hold within it
for my $arg ('', ", max_hold => '1h'")
{
	my $what = $arg ? 'a longer max_hold' : 'the setting';
	my $a = new_session($n2, name => 'a3');
	my $b = new_session($n1, name => 'b3');
	$a->query_safe('BEGIN');
	my $ta = $a->query_safe("SELECT zk_lock('h3'$arg)");
	my $t0 = time();
	$b->query_safe('BEGIN');
	$b->send("SELECT zk_lock('h3', '60s')");
	my $r = $b->wait(30);
	is($r->{sqlstate}, '00000', "$what: the waiter is granted");
	cmp_ok($r->{out}, '>', $ta, "$what: with a larger token");
	cmp_ok(time() - $t0, '>=', 1.5, "$what: not before the bound (about 2 s)");
	$b->query_safe('COMMIT');
	$r = $a->query('COMMIT');
	is($r->{sqlstate}, '40001', "$what: the holder's COMMIT fails");
	like($r->{err}, qr/maximum of 2000 ms/, "$what: the setting's bound is the one said");
}

# 4. session scope
{
	my $a = new_session($n1, name => 'a4');
	$a->query_safe("SELECT zk_session_lock('h4', max_hold => '1s')");
	ok(wait_until(sub { nodes_of('h4') == 0 }, 30), 'session: the node is gone');
	my $r = $a->query("SELECT zk_lock_token('h4')");
	is($r->{sqlstate}, '40001', 'session: the next zklock call says the lock was lost');
	like($r->{err}, qr/longer than its maximum/, 'session: and why');
	is($a->query_safe("SELECT zk_lock_token('h4') IS NULL"), 't', 'session: said once, then forgotten');
	is($a->query_safe("SELECT zk_try_session_lock('h4')"), 't', 'session: the name can be taken again');
	$a->query_safe("SELECT zk_unlock('h4')");
}

# 5. bad input
{
	my $a = new_session($n1, name => 'a5');
	for my $bad ("'0'", "'-1s'", "'0.5 ms'", "'200 years'")
	{
		my $r = $a->query("SELECT zk_lock('h5', max_hold => $bad)");
		is($r->{sqlstate}, '22023', "max_hold $bad: 22023");
		like($r->{err}, qr/HINT:/, "max_hold $bad: with a hint");
	}
	my $r = $a->query("SELECT zk_lock(ARRAY['h5a','h5b'], max_hold => '0')");
	is($r->{sqlstate}, '22023', 'a multi-lock: 22023');
	is(nodes_of('h5') + nodes_of('h5a') + nodes_of('h5b'), 0, 'bad max_hold: nothing taken');
}

# 6. a multi-lock
{
	my $a = new_session($n1, name => 'a6');
	$a->query_safe('BEGIN');
	$a->query_safe("SELECT zk_lock(ARRAY['h6a','h6b'], max_hold => '1s')");
	ok(wait_until(sub { nodes_of('h6a') + nodes_of('h6b') == 0 }, 30),
		'multi-lock: every member is taken back');
	my $r = $a->query('COMMIT');
	is($r->{sqlstate}, '40001', "multi-lock: the holder's COMMIT fails");
}

# 7. no maximum, nothing taken back
{
	my $a = new_session($n1, name => 'a7');
	$a->query_safe('BEGIN');
	$a->query_safe("SELECT zk_lock('h7')");
	$a->query_safe('SELECT pg_sleep(3)');
	is(try_lock_elsewhere($n2, 'h7'), 'f', 'no maximum: the lock is still held after 3 s');
	is($a->query('COMMIT')->{sqlstate}, '00000', 'no maximum: COMMIT succeeds');
}

# 8. a holder in the middle of its COMMIT is not taken back: a COMMIT that
#    waits for a synchronous standby that never comes (after the check
#    before COMMIT, before the transaction ends) keeps its lock past its
#    maximum; once the wait is cancelled the commit completes, the lock goes
{
	my $n3 = zk_node('mh3', $zk, allows_streaming => 1,
		conf => "synchronous_standby_names = 'nobody'\nsynchronous_commit = off\n");
	my $a = new_session($n3, name => 'a8');
	$a->query_safe('BEGIN');
	$a->query_safe("SELECT zk_lock('h8', max_hold => '1s')");
	$a->query_safe('CREATE TABLE t8 (x int)');	# a commit record to wait for
	$a->query_safe('SET LOCAL synchronous_commit = on');
	$a->send('COMMIT');
	ok(wait_until(sub {
		$n3->safe_psql('postgres',
			"SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep' AND pid = " . $a->pid) eq '1' }, 30),
		'committing: the COMMIT waits for the standby');
	sleep 3;
	is(try_lock_elsewhere($n1, 'h8'), 'f', 'committing: the lock is not taken back past its maximum');
	is(nodes_of('h8'), 1, 'committing: its node is there');
	$n3->safe_psql('postgres', 'SELECT pg_cancel_backend(' . $a->pid . ')');
	my $r = $a->wait(30);
	is($r->{sqlstate}, '00000', 'committing: the COMMIT completes once its wait is cancelled');
	ok(wait_until(sub { nodes_of('h8') == 0 }, 30), 'committing: then the lock goes');
	is($a->query_safe("SELECT zk_try_lock('h8')"), 't', 'committing: no lost lock is reported afterwards');
}

done_testing();
