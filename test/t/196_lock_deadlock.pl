
# 196_lock_deadlock.pl - deadlocks across servers are detected (issue 39).
#
# A zk lock wait of deadlock_timeout is checked for a cycle of waits through
# zk locks held and awaited by backends of any cluster on the ensemble
# (src/lock/lock_deadlock.c): exactly one member, the youngest waiter, gets
# 40P01 with a detail naming each waiter; the others go on.
#
# 1. Two sessions of one cluster, opposite orders: the second waiter gets
#    40P01, the first is granted once it rolls back; zk_status counts it.
# 2. The same across two clusters.
# 3. A cycle of three across three clusters.
# 4. Shared and exclusive mixed: a reader that waits for a writer's name
#    while the writer waits behind the reader.
# 5. No false positive: a long chain (each waits for the next, the last
#    holds for a while and commits) ends with every wait granted, no 40P01.
# 6. Nothing left: <root>/waits has no record once the waits are over.
# 7. No false cycle through a node with our owner tag that we do not hold
#    (a failed call's node on its way out).
# 8. No false cycle through a node of the other member's owner tag that it
#    does not hold, when it holds nothing (its record's "holds" is empty):
#    found by the fault run (two 40P01s in its control group: a node of the
#    other cluster's earlier session, not expired yet, took for a hold).
# 9. The same when the other member holds too many locks for its record to
#    list them (its "holds" did not fit, so the record takes any node of
#    its owner): a node of its owner tag that another ZooKeeper session
#    made (its worker's earlier session) is no edge.
# 10. A record of the other member's owner tag left by another session (its
#    worker's earlier one; here a node zkq made) is replaced, not rewritten
#    in place: the cycle through that member is still found.
# Before: every case waited until lock_timeout (doc/limits.md said so).

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ZkLockTest;
use Time::HiRes qw(time usleep);

my $zk = zk_start();
my @nodes = map {
	zk_node($_, $zk, session_timeout => '10s', connect_timeout => '5s',
		conf => "deadlock_timeout = '300ms'\n")
} qw(dl1 dl2 dl3);
my $WAITS = '/zklock/waits';

sub sess { return new_session($nodes[ $_[0] ], name => $_[1]); }

sub deadlocks
{
	my $n = 0;
	$n += zk_status_value($_, 'deadlocks') foreach @nodes;
	return $n;
}

# run a cycle: each session takes its first name, then (all at once) waits
# for the next one's; returns the results of the waits, in order
sub cycle
{
	my ($sessions, $names, $modes) = @_;
	my $k = @$sessions;
	for my $i (0 .. $k - 1)
	{
		my $fn = ($modes && $modes->[$i][0] eq 's') ? 'zk_lock_shared' : 'zk_lock';
		$sessions->[$i]->query_safe('BEGIN');
		$sessions->[$i]->query_safe("SELECT $fn('$names->[$i]')");
	}
	for my $i (0 .. $k - 1)
	{
		my $fn = ($modes && $modes->[$i][1] eq 's') ? 'zk_lock_shared' : 'zk_lock';
		$sessions->[$i]->send("SELECT $fn('" . $names->[ ($i + 1) % $k ] . "', '60s')");
		usleep(100_000);
	}
	# each member ends its transaction as soon as its wait ends, as an
	# application would (a granted one's locks keep the others waiting)
	my (@r, %done);
	my $deadline = time() + 60;
	while (keys %done < $k && time() < $deadline)
	{
		for my $i (0 .. $k - 1)
		{
			next if $done{$i};
			my $res = $sessions->[$i]->poll;
			next unless $res;
			($r[$i], $done{$i}) = ($res, 1);
			$sessions->[$i]->query('ROLLBACK');
		}
		usleep(20_000);
	}
	for my $i (0 .. $k - 1)
	{
		next if $done{$i};
		$r[$i] = $sessions->[$i]->wait_or_kill(1);
	}
	return @r;
}

sub check_cycle
{
	my ($what, @r) = @_;
	my @dead = grep { $_->{sqlstate} eq '40P01' } @r;
	my @ok = grep { $_->{sqlstate} eq '00000' } @r;
	is(scalar @dead, 1, "$what: exactly one member gets 40P01")
	  or diag join(' ', map { $_->{sqlstate} } @r);
	is(scalar @ok, scalar(@r) - 1, "$what: the others are granted");
	ok($r[-1]{sqlstate} eq '40P01', "$what: the victim is the youngest waiter");
	like($dead[0]{err} // '', qr/waits for zookeeper lock .* blocked by/,
		"$what: the detail names who waits for what") if @dead;
	ok($_->{elapsed} < 20, "$what: ended within 20 s ($_->{elapsed})") foreach @r;
	return;
}

