
# 460_semaphore.pl - zk_semaphore across two PostgreSQL clusters A and B and
# kazoo's own Semaphore, on one ZooKeeper, counted through ZooKeeper.
#
#   1. Layout: the pool holds max_leases as data; leases are ephemeral
#      children; the guard is the sibling <name>-__lock__.
#   2. Never more than max_leases: SQL sessions on A and B and kazoo
#      clients race for 2 leases in many rounds; the pool never shows more
#      than 2 children, and everybody eventually gets a turn.
#   3. A lease count that differs fails both ways while the pool exists
#      (a lease held; the pool goes with its last lease): SQL against
#      kazoo's pool (22023) and kazoo against zklock's (ValueError).
#   4. A waiter is woken when a kazoo holder releases; cancel, timeout and a
#      terminated backend leave no lease, guard node or watch.
#   5. A transaction-scope lease whose session expired (the worker frozen
#      past the session timeout): COMMIT fails with 40001, also while the
#      worker is still frozen (another client holds the lease by then).
#   6. Lost replies, through the fault proxy (cluster C): a lease create
#      whose reply is lost is found and granted; a lease delete whose reply
#      is lost is sent again, so no lease outlives its holder in a session
#      that goes on (found by the fault run).
#   7. Six tries at once for 2 leases: exactly two succeed (a try waits
#      its turn for the guard instead of answering no because of it).
#   9. A kazoo taker queued on the guard when zklock releases the last
#      lease gets it: the pool is not deleted under it (NoNodeError before);
#      a pool nobody comes back to goes a quiet period after its release.

use strict;
use warnings FATAL => 'all';

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use ZkLockTest;
use ZkProxy;

my $T0 = time();
my $zk = zk_start();
my %opts = (session_timeout => '4s', connect_timeout => '2s');
my $A = zk_node('semA', $zk, %opts);
my $B = zk_node('semB', $zk, %opts);
my %node = (A => $A, B => $B);
my $SEM = '/zklock/semaphores';

sub kazoo_sem
{
	my ($name, $max, $ident) = @_;
	return kazoo_driver($zk, 'semaphore_kazoo.py', "$SEM/$name", $max, $ident);
}

sub leases { return scalar(zk_children($zk, "$SEM/$_[0]")); }

