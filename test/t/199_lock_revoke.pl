
# 199_lock_revoke.pl - zk_lock_revoke: an operator takes a lock back from
# whoever holds it, on any cluster (issue 39).
#
# 1. A holder idle in its transaction on another cluster: revoked (one row,
#    its cluster and pid); the waiter on a third session is granted with a
#    larger token; the holder's COMMIT fails with 40001 and says why; its
#    server logs it; no request is left under <root>/revokes.
# 2. A holder running a statement: it is cancelled (57014).
# 3. Session scope: the holder's next zklock call says 40001 once.
# 4. Shared holders on two clusters: both revoked, the waiting writer is not
#    touched (no row) and is granted.
# 5. A kazoo holder is named (not touched); its node stays; kazoo still holds.
# 6. The caller's own hold is not touched; nobody holding: no row.
# 7. A holder whose worker is frozen: "still held" once the timeout runs out;
#    the request is deleted all the same; once the worker runs again the
#    revoke finds nothing left to do (the old request is gone).
# 8. Privileges: PUBLIC may not call it (42501); the group admin may.
# 9. Bad input: a NULL name (no row), a negative timeout or an empty name
#    (22023): nothing changes.
# 10. A committing holder (synchronous standby wait) is not taken back; its
#     COMMIT succeeds and the revoke reports its node gone afterwards.
# Before: nothing could take a lock back from its holder but ending its
# session.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ZkLockTest;
use Time::HiRes qw(time usleep);

my $zk = zk_start();
my $n1 = zk_node('rv1', $zk);
my $n2 = zk_node('rv2', $zk);
my $LOCKS = '/zklock/locks';
my $REVOKES = '/zklock/revokes';

sub nodes_of { my @n = zk_lock_nodes($zk, "$LOCKS/$_[0]"); return scalar @n; }
sub requests { my @r = zk_children($zk, $REVOKES); return scalar @r; }

my $sys2 = $n2->safe_psql('postgres', 'SELECT system_identifier FROM pg_control_system()');

# 1. idle in transaction on another cluster; a waiter on the first
{
	my $h = new_session($n2, name => 'h1');
	my $w = new_session($n1, name => 'w1');
	$h->query_safe('BEGIN');
	my $th = $h->query_safe("SELECT zk_lock('r1')");
	$w->query_safe('BEGIN');
	$w->send("SELECT zk_lock('r1', '60s')");
	ok(wait_until(sub { nodes_of('r1') == 2 }, 30), 'the waiter queued behind the holder');
	my $lost0 = zk_status_value($n2, 'lost');
	my $out = $n1->safe_psql('postgres',
		"SELECT mode, cluster, pid, outcome FROM zk_lock_revoke('r1')");
	is($out, "exclusive|$sys2|" . $h->pid . "|revoked", 'one row: the holder, its cluster and pid, revoked');
	my $r = $w->wait(30);
	is($r->{sqlstate}, '00000', 'the waiter is granted');
	cmp_ok($r->{out}, '>', $th, 'with a larger token');
	$w->query_safe('COMMIT');
	$r = $h->query('COMMIT');
	is($r->{sqlstate}, '40001', "the holder's COMMIT fails with 40001");
	like($r->{err}, qr/was lost before commit/, 'it says the lock was lost');
	like($r->{err}, qr/revoked it \(zk_lock_revoke\)/, 'and that it was revoked');
	cmp_ok(zk_status_value($n2, 'lost'), '>', $lost0, "the holder's zk_status counts it lost");
	ok(wait_log($n2, qr/took back zookeeper lock "r1" from process \d+, revoked by zk_lock_revoke/, 30),
		"the holder's server logs it");
	ok(wait_log($n1, qr/zk_lock_revoke of zookeeper lock "r1": 1 revoked, 0 still held, 0 not touched/, 30),
		"the revoker's server logs what it did");
	is(requests(), 0, 'no request is left under <root>/revokes');
	ok(wait_until(sub { nodes_of('r1') == 0 }, 30), 'no node is left');
}

