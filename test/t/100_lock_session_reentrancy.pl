
# 100_lock_session_reentrancy.pl - session-scoped locks and re-entrancy.
#
# Session locks outlive transactions and go with zk_unlock, zk_unlock_all
# or the end of the session; a backend's holds of one name (session or
# transaction, repeated, exclusive then shared) stack on one znode; a shared
# holder asking for the exclusive lock waits only for the others.  The
# znodes are counted through ZooKeeper at every step.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ZkLockTest;

my $zk = zk_start();
my $node = zk_node('session', $zk,
	session_timeout => '10s',
	connect_timeout => '3s',
	conf => "max_prepared_transactions = 2\n");

my $LOCKS = '/zklock/locks';


my $s1 = new_session($node, name => 's1');
my $s2 = new_session($node, name => 's2');

#
# A session lock survives COMMIT and ROLLBACK
#
my $t = $s1->query_safe("SELECT zk_session_lock('sess')");
like($t, qr/^\d+$/, 'zk_session_lock returns a token');
is(zk_count($zk, "$LOCKS/sess"), 1, 'one node for the session lock');
is(try_lock_elsewhere($node, 'sess'), 'f', 'held after its own (autocommit) transaction ended');
$s1->query_safe('BEGIN; SELECT 1; COMMIT');
is(try_lock_elsewhere($node, 'sess'), 'f', 'held after a COMMIT');
$s1->query_safe('BEGIN; SELECT 1; ROLLBACK');
is(try_lock_elsewhere($node, 'sess'), 'f', 'held after a ROLLBACK');
$s1->query_safe('BEGIN');
is($s1->query('SELECT 1/0')->{sqlstate}, '22012', 'a failing transaction');
$s1->query_safe('ROLLBACK');
is(try_lock_elsewhere($node, 'sess'), 'f', 'held after a failed transaction');
is(zk_count($zk, "$LOCKS/sess"), 1, 'still one node');
is($s1->query_safe("SELECT zk_lock_token('sess')"), $t, 'zk_lock_token shows the same grant');

# waiting for a session lock, with a timeout
my $r = $s2->query("SELECT zk_session_lock('sess', '1s')", 30);
is($r->{sqlstate}, '55P03', 'zk_session_lock with a timeout fails with 55P03 while held elsewhere')
  or diag $r->{err};
ok(scalar(zk_wait_count($zk, "$LOCKS/sess", 1, 5)), 'the timed-out request left no node');
is($s2->query_safe("SELECT zk_try_session_lock('sess')"), 'f',
	'zk_try_session_lock is false while held elsewhere');

# a waiting session lock is granted when the holder unlocks
$s2->send("SELECT zk_session_lock('sess')");
ok(scalar(zk_wait_count($zk, "$LOCKS/sess", 2, 10)), 'second session queues (2 nodes)');
sleep 1;
ok($s2->running, 'second session waits');

is($s1->query_safe("SELECT zk_unlock('sess')"), 't', 'zk_unlock returns true');
$r = $s2->wait(15);
is($r->{sqlstate}, '00000', 'waiting session granted after zk_unlock') or diag $r->{err};
ok($r->{out} =~ /^\d+$/ && $r->{out} > $t, 'with a larger token');
ok(scalar(zk_wait_count($zk, "$LOCKS/sess", 1, 5)), "unlocker's node gone (1 node)");
is($s1->query_safe("SELECT zk_lock_token('sess') IS NULL"), 't',
	'zk_lock_token is NULL after zk_unlock');

# zk_unlock of something not held: false and a WARNING
$r = $s1->query("SELECT zk_unlock('sess')");
is($r->{sqlstate}, '00000', 'zk_unlock of a lock held by another session is no error');
is($r->{out}, 'f', 'it returns false');
like($r->{err}, qr/WARNING/, 'with a WARNING on stderr');
is(zk_count($zk, "$LOCKS/sess"), 1, "and does not touch the other session's node");
$r = $s1->query("SELECT zk_unlock('never-held')");
is($r->{out}, 'f', 'zk_unlock of a name never locked returns false');
like($r->{err}, qr/WARNING/, 'with a WARNING');
$r = $s1->query("SELECT zk_unlock_shared('never-held')");
is($r->{out}, 'f', 'zk_unlock_shared of a name never locked returns false');
like($r->{err}, qr/WARNING/, 'with a WARNING');

