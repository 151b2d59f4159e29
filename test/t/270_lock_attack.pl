
# 270_lock_attack.pl - a hostile review of the fault-safety rewrite, turned into
# assertions.  Every scenario counts what matters in ZooKeeper itself
# (contender nodes with test/zkq.py, watches with the four-letter words wchp
# and wchc) and in PostgreSQL (who holds, zk_status().entries_used).  The
# node reaches ZooKeeper through test/zkproxy.py, which delays replies and
# cuts or refuses connections on command.
#
#   1. two shared waiters behind one exclusive holder, one times out: the
#      server keeps exactly one watch on the holder's node, and the other
#      waiter gets the lock when the holder commits
#   2. the same, but the second waiter's watch-setting get is still on its
#      way (its reply delayed) when the first one gives up: removing the
#      first one's watch must not take the second one's with it; the second
#      waiter must still be woken when the holder commits
#   3. upgrade while a kazoo WriteLock and a SQL writer queue behind the
#      reader: kazoo's WriteLock and plain Lock write the same nodes, and a
#      plain Lock there holds the lock, so the upgrade waits for it (here a
#      WriteLock that waits for the reader: the upgrade ends with its
#      timeout) and nobody else gets in; once the reader lets go the queue
#      moves in order
#   4. the same with a transaction-level upgrade and a session-level shared
#      hold let go in the middle: the writer waits for the COMMIT, and its
#      fencing token, granted later, is larger than the upgrade's
#   5. two readers both upgrading: 40P01 at once for one, the other gets
#      it; an upgrade waits for a kazoo ReadLock holder
#   6. a lock let go and asked for again while the connection is down (the
#      retry after the reconnect): the old node of the same backend is not
#      a hold that keeps the writer queued behind it out, so the new request
#      must queue behind that writer -- never two exclusive holders.  Once
#      with an exclusive lock taken again, once with a shared one upgraded
#   7. two requests made during an outage are granted in arrival order
#   8. session expiry with entries in every state at once (held, session
#      hold, waiting with its watch set, waiting with its get in flight,
#      create in flight, delete in flight, a request made during the
#      outage): lost holds refuse COMMIT, waits fail 08006, the request made
#      during the outage is served by the new session, nothing is left
#   9. a release/abandon storm on one name: holders committing in a loop
#      (exclusive and shared), abandoners with tiny timeouts and
#      statement_timeouts in every state, try-locks, zk_lock_holders, a
#      waiter terminated: no two critical sections ever overlap, and
#      afterwards no node, no entry, no watch, and the lock still works
#  10. a copy of the data directory that carries the session file (a storage
#      snapshot, an rsync without excludes) started with the same port: it
#      must not close the live session of the cluster it was copied from

use strict;
use warnings FATAL => 'all';

use File::Copy qw(copy);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use ZkLockTest;
use ZkProxy;

my $zk = zk_start();
my $p = proxy_start($zk);
# no periodic read of the worker's own (the root's kept totals, a getData
# a second; the lease cleanup): a scenario that delays getData replies
# must hold the reply it means to, not one of those
my $node = zk_node('attack', $p->{hosts},
	session_timeout => '6s',
	connect_timeout => '10s',
	conf => "zklock.max_kept_bytes = 0\nzklock.max_kept_nodes = 0\n"
	  . "zklock.lease_cleanup_interval = 0\n");
my $LOCKS = '/zklock/locks';

# Persistent parents, so that ZooKeeper never removes one under a scenario
foreach my $name (
	qw(two_readers watch_race up_kazoo up_tx up_dl up_kr stale_x stale_s fifo
	exp_held exp_sess exp_get exp_create exp_del exp_new storm clone))
{
	my ($rc, $out, $err) = zkq($zk, 'create', "$LOCKS/$name");
	die "cannot create $LOCKS/$name: $out $err" if $rc != 0;
}

#
# helpers
#


# Sessions watching $path, from wchp and from wchc: "wchp/wchc"
sub watchers_of
{
	my ($path) = @_;
	my ($np, $nc, $cur) = (0, 0, undef);
	foreach my $line (split /\n/, zk_fourlw($zk, 'wchp'))
	{
		if ($line =~ m{^(/\S*)}) { $cur = $1; }
		elsif ($line =~ /^\s+0x[0-9a-f]+/ && defined $cur && $cur eq $path) { $np++; }
	}
	foreach my $line (split /\n/, zk_fourlw($zk, 'wchc'))
	{
		$nc++ if $line =~ m{^\s+\Q$path\E\s*$};
	}
	return "$np/$nc";
}

