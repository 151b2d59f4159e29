# 250_frozen_worker.pl - a frozen zklock worker never takes backends down
# with it.
#
# The worker is stopped with SIGSTOP in several states: idle; while
# ZooKeeper is stopped and the worker tries to reconnect; right after a
# zklock.hosts reload; and many times at random moments under load
# (sessions looping zk_lock/COMMIT), to catch it inside its short critical
# sections.  (Once more, ZooKeeper itself is frozen while the hosts are
# reloaded: the worker then closes a session on a server that does not
# answer.)  While it is frozen:
#   - pg_cancel_backend() of a backend waiting in zk_lock returns control
#     within 1 s (57014);
#   - zk_lock under statement_timeout = 300ms fails with 57014 in < 1.5 s;
#   - zk_lock under zklock.connect_timeout = 1s fails with 08006 in < 2.5 s;
#   - a session holding a zk lock can ROLLBACK (< 1 s), and one that exits
#     is gone within 2 s; a fresh session connects, rolls back and exits.
# After SIGCONT everything works again.  No lock is left behind.
#
# zklock-tap: serial (tools/test.sh runs it alone: it loads the machine or
# times faults against the session timeout)

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use ZkLockTest;

my %stopped;    # pids we sent SIGSTOP and not yet SIGCONT

sub thaw_all
{
	kill 'CONT', $_ foreach keys %stopped;
	%stopped = ();
}

# never leave a frozen worker behind (the node could not be stopped)
END { thaw_all(); }
$SIG{__DIE__} = sub { thaw_all() unless $^S; };

my $zk = zk_start();
my $node = zk_node('frozen', $zk, session_timeout => '20s', connect_timeout => '5s');
my $LOCKS = '/zklock/locks';

$node->safe_psql('postgres', 'CREATE TABLE ctl (stop boolean); INSERT INTO ctl VALUES (false);');

my $ctl = new_session($node, name => 'ctl');
my $H = new_session($node, name => 'H');     # holds 'f'
my $W = new_session($node, name => 'W');     # waits for 'f'
my $S1 = new_session($node, name => 'S1');   # zk_lock under statement_timeout
my $S2 = new_session($node, name => 'S2');   # zk_lock under a short connect_timeout
my $R = new_session($node, name => 'R');     # holds 'r', rolls back

# the waiter must outlast a ZooKeeper outage
$W->query_safe("SET zklock.connect_timeout = '60s'");

sub proc_state
{
	my ($pid) = @_;
	open(my $fh, '<', "/proc/$pid/stat") or return '';
	my $st = <$fh> // '';
	close $fh;
	return $st =~ /^\d+ \(.*\) (\S)/ ? $1 : '';
}

sub freeze
{
	my ($pid) = @_;
	$stopped{$pid} = 1;
	kill 'STOP', $pid;
	return wait_until(sub { proc_state($pid) eq 'T' }, 2, 0.005);
}

sub thaw
{
	my ($pid) = @_;
	kill 'CONT', $pid;
	delete $stopped{$pid};
}

# ROLLBACK whatever is open, ending a running statement first
sub reset_session
{
	my ($s) = @_;
	if ($s->running)
	{
		$ctl->query("SELECT pg_cancel_backend($s->{pid})");
		$s->wait(30);
	}
	$s->query('ROLLBACK');
}

my $round = 0;
my $E;          # a session that holds a lock and exits while frozen

# Put everyone in place: H holds 'f', W waits for it, R holds 'r', E holds
# a session lock; S1 and S2 are set up.  Everything must work (after a
# thaw: "works again").
sub arm
{
	my ($what) = @_;
	$round++;
	my $ok = 1;
	# H: still holding 'f'?  (a hosts reload loses it)
	my $r = $H->query("SELECT zk_lock_token('f')", 30);
	if ($r->{sqlstate} ne '00000' || $r->{out} eq '')
	{
		reset_session($H);
		$H->query_safe('BEGIN');
		$r = $H->query("SELECT zk_lock('f', '20s')", 40);
		$ok &&= $r->{sqlstate} eq '00000';
		diag "$what: H could not take 'f': $r->{sqlstate} $r->{err}" if $r->{sqlstate} ne '00000';
	}
	if (!$W->running)
	{
		reset_session($W);
		$W->query_safe('BEGIN');
		$W->send("SELECT zk_lock('f')");
	}
	$ok &&= zk_wait_count($zk, "$LOCKS/f", 2, 20);
	reset_session($R);
	$R->query_safe('BEGIN');
	$r = $R->query("SELECT zk_lock('r', '20s')", 40);
	$ok &&= $r->{sqlstate} eq '00000';
	$E = new_session($node, name => "E$round");
	$r = $E->query("SELECT zk_session_lock('e$round', '20s')", 40);
	$ok &&= $r->{sqlstate} eq '00000';
	$S1->query_safe('RESET statement_timeout');
	$r = $S1->query("SELECT zk_lock('s1', '20s')", 40);
	$ok &&= $r->{sqlstate} eq '00000';
	$S1->query_safe("SET statement_timeout = '300ms'");
	$S2->query_safe("SET zklock.connect_timeout = '1s'");
	return $ok;
}

