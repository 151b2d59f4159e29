
# 320_queue_exactly_once.pl - the queue delivers every committed item
# exactly once, across ZooKeeper, worker, session, PostgreSQL and failover
# faults.
#
# One ZooKeeper; two PostgreSQL clusters A and B (different system
# identifiers) and B2, a streaming hot standby of B made from a base backup
# (same system identifier as B); zklock.session_timeout 4 s on all.
# test/faults/queue_run.py runs, on A and on B, 2 producers that enqueue
# 1-3 unique ids into queue 'eo' and INSERT each into produced(id primary
# key) in the same transaction, then commit or roll back (20 %; some also
# enqueue an id inside a savepoint they roll back), and 3 consumers that
# zk_dequeue('eo', '1s', 1..3), sometimes hold the claims 0.05-0.4 s, INSERT
# each row's (body, msg_id) into consumed in the same transaction, then
# commit or roll back (25 %).  Clients tolerate every error and reconnect.
# Queue 'eo' has a dead-letter policy (zk_queue_set_policy('eo', 3,
# 'eo.dlq')); about one id in twelve is poison (LABEL-pN-SEQ-poison, at
# priority 500), which every consumer rolls back, so the policy moves it to
# eo.dlq at its fourth claim, and one consumer per cluster consumes eo.dlq,
# recording each dead letter (origin, origin_msg_id, origin_attempts) in a
# table dead_letters in the same transaction.  About one ordinary id in four
# is a delayed item (delay or not_before, 0.5-3 s; produced.due_at), and
# some consumer transactions put an item at its first hand-out aside with
# zk_retry_later (0.2-2 s) and then COMMIT or ROLLBACK: the checker proves
# that no delayed item is handed out before it is due, no held item again
# before its hold ends (0.5 s of tolerance), and exactly once through them.
# About three ordinary ids in ten are in message groups (zk_enqueue_grouped,
# 8 groups per producer, some of them poison, a rolled-back savepoint's id
# sometimes grouped): the checker proves that each group's committed consumes
# come in the group's order (its producer's commit order, call order within
# one transaction), that no item is handed out while an earlier item of its
# group has not left the queue, and that no two hand-outs of one group are
# held at once (from the server's clock after zk_dequeue to the client's
# before the transaction's end).
# While they run (ZKLOCK_QUEUE_FAULT_SECONDS, default 45) the test injects,
# spaced out, each fault at least once:
#   - ZooKeeper SIGKILLed, restarted 3 s later;
#   - A's zklock worker SIGKILLed (A crash-restarts);
#   - B's worker SIGSTOPped for session timeout + 3 s (the session expires),
#     then SIGCONT;
#   - A stopped with pg_ctl stop -m immediate, started 2 s later;
#   - B's worker SIGKILLed (B crash-restarts);
#   - B stopped with -m immediate and B2 promoted; B's clients move to B2
#     and B stays down for good.
# The crashes are aimed: the test waits (a few seconds at most) for clients
# inside COMMIT and consumers holding claims; for the worker kills and the
# failover it first freezes ZooKeeper (SIGSTOP, shorter than the session
# timeout) until a COMMIT waits for it, so that PostgreSQL dies between a
# commit record and its effect in ZooKeeper, or between a transaction node
# and its commit record.  While A and B are down, the claims and
# transaction nodes they left are counted through ZooKeeper; at least one
# must have been left for the resolution over the run.  Longer runs then
# draw these faults at random (on A or B2, ZooKeeper frozen or not).
# At the end a final consumer drains the queue (committing), the test waits
# until the workers have resolved everything (no child under /zklock/txns
# nor under /zklock/queues/eo/taken, counted through ZooKeeper), and the
# checker compares the tables:
#   every id in produced was consumed exactly once, no consumed id was never
#   produced (a rolled-back or savepoint-rolled-back enqueue published), no
#   msg_id twice, no id with two msg_ids; nothing left under entries, taken
#   or txns; zk_status().entries_used back to 0 on A and B2; and (the drain
#   rolls back poison items until they are moved, then drains eo.dlq) every
#   poison item dead-lettered exactly once and never consumed from eo, its
#   dead letter with origin 'eo', origin_msg_id its msg_id there, 3 hand-outs
#   and its payload, no hand-out from eo beyond the third, no ordinary item
#   dead-lettered without 3 hand-outs, no id both consumed and dead-lettered.
# It prints "produced N, consumed N (rows N), lost N, duplicated N, phantom N"
# and, for each anomaly, the transactions involved and the fault before them.
# zk_queue_move (issue 38): a mover per cluster now and then moves dead
# letters back into eo (poison again: dead-lettered again), items of eo into
# eo.side, or back, and a consumer per cluster consumes eo.side (the drain
# moves what is left there back into eo first); the checker follows each
# item through its incarnations (its life in one queue under one msg_id):
# none alive twice at once, none new without a move that could have made it
# (no second trip through eo.dlq without a move back), no move beyond its
# max_items, no more incarnations made by moves than items moved.
#
# Why the tables are the truth.  An error during COMMIT leaves its fate
# unknown to the client, so the verdict never relies on what clients were
# told: an enqueue happened iff its produced row is committed, a dequeue iff
# its consumed row is, since both are in the same transaction.  Committed
# rows of A survive A's crashes (its WAL).  B is lost at the failover, so for
# B only what B2 has counts: produced and consumed are read from A and from
# B2 after promotion.  That is exact only if nothing that B2 lacks ever had
# an effect in ZooKeeper.  zklock acts in ZooKeeper for a committed
# transaction after its commit record (publish / consume after COMMIT, or the
# worker's resolution from the commit log after a restart), so:
#   - B runs with synchronous_standby_names = '*' and synchronous_commit =
#     on: PostgreSQL waits for B2 to flush the commit record before the
#     transaction's post-commit callbacks run, hence before zklock's own
#     publish/consume; a transaction whose record B2 never got had no effect
#     in ZooKeeper before B died (its claims and its transaction node are
#     left for B2 to resolve as not committed);
#   - the worker's resolution after a crash restart of B acts on commit
#     records that were in B's WAL before the crash and maybe not yet on
#     B2; the test therefore waits, after every restart of B, until B2 has
#     flushed B's WAL up to B's position after the restart, before anything
#     else happens (the promotion comes later);
#   - the clients' statement_timeout (60 s) is longer than any run could
#     keep a COMMIT waiting for B2 (a cancelled wait would let the commit go
#     ahead unreplicated; a statement timeout is counted as a hang anyway).
# The premise is checked too: every COMMIT acknowledged on B must be found
# on B2 (acked_producer_missing, acked_consumer_missing).  B2 itself is not
# a synchronous primary after the promotion (no standby; B's ALTER SYSTEM
# was made after B2's base backup).
#
# Why it cannot pass falsely.  consumed has no unique constraint, so a
# duplicate is recorded, not refused (a constraint would turn it into a
# rollback and a redelivery, hiding it); ids are never reused (B2's ids
# carry their own prefix); a NULL body counts as a phantom; volumes are
# asserted (items produced and consumed on A, B and B2, producer and
# consumer rollbacks, savepoint rollbacks, items redelivered after a
# rolled-back claim), every fault is checked to have happened (new worker
# pid, new session id, B2 out of recovery...) and to have left work for the
# resolution, ZooKeeper is counted through ZooKeeper, and the checker itself
# is run once on mutated data (a consumed row removed, one duplicated, a
# phantom added, a dead letter with 4 hand-outs, one dead letter twice, a
# second trip through eo.dlq without a move, a move beyond its max_items, a
# message group consumed out of order, two hand-outs of a group at once) and
# must report each.
#
# zklock-tap: serial (tools/test.sh runs it alone: it loads the machine or
# times faults against the session timeout)

