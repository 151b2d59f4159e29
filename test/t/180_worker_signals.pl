
# 180_worker_signals.pl - what signals and reloads must not break (issue 6,
# defects 4, 5 and 6).
#
# - pg_cancel_backend(<worker pid>) (the worker shows in pg_stat_activity,
#   so "cancel everything active" scripts hit it) never stops the worker:
#   same pid, same ZooKeeper session, locks still held and exclusive,
#   COMMIT of the holder succeeds.
# - pg_terminate_backend of a backend in each kind of wait: zk_lock behind
#   a holder, zk_lock while ZooKeeper is frozen, zk_lock_holders while
#   ZooKeeper is frozen, COMMIT waiting in zklock.commit_timeout while
#   ZooKeeper is frozen.  Every entry comes back (entries_used returns to
#   0 once ZooKeeper is thawed) and no node of it stays in ZooKeeper.
# - zklock.root changed by ALTER SYSTEM + pg_reload_conf() while a session
#   holds zk_lock('r'): never two holders.  Either the setting is
#   restart-only (SHOW keeps the old value, pg_settings.pending_restart)
#   and another session cannot take 'r', or the change is applied like a
#   hosts change and the holder's COMMIT fails with 40001.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use ZkLockTest;

my $zk = zk_start();
my $node = zk_node('signals', $zk,
	session_timeout => '10s',
	connect_timeout => '3s');

my $LOCKS = '/zklock/locks';

sub entries_used { return zk_status_value($node, 'entries_used'); }

sub wait_entries_zero
{
	my ($what) = @_;
	my $ok = wait_until(sub { entries_used() eq '0' }, 20);
	ok($ok, "$what: entries_used back to 0") or diag 'entries_used ' . entries_used();
	return $ok;
}

# each kind of wait is judged on its own: entries_used must come back to
# what it was before the case (0, unless an earlier case leaked: that one
# failed already, and the end of the file checks 0 again)
sub wait_entries_back
{
	my ($what, $base) = @_;
	my $ok = wait_until(sub { entries_used() eq $base }, 20);
	ok($ok, "$what: entries_used back to $base" . ($base eq '0' ? '' : ' (its value before this case)'))
	  or diag 'entries_used ' . entries_used();
	return $ok;
}

# terminate the backend of $s and wait until its psql noticed
sub terminate
{
	my ($s) = @_;
	is($node->safe_psql('postgres', "SELECT pg_terminate_backend($s->{pid})"), 't',
		"backend of session $s->{name} terminated");
	my $r = $s->wait(20);
	ok($r->{done}, "session $s->{name} ended after pg_terminate_backend");
	my $pid = $s->pid;
	ok(wait_until(sub {
			$node->safe_psql('postgres', "SELECT count(*) FROM pg_stat_activity WHERE pid = $pid") eq '0';
		}, 20), "backend $pid is gone");
	$s->quit;
}

#
# defect 5: pg_cancel_backend(worker)
#
my $worker = worker_pid($node);
ok(defined $worker, "zklock worker runs (pid $worker)");
my $session = zk_status_value($node, 'session_id');

my $holder = new_session($node, name => 'holder');
$holder->query_safe('BEGIN');
my $tok = $holder->query_safe("SELECT zk_lock('c5')");
my @before = map { $_->{name} } zk_lock_nodes($zk, "$LOCKS/c5");
is(scalar(@before), 1, 'the holder has its node in ZooKeeper');

for my $i (1 .. 3)
{
	is($node->safe_psql('postgres', "SELECT pg_cancel_backend($worker)"), 't',
		"pg_cancel_backend(worker) #$i sent");
	sleep(0.3);
}
# "active" backends are what cancel scripts pick: the same, in that style
$node->safe_psql('postgres',
	"SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE backend_type = 'zklock worker'");
