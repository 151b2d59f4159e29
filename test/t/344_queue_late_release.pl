
# 344_queue_late_release.pl - a closed session's late release cannot hand one
# item to two consumers (issue 36, item 1).
#
# ZooKeeper applies a request that a follower already forwarded to the
# leader even after the client closed or gave up its session; only a live
# session that moved is refused.  A three-server ensemble whose server 3
# reaches the others' quorum ports only through test/blackhole.py; cluster A
# talks to server 3 alone.  A dequeues the one item of queue 'lr' (its claim
# taken/e is in ZooKeeper), server 3 is cut off from its quorum for a moment
# (shorter than syncLimit x tickTime, so it stays a follower), A rolls back
# (the release, a delete of taken/e, waits at server 3), and zklock.hosts
# is changed to servers 1 and 2: the worker closes that session (its close
# waits at server 3 too, and goes unanswered) and opens a new one.
#
# Before the fix, the new session settled the release as in doubt at once
# (read taken/e, ours, deleted it); a kazoo consumer then claimed the item;
# when the link healed the old session's delete removed kazoo's claim, and
# a SQL consumer dequeued and committed the same item: twice.  Now the new
# session settles nothing the old one left in doubt until the old session's
# "live" node is gone (its close or its expiry, ordered after every request
# it sent): the claim stays while the link is held, and afterwards the item
# goes to exactly one consumer.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use ZkLockTest;

my ($pe, $A, $quorum, $kzq) = late_request_setup('late_release', 'lateA',
	session_timeout => '20s', connect_timeout => '3s');
sub bh { return $pe->{bh}->(@_); }
my $Q = '/zklock/queues/lr';

# counts through a kazoo client of servers 1 and 2 (the quorum's view)
sub quorum_count
{
	my ($path) = @_;
	return zk_count($kzq, $path);
}

$A->safe_psql('postgres', "SELECT zk_enqueue('lr', 'the-item')");
is(quorum_count("$Q/entries"), 1, 'one item in the queue');

my $c = new_session($A, name => 'consumerA');
$c->query_safe('BEGIN');
is($c->query_safe("SELECT convert_from(payload, 'UTF8') FROM zk_dequeue('lr', '10s')"),
	'the-item', 'A dequeued the item');
ok(wait_until(sub { quorum_count("$Q/taken") == 1 }, 10), 'its claim is in ZooKeeper');

like(bh('hole'), qr/^ok/, 'server 3 is cut off from its quorum (packets held)');
$c->query_safe('ROLLBACK');	# the release waits at server 3
my $old = zk_status($A);
ok(hosts_to_quorum($A, $quorum, $old, 30), 'A has a new session on servers 1 and 2');

# the old session's release is still held: the new session must not settle
# it meanwhile (before the fix it read the claim, found it its own, and
# deleted it within a second)
sleep 3;
is(quorum_count("$Q/taken"), 1,
	'while the old session may still land its release, the claim is not settled by the new one');

# a kazoo consumer on the quorum waits for the item meanwhile
my $kz = queue_kazoo($kzq);
$kz->send("get $Q 40");
like(bh('heal'), qr/^ok/, 'the link heals: the held release and close reach the leader');
my $got = $kz->read_line(60) // 'no answer';
is($got, 'item ' . unpack('H*', 'the-item'), 'kazoo gets the item once it is released');

# a SQL consumer must not get the item that kazoo holds (before the fix, the
# old session's delete landed on kazoo's claim meanwhile)
sleep 2;
my $r = one_shot($A, "SELECT count(*) FROM zk_try_dequeue('lr')");
is($r->{out}, '0', 'a SQL consumer gets nothing: the item is kazoo\'s');
is($kz->cmd("consume $Q"), 'true', 'kazoo consumes it');
ok(wait_until(sub { quorum_count("$Q/entries") == 0 && quorum_count("$Q/taken") == 0 }, 20),
	'queue empty, no claim left');
is(one_shot($A, "SELECT count(*) FROM zk_try_dequeue('lr')")->{out}, '0',
	'and nobody gets it again');
$kz->cmd('quit');

$A->stop('fast');
$pe->{stop}->();
done_testing();
