
# 030_lock_terminate.pl - backends that go away while holding or waiting.  Their
# nodes must be removed at once (not when a ZooKeeper session expires: the
# session timeout here is 20 s, far longer than what we wait).

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use ZkLockTest;

my $zk = zk_start();
my $node = zk_node('terminate', $zk,
	session_timeout => '20s',
	connect_timeout => '3s');

my $JOB = '/zklock/locks/job';
my $session_before = zk_status_value($node, 'session_id');
my $worker_before = worker_pid($node);

#
# terminate a holder while somebody waits
#
my $holder = new_session($node, name => 'holder');
my $waiter = new_session($node, name => 'waiter');

$holder->query_safe('BEGIN');
my $htok = $holder->query_safe("SELECT zk_lock('job')");
queue_request($zk, $waiter, "SELECT zk_lock('job')", $JOB, 2, 'holder and waiter both have nodes');

my $t0 = time();
is($node->safe_psql('postgres', "SELECT pg_terminate_backend($holder->{pid})"), 't',
	'holder terminated');
my ($ok, $secs) = zk_wait_count($zk, $JOB, 1, 3);
ok($ok, sprintf("terminated holder's node removed within 3 s (%.1fs)", $secs));
my $r = $waiter->wait(5);
ok($r->{done}, sprintf('waiter granted %.1fs after the holder was terminated', time() - $t0));
is($r->{sqlstate}, '00000', 'waiter got the lock without error') or diag $r->{err};
ok($r->{out} =~ /^\d+$/ && $r->{out} > $htok, "waiter's token $r->{out} > holder's $htok");
my $wtok = $r->{out};

# the terminated session's psql noticed
my $hr = $holder->{exited} ? { exited => 1, sqlstate => 'EXIT' } : $holder->query('SELECT 1', 10);
ok($hr->{exited} || $hr->{sqlstate} ne '00000', 'holder session is gone');

#
# terminate a waiter
#
my $w2 = new_session($node, name => 'waiter2');
$w2->send("SELECT zk_lock('job')");
ok(scalar(zk_wait_count($zk, $JOB, 2, 10)), 'second waiter queued');
is($node->safe_psql('postgres', "SELECT pg_terminate_backend($w2->{pid})"), 't',
	'waiting backend terminated');
$r = $w2->wait(10);
ok($r->{done}, 'terminated waiter returns');
($ok, $secs) = zk_wait_count($zk, $JOB, 1, 3);
ok($ok, sprintf("terminated waiter's node removed within 3 s (%.1fs)", $secs));
is(try_lock_elsewhere($node, 'job'), 'f', 'the holder (former waiter) still holds');

# a waiter queued behind a terminated waiter is not disturbed, and the
# one after it gets the lock when the holder commits
my $w3 = new_session($node, name => 'waiter3');
my $w4 = new_session($node, name => 'waiter4');
$w3->send("SELECT zk_lock('job')");
ok(scalar(zk_wait_count($zk, $JOB, 2, 10)), 'third waiter queued');
$w4->send("SELECT zk_lock('job')");
ok(scalar(zk_wait_count($zk, $JOB, 3, 10)), 'fourth waiter queued behind it');
$node->safe_psql('postgres', "SELECT pg_terminate_backend($w3->{pid})");
ok(scalar(zk_wait_count($zk, $JOB, 2, 3)), 'middle waiter terminated: its node goes');
ok($w4->running, 'the last waiter keeps waiting while the lock is held');
$waiter->query_safe('COMMIT');
$r = $w4->wait(10);
is($r->{sqlstate}, '00000', 'last waiter granted when the holder commits') or diag $r->{err};
ok(scalar(zk_wait_count($zk, $JOB, 0, 5)), 'no nodes left');

#
# a client that disconnects in the middle of a transaction holding locks
#
my $quitter = new_session($node, name => 'quitter');
$quitter->query_safe('BEGIN');
$quitter->query_safe("SELECT zk_lock('q1'), zk_lock('q2')");
is(zk_count($zk, '/zklock/locks/q1') + zk_count($zk, '/zklock/locks/q2'), 2,
	'two locks held by the session about to disconnect');
$t0 = time();
$quitter->quit;
ok(scalar(zk_wait_count($zk, '/zklock/locks/q1', 0, 3)) &&
	  scalar(zk_wait_count($zk, '/zklock/locks/q2', 0, 3)),
	sprintf('locks of a client that disconnected mid-transaction released (%.1fs)', time() - $t0));
is(try_lock_elsewhere($node, 'q1'), 't', 'q1 free again');

# a client killed with SIGKILL: the backend sees EOF and exits
my $victim = new_session($node, name => 'victim');
$victim->query_safe('BEGIN');
$victim->query_safe("SELECT zk_lock('k1')");
is(zk_count($zk, '/zklock/locks/k1'), 1, 'lock held by the client to be killed');
my $vpid = $victim->pid;
$victim->kill_client;
ok(wait_until(sub {
		$node->safe_psql('postgres', "SELECT count(*) FROM pg_stat_activity WHERE pid = $vpid") eq '0';
	}, 10), 'backend of the killed client exited');
ok(scalar(zk_wait_count($zk, '/zklock/locks/k1', 0, 3)), 'its lock node was removed');

# a backend that dies of FATAL while holding (terminated while idle in
# transaction, without any waiter)
my $idle = new_session($node, name => 'idle');
$idle->query_safe('BEGIN');
$idle->query_safe("SELECT zk_lock('idle1')");
$node->safe_psql('postgres', "SELECT pg_terminate_backend($idle->{pid})");
ok(scalar(zk_wait_count($zk, '/zklock/locks/idle1', 0, 3)),
	'idle-in-transaction holder terminated: node removed');

# all of this happened in the same ZooKeeper session of the same worker:
# the nodes were removed by the worker, not by a session expiring
is(zk_status_value($node, 'session_id'), $session_before, 'worker kept its ZooKeeper session');
is(worker_pid($node), $worker_before, 'worker was not restarted');
ok(wait_until(sub { zk_status_value($node, 'entries_used') eq '0' }, 10),
	'entries_used back to 0');
my $abandoned = zk_status_value($node, 'abandoned');
note "abandoned counter: $abandoned";

$waiter->quit;
$w4->quit;
ok(scalar(zk_wait_count($zk, '/zklock/locks', 0, 10)), 'nothing left in ZooKeeper');

$node->stop;
done_testing();