use strict;
use warnings FATAL => 'all';

use File::Path qw(rmtree);
use IPC::Run;
use JSON::PP;
use POSIX ':sys_wait_h';
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use ZkLockTest;

my $RUN = "$ZkLockTest::SRC/test/faults/queue_run.py";
my $SECONDS = $ENV{ZKLOCK_QUEUE_FAULT_SECONDS} // 45;
my $SESSION_S = 4;
my $Q = '/zklock/queues/eo';
my $TXNS = '/zklock/txns';

my %stopped;    # pids we sent SIGSTOP and not yet SIGCONT
my %sysname;    # cluster name -> system identifier
my $load_pid;

sub thaw_all
{
	kill 'CONT', $_ foreach keys %stopped;
	%stopped = ();
}

END
{
	thaw_all();
	if ($load_pid)
	{
		kill 'TERM', $load_pid;
		waitpid($load_pid, 0);
	}
}
$SIG{__DIE__} = sub { thaw_all() unless $^S; };

my ($rc0, $out0, $err0) = py([ '-c', 'import psycopg2' ], 60);
is($rc0, 0, "$ZkLockTest::PYTHON has psycopg2") or do {
	diag $err0;
	done_testing();
	exit;
};

my $dir = "$PostgreSQL::Test::Utils::tmp_check/queue_eo";
rmtree($dir);
mkdir $dir or die "cannot create $dir: $!";

my $zk = zk_start();
my $conf = "restart_after_crash = on\n"
  . "log_statement = none\n"
  . "shared_buffers = 16MB\n"
  . "zklock.commit_timeout = '3s'\n"
  . "wal_retrieve_retry_interval = '200ms'\n";