# Every watch under $LOCKS (wchp and wchc), as a list of paths
sub watches_under_locks
{
	my (@w, $cur);
	foreach my $line (split /\n/, zk_fourlw($zk, 'wchp'))
	{
		if ($line =~ m{^(/\S*)}) { $cur = $1; }
		elsif ($line =~ /^\s+0x/ && defined $cur && index($cur, "$LOCKS/") == 0)
		{
			push @w, "wchp:$cur";
		}
	}
	foreach my $line (split /\n/, zk_fourlw($zk, 'wchc'))
	{
		push @w, "wchc:$1" if $line =~ m{^\s+(\Q$LOCKS\E/\S+)};
	}
	return @w;
}

# Contender nodes of lock $name (zk_lock_nodes); their number in scalar context
sub contenders
{
	my ($name) = @_;
	my @c = zk_lock_nodes($zk, "$LOCKS/$name");
	return wantarray ? @c : scalar(@c);
}

# End the transactions of sessions whose statement finished, in whatever
# order they finish (one may wait for another's lock)
sub end_all
{
	my ($end, @s) = @_;
	my %ended;
	my $deadline = time() + 90;
	while (grep { !$ended{$_->name} } @s)
	{
		foreach my $s (@s)
		{
			next if $ended{ $s->name } || $s->running;
			$s->query($end);
			$ended{ $s->name } = 1;
		}
		last if time() > $deadline;
		usleep(50_000);
	}
}

# zk_locks rows of $name held in exclusive mode
sub held_exclusive
{
	my ($name) = @_;
	return $node->safe_psql('postgres',
		"SELECT count(*) FROM zk_locks WHERE name = '$name' AND mode = 'exclusive' AND state = 'held'"
	) + 0;
}

sub stat_of
{
	my ($kind, $op) = @_;
	return proxy_stats($p)->{$kind}{$op} // 0;
}