# released at disconnect
$s2->quit;
ok(scalar(zk_wait_count($zk, "$LOCKS/sess", 0, 5)), 'session lock released when its session ends');
is(try_lock_elsewhere($node, 'sess'), 't', 'free again');
$s2 = new_session($node, name => 's2b');

# a session lock taken in a transaction that rolls back is still held
$s1->query_safe('BEGIN');
$s1->query_safe("SELECT zk_session_lock('inxact')");
$s1->query_safe('ROLLBACK');
is(zk_count($zk, "$LOCKS/inxact"), 1, 'session lock taken in a rolled-back transaction keeps its node');
is(try_lock_elsewhere($node, 'inxact'), 'f', 'and is held');
$s1->query_safe('BEGIN');
$s1->query_safe('SAVEPOINT sp');
$s1->query_safe("SELECT zk_session_lock('insp')");
$s1->query_safe('ROLLBACK TO SAVEPOINT sp');
$s1->query_safe('COMMIT');
is(try_lock_elsewhere($node, 'insp'), 'f', 'session lock taken in a rolled-back savepoint is held');
is($s1->query_safe("SELECT zk_unlock('inxact'), zk_unlock('insp')"), 't|t', 'both unlocked');
ok(scalar(zk_wait_count($zk, $LOCKS, 0, 5)), 'no nodes left');

#
# Stacked session holds: one node, released by the last zk_unlock
#
my $k1 = $s1->query_safe("SELECT zk_session_lock('stk')");
my $k2 = $s1->query_safe("SELECT zk_session_lock('stk')");
is($k2, $k1, 'second zk_session_lock of a held name returns the same token');
is($s1->query_safe("SELECT zk_try_session_lock('stk')"), 't', 'zk_try_session_lock on it is true too');
is(zk_count($zk, "$LOCKS/stk"), 1, 'three holds, one node');
is($s1->query_safe("SELECT zk_unlock('stk')"), 't', 'first zk_unlock is true');
is(zk_count($zk, "$LOCKS/stk"), 1, 'node stays after the first zk_unlock');
is(try_lock_elsewhere($node, 'stk'), 'f', 'another session still cannot take it');
is($s1->query_safe("SELECT zk_unlock('stk')"), 't', 'second zk_unlock is true');
is(try_lock_elsewhere($node, 'stk'), 'f', 'still held (third hold)');
is($s1->query_safe("SELECT zk_unlock('stk')"), 't', 'third zk_unlock is true');
ok(scalar(zk_wait_count($zk, "$LOCKS/stk", 0, 5)), 'the last zk_unlock removes the node');
is(try_lock_elsewhere($node, 'stk'), 't', 'free for others');
$r = $s1->query("SELECT zk_unlock('stk')");
is($r->{out}, 'f', 'a fourth zk_unlock is false');
like($r->{err}, qr/WARNING/, 'with a WARNING');

#
# Session hold plus transaction hold of the same name: one node
#
my $m1 = $s1->query_safe("SELECT zk_session_lock('mix')");
$s1->query_safe('BEGIN');
my $m2 = $s1->query_safe("SELECT zk_lock('mix', '5s')");
is($m2, $m1, 'zk_lock of a name held at session level returns the same token at once');
is(zk_count($zk, "$LOCKS/mix"), 1, 'one node for the session and the transaction hold');
$s1->query_safe('COMMIT');
is(zk_count($zk, "$LOCKS/mix"), 1, 'COMMIT keeps the node: the session hold remains');
is(try_lock_elsewhere($node, 'mix'), 'f', 'still held after COMMIT');
is($s1->query_safe("SELECT zk_unlock('mix')"), 't', 'zk_unlock releases the session hold');
ok(scalar(zk_wait_count($zk, "$LOCKS/mix", 0, 5)), 'node gone');
is(try_lock_elsewhere($node, 'mix'), 't', 'free');

# the other way round: transaction hold first, then a session hold
$s1->query_safe('BEGIN');
my $x1 = $s1->query_safe("SELECT zk_lock('mix2')");
my $x2 = $s1->query_safe("SELECT zk_session_lock('mix2', '5s')");
is($x2, $x1, 'zk_session_lock of a name held by the transaction returns the same token');
is(zk_count($zk, "$LOCKS/mix2"), 1, 'one node');
$s1->query_safe('COMMIT');
is(zk_count($zk, "$LOCKS/mix2"), 1, 'the session hold keeps the node after COMMIT');
is(try_lock_elsewhere($node, 'mix2'), 'f', 'held');
is($s1->query_safe("SELECT zk_unlock('mix2')"), 't', 'zk_unlock releases it');
ok(scalar(zk_wait_count($zk, "$LOCKS/mix2", 0, 5)), 'node gone');

