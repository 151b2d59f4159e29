
# 453_leader_wait.pl - zk_leader_wait (issue 41): sessions of two PostgreSQL
# clusters, A (through test/zkproxy.py, 6 s sessions, a 30 s
# connect_timeout, so its waiters outlive a lost session) and B (20 s
# sessions), in one namespace, and kazoo's Election on the same path.
#
#   1. Nobody leads: waiters with no known token (NULL) on A and B wait;
#      another client's node in the election that is no candidate does not
#      end their wait; a SQL campaign does, and every waiter gets its token.
#   2. No herd: waiters that know the leader are not woken by a candidate
#      standing behind it; ZooKeeper holds their watches on the leader's
#      node, none on the election's; the leader resigns: every waiter gets
#      the next leader's token, the one its zk_campaign returned.
#   3. kazoo both ways: a waiter that knows the SQL leader gets kazoo's
#      candidate's czxid once it leads; a waiter that knows kazoo's gets
#      NULL once kazoo resigns and nobody stands.
#   4. The timeout: the known token back, no error; a cancelled waiter
#      ends with 57014, and no leader wait is left in zk_entries nor a
#      watch in ZooKeeper.
#   5. A's ZooKeeper session lost while its waiter waits (connection
#      frozen past the 6 s session timeout) and the leader resigning
#      meanwhile: once A has a new session, the waiter returns the change.
#   6. The worker killed while waiters wait: a waiter on the cluster whose
#      worker was killed fails with 08006 or returns the change under the
#      new worker; a waiter elsewhere sees the killed cluster's leadership
#      go.  Nobody hangs, no wait is left behind.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use ZkLockTest;
use ZkProxy;

my $T0 = time();
my $zk = zk_start();
my $pA = proxy_start($zk);
my $A = zk_node('lwA', $pA->{hosts}, namespace => 'tenant', session_timeout => '6s',
	connect_timeout => '30s');
my $B = zk_node('lwB', $zk, namespace => 'tenant', session_timeout => '20s',
	connect_timeout => '2s');
my $EL = $A->safe_psql('postgres', "SELECT zk_path('campaign', 'lw')");