sleep(3);
is(worker_pid($node), $worker, 'the worker survived pg_cancel_backend (same pid 3 s later)');
is(zk_status_value($node, 'worker_pid'), $worker, 'zk_status().worker_pid unchanged');
is(zk_status_value($node, 'session_id'), $session, 'the worker kept its ZooKeeper session');
is(zk_status_value($node, 'state'), 'connected', 'still connected');
is(try_lock_elsewhere($node, 'c5'), 'f', 'the lock is still held: zk_try_lock elsewhere is false');
is_deeply([ map { $_->{name} } zk_lock_nodes($zk, "$LOCKS/c5") ], \@before,
	"the holder's node is still there in ZooKeeper");
my $r = $holder->query('COMMIT', 30);
is($r->{sqlstate}, '00000', "the holder's COMMIT succeeds") or diag $r->{err};
ok(scalar(zk_wait_count($zk, "$LOCKS/c5", 0, 10)), 'node removed at commit');
$holder->quit;
wait_entries_zero('after the cancels');

#
# defect 6: pg_terminate_backend during each kind of wait
#

# (a) zk_lock waiting behind a holder
$holder = new_session($node, name => 'holder_a');
$holder->query_safe('BEGIN');
$holder->query_safe("SELECT zk_lock('w6')");
my $w = new_session($node, name => 'waiter_a');
queue_request($zk, $w, "SELECT zk_lock('w6')", "$LOCKS/w6", 2, '(a) waiter queued behind the holder');
ok(wait_for_backend_active($node, $w->pid, '%zk_lock%'), '(a) waiter is waiting');
terminate($w);
ok(scalar(zk_wait_count($zk, "$LOCKS/w6", 1, 10)), "(a) the terminated waiter's node is gone");
$holder->query_safe('COMMIT');
$holder->quit;
wait_entries_zero('(a) zk_lock behind a holder');
ok(scalar(zk_wait_count($zk, "$LOCKS/w6", 0, 10)), '(a) no node left');

# (b) zk_lock while ZooKeeper is frozen, (c) zk_lock_holders while frozen
foreach my $case ([ 'b', "SELECT zk_lock('f6')", 'f6', 'zk_lock' ],
	[ 'c', "SELECT count(*) FROM zk_lock_holders('f6')", 'f6', 'zk_lock_holders' ])
{
	my ($k, $sql, $name, $what) = @$case;
	is(wait_for_state($node, 'connected', 30)->{state}, 'connected', "($k) connected before the freeze");
	my $base = entries_used();
	my $s = new_session($node, name => "frozen_$k");
	$s->query_safe("SET zklock.connect_timeout = '60s'");
	# a contender of f6 so that the listing has something to read
	my $other = new_session($node, name => "other_$k");
	$other->query_safe("SET zklock.commit_timeout = '60s'");
	$other->query_safe('BEGIN');
	$other->query_safe("SELECT zk_lock('f6')");
	ok(zk_freeze($zk), "($k) ZooKeeper frozen");
	$s->send($sql);
	ok(wait_for_backend_active($node, $s->pid, "%$what%"), "($k) $what is waiting");
	sleep(0.5);
	ok($s->running, "($k) $what still waiting while ZooKeeper is frozen");
	terminate($s);
	ok(zk_thaw($zk), "($k) ZooKeeper thawed");
	my $rc = $other->query('COMMIT', 90);
	is($rc->{sqlstate}, '00000', "($k) the other holder commits after the thaw") or diag $rc->{err};
	$other->quit;
	wait_entries_back("($k) $what while ZooKeeper was frozen", $base);
	ok(scalar(zk_wait_count($zk, "$LOCKS/$name", 0, 20)), "($k) no node of it left in ZooKeeper");
}

