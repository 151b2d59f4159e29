# 260_crash_restart.pl - a cluster that crashes does not block the other
# servers for the ZooKeeper session timeout.
#
# Two clusters, A and B, on one ZooKeeper, with zklock.session_timeout =
# 20s.  A session on A holds a lock, then A goes down hard: its zklock
# worker is SIGKILLed (the postmaster restarts the whole cluster), A is
# stopped with pg_ctl stop -m immediate and started again, or a regular
# backend holding the lock is SIGKILLed (crash restart again).  Nothing
# closed A's old ZooKeeper session; the restarted A must end it at once, so
# B gets the lock within a few seconds after A is back, well under the 20 s
# the old session's ephemeral nodes would otherwise live.  The old
# session's nodes are counted through ZooKeeper.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use ZkLockTest;

my $zk = zk_start();
# (PostgreSQL::Test::Cluster turns restart_after_crash off; a crash restart
# is what this test is about)
my $A = zk_node('A', $zk, session_timeout => '20s', connect_timeout => '5s',
	conf => "restart_after_crash = on\n");
my $B = zk_node('B', $zk, session_timeout => '20s', connect_timeout => '5s');
my $LOCKS = '/zklock/locks';

# a 64-bit hex number as a canonical string (hex() warns above 32 bits)
sub norm_hex
{
	my ($h) = @_;
	$h = lc($h // '');
	$h =~ s/^0x//;
	$h =~ s/^0+(?=.)//;
	return $h;
}

# Ephemeral nodes under $LOCKS owned by session $sid (hex, as zk_status
# shows it), counted through ZooKeeper
sub nodes_of_session
{
	my ($sid) = @_;
	my $tree = zk_tree($zk, $LOCKS);
	die "cannot list $LOCKS: $tree" if $tree =~ /^\(tree /;
	my $want = norm_hex($sid);
	return scalar grep { my @f = split / /; @f == 3 && $f[1] ne '0x0' && norm_hex($f[1]) eq $want }
	  split /\n/, $tree;
}

# A session on A takes $lock; returns (session, A's ZooKeeper session id)
sub hold_on_a
{
	my ($lock) = @_;
	my $st = wait_for_state($A, 'connected', 30);
	my $h = new_session($A, name => "holder_$lock");
	$h->query_safe('BEGIN');
	$h->query_safe("SELECT zk_lock('$lock')");
	is(try_lock_elsewhere($B, $lock), 'f', "$lock: held on A, B cannot take it");
	my $sid = zk_status_value($A, 'session_id');
	is(nodes_of_session($sid), 1, "$lock: A's session $sid owns one node");
	return ($h, $sid);
}

# Wait until A's backends are gone (the holder's session ended), then
# until A accepts connections again; returns that moment
sub wait_back
{
	my ($lock, $h) = @_;
	my $r;
	ok( wait_until(
			sub {
				return 1 if $h->{exited};
				$r = $h->query('SELECT 1', 10);
				return $r->{exited} || $r->{sqlstate} ne '00000';
			},
			30, 0.05),
		"$lock: A's holder session was ended by the crash");
	my $back = wait_until(
		sub {
			my ($rc) = psql_noerr($A, 'postgres', 'SELECT 1');
			return $rc == 0;
		},
		60, 0.05);
	ok($back, "$lock: A accepts connections again");
	return time();
}

# B takes $lock with a 5 s timeout right after A is back
sub b_takes
{
	my ($lock, $t_back, $sid) = @_;
	my $b = new_session($B, name => "b_$lock");
	$b->query_safe('BEGIN');
	my $r = $b->query("SELECT zk_lock('$lock', '5s')", 30);
	my $after = time() - $t_back;
	is($r->{sqlstate}, '00000', "$lock: B gets the lock once A is back") or diag $r->{err};
	ok($after < 4, sprintf('%s: %.2fs after A is back (the session timeout is 20 s)', $lock, $after));
	is(nodes_of_session($sid), 0, "$lock: no node of A's old session $sid is left in ZooKeeper");
	$b->query('ROLLBACK');
	$b->quit;
	return;
}

#
# 1. SIGKILL of A's zklock worker
#
{
	my ($h, $sid) = hold_on_a('c1');
	my $wpid = worker_pid($A);
	kill 'KILL', $wpid;
	my $t_back = wait_back('c1', $h);
	b_takes('c1', $t_back, $sid);
	ok($A->log_contains('terminating any other active server processes'),
		'c1: A went through a crash restart');
	$h->quit;
}

#
# 2. pg_ctl stop -m immediate, start again; B is already waiting
#
{
	my ($h, $sid) = hold_on_a('c2');
	$A->stop('immediate');
	my $t_stop = time();
	my $b = new_session($B, name => 'b_c2');
	$b->query_safe('BEGIN');
	$b->send("SELECT zk_lock('c2', '30s')");
	sleep 1;
	ok($b->running, 'c2: B waits while A is down (the old session still holds the node)');
	$A->start;
	my $t_start = time();
	my $r = $b->wait(40);
	my $after = time() - $t_start;
	is($r->{sqlstate}, '00000', 'c2: B gets the lock') or diag $r->{err};
	ok($after < 5,
		sprintf('c2: %.2fs after A started (%.2fs after the stop; the session timeout is 20 s)',
			$after, time() - $t_stop));
	is(nodes_of_session($sid), 0, "c2: no node of A's old session $sid is left in ZooKeeper");
	$b->query('ROLLBACK');
	$b->quit;
	$h->quit;
}

#
# 3. SIGKILL of a regular backend on A that holds the lock
#
{
	my ($h, $sid) = hold_on_a('c3');
	kill 'KILL', $h->pid;
	my $t_back = wait_back('c3', $h);
	b_takes('c3', $t_back, $sid);
	$h->quit;
}

#
# A works normally afterwards, and nothing is left
#
my $st = wait_for_state($A, 'connected', 30);
is($st->{state}, 'connected', 'A is connected to ZooKeeper again');
my $r = one_shot($A, "SELECT zk_lock('after', '10s') > 0", 30);
is($r->{out}, 't', 'zk_lock works on A') or diag $r->{err};
ok(scalar(zk_wait_count($zk, $LOCKS, 0, 30)), 'no contender nodes left');

$A->stop;
$B->stop;
done_testing();