# zk_unlock of the session hold inside the transaction: the transaction
# hold keeps the lock until COMMIT
$s1->query_safe('BEGIN');
$s1->query_safe("SELECT zk_lock('mix3')");
$s1->query_safe("SELECT zk_session_lock('mix3')");
is($s1->query_safe("SELECT zk_unlock('mix3')"), 't', 'zk_unlock of the session hold is true');
is(zk_count($zk, "$LOCKS/mix3"), 1, 'the transaction hold keeps the node');
is(try_lock_elsewhere($node, 'mix3'), 'f', 'still held');
$s1->query_safe('COMMIT');
ok(scalar(zk_wait_count($zk, "$LOCKS/mix3", 0, 5)), 'released at COMMIT');

# zk_unlock of a lock held only by the transaction: false, lock stays
$s1->query_safe('BEGIN');
$s1->query_safe("SELECT zk_lock('xonly')");
$r = $s1->query("SELECT zk_unlock('xonly')");
is($r->{out}, 'f', 'zk_unlock of a transaction-level lock is false');
like($r->{err}, qr/WARNING/, 'with a WARNING');
is(try_lock_elsewhere($node, 'xonly'), 'f', 'the transaction still holds it');
$s1->query_safe('COMMIT');
ok(scalar(zk_wait_count($zk, "$LOCKS/xonly", 0, 5)), 'released at COMMIT');

#
# Exclusive then shared in one transaction: granted at once, one node
#
$s1->query_safe('BEGIN');
my $e1 = $s1->query_safe("SELECT zk_lock('es')");
$r = $s1->query("SELECT zk_lock_shared('es', '5s')", 30);
is($r->{sqlstate}, '00000', 'zk_lock_shared while holding the exclusive lock is granted') or diag $r->{err};
ok($r->{elapsed} < 3, sprintf('at once (%.2fs)', $r->{elapsed}));
is($s1->query_safe("SELECT zk_try_lock_shared('es')"), 't', 'zk_try_lock_shared on it is true too');
is(zk_lock_modes($zk, "$LOCKS/es"), 'exclusive', 'still one exclusive node, no shared node');
is(try_lock_shared_elsewhere($node, 'es'), 'f', 'others cannot share it');
$s1->query_safe('COMMIT');
ok(scalar(zk_wait_count($zk, "$LOCKS/es", 0, 5)), 'released at COMMIT');

# the same while another session waits for the exclusive lock: the shared
# request must not queue behind that waiter (which waits for us)
$s1->query_safe('BEGIN');
$s1->query_safe("SELECT zk_lock('es2')");
queue_request($zk, $s2, "SELECT zk_lock('es2')", "$LOCKS/es2", 2, 'another session waits for our exclusive lock');
$r = $s1->query("SELECT zk_lock_shared('es2', '5s')", 30);
is($r->{sqlstate}, '00000',
	'zk_lock_shared while holding the exclusive lock is granted although a writer waits behind us')
  or diag $r->{err};
ok($r->{elapsed} < 3, sprintf('at once (%.2fs)', $r->{elapsed}));
is(zk_lock_modes($zk, "$LOCKS/es2"), 'exclusive,exclusive', 'no shared node was added: our node and the waiter\'s');
ok($s2->running, 'the other session still waits');
$s1->query_safe('COMMIT');
$r = $s2->wait(15);
is($r->{sqlstate}, '00000', 'the waiter is granted at our COMMIT') or diag $r->{err};
$s2->query_safe('COMMIT');
ok(scalar(zk_wait_count($zk, "$LOCKS/es2", 0, 5)), 'no nodes left');