sub wait_stat
{
	my ($kind, $op, $base, $timeout) = @_;
	return wait_until(sub { stat_of($kind, $op) > $base }, $timeout // 10, 0.02);
}

# The session's SQLSTATE once its statement is done (undef while running)
sub done_state
{
	my ($s) = @_;
	return undef if $s->running;
	return $s->wait(0)->{sqlstate};
}

# End of a scenario: rules cleared, connected, no entry, no contender node
# of the given names, no watch.  A node left dirty is restarted so that the
# next scenario starts clean.
sub settle
{
	my ($what, @names) = @_;
	proxy_cmd($p, 'reset');
	my $st = wait_for_state($node, 'connected', 30);
	is($st->{state}, 'connected', "$what: connected at the end");
	my $entries_ok =
	  wait_until(sub { zk_status_value($node, 'entries_used') eq '0' }, 15);
	ok($entries_ok, "$what: zk_status().entries_used back to 0")
	  or diag 'zk_locks: ' . $node->safe_psql('postgres', 'SELECT * FROM zk_locks');
	my $left = '';
	my $nodes_ok = wait_until(
		sub {
			$left = join(' ', map { my $n = $_; map { "$n/$_->{name}" } contenders($n) } @names);
			return $left eq '';
		},
		15);
	ok($nodes_ok, "$what: no contender node left in ZooKeeper") or diag "left: $left";
	my @w;
	my $w_ok = wait_until(sub { @w = watches_under_locks(); return !@w; }, 10);
	ok($w_ok, "$what: no watch left under $LOCKS (wchp, wchc)") or diag "watches: @w";
	if (!$entries_ok || !$nodes_ok || !$w_ok)
	{
		note "$what left something behind: restarting the node for a clean start";
		$node->restart;
		wait_for_state($node, 'connected', 60);
	}
}

# An outage the session survives: the current connection is cut and new
# ones are refused until outage_end.  Returns the session id.
sub outage_begin
{
	my ($what) = @_;
	my $sid = zk_status_value($node, 'session_id');
	proxy_cmd($p, 'refuse 60');
	proxy_cmd($p, 'cut-all');
	my $st = wait_for_state($node, sub { $_[0]->{state} ne 'connected' }, 10);
	isnt($st->{state}, 'connected', "$what: the outage is seen (state '$st->{state}')");
	return $sid;
}

sub outage_end
{
	my ($what, $sid) = @_;
	proxy_cmd($p, 'refuse 0');
	my $st = wait_for_state($node, 'connected', 20);
	is($st->{state}, 'connected', "$what: reconnected");
	is($st->{session_id}, $sid, "$what: same session (no expiry: the nodes stayed)");
}

# The node of the first contender of $name (the holder), its full path
sub first_node_path
{
	my ($name) = @_;
	my @c = contenders($name);
	return @c ? $c[0]{path} : '';
}

#
# 1. Two shared waiters behind one writer; one times out, the other must
#    still be woken.  The server keeps one watch per session and path.
#
{
	my $name = 'two_readers';
	my $H = new_session($node, name => 'r_holder');
	my $R1 = new_session($node, name => 'r_one');
	my $R2 = new_session($node, name => 'r_two');
	$H->query_safe("BEGIN; SELECT zk_lock('$name')");
	my $hpath = first_node_path($name);
	$R1->send("SELECT zk_lock_shared('$name', '3s')");
	$R2->send("SELECT zk_lock_shared('$name', '30s')");
	ok(wait_until(sub { scalar(contenders($name)) == 3 && watchers_of($hpath) eq '1/1' }, 10),
		'1: both readers queue behind the writer; one watch on its node (wchp/wchc '
		  . watchers_of($hpath) . ')');
	my $r1 = $R1->wait(15);
	is($r1->{sqlstate}, '55P03', '1: the first reader times out') or diag $r1->{err};
	ok(wait_until(sub { scalar(contenders($name)) == 2 }, 5), "1: the timed-out reader's node is gone");
	is(watchers_of($hpath), '1/1', "1: the writer's node is still watched for the second reader");
	ok($R2->running, '1: the second reader still waits');
	my $t0 = time();
	$H->query_safe('COMMIT');
	my $r2 = $R2->wait(15);
	is($r2->{sqlstate}, '00000', '1: the second reader gets the lock when the writer commits')
	  or diag $r2->{err};
	ok(time() - $t0 < 5, sprintf('1: promptly (%.2fs)', time() - $t0));
	is(watchers_of($hpath), '0/0', "1: no watch left on the old writer's node");
	$_->quit foreach ($H, $R1, $R2);
	settle('1', $name);
}

#
# 2. The second reader's get (the one that sets its watch) is on its way
#    when the first reader gives up.  The first reader's watch removal must
#    not remove the watch the second one is setting: the server must still
#    watch the writer's node, and the second reader must be woken.
#
{
	my $name = 'watch_race';
	my $H = new_session($node, name => 'w_holder');
	my $R1 = new_session($node, name => 'w_one');
	my $R2 = new_session($node, name => 'w_two');
	$H->query_safe("BEGIN; SELECT zk_lock('$name')");
	my $hpath = first_node_path($name);
	$R1->send("SELECT zk_lock_shared('$name', '60s')");
	ok(wait_until(sub { watchers_of($hpath) eq '1/1' }, 10), '2: the first reader watches the writer');

	my $base_get = stat_of('requests', 'getData');
	my $base_got = stat_of('delivered', 'getData');
	my $base_rm = stat_of('requests', 'removeWatches');
	my $rule = proxy_rule($p, 'delay-replies getData 2500');
	$R2->send("SELECT zk_lock_shared('$name', '12s')");
	ok(wait_stat('requests', 'getData', $base_get, 10), "2: the second reader's get is on its way");
	$node->safe_psql('postgres', 'SELECT pg_cancel_backend(' . $R1->pid . ')');
	my $r1 = $R1->wait(10);
	is($r1->{sqlstate}, '57014', '2: the first reader is cancelled meanwhile') or diag $r1->{err};
	ok(wait_stat('delivered', 'getData', $base_got, 10), "2: the second reader's get answered");
	usleep(700_000);
	proxy_cmd($p, "clear $rule");
	note 'removeWatches requests sent meanwhile: ' . (stat_of('requests', 'removeWatches') - $base_rm);
	ok($R2->running, '2: the second reader waits');
	is(watchers_of($hpath), '1/1',
		"2: the server still watches the writer's node for the second reader (wchp/wchc)");
	my $t0 = time();
	$H->query_safe('COMMIT');
	my $r2 = $R2->wait(20);
	is($r2->{sqlstate}, '00000',
		"2: the second reader is woken and gets the lock when the writer commits")
	  or diag "after " . sprintf('%.1fs', time() - $t0) . ": $r2->{err}";
	ok(time() - $t0 < 5, sprintf('2: promptly (%.2fs after the commit)', time() - $t0));
	$_->quit foreach ($H, $R1, $R2);
	settle('2', $name);
}

#
# 3. Upgrade while a kazoo WriteLock and a SQL writer queue behind the
#    reader: the first writer behind the reader is another client's, which
#    might be a kazoo plain Lock holding the lock, so the upgrade waits for
#    it (doc/locks.md); a WriteLock waits for the reader in turn, and the upgrade
#    ends with its timeout, granting nobody anything meanwhile.
#
{
	my $name = 'up_kazoo';
	my $path = "$LOCKS/$name";
	my $A = new_session($node, name => 'u_reader');
	my $B = new_session($node, name => 'u_writer');
	my $K = kazoo_client($zk);
	$A->query_safe("SELECT zk_session_lock_shared('$name')");
	$K->send("wlock $path 60");
	ok(wait_until(sub { scalar(contenders($name)) == 2 }, 10), '3: the kazoo writer queues');
	$B->send("BEGIN; SELECT zk_lock('$name', '60s')");
	ok(wait_until(sub { scalar(contenders($name)) == 3 }, 10), '3: the SQL writer queues');
	my $r = $A->query("SELECT zk_session_lock('$name', '2s')", 20);
	is($r->{sqlstate}, '55P03', '3: the upgrade waits for the kazoo writer and times out') or diag $r->{err};
	ok($r->{elapsed} < 10, sprintf('3: after its timeout (%.2fs)', $r->{elapsed}));
	ok(!defined $K->read_line(0.5), '3: the kazoo writer still waits');
	ok($B->running, '3: the SQL writer still waits');
	is(held_exclusive($name), 0, '3: no exclusive holder');
	is(zk_lock_modes($zk, $path), 'shared,exclusive,exclusive',
		"3: the upgrade's node is gone, the reader's shared node stays");

	is($A->query_safe("SELECT zk_unlock_shared('$name')"), 't', '3: the reader lets go');
	is($K->read_line(10), 'locked', '3: the kazoo writer (queued first) gets the lock');
	ok($B->running, '3: the SQL writer waits for the kazoo writer');
	is($K->cmd("wrelease $path", 10), 'released', '3: kazoo lets go');
	$r = $B->wait(10);
	is($r->{sqlstate}, '00000', '3: then the SQL writer gets it') or diag $r->{err};
	$B->query_safe('COMMIT');
	$K->quit;
	$_->quit foreach ($A, $B);
	settle('3', $name);
}

#
# 4. Transaction-level upgrade; the session-level shared hold is let go in
#    the middle: the writer queued between waits for the COMMIT.
#
{
	my $name = 'up_tx';
	my $A = new_session($node, name => 't_reader');
	my $B = new_session($node, name => 't_writer');
	$A->query_safe("SELECT zk_session_lock_shared('$name')");
	$B->send("BEGIN; SELECT zk_lock('$name', '60s')");
	ok(wait_until(sub { scalar(contenders($name)) == 2 }, 10), '4: the writer queues behind the reader');
	my $r = $A->query("BEGIN; SELECT zk_lock('$name', '5s')", 20);
	is($r->{sqlstate}, '00000', '4: the upgrade is granted') or diag $r->{err};
	my $token_a = $r->{out};
	is($A->query_safe("SELECT zk_unlock_shared('$name')"), 't', '4: the session-level shared hold is let go');
	usleep(1_000_000);
	ok($B->running, '4: the writer still waits');
	is(held_exclusive($name), 1, '4: one exclusive holder');
	$A->query_safe('COMMIT');
	$r = $B->wait(10);
	is($r->{sqlstate}, '00000', '4: the writer gets the lock after the COMMIT') or diag $r->{err};
	# doc/locks.md: "successive grants of one name, by anyone, anywhere, get
	# strictly increasing tokens" -- a store fencing with them would refuse
	# the writer for good if its token were below the upgrade's
	cmp_ok($r->{out}, '>', $token_a,
		"4: the writer, granted after the upgrade, gets a larger fencing token ($r->{out} vs $token_a)");
	$B->query_safe('COMMIT');
	$_->quit foreach ($A, $B);
	settle('4', $name);
}

#
# 5. Two readers upgrading: 40P01 at once; an upgrade waits for a kazoo
#    reader.
#
{
	my $name = 'up_dl';
	my $A = new_session($node, name => 'd_one');
	my $C = new_session($node, name => 'd_two');
	$A->query_safe("BEGIN; SELECT zk_lock_shared('$name')");
	$C->query_safe("BEGIN; SELECT zk_lock_shared('$name')");
	$A->send("SELECT zk_lock('$name', '30s')");
	ok(wait_until(sub { scalar(contenders($name)) == 3 }, 10), '5: the first upgrade queues');
	my $r = $C->query("SELECT zk_lock('$name', '30s')", 40);
	is($r->{sqlstate}, '40P01', '5: the second upgrade fails with 40P01') or diag $r->{err};
	ok($r->{elapsed} < 5, sprintf('5: at once (%.2fs)', $r->{elapsed}));
	$C->query('ROLLBACK');
	$r = $A->wait(10);
	is($r->{sqlstate}, '00000', '5: the first upgrade is granted once the other reader rolled back')
	  or diag $r->{err};
	$A->query_safe('COMMIT');

	my $kr = 'up_kr';
	my $K = kazoo_client($zk);
	$A->query_safe("BEGIN; SELECT zk_lock_shared('$kr')");
	is($K->cmd("rlock $LOCKS/$kr 10", 20), 'locked', '5: a kazoo reader shares the lock');
	$A->send("SELECT zk_lock('$kr', '30s')");
	usleep(1_500_000);
	ok($A->running, '5: the upgrade waits for the kazoo reader');
	is($K->cmd("rrelease $LOCKS/$kr", 10), 'released', '5: the kazoo reader lets go');
	$r = $A->wait(10);
	is($r->{sqlstate}, '00000', '5: then the upgrade is granted') or diag $r->{err};
	$A->query_safe('COMMIT');
	$K->quit;
	$_->quit foreach ($A, $C);
	settle('5', $name, $kr);
}

#
# 6. A backend lets go of its lock and asks for it again while the
#    connection is down; a writer of another session waits behind the old
#    node.  After the reconnect the old node goes: the writer is next, the
#    new request must wait behind it.  Never two exclusive holders.
#
sub stale_scenario
{
	my ($tag, $name, $take_first, $let_go, $take_again) = @_;
	my $A = new_session($node, name => "${tag}_a");
	my $B = new_session($node, name => "${tag}_b");
	$A->query_safe($take_first);
	my $apath = first_node_path($name);
	$B->send("BEGIN; SELECT zk_lock('$name', '40s')");
	ok(wait_until(sub { watchers_of($apath) eq '1/1' }, 10),
		"$tag: the writer waits, watching the first node");
	my $sid = outage_begin($tag);
	$A->query_safe($let_go);
	$A->send($take_again);
	usleep(800_000);    # the worker has queued the delete and the create
	outage_end($tag, $sid);
	wait_until(sub { !$A->running || !$B->running }, 10);
	usleep(1_500_000);
	my $a = done_state($A) // 'waiting';
	my $b = done_state($B) // 'waiting';
	my $held = held_exclusive($name);
	note "$tag: the new request: $a, the writer: $b, exclusive holders: $held";
	ok(!($a eq '00000' && $b eq '00000'), "$tag: never two exclusive holders (new request $a, writer $b)");
	cmp_ok($held, '<=', 1, "$tag: zk_locks shows at most one exclusive holder");
	is("$b/$a", '00000/waiting', "$tag: the writer gets the lock, the new request queues behind it");
	# clean up whatever happened
	end_all('ROLLBACK', $B, $A);
	$A->query('SELECT zk_unlock_all()');
	$_->quit foreach ($A, $B);
	settle($tag, $name);
}

stale_scenario('6a', 'stale_x',
	"BEGIN; SELECT zk_lock('stale_x')",
	'ROLLBACK',
	"BEGIN; SELECT zk_lock('stale_x', '40s')");
stale_scenario('6b', 'stale_s',
	"SELECT zk_session_lock_shared('stale_s')",
	"SELECT zk_unlock_shared('stale_s')",
	"SELECT zk_session_lock('stale_s', '40s')");

#
# 7. Requests made during an outage are served in arrival order.
#
{
	my $name = 'fifo';
	my $A = new_session($node, name => 'f_first');
	my $B = new_session($node, name => 'f_second');
	my $sid = outage_begin('7');
	$A->send("BEGIN; SELECT zk_lock('$name', '40s')");
	ok(wait_until(sub { $node->safe_psql('postgres', "SELECT count(*) FROM zk_locks WHERE pid = " . $A->pid) eq '1' }, 5),
		'7: the first request is in');
	usleep(400_000);
	$B->send("BEGIN; SELECT zk_lock('$name', '40s')");
	ok(wait_until(sub { $node->safe_psql('postgres', "SELECT count(*) FROM zk_locks WHERE pid = " . $B->pid) eq '1' }, 5),
		'7: the second request is in');
	usleep(400_000);
	outage_end('7', $sid);
	wait_until(sub { !$A->running || !$B->running }, 10);
	usleep(500_000);
	my $a = done_state($A) // 'waiting';
	my $b = done_state($B) // 'waiting';
	is("$a/$b", '00000/waiting', '7: the first request is granted, the second waits behind it');
	end_all('COMMIT', $A, $B);
	$_->quit foreach ($A, $B);
	settle('7', $name);
}

#
# 8. Session expiry with entries in every state at once.
#
{
	my $sid = zk_status_value($node, 'session_id');
	my %s = map { $_ => new_session($node, name => "x_$_") } qw(H S W H2 G C D P);
	$s{$_}->query_safe("SET zklock.connect_timeout = '3s'") foreach qw(W G C);
	$s{P}->query_safe("SET zklock.connect_timeout = '40s'");
	$s{H}->query_safe("BEGIN; SELECT zk_lock('exp_held')");
	$s{S}->query_safe("SELECT zk_session_lock('exp_sess')");
	$s{H2}->query_safe("BEGIN; SELECT zk_lock('exp_get')");
	$s{D}->query_safe("BEGIN; SELECT zk_lock('exp_del')");
	my $hpath = first_node_path('exp_held');
	$s{W}->send("BEGIN; SELECT zk_lock('exp_held', '60s')");
	ok(wait_until(sub { watchers_of($hpath) eq '1/1' }, 10), '8: a waiter with its watch set');

	my $base_get = stat_of('requests', 'getData');
	my $rule = proxy_rule($p, 'delay-replies getData 60000');
	$s{G}->send("BEGIN; SELECT zk_lock('exp_get', '60s')");
	ok(wait_stat('requests', 'getData', $base_get, 10), '8: a waiter with its get in flight');
	# the create goes alone (create2), or in a multi with other writes of
	# the same turn (group commit, src/core/batch.c); either way its answer is
	# held behind the delayed getData
	my $base_create = stat_of('requests', 'create2');
	my $base_multi = stat_of('requests', 'multi');
	$s{C}->send("BEGIN; SELECT zk_lock('exp_create', '60s')");
	ok( wait_until(
			sub {
				stat_of('requests', 'create2') > $base_create
				  || stat_of('requests', 'multi') > $base_multi;
			},
			10, 0.02),
		'8: a create in flight');
	my $base_delete = stat_of('requests', 'delete');
	$s{D}->query_safe('COMMIT');
	ok(wait_stat('requests', 'delete', $base_delete, 10), '8: a delete in flight');

	proxy_cmd($p, 'refuse 60');
	proxy_cmd($p, 'cut-all');
	proxy_cmd($p, "clear $rule");
	$s{P}->send("SELECT zk_session_lock('exp_new', '40s')");
	foreach my $k (qw(W G C))
	{
		my $r = $s{$k}->wait(15);
		is($r->{sqlstate}, '08006', "8: the wait of $k fails with 08006 during the outage")
		  or diag $r->{err};
		$s{$k}->query('ROLLBACK');
	}
	my ($gone) = wait_until(
		sub { !contenders('exp_held') && !contenders('exp_sess') && !contenders('exp_get') },
		20);
	ok($gone, '8: the session expired on the server (its nodes are gone)');
	proxy_cmd($p, 'refuse 0');
	my $st = wait_for_state($node, sub { $_[0]->{state} eq 'connected' && $_[0]->{session_id} ne $sid }, 30);
	ok($st->{state} eq 'connected' && $st->{session_id} ne $sid, '8: a new session');
	my $r = $s{P}->wait(40);
	is($r->{sqlstate}, '00000', '8: the request made during the outage is served by the new session')
	  or diag $r->{err};
	$r = $s{H}->query('COMMIT');
	is($r->{sqlstate}, '40001', '8: the holder whose lock was lost cannot commit') or diag $r->{err};
	$r = $s{S}->query("SELECT zk_lock_token('exp_sess')");
	is($r->{sqlstate}, '40001', '8: the lost session-level hold is reported') or diag $r->{err};
	$s{H2}->query('ROLLBACK');
	is($s{P}->query_safe("SELECT zk_unlock('exp_new')"), 't', '8: the new lock is let go');
	is(try_lock_elsewhere($node, 'exp_held'), 't', '8: the lost lock is free again');
	$_->quit foreach values %s;
	settle('8', qw(exp_held exp_sess exp_get exp_create exp_del exp_new));
}

#
# 9. The storm.
#
{
	$node->safe_psql('postgres', q{
		CREATE UNLOGGED TABLE storm_cs(pid int, mode text, t0 timestamptz, t1 timestamptz);
		CREATE FUNCTION storm_cs(shared bool, hold float8, t interval) RETURNS text
		LANGUAGE plpgsql AS $$
		DECLARE a timestamptz; b timestamptz;
		BEGIN
			IF shared THEN PERFORM zk_lock_shared('storm', t);
			ELSE PERFORM zk_lock('storm', t); END IF;
			a := clock_timestamp();
			PERFORM pg_sleep(hold);
			b := clock_timestamp();
			INSERT INTO storm_cs VALUES (pg_backend_pid(), CASE WHEN shared THEN 's' ELSE 'x' END, a, b);
			RETURN 'ok';
		END $$;
	});
	my $st0 = zk_status($node);
	my @sessions;
	my %script = (
		hold_x1 => "SELECT storm_cs(false, 0.002, '15s');\n" x 40,
		hold_x2 => "SELECT storm_cs(false, 0.002, '15s');\n" x 40,
		hold_s => "SELECT storm_cs(true, 0.004, '15s');\n" x 40,
	);
	my $i = 0;
	foreach my $ms (2, 5, 15)
	{
		$script{"abandon_$ms"} = "SET statement_timeout = '${ms}ms';\n"
		  . ("SELECT storm_cs(false, 0.001, '1ms');\n"
			  . "SELECT zk_lock('storm', '2ms');\n"
			  . "SELECT zk_lock_shared('storm');\n"
			  . "SELECT zk_try_lock('storm');\n"
			  . "SELECT storm_cs(true, 0.001, NULL);\n"
			  . "SELECT count(*) FROM zk_lock_holders('storm');\n") x 25;
	}
	my %s;
	foreach my $k (sort keys %script)
	{
		$s{$k} = new_session($node, name => "storm_$k");
	}
	my $victim = new_session($node, name => 'storm_victim');
	$victim->send("SELECT zk_lock('storm');\n" x 200);
	$s{$_}->send($script{$_}) foreach sort keys %script;
	usleep(2_000_000);
	$node->safe_psql('postgres', 'SELECT pg_terminate_backend(' . $victim->pid . ')');
	my $t0 = time();
	my $dumped = 0;
	my $all_done = wait_until(
		sub {
			if (!$dumped && time() - $t0 > 8)
			{
				# a stall: show who waits for whom before the timeouts clear it
				$dumped = 1;
				diag "9: storm still running after 8 s\nzk_locks:\n"
				  . $node->safe_psql('postgres', 'SELECT pid, mode, state, node FROM zk_locks')
				  . "\ncontenders: " . join(' ', map { "$_->{mode}:$_->{name}" } contenders('storm'))
				  . "\nwchp:\n" . zk_fourlw($zk, 'wchp');
			}
			return !grep { $_->running } values %s;
		},
		100, 0.5);
	ok($all_done, sprintf('9: the storm ends (%.1fs)', time() - $t0));
	foreach my $k (qw(hold_x1 hold_x2 hold_s))
	{
		my $r = $s{$k}->wait(0);
		my $n = () = ($r->{out} // '') =~ /^ok$/mg;
		is($n, 40, "9: every critical section of $k ran (none of its 15 s waits ran out)")
		  or diag $r->{err};
	}
	my $overlaps = $node->safe_psql('postgres', q{
		SELECT count(*) FROM storm_cs a JOIN storm_cs b
		  ON a.ctid < b.ctid AND (a.mode = 'x' OR b.mode = 'x')
		 AND a.t0 < b.t1 AND b.t0 < a.t1});
	is($overlaps, '0', '9: no two critical sections overlap')
	  or diag $node->safe_psql('postgres', 'SELECT * FROM storm_cs ORDER BY t0');
	my $sections = $node->safe_psql('postgres', 'SELECT count(*) FROM storm_cs');
	cmp_ok($sections, '>=', 100, "9: the storm made progress ($sections critical sections)");
	my $st1 = zk_status($node);
	cmp_ok($st1->{abandoned} - $st0->{abandoned}, '>', 20,
		'9: many requests were abandoned (' . ($st1->{abandoned} - $st0->{abandoned}) . ')');
	ok(wait_until(sub { zk_status_value($node, 'entries_used') eq '0' }, 15),
		'9: entries_used back to 0 with the storm sessions still connected')
	  or diag $node->safe_psql('postgres', 'SELECT * FROM zk_locks');
	ok(wait_until(sub { !contenders('storm') }, 15), '9: no contender node left')
	  or diag zk_tree($zk, "$LOCKS/storm");
	my @w;
	ok(wait_until(sub { @w = watches_under_locks(); !@w }, 10), '9: no watch left') or diag "@w";
	is($node->safe_psql('postgres', "SELECT zk_lock('storm', '5s') > 0"), 't', '9: the lock still works');
	$victim->quit;
	$_->quit foreach values %s;
	settle('9', 'storm');
}

#
# 10. A copy of the data directory that includes the session file, started
#     with the same port (another host in real life): it must not touch the
#     session of the running cluster it was copied from.  The original (a
#     cluster of its own: a base backup needs streaming) reaches ZooKeeper
#     through the proxy, which refuses its reconnects for a moment, so that
#     it cannot win the session back by reconnecting first; the copy talks
#     to ZooKeeper directly.
#
{
	my $name = 'clone';
	my $src = zk_streaming_node('clone_src', $p->{hosts}, session_timeout => '10s');
	my $sid = zk_status_value($src, 'session_id');
	my $H = new_session($src, name => 'c_holder');
	$H->query_safe("SELECT zk_session_lock('$name')");
	my $data = $src->data_dir;
	ok(-f "$data/pgsql_tmp_zklock.session", '10: the running cluster keeps its session file');
	$src->backup('bk_clone');
	my $bk = $src->backup_dir . '/bk_clone';
	# what a file-level copy (storage snapshot, rsync) would also carry
	copy("$data/pgsql_tmp_zklock.session", "$bk/pgsql_tmp_zklock.session")
	  or die "cannot copy the session file: $!";
	my $clone = PostgreSQL::Test::Cluster->new('clone');
	$clone->init_from_backup($src, 'bk_clone');
	my $sockdir = PostgreSQL::Test::Utils::tempdir_short();
	$clone->append_conf('postgresql.conf',
		"port = " . $src->port . "\nunix_socket_directories = '$sockdir'\nlisten_addresses = ''\n"
		  . "zklock.hosts = '$zk->{hosts}'\n");
	proxy_cmd($p, 'refuse 20');
	$clone->start;
	my $line;
	wait_until(
		sub {
			my $log = PostgreSQL::Test::Utils::slurp_file($clone->logfile);
			($line) = $log =~ /^(.*zookeeper session \S+ established.*)$/m;
			return defined $line;
		},
		15);
	usleep(1_000_000);
	my $log = PostgreSQL::Test::Utils::slurp_file($clone->logfile);
	my ($old) = $log =~ /^(.*left by a previous worker.*)$/m;
	note 'clone: ' . ($old // 'no word about an old session') . ' / ' . ($line // 'no session');
	is(scalar(contenders($name)), 1, "10: the original cluster's lock node is still in ZooKeeper");
	proxy_cmd($p, 'refuse 0');
	my $st = wait_for_state($src, 'connected', 15);
	is($st->{session_id}, $sid, '10: the original cluster keeps its session');
	my $r = $H->query("SELECT zk_lock_token('$name') IS NOT NULL");
	is($r->{sqlstate}, '00000', '10: its holder has not lost the lock') or diag $r->{err};
	$clone->stop('immediate');
	$H->query('SELECT zk_unlock_all()');
	$H->quit;
	ok(wait_until(sub { !contenders($name) }, 15), '10: nothing left');
	$src->stop;
}

done_testing();