# an elapsed time for a test name (99: no answer while frozen)
sub secs
{
	my ($t) = @_;
	return $t >= 99 ? 'more than 3 s (no answer while frozen)' : sprintf('%.2fs', $t);
}

# The checks while the worker is frozen (or, with no_stop, while it is
# busy with a frozen ZooKeeper).  Returns the number of failed checks.
sub frozen_checks
{
	my ($what, %opt) = @_;
	my $wpid = $opt{wpid};
	my $fails = 0;
	my $t0 = time();
	my $w_waits = $W->running;
	my $t_cancel;
	my %pending;

	if ($w_waits)
	{
		$ctl->query_safe("SELECT pg_cancel_backend($W->{pid})");
		$t_cancel = time();
		$pending{W} = $W;
	}
	$S1->send("SELECT zk_lock('s1')");
	$pending{S1} = $S1;
	if (!$opt{no_s2})
	{
		$S2->send("SELECT zk_lock('s2')");
		$pending{S2} = $S2;
	}
	$R->send('ROLLBACK');
	$pending{R} = $R;
	my $epid = $E->{pid};
	$E->kill_client;
	my $t_exit = time();

	# a fresh session: connects, rolls back, exits
	my $t_f = time();
	my $F = eval { new_session($node, name => "F$round") };
	my $fr = $F ? $F->query('BEGIN; SELECT 1; ROLLBACK', 5) : { sqlstate => 'no connection' };
	$F->quit if $F;
	my $f_el = time() - $t_f;

	my (%res, %at, $e_gone);
	wait_until(
		sub {
			foreach my $k (keys %pending)
			{
				my $r = $pending{$k}->poll;
				next unless $r;
				$res{$k} = $r;
				$at{$k} = time();
				delete $pending{$k};
			}
			$e_gone //= time()
			  if $ctl->query_safe("SELECT count(*) FROM pg_stat_activity WHERE pid = $epid") eq '0';
			return !%pending && defined $e_gone;
		},
		3, 0.01);

	if ($w_waits)
	{
		my $el = defined $at{W} ? $at{W} - $t_cancel : 99;
		# a reload closes the session, and its waiters fail at once (08006,
		# "zklock.hosts setting changed"), which may come before the cancel
		my $ended = defined $res{W} && ($res{W}{sqlstate} eq '57014' ||
			($res{W}{sqlstate} eq '08006' && $res{W}{err} =~ /zklock\.hosts setting changed/));
		$fails += !ok($ended && $el < 1,
			sprintf('%s: pg_cancel_backend ends a zk_lock wait in %s (57014)', $what, secs($el)));
		diag "W: " . ($res{W} ? "$res{W}{sqlstate} $res{W}{err}" : 'still waiting') if !$ended;
	}
	else
	{
		note "$what: W was no longer waiting when the worker froze ("
		  . ($W->{last} ? "$W->{last}{sqlstate} $W->{last}{err}" : '?') . ')';
	}
	my $r = $res{S1};
	$fails += !ok($r && $r->{sqlstate} eq '57014' && $r->{elapsed} < 1.5,
		sprintf('%s: statement_timeout 300ms ends zk_lock in %s (57014)', $what, secs($r ? $r->{elapsed} : 99)));
	diag "S1: " . ($r ? "$r->{sqlstate} $r->{err}" : 'no answer') if !$r || $r->{sqlstate} ne '57014';
	if (!$opt{no_s2})
	{
		$r = $res{S2};
		$fails += !ok($r && $r->{sqlstate} eq '08006' && $r->{elapsed} < 2.5,
			sprintf('%s: zklock.connect_timeout 1s ends zk_lock in %s (08006)', $what, secs($r ? $r->{elapsed} : 99)));
		diag "S2: " . ($r ? "$r->{sqlstate} $r->{err}" : 'no answer') if !$r || $r->{sqlstate} ne '08006';
	}
	$r = $res{R};
	$fails += !ok($r && $r->{sqlstate} eq '00000' && $r->{elapsed} < 1,
		sprintf('%s: ROLLBACK of a transaction holding a zk lock takes %s', $what, secs($r ? $r->{elapsed} : 99)));
	my $e_el = defined $e_gone ? $e_gone - $t_exit : 99;
	$fails += !ok($e_el < 2, sprintf('%s: a backend holding a zk lock exits in %s', $what, secs($e_el)));
	$fails += !ok($fr->{sqlstate} eq '00000' && $f_el < 2,
		sprintf('%s: a fresh session connects, rolls back and exits (%.2fs)', $what, $f_el));
	if ($wpid)
	{
		is(proc_state($wpid), 'T', "$what: the worker was frozen all along");
	}
	return $fails;
}

