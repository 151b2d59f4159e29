
# 197_lock_deadlock_more.pl - more cycles for the deadlock detector across
# servers (src/lock/lock_deadlock.c, doc/locks.md "Deadlocks across
# servers"), with real clusters and deadlock_timeout = '300ms'.
#
# 1. Upgrades.  a. Two sessions (two clusters) hold 'u' shared and both
#    upgrade: the later one fails with 40P01 (doc/locks.md, Re-entrancy: "at
#    once"), the other is granted once it rolls back.  b. P holds 'a'
#    exclusive and upgrades 'b', held shared by Q too, while Q waits for
#    'a': the youngest waiter gets 40P01 (Q, then, the order reversed, the
#    upgrader P), the other is granted.
# 2. A multi-lock member.  S1 (cluster 1) holds 'p' and takes
#    ARRAY['q','r']; S2 (cluster 2) holds 'r' and waits for 'p'.  a. S2
#    waits first: the multi-lock is the victim; it lets go of 'q' and 'r'
#    at its 40P01, S2 is granted, and once S1 rolls back none of its nodes
#    is left in ZooKeeper.  b. The multi-lock waits first: S2 is the victim,
#    the multi-lock is granted with both tokens.
# 3. While ZooKeeper reconnects.  A third cluster talks to ZooKeeper through
#    test/zkproxy.py (session_timeout 20s, connect_timeout 10s); its
#    connection is cut and reconnects are refused for a few seconds (the
#    session survives).  a. The proxied member's wait lands and the
#    connection is cut before its first check: no verdict can be given
#    during the outage, and after it the cycle is found (that member is the
#    youngest: 40P01), the other granted.  b. The proxied member waited and
#    published first; during the outage its record goes stale and the other
#    member (direct) closes the cycle: after the outage the cycle is found
#    (the direct one, youngest, gets 40P01), the proxied one is granted.
#    c. No cycle: the wait record's create lands but its answer is lost
#    with the connection, the wait is then granted: its record must not be
#    left behind.
# 4. A chain of 8 sessions across 2 clusters under load (busy loops): i
#    holds c<i> and waits for c<i+1>, the last holds for 3 s and commits:
#    every wait is granted, no 40P01, zk_status's deadlocks unchanged.
# Each 40P01 of the detector names in its detail the locks of the cycle and
# each of its sessions (pid and port); zk_status's deadlocks counts exactly
# the 40P01s; <root>/waits holds no record once the waits are over (counted
# through ZooKeeper).  Timings are bounded only generously (no hang).
#
# Found by these tests and fixed: the detail was cut at 159 bytes; every
# 40P01 carried the upgrade hint; a wait record whose create's answer was
# lost stayed until the session ended; the upgrade-versus-upgrade 40P01
# named no session in its detail (now it reads the other upgrader's node).
#
# zklock-tap: serial (tools/test.sh runs it alone: it loads the machine and
# times a ZooKeeper outage against the session and connect timeouts)

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use Time::HiRes qw(time usleep);
use ZkLockTest;
use ZkProxy;

my $zk = zk_start();
my @nodes = map {
	zk_node($_, $zk, session_timeout => '10s', connect_timeout => '5s',
		conf => "deadlock_timeout = '300ms'\n")
} qw(dm1 dm2);
my $p = proxy_start($zk);
# the proxied cluster: an outage of a few seconds stays well within its
# session timeout and its connect_timeout (a wait fails with 08006 once the
# session has been unusable for connect_timeout)
my $pnode = zk_node('dmp', $p->{hosts}, session_timeout => '20s', connect_timeout => '10s',
	conf => "deadlock_timeout = '300ms'\n");
my $WAITS = '/zklock/waits';
my $LOCKS = '/zklock/locks';

sub sess { return new_session($nodes[ $_[0] ], name => $_[1]); }

sub deadlocks
{
	my $n = 0;
	$n += zk_status_value($_, 'deadlocks') foreach (@nodes, $pnode);
	return $n;
}

# the number of contenders of lock $name (in ZooKeeper)
sub ncont { my @n = zk_lock_nodes($zk, "$LOCKS/$_[0]"); return scalar @n; }

# the wait records under <root>/waits (their names: owner tags)
sub records { my @r = zk_children($zk, $WAITS); return @r; }

