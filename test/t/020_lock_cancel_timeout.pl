
# 020_lock_cancel_timeout.pl - waits that end early: the timeout argument,
# lock_timeout, statement_timeout, pg_cancel_backend.  Each must fail with
# the right SQLSTATE, remove the waiter's node, and leave the holder alone.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use ZkLockTest;

my $zk = zk_start();
my $node = zk_node('cancel', $zk,
	session_timeout => '10s',
	connect_timeout => '3s');

my $JOB = '/zklock/locks/job';

my $holder = new_session($node, name => 'holder');
my $waiter = new_session($node, name => 'waiter');

$holder->query_safe('BEGIN');
my $htok = $holder->query_safe("SELECT zk_lock('job')");
is(zk_count($zk, $JOB), 1, 'holder has its node');

# After a failed wait: the waiter's node must go away quickly and the
# holder must still hold.
sub check_after_failure
{
	my ($what) = @_;
	my ($ok, $secs) = zk_wait_count($zk, $JOB, 1, 5);
	ok($ok, "$what: waiter's node removed (count back to 1 after "
		  . sprintf('%.1f', $secs) . 's)');
	is(try_lock_elsewhere($node, 'job'), 'f', "$what: holder still holds the lock");
	my @kids = zk_children($zk, $JOB);
	is(scalar(@kids), 1, "$what: exactly one contender left");
}

#
# timeout argument
#
my $r = $waiter->query("SELECT zk_lock('job', '1s')", 30);
ok($r->{done}, 'zk_lock with timeout 1s returns');
is($r->{sqlstate}, '55P03', 'zk_lock timeout fails with 55P03') or diag $r->{err};
ok($r->{elapsed} >= 0.8 && $r->{elapsed} < 15,
	sprintf('timeout 1s: waited about a second (%.2fs)', $r->{elapsed}));
check_after_failure('timeout argument');

# timeout inside a transaction block: aborts it, lock not held afterwards
$waiter->query_safe('BEGIN');
$r = $waiter->query("SELECT zk_lock('job', '500ms')", 30);
is($r->{sqlstate}, '55P03', 'timeout inside a transaction block: 55P03');
$r = $waiter->query('SELECT 1');
is($r->{sqlstate}, '25P02', 'transaction is aborted after the timeout');
$waiter->query('ROLLBACK');
check_after_failure('timeout in transaction block');

#
# lock_timeout
#
$r = $waiter->query("SET lock_timeout = '1s'; SELECT zk_lock('job')", 30);
ok($r->{done}, 'zk_lock under lock_timeout returns');
is($r->{sqlstate}, '55P03', 'lock_timeout ends the wait with 55P03') or diag $r->{err};
ok($r->{elapsed} >= 0.8 && $r->{elapsed} < 15,
	sprintf('lock_timeout 1s: waited about a second (%.2fs)', $r->{elapsed}));
check_after_failure('lock_timeout');

# an explicit timeout argument wins over lock_timeout
$r = $waiter->query("SELECT zk_lock('job', '2s')", 30);
is($r->{sqlstate}, '55P03', 'explicit timeout with lock_timeout set: 55P03');
ok($r->{elapsed} >= 1.6, sprintf('explicit timeout 2s used instead of lock_timeout 1s (%.2fs)', $r->{elapsed}));
$waiter->query_safe('RESET lock_timeout');
check_after_failure('explicit timeout over lock_timeout');

#
# statement_timeout
#
$r = $waiter->query("SET statement_timeout = '1s'; SELECT zk_lock('job')", 30);
ok($r->{done}, 'zk_lock under statement_timeout returns');
is($r->{sqlstate}, '57014', 'statement_timeout cancels the wait with 57014') or diag $r->{err};
ok($r->{elapsed} < 15, sprintf('statement_timeout: did not hang (%.2fs)', $r->{elapsed}));
$waiter->query_safe('RESET statement_timeout');
check_after_failure('statement_timeout');

