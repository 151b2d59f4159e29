# 518_namespace_local_locks.pl - a backend's own table of the locks it holds
# knows each by its namespace-qualified name.
#
# zklock.namespace cannot be SET while a session holds something, but it
# changes under held locks all the same: a SET LOCAL reverts at COMMIT, a
# function's SET clause when it returns, and a session lock outlives both.
# Lock "x" of namespace nsb, held by session S, must then never be taken for
# S's "x" of namespace nsa (re-entered, reported held, let go of):
#
#   1. S takes x in nsb (SET LOCAL), the transaction ends (back in nsa),
#      and S takes x in nsa: a second node, under nsa:x; another session of
#      nsa sees x taken, another of nsb too.  zk_unlock in nsa lets go of
#      nsa's x only; a second one warns and leaves nsb's x alone.
#   2. S holds x and y in nsa and is back in nsb (ROLLBACK TO SAVEPOINT
#      reverts a SET LOCAL): x is another lock there, a try of y really
#      contends with nsb's holder, zk_lock_token does not show nsa's, and
#      zk_unlock lets go of nsb's x only.
#   3. The same through a function with SET zklock.namespace.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ZkLockTest;

my $zk = zk_start();
my $node = zk_node('nslocal', $zk, namespace => 'nsa');
my $LOCKS = '/zklock/locks';

my $S = new_session($node, name => 'S');
my $OA = new_session($node, name => 'OA');
my $OB = new_session($node, name => 'OB');
$OB->query_safe("SET zklock.namespace = 'nsb'");

# holder nodes (exclusive contenders) of a qualified lock
sub holders
{
	my ($qname) = @_;
	return scalar(grep { /__lock__/ } zk_children($zk, "$LOCKS/$qname"));
}

# holders of each qualified lock, joined by ",", once they are as expected
# (a node let go goes a moment later) or after 10 s
sub holders_are
{
	my ($want, @qnames) = @_;
	my $got;
	wait_until(sub { $got = join(',', map { holders($_) } @qnames); $got eq $want }, 10);
	return $got;
}

# a transaction-scope try by another session, rolled back at once
sub try_by
{
	my ($s, $name) = @_;
	$s->query_safe('BEGIN');
	my $got = $s->query_safe("SELECT zk_try_lock('$name')");
	$s->query_safe('ROLLBACK');
	return $got;
}

# $sql run by S in namespace nsb, in a transaction of its own (SET LOCAL)
sub in_nsb
{
	my ($sql) = @_;
	$S->query_safe('BEGIN');
	$S->query_safe("SET LOCAL zklock.namespace = 'nsb'");
	my $out = $S->query_safe($sql);
	$S->query_safe('COMMIT');
	return $out;
}

#
# 1. x in nsb (SET LOCAL, reverted at COMMIT), then x in nsa: two locks
#
is(in_nsb("SELECT zk_try_session_lock('x')"), 't', 'S takes x in nsb (SET LOCAL)');
is($S->query_safe('SHOW zklock.namespace'), 'nsa', 'back in nsa after COMMIT');
is(holders('nsb:x'), 1, 'ZooKeeper: one holder of nsb:x');
is(try_by($OB, 'x'), 'f', "another session of nsb does not get x");
is(try_by($OA, 'x'), 't', "another session of nsa does (nsa's x is free)");

is($S->query_safe("SELECT zk_try_session_lock('x')"), 't', 'S takes x in nsa');
is(holders('nsa:x'), 1, "ZooKeeper: a holder of nsa:x (not a re-entry of nsb's x)");
is(holders('nsb:x'), 1, 'and still one of nsb:x');
is(try_by($OA, 'x'), 'f', "now another session of nsa does not get x");
is(try_by($OB, 'x'), 'f', "nor one of nsb");