# the owner tags (first half of the guid: the backend's) of the contenders
# of lock $name, in queue order
sub tags_of
{
	my ($name) = @_;
	return map { substr($_->{guid}, 0, 16) } zk_lock_nodes($zk, "$LOCKS/$name");
}

# the owner tag of the newest contender of $name
sub newest_tag { my @t = tags_of($_[0]); return $t[-1]; }

# number of contenders of $name whose owner tag is $tag
sub nodes_of_tag
{
	my ($name, $tag) = @_;
	return scalar grep { $_ eq $tag } tags_of($name);
}

# $s sends $sql, a wait for lock $name; passes once $name has $n
# contenders in ZooKeeper (the wait's node landed)
sub send_wait
{
	my ($s, $sql, $name, $n) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	$s->send($sql);
	# or already ended: the check of a member that closes a cycle can end
	# its wait before a listing here sees its node (a loaded machine)
	return ok(wait_until(sub { ncont($name) >= $n || !$s->running }, 30),
		$s->name . " waits for '$name' in ZooKeeper (or its wait already ended)");
}

# Wait (60 s at most) for the pending statements of @$ss; each member ends
# its transaction as soon as its statement ends (a granted one's locks
# would keep the others waiting), except a granted one with keep_granted.
# Returns the results in order.
sub collect
{
	my ($ss, %o) = @_;
	my (@r, %done);
	my $deadline = time() + 60;
	while (keys %done < @$ss && time() < $deadline)
	{
		for my $i (0 .. $#$ss)
		{
			next if $done{$i};
			# (send_wait may have seen it end already: then its result is kept)
			my $res = $ss->[$i]->{pending} ? $ss->[$i]->poll : $ss->[$i]->{last};
			next unless $res;
			($r[$i], $done{$i}) = ($res, 1);
			$ss->[$i]->query('ROLLBACK')
			  unless $o{keep_granted} && $res->{sqlstate} eq '00000';
		}
		usleep(20_000);
	}
	for my $i (0 .. $#$ss)
	{
		$r[$i] = $ss->[$i]->wait_or_kill(1) unless $done{$i};
	}
	return @r;
}

sub detail_of
{
	my ($r) = @_;
	return ($r->{err} // '') =~ /^DETAIL:\s+(.*)$/m ? $1 : '';
}

# The results @$r of a cycle's waits: exactly one 40P01, that of member
# $victim, the others granted, each within 30 s; with $cycle (a list of
# [ session, node ] of the cycle's members) and $locks (the names of the
# cycle's locks), the 40P01's detail names each of them
sub check_cycle
{
	my ($what, $r, $victim, $cycle, $locks) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	my @dead = grep { $_->{sqlstate} eq '40P01' } @$r;
	my @ok = grep { $_->{sqlstate} eq '00000' } @$r;
	is(scalar @dead, 1, "$what: exactly one member gets 40P01")
	  or diag join(' ', map { $_->{sqlstate} } @$r);
	is(scalar @ok, scalar(@$r) - 1, "$what: the others are granted");
	is($r->[$victim]{sqlstate}, '40P01', "$what: the victim is the youngest waiter");
	ok(($_->{elapsed} // 99) < 30, sprintf("$what: ended within 30 s (%.1f s)", $_->{elapsed} // -1))
	  foreach @$r;
	return unless $cycle && @dead;
	my $detail = detail_of($dead[0]);
	note "$what: detail: $detail";
	# the victim's own wait comes first
	my ($first, @others) = @$locks;
	like($detail, qr/^process \d+ on port \d+ of host \S+ waits for zookeeper lock "\Q$first\E"/,
		"$what: the detail names lock '$first' (the victim's)");
  TODO:
	{
		# the detail holds every member (ZKLOCK_ERRMSG_MAX, 512 bytes;
		# it was 160 and cut the second member's lock)
		like($detail, qr/waits for zookeeper lock "\Q$_\E"/, "$what: the detail names lock '$_'")
		  foreach @others;
	}
	for my $m (@$cycle)
	{
		my ($s, $node) = @$m;
		like($detail, qr/process \Q${\ $s->pid}\E on port \Q${\ $node->port}\E /,
			"$what: the detail names session " . $s->name);
	}
	return;
}

sub no_records
{
	my ($what, $secs) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	ok(wait_until(sub { !records() }, $secs // 30),
		"$what: no wait record is left under $WAITS")
	  or diag zk_tree($zk, $WAITS);
}

my $d0 = deadlocks();
my $expected_deadlocks = 0;

#
# 1a. two sessions hold 'u' shared, both upgrade
#
{
	my ($s1, $s2) = (sess(0, 'up1'), sess(1, 'up2'));
	my $d = deadlocks();
	$_->query_safe('BEGIN') foreach ($s1, $s2);
	$_->query_safe("SELECT zk_lock_shared('u')") foreach ($s1, $s2);
	send_wait($s1, "SELECT zk_lock('u', '60s')", 'u', 3);
	$s2->send("SELECT zk_lock('u', '60s')");
	my @r = collect([ $s1, $s2 ]);
	check_cycle('two upgrades', \@r, 1);
	like($r[1]{err}, qr/deadlock detected while waiting for zookeeper lock "u"/,
		'two upgrades: the error names the lock');
	is(deadlocks() - $d, 1, 'two upgrades: zk_status counts one deadlock');
	$expected_deadlocks++;
	# the other upgrader's node is read to name it (it was "Another session")
	like(detail_of($r[1]), qr/process \Q${\ $s1->pid}\E on port \Q${\ $nodes[0]->port}\E of host \S+ holds this lock shared and waits for this session's shared hold to go/,
		'two upgrades: the detail names the other session');
	like($r[1]{err}, qr/cannot both upgrade it/, 'two upgrades: the hint says why');
	ok(wait_until(sub { !ncont('u') }, 30), 'two upgrades: no node of u is left once both rolled back')
	  or diag zk_tree($zk, "$LOCKS/u");
	$_->quit foreach ($s1, $s2);
}

#
# 1b. P holds a exclusive and b shared, Q holds b shared; P upgrades b
#     (blocked by Q's shared hold), Q waits for a (blocked by P): a cycle
#     through an upgrade.  First Q closes it (Q the victim), then P's
#     upgrade does (P the victim).
#
for my $order ('upgrade first', 'upgrade last')
{
	my $k = $order eq 'upgrade first' ? 1 : 2;
	my ($la, $lb) = ("a$k", "b$k");
	my ($P, $Q) = (sess(0, "P$k"), sess(1, "Q$k"));
	my $d = deadlocks();
	$_->query_safe('BEGIN') foreach ($P, $Q);
	$P->query_safe("SELECT zk_lock('$la')");
	$P->query_safe("SELECT zk_lock_shared('$lb')");
	$Q->query_safe("SELECT zk_lock_shared('$lb')");
	my @r;
	if ($order eq 'upgrade first')
	{
		send_wait($P, "SELECT zk_lock('$lb', '60s')", $lb, 3);
		send_wait($Q, "SELECT zk_lock('$la', '60s')", $la, 2);
		@r = collect([ $P, $Q ]);
		check_cycle("cycle through an upgrade, $order", \@r, 1,
			[ [ $P, $nodes[0] ], [ $Q, $nodes[1] ] ], [ $la, $lb ]);
	}
	else
	{
		send_wait($Q, "SELECT zk_lock('$la', '60s')", $la, 2);
		send_wait($P, "SELECT zk_lock('$lb', '60s')", $lb, 3);
		@r = collect([ $Q, $P ]);
		check_cycle("cycle through an upgrade, $order", \@r, 1,
			[ [ $P, $nodes[0] ], [ $Q, $nodes[1] ] ], [ $lb, $la ]);
	}
	is(deadlocks() - $d, 1, "cycle through an upgrade, $order: zk_status counts one deadlock");
	$expected_deadlocks++;
	ok(wait_until(sub { !ncont($la) && !ncont($lb) }, 30),
		"cycle through an upgrade, $order: no node left once both rolled back");
	$_->quit foreach ($P, $Q);
}

#
# 2. a multi-lock member in the cycle
#
{
	# a. S2 waits for p first; then S1's multi-lock takes q and waits for r:
	#    S1 is the youngest waiter
	my ($S1, $S2) = (sess(0, 'm1'), sess(1, 'm2'));
	# S1 checks its wait after 2 s (S2 after 300ms, and leaves the verdict
	# to the youngest, S1): time to see its multi-lock hold q in ZooKeeper
	$S1->query_safe("SET deadlock_timeout = '2s'");
	my $d = deadlocks();
	$_->query_safe('BEGIN') foreach ($S1, $S2);
	$S1->query_safe("SELECT zk_lock('p')");
	my $t1 = newest_tag('p');
	$S2->query_safe("SELECT zk_lock('r')");
	my $t2 = newest_tag('r');
	isnt($t1, $t2, 'multi: the two sessions have their own owner tags');
	send_wait($S2, "SELECT zk_lock('p', '60s')", 'p', 2);
	send_wait($S1, "SELECT zk_lock(ARRAY['q', 'r'], '60s')", 'r', 2);
	is(nodes_of_tag('q', $t1), 1, 'multi: the multi-lock holds q while it waits for r');
	my $r1 = $S1->wait(60);
	check_cycle('multi-lock victim', [ $r1 ], 0, [ [ $S1, $nodes[0] ], [ $S2, $nodes[1] ] ],
		[ 'r', 'p' ]);
	unlike(detail_of($r1), qr/lock "q"/, 'multi: the detail does not name q (not in the cycle)');
	ok(wait_until(sub { !nodes_of_tag('q', $t1) && !nodes_of_tag('r', $t1) }, 30),
		'multi: at its 40P01 the multi-lock let go of q and r (through ZooKeeper)')
	  or diag zk_tree($zk, $LOCKS);
	# (p goes too: the error aborts S1's transaction, and as PostgreSQL
	# does for its own locks the aborted transaction's holds go at once,
	# before the ROLLBACK)
	my $r2 = $S2->wait(30);
	is($r2->{sqlstate}, '00000', 'multi: S2 is granted p') or diag $r2->{err};
	$S1->query_safe('ROLLBACK');
	ok(wait_until(sub { !grep { nodes_of_tag($_, $t1) } qw(p q r) }, 30),
		'multi: after the ROLLBACK no node of S1 is left on p, q or r');
	is(join(',', map { nodes_of_tag($_, $t2) } qw(p q r)), '1,0,1', 'multi: S2 holds p and r');
	is(deadlocks() - $d, 1, 'multi: zk_status counts one deadlock');
	$expected_deadlocks++;
  TODO:
	{
		unlike($r1->{err}, qr/HINT:.*upgrade/, 'multi: the hint does not speak of an upgrade (none in this cycle)');
	}
	$S2->query_safe('ROLLBACK');
	ok(wait_until(sub { !grep { ncont($_) } qw(p q r) }, 30),
		'multi: nothing left once both rolled back');
	$_->quit foreach ($S1, $S2);

	# b. the multi-lock waits first: S2 is the victim, the multi-lock gets
	#    both members
	($S1, $S2) = (sess(0, 'm3'), sess(1, 'm4'));
	$d = deadlocks();
	$_->query_safe('BEGIN') foreach ($S1, $S2);
	$S1->query_safe("SELECT zk_lock('p')");
	$t1 = newest_tag('p');
	$S2->query_safe("SELECT zk_lock('r')");
	send_wait($S1, "SELECT zk_lock(ARRAY['q', 'r'], '60s')", 'r', 2);
	send_wait($S2, "SELECT zk_lock('p', '60s')", 'p', 2);
	my @r = collect([ $S1, $S2 ], keep_granted => 1);
	check_cycle('multi-lock survivor', \@r, 1, [ [ $S1, $nodes[0] ], [ $S2, $nodes[1] ] ],
		[ 'p', 'r' ]);
	like($r[0]{out}, qr/^\{\d+,\d+\}$/, 'multi-lock survivor: both tokens come back');
	is(join(',', map { nodes_of_tag($_, $t1) } qw(p q r)), '1,1,1',
		'multi-lock survivor: S1 holds p, q and r');
	is(deadlocks() - $d, 1, 'multi-lock survivor: zk_status counts one deadlock');
	$expected_deadlocks++;
	$S1->query_safe('ROLLBACK');
	ok(wait_until(sub { !grep { ncont($_) } qw(p q r) }, 30),
		'multi-lock survivor: nothing left once both rolled back');
	$_->quit foreach ($S1, $S2);
}
no_records('upgrades and multi-locks');

#
# 3. a cycle across a reconnect of the proxied cluster
#
my $sid = zk_status_value($pnode, 'session_id');
ok($sid ne '', 'the proxied cluster has a session');

# the outage began: wait until the proxied cluster sees it
sub outage_seen
{
	my ($what) = @_;
	my $st = wait_for_state($pnode, sub { $_[0]->{state} ne 'connected' }, 15);
	isnt($st->{state}, 'connected', "$what: the proxied cluster lost its connection ($st->{state})");
}

# end the outage: the proxied cluster reconnects within its session
sub outage_over
{
	my ($what) = @_;
	proxy_cmd($p, 'reset');
	my $st = wait_for_state($pnode, 'connected', 30);
	is($st->{state}, 'connected', "$what: reconnected");
	is($st->{session_id}, $sid, "$what: the same session (it survived the outage)");
}

{
	# a. A (direct) holds ra, B (proxied) holds rb; A waits for rb and
	#    publishes; B's wait for ra lands and the connection is cut at once,
	#    before B's first check (its create's answer is the last thing B's
	#    cluster hears)
	my ($A, $B) = (sess(0, 'ra'), new_session($pnode, name => 'rb'));
	my $d = deadlocks();
	$_->query_safe('BEGIN') foreach ($A, $B);
	$A->query_safe("SELECT zk_lock('ra')");
	$B->query_safe("SELECT zk_lock('rb')");
	my $tb = newest_tag('rb');
	send_wait($A, "SELECT zk_lock('rb', '60s')", 'rb', 2);
	my $ta = newest_tag('rb');
	ok(wait_until(sub { grep { $_ eq $ta } records() }, 30),
		'reconnect a: A published its wait record');
	proxy_cmd($p, 'refuse 60');    # new connections only: the current one stays
	my $cut = proxy_rule($p, 'cut-after-reply create2');
	send_wait($B, "SELECT zk_lock('ra', '60s')", 'ra', 2);
	ok(proxy_wait_fired($p, $cut, 10), 'reconnect a: the connection was cut after B\'s create');
	outage_seen('reconnect a');
	# a few seconds of outage: B can publish nothing, so nobody can see the
	# cycle; A keeps checking (and finds B's owner without a record)
	usleep(3_000_000);
	ok(!grep({ $_ eq $tb } records()), 'reconnect a: no record of B during the outage');
	ok($A->running && $B->running, 'reconnect a: both still wait during the outage');
	outage_over('reconnect a');
	my @r = collect([ $A, $B ]);
	check_cycle('reconnect a', \@r, 1, [ [ $A, $nodes[0] ], [ $B, $pnode ] ], [ 'ra', 'rb' ]);
	is(deadlocks() - $d, 1, 'reconnect a: zk_status counts one deadlock');
	$expected_deadlocks++;
	no_records('reconnect a');
	$_->quit foreach ($A, $B);
}

{
	# b. B (proxied) holds sb and waits for sa first, publishes; the
	#    connection is cut; some seconds later A (direct), holding sa, waits
	#    for sb: A is the youngest
	my ($A, $B) = (sess(0, 'sa'), new_session($pnode, name => 'sb'));
	my $d = deadlocks();
	$_->query_safe('BEGIN') foreach ($A, $B);
	$A->query_safe("SELECT zk_lock('sa')");
	$B->query_safe("SELECT zk_lock('sb')");
	my $tb = newest_tag('sb');
	send_wait($B, "SELECT zk_lock('sa', '60s')", 'sa', 2);
	ok(wait_until(sub { grep { $_ eq $tb } records() }, 30),
		'reconnect b: B published its wait record');
	proxy_cmd($p, 'refuse 60');
	proxy_cmd($p, 'cut-all');
	outage_seen('reconnect b');
	usleep(2_500_000);    # B's record goes stale: not followed
	send_wait($A, "SELECT zk_lock('sb', '60s')", 'sb', 2);
	usleep(1_000_000);
	ok($B->running, 'reconnect b: B still waits during the outage');
	outage_over('reconnect b');
	my @r = collect([ $B, $A ]);
	check_cycle('reconnect b', \@r, 1, [ [ $A, $nodes[0] ], [ $B, $pnode ] ], [ 'sb', 'sa' ]);
	is(deadlocks() - $d, 1, 'reconnect b: zk_status counts one deadlock');
	$expected_deadlocks++;
	no_records('reconnect b');
	$_->quit foreach ($A, $B);
}

{
	# c. no cycle: B (proxied, deadlock_timeout 1s) waits for lk, held by A;
	#    B's record is created but the answer is lost with the connection;
	#    A commits at once, B is granted (before its next check, 2 s later)
	my ($A, $B) = (sess(0, 'la'), new_session($pnode, name => 'lb'));
	$B->query_safe("SET deadlock_timeout = '1s'");
	$_->query_safe('BEGIN') foreach ($A, $B);
	$A->query_safe("SELECT zk_lock('lk')");
	# the next create2 is B's contender, the one after it B's wait record
	my $cut = proxy_rule($p, 'cut-after-request create2 2');
	send_wait($B, "SELECT zk_lock('lk', '60s')", 'lk', 2);
	my $tb = newest_tag('lk');
	ok(proxy_wait_fired($p, $cut, 15), 'record lost: the connection was cut after the record\'s create');
	ok(scalar(grep { $_ eq $tb } records()), 'record lost: the create landed');
	$A->query_safe('COMMIT');
	my $r = $B->wait(30);
	is($r->{sqlstate}, '00000', 'record lost: B is granted') or diag $r->{err};
	$B->query_safe('COMMIT');
	my $st = wait_for_state($pnode, 'connected', 30);
	is($st->{session_id}, $sid, 'record lost: the same session');
  TODO:
	{
		no_records('record lost', 10);
	}
	# a later wait of the same backend that reaches deadlock_timeout takes
	# the record over (create finds it, sets it) and deletes it at its end
	$A->query_safe('BEGIN');
	$A->query_safe("SELECT zk_lock('lk')");
	$B->query_safe('BEGIN');
	send_wait($B, "SELECT zk_lock('lk', '60s')", 'lk', 2);
	my $bnode = (zk_lock_nodes($zk, "$LOCKS/lk"))[-1]{name};
	ok(wait_until(sub { (zk_get($zk, "$WAITS/$tb") // '') =~ /\Q$bnode\E/ }, 30),
		'record lost: a later wait of B publishes its record');
	$A->query_safe('COMMIT');
	$r = $B->wait(30);
	is($r->{sqlstate}, '00000', 'record lost: the later wait is granted') or diag $r->{err};
	$B->query_safe('COMMIT');
	no_records('record lost, after a later wait');
	$_->quit foreach ($A, $B);
}

#
# 4. a long chain without a cycle, under load
#
{
	my $ncpu = 2;
	if (open(my $fh, '<', '/proc/cpuinfo'))
	{
		$ncpu = grep { /^processor\s*:/ } <$fh>;
		close $fh;
	}
	my $nload = $ncpu * 2;
	$nload = 8 if $nload > 8;
	$nload = 2 if $nload < 2;
	my $d = deadlocks();
	my $K = 8;
	my %before = map { $_ => 1 } records();
	my @ch = map { sess($_ % 2, "ch$_") } 0 .. $K - 1;
	for my $i (0 .. $K - 1)
	{
		$ch[$i]->query_safe('BEGIN');
		$ch[$i]->query_safe("SELECT zk_lock('c$i')");
	}
	note "load: $nload busy loops";
	my @load = map { IPC::Run::start([ 'bash', '-c', 'while :; do :; done' ]) } 1 .. $nload;
	my $ok = eval {
		send_wait($ch[$_], "SELECT zk_lock('c" . ($_ + 1) . "', '90s')", 'c' . ($_ + 1), 2)
		  for 0 .. $K - 2;
		# every waiter publishes (the detector follows the chain) before the
		# last one lets go
		ok(wait_until(sub { (grep { !$before{$_} } records()) == $K - 1 }, 30),
			'chain: every waiter published its wait record')
		  or diag zk_tree($zk, $WAITS);
		$ch[ $K - 1 ]->query_safe('SELECT pg_sleep(3)', 60);
		$ch[ $K - 1 ]->query_safe('COMMIT');
		my @r = collect([ @ch[ 0 .. $K - 2 ] ]);
		is($r[$_]{sqlstate}, '00000', "chain under load: waiter $_ is granted")
		  or diag $r[$_]{err}
		  for 0 .. $K - 2;
		is(scalar(grep { $_->{sqlstate} eq '40P01' } @r), 0, 'chain under load: no 40P01');
		1;
	};
	my $err = $@;
	eval { $_->kill_kill; 1 } foreach @load;
	die $err unless $ok;
	is(deadlocks() - $d, 0, 'chain under load: zk_status counts no deadlock');
	ok(wait_until(sub { !grep { !$before{$_} } records() }, 30),
		'chain under load: no wait record of the chain is left');
	$_->quit foreach @ch;
}

is(deadlocks() - $d0, $expected_deadlocks, "zk_status counts $expected_deadlocks deadlocks in all");

done_testing();
