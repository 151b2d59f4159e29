
# 160_lock_proxy_races.pl - races made deterministic by test/zkproxy.py, a
# fault-injecting proxy between the zklock worker and ZooKeeper.
#
# The node's zklock.hosts points at the proxy; ZooKeeper's content is always
# counted directly (not through the proxy).  Each scenario places a fault at
# one exact point of the protocol:
#
#   a. the connection is cut right after the create's reply, reconnects are
#      refused until the waiter gave up: after the reconnect its node must
#      be deleted and the lock free (issue 6, defect 1)
#   b. the listing's reply is delayed and the waiter is cancelled, or times
#      out through zklock.connect_timeout, between the create's reply and
#      the listing's: same requirement (defect 1)
#   c. outages while a waiter without a timeout is queued behind a holder:
#      a silent server, a reset right after a watch notification (the C
#      client's next send fails and it drops the socket without a session
#      event), a reset of every connection, and the same under load: the
#      state must leave 'connected' and the waiter must fail with 08006
#      within about zklock.connect_timeout (defect 7)
#   d. the create's reply is lost (cut after the request landed): exactly
#      one node or none, never an orphan
#   e. a send fails while the worker believes it is connected and the
#      server is reachable again at once: the C client reconnects without
#      a session event, with the lost requests still queued; the waiter
#      must still get the lock, not fail or hang
#
# The notification-then-reset faults (c2, e) stop the worker with SIGSTOP
# while the proxy delivers the notification and resets the connection, so
# that the worker reads the notification before it sees the reset: without
# the stop this is a race the worker usually wins.
#
# After every scenario: no shared-memory entry left, no contender node left.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use JSON::PP;
use Time::HiRes qw(time usleep);
use ZkLockTest;
use ZkProxy;

my $zk = zk_start();
my $p = proxy_start($zk);
# (the root's kept totals off: their read every second would count as a
# watch set, see watches_set)
my $node = zk_node('races', $p->{hosts},
	session_timeout => '8s',
	connect_timeout => '2s',
	conf => "zklock.max_kept_bytes = 0\nzklock.max_kept_nodes = 0\n");

my $LOCKS = '/zklock/locks';
my $SESSION_TIMEOUT = 8;
my $CONNECT_TIMEOUT = 2;

# Persistent parents: a container parent could be removed by ZooKeeper
# between scenarios, and the create would then fail (ZNONODE) instead of
# the reply the rules are waiting for.
foreach my $name (qw(a b1 b2 c1 c2 c3 c4 d1 d2 e))
{
	my ($rc, $out, $err) = zkq($zk, 'create', "$LOCKS/$name");
	die "cannot create $LOCKS/$name: $out $err" if $rc != 0;
}