is($S->query_safe("SELECT zk_unlock('x')"), 't', "S lets go of x in nsa");
is(holders_are('0,1', 'nsa:x', 'nsb:x'), '0,1', "ZooKeeper: nsa:x's holder gone, nsb:x's left");
my $r = $S->query("SELECT zk_unlock('x')");
is($r->{out}, 'f', 'a second zk_unlock in nsa finds nothing to let go');
like($r->{err}, qr/you don't own a session-level exclusive zookeeper lock "x"/, '... and warns');
is(holders('nsb:x'), 1, "nsb's x is untouched");
is($S->query_safe("SELECT zk_lock_token('x') IS NULL"), 't', "zk_lock_token('x') in nsa: not held");
$S->query_safe('SELECT zk_unlock_all()');
is(holders_are('0', 'nsb:x'), '0', 'zk_unlock_all lets go of nsb:x too');

#
# 2. back into nsb under a lock of nsa (ROLLBACK TO SAVEPOINT reverts the
#    SET LOCAL): x there is another lock, and y contends with nsb's holder
#
is($OB->query_safe("SELECT zk_try_session_lock('y')"), 't', 'OB holds y in nsb');
$S->query_safe('BEGIN');
$S->query_safe("SET LOCAL zklock.namespace = 'nsb'");
$S->query_safe('SAVEPOINT a');
$S->query_safe("SET LOCAL zklock.namespace = 'nsa'");
is($S->query_safe("SELECT zk_try_session_lock('x') AND zk_try_session_lock('y')"), 't',
	'S takes x and y in nsa');
$S->query_safe('ROLLBACK TO SAVEPOINT a');
is($S->query_safe('SHOW zklock.namespace'), 'nsb', 'ROLLBACK TO SAVEPOINT: S is in nsb again');
is($S->query_safe("SELECT zk_try_session_lock('x')"), 't', 'S takes x in nsb');
is(holders('nsa:x') . ',' . holders('nsb:x'), '1,1', 'ZooKeeper: one holder of x in each namespace');
is(try_by($OA, 'x') . ',' . try_by($OB, 'x'), 'f,f', 'neither namespace lets another session have x');
is($S->query_safe("SELECT zk_try_session_lock('y')"), 'f',
	"S's try of y in nsb meets OB's hold (not S's own y of nsa)");
is(holders('nsb:y'), 1, "ZooKeeper: OB's node alone under nsb:y");
is($S->query_safe("SELECT zk_lock_token('y') IS NULL"), 't', "zk_lock_token('y') in nsb: not held");
is($S->query_safe("SELECT zk_unlock('x')"), 't', 'S lets go of x in nsb');
is(holders_are('1,0', 'nsa:x', 'nsb:x'), '1,0', "ZooKeeper: nsb:x's holder gone, nsa:x's left");
$r = $S->query("SELECT zk_unlock('x')");
is($r->{out}, 'f', 'a second zk_unlock in nsb finds nothing to let go');
is(holders('nsa:x'), 1, "nsa's x is untouched");
is(try_by($OA, 'x'), 'f', 'another session of nsa still does not get x');
$S->query_safe('COMMIT');
is($S->query_safe("SELECT zk_lock_token('x') IS NOT NULL AND zk_lock_token('y') IS NOT NULL"), 't',
	'back in nsa, S still holds x and y there');
$S->query_safe('SELECT zk_unlock_all()');
$OB->query_safe('SELECT zk_unlock_all()');

#
# 3. a function's SET clause
#
$node->safe_psql('postgres', q{
	CREATE FUNCTION take_in_nsb(n text) RETURNS boolean
	LANGUAGE sql SET zklock.namespace = 'nsb'
	AS $$ SELECT zk_try_session_lock(n) $$});
is($S->query_safe("SELECT take_in_nsb('z')"), 't',
	'S takes z in a function with SET zklock.namespace = nsb');
is($S->query_safe("SELECT zk_try_session_lock('z')"), 't', 'then z in nsa');
is(holders('nsa:z') . ',' . holders('nsb:z'), '1,1', 'ZooKeeper: one holder in each namespace');
is(try_by($OA, 'z') . ',' . try_by($OB, 'z'), 'f,f', 'neither namespace lets another session have z');

$S->query_safe('SELECT zk_unlock_all()');
ok(wait_until(sub { zk_status_value($node, 'entries_used') eq '0' }, 10), 'entries_used back to 0');

$_->quit foreach ($S, $OA, $OB);
$node->stop;
done_testing();
