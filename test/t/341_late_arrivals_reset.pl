
# 341_late_arrivals_reset.pl - a closed session's late delete of an arrival
# cannot remove the participant's next arrival (issue 36, item 1, for
# zk_arrivals_reset).
#
# ZooKeeper applies a request that a follower already forwarded to the
# leader even after the client closed or gave up its session.  An arrival
# is <root>/arrivals/<name>/<participant>: the same path every time the
# participant arrives.  A three-server ensemble whose server 3 reaches its
# leader through test/blackhole.py; cluster A talks to server 3 alone.
#
# Participant p1 arrived at 'la'.  Server 3's link to its leader is muted
# (what it forwards waits; it still applies the leader's commits), and A
# resets 'la': its delete of la/p1 waits at server 3.  zklock.hosts is
# changed to servers 1 and 2: the worker closes that session (its close
# waits too) and runs the reset again in the new one, which deletes p1 and
# answers 1.  p1 arrives again (through another client: A itself publishes
# nothing until the old session is gone, src/core/history.c).  Then the link
# heals.  Before the fix the
# old session's delete of la/p1 landed and removed the new arrival; now the
# old session only ever deletes an arrival together with a node of its own
# under it, which the new arrival does not have, and the arrival stays.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use ZkLockTest;

my ($pe, $A, $quorum, $kzq) = late_request_setup('late_reset', 'lateS',
	sync_limit => 60, session_timeout => '30s', connect_timeout => '10s');
sub bh { return $pe->{bh}->(@_); }
my $AR = '/zklock/arrivals/la';

# the arrivals, seen by the quorum
sub parts { my @k = sort(zk_children($kzq, $AR)); return @k; }

$A->safe_psql('postgres', "SELECT zk_arrive('la', 'p1')");
ok(wait_until(sub { join(',', parts()) eq 'p1' }, 10), 'p1 arrived');

like(bh('mute'), qr/^ok/, 'server 3\'s requests to its leader wait (it still applies commits)');
my $t0 = time();
my $r1 = new_session($A, name => 'resetter');
$r1->send("SELECT zk_arrivals_reset('la')");
sleep 2;
is(join(',', parts()), 'p1', 'A\'s reset waits at server 3');

my $old = zk_status($A);
ok(hosts_to_quorum($A, $quorum, $old, 15), 'A has a new session on servers 1 and 2');
my $r = $r1->wait(30);
is($r->{out}, '1', 'the reset ran again in the new session and removed p1')
  or diag $r->{err};
$r1->quit;
ok(wait_until(sub { scalar(parts()) == 0 }, 10), 'p1\'s arrival is gone');

# the next run: p1 arrives again
ok(defined zkq($kzq, 'create', "$AR/p1"), 'p1 arrives again (another client)');
ok(wait_until(sub { join(',', parts()) eq 'p1' }, 10), 'p1 arrived again');
held_within($t0, 25, 'muted');

like(bh('heal'), qr/^ok/, 'the link heals: the held deletes and close reach the leader');
sleep 5;
is(join(',', parts()), 'p1', 'p1\'s new arrival is still there')
  or diag zk_tree($kzq, $AR);
is(one_shot($A, "SELECT zk_await('la', 1, '2s')")->{out}, 't', 'zk_await counts it');
is(one_shot($A, "SELECT count(*) FROM zk_arrivals('la')")->{out}, '1', 'zk_arrivals lists it');
ok(wait_until(sub { scalar(zk_children($kzq, "$AR/p1")) == 0 }, 10),
	'nothing of the resets is left under it')
  or diag zk_tree($kzq, $AR);
is(one_shot($A, "SELECT zk_arrivals_reset('la')")->{out}, '1', 'a reset now removes it');
ok(wait_until(sub { scalar(parts()) == 0 }, 10), 'and it is gone');

$A->stop('fast');
$pe->{stop}->();
done_testing();
