
# 347_barrier_member_owner.pl - a double barrier's member stays a member
# when its node is made again in a new session while the old session's node
# is still there (issue 36, "for every node kind").
#
# A member's node is ephemeral and named by the member's guid; when the
# session ends, the next one makes it again under the same name.  If the
# old session is not ended yet -- zklock.hosts changed while the worker's
# server was cut off from its quorum, so the close waits there -- the
# create finds the old session's node.  Before the fix it took that node
# for its own, and when ZooKeeper ended the old session the node went with
# it: the member no longer counted, and nobody knew.  Now the owner is read:
# another session's node is deleted and the member's made again.
#
# A three-server ensemble whose server 3 reaches its quorum through
# test/blackhole.py; cluster A talks to server 3 alone.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use ZkLockTest;

my ($pe, $A, $quorum, $kzq) = late_request_setup('member_owner', 'ownA',
	sync_limit => 60, session_timeout => '30s', connect_timeout => '3s');
sub bh { return $pe->{bh}->(@_); }
my $BAR = '/zklock/barriers/mo';

# the barrier's children as { name => ephemeral owner }, seen by the quorum
sub members
{
	my %m = zk_owners($kzq, $BAR);
	delete $m{ready};
	return %m;
}

my $m1 = new_session($A, name => 'm1');
is($m1->query_safe("SELECT zk_barrier_enter('mo', 1, '20s')"), 't', 'm1 is in (one party)');
my %m = members();
is(scalar(keys %m), 1, 'its node is there');
my ($node) = keys %m;
my $s0 = zk_status($A);
is($m{$node}, lc($s0->{session_id}), 'owned by A\'s session')
  or diag "owner $m{$node}, session $s0->{session_id}";

like(bh('hole'), qr/^ok/, 'server 3 is cut off from its quorum (packets held)');
my $t0 = time();
my $s1 = hosts_to_quorum($A, $quorum, $s0, 20);
ok($s1, 'A has a new session on servers 1 and 2 (the old one\'s close waits at server 3)');
my $new = lc($s1->{session_id} // 'none');
ok(wait_until(sub { my %x = members(); ($x{$node} // '') eq $new }, 10),
	'm1\'s node is the new session\'s while the old session still lives')
  or diag explain { members() };
my $held = time() - $t0;
note sprintf('the link was held for %.1f s', $held);

like(bh('heal'), qr/^ok/, 'the link heals: the old session\'s close reaches the leader');
sleep 3;
%m = members();
is($m{$node} // 'none', $new, 'm1 still counts once the old session ended');

is($m1->query_safe("SELECT zk_barrier_leave('mo', '20s')"), 't', 'm1 leaves');
ok(wait_until(sub { my %x = members(); !%x }, 10), 'and its node is gone');
$m1->quit;

$A->stop('fast');
$pe->{stop}->();
done_testing();