my %nopts = (session_timeout => "${SESSION_S}s", connect_timeout => '2s', conf => $conf);
my $A = zk_node('A', $zk, %nopts);
my $B = zk_streaming_node('B', $zk, %nopts);
foreach my $n ($A, $B)
{
	my ($src, $sout, $serr) = py([ $RUN, 'setup', '--host', $n->host, '--port', $n->port ], 60);
	is($src, 0, $n->name . ': tables produced and consumed created') or diag "$sout\n$serr";
}
my $B2 = zk_standby_node('B2', $B);

# B commits synchronously to B2 (set after B2's base backup, so B2 does not
# inherit it)
$B->safe_psql('postgres',
	"ALTER SYSTEM SET synchronous_standby_names = '*'; SELECT pg_reload_conf();");
ok( wait_until(
		sub {
			$B->safe_psql('postgres',
				"SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'") eq '1';
		},
		30),
	'B2 is B\'s synchronous standby');
is($B2->safe_psql('postgres', 'SHOW synchronous_standby_names'), '',
	'B2 has no synchronous standby of its own (it will not wait once promoted)');
is($B->safe_psql('postgres', 'SHOW synchronous_commit'), 'on', 'synchronous_commit is on on B');

my $sysA = $A->safe_psql('postgres', 'SELECT system_identifier FROM pg_control_system()');
my $sysB = $B->safe_psql('postgres', 'SELECT system_identifier FROM pg_control_system()');
isnt($sysA, $sysB, "A and B have different system identifiers ($sysA, $sysB)");
is($B2->safe_psql('postgres', 'SELECT system_identifier FROM pg_control_system()'), $sysB,
	'B2 has B\'s system identifier');
is($B2->safe_psql('postgres', 'SELECT pg_is_in_recovery()'), 't', 'B2 is a standby');
%sysname = (A => $sysA, B => $sysB);

my $have = $A->safe_psql('postgres',
	"SELECT count(*) FROM pg_proc WHERE proname IN ('zk_enqueue', 'zk_dequeue', 'zk_queue_length')");
ok($have >= 3, 'zk_enqueue, zk_dequeue and zk_queue_length exist') or do {
	done_testing();
	exit;
};

#
# Faults
#
my $host = $A->host;
my $curB = $B;          # where B's clients go (B2 after the promotion)
my %injected;           # kind -> count
my $t_start;

