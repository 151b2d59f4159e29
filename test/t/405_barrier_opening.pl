
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
#
# Part 2 (issue 22, item 7): three parties, two kazoo members and a SQL
# member on A.  The first kazoo member waits; A joins, and the answer to
# A's member create is held back by the proxy for 1.5 s (a worker stalled
# for that long, well within its session); the second kazoo member counts
# three, creates "ready", and both kazoo members pass and leave (which
# deletes "ready" and every kazoo node but the lowest).  Until issue 22 A's
# watch on "ready" was sent only once the create's answer came: it found
# "ready" gone and at most two members, and waited for its full timeout
# while the kazoo members' leave waited for it.  Now the watch goes right
# behind the create, so it is set before anyone can count A's member; the
# watches this leaves behind are taken off.
#
# Part 3: no watch is left under the barriers (ZooKeeper's wchc), also when
# the removal of a timed-out member's watch on ready is lost with its
# connection (sent, then the connection cut before the answer): the client
# library sets such a watch again on reconnecting, and the worker takes it
# off once reconnected.

use strict;
use warnings FATAL => 'all';

use IPC::Run;
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

# ---- part 2: a kazoo member opens and leaves while A's create answer is held ----
my $BAR = '/zklock/barriers';
sub kazoo_member
{
	my ($name, $parties) = @_;
	return kazoo_driver($zk, 'barrier_kazoo.py', "$BAR/$name", $parties);
}
my $bad2 = 0;
foreach my $r (1 .. 3)
{
	my $name = "stall$r";
	my ($k1, $k2) = (kazoo_member($name, 3), kazoo_member($name, 3));
	is($k1->cmd('enter'), 'entering', "round $r: the first kazoo member waits");
	proxy_cmd($p, 'delay-replies create2 1500');
	$s[0]->send("SELECT zk_barrier_enter('$name', 3, '8s'), zk_barrier_leave('$name', '8s')");
	# A's member node is in ZooKeeper (its answer is still held)
	my $in = wait_until(sub { scalar(grep { $_ ne 'ready' } zk_children($zk, "$BAR/$name")) == 2 }, 10);
	my @got = ('nothing', 'nothing');
	if ($in && $k2->cmd('enter') eq 'entering')
	{
		@got = map { $_->read_line(10) // 'nothing' } ($k1, $k2);
		if ($got[0] eq 'entered' && $got[1] eq 'entered')
		{
			$_->send('leave') for ($k1, $k2);
			@got = map {
				my $l = $_->read_line(10) // 'nothing';
				$l eq 'leaving' ? ($_->read_line(20) // 'nothing') : $l
			} ($k1, $k2);
		}
	}
	my $res = $s[0]->wait(30);
	proxy_cmd($p, 'reset');
	my $ok = $in && "@got" eq 'left left' && ($res->{out} // '') eq 't|t';
	$bad2++ unless $ok;
	ok($ok, "round $r: A's member passed the opening the kazoo members made, and all left");
	$ok or diag sprintf('A: %s %s %.2f s; kazoo: %s', $res->{out} // '?', $res->{sqlstate} // '',
		$res->{elapsed} // -1, "@got");
	$_->cmd('quit') for ($k1, $k2);
	is(zk_wait_count($zk, "$BAR/$name", 0, 15), 1, "round $r: no member node left");
}
is($bad2, 0, 'A never missed the opening while its create answer was held');

# ---- part 3: no watch is left behind ----
# the data watches (exists on ready, member nodes) under the barriers, by
# every session, from ZooKeeper's own listing
sub barrier_watches
{
	return join(' ', sort grep { m{^\s*\Q$BAR\E/} } map { s/^\s+//r } split /\n/, zk_fourlw($zk, 'wchc'));
}
ok(wait_until(sub { barrier_watches() eq '' }, 15), 'parts 1 and 2 left no watch under the barriers')
  or diag 'watches: ' . barrier_watches();

# A member of a barrier that never opens times out (nothing else happens):
# no watch is left
$s[1]->send("SELECT zk_barrier_enter('lonely', 2, '2s')");
ok(wait_until(sub { barrier_watches() =~ m{\Q$BAR\E/lonely/ready} }, 10),
	'a lonely member watches ready') or diag 'watches: ' . barrier_watches();
my $res0 = $s[1]->wait(30);
is($res0->{out}, 'f', 'the lonely member timed out (false)') or diag explain $res0;
ok(wait_until(sub { barrier_watches() eq '' }, 15), 'no watch left after a member timed out')
  or diag 'watches: ' . barrier_watches();

# A member waits alone (its watch on ready is set); when it times out, the
# removal of that watch lands but the connection is cut before its answer:
# the library still lists the watch and sets it again when it reconnects
# (same session), and the worker must take it off then
$s[1]->send("SELECT zk_barrier_enter('lostrm', 2, '3s')");
ok(wait_until(sub { barrier_watches() =~ m{\Q$BAR\E/lostrm/ready} }, 10),
	'a waiting member watches ready') or diag 'watches: ' . barrier_watches();
my $cut = proxy_rule($p, 'cut-after-request removeWatches');
my $res3 = $s[1]->wait(30);
is($res3->{out}, 'f', 'the member timed out (false)') or diag explain $res3;
ok(proxy_wait_fired($p, $cut, 15), "the connection was cut right after the watch's removal was sent");
my $st3 = wait_for_state($A, 'connected', 30);
is($st3->{state}, 'connected', 'A reconnected');
ok(wait_until(sub { barrier_watches() eq '' }, 15),
	'no watch left on ready after the removal was lost with the connection')
  or diag 'watches: ' . barrier_watches();
is(zk_wait_count($zk, "$BAR/lostrm", 0, 15), 1, 'no member node left');

$_->quit foreach @s;
done_testing();
