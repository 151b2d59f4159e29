
# 155_wait_events.pl - what pg_stat_activity says a zklock backend waits
# for.  On PostgreSQL 17 and later zklock registers its own wait events
# (type Extension): a backend blocked in zk_lock shows ZkLock, one blocked
# in zk_dequeue ZkDequeue, one in zk_gate_wait ZkBarrier, the worker
# ZkWorkerMain; every name is in pg_wait_events.  On PostgreSQL 15 each of
# those waits shows wait_event "Extension".

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ZkLockTest;

my $zk = zk_start();
my $node = zk_node('waitev', $zk,
	session_timeout => '10s',
	connect_timeout => '3s');

my $vnum = $node->safe_psql('postgres', 'SHOW server_version_num');
my $custom = $vnum >= 170000;
note "server_version_num $vnum: " . ($custom ? 'custom wait events' : 'Extension');

# the wait event (type/name) of backend $pid once it is $want, or the last
# one seen after 30 s
sub wait_event_of
{
	my ($pid, $want) = @_;
	my $seen = '';
	wait_until(
		sub {
			$seen = $node->safe_psql('postgres',
				"SELECT coalesce(wait_event_type, '') || '/' || coalesce(wait_event, '') "
				  . "FROM pg_stat_activity WHERE pid = $pid");
			return $seen eq $want;
		},
		30, 0.05);
	return $seen;
}

sub expect { return 'Extension/' . ($custom ? $_[0] : 'Extension'); }

# a backend blocked in zk_lock behind another session's hold
my $holder = new_session($node, name => 'holder');
my $waiter = new_session($node, name => 'waiter');
$holder->query_safe('BEGIN');
$holder->query_safe("SELECT zk_lock('waitev')");
$waiter->send("SELECT zk_lock('waitev')");
is(wait_event_of($waiter->pid, expect('ZkLock')), expect('ZkLock'),
	'a backend blocked in zk_lock: wait event ' . expect('ZkLock'));
$holder->query_safe('COMMIT');
my $r = $waiter->wait(30);
ok($r->{done} && $r->{sqlstate} eq '00000', 'the waiter gets the lock once the holder commits')
  or diag explain $r;
# after the wait: no zklock wait event any more
is(wait_event_of($waiter->pid, 'Client/ClientRead'), 'Client/ClientRead',
	'the waiter, idle again, waits for its client');

# a backend blocked in zk_dequeue on an empty queue
$waiter->send("SELECT * FROM zk_dequeue('waitev_q', '60s')");
is(wait_event_of($waiter->pid, expect('ZkDequeue')), expect('ZkDequeue'),
	'a backend blocked in zk_dequeue: wait event ' . expect('ZkDequeue'));
$holder->query_safe("SELECT zk_enqueue('waitev_q', 'one')");
$r = $waiter->wait(30);
ok($r->{done} && $r->{sqlstate} eq '00000', 'the dequeue ends with the item enqueued')
  or diag explain $r;

# a backend blocked in zk_gate_wait on a closed gate
$holder->query_safe("SELECT zk_gate_close('waitev_g')");
$waiter->send("SELECT zk_gate_wait('waitev_g', '60s')");
is(wait_event_of($waiter->pid, expect('ZkBarrier')), expect('ZkBarrier'),
	'a backend blocked in zk_gate_wait: wait event ' . expect('ZkBarrier'));
$holder->query_safe("SELECT zk_gate_open('waitev_g')");
$r = $waiter->wait(30);
ok($r->{done} && $r->{sqlstate} eq '00000', 'the gate wait ends when the gate opens')
  or diag explain $r;

# the worker, idle between ZooKeeper's pings
my $wpid = worker_pid($node);
ok(defined $wpid, 'the worker runs');
is(wait_event_of($wpid, expect('ZkWorkerMain')), expect('ZkWorkerMain'),
	'the idle worker: wait event ' . expect('ZkWorkerMain'));

SKIP:
{
	skip 'custom wait events (pg_wait_events) are PostgreSQL 17 and later', 1
	  unless $custom;
	# every name zklock registers, as doc/troubleshooting.md lists them
	is( $node->safe_psql('postgres',
			"SELECT string_agg(name, ' ' ORDER BY name) FROM pg_wait_events "
			  . "WHERE type = 'Extension' AND name LIKE 'Zk%'"),
		'ZkBarrier ZkDequeue ZkLock ZkSemaphore ZkSharedMemory ZkWorkerAnswer '
		  . 'ZkWorkerCloseSession ZkWorkerMain',
		'pg_wait_events lists every zklock wait event');
}

$waiter->quit;
$holder->quit;
done_testing();
