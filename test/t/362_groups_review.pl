
# 362_groups_review.pl - message groups (zk_enqueue_grouped) attacked, a
# review of their first version.
#
# Two clusters and kazoo on one ZooKeeper root: a group's items come out
# in publication order and never two at once (an open claim on B keeps A
# from the group's next item; a ROLLBACK leaves it at the head), other
# groups go on meanwhile.  Group keys with odd bytes are kept apart.
# Another client's garbage in the state nodes of some groups stops those
# groups only: a group listed after ten of them is still served (it was
# not: every listing started the first eight again, going round and round
# with requests to ZooKeeper).  A session that ends while the cluster
# serves no queue forgets the group items it watched (it did not: the
# group was skipped for good in the next session, waiting for a watch
# that had gone with the old one).  Many groups are all served, each in
# order.  zk_queues counts a group's state node as a delayed item (TODO).
# Kazoo takes a promoted item; the worker killed and ZooKeeper restarted
# mid-chain lose and duplicate nothing.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use ZkLockTest;

my $zk = zk_start();
my %opts = (session_timeout => '10s', connect_timeout => '3s');
my $A = zk_node('grev_a', $zk, %opts);
my $B = zk_node('grev_b', $zk, %opts);

sub state_of
{
	my ($node, $sql) = @_;
	my ($rc, $out, $err) = $node->psql('postgres', $sql,
		extra_params => [ '-v', 'VERBOSITY=verbose' ], on_error_stop => 1);
	return $err =~ /ERROR:\s+([0-9A-Z]{5}):/ ? $1 : ($rc == 0 ? '00000' : "rc$rc");
}

# requests ZooKeeper received so far (mntr)
sub packets
{
	my $m = zk_fourlw($zk, 'mntr');
	return $m =~ /^zk_packets_received\s+(\d+)/m ? $1 : die "no mntr: $m";
}

# every item $node gets from queue $q, one zk_dequeue (waiting $secs) per
# transaction, in the order handed out
sub drain_in_order
{
	my ($node, $q, $secs) = @_;
	my @got;
	while (1)
	{
		my $r = $node->safe_psql('postgres', "SELECT body FROM zk_dequeue('$q', '${secs}s')");
		last if $r eq '';
		push @got, $r;
	}
	return @got;
}

# ---- order within a group, never two at once, across two clusters
my $Q = '/zklock/queues/gq';
$A->safe_psql('postgres', q{
	BEGIN;
	SELECT zk_enqueue_grouped('gq', 'g1', 'g1-a');
	SELECT zk_enqueue_grouped('gq', 'g2', 'g2-a');
	SELECT zk_enqueue_grouped('gq', 'g1', ARRAY['g1-b', 'g1-c']);
	COMMIT;});
$B->safe_psql('postgres', "SELECT zk_enqueue_grouped('gq', 'g1', 'g1-d', 1)");
my $bs = $B->background_psql('postgres', on_error_stop => 0);
$bs->query_safe('BEGIN');
my $first = $bs->query_safe("SELECT body FROM zk_dequeue('gq', '20s')");
like($first, qr/^g[12]-a$/, "B takes the head of a group ($first)");
my $other = $first eq 'g1-a' ? 'g2-a' : 'g1-a';
is($A->safe_psql('postgres', "SELECT string_agg(body, ',') FROM zk_dequeue('gq', '10s', 10)"),
	$other, 'A gets the other group\'s head only, while B holds one');
# A holds nothing; B's item of its group still claimed: nothing more of it
is($A->safe_psql('postgres', "SELECT count(*) FROM zk_dequeue('gq', '2s', 10)"), '0',
	'nothing else is handed out while both heads are claimed') if $other ne 'g1-a';
$bs->query_safe('ROLLBACK');
$bs->quit;
my @rest = drain_in_order($A, 'gq', 5);
is(join(',', grep { /^g1/ } ($first eq 'g1-a' ? () : ('g1-a')), @rest),
	'g1-a,g1-b,g1-c,g1-d', 'g1 in publication order (priority does not reorder a group)');
is(scalar(@rest), $first eq 'g1-a' ? 4 : 3, 'each item once, the rolled back head again');
ok(scalar(zk_wait_count($zk, "$Q/entries", 0, 30)), 'nothing left in entries');
ok(scalar(zk_wait_count($zk, "$Q/delayed", 0, 30)), 'nor under delayed (state nodes cleaned)');