#
# Shared then exclusive
#
# only our own shared hold: granted at once
$s1->query_safe('BEGIN');
$s1->query_safe("SELECT zk_lock_shared('up')");
$r = $s1->query("SELECT zk_lock('up', '5s')", 30);
is($r->{sqlstate}, '00000', 'exclusive request of our own shared lock is granted') or diag $r->{err};
ok($r->{elapsed} < 3, sprintf('at once (%.2fs): it does not wait for itself', $r->{elapsed}));
is(zk_lock_modes($zk, "$LOCKS/up"), 'shared,exclusive', 'an exclusive node was added after our shared one');
is(try_lock_shared_elsewhere($node, 'up'), 'f', 'others cannot share it now');
$s1->query_safe('COMMIT');
ok(scalar(zk_wait_count($zk, "$LOCKS/up", 0, 5)), 'both nodes released at COMMIT');

# another session also holds it shared: wait for that one only
$s1->query_safe('BEGIN');
$s1->query_safe("SELECT zk_lock_shared('up2')");
$s2->query_safe('BEGIN');
$s2->query_safe("SELECT zk_lock_shared('up2')");
is(zk_lock_modes($zk, "$LOCKS/up2"), 'shared,shared', 'two sessions hold it shared');
$s1->send("SELECT zk_lock('up2')");
ok(scalar(zk_wait_count($zk, "$LOCKS/up2", 3, 10)), 'exclusive request has its node (3 nodes)');
is(zk_lock_modes($zk, "$LOCKS/up2"), 'shared,shared,exclusive', 'queue: S S X');
sleep 1;
ok($s1->running, 'exclusive request waits while the other session holds it shared');
$s2->query_safe('COMMIT');
$r = $s1->wait(15);
is($r->{sqlstate}, '00000', 'granted once the other shared holder released') or diag $r->{err};
is(zk_lock_modes($zk, "$LOCKS/up2"), 'shared,exclusive', 'our shared node and our exclusive node remain');
is(try_lock_shared_elsewhere($node, 'up2'), 'f', 'others cannot share it now');
$s1->query_safe('COMMIT');
ok(scalar(zk_wait_count($zk, "$LOCKS/up2", 0, 5)), 'released at COMMIT');

# the same with session-level holds
$s1->query_safe("SELECT zk_session_lock_shared('up3')");
$s2->query_safe("SELECT zk_session_lock_shared('up3')");
$s1->send("SELECT zk_session_lock('up3')");
ok(scalar(zk_wait_count($zk, "$LOCKS/up3", 3, 10)), 'session upgrade queued (3 nodes)');
sleep 1;
ok($s1->running, 'session upgrade waits for the other shared holder');
is($s2->query_safe("SELECT zk_unlock_shared('up3')"), 't', 'the other releases its shared hold');
$r = $s1->wait(15);
is($r->{sqlstate}, '00000', 'session upgrade granted') or diag $r->{err};
is($s1->query_safe("SELECT zk_unlock('up3')"), 't', 'zk_unlock releases the exclusive hold');
is(zk_lock_modes($zk, "$LOCKS/up3"), 'shared', 'the shared hold remains');
is(try_lock_shared_elsewhere($node, 'up3'), 't', 'others can share it again');
is(try_lock_elsewhere($node, 'up3'), 'f', 'but not take it exclusively');
is($s1->query_safe("SELECT zk_unlock_shared('up3')"), 't', 'zk_unlock_shared releases the shared hold');
ok(scalar(zk_wait_count($zk, "$LOCKS/up3", 0, 5)), 'no nodes left');

#
# zk_unlock_all releases every session-level lock, not the transaction's
#
$s1->query_safe("SELECT zk_session_lock('a1')");
$s1->query_safe("SELECT zk_session_lock('a1')");
$s1->query_safe("SELECT zk_session_lock('a2')");
$s1->query_safe("SELECT zk_session_lock_shared('a3')");
$s1->query_safe('SELECT zk_session_lock(4242)');
ok(scalar(zk_wait_count($zk, $LOCKS, 8, 10)), 'four session locks: four containers with one node each');
$s1->query_safe('BEGIN');
$s1->query_safe("SELECT zk_lock('ax')");
$s1->query_safe('SELECT zk_unlock_all()');
ok(scalar(zk_wait_count($zk, "$LOCKS/a1", 0, 5)), 'zk_unlock_all released a1 (held twice)');
ok(scalar(zk_wait_count($zk, "$LOCKS/a2", 0, 5)), 'and a2');
ok(scalar(zk_wait_count($zk, "$LOCKS/a3", 0, 5)), 'and the shared a3');
ok(scalar(zk_wait_count($zk, "$LOCKS/4242", 0, 5)), 'and 4242');
is(zk_count($zk, "$LOCKS/ax"), 1, 'the transaction-level lock is not released by zk_unlock_all');
is(try_lock_elsewhere($node, 'ax'), 'f', 'ax still held');
is(try_lock_elsewhere($node, 'a1'), 't', 'a1 free for others');
$r = $s1->query("SELECT zk_unlock('a2')");
is($r->{out}, 'f', 'zk_unlock after zk_unlock_all is false');
$s1->query_safe('COMMIT');
ok(scalar(zk_wait_count($zk, $LOCKS, 0, 5)), 'nothing left after COMMIT');
is($s1->query_safe('SELECT zk_unlock_all()'), '', 'zk_unlock_all with nothing held is fine');