# the owner tag of a session (the first half of its node names), seen in
# the node of a session lock it takes (then lets go of) on "name"
sub owner_tag
{
	my ($s, $name) = @_;
	$s->query_safe("SELECT zk_session_lock('$name')");
	my ($node) = zk_children($zk, "/zklock/locks/$name");
	$s->query_safe("SELECT zk_unlock('$name')");
	return substr($node, 0, 16);
}

my $d0 = deadlocks();

# 1. one cluster
check_cycle('one cluster', cycle([ sess(0, 'a'), sess(0, 'b') ], [ 'x1', 'y1' ]));
is(deadlocks() - $d0, 1, 'zk_status counts one deadlock');

# 2. two clusters
check_cycle('two clusters', cycle([ sess(0, 'c'), sess(1, 'd') ], [ 'x2', 'y2' ]));

# 3. three clusters
check_cycle('three clusters',
	cycle([ sess(0, 'e'), sess(1, 'f'), sess(2, 'g') ], [ 'x3', 'y3', 'z3' ]));

# 4. shared and exclusive: e holds x4 shared and waits for y4; f holds y4
#    and waits for x4 exclusive (blocked by e's shared hold)
check_cycle('shared and exclusive',
	cycle([ sess(0, 'h'), sess(1, 'i') ], [ 'x4', 'y4' ], [ [ 's', 'x' ], [ 'x', 'x' ] ]));

# 5. a long chain, no cycle: s0 holds c0 for 3 s; s1 holds c1, waits c0; ...
my @chain = map { sess($_ % 3, "ch$_") } 0 .. 5;
for my $i (0 .. 5)
{
	$chain[$i]->query_safe('BEGIN');
	$chain[$i]->query_safe("SELECT zk_lock('c$i')");
}
for my $i (1 .. 5)
{
	$chain[$i]->send("SELECT zk_lock('c" . ($i - 1) . "', '60s')");
}
$chain[0]->send("SELECT pg_sleep(3)");
$chain[0]->wait(30);
$chain[0]->query_safe('COMMIT');
my $falsepos = 0;
for my $i (1 .. 5)
{
	my $r = $chain[$i]->wait(60);
	$falsepos++ if $r->{sqlstate} eq '40P01';
	is($r->{sqlstate}, '00000', "chain: waiter $i is granted");
	$chain[$i]->query_safe('COMMIT');
}
is($falsepos, 0, 'a long chain without a cycle: no 40P01');

# 7. no false cycle through a node of ours that we do not hold (a call
#    that failed leaves its node until the worker's delete lands; here a
#    node with our owner tag stands for it): o waits behind it for lf_l
#    while holding lf_m, and we wait for lf_m
{
	my $me = sess(0, 'lf1');
	my $o = sess(1, 'lf2');
	my $tag = owner_tag($me, 'lf_probe');
	my $fake = "/zklock/locks/lf_l/${tag}0000000000000000__lock__0000000000";
	zkq_or_die($zk, 'create', $fake);
	my $dl = deadlocks();
	$o->query_safe('BEGIN');
	$o->query_safe("SELECT zk_lock('lf_m')");
	$o->send("SELECT zk_lock('lf_l', '60s')");
	usleep(500_000);
	$me->query_safe('BEGIN');
	$me->send("SELECT zk_lock('lf_m', '4s')");
	my $r = $me->wait(30);
	is($r->{sqlstate}, '55P03', 'a node of ours that we do not hold closes no cycle: the wait times out')
	  or diag $r->{err};
	$me->query('ROLLBACK');
	zkq_or_die($zk, 'delete', $fake);
	$r = $o->wait(30);
	is($r->{sqlstate}, '00000', 'the other waiter is granted once that node goes');
	$o->query_safe('COMMIT');
	is(deadlocks() - $dl, 0, 'no deadlock counted');
}

