
# 255_liveness.pl - the worker answers while every recipe sits in its
# "nothing to do yet" states.
#
# Each recipe is driven into the states where a round finds nothing to
# take: a lock held with exclusive, shared, try and zero-timeout requests
# behind it (on one and on two clusters); a queue empty, and one whose
# only item is claimed, with blocking, try and zero-timeout consumers; a
# double barrier short of parties (enter and leave), a closed gate, an
# arrival count short of its parties, a semaphore whose one lease is held,
# a lease held by another holder, and an election with two candidates.
# Throughout, zk_status() answers within 1 s on both clusters (sampled
# every 100 ms by a watchdog session), every try and zero timeout answers
# within 2 s, and the worker's loop goes back to its wait set (its CPU time
# stays low while everything waits).  Then pg_ctl stop -m fast with all of
# it waiting ends within seconds on both clusters.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use ZkLockTest;

my $zk = zk_start();
my %opts = (
	session_timeout => '10s',
	connect_timeout => '3s',
	conf => "zklock.elections = 'live'\nmax_connections = 60\n");
my $A = zk_node('liveA', $zk, %opts);
my $B = zk_node('liveB', $zk, %opts);
my %node = (A => $A, B => $B);

my %mon = map { $_ => new_session($node{$_}, name => "mon$_") } qw(A B);
my ($samples, $slow) = (0, 0);

