
# 346_barrier_late_ready.pl - a closed session's late create of a double
# barrier's "ready" cannot open the next round before its parties came
# (issue 36, "for every node kind").
#
# ZooKeeper applies a request that a follower already forwarded to the
# leader even after the client closed or gave up its session.  A barrier's
# "ready" is the same path every round, and a member older than "ready" is
# opened by it.  A three-server ensemble whose server 3 reaches its leader
# through test/blackhole.py; cluster A talks to server 3 alone.
#
# Round 1 of barrier 'lb' (three parties): a foreign member f1 and A's member
# m1 are there.  Server 3's link to its leader is muted (what it forwards
# waits; it still applies the leader's commits), the third member f2 comes
# through servers 1 and 2, A sees it and opens m1, and sends its create of
# "ready": it waits at server 3.  zklock.hosts is changed to servers 1 and 2
# (the worker closes that session, whose close waits too), m1 and the
# foreign members leave: round 1 is over.  Round 2: f3 and A's member m3
# (three parties) wait, two members.  Then the link heals and the held
# create lands.  Before the fix it created "ready", newer than m3, and m3
# was let through with two members of three; now the create checks that the
# members it counted are still there, f1 is not, and nothing is created:
# m3 waits until a third member comes.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use ZkLockTest;

my ($pe, $A, $quorum, $kzq) = late_request_setup('late_ready', 'lateR',
	sync_limit => 60, session_timeout => '30s', connect_timeout => '3s');
sub bh { return $pe->{bh}->(@_); }
my $BAR = '/zklock/barriers/lb';

# the barrier's children, seen by the quorum
sub kids { my @k = sort(zk_children($kzq, $BAR)); return @k; }
sub nkids { my @k = kids(); return scalar(@k); }

# round 1
ok(defined zkq($kzq, 'create', "$BAR/f1"), 'a foreign member f1');
my $m1 = new_session($A, name => 'm1');
$m1->send("SELECT zk_barrier_enter('lb', 3, '60s')");
ok(wait_until(sub { nkids() == 2 }, 20), 'A\'s member m1 waits beside f1');
ok($m1->running, 'm1 is not through: two members of three');

like(bh('mute'), qr/^ok/, 'server 3\'s requests to its leader wait (it still applies commits)');
my $t0 = time();
ok(defined zkq($kzq, 'create', "$BAR/f2"), 'the third member f2 comes through the quorum');
my $r = $m1->wait(15);
is($r->{out}, 't', 'A saw it and let m1 through');
sleep 1;
ok(!grep({ $_ eq 'ready' } kids()), 'A\'s create of ready waits at server 3');

my $old = zk_status($A);
ok(hosts_to_quorum($A, $quorum, $old, 15), 'A has a new session on servers 1 and 2');

# round 1 ends: m1 goes with its backend, the foreign members leave
$m1->quit;
zkq($kzq, 'delete', "$BAR/f1");
zkq($kzq, 'delete', "$BAR/f2");
ok(wait_until(sub { nkids() == 0 }, 10), 'round 1 is over: nobody is in')
  or diag join(' ', kids());

# round 2: two members of three
ok(defined zkq($kzq, 'create', "$BAR/f3"), 'round 2: a foreign member f3');
my $m3 = new_session($A, name => 'm3');
$m3->send("SELECT zk_barrier_enter('lb', 3, '60s')");
ok(wait_until(sub { nkids() == 2 }, 10), 'A\'s member m3 waits beside f3');
held_within($t0, 25, 'muted');

like(bh('heal'), qr/^ok/, 'the link heals: the held create and close reach the leader');
sleep 5;
ok($m3->running, 'm3 is not let through with two members of three');
ok(!grep({ $_ eq 'ready' } kids()), 'no ready in round 2')
  or diag join(' ', kids());

# a third member opens round 2
ok(defined zkq($kzq, 'create', "$BAR/f4"), 'a third member f4 comes');
$r = $m3->wait(20);
is($r->{out}, 't', 'then m3 is through');
$m3->quit;

$A->stop('fast');
$pe->{stop}->();
done_testing();
