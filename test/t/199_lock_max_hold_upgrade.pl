
# 199_lock_max_hold_upgrade.pl - a maximum hold on the shared node
# of an upgrade.  An upgrade (this backend holds 'u' shared, then takes it
# exclusive) is granted ahead of the writers queued behind its shared node:
# they stay out only while that node exists (lock_backend.c, LocalLock
# pin_idx).  The worker's max_hold takes back one entry: the shared one,
# deleting its node.  The writer queued behind it is then granted while the
# upgrade's exclusive lock is still held and its COMMIT still succeeds
# (check_before_commit looks at the exclusive entry only, and at neither a
# session-scope shared hold nor a pinned shared node): two exclusive holders
# both commit.
#
# 1. The shared hold is session scope, still held.
# 2. The shared hold was let go (zk_unlock_shared): its node is pinned by
#    the exclusive lock; max_hold still deletes it.
# 3. No per-call max_hold at all: only the superuser's zklock.max_hold
#    (3s), which bounds both nodes; the shared one, granted first, is due
#    first, and in between a's COMMIT succeeds while b holds the lock.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ZkLockTest;
use Time::HiRes qw(time usleep);

my $zk = zk_start();
my $n1 = zk_node('umh1', $zk);
my $n2 = zk_node('umh2', $zk);
my $n3 = zk_node('umh3', $zk, conf => "zklock.max_hold = '3s'\n");
my $LOCKS = '/zklock/locks';

sub nodes_of { my @n = zk_lock_nodes($zk, "$LOCKS/$_[0]"); return scalar @n; }

for my $case ('session shared held', 'shared let go, pinned', 'setting only')
{
	my $name = $case =~ /pinned/ ? 'u2' : $case =~ /setting/ ? 'u3' : 'u1';
	my $a = new_session($case =~ /setting/ ? $n3 : $n1, name => "a-$name");
	my $b = new_session($n2, name => "b-$name");

	# a holds it shared, with a maximum hold
	if ($case =~ /setting/)
	{
		$a->query_safe("SELECT zk_session_lock_shared('$name')");
	}
	else
	{
		$a->query_safe("SELECT zk_session_lock_shared('$name', max_hold => '2s')");
	}
	# b, on the other cluster, queues a writer behind a's shared node
	$b->query_safe('BEGIN');
	$b->send("SELECT zk_lock('$name', '60s')");
	ok(wait_until(sub { nodes_of($name) == 2 }, 30), "$case: b's writer is queued behind a's shared node");
	sleep 2 if $case =~ /setting/;	# the exclusive one is due 2 s after the shared one
	# a upgrades: granted ahead of b's writer
	$a->query_safe('BEGIN');
	my $ta = $a->query_safe("SELECT zk_lock('$name', '10s')");
	ok($ta > 0, "$case: a's upgrade is granted ahead of b");
	$a->query_safe("SELECT zk_unlock_shared('$name')") if $case =~ /pinned/;

	# the shared hold's maximum passes; does b get in while a holds it exclusive?
	my $r = $b->wait($case =~ /setting/ ? 2 : 8);
	my $b_granted = defined $r && $r->{sqlstate} eq '00000';
	diag("$case: b " . ($b_granted ? "granted token $r->{out}" : 'still waiting') . ", a's token $ta");
	my $ca = $a->query('COMMIT');
	diag("$case: a's COMMIT: $ca->{sqlstate} " . ($ca->{err} // ''));
	ok(!($b_granted && $ca->{sqlstate} eq '00000'),
		"$case: never two exclusive holders that both commit (b granted while a held it exclusive, and a's COMMIT succeeded)");
	if ($b_granted) { $b->query('COMMIT'); }
	else { $r = $b->wait(30); $b->query('ROLLBACK'); }
	$a->query('SELECT zk_unlock_all()');
	$a->quit; $b->quit;
}

done_testing();
