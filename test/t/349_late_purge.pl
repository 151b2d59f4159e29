
# 349_late_purge.pl - a closed session's late purge cannot delete an item of
# the queue dropped and created again since (issue 36, item 1, for
# zk_queue_purge).
#
# ZooKeeper applies a request that a follower already forwarded to the
# leader even after the client closed or gave up its session.  A queue
# created again numbers its items from 0, so the names a purge of the old
# queue deletes come back.  A three-server ensemble whose server 3 reaches
# its leader through test/blackhole.py; cluster A talks to server 3 alone.
#
# Queue 'lp' holds one item.  Server 3's link to its leader is muted (what
# it forwards waits; it still applies the leader's commits), and A purges
# 'lp': what the purge writes waits at server 3.  zklock.hosts is changed to
# servers 1 and 2: the worker closes that session (its close waits too) and
# the purge fails.  A purges again in the new session (the item goes) and
# drops the queue, and a kazoo producer enqueues a new item, which gets the
# old item's name (A itself publishes nothing until the old session is gone,
# src/core/history.c).  Then the link heals.  Before the fix the old session's purge (claim, unclaim
# and delete entries/<name> in one multi) landed and deleted the new item;
# now it is conditional on a node of that purge that the drop took with the
# queue, and the new item stays.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use ZkLockTest;

my ($pe, $A, $quorum, $kzq) = late_request_setup('late_purge', 'lateP',
	sync_limit => 60, session_timeout => '30s', connect_timeout => '10s');
sub bh { return $pe->{bh}->(@_); }
my $Q = '/zklock/queues/lp';

# the queue's items, seen by the quorum
sub items { my @k = sort(zk_children($kzq, "$Q/entries")); return @k; }

$A->safe_psql('postgres', "SELECT zk_enqueue('lp', 'old-item')");
my @old = items();
is(scalar(@old), 1, 'one item in the queue');

like(bh('mute'), qr/^ok/, 'server 3\'s requests to its leader wait (it still applies commits)');
my $t0 = time();
my $p = new_session($A, name => 'purger');
$p->send("SELECT zk_queue_purge('lp')");
sleep 2;
is(scalar(items()), 1, 'A\'s purge waits at server 3');

my $old_s = zk_status($A);
ok(hosts_to_quorum($A, $quorum, $old_s, 15), 'A has a new session on servers 1 and 2');
my $r = $p->wait(30);
note 'the first purge: ' . ($r->{out} // '') . ' ' . ($r->{err} // '');
$p->quit;

# the new session: purge again, drop, and a new item of the same name
is(one_shot($A, "SELECT zk_queue_purge('lp')")->{out}, '1',
	'a purge in the new session deletes the item');
is(one_shot($A, "SELECT zk_queue_drop('lp')")->{out}, 't', 'the queue is dropped');
my $kz = queue_kazoo($kzq);
is($kz->cmd("put $Q 100 " . unpack('H*', 'new-item')), 'ok', 'a kazoo producer enqueues a new item');
$kz->cmd('quit');
my @new = items();
is_deeply(\@new, \@old, 'the new item has the old one\'s name');
held_within($t0, 25, 'muted');

like(bh('heal'), qr/^ok/, 'the link heals: the held purge and close reach the leader');
sleep 5;
is_deeply([ items() ], \@new, 'the new item is still there')
  or diag zk_tree($kzq, $Q);
is(one_shot($A, "SELECT convert_from(payload, 'UTF8') FROM zk_try_dequeue('lp')")->{out},
	'new-item', 'and a consumer gets it');
ok(wait_until(sub { !grep { /^purge-/ } zk_children($kzq, $Q) }, 10),
	'nothing of the purges is left under the queue')
  or diag zk_tree($kzq, $Q);

$A->stop('fast');
$pe->{stop}->();
done_testing();