# 8. no false cycle through a node of another member that it does not
#    hold, when it holds nothing: o (another cluster) waits for lg_p, which
#    we hold, holding nothing itself; a node with o's owner tag (a leftover
#    of an earlier call of o, or of its worker's earlier session) stands
#    ahead of us in lg_q.  Before: o's record said "holds":"", read as "no
#    list", so that node was taken as a hold of o and we got 40P01.
{
	my $me = sess(0, 'lg1');
	my $o = sess(1, 'lg2');
	my $tag = owner_tag($o, 'lg_probe');
	my $fake = "/zklock/locks/lg_q/${tag}0000000000000000__lock__0000000000";
	zkq_or_die($zk, 'create', $fake);
	my $dl = deadlocks();
	$me->query_safe('BEGIN');
	$me->query_safe("SELECT zk_lock('lg_p')");
	$o->query_safe('BEGIN');
	$o->send("SELECT zk_lock('lg_p', '60s')");
	ok(wait_until(sub { grep { $_ eq $tag } zk_children($zk, $WAITS) }, 10),
		'the other member published its record (it holds nothing)');
	$me->send("SELECT zk_lock('lg_q', '4s')");
	my $r = $me->wait(30);
	is($r->{sqlstate}, '55P03', 'a node of the other member that it does not hold closes no cycle: the wait times out')
	  or diag $r->{err};
	$me->query('ROLLBACK');
	$r = $o->wait(30);
	is($r->{sqlstate}, '00000', 'the other member is granted once we roll back');
	$o->query_safe('COMMIT');
	zkq_or_die($zk, 'delete', $fake);
	is(deadlocks() - $dl, 0, 'no deadlock counted');
}

# 9. as 8, but o holds 14 locks (their names do not fit in its record, so
#    it says "holds_all":0 and takes any node of o's owner tag): the node
#    ahead of us was made by another session than o's worker's, so it is
#    held by no one.  Before: we got 40P01.
{
	my $me = sess(0, 'lh1');
	my $o = sess(1, 'lh2');
	$o->query_safe("SELECT zk_session_lock('lh_h' || i) FROM generate_series(1, 14) i");
	my $tag = substr((zk_children($zk, '/zklock/locks/lh_h1'))[0], 0, 16);
	my $fake = "/zklock/locks/lh_q/${tag}0000000000000000__lock__0000000000";
	zkq_or_die($zk, 'create', $fake);
	my $dl = deadlocks();
	$me->query_safe('BEGIN');
	$me->query_safe("SELECT zk_lock('lh_p')");
	$o->query_safe('BEGIN');
	$o->send("SELECT zk_lock('lh_p', '60s')");
	ok(wait_until(sub { grep { $_ eq $tag } zk_children($zk, $WAITS) }, 10),
		'the other member published its record (holding 14 locks)');
	my $rec = zkq($zk, 'get', "$WAITS/$tag") // '';
	like($rec, qr/"holds_all":0/, 'its record does not list its holds (they do not fit)');
	$me->send("SELECT zk_lock('lh_q', '4s')");
	my $r = $me->wait(30);
	is($r->{sqlstate}, '55P03',
		"a node of the other member's owner tag made by another session closes no cycle: the wait times out")
	  or diag $r->{err};
	$me->query('ROLLBACK');
	$r = $o->wait(30);
	is($r->{sqlstate}, '00000', 'the other member is granted once we roll back');
	$o->query_safe('COMMIT');
	$o->query_safe('SELECT zk_unlock_all()');
	zkq_or_die($zk, 'delete', $fake);
	is(deadlocks() - $dl, 0, 'no deadlock counted');
}

# 10. a stale record of o's owner tag is there before o waits (made by
#     another session, as one of its worker's given-up session would be):
#     o's worker replaces it, so the record and o's contenders come from one
#     session and the cycle is found.  Rewritten in place, the record kept
#     the other session as its owner and the cycle was never taken.
{
	my $me = sess(0, 'ls1');
	my $o = sess(1, 'ls2');
	my $tag = owner_tag($o, 'ls_probe');
	zkq_or_die($zk, 'create', "$WAITS/$tag", '{"zklock_wait":1}');
	check_cycle('a stale record of a member replaced', cycle([ $o, $me ], [ 'ls_x', 'ls_y' ]));
	my $rec = zkq($zk, 'get', "$WAITS/$tag");
	ok(!defined $rec || $rec !~ /^\{"zklock_wait":1\}$/, 'the stale record is gone');
}

# 6. nothing left
ok(wait_until(sub { !zk_children($zk, $WAITS) }, 30), 'no wait record is left once the waits are over');

done_testing();
