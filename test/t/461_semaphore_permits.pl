
# 461_semaphore_permits.pl - permits => n on the semaphore functions: n
# leases at once, all or none, across two PostgreSQL clusters A and B and
# kazoo's own Semaphore on one ZooKeeper, counted through ZooKeeper.
#
#   1. Layout: n leases, each named by 32 hex digits, sharing the first 30
#      (one holder's set); kazoo counts each as one holder.
#   2. All or none: a try for more than are free takes nothing; a wait
#      for more than are free times out having taken nothing.
#   3. In order: a waiter for 3 (2 free) keeps the head of the line, so a
#      taker of 1 behind it waits too; both are served once leases go.
#   4. Never more than max_leases: sessions on A and B take 1, 2 or 3 of 5
#      in many transactions, each logging when it held them; the logged
#      windows never add up to more than 5 at any instant, and the pool
#      never shows more than 5 leases.
#   5. A terminated holder's set goes at once, every lease of it.
#   6. zk_semaphore_set_max: raising it lets a waiter in at once, on
#      another cluster; lowering it admits nobody new until fewer hold
#      leases; max_leases => NULL goes by the pool's number; the old number
#      is refused (22023), also to a holder stacking a hold, which may stack
#      one by the new number; no pool: 42704.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use ZkLockTest;

my $zk = zk_start();
my %opts = (session_timeout => '4s', connect_timeout => '2s');
my $A = zk_node('permA', $zk, %opts);
my $B = zk_node('permB', $zk, %opts);
my $SEM = '/zklock/semaphores';

sub kazoo_sem
{
	my ($name, $max, $ident) = @_;
	return kazoo_driver($zk, 'semaphore_kazoo.py', "$SEM/$name", $max, $ident);
}

sub leases { return scalar(zk_children($zk, "$SEM/$_[0]")); }

#
# 1. layout
#
my $s1 = new_session($A, name => 's1');
$s1->query_safe("SELECT zk_session_semaphore('p', 5, permits => 3)");
my @l = sort(zk_children($zk, "$SEM/p"));
is(scalar(@l), 3, 'three permits: three leases');
is(scalar(grep { /^[0-9a-f]{32}$/ } @l), 3, 'each named by 32 hex digits, as kazoo names its leases');
is(scalar(keys %{ { map { substr($_, 0, 30) => 1 } @l } }), 1, 'one set: the same first 30 digits');
my $k1 = kazoo_sem('p', 5, 'py-1');
is($k1->cmd('try'), 'acquired', 'kazoo takes a fourth lease');
is(leases('p'), 4, 'four leases');

#
# 2. all or none
#
is($B->safe_psql('postgres', "SELECT zk_try_semaphore('p', 5, 2)"), 'f', 'B tries for 2 of the 1 free: false');
is(leases('p'), 4, '... and took nothing');
my $r = one_shot($B, "SELECT zk_semaphore('p', 5, '500ms', 2)", 30);
is($r->{sqlstate}, '55P03', 'a wait for 2 of the 1 free times out: 55P03') or diag $r->{err};
is(leases('p'), 4, '... having taken nothing');
is($B->safe_psql('postgres', "SELECT zk_try_semaphore('p', 5, 1)"), 't', 'B tries for 1: true');
is($k1->cmd('release'), 'released true', 'kazoo releases');

#
# 3. in order: a waiter for more than are free keeps the head of the line
#
my $w3 = new_session($B, name => 'w3');
$w3->send("SELECT zk_session_semaphore('p', 5, '30s', permits => 3)");
ok(wait_until(sub { scalar(zk_children($zk, "$SEM/p-__lock__")) == 1 }, 10, 0.1),
	'a waiter for 3 (2 free) holds the guard');
sleep 0.3;
ok($w3->running, 'and waits');
my $w1 = new_session($A, name => 'w1');
$w1->send("SELECT zk_session_semaphore('p', 5, '30s', permits => 1)");
ok(wait_until(sub { scalar(zk_children($zk, "$SEM/p-__lock__")) == 2 }, 10, 0.1),
	'a taker of 1 queues behind it');
sleep 0.5;
ok($w1->running, 'and waits, though a lease is free: the waiter ahead goes first');
is(leases('p'), 3, 'nothing taken meanwhile');
$s1->query_safe("SELECT zk_semaphore_release('p')");
$r = $w3->wait(15);
is($r->{sqlstate}, '00000', 'the waiter for 3 gets them once 3 went') or diag $r->{err};
$r = $w1->wait(15);
is($r->{sqlstate}, '00000', 'then the taker of 1') or diag $r->{err};
is(leases('p'), 4, 'four leases: 3 + 1');
$_->query_safe("SELECT zk_semaphore_release('p')") foreach ($w3, $w1);
is(leases('p'), 0, 'all released');

#
# 5. a terminated holder's set goes, every lease of it
#
my $t = new_session($A, name => 'term');
$t->query_safe("SELECT zk_session_semaphore('q', 4, permits => 4)");
is(leases('q'), 4, 'four leases held');
$A->safe_psql('postgres', 'SELECT pg_terminate_backend(' . $t->pid . ')');
$t->wait(10);
ok(wait_until(sub { leases('q') == 0 }, 10, 0.1), 'all four gone with the terminated backend');

