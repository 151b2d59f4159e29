
# 900_faults.pl - the randomized fault run (test/faults/run.py), Jepsen-style.
#
# A three-server ZooKeeper ensemble and two PostgreSQL clusters; clients on
# both contend for three names with short critical sections recorded in a
# history table, while a nemesis kills the ZooKeeper leader and followers,
# freezes servers, freezes the zklock worker past the session timeout (also
# while a client is inside a long critical section, so the COMMIT refusal
# runs), kills, terminates and cancels the worker, and cancels and terminates
# client backends.  After a quiet period without faults the checker proves:
# no two committed critical sections of one name overlap (unless both
# shared), tokens never go backwards, no node is left in ZooKeeper, no watch
# is left on any server, no shared-memory entry is left, every client made
# progress (every client and every name) once the faults stopped, no statement
# hung, zk_lock calls with a timeout and cancels end in bounded time, never
# more than 3 leases held by committed spans under a semaphore of 3 (some
# clients take 2 permits at once), no
# process crashed and a cancel never stopped the worker (server logs), and the
# expiry path ran (a refused COMMIT or a lost-lock error).  The nemesis also
# freezes two servers at once (no quorum) and reloads a rotated zklock.hosts.
# Beside the lock clients, a queue load (test/faults/queue_run.py: a producer
# and a consumer on each cluster, committing or rolling back at random)
# rides out the same faults; afterwards the queue is drained and checked:
# no item lost, none consumed twice, none of a rolled-back enqueue
# consumed, no claim, entry or transaction node left in ZooKeeper.  The queue
# has a dead-letter policy (3 hand-outs, then eo.dlq) and poison items that
# every consumer rolls back: each must be dead-lettered exactly once, with
# its origin, msg_id there and 3 hand-outs, never consumed from the queue.
# Some items are in message groups (zk_enqueue_grouped): consumed in their
# group's order, one hand-out of a group at a time.
# Campaign clients on both clusters (test/faults/campaign_client.py) stand
# for leader of one name (zk_campaign, zk_try_campaign, zk_session_campaign
# and zk_resign) and record each leadership in the transaction that leads:
# no two committed leaderships overlap, their fencing tokens grow, both
# clusters lead again after the faults.  Counter clients on both clusters
# (test/faults/counter_client.py) add 1 to one counter: no value handed out
# twice, and the final value lies between the acknowledged adds and the
# acknowledged plus the failed (unknown) ones.
#
# A short control run, in which the clients do not take the lock, the
# semaphore clients not the semaphore, the campaign clients do not campaign
# and the counter clients read and then set the counter, must be failed by
# the same checker with overlaps, too many leases, two leaders at once and
# counter values handed out twice or adds lost: the checker can fail.
#
# ZKLOCK_FAULT_SECONDS sets the seconds of faults (default 60; a quiet period
# of 20 s follows).
#
# zklock-tap: serial (tools/test.sh runs it alone: it loads the machine or
# times faults against the session timeout)

use strict;
use warnings FATAL => 'all';

use IPC::Run;
use JSON::PP;
use PostgreSQL::Test::Utils;
use Test::More;
use ZkLockTest;

my $RUN = "$ZkLockTest::SRC/test/faults/run.py";
my $SECONDS = $ENV{ZKLOCK_FAULT_SECONDS} // 60;
my $QUIET = 20;

# The clients are Python with psycopg2 (tools/deps.sh installs it): without
# it the run cannot happen, and that is a failure, not a skip.
my ($rc0, $out0, $err0) = run_py([ '-c', 'import psycopg2, kazoo' ], 60);
is($rc0, 0, "$ZkLockTest::PYTHON has psycopg2 and kazoo") or do {
	diag $err0;
	done_testing();
	exit;
};

# Run one fault run; returns (exit code, figures hash or undef, output)
sub fault_run
{
	my ($name, @args) = @_;
	my $dir = "$PostgreSQL::Test::Utils::tmp_check/faults_$name";
	my ($rc, $out, $err) = run_py([ $RUN, '--dir', $dir, @args ], 600);
	my ($json) = $out =~ /^FAULTRUN-FIGURES (\{.*\})\s*$/m;
	my $fig = defined $json ? decode_json($json) : undef;
	return ($rc, $fig, $out . ($err ne '' ? "\nstderr:\n$err" : ''));
}

