
# 405_barrier_opening.pl - every member counted in a double barrier's
# opening passes it, even when the last member enters and leaves at once.
#
# Three members, two on cluster A (through the fault proxy) and one on B,
# enter a barrier of three parties and leave it straight away.  B's member
# is the last: it counts three, creates "ready", and its leave deletes
# "ready" and then its node, while A's listing of the barrier is held
# back by the proxy (300 ms).  A member waiting on A learned of the opening by
# listing the children again after its watch fired; with A's listings
# slowed by the proxy that listing came after the last member had left,
# showing two members and no "ready": both members on A waited for their
# full timeout and B's leave waited for them (issue 21's review found it in
# 1 of 30 plain rounds, 4 of 5 with 200 ms of delay; here every round).  Now each probe also
# watches "ready" itself, and its creation opens every member that had
# joined: in every round all three enters and all three leaves succeed,
# promptly, and nothing is left in ZooKeeper.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use ZkLockTest;
use ZkProxy;

my $zk = zk_start();
my $p = proxy_start($zk);
my $A = zk_node('openA', $p->{hosts}, session_timeout => '20s', connect_timeout => '5s');
my $B = zk_node('openB', $zk, session_timeout => '10s', connect_timeout => '5s');

my @s = (new_session($A, name => 'a1'), new_session($A, name => 'a2'),
	new_session($B, name => 'b1'));

my $rounds = $ENV{ZKLOCK_BARRIER_ROUNDS} // 6;
my $bad = 0;
foreach my $r (1 .. $rounds)
{
	my $name = "open$r";
	my $sql = "SELECT zk_barrier_enter('$name', 3, '10s'), zk_barrier_leave('$name', '8s')";
	# the first member on A waits; A's listings are slowed; the second on A
	# joins (A lists the barrier, its answer held by the proxy), and B's
	# member, the last, joins and leaves while that listing is held
	$s[0]->send($sql);
	sleep 0.5;
	proxy_cmd($p, 'delay-replies getChildren 300');
	proxy_cmd($p, 'delay-replies getChildren2 300');
	$s[1]->send($sql);
	sleep 0.05;
	$s[2]->send($sql);
	my @res = map { $_->wait(40) } @s;
	proxy_cmd($p, 'reset');
	my @out = map { $_->{out} // '' } @res;
	my $slow = grep { ($_->{elapsed} // 99) > 6 } @res;
	if ((grep { $_ ne 't|t' } @out) || $slow)
	{
		$bad++;
		diag "round $r: " . join(' ; ',
			map { sprintf('%s %.2f s %s', $_->{out} // '?', $_->{elapsed} // -1, $_->{sqlstate} // '') } @res);
	}
	is(zk_wait_count($zk, "/zklock/barriers/$name", 0, 15), 1, "round $r: no member node left");
}
is($bad, 0, "in each of $rounds rounds every member entered and left, promptly");

$_->quit foreach @s;
done_testing();
