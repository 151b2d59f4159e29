
# 420_barrier_faults.pl - a hostile review of barriers, gates and arrivals
# under real faults, on two PostgreSQL clusters: A talks to ZooKeeper
# through test/zkproxy.py (replies can be lost, delayed or held at exact
# points), B directly.  Every verdict is read in ZooKeeper itself (a kazoo
# client, test/barrier_faults.py), not only through SQL.
#
#   1. No waiter passes early (parties 3, one member waiting on each
#      cluster) across: ZooKeeper SIGKILLed and restarted; A's worker
#      SIGKILLed (a crash restart of A: its member must be withdrawn, then
#      it enters again); A's worker terminated (restarts alone: its member
#      is re-created in the new session); B's worker SIGSTOPped past the
#      session timeout (expired: re-created in the new session).  After each
#      fault ZooKeeper shows one member per cluster, each owned by its
#      cluster's current session, no `ready`, and both enters still wait.
#      A third member lets all three through; all three leave.
#   2. Lost replies to the member create: the connection cut right after
#      the create landed (the member exists exactly once, so the waiter
#      does not count itself twice and pass alone); the reply dropped, or
#      delayed beyond the enter's timeout (the timed-out enter leaves no
#      member behind).
#   3. ZooKeeper frozen at the COMMIT of zk_gate_open, before the
#      transaction node was written (on B) and after it was written (on A):
#      COMMIT fails with 08006 or succeeds within zklock.commit_timeout, and
#      the gate after the thaw is what COMMIT said.
#   4. PostgreSQL (A) stopped 'immediate' after a committed zk_gate_open
#      and zk_arrive whose application the proxy held back: after the
#      restart the worker applies them, once (a gate closed again and
#      arrivals reset afterwards stay so); waiters on B wake.  Conversely a
#      transaction crashed in pre-commit (its transaction node written,
#      the reply held) never applies.
#   5. A member's backend terminated after a successful enter (and one
#      terminated while waiting): its node goes within seconds, not at
#      session expiry; the other member's leave completes.  Backends
#      terminated in zk_gate_wait and zk_await take their watches and
#      shared-memory entries with them.
# At the end: no member, `ready`, gate, arrival or transaction node left,
# the watch count back to what it was before, no shared-memory entry used.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep sleep);
use JSON::PP;
use IPC::Run;
use ZkLockTest;
use ZkProxy;

my %stopped;    # pids we sent SIGSTOP and not yet SIGCONT
my $zk_frozen_ref;

sub thaw_all
{
	kill 'CONT', $_ foreach keys %stopped;
	%stopped = ();
	zk_thaw($zk_frozen_ref) if $zk_frozen_ref && $zk_frozen_ref->{frozen};
}
END { thaw_all(); }
$SIG{__DIE__} = sub { thaw_all() unless $^S; };

my $T0 = time();
my $zk = zk_start();
$zk_frozen_ref = $zk;
my $pA = proxy_start($zk);

my $SESSION_B = 4;    # seconds; B's worker is frozen past it
my $A = zk_node('bfA', $pA->{hosts},
	session_timeout => '6s',
	connect_timeout => '3s',
	conf => "zklock.commit_timeout = '2s'\nrestart_after_crash = on\n");
my $B = zk_node('bfB', $zk,
	session_timeout => "${SESSION_B}s",
	connect_timeout => '3s',
	conf => "zklock.commit_timeout = '2s'\n");

my $ROOT = '/zklock';
my $BAR = "$ROOT/barriers";
my $GATES = "$ROOT/gates";
my $ARR = "$ROOT/arrivals";
my $TXNS = "$ROOT/txns";

my %label;    # system identifier -> 'A' / 'B'
$label{ $A->safe_psql('postgres', 'SELECT system_identifier FROM pg_control_system()') } = 'A';
$label{ $B->safe_psql('postgres', 'SELECT system_identifier FROM pg_control_system()') } = 'B';
my %node = (A => $A, B => $B);