sub run_py
{
	my ($args, $timeout) = @_;
	my ($out, $err) = ('', '');
	my $ok = eval {
		IPC::Run::run([ $ZkLockTest::PYTHON, @$args ],
			'<', \undef, '>', \$out, '2>', \$err,
			IPC::Run::timeout($timeout));
		1;
	};
	$err .= "\n[harness: $@]" unless $ok;
	return ($ok ? ($? >> 8) : -1, $out, $err);
}

#
# The real run
#
my ($rc, $fig, $out) = fault_run('locked', '--seconds', $SECONDS, '--quiet', $QUIET);
note $out;
ok(defined $fig, 'the fault run completed and printed its figures') or do {
	diag $out;
	done_testing();
	exit;
};

is($fig->{overlaps}, 0, 'no overlapping critical sections of one name');
is($fig->{inversions}, 0, 'no token inversions');
is($fig->{token_mismatch}, 0, 'zk_lock_token at the end of a section is the token zk_lock gave');
is($fig->{orphans}, 0, 'no contender node left in ZooKeeper after the quiet period');
is($fig->{watches}, 0, 'no watch left on any ZooKeeper server (wchs/wchc)');
is_deeply($fig->{entries_left}, { A => 0, B => 0 },
	'no shared-memory entry left on either cluster (zk_status().entries_used)');
foreach my $c (sort keys %{ $fig->{progress} })
{
	cmp_ok($fig->{progress}{$c}, '>=', $fig->{progress_min},
		"client $c committed at least $fig->{progress_min} sections in the ${QUIET}s after the faults");
}
foreach my $n (sort keys %{ $fig->{progress_names} })
{
	cmp_ok($fig->{progress_names}{$n}, '>=', $fig->{progress_min},
		"name $n: at least $fig->{progress_min} sections committed in the ${QUIET}s after the faults");
}
is($fig->{hangs}, 0, 'no statement ran into statement_timeout, every client stopped');
is($fig->{slow_lock_calls}, 0,
	"every zk_lock with a timeout ended within timeout + connect_timeout + 2 s (max $fig->{lock_call_max_s} s)");
is($fig->{slow_cancels}, 0,
	"every pg_cancel_backend of a client ended its statement within 2 s (max $fig->{cancel_latency_max_s} s)");
is($fig->{worker_cancel_killed_worker}, 0, 'pg_cancel_backend never stopped a worker');
is($fig->{unexpected_worker_exits}, 0, 'no worker exited unless terminated (server logs)');
is($fig->{crashes}, 0, 'no process ended by a signal the nemesis did not send, no PANIC (server logs)');
is_deeply($fig->{heal_problems}, [], 'every fault was healed');
cmp_ok($fig->{expiry_path}, '>=', 1,
	'the expiry path ran: a COMMIT refused or a lost-lock error (40001) '
	  . encode_json({ refused => $fig->{refused_commits}, lost => $fig->{lost_lock_errors} }));
cmp_ok($fig->{committed}, '>=', 100, "critical sections committed: $fig->{committed}");
is($fig->{sem_over_max}, 0,
	"never more than 3 leases held by committed spans under semaphore fault-sem at once (max seen $fig->{sem_max_concurrent})");