# (d) COMMIT waiting in zklock.commit_timeout while ZooKeeper is frozen
is(wait_for_state($node, 'connected', 30)->{state}, 'connected', '(d) connected before the freeze');
my $base = entries_used();
my $c = new_session($node, name => 'committer');
$c->query_safe("SET zklock.commit_timeout = '60s'");
$c->query_safe('BEGIN');
$c->query_safe("SELECT zk_lock('c6')");
is(zk_count($zk, "$LOCKS/c6"), 1, '(d) lock held');
ok(zk_freeze($zk), '(d) ZooKeeper frozen');
# COMMIT waits only once the worker has heard nothing for 2/3 of the session
my $st = wait_for_state($node, sub { $_[0]->{state} ne 'connected' }, 20);
isnt($st->{state}, 'connected', "(d) the worker noticed ($st->{state})");
$c->send('COMMIT');
ok(wait_for_backend_active($node, $c->pid, 'COMMIT%'), '(d) COMMIT is running');
sleep(0.3);
ok($c->running, '(d) COMMIT waits for the frozen ZooKeeper');
terminate($c);
ok(zk_thaw($zk), '(d) ZooKeeper thawed');
wait_entries_back('(d) COMMIT waiting in commit_timeout', $base);
ok(scalar(zk_wait_count($zk, "$LOCKS/c6", 0, 20)), '(d) no node of it left in ZooKeeper');

is(wait_for_state($node, 'connected', 30)->{state}, 'connected', 'connected again');
ok(scalar(zk_wait_count($zk, $LOCKS, 0, 20)), 'nothing left in ZooKeeper');

#
# defect 4: zklock.root reloaded while a lock is held
#
$holder = new_session($node, name => 'root_holder');
$holder->query_safe('BEGIN');
$tok = $holder->query_safe("SELECT zk_lock('r')");
is(zk_count($zk, "$LOCKS/r"), 1, "holder has 'r' under /zklock");

$node->safe_psql('postgres', "ALTER SYSTEM SET zklock.root = '/zklock_other'");
$node->safe_psql('postgres', 'SELECT pg_reload_conf()');
sleep(2);		# every process has had the SIGHUP
my $shown = $node->safe_psql('postgres', 'SHOW zklock.root');
my $pending = $node->safe_psql('postgres',
	"SELECT pending_restart FROM pg_settings WHERE name = 'zklock.root'");
my $restart_only = ($shown eq '/zklock' && $pending eq 't');
note "after the reload: SHOW zklock.root = '$shown', pending_restart = '$pending'";

my $o = new_session($node, name => 'root_other');
$o->query_safe('BEGIN');
my $ro = $o->query("SELECT zk_lock('r', '3s')", 30);
my $other_got = ($ro->{done} && $ro->{sqlstate} eq '00000');
note "other session's zk_lock('r'): $ro->{sqlstate} $ro->{err}";
note 'ZooKeeper: ' . zk_tree($zk, '/zklock') . "\n" . zk_tree($zk, '/zklock_other');

my $rc = $holder->query('COMMIT', 30);
my $holder_ok = ($rc->{done} && $rc->{sqlstate} eq '00000');
note "holder's COMMIT: $rc->{sqlstate} $rc->{err}";

ok(!($other_got && $holder_ok),
	"never two holders of 'r': not both (other session got it: "
	  . ($other_got ? 'yes' : 'no') . ", holder's COMMIT succeeded: " . ($holder_ok ? 'yes' : 'no') . ')');
ok($restart_only || $rc->{sqlstate} eq '40001',
	"zklock.root is restart-only (SHOW '$shown', pending_restart '$pending') "
	  . "or the holder's COMMIT fails with 40001 (got $rc->{sqlstate})");
if ($restart_only)
{
	is($ro->{sqlstate}, '55P03', 'restart-only root: the other session waited for the holder and timed out');
	ok($holder_ok, "restart-only root: the holder's COMMIT succeeds");
}
$o->query('ROLLBACK');
$o->quit;
$holder->quit;

$node->safe_psql('postgres', 'ALTER SYSTEM RESET zklock.root');
$node->safe_psql('postgres', 'SELECT pg_reload_conf()');
sleep(1);
is(wait_for_state($node, 'connected', 30)->{state}, 'connected', 'connected after resetting zklock.root');
ok(wait_until(sub { try_lock_elsewhere($node, 'r') eq 't' }, 20), "'r' can be taken again");
wait_entries_zero('at the end');

$node->stop;
done_testing();