# 2. a running statement is cancelled
{
	my $h = new_session($n2, name => 'h2');
	$h->query_safe('BEGIN');
	$h->query_safe("SELECT zk_lock('r2')");
	$h->send('SELECT pg_sleep(60)');
	usleep(300_000);
	my $out = $n1->safe_psql('postgres', "SELECT outcome FROM zk_lock_revoke('r2')");
	is($out, 'revoked', 'a holder running a statement: revoked');
	my $r = $h->wait(30);
	is($r->{sqlstate}, '57014', 'its statement is cancelled');
	$h->query('ROLLBACK');
	is(nodes_of('r2'), 0, 'its node is gone');
}

# 3. session scope
{
	my $h = new_session($n2, name => 'h3');
	$h->query_safe("SELECT zk_session_lock('r3')");
	is($n1->safe_psql('postgres', "SELECT outcome FROM zk_lock_revoke('r3')"), 'revoked',
		'a session lock: revoked');
	my $r = $h->query("SELECT zk_lock_token('r3')");
	is($r->{sqlstate}, '40001', 'its next zklock call fails with 40001');
	$r = $h->query("SELECT zk_try_session_lock('r3')");
	is($r->{out}, 't', 'then the name can be taken again');
	$h->query_safe('SELECT zk_unlock_all()');
}

# 4. shared holders on two clusters; a waiting writer
{
	my $a = new_session($n1, name => 'a4');
	my $b = new_session($n2, name => 'b4');
	my $w = new_session($n2, name => 'w4');
	$a->query_safe("BEGIN; SELECT zk_lock_shared('r4')");
	$b->query_safe("BEGIN; SELECT zk_lock_shared('r4')");
	$w->query_safe('BEGIN');
	$w->send("SELECT zk_lock('r4', '60s')");
	ok(wait_until(sub { nodes_of('r4') == 3 }, 30), 'two readers hold, a writer waits');
	my $c = new_session($n1, name => 'c4');
	my $out = $c->query_safe(
		"SELECT string_agg(mode || ':' || outcome, ',' ORDER BY token) FROM zk_lock_revoke('r4')");
	is($out, 'shared:revoked,shared:revoked', 'both readers revoked, the writer not listed');
	my $r = $w->wait(30);
	is($r->{sqlstate}, '00000', 'the writer is granted');
	$w->query_safe('COMMIT');
	is($a->query('COMMIT')->{sqlstate}, '40001', "the first reader's COMMIT fails with 40001");
	is($b->query('COMMIT')->{sqlstate}, '40001', "the second reader's COMMIT fails with 40001");
}

# 5. a kazoo holder: named, not touched
{
	my $kz = kazoo_client($zk);
	is($kz->cmd("lock $LOCKS/r5 5"), 'locked', 'kazoo holds r5');
	my $out = $n1->safe_psql('postgres',
		"SELECT mode, cluster IS NULL, outcome FROM zk_lock_revoke('r5', '1s')");
	is($out, 'exclusive|t|not touched', 'the kazoo holder is named, not touched');
	is(nodes_of('r5'), 1, "kazoo's node stays");
	is(try_lock_elsewhere($n2, 'r5'), 'f', 'kazoo still holds it');
	is($kz->cmd("release $LOCKS/r5"), 'released', 'kazoo lets go');
	is(requests(), 0, 'no request was made for it');
}

# 6. one's own hold; nobody holding
{
	my $s = new_session($n1, name => 's6');
	$s->query_safe("BEGIN; SELECT zk_lock('r6')");
	my $out = $s->query_safe("SELECT outcome FROM zk_lock_revoke('r6')");
	is($out, 'not touched', "the caller's own hold is not touched");
	is($s->query('COMMIT')->{sqlstate}, '00000', 'and it commits');
	is($n1->safe_psql('postgres', "SELECT count(*) FROM zk_lock_revoke('r6')"), '0',
		'nobody holding: no row');
	is($n1->safe_psql('postgres', "SELECT count(*) FROM zk_lock_revoke(42::bigint)"), '0',
		'the key form too');
}