#
# pg_cancel_backend from a third session
#
$waiter->send("SELECT zk_lock('job')");
ok(scalar(zk_wait_count($zk, $JOB, 2, 10)), 'waiter queued (2 nodes)');
ok($waiter->running, 'waiter is blocked');
my $t0 = time();
is($node->safe_psql('postgres', "SELECT pg_cancel_backend($waiter->{pid})"), 't',
	'pg_cancel_backend sent');
$r = $waiter->wait(15);
ok($r->{done}, sprintf('cancelled waiter returns (%.2fs after the cancel)', time() - $t0));
is($r->{sqlstate}, '57014', 'cancelled wait fails with 57014') or diag $r->{err};
check_after_failure('pg_cancel_backend');

#
# many cancels and timeouts in a row, some of them before the create can
# have completed: no orphan nodes
#
my $failures = 0;
for my $i (1 .. 20)
{
	if ($i % 4 == 0)
	{
		# very short timeouts race with the node's creation
		$r = $waiter->query("SELECT zk_lock('job', '" . ($i % 8 == 0 ? '1ms' : '30ms') . "')", 30);
		if ($r->{sqlstate} ne '55P03')
		{
			$failures++;
			diag "iteration $i: short timeout gave $r->{sqlstate}: $r->{err}";
		}
		next;
	}
	$waiter->send("SELECT zk_lock('job')");
	if ($i % 2 == 0)
	{
		# wait until the node is there (blocked in the watch)
		zk_wait_count($zk, $JOB, 2, 10);
	}
	else
	{
		# cancel as soon as the statement runs (create may still be in flight)
		wait_for_backend_active($node, $waiter->{pid}, '%zk_lock%', 10);
	}
	$node->safe_psql('postgres', "SELECT pg_cancel_backend($waiter->{pid})");
	$r = $waiter->wait(15);
	if (!$r->{done} || $r->{sqlstate} ne '57014')
	{
		$failures++;
		diag "iteration $i: cancel gave "
		  . ($r->{done} ? "$r->{sqlstate}: $r->{err}" : 'no answer within 15 s');
		last unless $r->{done};
	}
}
is($failures, 0, '20 cancels/timeouts all failed the wait with the right SQLSTATE');
my ($ok, $secs) = zk_wait_count($zk, $JOB, 1, 5);
ok($ok, 'no orphan nodes after 20 cancels and timeouts (only the holder left)');
sleep 1;
is(zk_count($zk, $JOB), 1, 'and no late node shows up a second later');
is(try_lock_elsewhere($node, 'job'), 'f', 'holder still holds after the cancels');