# after a thaw: wait for whatever was stuck, then check everything works
sub after_thaw
{
	my ($what) = @_;
	foreach my $s ($W, $S1, $S2, $R)
	{
		$s->wait(30) if $s->{pending};
	}
	$S2->query_safe('RESET zklock.connect_timeout');
	my $st = wait_for_state($node, 'connected', 30);
	ok(arm($what), "$what: after SIGCONT everything works again");
}

sub freeze_round
{
	my ($what, %opt) = @_;
	my $wpid = worker_pid($node);
	$opt{before}->() if $opt{before};
	usleep(int($opt{delay} * 1_000_000)) if $opt{delay};
	if (!freeze($wpid))
	{
		fail("$what: could not SIGSTOP the worker $wpid");
		thaw($wpid);
		return 1;
	}
	my $fails = frozen_checks($what, wpid => $wpid, no_s2 => $opt{no_s2});
	thaw($wpid);
	return $fails;
}

ok(arm('setup'), 'setup: holder, waiter, rollback and exit sessions in place');

#
# idle
#
freeze_round('idle');
after_thaw('idle');

#
# ZooKeeper stopped, the worker reconnecting
#
zk_stop($zk);
my $st = wait_for_state($node, sub { $_[0]->{state} ne 'connected' }, 20);
isnt($st->{state}, 'connected', "ZooKeeper stopped: the worker notices ($st->{state})");
sleep 1;
freeze_round('ZooKeeper stopped');
zk_restart($zk);
after_thaw('ZooKeeper stopped');

#
# right after a zklock.hosts reload (at a few distances from it)
#
my @hosts = ("$zk->{hosts},$zk->{hosts}", $zk->{hosts});
my $i = 0;
foreach my $delay (0, 0.005, 0.02)
{
	my $h = $hosts[ $i++ % 2 ];
	freeze_round("hosts reload +${delay}s",
		before => sub {
			$node->safe_psql('postgres', "ALTER SYSTEM SET zklock.hosts = '$h'; SELECT pg_reload_conf();");
		},
		delay => $delay);
	after_thaw("hosts reload +${delay}s");
}

#
# ZooKeeper frozen while the hosts are reloaded: the worker closes its
# session on a server that does not answer (not SIGSTOPped itself)
#
zk_freeze($zk);
my $h = $hosts[ $i++ % 2 ];
$node->safe_psql('postgres', "ALTER SYSTEM SET zklock.hosts = '$h'; SELECT pg_reload_conf();");
usleep(200_000);
frozen_checks('ZooKeeper frozen, hosts reloaded');
zk_thaw($zk);
after_thaw('ZooKeeper frozen, hosts reloaded');

#
# random moments under load
#
# two sessions contend for one name, two more take their own names
my @load = map { new_session($node, name => "L$_") } 1 .. 4;
my $DO_LOAD = q{
DO $$
DECLARE stop boolean := false;
BEGIN
	WHILE NOT stop LOOP
		BEGIN
			PERFORM zk_lock(CASE WHEN current_setting('application_name') IN ('L3', 'L4')
			                     THEN current_setting('application_name') ELSE 'load' END, '10s');
		EXCEPTION WHEN others THEN
			PERFORM pg_sleep(0.05);
		END;
		COMMIT;
		SELECT ctl.stop INTO stop FROM ctl;
	END LOOP;
END $$};
foreach my $l (@load)
{
	$l->query_safe("SET application_name = '$l->{name}'");
	$l->send($DO_LOAD);
}
sleep 1;
my $grants0 = zk_status_value($node, 'grants');

my $ROUNDS = 24;
my $failed_rounds = 0;
for my $n (1 .. $ROUNDS)
{
	# the 1 s connect_timeout check in every third round only, to keep
	# the rounds short
	my $fails = freeze_round("load $n", delay => rand(0.3), no_s2 => ($n % 3 != 0));
	$failed_rounds++ if $fails;
	after_thaw("load $n");
}
note "$failed_rounds of $ROUNDS random freezes under load had a failed check";
my $grants1 = zk_status_value($node, 'grants');
ok($grants1 - $grants0 > 5 * $ROUNDS, 'the load kept taking locks between the freezes (' . ($grants1 - $grants0) . ' grants)');

$node->safe_psql('postgres', 'UPDATE ctl SET stop = true');
foreach my $l (@load)
{
	my $r = $l->wait(60);
	is($r->{sqlstate}, '00000', "$l->{name}: the load loop ends normally") or diag "$r->{sqlstate} $r->{err}";
}

#
# nothing left behind
#
reset_session($_) foreach ($W, $H, $R);
$E->quit;
ok(scalar(zk_wait_count($zk, $LOCKS, 0, 20)), 'no contender nodes left');
ok(wait_until(sub { zk_status_value($node, 'entries_used') eq '0' }, 20), 'entries_used back to 0')
  or diag explain zk_status($node);

$_->quit foreach ($ctl, $H, $W, $S1, $S2, $R, @load);
$node->stop;
done_testing();