# 7. the holder's worker frozen: still held, the request deleted anyway
{
	my $h = new_session($n2, name => 'h7');
	$h->query_safe("BEGIN; SELECT zk_lock('r7')");
	my $wpid = worker_pid($n2);
	kill 'STOP', $wpid;
	my $t0 = time;
	my $out = $n1->safe_psql('postgres', "SELECT outcome FROM zk_lock_revoke('r7', '2s')");
	my $took = time - $t0;
	is($out, 'still held', "a holder whose worker is frozen: still held after the timeout");
	cmp_ok($took, '<', 30, 'the call did not hang');
	is(requests(), 0, 'its request is deleted all the same');
	kill 'CONT', $wpid;
	usleep(1_000_000);
	my $r = $h->query("SELECT zk_lock_token('r7') IS NOT NULL");
	is($r->{out}, 't', 'the holder, its worker running again, still holds (the request is gone)');
	is(try_lock_elsewhere($n1, 'r7'), 'f', 'nobody else can take it');
	is($h->query('COMMIT')->{sqlstate}, '00000', 'and commits');
}

# 8. privileges
{
	$n1->safe_psql('postgres', 'CREATE ROLE rv_app LOGIN; CREATE ROLE rv_op LOGIN');
	my ($rc, $out, $err) = $n1->psql('postgres',
		"SET ROLE rv_app; SELECT * FROM zk_lock_revoke('r8')");
	like($err, qr/permission denied for function zk_lock_revoke/, 'PUBLIC may not revoke');
	$n1->safe_psql('postgres', "SELECT zk_grant('admin', 'rv_op')");
	is($n1->safe_psql('postgres', "SET ROLE rv_op; SELECT count(*) FROM zk_lock_revoke('r8')"), '0',
		'the group admin may');
	is($n1->safe_psql('postgres',
		"SELECT count(*) FROM zk_privilege_groups() WHERE group_name = 'admin' AND object LIKE '%zk_lock_revoke%'"),
		'2', 'both forms are in the group admin');
}

# 9. bad input changes nothing
{
	my $h = new_session($n2, name => 'h9');
	$h->query_safe("BEGIN; SELECT zk_lock('r9')");
	my $s = new_session($n1, name => 's9');
	my $r = $s->query("SELECT count(*) FROM zk_lock_revoke(NULL::text)");
	is($r->{out}, '0', 'a NULL name: no row, as a strict function');
	$r = $s->query("SELECT * FROM zk_lock_revoke('r9', '-1s')");
	is($r->{sqlstate}, '22023', 'a negative timeout: 22023');
	$r = $s->query("SELECT * FROM zk_lock_revoke('')");
	is($r->{sqlstate}, '22023', 'an empty name: 22023');
	is($h->query('COMMIT')->{sqlstate}, '00000', 'the holder was not touched');
	is(requests(), 0, 'no request was made');
}

# 10. a committing holder keeps its lock until its COMMIT is over
{
	my $n3 = zk_node('rv3', $zk, allows_streaming => 1,
		conf => "synchronous_standby_names = 'nobody'\nsynchronous_commit = off\n");
	my $a = new_session($n3, name => 'a10');
	$a->query_safe('BEGIN');
	$a->query_safe("SELECT zk_lock('r10')");
	$a->query_safe('CREATE TABLE t10 (x int)');
	$a->query_safe('SET LOCAL synchronous_commit = on');
	$a->send('COMMIT');
	ok(wait_until(sub {
		$n3->safe_psql('postgres',
			"SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep' AND pid = " . $a->pid) eq '1' }, 30),
		'the COMMIT waits for the standby');
	my $rv = new_session($n1, name => 'rv10');
	$rv->send("SELECT outcome FROM zk_lock_revoke('r10', '60s')");
	sleep 2;
	ok(!wait_log($n3, qr/took back zookeeper lock "r10"/, 1), 'a committing holder is not taken back');
	is($a->wait(1)->{sqlstate}, 'TIMEOUT', 'its COMMIT is not cancelled');
	is(try_lock_elsewhere($n2, 'r10'), 'f', 'it still holds');
	$n3->safe_psql('postgres', 'SELECT pg_cancel_backend(' . $a->pid . ')');
	is($a->wait(30)->{sqlstate}, '00000', 'the COMMIT ends (the test cancels its wait)');
	my $r = $rv->wait(30);
	is($r->{out}, 'revoked', 'then the revoke reports its node gone');
	is(requests(), 0, 'no request is left');
}

done_testing();