#
# creates that complete late: ZooKeeper frozen for 2 s (well within the
# 10 s session timeout, so the session survives) while waits end by
# timeout, cancel and terminate; the nodes created after the thaw must be
# removed by zklock, not by a session expiry
#
my $session = zk_status_value($node, 'session_id');
my $late_t = new_session($node, name => 'late_terminated');
# keep the freeze short: waits for an answer end after 1 s here
$waiter->query_safe("SET zklock.connect_timeout = '1s'");
my ($zxid0) = (zk_cmd($zk, 'srvr') // '') =~ /Zxid: (0x[0-9a-f]+)/;
ok(zk_freeze($zk), 'ZooKeeper frozen for late creates');
my $t_freeze = time();
my %late;
$late{timeout_free} = $waiter->query("SELECT zk_lock('late1', '300ms')", 30);
$late{timeout_held} = $waiter->query("SELECT zk_lock('job', '300ms')", 30);
$waiter->send("SELECT zk_lock('late2')");
wait_for_backend_active($node, $waiter->{pid}, '%late2%', 10);
usleep(300_000);
$node->safe_psql('postgres', "SELECT pg_cancel_backend($waiter->{pid})");
$late{cancel} = $waiter->wait(10);
$late_t->send("SELECT zk_lock('late3')");
wait_for_backend_active($node, $late_t->{pid}, '%late3%', 10);
usleep(300_000);
$node->safe_psql('postgres', "SELECT pg_terminate_backend($late_t->{pid})");
$late{terminate} = $late_t->wait(10);
my $frozen_for = time() - $t_freeze;
ok(zk_thaw($zk), sprintf('ZooKeeper thawed after %.1fs', $frozen_for));
$waiter->query_safe('RESET zklock.connect_timeout');

like($late{timeout_free}{sqlstate}, qr/^(55P03|08006)$/,
	"timeout while frozen (free name) fails ($late{timeout_free}{sqlstate})");
like($late{timeout_held}{sqlstate}, qr/^(55P03|08006)$/,
	"timeout while frozen (held name) fails ($late{timeout_held}{sqlstate})");
is($late{cancel}{sqlstate}, '57014', 'cancel while frozen fails with 57014')
  or diag $late{cancel}{err};
ok($late{terminate}{done}, 'terminated backend went away while frozen');

my $late_ok = 1;
for my $name (qw(late1 late2 late3))
{
	$late_ok &&= zk_wait_count($zk, "/zklock/locks/$name", 0, 5);
}
ok($late_ok, 'nodes of creates that completed after the waits ended were removed');
ok(scalar(zk_wait_count($zk, $JOB, 1, 5)), 'late node behind the holder removed (only the holder left)');
ok(scalar(zk_wait_count($zk, '/zklock/locks', 2, 5)),
	'nothing but the held lock (container and node) left in ZooKeeper');
my ($zxid1) = (zk_cmd($zk, 'srvr') // '') =~ /Zxid: (0x[0-9a-f]+)/;
note 'ZooKeeper transactions during the late-create test: '
  . (defined $zxid0 && defined $zxid1 ? hex($zxid1) - hex($zxid0) : '?')
  . ', abandoned counter: ' . zk_status_value($node, 'abandoned');
is(zk_status_value($node, 'session_id'), $session,
	'same ZooKeeper session throughout (cleanup was not a session expiry)');
is(try_lock_elsewhere($node, 'late1'), 't', 'late1 free');
is(try_lock_elsewhere($node, 'job'), 'f', 'holder still holds job');

#
# the holder commits: the next waiter proceeds, with a larger token
#
$waiter->send("SELECT zk_lock('job')");
ok(scalar(zk_wait_count($zk, $JOB, 2, 10)), 'next waiter queued');
$holder->query_safe('COMMIT');
$r = $waiter->wait(15);
ok($r->{done}, 'next waiter granted after holder commits');
is($r->{sqlstate}, '00000', 'next waiter got no error') or diag $r->{err};
ok($r->{out} =~ /^\d+$/ && $r->{out} > $htok, "next waiter's token $r->{out} > holder's $htok");
ok(scalar(zk_wait_count($zk, $JOB, 0, 5)), 'no nodes once the autocommit waiter is done');

# a timeout that is long enough succeeds
$holder->query_safe('BEGIN');
$holder->query_safe("SELECT zk_lock('job')");
$waiter->send("SELECT zk_lock('job', '20s')");
ok(scalar(zk_wait_count($zk, $JOB, 2, 10)), 'waiter with 20s timeout queued');
$holder->query_safe('COMMIT');
$r = $waiter->wait(15);
is($r->{sqlstate}, '00000', 'waiter with timeout granted when the holder commits in time');

my $timeouts = zk_status_value($node, 'timeouts');
ok($timeouts =~ /^\d+$/ && $timeouts >= 5, "zk_status().timeouts counted ($timeouts)");
ok(wait_until(sub { zk_status_value($node, 'entries_used') eq '0' }, 10),
	'entries_used back to 0');

$holder->quit;
$waiter->quit;
ok(scalar(zk_wait_count($zk, '/zklock/locks', 0, 10)), 'nothing left in ZooKeeper');

$node->stop;
done_testing();