#
# 1. layout
#
my $s1 = new_session($A, name => 's1');
$s1->query_safe("SELECT zk_session_semaphore('job', 2)");
is(zk_get($zk, "$SEM/job"), '2', 'the pool holds max_leases as its data');
my @l = zk_children($zk, "$SEM/job");
is(scalar(@l), 1, 'one lease');
like($l[0] // '', qr/^[0-9a-f]{32}$/, 'named by 32 hex digits, as kazoo names its leases');
# the guard's sibling node is a container, which ZooKeeper reaps once empty
# (within a second in the test ZooKeeper); section 4 sees waiters in it
is(scalar(zk_children($zk, "$SEM/job-__lock__")), 0, 'nobody holds the guard job-__lock__ now');
my $k1 = kazoo_sem('job', 2, 'py-1');
is($k1->cmd('try'), 'acquired', 'kazoo takes the second lease');
my $k2 = kazoo_sem('job', 2, 'py-2');
is($k2->cmd('try'), 'busy', 'a second kazoo client is refused');
is($B->safe_psql('postgres', "SELECT zk_try_semaphore('job', 2)"), 'f', 'B is refused');
is($B->safe_psql('postgres', "SELECT count(*) FROM zk_semaphore_holders('job')"), '2',
	'zk_semaphore_holders: two');

#
# 4. a waiter woken when kazoo releases; cancel and timeout leave nothing
#
my $w = new_session($B, name => 'waiter');
$w->send("SELECT zk_semaphore('job', 2, '30s')");
ok(wait_until(sub { scalar(zk_children($zk, "$SEM/job-__lock__")) == 1 }, 10, 0.1),
	'the waiter holds the guard while it waits');
sleep 0.5;
ok($w->running, 'and waits');
is($k1->cmd('release'), 'released true', 'kazoo releases');
my $r = $w->wait(15);
is($r->{sqlstate}, '00000', 'the waiter gets the lease') or diag $r->{err};
is(leases('job'), 1, 'its lease went with its (autocommit) transaction: one lease');
$r = $w->query("BEGIN; SELECT zk_semaphore('job', 2)");
is($k1->cmd('try'), 'busy', 'kazoo is refused while A and B hold both');
$w->query('ROLLBACK');
is(leases('job'), 1, 'ROLLBACK let it go');

my $wc0 = zk_watch_count($zk);
is($k2->cmd('try'), 'acquired', 'kazoo takes the second again');
my $c = new_session($B, name => 'cancelled');
$c->send("SELECT zk_semaphore('job', 2)");
ok(wait_until(sub { scalar(zk_children($zk, "$SEM/job-__lock__")) == 1 }, 10, 0.1), 'a waiter');
$B->safe_psql('postgres', 'SELECT pg_cancel_backend(' . $c->pid . ')');
$r = $c->wait(10);
is($r->{sqlstate}, '57014', 'cancelled: 57014') or diag $r->{err};
$r = $c->query("SELECT zk_semaphore('job', 2, '300ms')");
is($r->{sqlstate}, '55P03', 'timed out: 55P03') or diag $r->{err};
$c->send("SELECT zk_semaphore('job', 2)");
ok(wait_until(sub { scalar(zk_children($zk, "$SEM/job-__lock__")) == 1 }, 10, 0.1), 'another waiter');
$B->safe_psql('postgres', 'SELECT pg_terminate_backend(' . $c->pid . ')');
$c->wait(10);
ok(wait_until(sub { scalar(zk_children($zk, "$SEM/job-__lock__")) == 0 }, 10, 0.1),
	'no guard node left');
is(leases('job'), 2, 'and no lease of theirs');
my $wc;
ok(wait_until(sub { $wc = zk_watch_count($zk); $wc <= $wc0 }, 10, 0.1),
	"no watch left ($wc, was $wc0)");
is($k2->cmd('release'), 'released true', 'kazoo releases');
$s1->query_safe("SELECT zk_semaphore_release('job')");
is(leases('job'), 0, 'no lease left');
ok(wait_until(sub { !zk_exists($zk, "$SEM/job") }, 10, 0.1), 'the pool went with its last lease');

#
# 3. lease counts that differ (while the pool exists: a lease is held)
#
$s1->query_safe("SELECT zk_session_semaphore('job', 2)");
$r = one_shot($A, "SELECT zk_try_semaphore('job', 3)", 30);
is($r->{sqlstate}, '22023', 'SQL with 3 leases against a pool of 2: 22023') or diag $r->{err};
my $k3 = kazoo_sem('job', 5, 'py-3');
like($k3->cmd('try') // '', qr/^error ValueError/, 'kazoo with 5 against it: ValueError');
$k3->quit;
$s1->query_safe("SELECT zk_semaphore_release('job')");
my $k4 = kazoo_sem('kpool', 3, 'py-4');
is($k4->cmd('try'), 'acquired', 'kazoo makes a pool of 3');
$r = one_shot($B, "SELECT zk_try_semaphore('kpool', 2)", 30);
is($r->{sqlstate}, '22023', 'SQL with 2 against it: 22023') or diag $r->{err};
is($B->safe_psql('postgres', "SELECT zk_try_semaphore('kpool', 3)"), 't', 'SQL with 3: a lease');
$k4->quit;

# a try with a wrong count while the pool is full and a taker waits for a
# lease (holding the guard): 22023 at once, not a wait for the guard (the
# model-based tester found it waiting)
{
	my $h = new_session($A, name => 'full_holder');
	is($h->query_safe("SELECT zk_try_session_semaphore('full', 1)"), 't', 'a pool of 1, held');
	my $wt = new_session($A, name => 'full_waiter');
	$wt->send("SELECT zk_session_semaphore('full', 1, '30s')");
	sleep 0.5;
	ok($wt->running, 'a second taker waits');
	$r = one_shot($B, "SELECT zk_try_semaphore('full', 2)", 30);
	is($r->{sqlstate}, '22023', 'a try with 2 against it: 22023') or diag $r->{err};
	cmp_ok($r->{elapsed}, '<', 2, sprintf('... at once (%.2f s)', $r->{elapsed} // -1));
	$r = one_shot($B, "SELECT zk_try_semaphore('full', 1)", 30);
	is($r->{out}, 'f', 'a try with the right count: false');
	cmp_ok($r->{elapsed}, '<', 2, sprintf('... at once (%.2f s)', $r->{elapsed} // -1));
	$h->query_safe("SELECT zk_semaphore_release('full')");
	is($wt->wait(10)->{sqlstate}, '00000', 'the waiter gets the lease');
	$wt->query_safe("SELECT zk_semaphore_release('full')");
	$_->quit foreach ($h, $wt);
}

#
# 2. never more than max_leases
#
my @s;
foreach my $cl (qw(A B))
{
	push @s, map { new_session($node{$cl}, name => "race_${cl}_$_") } 1 .. 3;
}
my @k = map { kazoo_sem('race', 2, "py-race-$_") } 1 .. 2;
my ($max_seen, $bad) = (0, 0);
my %turns;
foreach my $round (1 .. 6)
{
	$_->send("BEGIN; SELECT zk_semaphore('race', 2, '60s'), pg_sleep(0.1); COMMIT;") foreach @s;
	$_->send('acquire 60') foreach @k;
	my $t = time();
	my $kdone = 0;
	while (time() - $t < 90)
	{
		my $n = leases('race');
		$max_seen = $n if $n > $max_seen;
		foreach my $x (@k)
		{
			next if $x->{held};
			my $l = $x->read_line(0.02);
			next unless defined $l;
			$turns{ 'k' . $kdone }++;
			if ($l eq 'acquired')
			{
				$x->{held} = 1;
				sleep 0.05;
				$x->cmd('release');
			}
			$kdone++;
		}
		last if $kdone == @k && !grep { $_->running } @s;
		sleep 0.02;
	}
	$_->{held} = 0 foreach @k;
	foreach my $x (@s)
	{
		my $res = $x->wait(30);
		$bad++ if $res->{sqlstate} ne '00000';
		$turns{ $x->name }++ if $res->{sqlstate} eq '00000';
	}
}
ok($max_seen <= 2, "six rounds of six SQL sessions and two kazoo clients: at most 2 leases seen ($max_seen)");
is($bad, 0, 'every SQL session got its lease each round');
is(leases('race'), 0, 'none left');
$_->quit foreach @s, @k;

#
# 5. a lease lost with the session: COMMIT fails with 40001
#
my $x = new_session($A, name => 'expiring');
$x->query_safe("BEGIN; SELECT zk_semaphore('exp', 1)");
my $wpid = worker_pid($A);
kill 'STOP', $wpid;
sleep 6;
kill 'CONT', $wpid;
ok(wait_until(sub { leases('exp') == 0 }, 10, 0.1), 'the lease went with the expired session');
$r = $x->query('COMMIT');
is($r->{sqlstate}, '40001', 'COMMIT: 40001') or diag $r->{err};
$x->quit;

# the same, with COMMIT while the worker is still frozen: the worker cannot
# have seen the expiry, COMMIT must not trust its stale "connected"
$x = new_session($A, name => 'expiring2');
$x->query_safe("BEGIN; SELECT zk_semaphore('exp2', 1)");
$wpid = worker_pid($A);
kill 'STOP', $wpid;
ok(wait_until(sub { leases('exp2') == 0 }, 15, 0.1), 'frozen worker: its lease expired in ZooKeeper');
is($B->safe_psql('postgres', "SELECT zk_try_session_semaphore('exp2', 1)"), 't',
	'B takes the only lease meanwhile');
my $tc = time();
$r = $x->query('COMMIT', 30);
my $took = time() - $tc;
kill 'CONT', $wpid;
is($r->{sqlstate}, '40001', 'COMMIT with the worker frozen: 40001 (not a second holder)')
  or diag $r->{err};
like($r->{err}, qr/could not confirm the lease|was lost before commit/, 'and says why');
cmp_ok($took, '<', 20, sprintf('within zklock.commit_timeout, not hung (%.1fs)', $took));
$x->quit;
$B->safe_psql('postgres', "SELECT zk_semaphore_release('exp2')");
foreach my $cl (qw(A B))
{
	ok(wait_until(sub { zk_status_value($node{$cl}, 'entries_used') eq '0' }, 10, 0.1),
		"$cl: no shared-memory entry left");
}

#
# 7. tries at once: six sessions on A and B try for 2 leases together;
#    exactly two get one (a try waits its turn for the guard, which a taker
#    holds for milliseconds, instead of answering no because of it)
#
foreach my $round (1 .. 3)
{
	my @t = map { new_session($node{$_}, name => "try${round}_$_") } qw(A A A B B B);
	$_->send("SELECT zk_try_semaphore('six', 2), pg_sleep(2)") foreach @t;
	my @res = map { $_->wait(30) } @t;
	my $yes = grep { ($_->{out} // '') =~ /^t/ } @res;
	my $errs = join('; ', map { $_->{err} } grep { ($_->{err} // '') =~ /ERROR/ } @res);
	is($yes, 2, "round $round: six tries at once for 2 leases, exactly two got one") or diag $errs;
	$_->quit foreach @t;
}
is(leases('six'), 0, 'their leases went with their statements');

#
# 6. lost replies through the proxy
#
my $p = proxy_start($zk);
my $C = zk_node('semC', $p->{hosts}, %opts);
$node{C} = $C;
my $sid = zk_status_value($C, 'session_id');
my $rule = proxy_rule($p, 'cut-after-request create2');
$x = new_session($C, name => 'lost_create');
$r = $x->query("BEGIN; SELECT zk_semaphore('px', 2, '30s'); SELECT 'granted'", 60);
ok(proxy_wait_fired($p, $rule, 10), 'the connection was cut after the lease create reached ZooKeeper');
like($r->{out}, qr/granted/, 'the create whose reply was lost: found in the pool and granted')
  or diag $r->{err};
is(leases('px'), 1, 'exactly one lease node for it');
$rule = proxy_rule($p, 'cut-after-request delete');
$x->query_safe('COMMIT');
ok(proxy_wait_fired($p, $rule, 10), 'the connection was cut after the lease delete reached ZooKeeper');
ok(wait_until(sub { leases('px') == 0 }, 15, 0.1), 'the lease is gone after COMMIT');
# the delete never forwarded: sent again once the connection is back
$x->query_safe("BEGIN; SELECT zk_semaphore('px', 2, '30s')");
is(leases('px'), 1, 'a lease again');
$rule = proxy_rule($p, 'drop-requests delete');
$x->query_safe('COMMIT');
sleep 1;
is(leases('px'), 1, 'its delete is held back by the proxy');
proxy_cmd($p, 'reset');
proxy_cmd($p, 'cut-all');
ok(wait_until(sub { leases('px') == 0 }, 15, 0.1),
	'after the connection came back the delete was sent again: no lease left');
is(zk_status_value($C, 'session_id'), $sid, 'all in one session (no expiry hid a leak)');
ok(wait_until(sub { zk_status_value($C, 'entries_used') eq '0' }, 10, 0.1), 'C: no shared-memory entry left');
$x->quit;
$C->stop('fast');
proxy_stop($p);

#
# 9. a kazoo taker queued on the guard when zklock releases the last lease:
#    the pool stays for it (the model saw kazoo fail with NoNodeError: the
#    pool was deleted with the last lease, between kazoo's making sure of
#    it and its listing); alone, a pool goes a quiet period after its last
#    release
#
my $h9 = new_session($A, name => 'pool_holder');
is($h9->query_safe("SELECT zk_try_session_semaphore('quiet', 1)"), 't', '9: A holds the only lease of quiet');
my $k9 = kazoo_sem('quiet', 1, 'py-quiet');
$k9->send('acquire 30');
ok(wait_until(sub { zk_exists($zk, "$SEM/quiet-__lock__") && scalar(zk_children($zk, "$SEM/quiet-__lock__")) == 1 },
	10, 0.05), '9: kazoo waits for the lease, its node on the guard');
$h9->query_safe("SELECT zk_semaphore_release('quiet')");
is($k9->read_line(20), 'acquired', '9: kazoo takes the lease: the pool was not deleted under it');
is(leases('quiet'), 1, "9: kazoo's lease is in the pool");
is($k9->cmd('release'), 'released true', '9: kazoo releases');
$k9->quit;
is($h9->query_safe("SELECT zk_try_session_semaphore('quiet2', 1)"), 't', '9: A takes quiet2 alone');
$h9->query_safe("SELECT zk_semaphore_release('quiet2')");
sleep 0.5;
ok(zk_exists($zk, "$SEM/quiet2"), '9: its pool stays for the quiet period');
ok(wait_until(sub { !zk_exists($zk, "$SEM/quiet2") }, 15, 0.2), '9: then it goes');
$h9->quit;

$s1->quit;
$w->quit;
$c->quit;
$k1->quit;
$k2->quit;
$_->stop('fast') foreach ($A, $B);
zk_stop($zk);
note sprintf('460_semaphore: %.1fs', time() - $T0);
done_testing();