# one round of the watchdog: zk_status() on both clusters within 1 s
sub watchdog
{
	my ($what) = @_;
	foreach my $c (qw(A B))
	{
		my $r = $mon{$c}->query('SELECT state FROM zk_status()', 30);
		$samples++;
		next if $r->{done} && $r->{sqlstate} eq '00000' && $r->{elapsed} <= 1.0;
		$slow++;
		diag sprintf('zk_status() on %s (%s): %s after %.2f s %s', $c, $what,
			$r->{sqlstate} // 'no answer', $r->{elapsed} // -1, $r->{err} // '');
	}
}

# watch for $secs seconds, sampling every 100 ms
sub watch_for
{
	my ($secs, $what) = @_;
	my $end = time() + $secs;
	while (time() < $end)
	{
		watchdog($what);
		sleep 0.1;
	}
}

# $sql in session $s must answer within $max s, without error; its output
sub quick
{
	my ($s, $sql, $max, $what) = @_;
	my $r = $s->query($sql, 30);
	ok($r->{done} && $r->{sqlstate} eq '00000' && $r->{elapsed} <= $max,
		sprintf('%s answers within %.0f s (%.2f s)', $what, $max, $r->{elapsed} // -1))
	  or diag(($r->{sqlstate} // 'no answer') . ' ' . ($r->{err} // ''));
	return $r->{out} // '';
}

# a session that starts $sql and is still waiting after a moment
my @waiting;
sub start_waiting
{
	my ($c, $sql, $what) = @_;
	my $s = new_session($node{$c}, name => "w" . (scalar(@waiting) + 1));
	$s->send($sql);
	sleep 0.3;
	ok($s->running, "$what waits");
	push @waiting, $s;
	return $s;
}

# CPU time (user + system, in ticks) of a cluster's worker
sub worker_ticks
{
	my ($n) = @_;
	my $pid = worker_pid($n);
	open(my $fh, '<', "/proc/$pid/stat") or return 0;
	my @f = split ' ', (<$fh> =~ s/^.*\) //r);
	close $fh;
	return $f[11] + $f[12];
}

my %hold = map { $_ => new_session($node{$_}, name => "hold$_") } qw(A B);
my %probe = map { $_ => new_session($node{$_}, name => "probe$_") } qw(A B);

# -- locks -------------------------------------------------------------------
$hold{A}->query_safe("BEGIN; SELECT zk_lock('L') > 0");
start_waiting('A', "SELECT zk_lock('L', '60s') > 0", 'exclusive lock behind a holder');
start_waiting('B', "SELECT zk_lock_shared('L', '60s') > 0", 'shared lock on B behind it');
start_waiting('B', "SELECT zk_session_lock('L', '60s') > 0", 'session lock on B');
foreach my $c (qw(A B))
{
	is(quick($probe{$c}, "SELECT zk_try_lock('L')", 2, "try lock on $c"), 'f', "try lock on $c: false");
	is(quick($probe{$c}, "SELECT zk_try_lock_shared('L')", 2, "try shared on $c"), 'f', 'false');
	my $r = $probe{$c}->query("SELECT zk_lock('L', '0')", 30);
	ok($r->{done} && $r->{sqlstate} eq '55P03' && $r->{elapsed} < 2,
		"zk_lock(L, '0') on $c: 55P03 at once") or diag explain $r;
}
watch_for(1, 'locks');

# -- queues ------------------------------------------------------------------
start_waiting('A', "SELECT count(*) FROM zk_dequeue('empty', '60s')", 'consumer of an empty queue');
start_waiting('B', "SELECT count(*) FROM zk_dequeue('empty', '60s', 3)", 'consumer on B');
$A->safe_psql('postgres', "SELECT zk_enqueue('one', 'x')");
$hold{B}->query_safe("BEGIN");
is($hold{B}->query_safe("SELECT body FROM zk_dequeue('one', '5s')"), 'x', 'B claims the only item');
start_waiting('A', "SELECT count(*) FROM zk_dequeue('one', '60s')", 'consumer of a claimed item');
foreach my $c (qw(A B))
{
	foreach my $q ('empty', 'one')
	{
		is(quick($probe{$c}, "SELECT count(*) FROM zk_try_dequeue('$q', 3)", 2, "try dequeue $q on $c"),
			'0', 'no row');
		is(quick($probe{$c}, "SELECT count(*) FROM zk_dequeue('$q', '0')", 2, "dequeue $q '0' on $c"),
			'0', 'no row');
	}
}
watch_for(1, 'queues');

# -- barriers, gates, arrivals -------------------------------------------------
start_waiting('A', "SELECT zk_barrier_enter('bar', 3, '60s')", 'a barrier member short of parties');
start_waiting('B', "SELECT zk_barrier_enter('bar', 3, '60s')", 'a second member on B');
is(quick($probe{A}, "SELECT zk_barrier_enter('bar0', 2, '0')", 2, "barrier enter '0'"), 'f',
	'a look at a barrier short of parties: false');
$A->safe_psql('postgres', "SELECT zk_gate_close('gate')");
start_waiting('B', "SELECT zk_gate_wait('gate', '60s')", 'a waiter at a closed gate');
is(quick($probe{A}, "SELECT zk_gate_wait('gate', '0')", 2, "gate wait '0'"), 'f', 'closed: false');
$B->safe_psql('postgres', "SELECT zk_arrive('arr', 'p1')");
start_waiting('A', "SELECT zk_await('arr', 3, '60s')", 'an await short of arrivals');
is(quick($probe{B}, "SELECT zk_await('arr', 3, '0')", 2, "await '0'"), 'f', 'short: false');
watch_for(1, 'barriers');

# -- semaphores and leases ---------------------------------------------------
$hold{A}->query_safe("SELECT zk_semaphore('sem', 1, '5s')");
start_waiting('B', "SELECT zk_semaphore('sem', 1, '60s')", 'a semaphore taker on B');
start_waiting('A', "SELECT zk_semaphore('sem', 1, '60s')", 'a semaphore taker on A');
foreach my $c (qw(A B))
{
	is(quick($probe{$c}, "SELECT zk_try_semaphore('sem', 1)", 2, "try semaphore on $c"), 'f', 'false');
}
is(quick($probe{A}, "SELECT zk_try_lease('lease', '1 hour', 'one')", 2, 'lease for one'), 't', 'taken');
is(quick($probe{B}, "SELECT zk_try_lease('lease', '1 hour', 'two')", 2, 'lease for two'), 'f',
	'refused while one holds it');

# -- elections: both clusters stand -------------------------------------------
ok(wait_until(sub {
	my $a = $A->safe_psql('postgres', "SELECT zk_is_leader('live')");
	my $b = $B->safe_psql('postgres', "SELECT zk_is_leader('live')");
	return ($a eq 't') != ($b eq 't');
}, 30), 'one of the two clusters leads the election');

# -- everything waits: the worker idles, answers ------------------------------
my %t0 = map { $_ => worker_ticks($node{$_}) } qw(A B);
my $w0 = time();
watch_for(3, 'everything waiting');
my $hz = 100;
foreach my $c (qw(A B))
{
	my $cpu = (worker_ticks($node{$c}) - $t0{$c}) / $hz;
	cmp_ok($cpu, '<', 0.5 * (time() - $w0),
		sprintf('worker of %s idles while everything waits (%.2f s CPU in %.1f s)',
			$c, $cpu, time() - $w0));
}
my $still = grep { $_->running } @waiting;
is($still, scalar(@waiting), 'every waiter is still waiting');
cmp_ok($samples, '>', 40, "the watchdog took $samples samples");
is($slow, 0, 'zk_status() answered within 1 s on both clusters throughout');

# -- pg_ctl stop -m fast with all of it waiting --------------------------------
foreach my $c (qw(A B))
{
	my $t = time();
	$node{$c}->stop('fast');
	cmp_ok(time() - $t, '<', 15, "pg_ctl stop -m fast on $c ends within seconds");
}
$_->quit foreach (@waiting, values %hold, values %probe, values %mon);
done_testing();