cmp_ok($fig->{sem_spans}, '>=', 20, "semaphore spans committed: $fig->{sem_spans}");
cmp_ok($fig->{sem_quiet_spans}, '>=', 1, "semaphore spans committed after the faults: $fig->{sem_quiet_spans}");
is($fig->{sem_hangs}, 0, 'no semaphore statement ran into statement_timeout');
# campaigns (campaign_client.py): at most one leader of fault-camp at a time
is($fig->{camp_overlaps}, 0, 'no two committed leaderships of campaign fault-camp overlap ('
	  . ($fig->{camp_spans} // '?') . ' spans)');
is($fig->{camp_token_inversions}, 0, 'the fencing tokens of committed leaderships grow with their starts');
cmp_ok($fig->{camp_spans} // 0, '>=', 20, 'campaign spans committed: ' . ($fig->{camp_spans} // 0));
foreach my $c (sort keys %{ $fig->{camp_quiet_spans} // {} })
{
	cmp_ok($fig->{camp_quiet_spans}{$c}, '>=', 1,
		"cluster $c led campaign fault-camp after the faults: $fig->{camp_quiet_spans}{$c} spans");
}
is($fig->{camp_hangs}, 0, 'no campaign statement ran into statement_timeout');
is($fig->{camp_slow_calls}, 0,
	'every zk_campaign with a timeout ended within timeout + connect_timeout + 2 s (max '
	  . ($fig->{camp_call_max_s} // '?') . ' s)');
# the counter (counter_client.py): no value twice, no add lost or counted twice
is($fig->{ctr_duplicates}, 0, 'no two acknowledged counter adds got the same value ('
	  . ($fig->{ctr_acked} // '?') . ' acknowledged, ' . ($fig->{ctr_unknown} // '?') . ' unknown)');
is($fig->{ctr_lost}, 0, 'the final counter value is at least the acknowledged adds: '
	  . encode_json($fig->{ctr_final} // {}));
is($fig->{ctr_extra}, 0, 'the final counter value is at most the acknowledged plus the unknown adds');
cmp_ok($fig->{ctr_acked} // 0, '>=', 20, 'counter adds acknowledged: ' . ($fig->{ctr_acked} // 0));
is($fig->{ctr_hangs}, 0, 'no counter statement ran into statement_timeout');
# the queue load beside the locks (queue_run.py): every item enqueued by a
# committed transaction consumed by exactly one committed transaction
is($fig->{queue_lost}, 0, 'queue: no item of a committed enqueue lost');
is($fig->{queue_duplicated}, 0, 'queue: no item consumed by two committed transactions');
is($fig->{queue_msg_id_dups}, 0, 'queue: no msg_id consumed twice');
is($fig->{queue_phantom}, 0, 'queue: no item of a rolled-back enqueue consumed');
is($fig->{queue_acked_producer_missing}, 0, 'queue: every acknowledged enqueue COMMIT is in produced');
is($fig->{queue_acked_consumer_missing}, 0, 'queue: every acknowledged dequeue COMMIT is in consumed');
is($fig->{queue_attempts_undercount}, 0,
	'queue: no hand-out showed fewer attempts than the hand-outs of that item the clients saw');
is($fig->{queue_attempts_not_increasing}, 0, 'queue: every item\'s attempts grew from one hand-out to the next');
# the queue's dead-letter policy (poison items, queue_run.py)
foreach my $k (qw(attempts_over_max poison_consumed poison_not_dead_lettered dead_letter_dups
	dead_letter_msg_id_dups dead_letter_and_consumed dead_letter_phantom dead_letter_bad_origin
	dead_letter_bad_attempts dead_letter_mismatch ordinary_dead_lettered_unexplained))
{
	is($fig->{"queue_$k"}, 0, "queue: dead-letter policy: $k");
}
cmp_ok($fig->{queue_dead_letters} // 0, '>=', 1,
	'queue: poison items dead-lettered: ' . ($fig->{queue_dead_letters} // 0));
# delayed items and zk_retry_later holds (queue_run.py)
is($fig->{queue_delayed_early}, 0, 'queue: no delayed item handed out before its due time: '
	  . ($fig->{queue_delayed_produced} // '?') . ' delayed');
is($fig->{queue_hold_early}, 0, 'queue: no held item (zk_retry_later) handed out again before the hold ended: '
	  . ($fig->{queue_retried} // '?') . ' holds, early after a fault ' . ($fig->{queue_hold_early_after_fault} // '?'));
# zk_queue_move (queue_run.py's movers and consumer of eo.side)
foreach my $k (qw(move_over_max move_overlap move_unexplained move_overcount))
{
	is($fig->{"queue_$k"}, 0, "queue: zk_queue_move: $k");
}
cmp_ok($fig->{queue_moves} // 0, '>=', 1, 'queue: moves: ' . ($fig->{queue_moves} // 0));
is_deeply($fig->{queue_side_left}, { entries => 0, taken => 0 },
	'queue: after the drain nothing is left in eo.side (counted through ZooKeeper)');
# message groups (zk_enqueue_grouped, queue_run.py): in each group one item at
# a time, in the group's order
is($fig->{queue_group_order}, 0, 'queue: message groups: committed consumes in each group\'s order: '
	  . ($fig->{queue_grouped_consumed} // '?') . ' of ' . ($fig->{queue_grouped_produced} // '?')
	  . ' grouped items consumed, in ' . ($fig->{queue_groups} // '?') . ' groups');
is($fig->{queue_group_ahead}, 0,
	'queue: message groups: no item handed out while an earlier item of its group was still there'
	  . ' (behind a deferred publication: '
	  . (($fig->{queue_group_order_deferred} // 0) + ($fig->{queue_group_ahead_deferred} // 0)) . ')');
is($fig->{queue_group_overlap}, 0, 'queue: message groups: never two hand-outs of one group at once ('
	  . ($fig->{queue_group_handouts} // '?') . ' hand-outs, closest ' . ($fig->{queue_group_gap_min} // '?') . ' s apart)');
cmp_ok($fig->{queue_grouped_consumed} // 0, '>=', 1,
	'queue: grouped items consumed: ' . ($fig->{queue_grouped_consumed} // 0));
is_deeply($fig->{queue_dlq_left}, { entries => 0, taken => 0 },
	'queue: after the drain nothing is left in the dead-letter queue (counted through ZooKeeper)');
is_deeply($fig->{queue_left}, { entries => 0, taken => 0, txns => 0 },
	'queue: after the drain no entry, claim or transaction node is left (counted through ZooKeeper)');
cmp_ok($fig->{queue_produced} // 0, '>=', 20, 'queue: items produced: ' . ($fig->{queue_produced} // 0));
# the nemesis injects every kind once before it draws at random (the
# partitions and copies first among them): in 40 s
# there is time for all of them
if ($SECONDS >= 40)
{
	foreach my $kind (qw(zk_kill_leader zk_kill_follower zk_freeze zk_quorum_loss
		worker_freeze expiry_probe worker_kill worker_terminate worker_cancel
		worker_reload_hosts client_cancel client_terminate))
	{
		cmp_ok($fig->{faults}{$kind} // 0, '>=', 1, "fault $kind injected");
	}
}
is($rc, 0, "the checker's verdict: $fig->{verdict}")
  or diag $out;

#
# The control run: no lock, same workload, same checker
#
my ($crc, $cfig, $cout) = fault_run('control', '--control', '--seconds', 8, '--quiet', 10);
note $cout =~ s/^(?:OVERLAP|  |\.\.\. and).*\n//mgr;
ok(defined $cfig, 'the control run completed and printed its figures') or diag $cout;
cmp_ok($cfig->{overlaps} // 0, '>', 0, 'without the lock the checker finds overlaps: '
	  . ($cfig->{overlaps} // 'none'));
cmp_ok($cfig->{sem_over_max} // 0, '>', 0, 'without the semaphore the checker finds more than 3 leases at once: '
	  . ($cfig->{sem_max_concurrent} // 'none'));
cmp_ok($cfig->{camp_overlaps} // 0, '>', 0, 'without campaigning the checker finds two leaders at once: '
	  . ($cfig->{camp_overlaps} // 'none'));
cmp_ok(($cfig->{ctr_duplicates} // 0) + ($cfig->{ctr_lost} // 0), '>', 0,
	'with a read-then-set the checker finds counter values handed out twice or adds lost: '
	  . ($cfig->{ctr_duplicates} // 'none') . ' twice, ' . ($cfig->{ctr_lost} // 'none') . ' lost');
is($crc, 1, 'and fails the control run');

done_testing();