# ---- odd group keys are kept apart, each in order
my @keys = ('.', '..', '%', '%25', '~', 'a~b', '/', 'a/b', "\xc3\xa9t\xc3\xa9", 'x' x 64, "\xe2\x82\xac" x 21);
my $sql = "BEGIN;\n";
for my $round (1 .. 2)
{
	for my $i (0 .. $#keys)
	{
		(my $k = $keys[$i]) =~ s/'/''/g;
		$sql .= "SELECT zk_enqueue_grouped('gk', '$k', 'k$i-$round');\n";
	}
}
$sql .= "COMMIT;\n";
$A->safe_psql('postgres', $sql);
my @got = drain_in_order($B, 'gk', 5);
is(scalar(@got), 2 * @keys, 'every item of the odd keys once');
my $inorder = 1;
my %seen;
for my $g (@got)
{
	my ($i, $r) = $g =~ /^k(\d+)-(\d)$/;
	$inorder = 0 if $r == 2 && !$seen{$i};
	$inorder = 0 if $seen{"$i-$r"}++;
	$seen{$i} = 1;
}
ok($inorder, 'each odd key in order: ' . join(',', @got));
is(state_of($A, "SELECT zk_enqueue_grouped('gk', '', 'x')"), '22023', 'an empty key: 22023');
is(state_of($A, "SELECT zk_enqueue_grouped('gk', repeat('x', 65), 'x')"), '22023', 'a key of 65 bytes: 22023');

# ---- another client's garbage in some groups' state nodes stops only them
my $GQ = '/zklock/queues/gg';
$A->safe_psql('postgres', "SELECT zk_enqueue('gg', 'plain')");
is($A->safe_psql('postgres', "SELECT body FROM zk_dequeue('gg', '10s')"), 'plain', 'gg exists');
zkq_or_die($zk, 'create', "$GQ/delayed/gst-a$_", 'garbage') for 0 .. 9;
$B->safe_psql('postgres', "SELECT zk_enqueue_grouped('gg', 'zz', ARRAY['z1', 'z2'])");
my $t0 = time;
is($A->safe_psql('postgres', "SELECT body FROM zk_dequeue('gg', '20s')"), 'z1',
	'a group listed after ten foreign state nodes is served');
ok(time - $t0 < 10, sprintf('soon (%.1f s)', time - $t0));
is($A->safe_psql('postgres', "SELECT body FROM zk_dequeue('gg', '20s')"), 'z2', 'in order');
ok($A->log_contains(qr/state node of group "a\d" of queue "gg" is not zklock's/),
	'the foreign state nodes are said in a WARNING');
# and the worker does not go round and round their nodes meanwhile
my $p0 = packets();
is($A->safe_psql('postgres', "SELECT count(*) FROM zk_dequeue('gg', '4s')"), '0', 'nothing more');
my $spent = packets() - $p0;
ok($spent < 400, "a consumer waiting 4 s costs ZooKeeper few requests ($spent)");
zkq_or_die($zk, 'delete', "$GQ/delayed/gst-a$_") for 0 .. 9;

# ---- the session ends while no queue is served: the watches of the groups'
# items in flight went with it, so what the worker remembers of them too
my $C = zk_node('grev_c', $zk, session_timeout => '3s', connect_timeout => '3s');
$C->safe_psql('postgres', "SELECT zk_enqueue_grouped('sq', 's', ARRAY['s1', 's2'])");
# tries only (no watch of the queue's): the second one reads the group's
# state and watches s1 in flight
for my $n (1 .. 2)
{
	my $b = '';
	wait_until(sub {
		$b = $C->safe_psql('postgres', "BEGIN; SELECT body FROM zk_try_dequeue('sq'); ROLLBACK;");
		return $b ne '';
	}, 15, 0.2);
	is($b, 's1', "try $n: s1, rolled back");
}
sleep 25;    # two sweeps: the queue, unused, is forgotten
my $sid0 = zk_status_value($C, 'session_id');
my $cpid = worker_pid($C);
kill 'STOP', $cpid;
sleep 7;     # twice the session timeout: ZooKeeper expires the session
kill 'CONT', $cpid;
my $st = wait_for_state($C,
	sub { $_[0]->{state} eq 'connected' && $_[0]->{session_id} ne $sid0 }, 30);
ok($st->{session_id} ne $sid0, 'C has a new session');
is($C->safe_psql('postgres', "SELECT body FROM zk_dequeue('sq', '10s')"), 's1', 's1 consumed in the new session');
is($C->safe_psql('postgres', "SELECT body FROM zk_dequeue('sq', '15s')"), 's2',
	'then s2: the group moves on');
ok(scalar(zk_wait_count($zk, '/zklock/queues/sq/delayed', 0, 30)), 'nothing left of the group');

# ---- many groups: each in order, all of them served, every item once
my $NG = 500;
$B->safe_psql('postgres', qq{
	SELECT zk_enqueue_grouped('mq', 'm' || i, ARRAY['m' || i || '-1', 'm' || i || '-2'])
	  FROM generate_series(1, $NG) i});
# A and B take turns (both workers move the groups on, racing on each
# state node); a group's second item never in the same turn as its first
my $t1 = time;
my (%call, @all);
my $turn = 0;
while (time - $t1 < 120)
{
	my $node = $turn % 2 ? $B : $A;
	my $r = $node->safe_psql('postgres', "SELECT string_agg(body, ',') FROM zk_dequeue('mq', '5s', 100)");
	last if $r eq '';
	$turn++;
	for my $b (split /,/, $r)
	{
		push @all, $b;
		$call{$b} = $turn;
	}
}
my $ok = @all == 2 * $NG;
my %n;
for my $b (@all)
{
	$n{$b}++;
	my ($g, $k) = $b =~ /^m(\d+)-(\d)$/;
	$ok = 0 if $k == 2 && !(defined $call{"m$g-1"} && $call{"m$g-1"} < $call{$b});
}
$ok = 0 if grep { $_ != 1 } values %n;
ok($ok, sprintf('%d groups of two: %d items in %d turns, each once, each group in order (%.1f s)',
	$NG, scalar(@all), $turn, time - $t1));
ok(scalar(zk_wait_count($zk, '/zklock/queues/mq/delayed', 0, 30)), 'no state node left');

# ---- what zk_queues counts as delayed: a group's state node is no item
# (nor, through the same child count of delayed, an item of the
# namespace's zklock.max_namespace_items)
$A->safe_psql('postgres', "SELECT zk_enqueue_grouped('mt', 't', ARRAY['t1', 't2'])");
my $ms = $B->background_psql('postgres', on_error_stop => 0);
$ms->query_safe('BEGIN');
is($ms->query_safe("SELECT body FROM zk_dequeue('mt', '20s')"), 't1', 'B holds t1 of the group');
ok(scalar(zk_wait_count($zk, '/zklock/queues/mt/delayed', 2, 30)), 'under delayed: t2 and the state node');
TODO:
{
	local $TODO = 'a group\'s state node sits under delayed, whose child count zk_queues and the namespace quota take for items';
	is($A->safe_psql('postgres', "SELECT items || '/' || claimed || '/' || delayed FROM zk_queues WHERE queue = 'mt'"),
		'0/1/1', 'zk_queues: one claimed, one waiting');
}
$ms->query_safe('COMMIT');
$ms->quit;
is($A->safe_psql('postgres', "SELECT body FROM zk_dequeue('mt', '20s')"), 't2', 'then t2');

# ---- zk_retry_later on a group's item: it stays the group's, held; the
# next waits for it
$A->safe_psql('postgres', "SELECT zk_enqueue_grouped('rq', 'r', ARRAY['r1', 'r2'])");
my $held = $B->safe_psql('postgres', q{
	BEGIN;
	CREATE TEMP TABLE g ON COMMIT DROP AS SELECT * FROM zk_dequeue('rq', '20s');
	SELECT zk_retry_later(msg_id, '4 seconds') FROM g;
	SELECT body FROM g;
	ROLLBACK;});
like($held, qr/r1$/, 'r1 taken and held for 4 s');
is($A->safe_psql('postgres', "SELECT count(*) FROM zk_dequeue('rq', '2s')"), '0',
	'neither r1 nor r2 meanwhile');
is(join(',', drain_in_order($A, 'rq', 10)), 'r1,r2', 'then r1 again, then r2');

# ---- kazoo takes a group's item; the worker killed, ZooKeeper restarted
my $KQ = '/zklock/queues/kq';
$A->safe_psql('postgres', "SELECT zk_enqueue_grouped('kq', 'w', ARRAY['x1', 'x2', 'x3', 'x4'])");
my $kz = queue_kazoo($zk);
my $ks = $B->background_psql('postgres', on_error_stop => 0);
$ks->query_safe('BEGIN');
is($ks->query_safe("SELECT body FROM zk_dequeue('kq', '20s')"), 'x1', 'B takes x1');
is($kz->cmd("get $KQ 2"), 'none', 'kazoo gets nothing of the group meanwhile');
$ks->query_safe('ROLLBACK');
is($kz->cmd("get $KQ 10"), 'item ' . unpack('H*', 'x1'), 'rolled back: kazoo takes x1');
is($ks->query_safe("SELECT count(*) FROM zk_try_dequeue('kq')"), '0', 'B gets nothing while kazoo holds x1');
my $wold = worker_pid($B);
$B->safe_psql('postgres', "SELECT pg_terminate_backend($wold)");
ok(defined wait_for_worker($B, $wold, 30), 'B\'s worker killed and back');
is($kz->cmd("consume $KQ"), 'true', 'kazoo consumes x1');
is($ks->query_safe("SELECT body FROM zk_dequeue('kq', '20s')"), 'x2', 'B\'s new worker hands out x2');
$ks->quit;
zk_stop($zk);    # the promotion of x3 may be in flight: its answer lost
sleep 2;
zk_restart($zk);
foreach my $n ($A, $B)
{
	my $st = wait_for_state($n, 'connected', 60);
	die 'not connected again after the restart' unless $st && $st->{state} eq 'connected';
}
is(join(',', drain_in_order($A, 'kq', 10)), 'x3,x4', 'after ZooKeeper restarted: x3, x4, each once');
ok(scalar(zk_wait_count($zk, "$KQ/entries", 0, 30)) && scalar(zk_wait_count($zk, "$KQ/delayed", 0, 30)),
	'nothing left of kq');
$kz->quit;

done_testing();