#
# 6. zk_semaphore_set_max
#
my $m1 = new_session($A, name => 'm1');
$m1->query_safe("SELECT zk_session_semaphore('m', 2, permits => 2)");
my $mw = new_session($B, name => 'mw');
$mw->send("SELECT zk_session_semaphore('m', 2, '30s')");
ok(wait_until(sub { scalar(zk_children($zk, "$SEM/m-__lock__")) == 1 }, 10, 0.1), 'a waiter on B');
sleep 0.3;
ok($mw->running, 'waits: both leases held');
is($A->safe_psql('postgres', "SELECT zk_semaphore_set_max('m', 3)"), '2', 'A raises it to 3: it had 2');
$r = $mw->wait(10);
is($r->{sqlstate}, '00000', 'the waiter on B gets in at once') or diag $r->{err};
is(zk_get($zk, "$SEM/m"), '3', 'the pool holds 3');
is(leases('m'), 3, 'three leases');
# A holder that took by the old number stacks a hold by the new one (found
# by the model tester: it was refused from the number the session kept)
$r = $m1->query("SELECT zk_session_semaphore('m', 3, permits => 2)", 30);
is($r->{sqlstate}, '00000', "A's holder stacks a hold by the pool's new number") or diag $r->{err};
is(leases('m'), 3, 'no lease more: a stacked hold');
$r = $m1->query("SELECT zk_session_semaphore('m', 2, permits => 2)", 30);
is($r->{sqlstate}, '22023', 'by the old number: 22023') or diag $r->{err};
is($m1->query_safe("SELECT zk_semaphore_release('m')"), 't', 'the stacked hold let go');
is(leases('m'), 3, 'its leases stay: the first hold');
$r = one_shot($B, "SELECT zk_try_semaphore('m', 2)", 30);
is($r->{sqlstate}, '22023', 'the old number is refused now: 22023') or diag $r->{err};
is($B->safe_psql('postgres', "SELECT zk_try_semaphore('m', NULL)"), 'f',
	'max_leases => NULL goes by the pool (3, all held): false');
is($B->safe_psql('postgres', "SELECT zk_semaphore_set_max('m', 1)"), '3', 'B lowers it to 1: it had 3');
is(leases('m'), 3, 'the leases held stay');
$m1->query_safe("SELECT zk_semaphore_release('m')");
is(leases('m'), 1, 'A lets its 2 go: one lease left');
is($A->safe_psql('postgres', "SELECT zk_try_semaphore('m', 1)"), 'f', 'nobody new while one holds it (max 1)');
$mw->query_safe("SELECT zk_semaphore_release('m')");
is($A->safe_psql('postgres', "SELECT zk_try_semaphore('m', NULL)"), 't', 'once nobody holds it, one may');
ok(wait_until(sub { !zk_exists($zk, "$SEM/m") }, 10, 0.1), 'the pool went with its last lease');
$r = one_shot($A, "SELECT zk_semaphore_set_max('m', 4)", 30);
is($r->{sqlstate}, '42704', 'no pool: set_max fails with 42704') or diag $r->{err};
$r = one_shot($A, "SELECT zk_try_semaphore('m', NULL)", 30);
is($r->{sqlstate}, '42704', 'no pool: max_leases => NULL fails with 42704') or diag $r->{err};
$_->quit foreach ($m1, $mw);

#
# 4. never more than max_leases, through many transactions on A and B
#
foreach my $n ($A, $B)
{
	$n->safe_psql('postgres', q{
		CREATE TABLE perm_log (who text, k int, t0 timestamptz, t1 timestamptz);
		CREATE PROCEDURE perm_loop(who text, k int, n int) LANGUAGE plpgsql AS $$
		DECLARE t0 timestamptz;
		BEGIN
			FOR i IN 1 .. n LOOP
				PERFORM zk_semaphore('race', 5, '60s', permits => k);
				t0 := clock_timestamp();
				PERFORM pg_sleep(0.01 * (1 + i % 3));
				INSERT INTO perm_log VALUES (who, k, t0, clock_timestamp());
				COMMIT;
			END LOOP;
		END $$;
	});
}
my @racers;
my $i = 0;
foreach my $n ($A, $B)
{
	foreach my $k (1, 2, 3)
	{
		$i++;
		my $s = new_session($n, name => "race$i");
		$s->send("CALL perm_loop('race$i', $k, 15)");
		push @racers, $s;
	}
}
my ($max_seen, $t0) = (0, time());
while (grep { $_->running } @racers)
{
	last if time() - $t0 > 150;
	my $c = leases('race');
	$max_seen = $c if $c > $max_seen;
	sleep 0.05;
}
my $bad = 0;
foreach my $s (@racers)
{
	my $res = $s->wait(30);
	$bad++ if $res->{sqlstate} ne '00000';
	diag $res->{err} if $res->{sqlstate} ne '00000';
}
is($bad, 0, 'every taker went through its 15 transactions');
cmp_ok($max_seen, '<=', 5, "the pool never showed more than 5 leases (most seen: $max_seen)");
my @ev;
foreach my $n ($A, $B)
{
	foreach my $row (split /\n/, $n->safe_psql('postgres',
		"SELECT k, extract(epoch FROM t0), extract(epoch FROM t1) FROM perm_log"))
	{
		my ($k, $a, $b) = split /\|/, $row;
		push @ev, [ $a, $k ], [ $b, -$k ];
	}
}
is(scalar(@ev), 2 * 6 * 15, 'every transaction logged its window');
# ends sort before starts at the same instant: a window ends before the next begins
my ($cur, $peak) = (0, 0);
foreach my $e (sort { $a->[0] <=> $b->[0] || $a->[1] <=> $b->[1] } @ev)
{
	$cur += $e->[1];
	$peak = $cur if $cur > $peak;
}
cmp_ok($peak, '<=', 5, "the logged windows never add up to more than 5 permits (peak $peak)");
cmp_ok($peak, '>=', 3, "... and did overlap (peak $peak): the test can see an excess");
ok(wait_until(sub { leases('race') == 0 }, 10, 0.1), 'no lease left');
$_->quit foreach @racers;

done_testing();