# the contenders in line: [ { name, path, ... } ], first leads
sub line_up { return zk_lock_nodes($zk, $_[0] // $EL); }
sub in_line { my @n = line_up($_[0]); return scalar @n; }

sub leader_czxid
{
	my @n = line_up();
	return @n ? zk_czxid($zk, $n[0]->{path}) : undef;
}

# the number of this cluster's leader waits in zk_entries
sub waits_of
{
	my ($node) = @_;
	return $node->safe_psql('postgres',
		"SELECT count(*) FROM zk_entries WHERE kind = 'leader wait'");
}

#
# 1. nobody leads
#
my @w = map { new_session($_ % 2 == 0 ? $A : $B, name => "w$_") } 0 .. 3;
$w[0]->send("SELECT coalesce(zk_leader_wait('lw')::text, 'none')");
$w[1]->send("SELECT coalesce(zk_leader_wait('lw', NULL, '120s')::text, 'none')");
ok(wait_until(sub { waits_of($A) == 1 && waits_of($B) == 1 }, 20, 0.05),
	'a waiter on A and on B, nobody leading');
zkq_or_die($zk, 'create', "$EL/not-a-candidate", 'x');
sleep 1;
ok($w[0]->running && $w[1]->running, "another client's node that is no candidate does not end the wait");
my $c1 = new_session($A, name => 'c1');
my $t1 = $c1->query_safe("SELECT zk_session_campaign('lw')");
my $r0 = $w[0]->wait(20);
my $r1 = $w[1]->wait(20);
is($r0->{out}, $t1, "A's waiter: the new leader's token ($t1)") or diag $r0->{err};
is($r1->{out}, $t1, "B's waiter: the same") or diag $r1->{err};
is($t1, leader_czxid(), "which is the first contender's czxid");
zkq_or_die($zk, 'delete', "$EL/not-a-candidate");

#
# 2. no herd: a candidate behind the leader wakes nobody
#
my $wA = zk_fourlw($zk, 'wchp');
$w[$_]->send("SELECT coalesce(zk_leader_wait('lw', $t1)::text, 'none')") foreach 0 .. 3;
ok(wait_until(sub { waits_of($A) == 2 && waits_of($B) == 2 }, 20, 0.05),
	'four waiters know the leader, two on each cluster');
my $leader_path = (line_up())[0]->{path};
ok(wait_until(sub { zk_fourlw($zk, 'wchp') =~ /^\Q$leader_path\E$/m }, 20, 0.05),
	"ZooKeeper holds a watch on the leader's node");
my $reqA = zk_status_value($A, 'requests');
my $c2 = new_session($B, name => 'c2');
$c2->send("SELECT zk_session_campaign('lw')");
ok(wait_until(sub { in_line() == 2 }, 10, 0.05), 'a candidate stands behind the leader');
sleep 1;
is(scalar(grep { $_->running } @w), 4, 'no waiter returned for it');
is(zk_status_value($A, 'requests'), $reqA, "A's waiters did not even read the election again");
my $wchp = zk_fourlw($zk, 'wchp');
unlike($wchp, qr/^\Q$EL\E$/m, "no data watch on the election itself") or diag $wchp;
is($c1->query_safe("SELECT zk_resign('lw')"), 't', 'the leader resigns');
my $rc2 = $c2->wait(20);
my $t2 = $rc2->{out};
ok($t2 > $t1, "the next leads ($t2)");
foreach my $i (0 .. 3)
{
	my $r = $w[$i]->wait(20);
	is($r->{out}, $t2, "waiter $i: the next leader's token") or diag $r->{err};
}

#
# 3. kazoo both ways
#
my $k = kazoo_process($zk, $ZkLockTest::PYTHON, "$ZkLockTest::SRC/test/election_kazoo.py",
	$zk->{hosts}, $EL, 'py-candidate');
is($k->read_line(30), 'ready', 'kazoo candidate connected');
is($k->cmd('run'), 'standing', 'kazoo stands behind the SQL leader');
ok(wait_until(sub { in_line() == 2 }, 10, 0.05), 'two contenders');
$w[0]->send("SELECT coalesce(zk_leader_wait('lw', $t2)::text, 'none')");
ok(wait_until(sub { waits_of($A) == 1 }, 20, 0.05), 'a waiter knows the SQL leader');
is($c2->query_safe("SELECT zk_resign('lw')"), 't', 'the SQL leader resigns');
is($k->read_line(10), 'leading', 'kazoo leads');
my $tk = leader_czxid();
my $r = $w[0]->wait(20);
is($r->{out}, $tk, "the waiter gets kazoo's candidate's czxid ($tk)") or diag $r->{err};
$w[1]->send("SELECT coalesce(zk_leader_wait('lw', $tk)::text, 'none')");
ok(wait_until(sub { waits_of($B) == 1 }, 20, 0.05), "a waiter on B knows kazoo's token");
is($k->cmd('resign'), 'resigned', 'kazoo resigns');
$r = $w[1]->wait(20);
is($r->{out}, 'none', 'nobody leads: NULL') or diag $r->{err};
$k->quit;

#
# 4. timeout and cancel
#
my $t3 = $c1->query_safe("SELECT zk_session_campaign('lw')");
my $s = time();
is($w[3]->query_safe("SELECT zk_leader_wait('lw', $t3, '1s')"), $t3,
	'the timeout passed: the known token back');
ok(time() - $s >= 0.9, 'after the timeout');
$w[3]->send("SELECT zk_leader_wait('lw', $t3)");
ok(wait_until(sub { waits_of($B) == 1 }, 20, 0.05), 'a waiter on B');
$B->safe_psql('postgres', 'SELECT pg_cancel_backend(' . $w[3]->pid . ')');
$r = $w[3]->wait(20);
is($r->{sqlstate}, '57014', 'cancelled: 57014');
ok(wait_until(sub { waits_of($B) == 0 }, 20, 0.05), 'no leader wait left on B');
my $lp = (line_up())[0]->{path};
ok(wait_until(sub { zk_fourlw($zk, 'wchp') !~ /^\Q$lp\E$/m }, 20, 0.05),
	"no watch left on the leader's node");

#
# 5. A's session lost while its waiter waits; the leader resigns meanwhile
#
my $leader_b = new_session($B, name => 'lb');
is($c1->query_safe("SELECT zk_resign('lw')"), 't', "A's leader resigns");
my $t4 = $leader_b->query_safe("SELECT zk_session_campaign('lw')");
$w[0]->send("SELECT coalesce(zk_leader_wait('lw', $t4)::text, 'none')");
ok(wait_until(sub { waits_of($A) == 1 }, 20, 0.05), "a waiter on A knows B's leader");
my $sid = $A->safe_psql('postgres', "SELECT session_id FROM zk_status()");
proxy_cmd($pA, 'freeze');
sleep 8;						# past A's 6 s session
is($leader_b->query_safe("SELECT zk_resign('lw')"), 't', "B's leader resigns while A is cut off");
ok($w[0]->running, 'the waiter on A still waits');
proxy_cmd($pA, 'thaw');
$r = $w[0]->wait(40);
is($r->{sqlstate}, '00000', "the waiter on A returns once A is back") or diag $r->{err};
is($r->{out}, 'none', 'nobody leads: NULL');
isnt($A->safe_psql('postgres', "SELECT session_id FROM zk_status()"), $sid,
	'with a new ZooKeeper session');
is(waits_of($A), 0, 'no leader wait left on A');

#
# 6. The worker killed while waiters wait.  B's worker, with a waiter on B
#    for A's leader: the waiter fails with 08006 or goes on waiting under
#    the new worker and returns the change; never hangs.  Then the leader
#    on B and B's worker killed: the waiter on A returns the change (the
#    leadership went with B's ZooKeeper session).
#
my $la = new_session($A, name => 'la');
my $t6 = $la->query_safe("SELECT zk_session_campaign('lw6')");
my $wb = new_session($B, name => 'wb');
$wb->send("SELECT coalesce(zk_leader_wait('lw6', $t6, '90s')::text, 'none')");
ok(wait_until(sub { waits_of($B) == 1 }, 20, 0.05), "a waiter on B knows A's leader");
my $old = worker_pid($B);
$B->safe_psql('postgres', "SELECT pg_terminate_backend($old)");
ok(wait_for_worker($B, $old, 30), "B's worker restarted");
wait_for_state($B, 'connected', 30);
my $ended_early = wait_until(sub { !$wb->running }, 3, 0.05);
if ($ended_early)
{
	$r = $wb->wait(5);
	is($r->{sqlstate}, '08006', "the waiter on B ended with the worker: 08006") or diag $r->{err};
}
else
{
	is($la->query_safe("SELECT zk_resign('lw6')"), 't', "A's leader resigns");
	$r = $wb->wait(30);
	is($r->{sqlstate}, '00000', 'the waiter on B, under the new worker, returns the change')
	  or diag $r->{err};
	is($r->{out}, 'none', 'nobody leads: NULL');
}
ok(wait_until(sub { waits_of($B) == 0 }, 20, 0.05), 'no leader wait left on B');
is($wb->query_safe("SELECT 1"), '1', 'the session on B goes on');

my $lb6 = new_session($B, name => 'lb6');
my $t7 = $lb6->query_safe("SELECT zk_session_campaign('lw7')");
my $wa = new_session($A, name => 'wa');
$wa->send("SELECT coalesce(zk_leader_wait('lw7', $t7, '90s')::text, 'none')");
ok(wait_until(sub { waits_of($A) == 1 }, 20, 0.05), "a waiter on A knows B's leader");
$old = worker_pid($B);
$B->safe_psql('postgres', "SELECT pg_terminate_backend($old)");
$r = $wa->wait(40);
is($r->{sqlstate}, '00000', "the waiter on A returns once B's worker is gone") or diag $r->{err};
is($r->{out}, 'none', "B's leadership went with its worker: nobody leads");
ok(wait_for_worker($B, $old, 30), "B's worker restarted");
is(in_line($A->safe_psql('postgres', "SELECT zk_path('campaign', 'lw7')")), 0,
	"no candidate of B's old session left in line");

$_->quit foreach (@w, $c1, $c2, $leader_b, $la, $wb, $lb6, $wa);
$_->stop('fast', fail_ok => 1) foreach ($A, $B);
proxy_stop($pA);
zk_stop($zk);
note sprintf('453_leader_wait: %.1fs', time() - $T0);
done_testing();