# Contender nodes (ephemeral) anywhere under $LOCKS, counted in ZooKeeper
sub contenders
{
	my $tree = zk_tree($zk, $LOCKS);
	die "cannot read the tree of $LOCKS: $tree" if $tree =~ /^\(tree/;
	return scalar grep { (split / /)[1] ne '0x0' } grep { /\S/ } split /\n/, $tree;
}

sub wait_no_contenders
{
	my ($secs) = @_;
	my $t0 = time();
	my $n;
	while (1)
	{
		$n = contenders();
		return (1, time() - $t0, 0) if $n == 0;
		return (0, time() - $t0, $n) if time() - $t0 >= $secs;
		usleep(200_000);
	}
}

# the end of an outage of part $tag: the waiter $w rolls back, the proxy
# lets everything through again, and once the worker is connected the
# holder $h commits, or learns that its lock was lost
sub after_outage
{
	my ($tag, $h, $w) = @_;
	$w->query('ROLLBACK');
	proxy_cmd($p, 'reset');
	wait_for_state($node, 'connected', 30);
	my $r = $h->query('COMMIT', 30);
	like($r->{sqlstate}, qr/^(00000|40001)$/, "$tag: the holder's COMMIT succeeds or reports the lost lock ($r->{sqlstate})");
	$h->quit;
	$w->quit;
	return;
}

# The end of every scenario: rules cleared, connected again, no entry and no
# contender node left.  If something is left (a defect), the node is
# restarted so that the next scenario starts clean.
sub settle
{
	my ($what, %opts) = @_;
	proxy_cmd($p, 'reset');
	my $st = wait_for_state($node, 'connected', 30);
	is($st->{state}, 'connected', "$what: connected again");
	my $entries_ok = ok(
		wait_until(sub { zk_status_value($node, 'entries_used') eq '0' }, $opts{secs} // 10),
		"$what: zk_status().entries_used back to 0");
	diag 'zk_locks: ' . $node->safe_psql('postgres', 'SELECT * FROM zk_locks') unless $entries_ok;
	my ($nodes_ok, $secs, $left) = wait_no_contenders($opts{secs} // 10);
	ok($nodes_ok, "$what: no contender node left in ZooKeeper") or diag zk_tree($zk, $LOCKS);
	if (!$entries_ok || !$nodes_ok)
	{
		note "$what left $left nodes behind: restarting the node for a clean start";
		$node->restart;
		wait_for_state($node, 'connected', 60);
		wait_no_contenders(20);
	}
}

sub stat_of
{
	my ($kind, $op) = @_;
	return proxy_stats($p)->{$kind}{$op} // 0;
}

# Wait until the proxy saw $n more items of $kind/$op than $base
sub wait_stat
{
	my ($kind, $op, $base, $timeout, $n) = @_;
	$n //= 1;
	return wait_until(sub { stat_of($kind, $op) >= $base + $n }, $timeout // 10, 0.02);
}

#
# The proxy carries the worker's session
#
my $st0 = proxy_stats($p);
ok($st0->{accepted} >= 1 && $st0->{open} >= 1, "the worker connects through the proxy ($st0->{open} open)");
ok(($st0->{requests}{connect} // 0) >= 1, 'the proxy saw the ConnectRequest');
is($node->safe_psql('postgres', "SELECT zk_try_lock('a')"), 't', 'a lock works through the proxy');
ok(stat_of('requests', 'create2') >= 1 && stat_of('requests', 'getChildren') >= 1,
	'the proxy names the requests: create2 and getChildren seen');
my $sid = zk_status_value($node, 'session_id');

#
# a. cut right after the create's reply; reconnects refused until the waiter
#    gave up.  The create landed and its name is known: after the reconnect
#    the node must be deleted, never granted to nobody.
#
{
	my $base_delivered = stat_of('delivered', 'create2');
	proxy_cmd($p, 'refuse 60');    # new connections only: the current one stays
	my $cut = proxy_rule($p, 'cut-after-reply create2');
	my $w = new_session($node, name => 'a_waiter');
	$w->query_safe("SET zklock.connect_timeout = '2s'");
	$w->query_safe('BEGIN');
	my $r = $w->query("SELECT zk_lock('a')", 30);
	is($r->{sqlstate}, '08006', 'a: the waiter fails with 08006 while reconnects are refused')
	  or diag $r->{err};
	ok($r->{elapsed} < 10, sprintf('a: after about zklock.connect_timeout (%.1fs)', $r->{elapsed}));
	ok(proxy_wait_fired($p, $cut, 5), 'a: the proxy cut after delivering the create reply');
	ok(stat_of('delivered', 'create2') > $base_delivered, 'a: the create reply was delivered');
	is(zk_count($zk, "$LOCKS/a"), 1, 'a: the create landed: its node is in ZooKeeper');
	$w->query('ROLLBACK');
	my $st = zk_status($node);
	isnt($st->{state}, 'connected', "a: zk_status().state is '$st->{state}' during the outage");

	proxy_cmd($p, 'refuse 0');
	$st = wait_for_state($node, 'connected', 30);
	is($st->{state}, 'connected', 'a: reconnected');
	is($st->{session_id}, $sid, 'a: same session (the node was not removed by an expiry)');
	my ($ok, $secs) = zk_wait_count($zk, "$LOCKS/a", 0, 8);
	ok($ok, sprintf('a: the abandoned node is deleted after the reconnect (%.1fs)', $secs));
	is(try_lock_elsewhere($node, 'a'), 't', 'a: another session gets the lock (zk_try_lock)');
	$w->quit;
	settle('a');
}

#
# b. the listing's reply is delayed: the create has landed and its reply
#    arrived, the listing has not answered, and the waiter goes away.
#
sub gap_scenario
{
	my ($name, $how) = @_;
	$sid = zk_status_value($node, 'session_id');
	my $base_create = stat_of('replies', 'create2');
	my $base_list = stat_of('delivered', 'getChildren');
	my $delay = proxy_rule($p, 'delay-replies getChildren 3000');
	my $w = new_session($node, name => "${name}_waiter");
	$w->query_safe('BEGIN');
	my $r;
	if ($how eq 'cancel')
	{
		$w->send("SELECT zk_lock('$name')");
		ok(wait_stat('replies', 'create2', $base_create, 10), "$name: the create reply came back");
		$node->safe_psql('postgres', 'SELECT pg_cancel_backend(' . $w->pid . ')');
		$r = $w->wait(30);
		is($r->{sqlstate}, '57014', "$name: the waiter was cancelled") or diag $r->{err};
	}
	else
	{
		$w->query_safe("SET LOCAL zklock.connect_timeout = '1s'");
		$r = $w->query("SELECT zk_lock('$name')", 30);
		is($r->{sqlstate}, '08006', "$name: the request failed through zklock.connect_timeout (1s)")
		  or diag $r->{err};
	}
	is(stat_of('delivered', 'getChildren'), $base_list,
		"$name: the listing had not answered when the waiter gave up");
	ok(proxy_wait_fired($p, $delay, 1), "$name: the proxy delayed the listing's reply");
	ok(stat_of('replies', 'create2') > $base_create, "$name: the create had landed");
	$w->query('ROLLBACK');
	proxy_cmd($p, 'reset');    # the delayed listing still arrives, late

	ok(wait_stat('delivered', 'getChildren', $base_list, 10), "$name: the late listing was delivered");
	my ($ok, $secs) = zk_wait_count($zk, "$LOCKS/$name", 0, 8);
	ok($ok, sprintf('%s: the abandoned node is deleted (%.1fs)', $name, $secs));
	is(try_lock_elsewhere($node, $name), 't', "$name: another session gets the lock");
	is(zk_status_value($node, 'session_id'), $sid, "$name: same session throughout");
	$w->quit;
	settle($name);
}

gap_scenario('b1', 'cancel');
gap_scenario('b2', 'connect_timeout');

#
# c. outages while a waiter without a timeout is queued behind a holder.
#

# Replies delivered to requests that can set a watch on a node
sub watches_set
{
	my $d = proxy_stats($p)->{delivered};
	return ($d->{getData} // 0) + ($d->{exists} // 0) + ($d->{addWatch} // 0);
}

# Start a holder and a waiter (no timeout) on $name; returns both sessions
# once the waiter has set its watch on the holder's node.  With $take
# 'zk_lock_shared' the holder is a reader: its release is not handed to the
# waiter as the delete is sent (017_lock_local_handoff.pl), so the waiter
# goes on only when the watch notification comes and its listing answers --
# the path the notification-then-reset faults are about.
sub holder_and_waiter
{
	my ($name, $take) = @_;
	$take //= 'zk_lock';
	my $h = new_session($node, name => "${name}_holder");
	$h->query_safe('BEGIN');
	$h->query_safe("SELECT $take('$name')");
	my $base = watches_set();
	my $w = new_session($node, name => "${name}_waiter");
	$w->query_safe("SET zklock.connect_timeout = '${CONNECT_TIMEOUT}s'");
	$w->query_safe('BEGIN');
	$w->send("SELECT zk_lock('$name')");
	ok(wait_until(sub { watches_set() > $base }, 10, 0.02),
		"$name: the waiter watches the holder's node");
	is(zk_count($zk, "$LOCKS/$name"), 2, "$name: holder and waiter have their nodes");
	return ($h, $w);
}

# After the outage started at $t0: the state must leave 'connected' within
# the session timeout, and the waiter must fail with 08006 within $bound s.
sub outage_checks
{
	my ($name, $w, $t0, $bound) = @_;
	my $st = wait_for_state($node, sub { $_[0]->{state} ne 'connected' }, $SESSION_TIMEOUT + 2);
	isnt($st->{state}, 'connected',
		sprintf("%s: zk_status().state is '%s' %.1fs after the outage started",
			$name, $st->{state}, time() - $t0));
	my $left = $bound - (time() - $t0);
	my $r = $w->wait($left > 0.1 ? $left : 0.1);
	ok($r->{done}, sprintf('%s: the waiter without timeout returned during the outage (%.1fs after it started, bound %.0fs)',
		$name, time() - $t0, $bound));
	is($r->{sqlstate}, '08006', "$name: with 08006") or diag $r->{err} if $r->{done};
	if (!$r->{done})
	{
		# end the outage so that it returns at last, then go on
		proxy_cmd($p, 'reset');
		$r = $w->wait(60);
		note sprintf('%s: the waiter returned %.1fs after the outage started, %s, once it ended',
			$name, time() - $t0, $r->{sqlstate});
	}
	return $r;
}

# c1: a silent server (every reply dropped, requests still reach ZooKeeper,
# which keeps the session alive)
{
	my ($h, $w) = holder_and_waiter('c1');
	my $t0 = time();
	my $drop = proxy_rule($p, 'drop-replies all');
	outage_checks('c1', $w, $t0, $SESSION_TIMEOUT * 2 / 3 + $CONNECT_TIMEOUT + 6);
	ok(proxy_wait_fired($p, $drop, 1), 'c1: the proxy held replies back');
	after_outage('c1', $h, $w);
	settle('c1');
}

# The holder commits.  The watch notification of its release reaches the
# worker together with a reset of the connection, while the worker is
# stopped (SIGSTOP): when it resumes it reads the notification, sends the
# waiter's new listing into the reset socket, and the C client closes the
# socket in nonblocking_send() without any session event.  Without the
# stop this is a race the worker usually wins; with it, it is certain.
# Returns the time the worker resumed.
my $stopped_worker;

sub notification_then_reset
{
	my ($name, $h) = @_;
	my $wpid = worker_pid($node);
	my $base_del = stat_of('requests', 'delete');
	my $delay = proxy_rule($p, 'delay-replies notification 1500');
	my $cut = proxy_rule($p, 'cut-after-reply notification 1 rst');
	$h->query_safe('COMMIT');
	ok(wait_stat('requests', 'delete', $base_del, 5), "$name: the holder's delete reached ZooKeeper");
	kill 'STOP', $wpid;
	$stopped_worker = $wpid;
	my $fired = proxy_wait_fired($p, $cut, 10);
	kill 'CONT', $wpid;
	$stopped_worker = undef;
	my $t0 = time();
	proxy_cmd($p, "clear $delay");
	ok($fired, "$name: notification delivered and connection reset while the worker was stopped");
	return $t0;
}

END
{
	kill 'CONT', $stopped_worker if $stopped_worker;
}

# c2: a send fails while the worker believes it is connected, and
# reconnects are refused: the outage must be noticed
{
	my ($h, $w) = holder_and_waiter('c2', 'zk_lock_shared');
	proxy_cmd($p, 'refuse 60');
	my $t0 = notification_then_reset('c2', $h);
	outage_checks('c2', $w, $t0, $CONNECT_TIMEOUT + 8);
	$w->query('ROLLBACK');
	$h->quit;
	$w->quit;
	settle('c2', secs => 15);
}

# c3: every connection reset while reconnects are refused
{
	my ($h, $w) = holder_and_waiter('c3');
	proxy_cmd($p, 'refuse 60');
	my $t0 = time();
	proxy_cmd($p, 'cut-all rst');
	outage_checks('c3', $w, $t0, $CONNECT_TIMEOUT + 8);
	after_outage('c3', $h, $w);
	settle('c3', secs => 15);
}

# c4: under load: four sessions take and release 'c4' in a loop, waiting
# without a timeout behind each other; every connection is reset and
# reconnects refused.  Every session must fail within a bounded time (08006,
# or 40001 from a COMMIT that held the lock), and the state must leave
# 'connected'.
{
	my ($h, $w) = holder_and_waiter('c4');
	$h->query_safe('COMMIT');    # the waiter now holds; the loopers queue behind and release
	my $wr = $w->wait(10);
	is($wr->{sqlstate}, '00000', 'c4: the waiter got the lock when the holder committed');
	$w->query_safe('COMMIT');
	my @loopers;
	foreach my $i (1 .. 4)
	{
		my $s = new_session($node, name => "c4_loop$i");
		$s->query_safe("SET zklock.connect_timeout = '${CONNECT_TIMEOUT}s'");
		$s->query_safe("SET zklock.commit_timeout = '${CONNECT_TIMEOUT}s'");
		$s->send("DO \$\$ BEGIN FOR i IN 1 .. 1000000 LOOP PERFORM zk_lock('c4'); COMMIT; END LOOP; END \$\$");
		push @loopers, $s;
	}
	my $base = stat_of('requests', 'create2');
	ok(wait_stat('requests', 'create2', $base, 20, 40), 'c4: the loopers take and release the lock');
	proxy_cmd($p, 'refuse 60');
	my $t0 = time();
	proxy_cmd($p, 'cut-all rst');
	my $st = wait_for_state($node, sub { $_[0]->{state} ne 'connected' }, $SESSION_TIMEOUT + 2);
	isnt($st->{state}, 'connected',
		sprintf("c4: zk_status().state is '%s' %.1fs after the outage started", $st->{state}, time() - $t0));
	my $all_failed = 1;
	foreach my $s (@loopers)
	{
		my $r = $s->wait($CONNECT_TIMEOUT + 10 - (time() - $t0));
		$all_failed = 0 unless $r->{done} && $r->{sqlstate} =~ /^(08006|40001)$/;
		note sprintf('c4: %s returned %s after %.1fs', $s->name, $r->{sqlstate}, time() - $t0);
	}
	ok($all_failed,
		sprintf('c4: every looper failed with 08006 (or 40001 at COMMIT) during the outage (%.1fs)',
			time() - $t0));
	proxy_cmd($p, 'reset');
	foreach my $s (@loopers)
	{
		$s->wait(60) if $s->{pending};
		$s->quit;
	}
	$h->quit;
	$w->quit;
	settle('c4', secs => 15);
}

#
# d. the create's reply is lost: the proxy forwards the create, waits for
#    ZooKeeper's reply (the create landed) and cuts without delivering it.
#
# d1: reconnect allowed at once: granted (one node) or failed (no node)
{
	$sid = zk_status_value($node, 'session_id');
	my $cut = proxy_rule($p, 'cut-after-request create2');
	my $w = new_session($node, name => 'd1_waiter');
	$w->query_safe("SET zklock.connect_timeout = '10s'");
	$w->query_safe('BEGIN');
	my $r = $w->query("SELECT zk_lock('d1')", 30);
	ok(proxy_wait_fired($p, $cut, 5), 'd1: the proxy cut before the create reply');
	like($r->{sqlstate}, qr/^(00000|08006)$/, "d1: granted or failed cleanly ($r->{sqlstate})")
	  or diag $r->{err};
	if ($r->{sqlstate} eq '00000')
	{
		is(zk_count($zk, "$LOCKS/d1"), 1, 'd1: granted with exactly one node');
		is(try_lock_elsewhere($node, 'd1'), 'f', 'd1: nobody else gets it');
		$w->query_safe('COMMIT');
	}
	else
	{
		$w->query('ROLLBACK');
	}
	my ($ok, $secs) = zk_wait_count($zk, "$LOCKS/d1", 0, 8);
	ok($ok, sprintf('d1: no node after the release (%.1fs)', $secs));
	is(try_lock_elsewhere($node, 'd1'), 't', 'd1: the lock is free');
	is(zk_status_value($node, 'session_id'), $sid, 'd1: same session');
	$w->quit;
	settle('d1');
}

# d2: reconnects refused until the waiter gave up: the create in doubt is
# found by its guid after the reconnect and deleted
{
	$sid = zk_status_value($node, 'session_id');
	proxy_cmd($p, 'refuse 60');
	my $cut = proxy_rule($p, 'cut-after-request create2');
	my $w = new_session($node, name => 'd2_waiter');
	$w->query_safe('BEGIN');
	my $r = $w->query("SELECT zk_lock('d2')", 30);
	is($r->{sqlstate}, '08006', 'd2: the waiter fails with 08006') or diag $r->{err};
	ok(proxy_wait_fired($p, $cut, 5), 'd2: the proxy cut before the create reply');
	is(zk_count($zk, "$LOCKS/d2"), 1, 'd2: the create landed');
	$w->query('ROLLBACK');
	proxy_cmd($p, 'refuse 0');
	my $st = wait_for_state($node, 'connected', 30);
	is($st->{session_id}, $sid, 'd2: reconnected to the same session');
	my ($ok, $secs) = zk_wait_count($zk, "$LOCKS/d2", 0, 8);
	ok($ok, sprintf('d2: the node of the create in doubt is deleted (%.1fs)', $secs));
	is(try_lock_elsewhere($node, 'd2'), 't', 'd2: the lock is free');
	$w->quit;
	settle('d2');
}

#
# e. a send fails while the worker believes it is connected (reset right
#    after the watch notification), and the server is back at once: the
#    waiter must get the lock, not wait for a reconnect that never comes.
#
{
	my ($h, $w) = holder_and_waiter('e', 'zk_lock_shared');
	my $t0 = notification_then_reset('e', $h);
	my $r = $w->wait(15);
	is($r->{sqlstate}, '00000', sprintf('e: the waiter got the lock (%.1fs after the worker resumed)', time() - $t0))
	  or diag $r->{err};
	if ($r->{done})
	{
		is(zk_count($zk, "$LOCKS/e"), $r->{sqlstate} eq '00000' ? 1 : 0,
			'e: one node: the holder\'s is gone, the waiter\'s is there');
		$w->query('COMMIT');
	}
	else
	{
		proxy_cmd($p, 'reset');
		$w->wait(60);
		$w->query('ROLLBACK');
	}
	$h->quit;
	$w->quit;
	settle('e');
}

my $final = proxy_stats($p);
note 'proxy statistics: ' . JSON::PP->new->canonical->encode($final);
proxy_stop($p);
$node->stop;
done_testing();