#
# bigint keys
#
my $b1 = $s1->query_safe('SELECT zk_session_lock(42)');
like($b1, qr/^\d+$/, 'zk_session_lock(42) returns a token');
ok(zk_exists($zk, "$LOCKS/42"), 'it locks /zklock/locks/42');
is(zk_count($zk, "$LOCKS/42"), 1, 'with one node');
is(try_lock_elsewhere($node, '42'), 'f', "zk_try_lock('42') elsewhere conflicts with it");
is(sql_elsewhere($node, 'SELECT zk_try_lock(42)'), 'f', 'zk_try_lock(42) elsewhere too');
is($s1->query_safe("SELECT zk_session_lock('42')"), $b1, "zk_session_lock('42') is the same lock (re-entrant)");
is($s1->query_safe('SELECT zk_lock_token(42)'), $b1, 'zk_lock_token(42) returns its token');
is(zk_count($zk, "$LOCKS/42"), 1, 'still one node');
is($s1->query_safe('SELECT zk_unlock(42)'), 't', 'zk_unlock(42) is true');
is(zk_count($zk, "$LOCKS/42"), 1, 'one hold left, node stays');
is($s1->query_safe("SELECT zk_unlock('42')"), 't', "zk_unlock('42') releases the second hold");
ok(scalar(zk_wait_count($zk, "$LOCKS/42", 0, 5)), 'zk_unlock frees /zklock/locks/42');
is(sql_elsewhere($node, 'SELECT zk_try_lock(42)'), 't', 'free for others');
is($s1->query_safe('SELECT zk_try_session_lock(-5)'), 't', 'zk_try_session_lock(-5)');
ok(zk_exists($zk, "$LOCKS/-5"), 'a negative key is the name -5');
is($s1->query_safe('SELECT zk_try_session_lock_shared(43), zk_unlock_shared(43), zk_unlock(-5)'),
	't|t|t', 'shared key lock and unlocks by key');
ok(scalar(zk_wait_count($zk, $LOCKS, 0, 5)), 'no nodes left');

#
# PREPARE TRANSACTION is refused while holding a transaction-scoped lock
#
$s1->query_safe('BEGIN');
$s1->query_safe("SELECT zk_lock('prep')");
$r = $s1->query("PREPARE TRANSACTION 'zk_prep'");
is($r->{sqlstate}, '0A000', 'PREPARE TRANSACTION while holding a transaction lock fails with 0A000')
  or diag $r->{err};
$s1->query('ROLLBACK');
is($node->safe_psql('postgres', 'SELECT count(*) FROM pg_prepared_xacts'), '0', 'nothing was prepared');
ok(scalar(zk_wait_count($zk, "$LOCKS/prep", 0, 5)), 'the lock was released with the transaction');
$s1->query_safe('BEGIN');
$s1->query_safe("SELECT zk_lock_shared('prep')");
$r = $s1->query("PREPARE TRANSACTION 'zk_prep2'");
is($r->{sqlstate}, '0A000', 'same with a shared transaction lock') or diag $r->{err};
$s1->query('ROLLBACK');
ok(scalar(zk_wait_count($zk, "$LOCKS/prep", 0, 5)), 'released');

$s1->quit;
$s2->quit;
ok(scalar(zk_wait_count($zk, $LOCKS, 0, 10)), 'nothing left in ZooKeeper at the end');
ok(wait_until(sub { zk_status_value($node, 'entries_used') eq '0' }, 10),
	'zk_status().entries_used back to 0');

$node->stop;
done_testing();