sub fault_event
{
	my ($kind, $action, $target, %d) = @_;
	my $rec = { t => time(), kind => $kind, action => $action, target => $target, %d };
	open(my $fh, '>>', "$dir/faults.jsonl") or die "faults.jsonl: $!";
	print $fh encode_json($rec) . "\n";
	close $fh;
	$injected{$kind}++ if $action eq 'inject';
	note sprintf('%+.1fs %s %s %s %s', time() - ($t_start // time()), $action, $kind, $target,
		%d ? encode_json(\%d) : '');
	return;
}

sub node_label { return $_[0]->name; }

# worker pid, undef when the cluster does not answer
sub wpid
{
	my ($node) = @_;
	my $p = eval { worker_pid($node) };
	return $p;
}

sub up
{
	my ($node) = @_;
	my ($rc) = psql_noerr($node, 'postgres', 'SELECT 1');
	return $rc == 0;
}

sub connected
{
	my ($node, $secs, $not_sid) = @_;
	my $st = wait_for_state($node,
		sub { $_[0]->{state} eq 'connected' && (!defined $not_sid || $_[0]->{session_id} ne $not_sid) },
		$secs // 60);
	return ($st->{state} eq 'connected' && (!defined $not_sid || $st->{session_id} ne $not_sid), $st);
}

# After a restart of B: B2 must have flushed B's WAL up to B's position now,
# so that whatever B's worker resolves from B's commit log is on B2 too.
sub b2_catch_up
{
	my ($what) = @_;
	return 1 unless $curB == $B;
	my $lsn;
	wait_until(sub { $lsn = eval { $B->safe_psql('postgres', 'SELECT pg_current_wal_lsn()') }; defined $lsn }, 60);
	my $ok = defined $lsn && wait_until(
		sub {
			(eval {
				$B2->safe_psql('postgres', "SELECT pg_last_wal_receive_lsn() >= '$lsn'::pg_lsn") } // '')
			  eq 't';
		},
		60, 0.1);
	ok($ok, "$what: B2 flushed B's WAL up to B's position after the restart (" . ($lsn // '?') . ')');
	return $ok;
}

# Wait (up to 3 s) for a moment when clients of $node are inside COMMIT and
# consumers hold claims (idle in transaction), so that the fault that follows
# hits transactions in flight; returns what it saw
sub in_flight
{
	my ($node) = @_;
	my ($c, $h) = (0, 0);
	wait_until(
		sub {
			my $r = eval {
				$node->safe_psql('postgres',
					"SELECT count(*) FILTER (WHERE query = 'COMMIT' AND state = 'active') || ' ' || "
					  . "count(*) FILTER (WHERE state = 'idle in transaction') "
					  . "FROM pg_stat_activity WHERE application_name LIKE 'queue-%'");
			} // '0 0';
			($c, $h) = split / /, $r;
			return $c > 0 && $h > 0;
		},
		3, 0.02);
	return (commits_active => $c + 0, idle_in_transaction => $h + 0);
}

# Claims (by cluster) and transaction nodes (by cluster) in ZooKeeper now,
# through kazoo
sub zk_in_doubt
{
	my ($rc, $out, $err) = py([ $RUN, 'zk', '--dir', $dir, '--hosts', $zk->{hosts},
		'--sysids', join(',', map { "$_=$sysname{$_}" } sort keys %sysname) ], 60);
	my ($j) = $out =~ /^QUEUE-ZK (\{.*\})\s*$/m;
	note "zk scan failed: $out $err" unless defined $j;
	return defined $j ? decode_json($j) : { taken => {}, txns => {} };
}

# in-doubt nodes a stopped cluster left for the resolution
my $in_doubt_total = 0;
sub left_behind
{
	my ($name) = @_;
	my $z = zk_in_doubt();
	$name = 'B' if $name eq 'B2';    # one system identifier
	my %r = (claims_left => $z->{taken}{$name} // 0, txns_left => $z->{txns}{$name} // 0);
	$in_doubt_total += $r{claims_left} + $r{txns_left};
	return %r;
}

sub f_zk_kill
{
	zk_kill($zk);
	fault_event('zk_kill', 'inject', 'zk');
	usleep(3_000_000);
	zk_restart($zk);
	fault_event('zk_kill', 'heal', 'zk');
	foreach my $n ($A, $curB)
	{
		my ($ok, $st) = connected($n, 60);
		ok($ok, 'zk_kill: ' . node_label($n) . "'s worker is connected again") or diag explain $st;
	}
	return;
}

# With $freeze, ZooKeeper is frozen (SIGSTOP) first, for less than the
# session timeout, until clients of $node wait inside COMMIT for it: the
# crash then lands between a transaction's commit record and its effect in
# ZooKeeper (a consume or a publication), or between the transaction node
# and the commit record.  Returns the details for the fault log.
sub before_crash
{
	my ($n, $freeze) = @_;
	return in_flight($n) unless $freeze;
	return (zk_freeze => 'failed') unless zk_freeze($zk);
	my $c = 0;
	wait_until(
		sub {
			$c = eval {
				$n->safe_psql('postgres',
					"SELECT count(*) FROM pg_stat_activity WHERE query = 'COMMIT' AND state = 'active' "
					  . "AND application_name LIKE 'queue-%'");
			} // 0;
			return $c > 0;
		},
		1.5, 0.02);
	return (zk_frozen => 1, commits_waiting_for_zk => $c + 0);
}

sub after_crash
{
	my ($freeze) = @_;
	zk_thaw($zk) if $freeze && $zk->{frozen};
	return;
}

sub f_worker_kill
{
	my ($n, $freeze) = @_;
	my $name = node_label($n);
	my $pid = wpid($n);
	ok(defined $pid, "worker_kill $name: the worker runs") or return;
	my %fl = before_crash($n, $freeze);
	kill 'KILL', $pid;
	usleep(300_000) if $freeze;
	after_crash($freeze);
	fault_event('worker_kill', 'inject', $name, pid => $pid, %fl);
	my $new;
	wait_until(sub { $new = wpid($n); defined $new && $new != $pid }, 60, 0.2);
	fault_event('worker_kill', 'heal', $name, new_pid => $new);
	ok(defined $new && $new != $pid, "worker_kill $name: a new worker runs after the crash restart")
	  or return;
	my ($ok, $st) = connected($n, 60);
	ok($ok, "worker_kill $name: and is connected") or diag explain $st;
	b2_catch_up("worker_kill $name") if $n == $B;
	return;
}

sub f_expiry
{
	my ($n) = @_;
	my $name = node_label($n);
	my ($ok0, $st0) = connected($n, 30);
	my $sid = $st0->{session_id} // '?';
	my $pid = wpid($n);
	ok(defined $pid && $ok0, "expiry $name: the worker runs, session $sid") or return;
	$stopped{$pid} = 1;
	kill 'STOP', $pid;
	fault_event('expiry', 'inject', $name, pid => $pid, session => $sid, secs => $SESSION_S + 3);
	usleep(int(($SESSION_S + 3) * 1_000_000));
	kill 'CONT', $pid;
	delete $stopped{$pid};
	my ($ok, $st) = connected($n, 60, $sid);
	fault_event('expiry', 'heal', $name, session => $st->{session_id} // '?');
	ok($ok, "expiry $name: a new session replaced the expired $sid") or diag explain $st;
	return;
}

sub f_immediate
{
	my ($n, $freeze) = @_;
	my $name = node_label($n);
	my %fl = before_crash($n, $freeze);
	$n->stop('immediate');
	my $t0 = time();
	after_crash($freeze);
	my %left = left_behind($name);
	fault_event('immediate', 'inject', $name, %fl, %left);
	my $rest = 2 - (time() - $t0);
	usleep(int($rest * 1_000_000)) if $rest > 0;
	$n->start;
	fault_event('immediate', 'heal', $name);
	my ($ok, $st) = connected($n, 60);
	ok($ok, "immediate $name: started again, worker connected") or diag explain $st;
	b2_catch_up("immediate $name") if $n == $B;
	return;
}

sub f_promote
{
	my ($freeze) = @_;
	my %fl = before_crash($B, $freeze);
	$B->stop('immediate');
	after_crash($freeze);
	my %left = left_behind('B');
	fault_event('promote', 'inject', 'B', %fl, %left);
	$B2->promote;
	my $ok = wait_until(sub { (eval { $B2->safe_psql('postgres', 'SELECT pg_is_in_recovery()') } // '') eq 'f' },
		60);
	ok($ok, 'promote: B2 is out of recovery');
	open(my $fh, '>', "$dir/target_B.tmp") or die $!;
	print $fh $B2->port . " B2\n";
	close $fh;
	rename("$dir/target_B.tmp", "$dir/target_B") or die $!;
	$curB = $B2;
	fault_event('promote', 'heal', 'B2');
	my ($cok, $st) = connected($B2, 60);
	ok($cok, "promote: B2's worker is connected") or diag explain $st;
	return;
}

# The first round: every fault once (crashes of A and B with ZooKeeper
# frozen under their COMMITs, except the immediate stop of A, which hits
# whatever is in flight)
my @first = (
	[ 'zk_kill', \&f_zk_kill ],
	[ 'worker_kill A (ZooKeeper frozen)', sub { f_worker_kill($A, 1) } ],
	[ 'expiry B', sub { f_expiry($B) } ],
	[ 'immediate A', sub { f_immediate($A, 0) } ],
	[ 'worker_kill B (ZooKeeper frozen)', sub { f_worker_kill($B, 1) } ],
	[ 'promote (ZooKeeper frozen)', sub { f_promote(1) } ]);

# Later rounds (long runs): at random, on A or B2
sub random_fault
{
	my @k = ('zk_kill', 'worker_kill', 'expiry', 'immediate');
	my $kind = $k[ int(rand(@k)) ];
	my $n = rand() < 0.5 ? $A : $curB;
	my $fr = rand() < 0.5 ? 1 : 0;
	my $what = node_label($n) . ($fr ? ' (ZooKeeper frozen)' : '');
	return [ 'zk_kill', \&f_zk_kill ] if $kind eq 'zk_kill';
	return [ "worker_kill $what", sub { f_worker_kill($n, $fr) } ] if $kind eq 'worker_kill';
	return [ "expiry " . node_label($n), sub { f_expiry($n) } ] if $kind eq 'expiry';
	return [ "immediate $what", sub { f_immediate($n, $fr) } ];
}

#
# The load
#
$t_start = time();
$load_pid = fork();
die "fork: $!" unless defined $load_pid;
if ($load_pid == 0)
{
	open(STDOUT, '>', "$dir/load.out") or die;
	open(STDERR, '>', "$dir/load.err") or die;
	exec($ZkLockTest::PYTHON, $RUN, 'load', '--dir', $dir, '--host', $host,
		'--a', $A->port, '--b', $B->port) or die "exec: $!";
}

my $gap = $SECONDS / 7;
$gap = 6 if $gap < 6;
$gap = 12 if $gap > 12;
my $t_end = $t_start + $SECONDS;
my $last_heal = $t_start;
my $i = 0;
while (1)
{
	my $f;
	if ($i < @first)
	{
		$f = $first[$i];
	}
	else
	{
		last if time() + $gap > $t_end - $gap;
		$f = random_fault();
	}
	$i++;
	my $at = $t_start + $i * $gap;
	$at = $last_heal + 3 if $at < $last_heal + 3;
	my $now = time();
	usleep(int(($at - $now) * 1_000_000)) if $at > $now;
	die "the load (queue_run.py load) exited early:\n" . slurp("$dir/load.out") . slurp("$dir/load.err")
	  if waitpid($load_pid, WNOHANG) != 0;
	note sprintf('%+.1fs fault %s', time() - $t_start, $f->[0]);
	$f->[1]->();
	$last_heal = time();
}
# some load after the last fault
my $until = $t_end > $last_heal + 8 ? $t_end : $last_heal + 8;
usleep(int(($until - time()) * 1_000_000)) if $until > time();

open(my $sfh, '>', "$dir/stop") or die;
close $sfh;
my $load_rc;
wait_until(sub { my $r = waitpid($load_pid, WNOHANG); $load_rc = $? if $r == $load_pid; $r != 0 }, 120, 0.2);
if (!defined $load_rc)
{
	kill 'TERM', $load_pid;
	waitpid($load_pid, 0);
}
$load_pid = undef;
my $load_out = slurp("$dir/load.out");
my ($lj) = $load_out =~ /^QUEUE-LOAD (\{.*\})\s*$/m;
my $load = defined $lj ? decode_json($lj) : undef;
ok(defined $load, 'the load stopped and reported') or diag $load_out . slurp("$dir/load.err");
$load //= { hung => ['?'], client_deaths => ['?'], statement_timeouts => -1, outcomes => {} };
note "load: " . encode_json($load);
is_deeply($load->{hung}, [], 'no client hung');
is_deeply($load->{client_deaths}, [], 'no client died of an unexpected exception')
  or diag slurp("$dir/load.out");
is($load->{statement_timeouts}, 0, 'no statement ran into the 60 s statement_timeout');

#
# Every fault happened
#
foreach my $k (qw(zk_kill worker_kill expiry immediate promote))
{
	cmp_ok($injected{$k} // 0, '>=', 1, "fault $k injected " . ($injected{$k} // 0) . ' time(s)');
}

# the faults found work for the resolution: claims or transaction nodes of
# a stopped cluster in ZooKeeper (A stopped, B before the promotion)
cmp_ok($in_doubt_total, '>=', 1,
	"the stopped clusters left claims or transaction nodes for the resolution ($in_doubt_total)");

#
# Resolution, drain, resolution again
#
sub zk_left
{
	my %n;
	foreach my $p ("$Q/entries", "$Q/taken")
	{
		my $c = eval { zk_count($zk, $p) };
		$n{$p} = $c // "error: $@";
	}
	# published nodes kept against a late create are not left behind
	my $c = eval { scalar zk_txns_pending($zk, $TXNS) };
	$n{$TXNS} = $c // "error: $@";
	return \%n;
}

sub wait_resolved
{
	my ($what, $secs) = @_;
	my $left;
	my $ok = wait_until(
		sub {
			$left = zk_left();
			return $left->{"$Q/taken"} eq '0' && $left->{$TXNS} eq '0';
		},
		$secs, 0.5);
	ok($ok, "$what: the workers resolved every claim and transaction node (taken/ and txns/ empty)")
	  or diag "left: " . encode_json($left) . "\n" . zk_tree($zk, "$Q/taken") . "\n" . zk_tree($zk, $TXNS)
	  . "\n" . join("\n", map { "$_: " . (zk_get($zk, "$Q/taken/$_") // '?') } zk_children($zk, "$Q/taken"));
	return $ok;
}

wait_resolved('after the load', 90);

my ($drc, $dout, $derr) = py([ $RUN, 'drain', '--dir', $dir, '--host', $host, '--port', $A->port,
	'--label', 'A' ], 300);
my ($dj) = $dout =~ /^QUEUE-DRAIN (\{.*\})\s*$/m;
my $drain = defined $dj ? decode_json($dj) : {};
ok($drc == 0 && $drain->{done}, "the final consumer drained the queue: " . ($dj // 'no report'))
  or diag "$dout\n$derr";

wait_resolved('after the drain', 60);
my $left = zk_left();
is($left->{"$Q/entries"}, 0, 'no entry left under /zklock/queues/eo/entries (ZooKeeper)')
  or diag zk_tree($zk, "$Q/entries");
is($left->{"$Q/taken"}, 0, 'no claim left under /zklock/queues/eo/taken (ZooKeeper)');
is($left->{$TXNS}, 0, 'no transaction node left under /zklock/txns (ZooKeeper)');
foreach my $n ($A, $B2)
{
	my $v;
	ok(wait_until(sub { $v = zk_status_value($n, 'entries_used'); $v eq '0' }, 30),
		node_label($n) . ": zk_status().entries_used back to 0 ($v)");
}

#
# The verdict
#
my ($crc, $cout, $cerr) = py([ $RUN, 'check', '--dir', $dir, '--host', $host,
	'--tables', 'A:' . $A->port . ',B2:' . $B2->port ], 300);
my ($cj) = $cout =~ /^QUEUE-CHECK (\{.*\})\s*$/m;
my $fig = defined $cj ? decode_json($cj) : undef;
ok(defined $fig, 'the checker ran') or diag "$cout\n$cerr";
$fig //= {};
sub fv { my ($k) = @_; return $fig->{$k} // '?'; }
my ($sum) = $cout =~ /^(produced \d+.*)$/m;
diag "exactly-once figures: " . ($sum // '?');
note $cout;
is($fig->{lost}, 0, "lost: produced ids never consumed (" . fv('lost') . ')') or diag $cout;
is($fig->{duplicated}, 0, "duplicated: ids consumed by more than one committed transaction (" . fv('duplicated') . ')');
is($fig->{msg_id_dups}, 0, 'no msg_id consumed twice');
is($fig->{conflicts}, 0, 'no id with two msg_ids, no msg_id with two ids');
is($fig->{phantom}, 0, "phantom: consumed ids never produced (" . fv('phantom') . ')');
is($fig->{acked_producer_missing}, 0, 'every acknowledged enqueue COMMIT is in produced (on A, or on B2 for B)');
is($fig->{acked_consumer_missing}, 0, 'every acknowledged dequeue COMMIT is in consumed (on A, or on B2 for B)');
is($fig->{aborted_producer_present}, 0, 'no rolled-back or refused enqueue is in produced');
is($fig->{attempts_undercount}, 0, 'no hand-out showed fewer attempts than the hand-outs of its item the clients saw');
is($fig->{attempts_not_increasing}, 0, "every item's attempts grew from one hand-out to the next");
foreach my $k (qw(attempts_over_max poison_consumed poison_not_dead_lettered dead_letter_dups
	dead_letter_msg_id_dups dead_letter_and_consumed dead_letter_phantom dead_letter_bad_origin
	dead_letter_bad_attempts dead_letter_mismatch ordinary_dead_lettered_unexplained))
{
	is($fig->{$k}, 0, "dead-letter policy: $k (" . fv($k) . ')');
}
is($fig->{delayed_early}, 0, 'no delayed item handed out before its due time (less 0.5 s): '
	  . fv('delayed_produced') . ' delayed, ' . fv('delayed_consumed') . ' consumed, earliest hand-out '
	  . fv('delayed_margin_min') . ' s after due');
is($fig->{hold_early}, 0, 'no item held by zk_retry_later handed out again before the hold ended (less 0.5 s): '
	  . fv('retried') . ' holds, ' . fv('retried_handed_out_again') . ' handed out again, earliest '
	  . fv('hold_margin_min') . ' s after the end; early after a fault ' . fv('hold_early_after_fault'));
foreach my $k (qw(move_over_max move_overlap move_unexplained move_overcount))
{
	is($fig->{$k}, 0, "zk_queue_move: $k (" . fv($k) . ')');
}
cmp_ok($fig->{moves} // 0, '>=', 5,
	'moves: ' . fv('moves') . ' (failed ' . fv('moves_failed') . '), moved ' . encode_json($fig->{moved} // {})
	  . ', consumed from eo.side ' . fv('consumed_from_side') . ', ids dead-lettered again '
	  . fv('ids_dead_lettered_again'));
is($fig->{group_order}, 0, "message groups: committed consumes in each group's order: "
	  . fv('grouped_consumed') . ' of ' . fv('grouped_produced') . ' grouped items consumed, in ' . fv('groups')
	  . ' groups, ' . fv('grouped_dead_lettered') . ' dead-lettered');
is($fig->{group_ahead}, 0, 'message groups: no item handed out while an earlier item of its group was still there'
	  . ' (behind a deferred publication: '
	  . (($fig->{group_order_deferred} // 0) + ($fig->{group_ahead_deferred} // 0)) . ')');
is($fig->{group_overlap}, 0, 'message groups: never two hand-outs of one group at once (' . fv('group_handouts')
	  . ' hand-outs, closest ' . fv('group_gap_min') . ' s apart)');
cmp_ok($fig->{grouped_consumed} // 0, '>=', 1, 'grouped items consumed: ' . fv('grouped_consumed'));
cmp_ok($fig->{group_handed_out_again} // 0, '>=', 1,
	'grouped items handed out again (rolled back, held or poison): ' . fv('group_handed_out_again'));
cmp_ok($fig->{delayed_consumed} // 0, '>=', 1, 'delayed items consumed: ' . fv('delayed_consumed'));
cmp_ok($fig->{retried_handed_out_again} // 0, '>=', 1,
	'held items handed out again: ' . fv('retried_handed_out_again'));
cmp_ok($fig->{dead_letters} // 0, '>=', 1,
	'poison items dead-lettered: ' . fv('dead_letters') . ' of ' . fv('poison_produced') . ' (hand-outs '
	  . fv('poison_handouts') . ', ordinary items dead-lettered by faults ' . fv('ordinary_dead_lettered') . ')');
cmp_ok($fig->{handed_out_again} // 0, '>=', 1,
	'items handed out again after a rollback: ' . fv('handed_out_again') . ' (attempts up to ' . fv('attempts_max') . ')');
is($crc, 0, "the checker's verdict: " . ($fig->{verdict} // '?'));

# the run had substance
my $min = $SECONDS >= 30 ? 200 : 20;
cmp_ok($fig->{produced} // 0, '>=', $min, "items produced (" . fv('produced') . ", at least $min)");
foreach my $l (qw(A B B2))
{
	cmp_ok($fig->{produced_by}{$l} // 0, '>=', 1, "items produced on $l: " . ($fig->{produced_by}{$l} // 0));
	cmp_ok($fig->{consumed_by}{$l} // 0, '>=', 1, "items consumed on $l: " . ($fig->{consumed_by}{$l} // 0));
}
cmp_ok($fig->{attempts}{prod_rolled_back} // 0, '>=', 5, 'producers rolled back');
cmp_ok($fig->{savepoint_ids} // 0, '>=', 5, 'producers rolled back savepoints with an enqueue');
cmp_ok($fig->{consumer_rollbacks_with_items} // 0, '>=', 5, 'consumers rolled back claimed items');
cmp_ok($fig->{redelivered} // 0, '>=', 5, 'items of rolled-back claims were consumed later');
note 'consumed by the final drain: ' . ($fig->{consumed_by_drain} // '?')
  . '; producer COMMITs of unknown fate: ' . ($fig->{unknown_producer_ids} // '?') . ' ids, '
  . ($fig->{unknown_producer_ids_committed} // '?') . ' of them committed';

# the checker can fail
my ($mrc, $mout, $merr) = py([ $RUN, 'check', '--dir', $dir, '--host', $host, '--mutate',
	'--tables', 'A:' . $A->port . ',B2:' . $B2->port ], 300);
my ($mj) = $mout =~ /^QUEUE-CHECK (\{.*\})\s*$/m;
my $mfig = defined $mj ? decode_json($mj) : {};
ok($mrc == 1 && ($mfig->{lost} // 0) >= 1 && ($mfig->{duplicated} // 0) >= 1 && ($mfig->{phantom} // 0) >= 1
	  && ($mfig->{msg_id_dups} // 0) >= 1 && ($mfig->{attempts_undercount} // 0) >= 1
	  && ($mfig->{dead_letter_bad_attempts} // 0) >= 1 && ($mfig->{dead_letter_dups} // 0) >= 1
	  && ($mfig->{delayed_early} // 0) >= 1 && ($mfig->{hold_early} // 0) >= 1
	  && ($mfig->{move_unexplained} // 0) >= 1 && ($mfig->{move_over_max} // 0) >= 1
	  && ($mfig->{group_order} // 0) >= 1 && ($mfig->{group_ahead} // 0) >= 1 && ($mfig->{group_overlap} // 0) >= 1,
	'on mutated data the checker reports a lost, a duplicated and a phantom item, a lost delivery count, '
	  . 'a dead letter with a wrong origin_attempts and one twice, a delayed item handed out early, '
	  . 'a held item handed out again early, a second trip through eo.dlq without a move, '
	  . 'a move beyond its max_items, a message group consumed out of order, an item handed out '
	  . 'ahead of its group and two hand-outs of one group at once, and fails')
  or diag "$mout\n$merr";

#
# No server crashed on its own
#
foreach my $n ($A, $B, $B2)
{
	my $log = slurp($n->logfile);
	my @bad = grep { /PANIC:|TRAP:|terminated by signal (?!9\b)\d+/ } split /\n/, $log;
	my @settled = $log =~ /zklock: (settled \d+ queue claims and transactions)/g;
	note node_label($n) . ': ' . (@settled ? join('; ', @settled) : 'no settlement logged');
	is(scalar(@bad), 0, node_label($n) . ': no PANIC, assertion failure or crash in the server log')
	  or diag join("\n", @bad[ 0 .. ($#bad < 20 ? $#bad : 19) ]);
}

$A->stop;
$B2->stop;
done_testing();

sub slurp
{
	my ($f) = @_;
	open(my $fh, '<', $f) or return '';
	local $/;
	my $s = <$fh>;
	close $fh;
	return $s // '';
}

sub py
{
	my ($args, $timeout) = @_;
	my ($out, $err) = ('', '');
	my $ok = eval {
		IPC::Run::run([ $ZkLockTest::PYTHON, @$args ], '<', \undef, '>', \$out, '2>', \$err,
			IPC::Run::timeout($timeout));
		1;
	};
	$err .= "\n[harness: $@]" unless $ok;
	return ($ok ? ($? >> 8) : -1, $out, $err);
}