#
# the kazoo driver (test/barrier_faults.py)
#
my %drv = (in => '', out => '', err => '');
$drv{h} = IPC::Run::start(
	[ $ZkLockTest::PYTHON, "$ZkLockTest::SRC/test/barrier_faults.py", $zk->{hosts} ],
	'<', \$drv{in}, '>', \$drv{out}, '2>', \$drv{err});

# one command, its decoded answer (undef if none came within $timeout s)
sub zq_raw
{
	my ($cmd, $timeout) = @_;
	$drv{in} .= "$cmd\n" if defined $cmd;
	my $deadline = time() + ($timeout // 20);
	while (1)
	{
		if ($drv{out} =~ s/^([^\n]*)\n//)
		{
			return decode_json($1);
		}
		return undef if time() >= $deadline;
		my $alive = eval { $drv{h}->pump_nb if $drv{h}->pumpable; $drv{h}->pumpable };
		die "barrier_faults.py exited: $drv{err}" unless $alive || $drv{out} =~ /\n/;
		usleep(5_000);
	}
}
{
	my $r = zq_raw(undef, 60);
	die "barrier_faults.py did not start: $drv{err}" unless $r && $r->{ready};
}
END
{
	local $?;
	if ($drv{h})
	{
		$drv{in} .= "quit\n";
		eval { $drv{h}->finish(IPC::Run::timeout(10)); 1 } or eval { $drv{h}->kill_kill; 1 };
	}
}

# answer of a command; dies when ZooKeeper could not be asked
sub zq
{
	my ($cmd) = @_;
	my $r = zq_raw($cmd);
	die "barrier_faults.py '$cmd': no answer" unless $r;
	die "barrier_faults.py '$cmd': $r->{error}" unless $r->{ok};
	return $r;
}

# same, but undef instead of dying (for polling through outages)
sub zq_try
{
	my ($cmd) = @_;
	my $r = eval { zq($cmd) };
	return $r;
}

sub kids { my $k = zq("kids $_[0]")->{kids}; return $k ? @$k : (); }
sub zexists { return zq("exists $_[0]")->{exists} ? 1 : 0; }
sub zcount { return zq("count $_[0]")->{count}; }
# transaction nodes not published yet (a published one may be kept against
# a late create of it: src/queue/queue_publish.c, "Late creates")
sub ztxns { return zq("pending $TXNS")->{count}; }

# current session id of a node's worker ('0x...'), '' if none
sub sid_of
{
	my ($n) = @_;
	my $st = eval { zk_status($n) };
	return ($st && $st->{state} eq 'connected') ? lc($st->{session_id} // '') : '';
}

# The members of barrier $b as a sorted string: one "X@cur" per member node
# of cluster X owned by X's current ZooKeeper session ("X@0x.." when owned
# by another session, "?@.." when the data names no known cluster), and
# "+ready" when the `ready` node exists.  undef if ZooKeeper did not answer.
sub members
{
	my ($b) = @_;
	my $r = zq_try("kids $BAR/$b");
	return undef unless $r;
	my %sid = map { $_ => sid_of($node{$_}) } keys %node;
	my (@m, $ready);
	foreach my $k (@{ $r->{kids} // [] })
	{
		if ($k->{name} eq 'ready')
		{
			$ready = 1;
			next;
		}
		my $d = eval { decode_json($k->{data}) } // {};
		my $l = $label{ $d->{cluster} // '' } // '?';
		my $own = $l ne '?' && $sid{$l} ne '' && $k->{owner} eq $sid{$l} ? 'cur' : $k->{owner};
		push @m, "$l\@$own";
	}
	return join(',', sort @m) . ($ready ? '+ready' : '');
}

# wait until members($b) is $want; returns what was seen last
sub wait_members
{
	my ($b, $want, $secs) = @_;
	my $got;
	wait_until(sub { $got = members($b); defined $got && $got eq $want }, $secs // 20, 0.1);
	return $got // '(ZooKeeper did not answer)';
}

sub wait_connected_node
{
	my ($n, $secs, $not_sid) = @_;
	my $st = wait_for_state($n,
		sub {
			$_[0]->{state} eq 'connected'
			  && (!defined $not_sid || lc($_[0]->{session_id} // '') ne $not_sid);
		},
		$secs // 30);
	return $st->{state} eq 'connected' && (!defined $not_sid || lc($st->{session_id}) ne $not_sid);
}

sub sql_commit
{
	my ($n, $sql) = @_;
	return $n->safe_psql('postgres', "BEGIN; $sql; COMMIT;");
}

# a session's pending statement: 'running' or "done <sqlstate> <out>"
sub outcome_of
{
	my ($s) = @_;
	return 'running' if $s->running;
	my $r = $s->wait(0);
	return "done $r->{sqlstate} $r->{out}" . ($r->{err} ne '' ? " ($r->{err})" : '');
}

sub elapsed { return sprintf('%.1f', time() - $T0); }

# nobody waits yet: the watches ZooKeeper holds now are not ours to count
my $WC0 = zk_watch_count($zk);
note "setup done at " . elapsed() . " s; watch count $WC0";

#
# 1. no waiter passes early
#
{
	my $b = 'nemesis';
	my %s;
	my @stuck;    # enters that failed an assertion, ended at the end
	$s{A} = new_session($A, name => 'n_A');
	$s{B} = new_session($B, name => 'n_B');
	$_->query_safe("SET zklock.connect_timeout = '120s'") foreach values %s;
	$s{A}->send("SELECT zk_barrier_enter('$b', 3)");
	$s{B}->send("SELECT zk_barrier_enter('$b', 3)");

	# after each fault: one member per cluster, owned by its current
	# session, no ready, and both enters still waiting
	my $check = sub {
		my ($tag) = @_;
		is(wait_members($b, 'A@cur,B@cur', 12), 'A@cur,B@cur',
			"1 $tag: ZooKeeper shows one member per cluster, each in its cluster's current session, no ready");
		sleep 1;    # a waiter let through wrongly would have returned by now
		foreach my $l (qw(A B))
		{
			is(outcome_of($s{$l}), 'running', "1 $tag: the enter on $l still waits");
		}
		is(members($b) // '', 'A@cur,B@cur', "1 $tag: still two members and no ready");
	};
	$check->('start');

	# ZooKeeper SIGKILLed, restarted
	zk_kill($zk);
	sleep 1;
	zk_restart($zk);
	ok(wait_connected_node($A, 40) && wait_connected_node($B, 40),
		'1 zk restart: both workers connected again');
	$check->('zk restart');

	# A's worker SIGKILLed: a crash restart of A (the postmaster ends
	# every backend, so A's member is withdrawn with its backend)
	{
		my $wpid = worker_pid($A);
		kill 'KILL', $wpid;
		my $new;
		wait_until(sub { $new = eval { worker_pid($A) }; defined $new && $new != $wpid }, 40, 0.2);
		ok(defined $new && $new != $wpid, '1 worker SIGKILL: A has a new worker');
		ok(wait_connected_node($A, 40), '1 worker SIGKILL: connected');
		my $r = $s{A}->wait(20);
		if ($r->{done} && $r->{exited})
		{
			note "A crash-restarted: its member's backend ended ($r->{sqlstate})";
			is(wait_members($b, 'B@cur', 10), 'B@cur',
				"1 worker SIGKILL: A's member is withdrawn with its backend, B's remains, no ready");
			is(outcome_of($s{B}), 'running', '1 worker SIGKILL: the enter on B still waits');
			$s{A} = new_session($A, name => 'n_A2');
			$s{A}->query_safe("SET zklock.connect_timeout = '120s'");
			$s{A}->send("SELECT zk_barrier_enter('$b', 3)");
		}
		else
		{
			is($r->{done} ? "done $r->{sqlstate} $r->{out}" : 'running', 'running',
				'1 worker SIGKILL: A did not crash-restart, so its enter must still wait');
		}
		$check->('worker SIGKILL');
	}

	# A's worker terminated: it restarts alone, A's member is re-created
	{
		my $wpid = worker_pid($A);
		my $sid = sid_of($A);
		$A->safe_psql('postgres', "SELECT pg_terminate_backend($wpid)");
		ok(wait_connected_node($A, 40, $sid), '1 worker restart: A has a new session');
		$check->('worker restart');
		if ((members($b) // '') ne 'A@cur,B@cur')
		{
			# failed above; give A a member again (a new session) so that
			# the next fault is tested on its own
			note "1: repairing: A enters again from a new session";
			push @stuck, $s{A};
			$s{A} = new_session($A, name => 'n_A3');
			$s{A}->query_safe("SET zklock.connect_timeout = '120s'");
			$s{A}->send("SELECT zk_barrier_enter('$b', 3)");
			note '1: after the repair: ' . wait_members($b, 'A@cur,B@cur', 10);
		}
	}

	# B's worker frozen past the session timeout
	{
		my $wpid = worker_pid($B);
		my $sid = sid_of($B);
		$stopped{$wpid} = 1;
		kill 'STOP', $wpid;
		sleep($SESSION_B + 2.5);
		# while it is frozen the session expired and its member went
		is(wait_members($b, 'A@cur', 5), 'A@cur',
			'1 worker frozen: the expired session took B\'s member, no ready');
		kill 'CONT', $wpid;
		delete $stopped{$wpid};
		ok(wait_connected_node($B, 40, $sid), '1 worker frozen: B has a new session');
		$check->('session expiry');
	}

	# the third member lets everyone through
	my $c = new_session($B, name => 'n_C');
	$c->send("SELECT zk_barrier_enter('$b', 3, '15s')");
	my %r = map { $_ => $s{$_}->wait(15) } qw(A B);
	$r{C} = $c->wait(20);
	is(join(',', map { $r{$_}->{done} ? $r{$_}->{out} : 'still waiting' } qw(A B C)), 't,t,t',
		'1: a third member lets all three enters return true');
	note sprintf('1: the third enter returned %.1f s after it was sent', $r{C}->{elapsed} // -1);
	$s{C} = $c;
	my @in = grep { $r{$_}->{done} && $r{$_}->{out} eq 't' } qw(A B C);
	foreach my $l (grep { !$r{$_}->{done} } qw(A B C))
	{
		# failed already; end the enter so that the rest can run
		my $n = $l eq 'A' ? $A : $B;
		$n->safe_psql('postgres', 'SELECT pg_cancel_backend(' . $s{$l}->pid . ')');
		$s{$l}->wait(10);
	}
	$s{$_}->send("SELECT zk_barrier_leave('$b', '30s')") foreach @in;
	is(join(',', map { $s{$_}->wait(40)->{out} // '' } @in), join(',', map { 't' } @in),
		'1: the members leave');
	foreach my $x (@stuck)
	{
		$A->safe_psql('postgres', 'SELECT pg_cancel_backend(' . $x->pid . ')');
		$x->wait(10);
		note '1: a stuck enter after its cancel: ' . outcome_of($x);
		$x->quit;
	}
	is(wait_members($b, '', 5), '', '1: no member and no ready left');
	$_->quit foreach ($s{A}, $s{B}, $c);
	note "1 done at " . elapsed() . " s";
}

sub settle_proxy
{
	proxy_cmd($pA, 'reset');
	ok(wait_connected_node($A, 30), 'A connected after the proxy reset');
}

#
# 2. lost replies to the member create
#
{
	# 2a. the connection cut when the member create has landed: the retry
	# must not make a second member (A would then count two and pass alone)
	my $b = 'lost_a';
	my $cut = proxy_rule($pA, 'cut-after-request create2');
	my $a = new_session($A, name => 'la_A');
	$a->send("SELECT zk_barrier_enter('$b', 2, '40s')");
	ok(proxy_wait_fired($pA, $cut, 10), '2a: the connection was cut after the member create landed');
	settle_proxy();
	my $max = 0;
	my $seen = '';
	my $t = time();
	while (time() - $t < 2.5)
	{
		my $m = members($b) // '';
		my $n = () = $m =~ /@/g;
		$max = $n if $n > $max;
		$seen = $m;
		usleep(100_000);
	}
	is($seen, 'A@cur', '2a: the member exists once, in the current session');
	is($max, 1, '2a: never two member nodes for one enter');
	is(outcome_of($a), 'running', '2a: the enter (parties 2) still waits alone');
	my $o = new_session($B, name => 'la_B');
	is($o->query("SELECT zk_barrier_enter('$b', 2, '20s')", 30)->{out}, 't', '2a: a second member enters');
	is($a->wait(20)->{out}, 't', '2a: and lets the first through');
	is(members($b), 'A@cur,B@cur+ready', '2a: exactly two members and ready');
	$a->send("SELECT zk_barrier_leave('$b', '20s')");
	is($o->query("SELECT zk_barrier_leave('$b', '20s')", 30)->{out}, 't', '2a: B leaves');
	is($a->wait(30)->{out}, 't', '2a: A leaves');
	is(zcount("$BAR/$b"), 0, '2a: nothing left');
	$o->quit;

	# 2b. the reply dropped for good, the enter times out: the node that
	# landed must be deleted once the worker is connected again
	$b = 'lost_b';
	my $drop = proxy_rule($pA, 'drop-replies create2');
	my $t0 = time();
	my $r = $a->query("SELECT zk_barrier_enter('$b', 2, '2s')", 30);
	my $el = time() - $t0;
	# its own timeout (2 s) or, since ZooKeeper never answered, 08006 after
	# zklock.connect_timeout (3 s); not a hang until the reconnect
	ok(($r->{sqlstate} eq '00000' && $r->{out} eq 'f') || $r->{sqlstate} eq '08006',
		"2b: the enter whose create reply was lost returns false or fails with 08006 ($r->{sqlstate} '$r->{out}')")
	  or diag $r->{err};
	ok($el < 3 + 4, sprintf('2b: bounded by its timeout or zklock.connect_timeout (%.1f s)', $el));
	ok(zexists("$BAR/$b") && (members($b) // '') =~ /A\@/,
		'2b: the create did land (the node is there while its reply is held)');
	proxy_cmd($pA, 'reset');
	is(wait_members($b, '', 20), '', '2b: the timed-out enter leaves no member behind');
	ok(wait_connected_node($A, 30), '2b: A connected');

	# 2c. the reply delayed past the enter's timeout
	$b = 'lost_c';
	my $delay = proxy_rule($pA, 'delay-replies create2 2500');
	$r = $a->query("SELECT zk_barrier_enter('$b', 2, '1s')", 30);
	is($r->{out}, 'f', '2c: the enter times out while its create reply is delayed') or diag $r->{err};
	ok(wait_until(sub { (members($b) // '') =~ /A\@/ }, 5, 0.05)
		  || (proxy_stats($pA)->{replies}{create2} // 0) > 0,
		'2c: the create landed');
	is(wait_members($b, '', 15), '', '2c: the member is deleted once the late reply arrives');
	settle_proxy();
	$a->quit;
	note "2 done at " . elapsed() . " s";
}

#
# 3. ZooKeeper frozen at COMMIT of zk_gate_open
#
sub gate_after
{
	my ($tag, $g, $r, $n, $bound) = @_;
	note "$tag: COMMIT ended with $r->{sqlstate} in " . sprintf('%.1f', $r->{elapsed}) . " s: $r->{err}";
	ok($r->{done} && ($r->{sqlstate} eq '00000' || $r->{sqlstate} eq '08006'),
		"$tag: COMMIT succeeded or failed with 08006 ($r->{sqlstate})");
	ok($r->{done} && $r->{elapsed} < $bound,
		sprintf("$tag: bounded by zklock.commit_timeout (%.1f s < %g s)", $r->{elapsed}, $bound));
	if ($r->{sqlstate} eq '00000')
	{
		ok(wait_until(sub { my $x = zq_try("exists $GATES/$g"); $x && !$x->{exists} }, 20, 0.1),
			"$tag: COMMIT succeeded, and the gate is open after the thaw");
	}
	else
	{
		sleep 3;
		ok(zexists("$GATES/$g"), "$tag: COMMIT failed, and the gate is still closed after the thaw");
		is(ztxns(), 0, "$tag: no transaction node left");
		sql_commit($n, "SELECT zk_gate_open('$g')");
	}
	ok(wait_until(sub { my $x = zq_try("exists $GATES/$g"); $x && !$x->{exists} }, 20, 0.1),
		"$tag: the gate ends open");
}

{
	# 3a. on B: frozen before COMMIT, so before the transaction node
	my $g = 'frozen_a';
	sql_commit($B, "SELECT zk_gate_close('$g')");
	ok(zexists("$GATES/$g"), '3a: the gate is closed (its node exists)');
	my $w = new_session($B, name => 'fa_wait');
	$w->query_safe("SET zklock.connect_timeout = '120s'");
	$w->send("SELECT zk_gate_wait('$g', '90s')");
	my $s = new_session($B, name => 'fa_open');
	$s->query_safe('BEGIN');
	$s->query_safe("SELECT zk_gate_open('$g')");
	zk_freeze($zk);
	my $r = $s->query('COMMIT', 30);
	zk_thaw($zk);
	ok(wait_connected_node($B, 40), '3a: B connected after the thaw');
	is(outcome_of($w), 'running', '3a: the gate waiter did not pass during the freeze')
	  if $r->{sqlstate} ne '00000';
	# commit_timeout 2 s, plus slack for a loaded machine
	gate_after('3a', $g, $r, $B, 2 + 4);
	is($w->wait(20)->{out}, 't', '3a: the gate waiter returns true once it is open');
	$w->quit;
	$s->quit;

	# 3b. on A: frozen after the transaction node was written (its reply
	# held by the proxy until ZooKeeper is frozen)
	$g = 'frozen_b';
	sql_commit($A, "SELECT zk_gate_close('$g')");
	ok(zexists("$GATES/$g"), '3b: the gate is closed');
	$s = new_session($A, name => 'fb_open');
	$s->query_safe('BEGIN');
	$s->query_safe("SELECT zk_gate_open('$g')");
	my $base = proxy_stats($pA)->{replies}{create} // 0;
	proxy_rule($pA, 'delay-replies create 1500');
	$s->send('COMMIT');
	ok(wait_until(sub { (proxy_stats($pA)->{replies}{create} // 0) > $base }, 10, 0.02),
		'3b: the transaction node was written (its reply is held)');
	zk_freeze($zk);
	$r = $s->wait(30);
	zk_thaw($zk);
	proxy_cmd($pA, 'reset');
	ok(wait_connected_node($A, 40), '3b: A connected after the thaw');
	# the reply's delay (1.5 s, within the pre-commit's commit_timeout),
	# then up to commit_timeout for the application, plus slack
	gate_after('3b', $g, $r, $A, 1.5 + 2 + 4);
	$s->quit;
	note "3 done at " . elapsed() . " s";
}

#
# 4. PostgreSQL crashes around the COMMIT of zk_gate_open and zk_arrive
#
{
	my $g = 'crash_gate';
	my $n = 'crash_etl';
	sql_commit($A, "SELECT zk_gate_close('$g')");
	ok(zexists("$GATES/$g"), '4: the gate is closed');
	my $gw = new_session($B, name => 'c_gwait');
	my $aw = new_session($B, name => 'c_await');
	$_->query_safe("SET zklock.connect_timeout = '120s'") foreach ($gw, $aw);
	$gw->send("SELECT zk_gate_wait('$g', '90s')");
	$aw->send("SELECT zk_await('$n', 1, '90s')");

	# 4a. committed, the application held back, crash
	my $rule = proxy_rule($pA, 'drop-requests multi');
	my $s = new_session($A, name => 'c_commit');
	$s->query_safe('BEGIN');
	$s->query_safe("SELECT zk_gate_open('$g'), zk_arrive('$n', 'extract')");
	my $r = $s->query('COMMIT', 30);
	is($r->{sqlstate}, '00000', '4a: COMMIT succeeded (the transaction node was written)') or diag $r->{err};
	like($r->{err}, qr/WARNING/, '4a: with a warning that ZooKeeper has not applied it yet');
	ok(zexists("$GATES/$g") && zcount("$ARR/$n") == 0 && zcount($TXNS) == 1,
		'4a: held back: gate still closed, no arrival, the transaction node waits');
	is(outcome_of($gw) . ' / ' . outcome_of($aw), 'running / running', '4a: the waiters on B still wait');
	$s->quit;
	$A->stop('immediate');
	proxy_cmd($pA, 'reset');
	$A->start;
	ok(wait_connected_node($A, 40), '4a: A restarted and connected');
	ok(wait_until(sub { my $x = zq_try("exists $GATES/$g"); $x && !$x->{exists} }, 20, 0.1),
		'4a: after the crash the worker opened the gate');
	my @arr = map { $_->{name} } kids("$ARR/$n");
	is(join(',', @arr), 'extract', '4a: and recorded the arrival');
	is(wait_until(sub { ztxns() == 0 }, 10) ? 0 : ztxns(), 0, '4a: no transaction node left');
	is($gw->wait(20)->{out}, 't', '4a: the gate waiter on B returns true');
	is($aw->wait(20)->{out}, 't', '4a: the arrivals waiter on B returns true');
	# exactly once: close again and reset; the old transaction must not
	# apply a second time
	sql_commit($B, "SELECT zk_gate_close('$g')");
	is($B->safe_psql('postgres', "SELECT zk_arrivals_reset('$n')"), '1', '4a: reset removes the one arrival');
	sleep 3;
	ok(zexists("$GATES/$g"), '4a: the gate closed again stays closed (applied once)');
	is(zcount("$ARR/$n"), 0, '4a: the reset arrivals stay reset (applied once)');

	# 4b. crashed in pre-commit: the transaction node written, its reply
	# held, COMMIT still waiting when PostgreSQL stops
	$gw->send("SELECT zk_gate_wait('$g', '90s')");
	$s = new_session($A, name => 'c_precommit');
	$s->query_safe("SET zklock.commit_timeout = '60s'");
	$s->query_safe('BEGIN');
	$s->query_safe("SELECT zk_gate_open('$g'), zk_arrive('$n', 'crashed')");
	proxy_rule($pA, 'drop-replies create');
	$s->send('COMMIT');
	ok(wait_until(sub { (zq_try("count $TXNS") // {})->{count} }, 10, 0.02),
		'4b: the transaction node was written');
	is(outcome_of($s), 'running', '4b: COMMIT still waits for its reply (pre-commit)');
	$A->stop('immediate');
	proxy_cmd($pA, 'reset');
	$A->start;
	ok(wait_connected_node($A, 40), '4b: A restarted and connected');
	ok(wait_until(sub { zcount($TXNS) == 0 }, 20, 0.1), '4b: the transaction node is settled');
	sleep 1;
	ok(zexists("$GATES/$g"), '4b: the gate stays closed (the transaction never committed)');
	is(zcount("$ARR/$n"), 0, '4b: no arrival recorded');
	is(outcome_of($gw), 'running', '4b: the gate waiter still waits');
	sql_commit($B, "SELECT zk_gate_open('$g')");
	is($gw->wait(20)->{out}, 't', '4b: it returns true once the gate is opened for real');
	$_->quit foreach ($gw, $aw);
	note "4 done at " . elapsed() . " s";
}

#
# 5. backend terminated while a member
#
{
	my $b = 'term';
	my $a = new_session($A, name => 't_A');
	my $o = new_session($B, name => 't_B');
	$a->send("SELECT zk_barrier_enter('$b', 2, '20s')");
	is($o->query("SELECT zk_barrier_enter('$b', 2, '20s')", 30)->{out}, 't', '5: B enters');
	is($a->wait(20)->{out}, 't', '5: A enters');
	is(members($b), 'A@cur,B@cur+ready', '5: two members and ready');
	my $t = time();
	$A->safe_psql('postgres', "SELECT pg_terminate_backend(" . $a->pid . ")");
	my $ok = wait_until(sub { my $m = members($b); defined $m && $m !~ /A\@/ }, 3, 0.05);
	ok($ok, sprintf('5: the terminated member\'s node is gone within 3 s (%.1f s), long before session expiry',
			time() - $t));
	$t = time();
	is($o->query("SELECT zk_barrier_leave('$b', '10s')", 20)->{out}, 't', '5: the remaining member leaves');
	ok(time() - $t < 5, '5: at once');
	is(zcount("$BAR/$b"), 0, '5: nothing left');

	# terminated while waiting
	$b = 'term_wait';
	$a = new_session($A, name => 't_A2');
	$a->send("SELECT zk_barrier_enter('$b', 3)");
	is(wait_members($b, 'A@cur', 10), 'A@cur', '5w: a waiting member');
	$A->safe_psql('postgres', "SELECT pg_terminate_backend(" . $a->pid . ")");
	is(wait_members($b, '', 3), '', '5w: withdrawn within 3 s when its backend is terminated');
	$a->quit;

	# gate and arrivals waiters terminated (on B, which has nothing else
	# going on): their watches and entries go with them
	my $g = 'term_gate';
	sql_commit($B, "SELECT zk_gate_close('$g')");
	my $wc = zk_watch_count($zk);
	my $gw = new_session($B, name => 't_gw');
	my $aw = new_session($B, name => 't_aw');
	$gw->send("SELECT zk_gate_wait('$g')");
	$aw->send("SELECT zk_await('term_arr', 2)");
	ok(wait_until(sub { zk_watch_count($zk) >= $wc + 2 }, 10, 0.1), '5g: the two waiters watch');
	$B->safe_psql('postgres', 'SELECT pg_terminate_backend(' . $_->pid . ')') foreach ($gw, $aw);
	my $now;
	wait_until(sub { $now = zk_watch_count($zk); $now <= $wc }, 5, 0.1);
	ok($now <= $wc, "5g: their watches are removed when their backends are terminated ($now, was $wc)");
	ok(wait_until(sub { zk_status_value($B, 'entries_used') eq '0' }, 5, 0.1),
		'5g: and their shared-memory entries freed');
	sql_commit($B, "SELECT zk_gate_open('$g')");
	$_->quit foreach ($gw, $aw, $o);
	note "5 done at " . elapsed() . " s";
}

#
# nothing left behind
#
{
	my @left;
	foreach my $k (kids($BAR))
	{
		my $c = zcount("$BAR/$k->{name}");
		push @left, "barriers/$k->{name}: $c" if $c;
	}
	push @left, map { "gates/$_->{name}" } kids($GATES);
	foreach my $k (kids($ARR))
	{
		my $c = zcount("$ARR/$k->{name}");
		push @left, "arrivals/$k->{name}: $c" if $c;
	}
	is(join('; ', @left), '', 'no member, ready, gate or arrival left');
	is(ztxns(), 0, 'no transaction node left');
	my $wc;
	wait_until(sub { $wc = zk_watch_count($zk); $wc <= $WC0 }, 8, 0.2);
	ok($wc <= $WC0, "no watch left (zk_watch_count $wc, baseline $WC0)")
	  or diag zk_fourlw($zk, 'wchp');
	foreach my $l (qw(A B))
	{
		ok(wait_until(sub { zk_status_value($node{$l}, 'entries_used') eq '0' }, 5),
			"$l: no shared-memory entry left");
	}
}

note "total " . elapsed() . " s";
$A->stop;
$B->stop;
done_testing();
